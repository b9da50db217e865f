"""Spark-native precombine (spark_bridge.partials): every built-in reducer equals Spark's own
groupBy/agg (or, where Spark has no such aggregate, a plain Python computation) on
DataFrames that are not plain scans, with null, unicode and multi-column keys."""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from decimal import Decimal

import pyarrow as pa
import pytest

import dpa
from dpa.errors import ArithmeticOverflowError, JobFailedError
from spark_bridge import run, run_with_result
from spark_bridge.partials import SUM_HIGH_COL, SUM_LOW_COL, PartialFinish, native_partials

KEYS = ["s", "i"]


def _norm(value):
    if isinstance(value, float):
        return "nan" if math.isnan(value) else float(f"{value:.12g}")  # summation order may differ
    if isinstance(value, list):
        return sorted((_norm(v) for v in value), key=repr)
    return value


def _rows(rows, ordered_lists=False):
    out = []
    for row in rows:
        items = []
        for k, v in row.asDict().items():
            items.append((k, list(map(_norm, v)) if ordered_lists and isinstance(v, list) else _norm(v)))
        out.append(tuple(items))
    return sorted(out, key=repr)


@pytest.fixture(scope="module")
def derived(spark):
    """3000 rows in 3 partitions, derived columns (not a scan): unicode/null keys and typed values."""
    from pyspark.sql import functions as F

    words = F.array(*(F.lit(w) for w in ["ä", "日本語", "🙂 emoji", "", "plain"]))
    base = spark.range(0, 3000, 1, 3)
    return base.select(
        F.when(F.col("id") % 11 == 0, F.lit(None)).otherwise(F.element_at(words, (F.col("id") % 5 + 1).cast("int")))
        .alias("s"),
        F.when(F.col("id") % 13 == 0, F.lit(None)).otherwise(F.col("id") % 4).cast("int").alias("i"),
        (F.col("id") * 7919 % 1000 - 500).cast("int").alias("n_int"),
        F.when(F.col("id") % 17 == 0, F.lit(None)).otherwise(F.col("id") * 3_000_000_000_007).alias("n_long"),
        (F.col("id") / 7.0).alias("n_double"),
        (F.col("id") % 1000 / 8).cast("decimal(7,3)").alias("n_dec"),
        F.when(F.col("id") % 19 == 0, F.lit(None)).otherwise(F.concat(F.lit("v✓"), (F.col("id") % 97).cast("string")))
        .alias("text"),
        F.when(F.col("id") % 23 == 0, F.lit(None)).otherwise(F.col("id") % 3 == 0).alias("flag"),
    ).filter(F.col("n_int") != 3)


def _spark_agg(kind, column):
    from pyspark.sql import functions as F

    if kind == "count":
        return F.count("*")
    if kind == "mean":
        return F.avg(column)  # Spark's own: a double, of a decimal(p, s) a decimal(p + 4, s + 4), as the bridge's
    if kind in ("var_samp", "var_pop", "stddev_samp", "stddev_pop"):
        return getattr(F, kind)(F.col(column).cast("double"))
    return {"sum": F.sum, "min": F.min, "max": F.max, "count_if": F.count_if, "bool_or": F.bool_or,
            "bool_and": F.bool_and}[kind](column)


SPARK_COMPARED = [
    (dpa.Count(), "count", None),
    (dpa.Sum("n_int"), "sum", "n_int"),
    (dpa.Sum("n_long"), "sum", "n_long"),
    (dpa.Sum("n_double"), "sum", "n_double"),
    (dpa.Sum("n_dec"), "sum", "n_dec"),
    (dpa.Min("n_long"), "min", "n_long"),
    (dpa.Max("n_double"), "max", "n_double"),
    (dpa.Min("text"), "min", "text"),
    (dpa.Max("text"), "max", "text"),
    (dpa.Mean("n_long"), "mean", "n_long"),
    (dpa.Mean("n_dec"), "mean", "n_dec"),
    (dpa.CountIf("flag"), "count_if", "flag"),
    (dpa.Any("flag"), "bool_or", "flag"),
    (dpa.All("flag"), "bool_and", "flag"),
    (dpa.Var("n_double"), "var_samp", "n_double"),
    (dpa.Var("n_int", sample=False), "var_pop", "n_int"),
    (dpa.Std("n_long"), "stddev_samp", "n_long"),
    (dpa.Std("n_dec", sample=False), "stddev_pop", "n_dec"),
]


