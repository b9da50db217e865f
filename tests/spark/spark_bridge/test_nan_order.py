"""NaN and signed zeros through the bridge equal Spark's own ``groupBy().agg(F.max, F.min)``
(with the SQL precombine, the Arrow one and none): NaN equals NaN and is larger than every
other value, a group of NaN only gives NaN, ``-0.0`` and ``0.0`` keys are one group (printed
``0.0``) and so are all NaN keys."""

from __future__ import annotations

import math
import random
import struct

import pytest

import dpa
from spark_bridge import run

NAN = float("nan")
OTHER_NAN = struct.unpack(">d", bytes.fromhex("fff8000000000123"))[0]


def _key(k):
    if isinstance(k, float):
        return "NaN" if math.isnan(k) else k + 0.0
    return k


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    return a == b


@pytest.fixture(scope="module")
def frame(spark):
    rng = random.Random(4)
    keys = [-0.0, 0.0, NAN, OTHER_NAN, 1.5, None, 7.0]
    vals = [NAN, OTHER_NAN, -0.0, 0.0, 2.5, -3.0, None, float("inf")]
    rows = [(rng.choice(keys), f"s{i % 2}", rng.choice(vals)) for i in range(300)]
    rows += [(9.0, "s0", NAN), (9.0, "s0", OTHER_NAN), (9.0, "s1", None),  # all NaN (and null)
             (10.0, "s0", None), (10.0, "s1", None),  # all null
             (11.0, "s0", -0.0), (11.0, "s1", 0.0), (11.0, "s0", 1.0), (11.0, "s1", NAN)]  # mixed
    return spark.createDataFrame(rows, "k double, s string, v double").repartition(3)


def _spark_groups(df, keys):
    from pyspark.sql import functions as F

    rows = df.groupBy(*keys).agg(F.max("v").alias("max"), F.min("v").alias("min")).collect()
    return {tuple(_key(r[k]) for k in keys): (r["max"], r["min"]) for r in rows}


@pytest.mark.parametrize("precombine", ["sql", "arrow", False])
@pytest.mark.parametrize("keys", [["k"], ["k", "s"]], ids=["float-key", "float-and-str-keys"])
def test_max_min_equal_sparks_group_by(frame, precombine, keys):
    want = _spark_groups(frame, keys)
    got: dict = {}
    for i, reducer in enumerate((dpa.Max("v"), dpa.Min("v"))):
        out = run(frame, key=keys if len(keys) > 1 else keys[0], reducer=reducer, precombine=precombine,
                  config=dpa.JobConfig(num_mappers=2, num_reducers=2))
        for r in out.collect():
            group = tuple(_key(r[k]) for k in keys)
            got.setdefault(group, [None, None])[i] = r[reducer.name]
            if r["k"] is not None and not math.isnan(r["k"]) and r["k"] == 0.0:
                assert math.copysign(1.0, r["k"]) == 1.0  # the merged zero group prints 0.0, as Spark's
    assert got.keys() == want.keys(), (sorted(map(repr, got)), sorted(map(repr, want)))
    bad = {g: (got[g], want[g]) for g in want if not (_same(got[g][0], want[g][0]) and _same(got[g][1], want[g][1]))}
    assert not bad
    assert math.isnan(got[(9.0,) if len(keys) == 1 else (9.0, "s0")][0])  # all-NaN group: NaN, never -inf


def test_top_k_ranks_nan_first_as_sparks_sort_array(frame):
    from pyspark.sql import functions as F

    want = {_key(r["k"]): r["top"] for r in frame.groupBy("k").agg(
        F.slice(F.sort_array(F.collect_list("v"), asc=False), 1, 3).alias("top")).collect()}
    for precombine in ("sql", False):
        out = run(frame, key="k", reducer=dpa.TopK("v", k=3), precombine=precombine)
        got = {_key(r["k"]): r["top_k"] for r in out.collect()}
        assert got.keys() == want.keys()
        assert all(len(got[k]) == len(want[k]) and all(map(_same, got[k], want[k])) for k in want), precombine
