"""``apply_in_pandas``: Spark's ``df.groupBy(key).applyInPandas(fn, schema)``, run by dpa.

Spark runs each group whole in one hash partition, so one large group is a straggler (and
adaptive execution may coalesce the whole job into one task). dpa collects each key's rows
on Ray and schedules the groups over its reducers by cost, largest first
(:class:`dpa.GroupApply`), and hands the rows ``fn`` returned back as a Spark DataFrame.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from dpa.errors import ConfigError

logger = logging.getLogger(__name__)

__all__ = ["apply_in_pandas", "apply_in_pandas_with_result"]


def spark_schema(df: Any, schema: Any) -> Any:
    """``schema`` (a ``StructType`` or a DDL string such as ``"key long, n long"``) as a
    ``StructType``, parsed by ``df``'s own session (classic or Spark Connect)."""
    from pyspark.sql.types import StructType

    if isinstance(schema, StructType):
        return schema
    if not isinstance(schema, str) or not schema.strip():
        raise ConfigError(f"schema must be a pyspark StructType or a DDL string like 'key long, n long', got {schema!r}")
    try:
        return df.sparkSession.createDataFrame([], schema).schema
    except Exception as exc:
        raise ConfigError(f"cannot parse the schema {schema!r}: {exc}") from exc


def apply_in_pandas_with_result(df: Any, key: str | Sequence[str], fn: Callable[..., Any], schema: Any,
                                config: Any = None, path: str | None = None,
                                staging_dir: str | None = None) -> tuple[Any, Any]:
    """:func:`apply_in_pandas`, also returning the :class:`dpa.Result` (with its stats: the
    apply phase's schedule is in ``result.stats.group_apply``)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from dpa.aggregates.group_apply import GroupApply

    from .bridge import run_with_result

    struct = spark_schema(df, schema)
    reducer = GroupApply(fn, schema=to_arrow_schema(struct), batch_format="pandas")
    return run_with_result(df, key, reducer, config=config, path=path, staging_dir=staging_dir)


def apply_in_pandas(df: Any, key: str | Sequence[str], fn: Callable[..., Any], schema: Any,
                    config: Any = None, path: str | None = None, staging_dir: str | None = None) -> Any:
    """Runs ``fn`` on every group of ``df`` by ``key``, like
    ``df.groupBy(key).applyInPandas(fn, schema)``, with the groups scheduled by dpa.

    Args:
        df: The input DataFrame (any session: RayDP's, classic, Spark Connect; see
            :func:`spark_bridge.run_with_result` for the paths).
        key: Grouping column name or list of names.
        fn: ``fn(pdf)`` or ``fn(key, pdf)`` as for Spark: ``pdf`` is a ``pandas.DataFrame``
            with every column of ``df`` for one key, ``key`` a tuple of its values; returns
            a ``pandas.DataFrame`` with the columns of ``schema``.
        schema: The output's ``StructType`` or DDL string (``"key long, n long"``).
        config: A ``dpa.JobConfig`` (default ``JobConfig()``).
        path: ``"raydp"``, ``"staged"`` or None (chosen from the session).
        staging_dir: Parent of the staged path's directory.

    Returns:
        A Spark DataFrame of ``schema`` holding the rows ``fn`` returned.

    Raises:
        dpa.errors.SchemaError: A key column is missing; a frame ``fn`` returned does not
            fit ``schema`` (the message names the key and both schemas).
        dpa.errors.ConfigError: ``schema`` cannot be parsed, ``fn`` is not callable.
        dpa.errors.JobFailedError: ``fn`` raised (the message names the key).
    """
    return apply_in_pandas_with_result(df, key, fn, schema, config, path, staging_dir)[0]
