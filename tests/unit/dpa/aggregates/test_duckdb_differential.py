"""Every aggregate, several policies (key-splitting ones too), against DuckDB on random skewed
tables with nulls, NaN, unicode, integer and date keys and multi-column keys (hypothesis
generates the tables)."""

from __future__ import annotations

import datetime
import math
from unittest import mock

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import dpa
from dpa.aggregates import dense

duckdb = pytest.importorskip("duckdb")

KEYS1 = ["hot", "é", "日本", "", None, "a\x00b", "🙂"]
FLOATS = st.one_of(st.none(), st.just(math.nan), st.just(-0.0), st.floats(-1e6, 1e6, allow_nan=False, width=64))


@st.composite
def tables(draw):
    n = draw(st.integers(0, 250))
    hot = draw(st.floats(0.3, 0.95))
    rows = []
    for _ in range(n):
        if draw(st.floats(0, 1)) < hot:  # one hot key holds most records
            k1, k2, k3 = "hot", 0, 0
        else:
            k1, k2 = draw(st.sampled_from(KEYS1)), draw(st.one_of(st.none(), st.integers(-3, 3)))
            k3 = draw(st.integers(-300, 300))
        rows.append((k1, k2, k3, datetime.date(2024, 1, 1) + datetime.timedelta(days=k3), draw(st.one_of(st.none(), st.integers(-10**6, 10**6))), draw(FLOATS), draw(FLOATS),
                     draw(st.one_of(st.none(), st.text(max_size=3))), draw(st.one_of(st.none(), st.booleans()))))
    cols = list(zip(*rows)) if rows else [[] for _ in range(9)]
    # k3 and d (integers and dates without nulls) are grouped by value (dpa.aggregates.dense).
    types = [pa.string(), pa.int64(), pa.int32(), pa.date32(), pa.int64(), pa.float64(), pa.float64(), pa.string(),
             pa.bool_()]
    names = ["k1", "k2", "k3", "d", "v", "x", "y", "s", "b"]
    return pa.table([pa.array(list(c), t) for c, t in zip(cols, types)], names=names)


AGGREGATES = [
    (lambda: dpa.Count(), "count(*)"),
    (lambda: dpa.Count("x"), "count(x)"),  # non-null values; a NaN is one
    (lambda: dpa.Count("s"), "count(s)"),
    (lambda: dpa.Sum("v"), "sum(v)"),
    (lambda: dpa.Mean("v"), "avg(v)"),
    (lambda: dpa.Min("v"), "min(v)"),
    (lambda: dpa.Max("v"), "max(v)"),
    (lambda: dpa.CountDistinct("s"), "count(DISTINCT s)"),
    (lambda: dpa.CountDistinct("x"), "count(DISTINCT x)"),
    (lambda: dpa.Var("y"), "var_samp(y)"),
    (lambda: dpa.Std("y", sample=False), "stddev_pop(y)"),
    (lambda: dpa.CollectSet("s"), "coalesce(list_sort(list(DISTINCT s) FILTER (WHERE s IS NOT NULL)), [])"),
    (lambda: dpa.CountIf("b"), "count(*) FILTER (WHERE b)"),  # Spark's count_if: 0, never null
    (lambda: dpa.Any("b"), "bool_or(b)"),
    (lambda: dpa.All("b"), "bool_and(b)"),
    (lambda: dpa.Min("x"), "min(x)"),  # NaN is the largest value, as in DuckDB and Spark
    (lambda: dpa.Max("x"), "max(x)"),
    (lambda: dpa.ApproxCountDistinct("s"), "count(DISTINCT s)"),
    (lambda: dpa.ApproxQuantile("y", q=[0.1, 0.5, 0.95]), "list(y) FILTER (WHERE y IS NOT NULL)"),
]


def _close(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) or isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)
    return a == b


def _quantiles_ok(values: list[float], got: list[float] | None, qs: list[float], error: float) -> bool:
    """Each returned value's rank is within ``error`` of its q (NaN ranks above every number)."""
    if not values:
        return got is None
    n = len(values)
    for q, value in zip(qs, got):
        if math.isnan(value):
            if sum(1 for v in values if not math.isnan(v)) / n >= q + error:
                return False
            continue
        at_most = sum(1 for v in values if not math.isnan(v) and v <= value) / n
        below = sum(1 for v in values if not math.isnan(v) and v < value) / n
        if at_most < q - error or below > q + error:
            return False
    return True


def check_against_duckdb(table: pa.Table, key: list[str], policy: str, batch_size: int,
                         aggregates: list = AGGREGATES) -> None:
    reducers = [make() for make, _ in aggregates]
    names = [f"a{i}" for i in range(len(aggregates))]
    named = [r.alias(n) for r, n in zip(reducers, names)]
    result = dpa.run(table, key=key, reducer=named, runtime="local", policy=policy, batch_size=batch_size)
    ours = result.to_dict()
    if len(key) == 1:
        ours = {(k,): v for k, v in ours.items()}
    con = duckdb.connect()
    con.register("t", table)
    select = ", ".join(f"{sql} AS {n}" for (_, sql), n in zip(aggregates, names))
    theirs = {tuple(r[:len(key)]): r[len(key):] for r in
              con.execute(f"SELECT {', '.join(key)}, {select} FROM t GROUP BY ALL").fetchall()}
    assert ours.keys() == theirs.keys()
    sketches = aggregates is AGGREGATES  # (the list ends with the HLL and the KLL sketch)
    exact = len(aggregates) - 2 if sketches else len(aggregates)
    variances = {names[i] for i, r in enumerate(reducers) if isinstance(r, dpa.Var)}
    rows = table.select([*key, "y"]).to_pylist()
    nan_keys = {tuple(r[c] for c in key) for r in rows if isinstance(r["y"], float) and math.isnan(r["y"])}
    for k, want in theirs.items():
        got = ours[k]
        y_nan = k in nan_keys
        for i, (a, b) in enumerate(zip(got[:exact], want[:exact])):
            if names[i] in variances and y_nan and isinstance(a, float) and math.isnan(a):
                continue  # a NaN makes the variance NaN (Spark); DuckDB gives 0 for a lone NaN
            assert _close(a, b) if not isinstance(a, list) else (
                len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))), (k, names[i], a, b)
        if sketches:
            hll, kll = reducers[-2], reducers[-1]
            assert abs(got[-2] - want[-2]) <= 3 * hll.relative_error * want[-2] + 1e-9
            assert _quantiles_ok(want[-1], got[-1], kll.quantiles, kll.rank_error), (k, want[-1], got[-1])


