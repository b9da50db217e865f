"""Checks shared by the staged-path tests on PySpark 4 (here) and on PySpark 3.5 (``tests/spark``).

Every check compares the bridge's DataFrame with Spark's own ``groupBy().agg`` on the same
input, and reads which path ran from ``result.stats.extra["spark_path"]``.
"""

from __future__ import annotations

import math

import dpa


def skewed_frame(spark, rows: int = 3000):
    """``k`` (key 0 holds half the rows), ``s`` (a string key), ``x`` (long), ``y`` (double)."""
    from pyspark.sql import functions as F

    return spark.range(0, rows).select(
        F.when(F.col("id") % 2 == 0, F.lit(0)).otherwise(F.col("id") % 37).cast("int").alias("k"),
        F.concat(F.lit("s"), (F.col("id") % 5).cast("string")).alias("s"),
        (F.col("id") % 101).cast("long").alias("x"),
        (F.col("id") / 7.0).alias("y"),
    )


def reducer_cases():
    """``(dpa reducer, Spark aggregate)`` pairs; the Spark one named as dpa names its output."""
    from pyspark.sql import functions as F

    return [
        (dpa.Count(), F.count("*").alias("count")),
        (dpa.Sum("x"), F.sum("x").alias("sum")),
        (dpa.Min("y"), F.min("y").alias("min")),
        (dpa.Max("x"), F.max("x").alias("max")),
        (dpa.Mean("y"), F.avg("y").alias("mean")),
        (dpa.Collect("x"), F.sort_array(F.collect_list("x")).alias("collect")),
        (dpa.TopK("x", k=3), F.slice(F.sort_array(F.collect_list("x"), False), 1, 3).alias("top_k")),
        (dpa.MaxBy("x", by="y"), F.max_by("x", "y").alias("max_by")),  # (y differs on every row)
    ]


def _norm(row) -> tuple:
    out = []
    for name, value in row.asDict().items():
        if isinstance(value, float):
            value = round(value, 9) if math.isfinite(value) else repr(value)
        elif isinstance(value, list):
            value = tuple(sorted(value)) if name == "collect" else tuple(value)
        out.append((name, value))
    return tuple(out)


def assert_same_rows(got, want) -> None:
    """``got`` and ``want`` (DataFrames) hold the same rows, in any order, and columns."""
    assert got.columns == want.columns, (got.columns, want.columns)
    g = sorted(map(_norm, got.collect()), key=repr)
    w = sorted(map(_norm, want.collect()), key=repr)
    assert g == w


def check_equals_spark(spark, reducer, agg, key="k", path=None, **kwargs):
    """The bridge's answer equals Spark's; returns the dpa result."""
    from spark_bridge import run_with_result

    df = skewed_frame(spark)
    keys = [key] if isinstance(key, str) else list(key)
    out, result = run_with_result(df, key, reducer, path=path, **kwargs)
    assert_same_rows(out, df.groupBy(*keys).agg(agg))
    return result


APPLY_SCHEMA = "k int, n long, total long, top double"


def per_group_fn():
    """A per-group function (Spark's applyInPandas style): one summary row per key. Made in
    a function so that Spark's and Ray's workers get it by value (they cannot import tests)."""

    def per_group(pdf):
        import pandas as pd

        return pd.DataFrame({"k": [int(pdf.k.iloc[0])], "n": [len(pdf)], "total": [int(pdf.x.sum())],
                             "top": [float(pdf.y.max())]})

    return per_group


def check_apply_in_pandas_equals_spark(spark, path=None):
    """``spark_bridge.apply_in_pandas`` equals ``groupBy().applyInPandas`` on the same frame
    and function; returns the dpa result."""
    from spark_bridge import apply_in_pandas_with_result

    df = skewed_frame(spark)
    fn = per_group_fn()
    out, result = apply_in_pandas_with_result(df, "k", fn, APPLY_SCHEMA, path=path)
    want = df.groupBy("k").applyInPandas(fn, APPLY_SCHEMA)
    assert out.schema == want.schema, (out.schema, want.schema)
    assert_same_rows(out, want)
    assert result.stats.group_apply["groups"] == want.count()
    return result
