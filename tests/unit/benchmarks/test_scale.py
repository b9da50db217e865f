"""benchmarks.scale --simulate: the Ray scale job in the simulator, exact and no faster than ideal."""

from __future__ import annotations

import argparse

from benchmarks.scale import simulate


def test_the_simulated_scale_job_is_exact_and_its_time_is_at_least_ideal():
    args = argparse.Namespace(cost_ms=2.0, records_per_reducer=50, seed=1, batch_size=None, policy=None, hosts=2)
    row = simulate(8, args)
    assert row["exact"] and row["reducers"] == 8 and row["hosts"] == 2
    assert row["ideal_s"] == 0.1
    assert row["x_ideal"] >= row["busiest_over_mean"] * 0.99  # (the busiest reducer's records bound the time)
    assert 0.0 < row["balancer_busy"] <= 1.0
