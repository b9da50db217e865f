"""Smoke tests of the ``dpa`` command line, run as ``python -m dpa.tools.cli`` in subprocesses.

Each subcommand once (small), exit codes, and one-line errors without a traceback for
bad arguments. Commands whose script another module provides (experiment, simulate,
bench) are skipped while that module is missing. Runs in about a minute; the two Ray
commands dominate (each starts and stops its own small Ray).
"""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workloads.paper import workload

ROOT = Path(__file__).resolve().parents[5]


def dpa_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("RAY_ADDRESS", None)  # each command starts (and stops) its own Ray
    return subprocess.run([sys.executable, "-m", "dpa.tools.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def assert_ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout[-2000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("dpa: error: ") and "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


WL4_FORCED = ["--policy", "halving", "--token-spacing", "hashed", "--rounds", "2", "--cost-us", "10000", "--batch-size", "5", "--chunk-size", "1"]


def test_run_local_with_report_output_and_json(tmp_path):
    out = tmp_path / "counts.parquet"
    proc = dpa_cli("run", "WL4", "--runtime", "local", *WL4_FORCED, "--report", str(tmp_path / "rep"),
                   "--output", str(out), "--json")
    assert_ok(proc)
    payload = json.loads(proc.stdout)
    stats, base = payload["stats"], payload["baseline_stats"]
    assert sum(stats["processed"]) == 100 and stats["runtime"] == "local"
    assert stats["rebalances"] and stats["rebalances"][0]["action"] == "halve"
    assert base["rebalances"] == [] and base["skew"] == pytest.approx(0.80, abs=0.01)  # the No-LB baseline
    assert {p.name for p in (tmp_path / "rep").iterdir()} == {
        "stats.json", "baseline_stats.json", "queues.png", "records.png", "tokens.png", "report.md"}
    import pyarrow.parquet as pq

    table = pq.read_table(out)
    assert dict(zip(*(table.column(i).to_pylist() for i in range(2)))) == dict(collections.Counter(workload("WL4")))


def test_run_local_human_summary_and_no_baseline(tmp_path):
    proc = dpa_cli("run", "zipf", "--records", "20k", "--keys", "500", "--runtime", "local", "--top", "3",
                   "--report", str(tmp_path), "--no-baseline")
    assert_ok(proc)
    assert "20,000 records" in proc.stdout and "top 3 keys" in proc.stdout and "S=" in proc.stdout
    assert not (tmp_path / "baseline_stats.json").exists() and (tmp_path / "records.png").exists()


def test_run_on_ray(tmp_path):
    proc = dpa_cli("run", "WL4", "--mappers", "2", "--reducers", "2", "--policy", "doubling", "--cost-us", "2000",
                   "--batch-size", "10", "--chunk-size", "2", "--timeout", "120", "--json",
                   "--report", str(tmp_path), timeout=180)
    assert_ok(proc)
    payload = json.loads(proc.stdout)
    assert payload["stats"]["runtime"] == "ray" and sum(payload["stats"]["processed"]) == 100
    assert sum(payload["baseline_stats"]["processed"]) == 100
    assert (tmp_path / "queues.png").stat().st_size > 5_000


@pytest.mark.parametrize("args,needles", [
    (["run", "WL4", "--runtime", "local", "--policy", "nope"], ["unknown policy 'nope'", "halving"]),
    (["run", "--input", "/no/such/file.csv", "--runtime", "local"], ["/no/such/file.csv"]),
    (["run", "WL4", "--runtime", "local", "--tau", "-0.5"], ["tau"]),
])
def test_bad_arguments_give_a_one_line_error(args, needles):
    assert_one_line_error(dpa_cli(*args, timeout=30), *needles)


@pytest.mark.parametrize("args,needles", [
    (["run", "WL4", "--runtime", "local", "--rounds", "-1"], ["max_rounds"]),
    (["run", "WL4", "--runtime", "local", "--initial-tokens", "3"], ["power of two"]),
    (["run", "WL9"], ["unknown workload 'WL9'"]),
    (["run"], ["WORKLOAD"]),
    (["run", "WL4", "--no-such-option"], ["--no-such-option"]),
    (["run", "zipf", "--records", "10x"], ["--records"]),
    (["run", "WL4", "--dashboard", "--runtime", "local"], ["--dashboard"]),
    (["run", "WL4", "--runtime", "local", "--output", "out.txt"], ["--output"]),
    (["run", "WL4", "--runtime", "local", "--reducer", "sum"], ["--value"]),
    (["experiment", "no-such-experiment"], ["unknown experiment", "table1"]),
    (["experiment"], ["name an experiment", "table1"]),
    (["experiment", "--report", "/tmp/x", "figure3"], ["--report needs reference values", "table1"]),
    (["bench", "no_such_bench"], ["no_such_bench"]),
    (["report", "--out", "/tmp/x", "/no/such/stats.json"], ["/no/such/stats.json"]),
    (["frobnicate"], ["invalid choice"]),
])
def test_more_bad_arguments_in_process(args, needles, capsys):
    """The same contract through dpa.tools.cli.main (no subprocess: these fail before any work)."""
    from dpa.tools.cli import main

    code = main(args)
    captured = capsys.readouterr()
    assert_one_line_error(subprocess.CompletedProcess(args, code, captured.out, captured.err), *needles)


def test_bad_csv_key_lists_the_columns(tmp_path):
    path = tmp_path / "events.csv"
    path.write_text("user,bytes\nann,3\nbob,4\nann,5\n")
    assert_one_line_error(dpa_cli("run", "--input", str(path), "--key", "nope", "--runtime", "local"),
                          "'nope'", "user, bytes")
    proc = dpa_cli("run", "--input", str(path), "--key", "user", "--reducer", "sum", "--value", "bytes",
                   "--runtime", "local", "--json")
    assert_ok(proc)
    assert json.loads(proc.stdout)["stats"]["num_keys"] == 2


def test_experiment_table1_local_with_report(tmp_path):
    proc = dpa_cli("experiment", "--report", str(tmp_path), "table1", "--runtime", "local", "--runs", "1",
                   "--workloads", "WL4", "WL5", timeout=120)
    assert proc.returncode in (0, 1), proc.stderr  # 1 = a paper check failed, which is the script's verdict
    assert "Traceback" not in proc.stderr
    assert (tmp_path / "table1_results.json").exists()
    if proc.returncode == 0:
        assert (tmp_path / "table1.png").stat().st_size > 5_000


def test_simulate_small():
    proc = dpa_cli("simulate", "zipf", "--records", "5000", "--keys", "200", "--policy", "hash,pkg", "--json")
    assert_ok(proc)
    results = json.loads(proc.stdout)
    assert set(results) == {"hash", "pkg"}
    for r in results.values():
        assert sum(r["loads"]) == 5000
    assert results["pkg"]["skew"] <= results["hash"]["skew"]
    assert_one_line_error(dpa_cli("simulate", "WL4", "--policy", "nope"), "unknown policy")


def test_bench_small():
    proc = dpa_cli("bench", "--rows", "20000", "--reps", "1", "--no-spark", "--policies", "doubling",
                   "--mappers", "2", "--reducers", "2", timeout=180)
    assert_ok(proc)
    assert "throughput" in proc.stdout


def test_installed_experiments_benchmarks_and_workloads_are_listed():
    """What workloads and benchmarks register (dpa.experiments, dpa.benchmarks, dpa.inputs)."""
    for args, needles in ((["experiment", "--list"], ["table1", "figure3", "workloads.table1:main"]),
                          (["bench", "--list"], ["throughput", "benchmarks.throughput:main"]),
                          (["run", "--list"], ["WL4", "zipf", "LN1"])):
        proc = dpa_cli(*args, timeout=30)
        assert_ok(proc)
        for needle in needles:
            assert needle in proc.stdout, (args, proc.stdout)


def test_policies_and_help():
    proc = dpa_cli("policies")
    assert_ok(proc)
    assert "halving" in proc.stdout and "doubling" in proc.stdout
    assert_ok(dpa_cli("--help"))
    assert_ok(dpa_cli("run", "--help"))


def test_the_cli_in_process_leaves_a_ray_it_did_not_start_running(ray_session, capsys):
    import ray

    from dpa.tools.cli import main

    assert ray.is_initialized()
    assert main(["policies"]) == 0
    assert main(["run", "WL1", "--runtime", "local"]) == 0
    assert ray.is_initialized()  # the CLI stops only a Ray it started itself
