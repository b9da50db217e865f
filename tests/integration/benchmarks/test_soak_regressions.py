"""The soak jobs that once failed (:func:`benchmarks.soak.regression_specs`), replayed on
Ray with the local runtime's run of each compared (both must match the oracle)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.usefixtures("ray_session")


@pytest.mark.parametrize("index", [31, 74, 100, 127])
def test_soak_job_is_right_on_ray_and_agrees_with_the_local_runtime(repo_benchmark, index):
    soak = repo_benchmark("soak")
    soak._pickle_by_value()
    spec = soak.regression_specs()[index]
    out = soak.run_job(soak._Running(spec), timeout_s=120.0, runtime="ray", local_check=True)
    assert out.outcome == "ok", out.detail
    if index == 31:
        assert out.seconds > spec.checkpoint_interval_s  # outlived the interval: no checkpoint, no merge
        assert out.checkpoints == 0
