"""Means of integers and decimals are exact: the float64 nearest to the exact mean, the same
under every policy, with sums past 2**53, past int64 and of 38-digit decimals; and Spark's
decimal ``avg`` (``Mean(as_decimal=True)``). The exact sums and counts come from DuckDB
(hugeint sums) where its types hold them, else from Python's integers; the one rounding
is Python's ``int / int``."""

from __future__ import annotations

import decimal
from fractions import Fraction

import pyarrow as pa
import pyarrow.compute  # noqa: F401 (pa.compute below)
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import dpa
from dpa.aggregates.exact_means import mean_input_type, mean_sum_type, spark_avg_unscaled

duckdb = pytest.importorskip("duckdb")

POLICIES = ["hash", "hybrid", "doubling", "halving", "shuffle", "pkg"]
SETTINGS = dict(deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def keyed_values(draw, limit: int):
    """Rows ``(key, value)``: one hot key holding most of them, values in ``[-limit, limit]``
    with the extremes likely (so that sums leave 2**53 and 2**63), a few nulls."""
    n = draw(st.integers(1, 160))
    hot = draw(st.floats(0.3, 0.95))
    value = st.one_of(st.none(), st.integers(-limit, limit), st.sampled_from([limit, -limit, limit - 1]))
    rows = []
    for _ in range(n):
        key = 0 if draw(st.floats(0, 1)) < hot else draw(st.integers(1, 12))
        rows.append((key, draw(value)))
    return rows


def _dec(unscaled: int, scale: int) -> decimal.Decimal:
    return decimal.Decimal(f"{unscaled}E-{scale}")  # (exact; Decimal.scaleb rounds to 28 digits)


def _exact(rows) -> dict[int, Fraction | None]:
    sums: dict[int, list[int]] = {}
    for k, v in rows:
        entry = sums.setdefault(k, [0, 0])
        if v is not None:
            entry[0] += v
            entry[1] += 1
    return {k: (Fraction(s, c) if c else None) for k, (s, c) in sums.items()}


def _means_under_every_policy(table: pa.Table, batch_size: int, reducer=lambda: dpa.Mean("p")) -> dict[int, object]:
    results = []
    for policy in POLICIES:
        got = dpa.run(table, key="k", reducer=reducer(), runtime="local", policy=policy, batch_size=batch_size,
                      num_mappers=2, num_reducers=3).to_dict()
        results.append(got)
    for policy, got in zip(POLICIES[1:], results[1:]):
        assert got == results[0], policy  # bit for bit, whatever the policy split or moved
    return results[0]


@settings(max_examples=15, **SETTINGS)
@given(rows=keyed_values(10**18 - 1), scale=st.sampled_from([0, 2, 6, 18]), batch_size=st.sampled_from([5, 40, 1000]))
def test_decimal18_means_are_exact_under_every_policy(rows, scale, batch_size):
    """decimal(18, s): DuckDB's exact sum and count, divided once, is dpa's mean."""
    dtype = pa.decimal128(18, scale)
    table = pa.table({"k": pa.array([k for k, _ in rows], pa.int64()),
                      "p": pa.array([None if v is None else _dec(v, scale) for _, v in rows], dtype)})
    ours = _means_under_every_policy(table, batch_size)
    con = duckdb.connect()
    con.register("t", table)
    for k, total, count in con.execute("SELECT k, sum(p), count(p) FROM t GROUP BY k").fetchall():
        want = None if count == 0 else float(Fraction(total) / count)  # (Fraction of a Decimal: exact)
        assert ours[k] == want, (k, ours[k], want)


@settings(max_examples=10, **SETTINGS)
@given(rows=keyed_values(10**38 // 200), scale=st.sampled_from([0, 10, 37]), batch_size=st.sampled_from([5, 1000]))
def test_decimal38_means_are_exact_under_every_policy(rows, scale, batch_size):
    """decimal(38, s) values of up to 36 digits, whose sums reach 38 (and 2**126) but no
    further: Python's exact sums."""
    dtype = pa.decimal128(38, scale)
    table = pa.table({"k": pa.array([k for k, _ in rows], pa.int64()),
                      "p": pa.array([None if v is None else _dec(v, scale) for _, v in rows], dtype)})
    ours = _means_under_every_policy(table, batch_size)
    want = {k: None if m is None else float(m / 10**scale) for k, m in _exact(rows).items()}
    assert ours == want


@settings(max_examples=15, **SETTINGS)
@given(rows=keyed_values(2**63 - 1), batch_size=st.sampled_from([5, 40, 1000]))
def test_int64_means_past_2_53_are_exact_under_every_policy(rows, batch_size):
    """int64 values near 2**63: sums far past 2**53 and int64, DuckDB's hugeint sums."""
    table = pa.table({"k": pa.array([k for k, _ in rows], pa.int64()),
                      "p": pa.array([v for _, v in rows], pa.int64())})
    ours = _means_under_every_policy(table, batch_size)
    con = duckdb.connect()
    con.register("t", table)
    for k, total, count in con.execute("SELECT k, sum(p)::HUGEINT, count(p) FROM t GROUP BY k").fetchall():
        assert ours[k] == (None if count == 0 else total / count), k  # (int / int: rounded once)


def test_duckdbs_own_avg_agrees_where_it_rounds_once():
    """DuckDB's avg of a decimal(15, 2) is the nearest float64 too: dpa's equals it."""
    import numpy as np

    rng = np.random.default_rng(5)
    n = 20_000
    keys = rng.zipf(1.3, n) % 200
    cents = rng.integers(0, 10**6, n)
    table = pa.table({"k": keys, "p": pa.array([decimal.Decimal(int(c)).scaleb(-2) for c in cents],
                                               pa.decimal128(15, 2))})
    ours = _means_under_every_policy(table, 1000)
    con = duckdb.connect()
    con.register("t", table)
    theirs = dict(con.execute("SELECT k, avg(p) FROM t GROUP BY k").fetchall())
    assert ours == theirs


def _spark_avg(values: list[int | None], scale: int) -> decimal.Decimal | None:
    """Spark's avg, written from its rules (``DecimalDivideWithOverflowCheck``): sum / count
    rounded half up to 39 decimals, then half up to the result's scale ``s + 4``."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    ctx = decimal.Context(prec=200, rounding=decimal.ROUND_HALF_UP)
    quotient = ctx.divide(_dec(sum(present), scale), decimal.Decimal(len(present)))
    step = ctx.quantize(quotient, decimal.Decimal("1E-39"))
    return ctx.quantize(step, decimal.Decimal(f"1E-{min(38, scale + 4)}"))


@settings(max_examples=15, **SETTINGS)
@given(rows=keyed_values(10**15 - 1), scale=st.sampled_from([0, 2, 5]), batch_size=st.sampled_from([5, 1000]))
def test_as_decimal_is_sparks_avg(rows, scale, batch_size):
    """``Mean(as_decimal=True)`` of a decimal(15, s): decimal(19, s + 4), Spark's value."""
    dtype = pa.decimal128(15, scale)
    table = pa.table({"k": pa.array([k for k, _ in rows], pa.int64()),
                      "p": pa.array([None if v is None else _dec(v, scale) for _, v in rows], dtype)})
    result = dpa.run(table, key="k", reducer=dpa.Mean("p", as_decimal=True), runtime="local", batch_size=batch_size)
    assert result.to_arrow().schema.field("mean").type == pa.decimal128(19, scale + 4)
    ours = _means_under_every_policy(table, batch_size, lambda: dpa.Mean("p", as_decimal=True))
    by_key: dict[int, list[int | None]] = {}
    for k, v in rows:
        by_key.setdefault(k, []).append(v)
    assert ours == {k: _spark_avg(vs, scale) for k, vs in by_key.items()}


def test_spark_avg_rounds_twice_as_spark_does():
    """Spark rounds the quotient to 39 decimals, then to the result's scale: a value just
    below a half at the result's scale, but a half after the first rounding, goes up."""
    assert spark_avg_unscaled(1, 3, 0, 4) == 3333
    assert spark_avg_unscaled(-2, 3, 0, 4) == -6667  # half up is away from zero
    assert spark_avg_unscaled(5, 2, 1, 5) == 25000  # (0.5 / 2 = 0.25 exactly)
    # total / count = 0.00004999...9 (35 nines, then more) at scale 0: 0.0000500...0 at 39
    # decimals, then 0.0001 at 4 (one rounding would give 0.0000).
    count = 10**36 + 1
    total = (5 * count) // 10**5  # 5e-5 - 5e-41: just below 0.00005 * count
    assert Fraction(total, count) < Fraction(5, 10**5)
    assert round(Fraction(total, count) * 10**39) == 5 * 10**34
    assert spark_avg_unscaled(total, count, 0, 4) == 1


@pytest.mark.parametrize("dtype", [pa.decimal128(1, 0), pa.decimal128(15, 2), pa.decimal128(28, 28)])
def test_the_sum_type_tells_the_input_type(dtype):
    assert mean_input_type(mean_sum_type(dtype)) == dtype


@pytest.mark.parametrize("policy", ["hash", "shuffle", "hybrid"])
@pytest.mark.parametrize("reducer", [lambda: dpa.Mean("p"), lambda: dpa.Sum("p")], ids=["mean", "sum"])
def test_sums_past_38_digits_raise_never_wrap(policy, reducer):
    """Arrow's 128-bit decimal sum wraps around past 2**127 (ten 38-digit values) without a
    word: dpa sums such a column in 256 bits and raises where a key's sum leaves 38 digits,
    as Spark in ANSI mode (DuckDB raises too); a sum that stays within them is exact."""
    big, minus = _dec(10**38 - 1, 2), _dec(-(10**38 - 1), 2)  # (Decimal's unary minus rounds to 28 digits)
    table = pa.table({"k": [1] * 20 + [2] * 20,
                      "p": pa.array([big] * 20 + [big, minus] * 10, pa.decimal128(38, 2))})
    with pytest.raises(dpa.JobFailedError, match="more than 38 digits"):
        dpa.run(table, key="k", reducer=reducer(), runtime="local", policy=policy, batch_size=4)
    # Sums of up to 8 values of 38 digits (no part of which can leave 38 digits) go
    # through the 256-bit path (past the float64 bound) and come back exact.
    values = [_dec(v, 2) for v in [10**37 - 3, 10**37 - 1, -(10**37) + 7, 10**37] * 2]
    fine = pa.table({"k": [2] * 8, "p": pa.array(values, pa.decimal128(38, 2))})
    out = dpa.run(fine, key="k", reducer=[dpa.Mean("p"), dpa.Sum("p")], runtime="local", policy=policy,
                  batch_size=3).to_dict()
    total = 2 * (2 * 10**37 + 3)
    assert out == {2: (float(Fraction(total, 800)), _dec(total, 2))}


def test_float_means_keep_the_float_path():
    """A float column's state is a float64 sum (vectorised, rounded as any float sum)."""
    table = pa.table({"k": [1, 1, 2], "x": [0.1, 0.2, None]})
    result = dpa.run(table, key="k", reducer=dpa.Mean("x"), runtime="local").to_dict()
    assert result == {1: (0.1 + 0.2) / 2, 2: None}
    state = dpa.Mean("x").partial_from_batch(table.append_column("h", pa.array([0, 0, 1], pa.uint32())), ["k", "h"])
    assert state.schema.field("msum").type == pa.float64()
