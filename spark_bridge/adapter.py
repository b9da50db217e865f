"""Plugs Spark DataFrames into ``dpa.run`` (the ``dpa.input.sources`` entry point)."""

from __future__ import annotations

from typing import Any

from dpa.input.adapters import register_source_adapter


def is_spark_dataframe(obj: Any) -> bool:
    """Whether ``obj`` is a ``pyspark.sql.DataFrame`` (without importing pyspark)."""
    return type(obj).__module__.startswith("pyspark.sql") and type(obj).__name__ == "DataFrame"


def _run(source: Any, **kwargs: Any) -> Any:
    from spark_bridge.bridge import run

    return run(source, **kwargs)


def register() -> None:
    """Registers the Spark DataFrame adapter with dpa."""
    register_source_adapter("spark", is_spark_dataframe, _run)
