"""Run a dpa keyed aggregation on a Spark DataFrame and get a Spark DataFrame back.

:func:`run_with_result` checks the job (:func:`spark_bridge.prepare.prepare`), picks a path
(:func:`spark_bridge.paths.choose_path`) and runs it: the RayDP path
(:mod:`spark_bridge.raydp_path`) or the staged path (:mod:`spark_bridge.staged`). Spark's
task failures become :class:`dpa.errors.JobFailedError` (:mod:`spark_bridge.failures`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dpa.errors import ConfigError

from .failures import spark_errors
from .paths import choose_path
from .prepare import prepare
from .raydp_path import run_raydp
from .staged import run_staged

if TYPE_CHECKING:  # pragma: no cover - imported for type hints only
    from pyspark.sql import DataFrame

logger = logging.getLogger(__name__)

__all__ = ["run", "run_with_result"]


def run(
    df: DataFrame,
    key: str | Sequence[str],
    reducer: Any,
    map_fn: Callable[..., Any] | None = None,
    config: Any = None,
    precombine: bool | str | None = None,
    pushdown: bool | None = None,
    path: str | None = None,
    staging_dir: str | None = None,
) -> DataFrame:
    """Aggregates ``df`` by ``key`` with dpa; returns a Spark DataFrame.

    See :func:`run_with_result` (which also returns the :class:`dpa.Result` with its
    stats) for the arguments.
    """
    return run_with_result(df, key, reducer, map_fn, config, precombine, pushdown, path, staging_dir)[0]


def run_with_result(
    df: DataFrame,
    key: str | Sequence[str],
    reducer: Any,
    map_fn: Callable[..., Any] | None = None,
    config: Any = None,
    precombine: bool | str | None = None,
    pushdown: bool | None = None,
    path: str | None = None,
    staging_dir: str | None = None,
) -> tuple[DataFrame, Any]:
    """Aggregate ``df`` by ``key`` with a dpa reducer running on Ray actors.

    Two paths (:mod:`spark_bridge.paths`; ``result.stats.extra["spark_path"]`` says which
    ran): a DataFrame of a Spark-on-Ray session (see
    :func:`spark_bridge.get_or_create_spark`, RayDP) goes the way described below; any
    other (PySpark 4, Spark Connect, a plain session) crosses through a staging directory
    of Parquet files (:mod:`spark_bridge.staged`). Columns are validated before anything runs;
    the data goes Spark -> Ray object store -> dpa actors -> Spark; only a result of at most
    :data:`spark_bridge.to_spark.DRIVER_RESULT_MAX_BYTES` passes through the driver on its way
    back (:func:`spark_bridge.to_spark.arrow_refs_to_spark`).

    Args:
        df: Input DataFrame (RayDP session).
        key: Grouping column name or list of names.
        reducer: A ``dpa.Reducer``, or a list of them (one output column each, computed
            in one pass); it types its own output column (:meth:`dpa.Reducer.output_field`).
        map_fn: Optional per-row/batch function dpa applies before reducing. When given, the
            reducer's input column may be produced by it; such outputs are typed from the
            result's Arrow schema.
        config: dpa run configuration, passed to ``dpa.run`` (default ``dpa.JobConfig()``).
        precombine: Let Spark do dpa's map-side combine so that one partial row per key
            and partition, not every row, moves from Spark to Ray; dpa's mappers then only
            hash and route (``JobConfig.input_combined``). Spark computes the partial
            states with its own SQL aggregates where the reducer has a formulation
            (:func:`spark_bridge.partials.native_partials`: every built-in, with the
            exceptions listed there), else its tasks run the reducer's Arrow combine in
            Python (:func:`spark_bridge.partials.precombined`, ``mapInArrow``). ``None`` (default) = whenever
            dpa itself would combine on the map side (built-in reducer without cost, no
            ``map_fn``, ``map_side_combine``, a policy that accepts combined rows);
            ``True`` = require it; ``"sql"`` = require the SQL aggregates; ``"arrow"`` =
            require ``mapInArrow``; ``False`` = ship every row. Queue lengths, loads and
            ``processed`` stay in records either way.
        pushdown: Let dpa's mappers read the parquet files of a DataFrame that is a plain
            parquet scan (``spark.read.parquet(...)``, possibly with a ``select`` of
            columns) themselves (:func:`spark_bridge.pushdown.parquet_scan`): the rows skip
            Spark's executors and the object store. ``None`` (default) = whenever possible
            (no ``map_fn``; local, non-partitioned files that pyarrow reads with Spark's
            types); ``False`` = always through Spark; ``True`` = require it.
        path: ``None`` (default) = ``"raydp"`` for a DataFrame of the RayDP session, else
            ``"staged"``; or force one (:func:`spark_bridge.paths.choose_path`).
        staging_dir: Parent of the staged path's Parquet directory (default
            ``$DPA_SPARK_STAGING`` or the temporary directory); shared with Spark.

    Returns:
        ``(DataFrame, dpa.Result)``: the DataFrame has the key columns (input types) followed
        by the reducer's outputs; the Result carries the job's stats.

    Raises:
        dpa.errors.SchemaError: A key or input column is missing (lists available columns).
        dpa.errors.ConfigError: Bad ``key`` or reducer description; ``pushdown=True`` for
            a DataFrame that is not a plain parquet scan.
        dpa.errors.JobFailedError: A Spark task failed while computing ``df`` (the message
            names what it raised; :mod:`spark_bridge.failures`), or the dpa job failed.
    """
    with spark_errors():
        out, result = _run_with_result(df, key, reducer, map_fn, config, precombine, pushdown, path, staging_dir)
    result.set_spark_frame(out)
    return out, result


def _run_with_result(df: DataFrame, key: str | Sequence[str], reducer: Any, map_fn: Callable[..., Any] | None,
                     config: Any, precombine: bool | str | None, pushdown: bool | None, path: str | None,
                     staging_dir: str | None) -> tuple[DataFrame, Any]:
    """:func:`run_with_result`'s work, its Spark failures not yet translated."""
    job = prepare(df, key, reducer, map_fn, config, precombine)  # before any Spark job or Ray work
    if choose_path(df, path) == "staged":
        if pushdown:
            raise ConfigError("pushdown=True needs the RayDP path; the staged path reads through Spark")
        return run_staged(df, job, staging_dir)
    return run_raydp(df, job, pushdown)
