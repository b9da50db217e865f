"""The ``dpa`` command line finds experiments, benchmarks, named workloads and reference
tables through entry points (dpa.experiments, dpa.benchmarks, dpa.inputs, dpa.references),
and works without any of them for files and policies."""

from __future__ import annotations

import json
import textwrap
from importlib.metadata import EntryPoint

import pytest

from dpa.tools.cli import main, plugins

PLUGIN_MODULE = "dpa_cli_test_plugins"

PLUGIN_SOURCE = textwrap.dedent('''
    from dpa.tools.cli.inputs import Input

    CALLS = []
    REFERENCE = {("WL1", "halving"): (0.5, 0.25)}

    def experiment(argv):
        CALLS.append(("experiment", list(argv)))
        if "--out" in argv:
            return [{"workload": "WL1", "method": "halving", "no_lb": 0.5, "with_lb": 0.3}]
        return 0

    def benchmark(argv):
        CALLS.append(("benchmark", list(argv)))
        return 3

    def seven(name, options):
        CALLS.append(("input", name, options.repeat))
        keys = ["a", "b", "a", "c", "a", "b", "a"] * options.repeat
        return Input(keys, None, f"{name} x{options.repeat}", len(keys))
''')


def fake_entry_points(monkeypatch, entries: dict[str, dict[str, str]]) -> None:
    """Makes dpa.tools.cli.plugins see ``{group: {name: value}}`` instead of the installed entry points."""
    eps = [EntryPoint(name, value, group) for group, named in entries.items() for name, value in named.items()]
    monkeypatch.setattr(plugins, "entry_points", lambda group: [ep for ep in eps if ep.group == group])


@pytest.fixture
def plugin_module(tmp_path, monkeypatch):
    (tmp_path / f"{PLUGIN_MODULE}.py").write_text(PLUGIN_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, PLUGIN_MODULE, raising=False)
    fake_entry_points(monkeypatch, {
        "dpa.experiments": {"echo": f"{PLUGIN_MODULE}:experiment"},
        "dpa.benchmarks": {"tick": f"{PLUGIN_MODULE}:benchmark", "gone": "no_such_module_xyz:main"},
        "dpa.inputs": {"Seven": f"{PLUGIN_MODULE}:seven"},
        "dpa.references": {"echo": f"{PLUGIN_MODULE}:REFERENCE"},
    })
    import importlib

    return importlib.import_module(PLUGIN_MODULE)


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_usage_error(result: tuple[int, str, str], *needles: str) -> None:
    code, _, err = result
    assert code == 2, result
    (line,) = err.strip().splitlines()
    assert line.startswith("dpa: error: "), line
    for needle in needles:
        assert needle in line, line


def test_the_repositorys_own_plugins_are_installed(capsys):
    code, out, _ = run_cli(capsys, "experiment", "--list")
    assert code == 0 and "table1" in out and "workloads.table1:main" in out and "figure3" in out
    code, out, _ = run_cli(capsys, "bench", "--list")
    assert code == 0 and "throughput" in out and "benchmarks.throughput:main" in out
    code, out, _ = run_cli(capsys, "run", "--list")
    assert code == 0 and "WL4" in out and "zipf" in out and "workloads.cli_inputs" in out
    assert plugins.find(plugins.REFERENCES, "table1") is not None


def test_experiments_benchmarks_and_inputs_come_from_the_entry_points(plugin_module, capsys, tmp_path):
    code, out, _ = run_cli(capsys, "experiment", "--list")
    assert code == 0 and out.split() == ["echo", f"{PLUGIN_MODULE}:experiment"]
    assert run_cli(capsys, "experiment", "echo", "--flag", "x")[0] == 0
    assert run_cli(capsys, "bench", "tick", "--reps", "1")[0] == 3  # the script's exit code
    assert plugin_module.CALLS == [("experiment", ["--flag", "x"]), ("benchmark", ["--reps", "1"])]
    assert_usage_error(run_cli(capsys, "experiment", "table1"), "unknown experiment 'table1'", "echo")
    assert_usage_error(run_cli(capsys, "bench"), "unknown benchmark 'throughput'", "gone, tick")
    assert_usage_error(run_cli(capsys, "bench", "gone"), "'gone'", "no_such_module_xyz is not installed")

    code, out, _ = run_cli(capsys, "run", "seven", "--repeat", "2", "--runtime", "local", "--json", "--no-progress")
    assert code == 0 and sum(json.loads(out)["stats"]["processed"]) == 14
    assert plugin_module.CALLS[-1] == ("input", "Seven", 2)  # matched case-insensitively, called by its name
    assert_usage_error(run_cli(capsys, "run", "WL4", "--runtime", "local"), "unknown workload 'WL4'", "Seven")

    code, out, _ = run_cli(capsys, "experiment", "--report", str(tmp_path), "echo")
    assert code == 0, out
    rows = json.loads((tmp_path / "table1.json").read_text())
    assert [(r["workload"], r["no_lb"], r["paper_no_lb"]) for r in rows] == [("WL1", 0.5, 0.5)]
    assert plugin_module.CALLS[-1] == ("experiment", ["--out", str(tmp_path / "echo_results.json")])


def test_report_needs_a_reference_registered_under_the_experiments_name(plugin_module, monkeypatch, capsys, tmp_path):
    fake_entry_points(monkeypatch, {"dpa.experiments": {"echo": f"{PLUGIN_MODULE}:experiment"}})
    assert_usage_error(run_cli(capsys, "experiment", "--report", str(tmp_path), "echo"),
                       "--report needs reference values registered as 'echo'")


def test_without_any_plugins_files_and_policies_still_work(monkeypatch, capsys, tmp_path):
    fake_entry_points(monkeypatch, {})
    assert_usage_error(run_cli(capsys, "experiment", "table1"), "no experiments are installed", "dpa.experiments")
    assert_usage_error(run_cli(capsys, "bench"), "no benchmarks are installed", "dpa.benchmarks")
    assert_usage_error(run_cli(capsys, "run", "WL4", "--runtime", "local"), "no named workloads are installed",
                       "--input FILE")
    code, out, _ = run_cli(capsys, "experiment", "--list")
    assert code == 0 and "no experiments are installed" in out

    path = tmp_path / "words.txt"
    path.write_text("to be or not to be\n")
    code, out, _ = run_cli(capsys, "run", "--input", str(path), "--runtime", "local", "--json", "--no-progress")
    assert code == 0 and json.loads(out)["stats"]["num_keys"] == 4
    code, out, _ = run_cli(capsys, "policies")
    assert code == 0 and "halving" in out

    table1 = tmp_path / "t1.json"
    table1.write_text(json.dumps([{"workload": "WL4", "method": "halving", "no_lb": 0.8, "with_lb": 0.5}]))
    code, out, _ = run_cli(capsys, "report", "--table1", str(table1), "--out", str(tmp_path / "rep"))
    assert code == 0, out
    rows = json.loads((tmp_path / "rep" / "table1.json").read_text())
    assert len(rows) == 1 and rows[0]["paper_no_lb"] is None  # no reference table installed
