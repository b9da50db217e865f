"""NaN and signed zeros on Ray, against DuckDB: keys split over reducers (``shuffle``) meet
in the final merge, where NaN keys arrive from peers as other Python objects."""

from __future__ import annotations

import math
import random
import struct

import pyarrow as pa
import pytest

import dpa

duckdb = pytest.importorskip("duckdb")
pytestmark = pytest.mark.usefixtures("ray_session")

NAN = float("nan")
OTHER_NAN = struct.unpack(">d", bytes.fromhex("fff8000000000123"))[0]


def _key(k):
    return ("NaN" if math.isnan(k) else k + 0.0) if isinstance(k, float) else k


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    return a == b


def _duckdb(table: pa.Table, agg: str) -> dict:
    con = duckdb.connect()
    try:
        con.register("t", table)
        return {_key(k): v for k, v in con.sql(f"select k, {agg} from t group by k").fetchall()}
    finally:
        con.close()


def test_split_float_keys_and_nan_values_equal_duckdb_on_ray():
    class CountKeys(dpa.Reducer):  # (local: shipped to the actors by value)
        def create(self):
            return 0

        def add(self, acc, value):
            return acc + 1

        def merge(self, a, b):
            return a + b

        def finalize(self, acc):
            return acc

    rng = random.Random(9)
    keys = [-0.0, 0.0, NAN, OTHER_NAN, 2.5, None]
    vals = [NAN, OTHER_NAN, -0.0, 0.0, 1.5, None]
    n = 3000
    table = pa.table({"k": pa.array([rng.choice(keys) for _ in range(n)] + [9.0] * 3, pa.float64()),
                      "v": pa.array([rng.choice(vals) for _ in range(n)] + [NAN, None, OTHER_NAN], pa.float64())})
    config = dpa.JobConfig(policy="shuffle", num_mappers=2, num_reducers=3, batch_size=250)
    for reducer, agg in ((CountKeys("v", name="n"), "count(*)"), (dpa.Max("v"), "max(v)"),
                         (dpa.Min("v"), "min(v)")):
        got = {_key(k): v for k, v in dpa.run(table, key="k", reducer=reducer, config=config).to_dict().items()}
        want = _duckdb(table, agg)
        assert got.keys() == want.keys(), (reducer, sorted(map(repr, got)))
        assert {k: (got[k], want[k]) for k in want if not _same(got[k], want[k])} == {}, reducer
