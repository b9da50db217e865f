"""The soak jobs that once failed (and the soak's own checks of such jobs), replayed on
``runtime="local"``; ``tests/integration/benchmarks/test_soak_regressions.py`` replays
them on Ray. Each must match the soak's pure-Python oracle."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("index", [31, 74, 100, 127])
def test_soak_job_is_right_on_the_local_runtime(repo_benchmark, index):
    soak = repo_benchmark("soak")
    spec = soak.regression_specs()[index]
    out = soak.run_job(soak._Running(spec), timeout_s=120.0, runtime="local")
    assert out.outcome == "ok", out.detail
    if index in (100, 127):
        prep = soak.prepare(spec)
        assert soak.oracle(spec, prep) == ({}, 0)  # explode dropped the only record


def test_long_jobs_are_in_every_mix_and_are_valid(repo_benchmark):
    soak = repo_benchmark("soak")
    specs = soak.make_specs(12, 21, 0.25, 0.2, 2000, 0.1, 2)
    long = [s for s in specs if s.long]
    assert [s.index for s in long] == [5]
    assert all(s.bad is None and s.cost_s * s.size >= 2 * s.num_reducers for s in long)
    mix = soak.make_specs(300, 101, 0.1, 0.1, 100_000, 0.25)
    reducers = {s.reducer for s in mix if s.long}
    assert len([s for s in mix if s.long]) == 30 and "nomerge" in reducers and len(reducers) > 2


def test_a_disagreement_of_the_runtimes_is_reported(repo_benchmark):
    soak = repo_benchmark("soak")
    ok = ("ok", "3 keys", None, 0)
    assert soak._disagreement(ok, ok) is None
    failed = ("unexpected_error", "boom", NotImplementedError("no merge"), None)
    assert "Ray: ok" in soak._disagreement(ok, failed)
    assert soak._disagreement(failed, ("unexpected_error", "boom", NotImplementedError("x"), None)) is None


def test_only_replays_the_named_jobs_of_a_mix(repo_benchmark, capsys):
    soak = repo_benchmark("soak")
    assert soak.main(["--jobs", "40", "--seed", "33", "--print-specs", "--only", "5,31"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == ["#5", "#31"] and "long(" in lines[0]