#: The aggregates whose partial states are plain Arrow aggregates: with an integer or date
#: key and no other aggregate, a batch is grouped by key value (dpa.aggregates.dense).
PLAIN = [AGGREGATES[i] for i in (0, 1, 2, 3, 4, 5, 6, 9, 10, 12, 13, 14)]


# No shrinking: a failing table is reported as generated (shrinking one takes minutes here).
@settings(max_examples=30, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(table=tables(), key=st.sampled_from([["k1"], ["k2"], ["k1", "k2"], ["k3"], ["d"]]),
       policy=st.sampled_from(["hybrid", "hash", "shuffle", "pkg"]), batch_size=st.sampled_from([7, 32, 1000]))
def test_every_aggregate_equals_duckdb(table, key, policy, batch_size):
    check_against_duckdb(table, key, policy, batch_size)


@settings(max_examples=30, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(table=tables(), key=st.sampled_from([["k3"], ["d"]]), policy=st.sampled_from(["hybrid", "shuffle", "pkg"]),
       batch_size=st.sampled_from([7, 32, 1000]))
def test_plain_aggregates_by_integer_and_date_keys_equal_duckdb(table, key, policy, batch_size):
    with mock.patch.object(dense, "DENSE_MIN_GROUPS", 0):  # (these batches have few groups)
        check_against_duckdb(table, key, policy, batch_size, PLAIN)


def _large_table(seed: int, keys) -> pa.Table:
    """50,000 records: the key columns ``keys(rng, n)`` gives, then the aggregated columns."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = 50_000
    x = rng.normal(size=n)
    x[rng.random(n) < 0.01] = np.nan
    return pa.table({
        **keys(rng, n), "v": rng.integers(-1000, 1000, n), "x": x, "y": rng.normal(1e6, 1, n),
        "s": pa.array([f"s{i}" for i in rng.integers(0, 5000, n)]), "b": rng.random(n) < 0.2,
    })


def test_large_skewed_table_split_by_shuffle():
    import numpy as np

    table = _large_table(7, lambda rng, n: {
        "k1": pa.array(np.where(rng.random(n) < 0.7, "hot", rng.choice(["a", "b", "ü"], n))),
        "k2": rng.integers(0, 3, n)})
    check_against_duckdb(table, ["k1", "k2"], "shuffle", 2048)


def test_large_table_grouped_by_an_integer_key_split_by_shuffle():
    import numpy as np

    table = _large_table(11, lambda rng, n: {"k3": (rng.zipf(1.2, n) % 20_000).astype(np.int32)})
    check_against_duckdb(table, ["k3"], "shuffle", 4096)
    with mock.patch.object(dense, "DENSE_MIN_GROUPS", 0):
        check_against_duckdb(table, ["k3"], "shuffle", 4096, PLAIN)


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 30), st.one_of(st.none(), st.integers(-10**12, 10**12))), max_size=120),
       scale=st.sampled_from([0, 2, 4, 9]), policy=st.sampled_from(["hybrid", "shuffle"]))
def test_decimal_means_and_deviations_equal_duckdb(rows, scale, policy):
    """A decimal's mean is the float64 nearest to it where DuckDB's is: exactly for a key
    with one value (``avg(3.30)`` is ``3.3``), within rounding of the sum otherwise."""
    import decimal

    table = pa.table({"k": pa.array([k for k, _ in rows], pa.int64()),
                      "p": pa.array([None if u is None else decimal.Decimal(u).scaleb(-scale) for _, u in rows],
                                    pa.decimal128(18, scale)),
                      "y": pa.nulls(len(rows), pa.float64())})  # (check_against_duckdb reads y's NaN keys)
    aggregates = [(lambda: dpa.Mean("p"), "avg(p)"), (lambda: dpa.Std("p"), "stddev_samp(p)"),
                  (lambda: dpa.Var("p", sample=False), "var_pop(p)"), (lambda: dpa.Sum("p"), "sum(p)"),
                  (lambda: dpa.Min("p"), "min(p)"), (lambda: dpa.Max("p"), "max(p)")]
    check_against_duckdb(table, ["k"], policy, 16, aggregates)
    ones = {}
    for k, u in rows:
        if u is not None:
            ones[k] = None if k in ones else u
    means = dpa.run(table, key="k", reducer=dpa.Mean("p"), runtime="local", policy=policy).to_dict()
    con = duckdb.connect()
    con.register("t", table)
    theirs = dict(con.execute("SELECT k, avg(p) FROM t GROUP BY k").fetchall())
    for k, u in ones.items():
        if u is not None:  # the key's one value
            assert means[k] == theirs[k] == float(decimal.Decimal(u).scaleb(-scale)), (k, means[k], theirs[k])
