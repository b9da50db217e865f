"""Tests for spark_bridge.convert and spark_bridge.to_spark: Spark <-> Ray conversion and result schemas."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    NullType,
    ShortType,
    StringType,
    StructField,
    StructType,
)

import dpa
from dpa.errors import ConfigError, SchemaError
from spark_bridge.cluster import executor_task_slots
from spark_bridge.convert import release_spark_dataset, spark_to_ray_dataset
from spark_bridge.schema import result_spark_schema, validate_columns
from spark_bridge.to_spark import arrow_refs_to_spark

MIXED_SCHEMA = StructType(
    [
        StructField("i", IntegerType(), True),
        StructField("l", LongType(), True),
        StructField("s", StringType(), True),
        StructField("d", DoubleType(), True),
    ]
)
MIXED_ROWS = [
    (1, 10, "plain", 1.5),
    (2, 2**40, "ünïcödé ✓ 漢字 🎉", -0.25),
    (None, None, None, None),
    (-(2**31), -(2**63), "", 1e300),
    (2**31 - 1, 2**63 - 1, "x", None),
]


def _sorted_rows(df) -> list[tuple]:
    return sorted((tuple(r) for r in df.collect()), key=repr)


# --------------------------------------------------------------------------- round trips


def _through_driver(df) -> bool:
    """Whether ``df`` reads Arrow batches held by the driver (no Python worker)."""
    plan = df._jdf.queryExecution().analyzed().toString()
    assert ("MapInArrow" in plan) != ("LogicalRDD" in plan), plan
    return "LogicalRDD" in plan


@pytest.mark.parametrize("via_driver", [True, False])
def test_round_trip_keeps_rows_and_types(spark, via_driver) -> None:
    import ray

    df = spark.createDataFrame(MIXED_ROWS, MIXED_SCHEMA).repartition(2)
    ds = spark_to_ray_dataset(df)
    assert ds.count() == len(MIXED_ROWS)
    arrow_schema = ds.schema().base_schema
    assert arrow_schema.field("i").type == pa.int32()
    assert arrow_schema.field("l").type == pa.int64()
    assert arrow_schema.field("d").type == pa.float64()
    assert pa.types.is_string(arrow_schema.field("s").type) or pa.types.is_large_string(
        arrow_schema.field("s").type
    )

    refs = ds.to_arrow_refs()
    assert all(isinstance(r, ray.ObjectRef) for r in refs)
    back = arrow_refs_to_spark(spark, refs, MIXED_SCHEMA, via_driver=via_driver)
    assert _through_driver(back) == via_driver
    assert back.schema == MIXED_SCHEMA
    assert _sorted_rows(back) == sorted(MIXED_ROWS, key=repr)
    release_spark_dataset(df)


def test_small_results_go_through_the_driver_large_ones_through_workers(spark, monkeypatch) -> None:
    import ray

    from spark_bridge import to_spark

    conf = "spark.sql.execution.arrow.localRelationThreshold"
    before = spark.conf.get(conf, None)
    table = pa.table({"k": pa.array(range(1000), pa.int64())})
    refs = [ray.put(table), ray.put(table)]
    size = sum(v["object_size"] for v in ray.experimental.get_object_locations(refs).values())
    schema = StructType([StructField("k", LongType())])
    monkeypatch.setattr(to_spark, "DRIVER_RESULT_MAX_BYTES", size)
    small = arrow_refs_to_spark(spark, refs, schema)
    assert _through_driver(small)
    assert small.count() == 2000
    assert spark.conf.get(conf, None) == before  # Spark's option is only changed for the call
    monkeypatch.setattr(to_spark, "DRIVER_RESULT_MAX_BYTES", size - 1)
    large = arrow_refs_to_spark(spark, refs, schema)
    assert not _through_driver(large)
    assert sorted(r["k"] for r in large.collect()) == sorted(list(range(1000)) * 2)
    # Partitions as on the workers' path: one per table, at most one per task slot.
    assert arrow_refs_to_spark(spark, refs, schema, num_partitions=2, via_driver=True).rdd.getNumPartitions() == 2
    assert arrow_refs_to_spark(spark, refs, schema, via_driver=True).rdd.getNumPartitions() == 1


def test_release_drops_spark_cache(spark) -> None:
    def cached() -> int:
        return spark.sparkContext._jsc.sc().getPersistentRDDs().size()

    before = cached()
    df = spark.range(0, 50, 1, 3)
    ds = spark_to_ray_dataset(df)
    assert ds.count() == 50
    assert cached() == before + 1
    release_spark_dataset(df)
    assert cached() == before
    release_spark_dataset(df)  # idempotent


def test_conversion_leaves_workers_in_normal_code_loading_mode(spark) -> None:
    # raydp's from_spark leaves its fetch workers with load_code_from_local=True, after which
    # they import later tasks' modules by name (re-running a driver script's top level).
    import ray

    @ray.remote(num_cpus=0)
    def loading_mode() -> bool:
        return ray._private.worker.global_worker.load_code_from_local

    df = spark.range(0, 40, 1, 4)
    assert spark_to_ray_dataset(df).count() == 40
    release_spark_dataset(df)
    assert not any(ray.get([loading_mode.remote() for _ in range(12)]))


def test_num_blocks_repartitions(spark) -> None:
    df = spark.range(0, 30, 1, 1)
    ds = spark_to_ray_dataset(df, num_blocks=3)
    assert ds.num_blocks() == 3
    assert sorted(r["id"] for r in ds.take_all()) == list(range(30))
    release_spark_dataset(df)
    with pytest.raises(ConfigError):
        spark_to_ray_dataset(df, num_blocks=0)


@pytest.mark.parametrize("via_driver", [True, False])
def test_arrow_refs_keep_int64_precision_and_nan(spark, via_driver) -> None:
    # raydp's Dataset.to_spark goes through pandas: 2**60 + 1 next to a null became 2**60
    # and NaN became null. The bridge must not do that.
    import ray

    table = pa.table(
        {
            "a": pa.array([2**60 + 1, None, 3], pa.int64()),
            "d": pa.array([float("nan"), None, 2.0]),
            "extra": pa.array(["ignored", "ignored", "ignored"]),
        }
    )
    schema = StructType([StructField("d", DoubleType()), StructField("a", LongType())])
    rows = arrow_refs_to_spark(spark, [ray.put(table)], schema, via_driver=via_driver).collect()
    assert [r["a"] for r in rows] == [2**60 + 1, None, 3]
    assert math.isnan(rows[0]["d"]) and rows[1]["d"] is None and rows[2]["d"] == 2.0


@pytest.mark.parametrize("via_driver", [True, False])
def test_arrow_refs_cast_to_spark_schema(spark, via_driver) -> None:
    import ray

    refs = [
        ray.put(pa.table({"k": pa.array([1, 2], pa.int64()), "v": pa.array([1.0, 2.5])})),
        ray.put(pa.table({"k": pa.array([], pa.int64()), "v": pa.array([], pa.float64())})),
        ray.put(pa.table({"k": pa.array([3], pa.int64()), "v": pa.array([None], pa.float64())})),
    ]
    schema = StructType([StructField("k", IntegerType()), StructField("v", DoubleType())])
    df = arrow_refs_to_spark(spark, refs, schema, via_driver=via_driver)
    assert df.schema == schema
    assert sorted(tuple(r) for r in df.collect()) == [(1, 1.0), (2, 2.5), (3, None)]
    assert df.count() == 3  # lazily recomputed: refs must still be alive
    # One partition per task slot the executors have (1 executor x 1 core here), not
    # Spark's defaultParallelism (2 even on one core): a second wave of tasks costs more.
    assert executor_task_slots(spark) == 1 < spark.sparkContext.defaultParallelism
    assert df.rdd.getNumPartitions() == 1
    assert arrow_refs_to_spark(spark, refs, schema, num_partitions=3, via_driver=via_driver).rdd.getNumPartitions() == 3


@pytest.mark.parametrize("via_driver", [True, False])
def test_arrow_refs_overflowing_cast_fails(spark, via_driver) -> None:
    import ray

    ref = ray.put(pa.table({"k": pa.array([2**40], pa.int64())}))
    with pytest.raises(Exception, match="(?i)overflow|out of bounds|ArrowInvalid|not in range"):
        # Through the driver the cast fails at once, else in the action.
        arrow_refs_to_spark(spark, [ref], StructType([StructField("k", IntegerType())]), via_driver=via_driver).collect()


def test_arrow_refs_missing_column_fails(spark) -> None:
    import ray

    ref = ray.put(pa.table({"other": pa.array([1], pa.int64())}))
    with pytest.raises(SchemaError, match=r"lacks column\(s\) \['k'\]"):
        arrow_refs_to_spark(spark, [ref], StructType([StructField("k", LongType())]), via_driver=True)


def test_empty_dataframe_round_trip_keeps_schema(spark) -> None:
    def cached() -> int:
        return spark.sparkContext._jsc.sc().getPersistentRDDs().size()

    for empty in (
        spark.createDataFrame(MIXED_ROWS, MIXED_SCHEMA).limit(0),  # zero partitions
        spark.createDataFrame([], MIXED_SCHEMA),  # partitions without rows
    ):
        before = cached()
        ds = spark_to_ray_dataset(empty)
        if empty.rdd.getNumPartitions() == 0:
            assert cached() == before  # nothing to fetch: its (empty) cache is dropped at once
        assert ds.count() == 0
        assert ds.schema() is not None
        assert ds.schema().names == ["i", "l", "s", "d"]
        for via_driver in (True, False):
            back = arrow_refs_to_spark(spark, ds.to_arrow_refs(), MIXED_SCHEMA, via_driver=via_driver)
            assert back.schema == MIXED_SCHEMA
            assert back.count() == 0
        release_spark_dataset(empty)


def test_no_refs_gives_empty_dataframe_with_schema(spark) -> None:
    df = arrow_refs_to_spark(spark, [], MIXED_SCHEMA)
    assert df.schema == MIXED_SCHEMA
    assert df.count() == 0


def test_arrow_refs_reject_placeholder_schema(spark) -> None:
    schema = StructType([StructField("k", LongType()), StructField("c", NullType())])
    with pytest.raises(SchemaError, match="NullType"):
        arrow_refs_to_spark(spark, [], schema)


# --------------------------------------------------------------------------- result schema

INPUT = StructType(
    [
        StructField("k", StringType(), False),
        StructField("k2", IntegerType(), True),
        StructField("b", ShortType()),
        StructField("i", IntegerType()),
        StructField("l", LongType()),
        StructField("f", FloatType()),
        StructField("d", DoubleType()),
        StructField("dec", DecimalType(10, 2)),
        StructField("bigdec", DecimalType(32, 4)),
        StructField("s", StringType()),
        StructField("day", DateType()),
        StructField("flag", BooleanType()),
    ]
)


def _types(schema: StructType) -> dict:
    return {f.name: f.dataType for f in schema.fields}


def test_result_schema_keys_keep_type_and_nullability() -> None:
    schema = result_spark_schema(INPUT, ["k2", "k"], dpa.Count(name="n"))
    assert schema.names == ["k2", "k", "n"]
    assert schema["k"] == StructField("k", StringType(), False)
    assert schema["k2"] == StructField("k2", IntegerType(), True)
    assert schema["n"] == StructField("n", LongType(), False)  # count(*) is never null, as in Spark


@pytest.mark.parametrize(
    ("reducer", "expected"),
    [
        (dpa.Count(), LongType()),
        (dpa.Sum("b"), LongType()),
        (dpa.Sum("i"), LongType()),
        (dpa.Sum("l"), LongType()),
        (dpa.Sum("f"), DoubleType()),
        (dpa.Sum("d"), DoubleType()),
        (dpa.Sum("dec"), DecimalType(20, 2)),  # Spark widens a decimal sum by 10 digits
        (dpa.Sum("bigdec"), DecimalType(38, 4)),
        (dpa.Mean("i"), DoubleType()),
        (dpa.Mean("dec"), DecimalType(14, 6)),  # Spark's avg of a decimal(p, s): decimal(p + 4, s + 4)
        (dpa.Min("s"), StringType()),
        (dpa.Max("day"), DateType()),
        (dpa.Min("dec"), DecimalType(10, 2)),
        (dpa.Collect("s"), ArrayType(StringType(), True)),
        (dpa.TopK("d", k=3), ArrayType(DoubleType(), True)),
        (dpa.WithCost(dpa.Sum("dec"), 0.001), DecimalType(20, 2)),
    ],
    ids=repr,
)
def test_result_schema_asks_the_reducer(reducer, expected) -> None:
    schema = result_spark_schema(INPUT, ["k"], reducer)
    assert schema[reducer.name].dataType == expected


class _Custom(dpa.Reducer):
    def create(self):
        return []

    def add(self, acc, value):
        return [*acc, value]


def test_result_schema_custom_from_arrow() -> None:
    mine = _Custom("l", name="mine")
    assert result_spark_schema(INPUT, ["k"], mine)["mine"].dataType == NullType()  # placeholder
    arrow = pa.schema([("k", pa.string()), ("mine", pa.list_(pa.int64()))])
    schema = result_spark_schema(INPUT, ["k"], mine, arrow_schema=arrow)
    assert schema["mine"].dataType == ArrayType(LongType(), True)
    with pytest.raises(SchemaError, match="mine"):
        result_spark_schema(INPUT, ["k"], mine, pa.schema([("k", pa.string())]))


@pytest.mark.parametrize(
    ("reducer", "error", "match"),
    [
        (dpa.Sum("s"), SchemaError, "Sum\\('s'\\) needs a numeric column, but 's' has type string"),
        (dpa.Sum("flag"), SchemaError, "needs a numeric column"),
        (dpa.Mean("day"), SchemaError, "Mean\\('day'\\) needs a numeric column"),
        (dpa.Count(name="k"), ConfigError, "clashes with a key"),
        (dpa.Max("nope"), SchemaError, "nope"),
        ("count", ConfigError, "must be a dpa.Reducer"),
    ],
)
def test_result_schema_errors(reducer, error, match) -> None:
    with pytest.raises(error, match=match):
        result_spark_schema(INPUT, ["k"], reducer)


def test_result_schema_missing_key() -> None:
    with pytest.raises(SchemaError, match="user_id") as info:
        result_spark_schema(INPUT, ["user_id"], dpa.Count(name="n"))
    assert "available columns" in str(info.value)


# --------------------------------------------------------------------------- validate_columns


def test_validate_columns_lists_missing_and_available() -> None:
    with pytest.raises(SchemaError) as info:
        validate_columns(["a", "b", "c"], ["a", "x", None, "y", "x"])
    message = str(info.value)
    assert "['x', 'y']" in message  # each missing column once, in order
    assert "available columns: ['a', 'b', 'c']" in message
    assert isinstance(info.value, ValueError)


def test_validate_columns_passes_and_is_case_sensitive() -> None:
    validate_columns(["a", "B"], ["a", "B", None])
    with pytest.raises(SchemaError, match="case-sensitive"):
        validate_columns(["a", "B"], ["b"])
