"""ApproxCountDistinct's numpy HyperLogLog states against DuckDB's exact distinct counts."""

from __future__ import annotations

import datetime
import decimal

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpa
from dpa.aggregates import hll


def _run(table: pa.Table, reducer: dpa.ApproxCountDistinct, parts: int = 1, reverse: bool = False) -> dict:
    """Partial states of ``parts`` slices of ``table``, merged (in reverse order when asked),
    then finalised: ``{key: count}``."""
    step = max(1, -(-table.num_rows // parts))
    partials = [reducer.partial_from_batch(table.slice(i, step), ["k"]) for i in range(0, table.num_rows, step)]
    merged = reducer.merge_partials(pa.concat_tables(partials[::-1] if reverse else partials), ["k"])
    out = reducer.finalize_table(merged, ["k"])
    return dict(zip(out["k"].to_pylist(), out[reducer.name].to_pylist()))


def _exact(table: pa.Table) -> dict:
    con = duckdb.connect()
    con.register("t", table)
    return dict(con.execute("SELECT k, count(DISTINCT v) FROM t GROUP BY k").fetchall())


@pytest.mark.parametrize("lg_k", [4, 8, 12])
def test_estimates_hold_three_standard_errors(lg_k: int) -> None:
    rng = np.random.default_rng(lg_k)
    sizes = [1, 2, 7, 50, 300, 2_000, 20_000, 120_000]
    keys = np.repeat(np.arange(len(sizes)), [2 * s for s in sizes])
    values = np.concatenate([rng.integers(0, s, 2 * s) * 7919 for s in sizes])  # (repeats within a key)
    table = pa.table({"k": keys, "v": values})
    reducer = dpa.ApproxCountDistinct("v", lg_k=lg_k)
    got, want = _run(table, reducer, parts=5), _exact(table)
    assert got.keys() == want.keys()
    for k, n in want.items():
        if n <= hll.exact_limit(lg_k):
            assert got[k] == n  # a key with few distinct values is counted exactly
        else:
            assert abs(got[k] - n) <= 3 * reducer.relative_error * n, (k, got[k], n)


def test_state_is_the_same_whatever_the_split_and_merge_order() -> None:
    rng = np.random.default_rng(5)
    keys = rng.zipf(1.3, 60_000) % 500
    table = pa.table({"k": keys, "v": rng.integers(0, 50_000, len(keys))})
    reducer = dpa.ApproxCountDistinct("v", lg_k=10)
    one = _run(table, reducer)
    assert _run(table, reducer, parts=7) == one
    assert _run(table, reducer, parts=7, reverse=True) == one


@pytest.mark.parametrize("values", [
    pa.array(["a", "", "bb", "a", None, "ccc", ""] * 3),
    pa.array([1.5, -0.0, 0.0, float("nan"), float("nan"), None, 2.0]),
    pa.array([b"x", b"", b"xy", None], pa.binary()),
    pa.array([True, False, True, None]),
    pa.array([decimal.Decimal("1.10"), decimal.Decimal("2.00"), decimal.Decimal("1.10"), None]),
    pa.array([datetime.date(2020, 1, d) for d in (1, 2, 2, 3)]),
    pa.array([1, 2, 2**64 - 1, 2**64 - 1, None], pa.uint64()),
    pa.array(["p", "q", "p", None]).dictionary_encode(),
])
def test_types_are_counted_as_duckdb_counts_them(values: pa.Array) -> None:
    table = pa.table({"k": np.zeros(len(values), np.int64), "v": values})
    want = _exact(table.set_column(1, "v", values.dictionary_decode())
                  if pa.types.is_dictionary(values.type) else table)
    assert _run(table, dpa.ApproxCountDistinct("v"), parts=2) == want


def test_scalar_contract_matches_the_columnar_one() -> None:
    reducer = dpa.ApproxCountDistinct("v", lg_k=6)
    values = list(range(100)) + [None, 3, 5]
    acc = reducer.create()
    acc = reducer.add_batch(acc, values[:40])
    acc = reducer.merge(acc, reducer.add_batch(reducer.create(), values[40:]))
    table = pa.table({"k": np.zeros(len(values), np.int64), "v": values})
    assert reducer.finalize(acc) == _run(table, reducer)[0]
    assert reducer.finalize(reducer.add(reducer.create(), "x")) == 1


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.one_of(st.none(), st.integers(-50, 50))), min_size=1, max_size=300),
       st.integers(1, 4))
def test_small_keys_are_exact(rows: list, parts: int) -> None:
    table = pa.table({"k": [k for k, _ in rows], "v": pa.array([v for _, v in rows], pa.int64())})
    assert _run(table, dpa.ApproxCountDistinct("v", lg_k=10), parts=parts) == _exact(table)


def test_hashes_of_strings_are_uniform_enough_for_large_counts() -> None:
    n = 200_000
    values = pa.array([f"user-{i}" for i in range(n)])
    table = pa.table({"k": np.zeros(n, np.int64), "v": values})
    reducer = dpa.ApproxCountDistinct("v")
    assert abs(_run(table, reducer, parts=3)[0] - n) <= 3 * reducer.relative_error * n
