"""Several aggregates through the Spark bridge equal Spark's own groupBy().agg(...), grouped by
string, integer, date, timestamp, decimal and multi-column keys."""

from __future__ import annotations

import math

import pytest

import dpa
from spark_bridge import run_with_result


@pytest.fixture(scope="module")
def table(spark):
    from pyspark.sql import functions as F

    # Key 0 (of every key column) holds half the rows; NaN and null values among x.
    df = spark.range(0, 3000).select(
        F.when(F.col("id") % 2 == 0, F.lit(0)).otherwise(F.col("id") % 23).cast("int").alias("i"),
        (F.col("id") % 101).cast("long").alias("x"),
        F.when(F.col("id") % 17 == 0, F.lit(None)).when(F.col("id") % 29 == 0, F.lit(float("nan")))
        .otherwise(F.col("id") / 7.0).alias("y"),
        (F.col("id") % 3 == 0).alias("b"),
        # distinct per row (3001 is prime), null in every 13th: an ordering without ties
        F.when(F.col("id") % 13 == 0, F.lit(None)).otherwise(F.col("id") * 7919 % 3001).alias("o"),
    )
    df = df.select(
        "*",
        F.concat(F.lit("ké"), F.col("i").cast("string")).alias("s"),
        F.date_add(F.lit("2024-01-01").cast("date"), F.col("i")).alias("d"),
        (F.lit(1_700_000_000).cast("long") + F.col("i") * 3600).cast("timestamp").alias("t"),
        (F.col("i") / 4).cast("decimal(10,2)").alias("dec"),
    )
    return df.cache()


EXACT = [
    (lambda: dpa.Count(), lambda F: F.count(F.lit(1))),
    (lambda: dpa.Sum("x"), lambda F: F.sum("x")),
    (lambda: dpa.Mean("x"), lambda F: F.avg("x")),
    (lambda: dpa.Min("x"), lambda F: F.min("x")),
    (lambda: dpa.Max("x"), lambda F: F.max("x")),
    (lambda: dpa.CountDistinct("y"), lambda F: F.countDistinct("y")),
    (lambda: dpa.Var("x"), lambda F: F.var_samp("x")),
    (lambda: dpa.Std("x", sample=False), lambda F: F.stddev_pop("x")),
    (lambda: dpa.CountIf("b"), lambda F: F.count_if("b")),
    (lambda: dpa.Any("b"), lambda F: F.bool_or("b")),
    (lambda: dpa.All("b"), lambda F: F.bool_and("b")),
    (lambda: dpa.Count("y"), lambda F: F.count("y")),  # y's non-null values, its NaNs among them
    (lambda: dpa.MaxBy("y", by="o"), lambda F: F.max_by("y", "o")),  # (y's nulls and NaNs come out too)
    (lambda: dpa.MinBy("x", by="o"), lambda F: F.min_by("x", "o")),
]


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b


@pytest.mark.parametrize("key", [["s"], ["i"], ["d"], ["t"], ["dec"], ["s", "d", "dec"]])
def test_exact_aggregates_equal_spark(spark, table, key):
    from pyspark.sql import functions as F

    reducers = [make() for make, _ in EXACT]
    out, result = run_with_result(table, key, reducers, config=dpa.JobConfig(policy="shuffle", batch_size=300))
    spark_rows = table.groupBy(*key).agg(*[agg(F) for _, agg in EXACT]).collect()
    names = out.columns[len(key):]
    assert names[:3] == ["count(1)", "sum(x)", "avg(x)"]
    assert [f.dataType for f in out.schema.fields[:len(key)]] == [table.schema[k].dataType for k in key]
    ours = {tuple(r[k] for k in key): [r[n] for n in names] for r in out.collect()}
    theirs = {tuple(r[k] for k in key): list(r)[len(key):] for r in spark_rows}
    assert ours.keys() == theirs.keys()
    for k, want in theirs.items():
        assert all(_same(a, b) for a, b in zip(ours[k], want)), (k, ours[k], want)
    assert result.stats.merged_keys > 0  # shuffle split the keys: the per-member merge ran