@pytest.mark.parametrize("reducer,kind,column", SPARK_COMPARED, ids=lambda x: repr(x) if isinstance(x, dpa.Reducer) else None)
@pytest.mark.parametrize("key", [KEYS, "s"], ids=["two-keys", "unicode-key"])
def test_native_partials_equal_spark_groupby(spark, derived, reducer, kind, column, key):
    assert native_partials(derived, [key] if isinstance(key, str) else key, reducer) is not None
    out, result = run_with_result(derived, key=key, reducer=reducer, precombine="sql",
                                  config=dpa.JobConfig(max_rounds=1))
    expected = derived.groupBy(key).agg(_spark_agg(kind, column).alias(reducer.name))
    assert out.schema == expected.schema
    assert _rows(out.collect()) == _rows(expected.collect())
    assert sum(result.stats.processed) == derived.count()  # the weight column carried every record


def _python_groups(df, key_columns, column):
    groups = defaultdict(list)
    for row in df.select(*key_columns, column).collect():
        groups[tuple(row[k] for k in key_columns)].append(row[column])
    return groups


def test_native_collect_keeps_nulls_per_key(spark, derived):
    out = run(derived, key=KEYS, reducer=dpa.Collect("text"), precombine="sql")
    expected = _python_groups(derived, KEYS, "text")
    got = {(r["s"], r["i"]): r["collect"] for r in out.collect()}
    assert got.keys() == expected.keys()
    assert any(None in v for v in got.values())  # nulls survive (Spark's collect_list would drop them)
    assert {k: sorted(map(repr, v)) for k, v in got.items()} == {k: sorted(map(repr, v)) for k, v in expected.items()}


@pytest.mark.parametrize("column", ["n_long", "text"])
def test_native_top_k_is_largest_first_per_key(spark, derived, column):
    out = run(derived, key=KEYS, reducer=dpa.TopK(column, k=4), precombine="sql")
    expected = {k: heapq.nlargest(4, [v for v in vs if v is not None])
                for k, vs in _python_groups(derived, KEYS, column).items()}
    assert {(r["s"], r["i"]): r["top_k"] for r in out.collect()} == expected


def test_native_equals_dpa_own_combine_with_nan(spark):
    """Float min/max/top-k order NaN as Spark does (above every number), natively or not."""
    nan = float("nan")
    df = spark.createDataFrame([(1, nan), (1, 2.5), (2, nan), (2, None), (3, None), (1, -1.0)], "k int, x double")
    df = df.repartition(2).selectExpr("k", "x")
    for reducer in (dpa.Min("x"), dpa.Max("x"), dpa.Sum("x"), dpa.TopK("x", 1)):
        native = run(df, key="k", reducer=reducer, precombine="sql")
        own = run(df, key="k", reducer=reducer, precombine=False)
        assert _rows(native.collect(), ordered_lists=True) == _rows(own.collect(), ordered_lists=True), reducer


def _long_sums(spark, values_by_partition):
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    rows = [(p, v) for p, values in enumerate(values_by_partition) for v in values]
    schema = StructType([StructField("p", LongType()), StructField("v", LongType())])
    df = spark.createDataFrame(rows, schema).repartition(len(values_by_partition), "p")
    return df.select(F.lit(7).alias("k"), "v")


def test_long_partial_sum_out_of_range_comes_back_exactly(spark):
    df = _long_sums(spark, [[2**62] * 3, [-(2**62)] * 2])  # one partition's partial sum is 3 * 2**62
    out = run(df, key="k", reducer=dpa.Sum("v"), precombine="sql")
    assert [tuple(r) for r in out.collect()] == [(7, 2**62)]


