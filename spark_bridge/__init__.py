"""Spark bridge for dpa: run dpa aggregations on Spark DataFrames through Spark on Ray.

Typical use::

    from spark_bridge import spark_session, run

    with spark_session() as spark:
        df = spark.read.parquet("events.parquet")
        out = run(df, key="user_id", reducer=my_reducer)
        out.show()
"""

from __future__ import annotations

from .adapter import register as _register_adapter
from .bridge import run, run_with_result
from .group_apply import apply_in_pandas, apply_in_pandas_with_result
from .session import (
    JavaNotFoundError,
    SparkConfig,
    check_java,
    get_or_create_spark,
    spark_session,
    stop_spark,
)

__all__ = [
    "apply_in_pandas",
    "apply_in_pandas_with_result",
    "JavaNotFoundError",
    "SparkConfig",
    "check_java",
    "get_or_create_spark",
    "run",
    "run_with_result",
    "spark_session",
    "stop_spark",
]

_register_adapter()  # dpa.run(spark_df) works once spark_bridge is imported (or via the entry point)
