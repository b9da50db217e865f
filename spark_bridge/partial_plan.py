"""Spark's map-side partial aggregation on its own: no shuffle, no final aggregation.

``df.groupBy(keys).agg(...)`` plans as a partial aggregation in each input partition, a
shuffle by key, and a final aggregation. dpa only needs the first step (its reducers do
the rest, balanced), and grouping by ``(spark_partition_id(), keys)`` to keep Spark from
merging partitions still pays the shuffle and the final aggregation: on the 10M-row
derived benchmark about 0.23 s of the 0.8 s that Spark's part of the bridge took.

:func:`partial_aggregation` plans the grouped aggregation without adaptive execution (so
the plan is final and code-generated), checks that it has the shape ``final aggregate <-
[shuffle <-] partial aggregate`` with one buffer column per requested aggregate, and wraps the partial
aggregate's own RDD (coalesced to the executors' task slots) as a DataFrame with the
caller's column names: one row per key and input partition, computed by Spark's
code-generated hash aggregation, exactly what a dpa mapper's combine of that partition
would give.

This reaches into Spark's physical plan (``queryExecution().executedPlan()``,
``SparkPlan.execute()``, ``SparkSession.internalCreateDataFrame``): internal APIs, checked
on the pinned Spark (3.5). Anything unexpected, a different plan shape or a failing call,
returns ``None`` and the caller falls back to the ``spark_partition_id()`` grouping,
which only uses public APIs. Only aggregates whose partial buffer is one column equal to
their final value may be asked for (``count``, ``sum`` of integers or doubles, ``min`` and
``max``); :func:`partial_aggregation` checks the buffer types it gets.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - imported for type hints only
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType

logger = logging.getLogger(__name__)

__all__ = ["MAX_BLOCKS_PER_SLOT", "partial_aggregation"]

_AQE_CONF = "spark.sql.adaptive.enabled"
# Planning without adaptive execution sets the session option for the duration of one
# planning call; the lock keeps two bridge calls from restoring each other's value. A query
# another thread plans in that window plans without adaptive execution too: only its speed
# can differ, never its result.
_AQE_LOCK = threading.Lock()

_AGGREGATES = ("HashAggregateExec", "ObjectHashAggregateExec", "SortAggregateExec")
# Nodes that may sit between a final aggregate and its shuffle, or wrap a partial one.
_WRAPPERS = ("WholeStageCodegenExec", "InputAdapter", "SortExec")

#: The partial rows go to Ray in at most this many blocks per executor task slot (the
#: partial aggregate's partitions are coalesced, without a shuffle, beyond that): fewer
#: than slots would leave cores idle in the partial aggregation, and every block more costs
#: a fetch task (a Ray worker process of its own while they run at once: on the derived
#: benchmark, 2 blocks for 1 slot took 0.4 s to fetch against 0.04 s for 1) and a mapper's
#: calls. Coalescing the input instead, so that each task aggregates its whole share, broke
#: Spark's whole-stage code generation there and doubled the job's time (1.03 s against 0.45 s).
MAX_BLOCKS_PER_SLOT = 1


def _name(node: Any) -> str:
    return str(node.getClass().getSimpleName())


def _children(node: Any) -> list[Any]:
    seq = node.children()
    return [seq.apply(i) for i in range(seq.size())]


def _below_wrappers(node: Any) -> Any:
    """``node`` without the code-generation and sort nodes wrapped around it."""
    while _name(node) in _WRAPPERS:
        children = _children(node)
        if len(children) != 1:
            break
        node = children[0]
    return node


def _is_partial(node: Any) -> bool:
    """Whether ``node`` is an aggregate whose every aggregate expression is in Partial mode."""
    if _name(node) not in _AGGREGATES:
        return False
    exprs = node.aggregateExpressions()
    modes = {str(exprs.apply(i).mode()) for i in range(exprs.size())}
    return modes == {"Partial"}


def _partial_node(plan: Any) -> Any | None:
    """The partial aggregate under ``plan``'s final aggregate (and its shuffle), or None.

    The shuffle is missing where the input is already clustered by the keys (a single
    partition, or hash-partitioned by them): the final aggregate then sits right on the
    partial one, whose rows are partial states all the same.
    """
    final = _below_wrappers(plan)
    if _name(final) not in _AGGREGATES or len(_children(final)) != 1:
        return None
    below = _below_wrappers(_children(final)[0])
    partial = _children(below)[0] if _name(below) == "ShuffleExchangeExec" else _children(final)[0]
    return partial if _is_partial(_below_wrappers(partial)) else None


def _executed_plan(jdf: Any, jsession: Any) -> Any:
    """``jdf``'s physical plan, planned with adaptive execution off."""
    conf = jsession.sessionState().conf()
    with _AQE_LOCK:
        had = bool(conf.contains(_AQE_CONF))
        before = conf.getConfString(_AQE_CONF) if had else None
        conf.setConfString(_AQE_CONF, "false")
        try:
            return jdf.queryExecution().executedPlan()
        finally:
            if had:
                conf.setConfString(_AQE_CONF, before)
            else:
                conf.unsetConf(_AQE_CONF)


def partial_aggregation(
    df: DataFrame,
    key_columns: Sequence[Column],
    aggregates: Sequence[tuple[str, Column, DataType]],
    key_fields: Sequence[Any],
    max_blocks: int | None = None,
) -> DataFrame | None:
    """``df``'s partial aggregation per input partition, as a DataFrame, or None.

    Args:
        df: The input DataFrame.
        key_columns: The grouping columns (as Spark columns).
        aggregates: ``(name, aggregate, buffer type)`` for each output column after the
            keys: distinct, bare aggregate functions whose partial buffer is one column of
            ``buffer type`` holding the final value.
        key_fields: The ``StructField`` of each key column (names and types of the output).
        max_blocks: Coalesce the partial rows (without a shuffle) to at most this many
            partitions.

    Returns:
        A DataFrame with the key fields and one column per aggregate, one row per key and
        input partition; ``None`` when the plan is not as expected or a call failed (the
        reason is logged at debug level).
    """
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructField, StructType

    spark = df.sparkSession
    jsession = spark._jsparkSession
    try:
        grouped = df.groupBy(*key_columns).agg(*(column.alias(name) for name, column, _ in aggregates))
        partial = _partial_node(_executed_plan(grouped._jdf, jsession))
        if partial is None:
            logger.debug("no partial aggregate under a shuffle in the plan; using the partition-id grouping")
            return None
        output = partial.output()
        types = [output.apply(i).dataType().json() for i in range(output.size())]
        wanted = [f.dataType.json() for f in key_fields] + [t.json() for _, _, t in aggregates]
        if types != wanted:
            logger.debug("partial aggregate columns %s, expected %s; using the partition-id grouping", types, wanted)
            return None
        schema = StructType([*key_fields, *(StructField(name, t, True) for name, _, t in aggregates)])
        rdd = partial.execute()
        if max_blocks is not None and rdd.getNumPartitions() > max_blocks:
            # After the partial aggregation, not before: a coalesce under it breaks Spark's
            # whole-stage code generation, and the job took twice as long.
            rdd = rdd.coalesce(max_blocks, False, spark.sparkContext._jvm.scala.Option.empty(), None)
        jdf = jsession.internalCreateDataFrame(rdd, jsession.parseDataType(schema.json()), False)
    except Exception as exc:  # internal APIs: any failure means "use the public path"
        logger.debug("Spark's partial aggregation could not be taken on its own (%s); using the "
                     "partition-id grouping", exc)
        return None
    return DataFrame(jdf, spark)
