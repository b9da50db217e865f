"""A short run of the soak (``benchmarks/soak/``) against the session's Ray.

Twelve mixed jobs from two driver threads, with bad inputs and actor kills between jobs:
no wrong result, no unexpected error, no hang, no dpa actor left after ``dpa.shutdown()``,
and the local runtime agrees with Ray on every job. One job is a long one, lasting more
than a default checkpoint interval (1 s), so the checkpoint path runs.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.usefixtures("ray_session")


def test_soak_smoke_has_no_wrong_results_unexpected_errors_hangs_or_leaks(tmp_path, repo_benchmark):
    soak = repo_benchmark("soak")
    out = tmp_path / "soak.json"
    code = soak.main([
        "--jobs", "12", "--seed", "21", "--threads", "2", "--kill-rate", "0.25", "--bad-rate", "0.2",
        "--max-records", "2000", "--max-width", "2", "--shape-change-rate", "0.1", "--timeout-s", "30",
        "--mem-every", "4", "--json", str(out),
    ])
    summary = json.loads(out.read_text())
    failures = "\n".join(f"{f['job']}: {f['outcome']}: {f['detail'][:300]}" for f in summary["failures"])
    outcomes = summary["outcomes"]
    assert summary["jobs_run"] == 12, failures
    assert outcomes["wrong_result"] == 0, failures
    assert outcomes["unexpected_error"] == 0, failures
    assert outcomes["hang"] == 0, failures
    assert outcomes["runtime_mismatch"] == 0, failures
    assert summary["local_check"]
    assert summary["long_jobs_run"] == 1 and summary["long_job_seconds"][0] > 1.0, summary["long_job_seconds"]
    assert outcomes["harness_error"] == 0, failures
    assert summary["raw_ray_errors"] == 0, failures
    assert summary["kills_injected"] >= 1
    assert summary["jobs_after_kill_failed"] == 0, failures
    assert summary["leaked_actors"] == [], summary["leaked_actors"]
    assert outcomes["ok"] + outcomes["expected_error"] == 12
    assert code in (0, 1)  # 1 only for memory growth, which 12 small jobs cannot judge
