"""The Spark bridge without RayDP (PySpark 4.x, classic and Spark Connect) equals Spark's groupBy."""

from __future__ import annotations

import os

import pytest

import dpa
from spark_bridge import run_with_result
from spark_bridge.paths import choose_path, is_connect, is_raydp_session

from .cases import assert_same_rows, check_equals_spark, reducer_cases, skewed_frame
from .conftest import CONNECT


def test_a_session_without_raydp_takes_the_staged_path(spark):
    df = skewed_frame(spark)
    assert is_connect(df) == CONNECT
    assert not is_raydp_session(df)
    assert choose_path(df) == "staged"
    with pytest.raises(dpa.ConfigError, match="path='raydp' needs RayDP"):
        choose_path(df, "raydp")


@pytest.mark.parametrize("index", range(8), ids=lambda i: ["count", "sum", "min", "max", "mean", "collect",
                                                          "top_k", "max_by"][i])
def test_equals_spark_groupby(spark, index):
    reducer, agg = reducer_cases()[index]
    result = check_equals_spark(spark, reducer, agg)
    assert result.stats.extra["spark_path"] == "staged"
    assert result.stats.extra["spark_precombined"] is True  # Spark's tasks combined first
    assert os.path.isdir(os.path.join(result.stats.extra["spark_staging"], "out"))
    assert not os.path.exists(os.path.join(result.stats.extra["spark_staging"], "in"))


def test_every_row_shipped_and_a_costly_reducer(spark):
    from pyspark.sql import functions as F

    result = check_equals_spark(spark, dpa.Sum("x"), F.sum("x").alias("sum"), precombine=False)
    assert result.stats.extra["spark_precombined"] is False
    assert sum(result.stats.processed) == 3000  # every row reached a reducer
    result = check_equals_spark(spark, dpa.WithCost(dpa.Count(), 0.0001), F.count("*").alias("count"),
                                config=dpa.JobConfig(num_reducers=4))
    assert result.stats.extra["spark_precombined"] is False


def test_composite_and_string_keys(spark):
    from pyspark.sql import functions as F

    check_equals_spark(spark, dpa.Sum("y"), F.sum("y").alias("sum"), key=["s", "k"])
    check_equals_spark(spark, dpa.Count(), F.count("*").alias("count"), key="s")


def test_empty_input_gives_an_empty_typed_frame(spark):
    df = skewed_frame(spark).where("k < 0")
    out, result = run_with_result(df, "k", dpa.Sum("x"))
    assert out.count() == 0
    assert [f.name for f in out.schema.fields] == ["k", "sum"]
    assert result.stats.extra["spark_path"] == "staged"


def test_bad_input_fails_before_spark_writes(spark, tmp_path):
    df = skewed_frame(spark)
    with pytest.raises(dpa.SchemaError, match="nope"):
        run_with_result(df, "nope", dpa.Count(), staging_dir=str(tmp_path))
    with pytest.raises(dpa.ConfigError, match="precombine='sql'"):
        run_with_result(df, "k", dpa.Count(), precombine="sql", staging_dir=str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_dpa_run_takes_the_dataframe_too(spark):
    from pyspark.sql import functions as F

    df = skewed_frame(spark)
    res = dpa.run(df, key="k", reducer=dpa.Max("y"))
    assert isinstance(res, dpa.Result) and res.stats.extra["spark_path"] == "staged"
    assert_same_rows(res.to_spark(), df.groupBy("k").agg(F.max("y").alias("max")))


def test_apply_in_pandas_equals_spark_apply_in_pandas(spark):
    from .cases import check_apply_in_pandas_equals_spark

    result = check_apply_in_pandas_equals_spark(spark)
    assert result.stats.extra["spark_path"] == "staged"
