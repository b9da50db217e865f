"""ApproxQuantile's final step: keys whose numbers fit a sketch exactly are read off their
sorted numbers at once, with the answers a KLL sketch of those numbers gives."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpa
from dpa.aggregates.approx import _datasketches, _exact_quantiles, _quantiles

NUMBERS = st.one_of(st.floats(allow_nan=False, width=64), st.sampled_from([0.0, -0.0, 1.0, -1.0, math.inf, -math.inf]))
QUANTILES = st.lists(st.one_of(st.sampled_from([0.0, 0.5, 0.95, 0.999, 1.0]), st.floats(0.0, 1.0)), min_size=1, max_size=4)


def _by_sketch(numbers: list[float], nans: int, qs: list[float]) -> list[float]:
    sketch = _datasketches().kll_doubles_sketch(200)
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
