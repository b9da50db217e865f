"""NaN and signed zeros as Spark and DuckDB treat them (runtime="local"; DuckDB is the
independent engine): NaN equals NaN and is larger than every other value in Min, Max and
TopK, on the columnar and the scalar path; a group of NaN only gives NaN, never an
infinity; ``-0.0`` and ``0.0`` keys are one group, and so are all NaN keys."""

from __future__ import annotations

import itertools
import math
import random
import struct

import numpy as np
import pyarrow as pa
import pytest

import dpa
from dpa.input.records import HASH_COL
from dpa.keys.columns import canonical_float_keys
from dpa.keys.encoding import canonical_key, hash_key

duckdb = pytest.importorskip("duckdb")

NAN = float("nan")
#: A NaN with another bit pattern (a payload, and the sign bit set).
OTHER_NAN = struct.unpack(">d", bytes.fromhex("fff8000000000123"))[0]


def _same(a, b) -> bool:
    """Equal as SQL engines compare results: NaN equals NaN, -0.0 equals 0.0."""
    if isinstance(a, list) or isinstance(b, list):
        return a is not None and b is not None and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    return a == b


def _key(k):
    """A group key to look up: NaN as a string (dict lookup), -0.0 as 0.0."""
    if isinstance(k, float):
        return "NaN" if math.isnan(k) else k + 0.0
    if isinstance(k, tuple):
        return tuple(_key(x) for x in k)
    return k


def _table(seed: int, n: int = 400) -> pa.Table:
    """Float keys and values with NaN (two bit patterns), -0.0, 0.0, nulls, an all-NaN
    group, an all-null group and mixed ones."""
    rng = random.Random(seed)
    keys = [-0.0, 0.0, NAN, OTHER_NAN, 1.5, None, 7.0, 8.0]
    vals = [NAN, OTHER_NAN, -0.0, 0.0, 2.5, -3.0, None, float("inf"), float("-inf")]
    k = [rng.choice(keys) for _ in range(n)]
    v = [rng.choice(vals) for _ in range(n)]
    k += [9.0] * 5 + [10.0] * 4 + [11.0] * 3
    v += [NAN, OTHER_NAN, NAN, None, NAN] + [None] * 4 + [-0.0, 0.0, -0.0]
    return pa.table({"k": pa.array(k, pa.float64()), "s": [f"s{i % 3}" for i in range(len(k))],
                     "v": pa.array(v, pa.float64())})


def _sql(table: pa.Table, query: str) -> list[tuple]:
    """DuckDB's rows for ``query`` over ``table`` (named ``t``)."""
    con = duckdb.connect()
    try:
        con.register("t", table)
        return con.sql(query).fetchall()
    finally:
        con.close()


def _engine(table: pa.Table, keys: list[str], agg: str) -> dict:
    """DuckDB's ``{group: agg}`` of ``table`` grouped by ``keys``."""
    rows = _sql(table, f"select {', '.join(keys)}, {agg} from t group by all")
    return {_key(tuple(r[:-1]) if len(keys) > 1 else r[0]): r[-1] for r in rows}


def _dpa(table: pa.Table, keys, reducer, **config) -> dict:
    res = dpa.run(table, key=keys, reducer=reducer, config=dpa.JobConfig(runtime="local", **config))
    return {_key(k): v for k, v in res.to_dict().items()}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("combine", [True, False], ids=["combined", "raw"])
@pytest.mark.parametrize("keys", [["k"], ["k", "s"]], ids=["float-key", "float-and-str-keys"])
def test_min_max_and_count_equal_duckdb(seed, combine, keys):
    table = _table(seed)
    cfg = dict(num_mappers=2, num_reducers=3, batch_size=37, map_side_combine=combine)
    for reducer, agg in ((dpa.Max("v"), "max(v)"), (dpa.Min("v"), "min(v)"), (dpa.Count(), "count(*)")):
        got = _dpa(table, keys if len(keys) > 1 else keys[0], reducer, **cfg)
        want = _engine(table, keys, agg)
        assert got.keys() == want.keys(), (reducer, sorted(map(repr, got)), sorted(map(repr, want)))
        bad = {k: (got[k], want[k]) for k in want if not _same(got[k], want[k])}
        assert not bad, (reducer, bad)


def test_all_nan_group_is_nan_never_an_infinity():
    table = pa.table({"k": ["a", "a", "c", "c", "n"], "v": [1.0, NAN, NAN, OTHER_NAN, None]})
    for combine in (True, False):
        mx = _dpa(table, "k", dpa.Max("v"), map_side_combine=combine, batch_size=1)
        mn = _dpa(table, "k", dpa.Min("v"), map_side_combine=combine, batch_size=1)
        assert math.isnan(mx["a"]) and mn["a"] == 1.0
        assert math.isnan(mx["c"]) and math.isnan(mn["c"])
        assert mx["n"] is None and mn["n"] is None


