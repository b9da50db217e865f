"""DataFrame in, DataFrame out: dpa through the Spark bridge equals Spark's own groupBy."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import time

import pytest
import ray

import dpa
from spark_bridge import run, run_with_result


def rows_equal(dpa_rows, spark_rows, value_cols):
    def norm(row):
        out = []
        for k, v in row.asDict().items():
            if isinstance(v, float):
                v = round(v, 9)
            out.append((k, v))
        return tuple(out)

    return sorted(map(norm, dpa_rows), key=repr) == sorted(map(norm, spark_rows), key=repr)


@pytest.fixture(scope="module")
def skewed(spark):
    from pyspark.sql import functions as F

    # key 0 holds half the rows: a straggler under either initial ring.
    df = spark.range(0, 4000).select(
        F.when(F.col("id") % 2 == 0, F.lit(0)).otherwise(F.col("id") % 37).cast("int").alias("k"),
        (F.col("id") % 101).cast("long").alias("x"),
        (F.col("id") / 7.0).alias("y"),
    )
    return df.cache()


@pytest.mark.parametrize("policy", ["halving", "doubling"])
def test_equals_spark_groupby_with_forced_rebalancing(spark, skewed, policy):
    from pyspark.sql import functions as F

    # The paper's rule (no lookahead): a first ring planned on the mappers' forecast may
    # leave the running job nothing to move, and this test is about forwarding.
    cfg = dpa.JobConfig(policy=policy, max_rounds=3, tau=0.2, batch_size=200, chunk_size=20,
                        policy_options={"lookahead": False})
    cost = 0.0005
    cases = [
        (dpa.WithCost(dpa.Count(), cost), F.count("*").alias("count")),
        (dpa.WithCost(dpa.Sum("x"), cost), F.sum("x").alias("sum")),
        (dpa.WithCost(dpa.Min("y"), cost), F.min("y").alias("min")),
        (dpa.WithCost(dpa.Max("x"), cost), F.max("x").alias("max")),
        (dpa.WithCost(dpa.Mean("y"), cost), F.avg("y").alias("mean")),
    ]
    rebalanced = forwarded = False
    for reducer, agg in cases:
        out, res = run_with_result(skewed, key="k", reducer=reducer, config=cfg)
        expected = skewed.groupBy("k").agg(agg)
        assert out.schema == expected.schema, (out.schema, expected.schema)
        assert rows_equal(out.collect(), expected.collect(), [agg])
        rebalanced |= bool(res.stats.rebalances)
        forwarded |= sum(res.stats.forwarded) > 0
    assert rebalanced and forwarded


def test_null_keys_are_one_group_and_key_types(spark):
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    big = "z" * 10_000
    data = [(1, 2**40, "a", "ü€", big), (None, None, None, None, None), (1, 2**40, "a", "ü€", big),
            (None, None, None, None, None), (2, -5, "b", "日本", "y")]
    schema = StructType([StructField("i", IntegerType()), StructField("l", LongType()),
                         StructField("s", StringType()), StructField("u", StringType()),
                         StructField("big", StringType())])
    df = spark.createDataFrame(data, schema)
    for col in ["i", "l", "s", "u", "big"]:
        out = run(df, key=col, reducer=dpa.Count())
        expected = df.groupBy(col).count()
        assert out.schema == expected.schema
        assert rows_equal(out.collect(), expected.collect(), ["count"])
        assert sum(r["count"] for r in out.collect() if r[col] is None) == 2


def test_multi_column_keys(spark, skewed):
    from pyspark.sql import functions as F

    df = skewed.withColumn("b", (F.col("x") % 3).cast("string"))
    out = run(df, key=["k", "b"], reducer=dpa.Sum("x"), config=dpa.JobConfig(max_rounds=1))
    expected = df.groupBy("k", "b").agg(F.sum("x").alias("sum"))
    assert out.schema == expected.schema
    assert rows_equal(out.collect(), expected.collect(), ["sum"])


def test_empty_dataframe_gives_empty_result_with_schema(spark, skewed):
    from pyspark.sql import functions as F

    empty = skewed.limit(0)
    out = run(empty, key="k", reducer=dpa.Mean("y"))
    assert out.count() == 0
    assert out.schema == empty.groupBy("k").agg(F.avg("y").alias("mean")).schema


def _dpa_actors():
    return [a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("dpa:")]


def test_missing_key_column_raises_before_any_actor_starts(spark, skewed):
    dpa.shutdown()
    with pytest.raises(ValueError, match="missing.*available columns.*k.*x.*y|k, x, y"):
        run(skewed, key="nope", reducer=dpa.Count())
    assert _dpa_actors() == []


def test_reducer_that_does_not_fit_the_column_type(spark):
    df = spark.createDataFrame([("a", "x"), ("b", "y")], ["k", "s"])
    with pytest.raises(ValueError, match="numeric|Sum"):
        run(df, key="k", reducer=dpa.Sum("s"))


@pytest.mark.parametrize("precombine", [False, True])
def test_decimal_sum_widens_like_spark(spark, precombine):
    """A sum of decimal(3, 0) values is a decimal(13, 0), as in Spark: 999 + 999 keeps its digits."""
    from decimal import Decimal

    from pyspark.sql import functions as F

    df = spark.createDataFrame([(1, Decimal(999)), (1, Decimal(999)), (2, Decimal(-5))], "k int, v decimal(3,0)")
    out = run(df, key="k", reducer=dpa.Sum("v"), precombine=precombine)
    expected = df.groupBy("k").agg(F.sum("v").alias("sum"))
    assert out.schema == expected.schema
    assert sorted(out.collect()) == sorted(expected.collect()) == [(1, Decimal(1998)), (2, Decimal(-5))]


def test_vectorised_map_fn_word_count(spark):
    import pyarrow as pa
    import pyarrow.compute as pc

    lines = spark.createDataFrame([("a b a",), ("c a",), ("",)], ["value"])

    def split(batch: pa.Table) -> pa.Table:
        words = pc.list_flatten(pc.split_pattern(batch["value"], " "))
        return pa.table({"word": pc.filter(words, pc.not_equal(words, ""))})

    out = run(lines, key="word", reducer=dpa.Count(), map_fn=dpa.BatchMap(split))
    assert {r["word"]: r["count"] for r in out.collect()} == {"a": 3, "b": 1, "c": 1}
    assert dict((f.name, f.dataType.simpleString()) for f in out.schema.fields) == {"word": "string", "count": "bigint"}


def test_dpa_run_accepts_a_spark_dataframe(spark, skewed):
    res = dpa.run(skewed, key="k", reducer=dpa.Count())
    assert isinstance(res, dpa.Result) and res.stats.extra["spark_path"] == "raydp"
    out = res.to_spark()
    assert type(out).__name__ == "DataFrame"
    expected = skewed.groupBy("k").count().collect()
    assert rows_equal(out.collect(), expected, ["count"])
    assert res.to_dict() == {r["k"]: r["count"] for r in expected}


LARGER_THAN_STORE = textwrap.dedent(
    """
    import dpa
    from dpa.runtime.ray.session import ensure_ray
    from pyspark.sql import functions as F
    from spark_bridge import SparkConfig, get_or_create_spark, stop_spark, run
    ensure_ray(num_cpus=2, object_store_memory=100 * 1024 * 1024, logging_level="ERROR")
    spark = get_or_create_spark(SparkConfig(app_name="big", num_executors=1, executor_cores=1, executor_memory="1g"))
    n = 1_500_000  # ~160 MB of rows (an 80-char string each) through a 100 MB object store
    df = spark.range(0, n).select((F.col("id") % 1000).alias("k"), F.repeat(F.lit("x"), 80).alias("pad"))
    out = run(df, key="k", reducer=dpa.Count(), config=dpa.JobConfig(batch_size=65536))
    rows = out.collect()
    assert len(rows) == 1000 and sum(r["count"] for r in rows) == n, (len(rows), sum(r["count"] for r in rows))
    stop_spark()
    print("OK", n)
    """
)


def test_dataframe_larger_than_the_object_store(tmp_path):
    script = tmp_path / "big.py"
    script.write_text(LARGER_THAN_STORE)
    started = time.time()
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "OK 1500000" in proc.stdout
    assert math.isfinite(time.time() - started)


@pytest.mark.parametrize("reducer,agg", [(dpa.Count(), "count"), (dpa.Sum("x"), "sum"), (dpa.Mean("y"), "mean")])
def test_spark_tasks_precombine_and_results_stay_exact(spark, skewed, reducer, agg):
    from pyspark.sql import functions as F

    spark_agg = {"count": F.count("*"), "sum": F.sum("x"), "mean": F.avg("y")}[agg].alias(agg)
    expected = skewed.groupBy("k").agg(spark_agg)
    cfg = dpa.JobConfig(policy="doubling", max_rounds=1)
    pre, res_pre = run_with_result(skewed, key="k", reducer=reducer, config=cfg)
    raw, res_raw = run_with_result(skewed, key="k", reducer=reducer, config=cfg, precombine=False)
    for out in (pre, raw):
        assert out.schema == expected.schema
        assert rows_equal(out.collect(), expected.collect(), [agg])
    # loads stay in records whether Spark or dpa's mappers combined
    assert sum(res_pre.stats.processed) == sum(res_raw.stats.processed) == skewed.count()


def test_precombine_refused_where_it_cannot_apply(spark, skewed):
    with pytest.raises(dpa.ConfigError, match="precombine"):
        run(skewed, key="k", reducer=dpa.WithCost(dpa.Count(), 0.001), precombine=True)
