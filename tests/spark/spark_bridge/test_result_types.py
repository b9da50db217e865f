"""The bridge's result types equal Spark's own, for every aggregate and input type; a
decimal's mean is Spark's ``avg``: ``decimal(p + 4, s + 4)``, with Spark's value."""

from __future__ import annotations

import decimal

import pytest

import dpa
from dpa.errors import SchemaError
from spark_bridge import run_with_result
from spark_bridge.schema import result_spark_schema

#: Input columns: name -> Spark SQL expression over ``id``.
COLUMNS = {
    "by": "cast(id % 100 as byte)", "sh": "cast(id * 7 as short)", "i": "cast(id * 1000003 as int)",
    "l": "id * 3000000019", "f": "cast(id / 3 as float)", "d": "id / 7", "dec": "cast(id / 4 as decimal(10, 2))",
    "dec28": "cast(id / 3 as decimal(28, 9))", "dec38": "cast(id * 1000 / 7 as decimal(38, 6))",
    "s": "concat('s', cast(id % 11 as string))", "dt": "date_add(date'2024-01-01', cast(id as int))",
    "ts": "cast(id * 3600 + 1700000000 as timestamp)", "bo": "id % 3 = 0",
}

#: dpa's aggregate and Spark's own of one column.
AGGREGATES = {
    "count": (lambda c: dpa.Count(c), lambda F, c: F.count(c)),
    "sum": (lambda c: dpa.Sum(c), lambda F, c: F.sum(c)),
    "mean": (lambda c: dpa.Mean(c), lambda F, c: F.avg(c)),
    "min": (lambda c: dpa.Min(c), lambda F, c: F.min(c)),
    "max": (lambda c: dpa.Max(c), lambda F, c: F.max(c)),
    "var_samp": (lambda c: dpa.Var(c), lambda F, c: F.var_samp(c)),
    "var_pop": (lambda c: dpa.Var(c, sample=False), lambda F, c: F.var_pop(c)),
    "stddev_samp": (lambda c: dpa.Std(c), lambda F, c: F.stddev_samp(c)),
    "count_distinct": (lambda c: dpa.CountDistinct(c), lambda F, c: F.countDistinct(c)),
    "approx_count_distinct": (lambda c: dpa.ApproxCountDistinct(c), lambda F, c: F.approx_count_distinct(c)),
    "percentile_approx": (lambda c: dpa.ApproxQuantile(c, 0.9), lambda F, c: F.percentile_approx(c, 0.9)),
    "percentile_approx_list": (lambda c: dpa.ApproxQuantile(c, [0.1, 0.9]),
                               lambda F, c: F.percentile_approx(c, [0.1, 0.9])),
    "median": (lambda c: dpa.Median(c), lambda F, c: F.median(c)),
    "collect_set": (lambda c: dpa.CollectSet(c), lambda F, c: F.collect_set(c)),
    "count_if": (lambda c: dpa.CountIf(c), lambda F, c: F.count_if(c)),
    "bool_or": (lambda c: dpa.Any(c), lambda F, c: F.bool_or(c)),
    "bool_and": (lambda c: dpa.All(c), lambda F, c: F.bool_and(c)),
    "max_by": (lambda c: dpa.MaxBy(c, by="i"), lambda F, c: F.max_by(c, "i")),
}


@pytest.fixture(scope="module")
def typed(spark):
    from pyspark.sql import functions as F

    return spark.range(0, 200).select(F.expr("id % 5").alias("k"), *[F.expr(e).alias(n) for n, e in COLUMNS.items()])