def test_scalar_path_orders_nan_like_duckdb_whatever_the_order():
    values = [NAN, 2.5, -1.0, OTHER_NAN, None, -0.0]
    orders = list(itertools.permutations(values, 4))
    # DuckDB answers every order at once: one group per order.
    t = pa.table({"p": [p for p, order in enumerate(orders) for _ in order],
                  "v": pa.array([v for order in orders for v in order], pa.float64())})
    rows = _sql(t, "select p, max(v), min(v), list(v order by v desc) filter (where v is not null) "
                   "from t group by p order by p")
    assert [row[0] for row in rows] == list(range(len(orders)))
    for order, (_, want_max, want_min, want_top) in zip(orders, rows):
        for reducer, want in ((dpa.Max("v"), want_max), (dpa.Min("v"), want_min)):
            acc = reducer.create()
            for v in order:
                acc = reducer.add(acc, v)
            assert _same(acc, want), (reducer, order, acc, want)
            half = len(order) // 2
            a, b = reducer.create(), reducer.create()
            for v in order[:half]:
                a = reducer.add(a, v)
            for v in order[half:]:
                b = reducer.add(b, v)
            assert _same(reducer.merge(a, b), want) and _same(reducer.merge(b, a), want)
        top = dpa.TopK("v", 3).add_batch([], list(order))
        assert _same(top, (want_top or [])[:3]), (order, top, want_top)


def test_top_k_equals_duckdb_order_on_the_columnar_path():
    table = _table(5)
    got = _dpa(table, "k", dpa.TopK("v", 3), num_reducers=2, batch_size=50)
    rows = _sql(table, "select k, list(v order by v desc) filter (where v is not null) from t group by k")
    want = {_key(k): (vs or [])[:3] for k, vs in rows}
    assert got.keys() == want.keys()
    assert {k: got[k] for k in want if not _same(got[k], want[k])} == {}


def test_signed_zero_and_nan_keys_are_one_group_each_and_zero_prints_positive():
    n = 50_000
    rng = np.random.default_rng(7)
    keys = np.where(rng.random(n) < 0.5, -0.0, 0.0)
    keys[rng.random(n) < 0.1] = np.nan
    keys[::97] = OTHER_NAN
    table = pa.table({"k": keys, "v": rng.integers(0, 9, n)})
    for reducer in (dpa.Count(), dpa.Sum("v")):
        res = dpa.run(table, key="k", reducer=reducer, config=dpa.JobConfig(runtime="local", num_reducers=3))
        out = res.to_arrow()
        assert out.num_rows == 2  # one zero group, one NaN group
        ks = out["k"].to_pylist()
        zero = next(k for k in ks if not math.isnan(k))
        assert math.copysign(1.0, zero) == 1.0  # the merged group prints 0.0, as Spark's does
        agg = "count(*)" if isinstance(reducer, dpa.Count) else "sum(v)"
        want = {_key(k): c for k, c in _sql(table, f"select k, {agg} from t group by k")}
        assert {_key(k): v for k, v in zip(ks, out[out.column_names[-1]].to_pylist())} == want


class _Count(dpa.Reducer):
    """A user reducer: its state lives in a dict keyed by Python values (NaN != NaN there)."""

    def create(self):
        return 0

    def add(self, acc, value):
        return acc + 1

    def merge(self, a, b):
        return a + b

    def finalize(self, acc):
        return acc


@pytest.mark.parametrize("key", ["column", "callable", "callable_tuple"])
def test_user_reducer_groups_float_keys_like_duckdb(key):
    table = _table(3)
    dpa_key = {"column": "k", "callable": lambda r: r["k"], "callable_tuple": lambda r: (r["k"], r["s"])}[key]
    res = dpa.run(table, key=dpa_key, reducer=_Count("v", name="n"),
                  config=dpa.JobConfig(runtime="local", num_reducers=3, batch_size=40))
    got = {_key(k): v for k, v in res.to_dict().items()}
    want = _engine(table, ["k", "s"] if key == "callable_tuple" else ["k"], "count(*)")
    assert got == want


def test_canonical_float_keys_keeps_the_chunk_layout_and_other_columns():
    t = pa.concat_tables([pa.table({"k": pa.array([-0.0, NAN], pa.float32()), "x": [1, 2]}),
                          pa.table({"k": pa.array([OTHER_NAN, None], pa.float32()), "x": [3, 4]})])
    out = canonical_float_keys(t, ["k", "x"])
    assert [len(c) for c in out["k"].chunks] == [2, 2] and out["x"].equals(t["x"])
    bits = np.asarray(out["k"].combine_chunks().fill_null(1.0)).view(np.uint32)
    assert bits[0] == 0 and bits[1] == bits[2]  # +0.0; one NaN bit pattern
    assert canonical_key((-0.0, (OTHER_NAN,))) == (0.0, (canonical_key(NAN),))
    assert hash_key(-0.0) == hash_key(0.0) and hash_key(NAN) == hash_key(OTHER_NAN)


def test_columnar_min_max_read_multi_chunk_partials():
    parts = pa.concat_tables([
        pa.table({"k": ["d", "e"], HASH_COL: pa.array([1, 2], pa.uint32()), "max": [-0.0, None]}),
        pa.table({"k": ["c"], HASH_COL: pa.array([3], pa.uint32()), "max": [NAN]}),
    ])
    out = dpa.Max("v").merge_partials(parts, ["k", HASH_COL]).to_pydict()
    assert math.isnan(dict(zip(out["k"], out["max"]))["c"])
