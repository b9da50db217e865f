"""spark_bridge.prepare: one job's checks, before any Spark job or Ray work (no Spark session:
the prepared job only reads the DataFrame's schema)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pyspark.sql.types import DecimalType, LongType, StringType, StructField, StructType

import dpa
from dpa.errors import ConfigError, SchemaError
from spark_bridge.prepare import prepare

SCHEMA = StructType([StructField("k", StringType()), StructField("x", LongType()),
                     StructField("d", DecimalType(15, 2)), StructField("other", StringType())])
FRAME = SimpleNamespace(schema=SCHEMA)  # all prepare reads of a DataFrame


def test_a_list_of_aggregates_is_one_combined_reducer_reading_only_its_columns():
    job = prepare(FRAME, "k", [dpa.Sum("x"), dpa.Mean("d")], None, None, None)
    assert job.key_columns == ["k"]
    assert job.needed_columns() == ["k", "x", "d"]
    assert job.combinable and job.use_precombine("raydp") and job.use_precombine("staged")
    assert job.config == dpa.JobConfig()
    assert [f.name for f in job.output_schema(None).fields] == ["k", "sum(x)", "avg(d)"]
    assert job.output_schema(None)["avg(d)"].dataType == DecimalType(19, 6)  # Spark's avg of decimal(15,2)


@pytest.mark.parametrize("key,match", [([], "at least one"), (["k", "k"], "more than once"), (3, "column name"),
                                       ([""], "non-empty")])
def test_bad_keys(key, match):
    with pytest.raises(ConfigError, match=match):
        prepare(FRAME, key, dpa.Count(), None, None, None)


def test_missing_and_mistyped_columns_fail_before_anything_runs():
    with pytest.raises(SchemaError, match="missing column.*available columns"):
        prepare(FRAME, "nope", dpa.Count(), None, None, None)
    with pytest.raises(SchemaError):
        prepare(FRAME, "k", dpa.Sum("other"), None, None, None)  # a sum of strings


def test_precombine_checks_are_the_same_on_both_paths():
    with pytest.raises(ConfigError, match="precombine must be"):
        prepare(FRAME, "k", dpa.Count(), None, None, "python")
    costly = prepare(FRAME, "k", dpa.WithCost(dpa.Count(), 0.001), None, None, True)
    for path in ("raydp", "staged"):
        with pytest.raises(ConfigError, match="needs a built-in reducer without cost"):
            costly.use_precombine(path)
    assert not prepare(FRAME, "k", dpa.WithCost(dpa.Count(), 0.001), None, None, None).use_precombine("raydp")
    sql = prepare(FRAME, "k", dpa.Count(), None, None, "sql")
    assert sql.use_precombine("raydp")
    with pytest.raises(ConfigError, match="precombine='sql' runs Spark's partial aggregation through RayDP"):
        sql.use_precombine("staged")
    assert not prepare(FRAME, "k", dpa.Count(), None, None, False).use_precombine("staged")