def _spark_type(df, make, column):
    """Spark's own result type, or None where Spark refuses the column."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    try:
        return df.groupBy("k").agg(make(F, column).alias("out")).schema["out"].dataType
    except AnalysisException:
        return None


@pytest.mark.parametrize("aggregate", list(AGGREGATES))
def test_result_types_equal_sparks_own(typed, aggregate):
    """Wherever both dpa and Spark take a column, the bridge types the result as Spark does
    (precision and scale of decimals, element types of arrays, and whether they hold nulls)."""
    ours_make, theirs_make = AGGREGATES[aggregate]
    checked = 0
    for column in COLUMNS:
        theirs = _spark_type(typed, theirs_make, column)
        try:
            schema = result_spark_schema(typed.schema, ["k"], ours_make(column))
        except SchemaError:
            continue  # dpa refuses the column before anything runs (e.g. a sum of strings)
        if theirs is None:
            continue
        assert schema.fields[-1].dataType == theirs, (aggregate, column, schema.fields[-1].dataType, theirs)
        checked += 1
    assert checked > 0


@pytest.mark.parametrize(("policy", "precombine"), [("shuffle", None), ("shuffle", False), ("hybrid", None)])
def test_decimal_means_are_sparks_avg(spark, policy, precombine):
    """Mean of decimal(15, 2), decimal(28, 9) and decimal(38, 6) (sums past 2**63 and a
    double's digits): Spark's types and values, however the bridge combines."""
    from pyspark.sql import functions as F

    df = spark.range(0, 3000).select(
        F.expr("cast(id % 7 as int)").alias("k"),
        F.expr("cast(999999999999.99 - id * 333333.37 as decimal(15, 2))").alias("a"),
        F.expr("cast(id * 1234567.123456789 as decimal(28, 9))").alias("b"),
        # (27 integer digits: the mean fits Spark's decimal(38, 10); the sums of 400 of them
        # fit Spark's decimal(38, 6) sum, far past 2**63 and a double's 16 digits)
        F.expr("cast(999999999999999999999999999.999999 - id * 7.000001 as decimal(38, 6))").alias("c"),
    )
    reducers = [dpa.Mean("a"), dpa.Mean("b"), dpa.Mean("c"), dpa.Sum("a")]
    # (hybrid precombines in Spark: a decimal(38, 6) mean has no SQL formulation, so Spark's
    # tasks run dpa's combine, whose decimal states are Spark's decimal(38, s))
    out, _ = run_with_result(df, "k", reducers, config=dpa.JobConfig(policy=policy, batch_size=200),
                             precombine=precombine)
    theirs = df.groupBy("k").agg(F.avg("a"), F.avg("b"), F.avg("c"), F.sum("a"))
    assert out.schema == theirs.schema
    ours = {r["k"]: tuple(r)[1:] for r in out.collect()}
    want = {r["k"]: tuple(r)[1:] for r in theirs.collect()}
    assert ours == want
    assert all(isinstance(v, decimal.Decimal) for row in ours.values() for v in row[:3])  # (no null)


def test_integer_mean_past_2_53_is_the_nearest_double(spark):
    """A long column whose sums leave 2**53 (and int64): the mean is the nearest double to
    the exact one (Spark's own avg of a long sums doubles, and may be an ulp off)."""
    from fractions import Fraction

    from pyspark.sql import functions as F

    df = spark.range(0, 400).select(F.expr("cast(id % 3 as int)").alias("k"),
                                    F.expr("9223372036854775000 - id * 1000003").alias("x"))
    out, _ = run_with_result(df, "k", dpa.Mean("x"), config=dpa.JobConfig(policy="shuffle", batch_size=50))
    values: dict[int, list[int]] = {}
    for r in df.collect():
        values.setdefault(r["k"], []).append(r["x"])
    assert {r["k"]: r["mean"] for r in out.collect()} == {
        k: float(Fraction(sum(v), len(v))) for k, v in values.items()}


def test_sql_partials_of_exact_means(spark):
    """Spark SQL computes the means' partial states (precombine="sql"): a decimal's exact
    sum, a long's sum as two halves shared with a Sum of the same column."""
    from fractions import Fraction

    from pyspark.sql import functions as F

    df = spark.range(0, 2000).select(
        F.expr("cast(id % 5 as int)").alias("k"),
        F.expr("cast(12345678901.23 - id * 7777.77 as decimal(15, 2))").alias("a"),
        F.expr("18014398509481984 + id * 1000003").alias("l"),  # 2**54 + ...: sums past 2**53, within int64
    )
    reducers = [dpa.Mean("a"), dpa.Mean("l"), dpa.Sum("l")]
    out, _ = run_with_result(df, "k", reducers, config=dpa.JobConfig(policy="hybrid", batch_size=100),
                             precombine="sql")
    theirs = df.groupBy("k").agg(F.avg("a"), F.avg("l"), F.sum("l"))
    assert out.schema == theirs.schema
    want = {r["k"]: (r["avg(a)"], r["sum(l)"]) for r in theirs.collect()}
    counts = {r["k"]: r["n"] for r in df.groupBy("k").agg(F.count("l").alias("n")).collect()}
    for r in out.collect():
        assert (r["avg(a)"], r["sum(l)"]) == want[r["k"]]
        assert r["avg(l)"] == float(Fraction(r["sum(l)"], counts[r["k"]]))  # (the nearest double)


def test_staged_path_gives_sparks_decimal_avg(spark):
    """The staged path (Parquet files in between) runs the same Spark-typed reducer."""
    from pyspark.sql import functions as F

    df = spark.range(0, 500).select(F.expr("cast(id % 4 as int)").alias("k"),
                                    F.expr("cast(id * 1.37 as decimal(12, 2))").alias("a"))
    out, result = run_with_result(df, "k", dpa.Mean("a"), path="staged")
    assert result.stats.extra["spark_path"] == "staged"
    theirs = df.groupBy("k").agg(F.avg("a").alias("mean"))
    assert out.schema == theirs.schema
    assert {r["k"]: r["mean"] for r in out.collect()} == {r["k"]: r["mean"] for r in theirs.collect()}
