"""ApproxQuantile's final step: keys whose numbers fit a sketch exactly are read off their
sorted numbers at once, with the answers a KLL sketch of those numbers gives."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401 (pa.compute below)
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpa
from dpa.aggregates.approx import _exact_quantiles, _quantiles
from dpa.aggregates.kll import KLL

NUMBERS = st.one_of(st.floats(allow_nan=False, width=64), st.sampled_from([0.0, -0.0, 1.0, -1.0, math.inf, -math.inf]))
QUANTILES = st.lists(st.one_of(st.sampled_from([0.0, 0.5, 0.95, 0.999, 1.0]), st.floats(0.0, 1.0)), min_size=1, max_size=4)


def _by_sketch(numbers: list[float], nans: int, qs: list[float]) -> list[float]:
    sketch = KLL(200)
    if numbers:
        sketch.update(np.array(numbers, dtype=np.float64))
    return [math.nan if v is None else v + 0.0 for v in _quantiles(sketch, nans, qs)]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(st.lists(NUMBERS, max_size=40), st.integers(0, 5)), min_size=1, max_size=8), qs=QUANTILES)
def test_exact_quantiles_are_the_sketch_s(rows, qs):
    vals = pa.array([numbers for numbers, _ in rows], pa.list_(pa.float64()))
    lengths = np.array([len(numbers) for numbers, _ in rows])
    nans = np.array([n for _, n in rows])
    flat = np.asarray(vals.flatten().to_numpy(zero_copy_only=False), dtype=np.float64)
    got = _exact_quantiles(flat, np.concatenate([[0], np.cumsum(lengths)]), nans, qs) + 0.0
    for i, (numbers, n) in enumerate(rows):
        want = _by_sketch(numbers, n, qs)
        assert all((math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
                   for a, b in zip(got[i], want)), (numbers, n, qs, got[i], want)


def test_final_step_mixes_exact_keys_sketched_keys_and_empty_keys():
    rng = np.random.default_rng(5)
    hot = rng.normal(size=5_000)  # more numbers than k: a sketch
    rows = [("hot", float(v)) for v in hot] + [("few", 3.0), ("few", 1.0), ("few", float("nan")), ("few", 2.0)]
    rows += [("none", None), ("nan", float("nan"))]
    table = pa.table({"k": [k for k, _ in rows], "v": pa.array([v for _, v in rows], pa.float64())})
    out = dpa.run(table, key="k", reducer=dpa.ApproxQuantile("v", q=[0.5, 1.0]), runtime="local").to_dict()
    assert out["few"][0] == 2.0 and math.isnan(out["few"][1])  # (NaN ranks above every number)
    assert out["none"] is None
    assert all(math.isnan(v) for v in out["nan"])
    error = dpa.ApproxQuantile("v", q=0.5).rank_error
    for q, value in zip([0.5, 1.0], out["hot"]):
        assert abs(float(np.mean(hot <= value)) - q) <= error  # (within the sketch's rank error)


def test_a_zero_quantile_is_positive_zero_whichever_zero_the_numbers_hold():
    table = pa.table({"k": ["a", "a", "b"], "v": [-0.0, -0.0, -0.0]})
    out = dpa.run(table, key="k", reducer=dpa.ApproxQuantile("v", q=0.5), runtime="local").to_dict()
    assert all(v == 0.0 and math.copysign(1.0, v) == 1.0 for v in out.values()), out


def _flights_like(seed: int) -> pa.Table:
    """Delays per carrier: 16 keys, Zipf-skewed, thousands of values for the large ones."""
    rng = np.random.default_rng(seed)
    n = 60_000
    carrier = np.array([f"c{i}" for i in range(16)])[np.minimum(rng.zipf(1.6, n) - 1, 15)]
    delay = np.round(rng.gamma(1.5, 20, n) - 15)
    delay[rng.random(n) < 0.02] = np.nan
    return pa.table({"carrier": carrier, "delay": delay})


@pytest.mark.parametrize("policy", ["hybrid", "shuffle", "hash"])
def test_two_local_runs_give_the_same_quantiles(policy):
    """The in-process runtime is deterministic: the same quantiles, bit for bit, on every run
    (each compaction's coin is a hash of its numbers, not a clock-seeded generator)."""
    table = _flights_like(3)
    reducer = [dpa.ApproxQuantile("delay", q=[0.1, 0.5, 0.9]), dpa.Median("delay")]
    runs = [dpa.run(table, key="carrier", reducer=reducer, runtime="local", policy=policy, batch_size=2000).to_dict()
            for _ in range(2)]
    assert runs[0] == runs[1] or _same_with_nan(runs[0], runs[1])
    values = {c: np.sort(table.filter(pa.compute.equal(table["carrier"], c))["delay"].to_numpy()) for c in runs[0]}
    error = dpa.ApproxQuantile("delay").rank_error
    for c, (qs, median) in runs[0].items():
        finite = values[c][~np.isnan(values[c])]
        for q, v in zip([0.1, 0.5, 0.9, 0.5], [*qs, median]):
            if math.isnan(v):
                continue
            below = np.searchsorted(finite, v, "left") / len(values[c])
            at_most = np.searchsorted(finite, v, "right") / len(values[c])
            assert below - error <= q <= at_most + error, (c, q, v)


def _same_with_nan(a, b) -> bool:
    flat = lambda r: [x for k in sorted(r) for v in r[k] for x in (v if isinstance(v, list) else [v])]  # noqa: E731
    return all((math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(flat(a), flat(b))) and a.keys() == b.keys()


def test_merging_sketches_does_not_depend_on_their_order():
    rng = np.random.default_rng(9)
    parts = []
    for size in (50, 300, 4000, 12_000, 7):
        sketch = KLL(200)
        sketch.update(rng.normal(size=size))
        parts.append(sketch)
    one = KLL.merge_all(parts).serialize()
    for seed in range(5):
        order = np.random.default_rng(seed).permutation(len(parts))
        assert KLL.merge_all([parts[i] for i in order]).serialize() == one
    assert KLL.deserialize(one).serialize() == one


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(201, 60_000), pieces=st.integers(1, 20),
       q=st.floats(0.0, 1.0))
def test_sketch_rank_error_within_kll_bound(seed, n, pieces, q):
    """Built in pieces and merged, the sketch's quantile ranks within KLL's error of q."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) if seed % 2 else np.floor(rng.pareto(1.2, n))  # (ties in the second)
    parts = []
    for chunk in np.array_split(x, pieces):
        sketch = KLL(200)
        sketch.update(chunk)
        parts.append(sketch)
    merged = KLL.merge_all(parts)
    assert merged.n == n
    v = merged.get_quantile(q, True)
    ordered = np.sort(x)
    below = np.searchsorted(ordered, v, "left") / n
    at_most = np.searchsorted(ordered, v, "right") / n
    error = dpa.ApproxQuantile("x").rank_error
    assert below - error <= q <= at_most + error, (v, below, at_most)
