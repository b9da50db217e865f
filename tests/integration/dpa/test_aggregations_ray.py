"""Several aggregates and the new key types on Ray (the broad property test runs locally:
tests/unit/dpa/aggregates/test_duckdb_differential.py)."""

from __future__ import annotations

import datetime as dt
import decimal

import numpy as np
import pyarrow as pa
import pytest

import dpa
from dpa.errors import KeyEncodingError

pytestmark = pytest.mark.usefixtures("ray_session")

duckdb = pytest.importorskip("duckdb")


@pytest.mark.parametrize("policy", ["shuffle", "hybrid"])
def test_several_aggregates_on_ray_equal_duckdb(policy):
    rng = np.random.default_rng(11)
    n = 40_000
    table = pa.table({
        "day": pa.array(np.datetime64("2024-01-01") + (rng.zipf(1.3, n) % 30).astype("timedelta64[D]")),
        "amount": pa.array(rng.integers(0, 10**6, n).astype(np.int64)),
        "price": pa.array(rng.integers(0, 10**4, n) / 100, pa.float64()).cast(pa.decimal128(10, 2)),
        "session": pa.array([f"s{v}" for v in rng.integers(0, 3000, n)]),
        "latency": rng.exponential(10.0, n),
    })
    reducers = [dpa.Count(), dpa.Sum("amount"), dpa.Mean("latency"), dpa.CountDistinct("session"),
                dpa.Std("latency"), dpa.Max("price"), dpa.MinBy("session", by="latency")]
    result = dpa.run(table, key="day", reducer=reducers, runtime="ray", policy=policy, num_reducers=2, batch_size=4096)
    out = result.to_arrow()
    assert out.schema.field("day").type == pa.date32()
    ours = result.to_dict()
    con = duckdb.connect()
    con.register("t", table)
    rows = con.execute("SELECT day, count(*), sum(amount), avg(latency), count(DISTINCT session), stddev_samp(latency), "
                       "max(price), arg_min_null(session, latency) FROM t GROUP BY day").fetchall()
    assert len(rows) == len(ours)
    for day, *want in rows:
        got = ours[day]
        assert got[0] == want[0] and got[1] == want[1] and got[3] == want[3] and got[5] == want[5]
        assert got[6] == want[6]  # (the latencies differ on every row: one row is the answer)
        assert got[2] == pytest.approx(want[2], rel=1e-9) and got[4] == pytest.approx(want[4], rel=1e-9)
    if policy == "shuffle":
        assert result.stats.merged_keys > 0


def test_key_types_on_ray_and_nested_keys_rejected_before_actors_start():
    table = pa.table({"t": pa.array([dt.datetime(2024, 1, 1, h % 3, tzinfo=dt.timezone.utc) for h in range(90)],
                                    pa.timestamp("ms", tz="UTC")),
                      "d": pa.array([decimal.Decimal(h % 2) for h in range(90)], pa.decimal128(5, 1)),
                      "x": list(range(90))})
    out = dpa.run(table, key=["t", "d"], reducer=[dpa.Count(), dpa.CollectSet("x")], runtime="ray")
    assert out.to_arrow().schema.field("t").type == pa.timestamp("ms", tz="UTC")
    assert sum(c for c, _ in out.to_dict().values()) == 90
    nested = pa.table({"k": pa.array([[1], [2]]), "x": [1, 2]})
    with pytest.raises(KeyEncodingError, match="key column 'k'.*list<item: int64>"):
        dpa.run(nested, key="k", runtime="ray")


def test_dictionary_value_columns_on_ray_equal_the_decoded_columns():
    rng = np.random.default_rng(3)
    n = 3000
    plain = pa.table({"k": rng.zipf(1.4, n) % 50, "s": pa.array([f"s{v}" for v in rng.integers(0, 30, n)]),
                      "x": rng.integers(0, 100, n).astype(np.float64)})
    encoded = plain.set_column(1, "s", plain["s"].dictionary_encode()).set_column(2, "x", plain["x"].dictionary_encode())
    reducers = [dpa.Min("s"), dpa.Max("s"), dpa.Sum("x"), dpa.Std("x"), dpa.CountDistinct("s")]
    got = dpa.run(encoded, key="k", reducer=reducers, runtime="ray", num_mappers=2, num_reducers=4, batch_size=500,
                  policy="shuffle").to_arrow().sort_by("k")
    want = dpa.run(plain, key="k", reducer=reducers, runtime="local").to_arrow().sort_by("k")
    assert got.schema == want.schema
    for name in got.column_names:
        g, w = got[name].to_pylist(), want[name].to_pylist()
        assert g == pytest.approx(w) if name.startswith("stddev") else g == w, name


def test_decimal_and_integer_means_on_ray_are_exact_under_every_policy():
    """On Ray, with keys split and moved: decimal(38, 6) and int64 means (sums past 2**63)
    are the nearest doubles to the exact means, the same under each policy."""
    from fractions import Fraction

    rng = np.random.default_rng(4)
    n = 30_000
    keys = rng.zipf(1.3, n) % 50
    unscaled = [int(v) * 10**18 + int(w) for v, w in zip(rng.integers(-10**13, 10**13, n), rng.integers(0, 10**18, n))]
    big = rng.integers(2**62, 2**63 - 1, n, dtype=np.int64)
    table = pa.table({"k": keys, "p": pa.array([decimal.Decimal(f"{u}E-6") for u in unscaled], pa.decimal128(38, 6)),
                      "i": big})
    want: dict[int, list[int]] = {}
    for k, u, b in zip(keys.tolist(), unscaled, big.tolist()):
        entry = want.setdefault(k, [0, 0, 0])
        entry[0] += u
        entry[1] += b
        entry[2] += 1
    exact = {k: (float(Fraction(u, c * 10**6)), float(Fraction(b, c))) for k, (u, b, c) in want.items()}
    for policy in ("hash", "shuffle", "hybrid"):
        result = dpa.run(table, key="k", reducer=[dpa.Mean("p"), dpa.Mean("i")], runtime="ray", policy=policy,
                         num_reducers=2, batch_size=2048)
        assert result.to_dict() == exact, policy