def test_long_sum_overflow_raises_never_wraps(spark):
    df = _long_sums(spark, [[2**62] * 2, [2**62] * 2])  # 2**64: Spark's non-ANSI sum would say 0
    # As in dpa's own jobs on Ray, the reducer's error may arrive wrapped in JobFailedError.
    with pytest.raises((ArithmeticOverflowError, JobFailedError), match=r"overflowed int64.*reached 18446744073709551616"):
        run(df, key="k", reducer=dpa.Sum("v"), precombine="sql").collect()


def test_filtered_to_nothing_gives_empty_typed_result(spark, derived):
    from pyspark.sql import functions as F

    empty = derived.filter(F.col("i") > 100)
    out = run(empty, key=KEYS, reducer=dpa.Sum("n_long"), precombine="sql")
    assert out.count() == 0
    assert out.schema == empty.groupBy(KEYS).agg(F.sum("n_long").alias("sum")).schema


def test_decimal_sums_and_means_run_as_spark_sql(spark):
    from pyspark.sql import functions as F

    rows = [(1, Decimal("1.5"), Decimal("-99999999.999")), (1, Decimal("2.25"), Decimal("99999999.999")),
            (2, None, None), (3, Decimal("-7.01"), Decimal("-0.001")), (3, Decimal("1e20"), Decimal("12.5"))]
    df = spark.createDataFrame(rows, "k int, v decimal(30,2), n decimal(11,3)").repartition(3)
    for column in ("v", "n"):  # wide: Spark's decimal sum; narrow: the halves of its unscaled longs
        assert native_partials(df, ["k"], dpa.Sum(column)) is not None
    reducers = [dpa.Sum("v"), dpa.Mean("v"), dpa.Count(), dpa.Sum("n"), dpa.Mean("n")]  # Spark's names
    out = run(df, key="k", reducer=reducers, precombine="sql")
    want = df.groupBy("k").agg(F.sum("v"), F.avg("v"), F.count(F.lit(1)), F.sum("n"), F.avg("n"))
    assert [(f.name, f.dataType, f.nullable) for f in out.schema] == [(f.name, f.dataType, f.nullable) for f in want.schema]
    assert _rows(out.collect()) == _rows(want.collect())


def test_wide_decimal_sum_overflow_raises_never_null(spark):
    from pyspark.sql import functions as F

    big = Decimal(9 * 10**37)  # decimal(38, 0): two of them leave 38 digits
    df = spark.createDataFrame([(1, big), (1, big)], "k int, v decimal(38,0)").coalesce(1)
    assert df.groupBy("k").agg(F.sum("v")).collect()[0][1] is None  # Spark's own, outside ANSI mode: null
    with pytest.raises((ArithmeticOverflowError, JobFailedError), match="more than 38 digits"):
        run(df, key="k", reducer=dpa.Sum("v"), precombine="sql").collect()


def test_arrow_and_sql_precombine_agree(spark, derived):
    for reducer in (dpa.Count(), dpa.Sum("n_long"), dpa.Mean("n_double")):
        sql = run(derived, key=KEYS, reducer=reducer, precombine="sql")
        arrow = run(derived, key=KEYS, reducer=reducer, precombine="arrow")
        assert _rows(sql.collect()) == _rows(arrow.collect())


def test_bad_precombine_value(spark, derived):
    with pytest.raises(dpa.ConfigError, match="precombine"):
        run(derived, key=KEYS, reducer=dpa.Count(), precombine="python")


