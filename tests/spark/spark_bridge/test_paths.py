"""On PySpark 3.5 with RayDP: the bridge picks the RayDP path and says so; the staged path
(forced) equals Spark's groupBy too."""

from __future__ import annotations

import os
import sys

import pytest

import dpa
from spark_bridge.paths import choose_path, is_raydp_session

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from spark_staged.cases import check_equals_spark, reducer_cases  # noqa: E402


def test_the_raydp_session_takes_the_raydp_path(spark):
    from pyspark.sql import functions as F

    df = spark.range(10)
    assert is_raydp_session(df)
    assert choose_path(df) == "raydp"
    result = check_equals_spark(spark, dpa.Sum("x"), F.sum("x").alias("sum"))
    assert result.stats.extra["spark_path"] == "raydp"


@pytest.mark.parametrize("index", range(8), ids=lambda i: ["count", "sum", "min", "max", "mean", "collect",
                                                          "top_k", "max_by"][i])
def test_forced_staged_path_equals_spark(spark, index):
    reducer, agg = reducer_cases()[index]
    result = check_equals_spark(spark, reducer, agg, path="staged")
    assert result.stats.extra["spark_path"] == "staged"


def test_bad_path_is_refused(spark):
    with pytest.raises(dpa.ConfigError, match="path must be"):
        choose_path(spark.range(3), "arrow")