@pytest.mark.parametrize("precombine", [None, False])
def test_approximate_aggregates_within_bound(spark, table, precombine):
    from pyspark.sql import functions as F

    reducers = [dpa.ApproxCountDistinct("x"), dpa.ApproxQuantile("x", q=[0.25, 0.9]), dpa.Median("x"),
                dpa.Count().alias("n")]
    out = run_with_result(table, ["i"], reducers, precombine=precombine)[0]
    exact = {r["i"]: (r["cd"], sorted(r["xs"])) for r in
             table.groupBy("i").agg(F.countDistinct("x").alias("cd"), F.collect_list("x").alias("xs")).collect()}
    error = reducers[1].rank_error
    for row in out.collect():
        cd, xs = exact[row["i"]]
        assert abs(row["approx_count_distinct(x)"] - cd) <= 3 * reducers[0].relative_error * cd + 1
        for q, value in zip([0.25, 0.9, 0.5], [*row["percentile_approx(x, array(0.25, 0.9))"], row["median(x)"]]):
            rank = sum(v <= value for v in xs) / len(xs)
            assert rank >= q - error and sum(v < value for v in xs) / len(xs) <= q + error, (q, value)
        assert row["n"] == len(xs)


def test_sql_precombine_of_several_aggregates(spark, table):
    from pyspark.sql import functions as F

    reducers = [dpa.Count(), dpa.Sum("x"), dpa.Min("y"), dpa.Mean("y"), dpa.Count("y")]
    out = run_with_result(table, ["s"], reducers, precombine="sql")[0]
    spark_rows = {r["s"]: list(r)[1:] for r in table.groupBy("s").agg(
        F.count(F.lit(1)), F.sum("x"), F.min(F.when(~F.isnan("y"), F.col("y"))), F.avg("y"), F.count("y")).collect()}
    for r in out.collect():
        want = spark_rows[r["s"]]
        assert r["count(1)"] == want[0] and r["sum(x)"] == want[1]
        assert _same(r["min(y)"], want[2])
        assert _same(r["avg(y)"], want[3])
        assert r["count(y)"] == want[4] < want[0]  # (y holds nulls)


@pytest.mark.parametrize("precombine", ["sql", False])
def test_count_of_a_column_alone_counts_values_and_weighs_records(spark, table, precombine):
    from pyspark.sql import functions as F

    out, result = run_with_result(table, ["i"], dpa.Count("y"), precombine=precombine)
    want = {r["i"]: r["n"] for r in table.groupBy("i").agg(F.count("y").alias("n")).collect()}
    assert {r["i"]: r["count"] for r in out.collect()} == want
    assert sum(want.values()) < 3000  # y holds nulls, yet every record is accounted for:
    assert sum(result.stats.emitted) == 3000


@pytest.mark.parametrize("precombine", [None, False])
def test_max_by_and_min_by_equal_spark(spark, table, precombine):
    """Spark's max_by/min_by: rows without an ordering value are skipped (a key whose rows
    all lack one gives null); the value at the best row may itself be null or NaN."""
    from pyspark.sql import functions as F

    reducers = [dpa.MaxBy("y", by="o"), dpa.MinBy("y", by="o")]
    out, result = run_with_result(table, ["i"], reducers, precombine=precombine)
    assert out.columns == ["i", "max_by(y, o)", "min_by(y, o)"]
    assert out.schema["max_by(y, o)"].dataType == table.schema["y"].dataType
    theirs = {r["i"]: list(r)[1:] for r in
              table.groupBy("i").agg(F.max_by("y", "o"), F.min_by("y", "o")).collect()}
    ours = {r["i"]: [r["max_by(y, o)"], r["min_by(y, o)"]] for r in out.collect()}
    assert ours.keys() == theirs.keys()
    for k, want in theirs.items():
        assert all(_same(a, b) for a, b in zip(ours[k], want)), (k, ours[k], want)
    assert sum(result.stats.emitted) == 3000