def test_partial_finish_joins_long_sum_halves_exactly():
    groups = [[2**62] * 3, [-(2**63), -1], [None], [5, -7], [2**63 - 1, 0]]
    high, low, weight = [], [], []
    for values in groups:
        present = [v for v in values if v is not None]
        high.append(sum(v >> 32 for v in present) if present else None)
        low.append(sum(v & 0xFFFFFFFF for v in present) if present else None)
        weight.append(len(values))
    table = pa.table({"k": list(range(len(groups))), SUM_HIGH_COL: pa.array(high, pa.int64()),
                      SUM_LOW_COL: pa.array(low, pa.int64()), "__dpa_w": pa.array(weight, pa.int64())})
    schema = pa.schema([("k", pa.int64()), ("sum", pa.int64()), ("__dpa_w", pa.int64())])
    finish = PartialFinish(schema, "sum", "v")
    wide = finish(table)
    assert wide.column_names == ["k", "sum", "__dpa_w"]
    assert wide["sum"].to_pylist() == [3 * 2**62, -(2**63) - 1, None, -2, 2**63 - 1]
    narrow = finish(table.slice(2))  # every sum in range: plain int64
    assert narrow.schema == schema
    assert narrow["sum"].to_pylist() == [None, -2, 2**63 - 1]


def test_partial_finish_joins_unscaled_decimal_halves_exactly():
    scale = 2
    groups = [[10**17 - 1] * 3, [-(10**17), -1], [None], [5, -7], [123456789012345678, 0]]  # unscaled values
    high, low, weight = [], [], []
    for values in groups:
        present = [v for v in values if v is not None]
        high.append(sum(v >> 32 for v in present) if present else None)
        low.append(sum(v & 0xFFFFFFFF for v in present) if present else None)
        weight.append(len(values))
    table = pa.table({"k": list(range(len(groups))), "__dpa_dhi_sum": pa.array(high, pa.int64()),
                      "__dpa_dlo_sum": pa.array(low, pa.int64()), "__dpa_w": pa.array(weight, pa.int64())})
    schema = pa.schema([("k", pa.int64()), ("sum", pa.decimal128(28, scale)), ("__dpa_w", pa.int64())])
    finish = PartialFinish(schema, decimal_halves=(("sum", "__dpa_dhi_sum", "__dpa_dlo_sum", "v"),))
    want = [None if not any(v is not None for v in g) else Decimal(sum(v for v in g if v is not None)).scaleb(-scale)
            for g in groups]
    for part in (table, table.slice(1)):  # with a sum past int64 (3 * 10**17 - 3 is not), and without
        out = finish(part)
        assert out.schema == schema
        assert out["sum"].to_pylist() == want[len(groups) - part.num_rows:]
    big = table.set_column(1, "__dpa_dhi_sum", pa.array([2**40, 0, None, 0, 0], pa.int64()))  # 2**72: pending
    assert finish(big)["sum"][0].as_py() == Decimal(2**72 + low[0]).scaleb(-scale)


def test_partial_finish_copies_the_weight_from_a_state_column():
    table = pa.table({"k": ["a", None], "count": pa.array([3, 1], pa.int64())})
    schema = pa.schema([("k", pa.string()), ("count", pa.int64()), ("__dpa_w", pa.int64())])
    out = PartialFinish(schema, weight_from="count")(table)
    assert out.schema == schema
    assert out["__dpa_w"].to_pylist() == [3, 1]


# ---- the map-side plan: Spark's partial aggregation alone (spark_bridge.partial_plan)


def _over_rdd(frame) -> bool:
    """Whether ``frame`` reads the partial aggregate's RDD (the map-side plan was taken)."""
    return frame._jdf.queryExecution().analyzed().getClass().getSimpleName() == "LogicalRDD"


MAP_SIDE = [dpa.Count(), dpa.Sum("n_int"), dpa.Sum("n_long"), dpa.Sum("n_double"), dpa.Min("n_long"),
            dpa.Max("text"), dpa.Min("n_dec"), dpa.Mean("n_long"), dpa.Mean("n_int"), dpa.Min("n_double"),
            dpa.Max("n_double"), dpa.Sum("n_dec"), dpa.Mean("n_dec")]  # (decimals: halves of unscaled longs)
PARTITION_GROUPING = [dpa.Collect("text"), dpa.TopK("n_long", 3)]


