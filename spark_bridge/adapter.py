"""Plugs Spark DataFrames into ``dpa.run`` (the ``dpa.input.sources`` entry point)."""

from __future__ import annotations

from typing import Any

from dpa.input.adapters import register_source_adapter


def is_spark_dataframe(obj: Any) -> bool:
    """Whether ``obj`` is a ``pyspark.sql.DataFrame`` (without importing pyspark)."""
    return type(obj).__module__.startswith("pyspark.sql") and type(obj).__name__ == "DataFrame"


def _run(source: Any, **kwargs: Any) -> Any:
    """``dpa.run(spark_df, ...)``: the :class:`dpa.Result`, whose ``to_spark()`` is the
    Spark DataFrame :func:`spark_bridge.run` returns."""
    from spark_bridge.bridge import run_with_result

    return run_with_result(source, **kwargs)[1]


def register() -> None:
    """Registers the Spark DataFrame adapter with dpa."""
    register_source_adapter("spark", is_spark_dataframe, _run)