@pytest.mark.parametrize("reducer", MAP_SIDE, ids=repr)
def test_map_side_plan_taken_and_exact(spark, derived, reducer):
    """Reducers whose partial buffers are their states skip Spark's shuffle; the partial
    rows come back as dpa's states, and the job equals dpa's own combine of every row."""
    frame, _ = native_partials(derived, KEYS, reducer)
    assert _over_rdd(frame)
    assert frame.rdd.getNumPartitions() == 1  # coalesced to the executor's one task slot
    assert frame.columns[:len(KEYS)] == KEYS
    sql = run(derived, key=KEYS, reducer=reducer, precombine="sql")
    own = run(derived, key=KEYS, reducer=reducer, precombine=False)
    assert _rows(sql.collect()) == _rows(own.collect())


@pytest.mark.parametrize("reducer", PARTITION_GROUPING, ids=repr)
def test_other_states_keep_the_partition_id_grouping(spark, derived, reducer):
    frame, _ = native_partials(derived, KEYS, reducer)
    assert not _over_rdd(frame)


def test_map_side_partials_hold_one_row_per_key_and_partition(spark, derived):
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from spark_bridge.partial_plan import partial_aggregation

    wide = derived.repartition(4)
    aggs = [("n", F.count(F.lit(1)), T.LongType())]
    frame = partial_aggregation(wide, [F.col("s")], aggs, [wide.schema["s"]], max_blocks=2)
    per_partition = wide.groupBy(F.spark_partition_id(), "s").count().collect()
    assert frame.rdd.getNumPartitions() == 2
    assert len(frame.collect()) == len(per_partition)  # not merged across partitions: that is dpa's part
    assert len(per_partition) > derived.select("s").distinct().count()

    frame, finish = native_partials(derived, ["s"], dpa.Count())  # 1 task slot: 1 partition
    rows = frame.collect()
    assert len(rows) == len(derived.groupBy(F.spark_partition_id(), "s").count().collect())
    assert sum(r["count"] for r in rows) == derived.count()
    table = finish(pa.Table.from_pylist([r.asDict() for r in rows], pa.schema([("s", pa.string()), ("count", pa.int64())])))
    assert table["__dpa_w"].to_pylist() == table["count"].to_pylist()


def test_plan_without_a_shuffle_takes_the_partial_aggregate(spark, derived):
    """A DataFrame already partitioned by the key has no shuffle under its aggregation: the
    partial aggregate sits right under the final one and is taken all the same."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from spark_bridge.partial_plan import partial_aggregation

    clustered = derived.repartition(4, "s")
    frame = partial_aggregation(clustered, [F.col("s")], [("n", F.count(F.lit(1)), T.LongType())],
                                [clustered.schema["s"]])
    assert frame is not None and frame.rdd.getNumPartitions() == 4
    assert sorted(map(tuple, frame.collect()), key=repr) == sorted(map(tuple, clustered.groupBy("s").count().collect()), key=repr)
    frame, _ = native_partials(clustered, ["s"], dpa.Count())
    assert _over_rdd(frame)
    out = run(clustered, key="s", reducer=dpa.Count(), precombine="sql")
    assert _rows(out.collect()) == _rows(clustered.groupBy("s").count().collect())


def test_failing_map_side_plan_falls_back(spark, derived, monkeypatch):
    import spark_bridge.partial_plan as plan

    def broken(*args):
        raise RuntimeError("planner went away")

    monkeypatch.setattr(plan, "_executed_plan", broken)
    frame, _ = native_partials(derived, KEYS, dpa.Sum("n_long"))
    assert not _over_rdd(frame)
    out = run(derived, key=KEYS, reducer=dpa.Sum("n_long"), precombine="sql")
    assert _rows(out.collect()) == _rows(derived.groupBy(KEYS).agg(_spark_agg("sum", "n_long").alias("sum")).collect())


def test_map_side_plan_coalesces_to_max_blocks(spark, derived):
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from spark_bridge.partial_plan import partial_aggregation

    wide = derived.repartition(5)
    fields = [wide.schema["s"]]
    frame = partial_aggregation(wide, [F.col("s")], [("n", F.count(F.lit(1)), T.LongType())], fields, max_blocks=2)
    assert frame is not None and frame.rdd.getNumPartitions() == 2
    assert frame.agg(F.sum("n")).collect()[0][0] == derived.count()
    unbounded = partial_aggregation(wide, [F.col("s")], [("n", F.count(F.lit(1)), T.LongType())], fields)
    assert unbounded.rdd.getNumPartitions() == 5
    roomy = partial_aggregation(wide, [F.col("s")], [("n", F.count(F.lit(1)), T.LongType())], fields, max_blocks=8)
    assert roomy.rdd.getNumPartitions() == 5  # coalescing never adds partitions


def test_map_side_plan_rejects_unexpected_buffers(spark):
    """Two requested aggregates that Spark computes as one buffer (count(c) of a non-null
    column is count(1)) do not match the expected columns: None, never mislabelled columns."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from spark_bridge.partial_plan import partial_aggregation

    df = spark.range(0, 100, 1, 2).select((F.col("id") % 3).cast("string").alias("s"), "id")
    assert not df.schema["id"].nullable
    aggs = [("a", F.count("id"), T.LongType()), ("b", F.count(F.lit(1)), T.LongType())]
    assert partial_aggregation(df, [F.col("s")], aggs, [df.schema["s"]]) is None
    assert partial_aggregation(df, [F.col("s")], aggs[1:], [df.schema["s"]]) is not None


@pytest.mark.parametrize("before", [None, "true", "false"])
def test_adaptive_execution_setting_is_restored(spark, derived, before):
    key = "spark.sql.adaptive.enabled"
    conf = spark._jsparkSession.sessionState().conf()
    if before is None:
        conf.unsetConf(key)
    else:
        conf.setConfString(key, before)
    try:
        native_partials(derived, KEYS, dpa.Count())
        assert bool(conf.contains(key)) == (before is not None)
        if before is not None:
            assert conf.getConfString(key) == before
    finally:
        conf.unsetConf(key)


def test_map_side_plan_over_a_broadcast_join_and_a_python_udf(spark, derived):
    """The partial aggregate runs its own subtree: a broadcast join and a Python UDF under
    it are executed as in any Spark job, and the job stays exact."""
    from pyspark.sql import functions as F

    labels = spark.createDataFrame([(i, f"label-{i}") for i in range(4)], "i int, label string")
    shout = F.udf(lambda s: None if s is None else s.upper(), "string")
    df = derived.join(F.broadcast(labels), "i").select(shout("s").alias("s"), "label", "n_long")
    frame, _ = native_partials(df, ["s", "label"], dpa.Sum("n_long"))
    assert _over_rdd(frame)
    out = run(df, key=["s", "label"], reducer=dpa.Sum("n_long"), precombine="sql")
    expected = df.groupBy("s", "label").agg(F.sum("n_long").alias("sum"))
    assert _rows(out.collect()) == _rows(expected.collect())


def test_mean_of_a_non_nullable_column_counts_once(spark):
    """Spark computes count(c) of a non-nullable column and count(1) as one buffer: the
    bridge asks for the count once and takes the weight from it, on the map-side plan."""
    from pyspark.sql import functions as F

    df = spark.range(0, 3000, 1, 3).select((F.col("id") % 7).cast("string").alias("s"), "id")
    assert not df.schema["id"].nullable
    frame, finish = native_partials(df, ["s"], dpa.Mean("id"))
    assert _over_rdd(frame) and finish.weight_from == "mcount"
    out, result = run_with_result(df, key="s", reducer=dpa.Mean("id"), precombine="sql")
    expected = df.groupBy("s").agg(F.avg(F.col("id").cast("double")).alias("mean"))
    assert _rows(out.collect()) == _rows(expected.collect())
    assert sum(result.stats.processed) == 3000
