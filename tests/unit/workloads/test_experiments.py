"""Tests for the paper reproduction scripts (workloads.table1, workloads.figure3).

They use the in-process runtime (virtual time, no Ray), so they take a few seconds.
"""

from __future__ import annotations

import argparse
import importlib
import json
from collections import Counter

import pytest

from workloads import experiment, figure3, harness, table1
from workloads.experiment import (
    ResultMismatchError,
    Settings,
    hot_relief,
    instant_lb,
    run_cell,
    run_job,
)
from workloads.paper import METHODS, PAPER_TABLE1, WORKLOAD_NAMES, no_lb_skew, workload


def _meta() -> dict:
    return harness.metadata("workloads.table1", [], 0.1, runtime="local", runs=1, settings=Settings().to_dict())


@pytest.fixture(scope="module")
def local_table1() -> list[dict]:
    return table1.run_table1("local", runs=1, log=None)


def test_table1_local_no_lb_matches_paper(local_table1: list[dict]) -> None:
    assert [(r["workload"], r["method"]) for r in local_table1] == [
        (w, m) for w in WORKLOAD_NAMES for m in METHODS
    ]
    for row in local_table1:
        paper_no_lb, paper_lb = PAPER_TABLE1[(row["workload"], row["method"])]
        assert row["paper_no_lb"] == paper_no_lb and row["paper_with_lb"] == paper_lb
        ours = row["no_lb"]["skew_mean"]
        assert abs(ours - paper_no_lb) <= 0.01, row["workload"]
        assert row["no_lb_ok"]
        # No LB: every letter is processed by its initial owner, whatever the timing.
        assert ours == pytest.approx(no_lb_skew(workload(row["workload"]), row["method"]))
        assert row["no_lb"]["runs"][0]["rebalances"] == []
        assert row["no_lb"]["runs"][0]["ring_version"] == 0


#: The with-LB skews of the in-process Table 1 that docs/experiments.md shows ("with LB:
#: ours, local"): the reproduction must not drift when the runtime's defaults change (a
#: change to queue bounds can move WL4 doubling to 0.20 unnoticed).
DOCS_LOCAL_WITH_LB = {
    ("WL1", "halving"): 0.00, ("WL1", "doubling"): 0.09, ("WL2", "halving"): 0.00, ("WL2", "doubling"): 0.00,
    ("WL3", "halving"): 1.00, ("WL3", "doubling"): 0.99, ("WL4", "halving"): 0.48, ("WL4", "doubling"): 0.11,
    ("WL5", "halving"): 0.20, ("WL5", "doubling"): 0.11,
}


def test_table1_local_with_lb_is_the_documented_table(local_table1: list[dict]) -> None:
    got = {(r["workload"], r["method"].lower()): round(r["with_lb"]["skew_mean"], 2) for r in local_table1}
    assert got == DOCS_LOCAL_WITH_LB


def test_hybrid_meets_its_target_on_every_paper_workload_locally() -> None:
    """docs/experiments.md, "Every policy on the paper's workloads": ``hybrid`` S <= 0.05 on
    WL1-WL5 (the runtime's queue bounds, left on, would put WL1 at 0.08)."""
    from workloads.table1_policies import run_all

    cells = run_all(["hybrid"], "local", 1, 1, Settings())
    assert max(c["skew_mean"] for c in cells.values()) <= 0.05, cells


def test_table1_local_results_exact_and_complete(local_table1: list[dict]) -> None:
    # run_job raises on any difference from Counter(letters); check the bookkeeping too.
    for row in local_table1:
        for cell in (row["no_lb"], row["with_lb"]):
            assert len(cell["runs"]) == 1
            stats = cell["runs"][0]
            assert sum(stats["processed"]) == 100
            assert sum(stats["emitted"]) == 100
            assert stats["num_keys"] == len(Counter(workload(row["workload"])))
            assert stats["runtime"] == "local"
            assert 0.0 <= stats["skew"] <= 1.0


def test_table1_checks_and_rendering(local_table1: list[dict], tmp_path) -> None:
    checked = {(r["workload"], r["method"]) for r in local_table1 if r["lb_check"] != "-"}
    assert checked == {k for k, (no, lb) in PAPER_TABLE1.items() if no - lb > 0}
    for row in local_table1:
        assert row["lb_check"] in ("PASS", "FAIL", "-")
        if row["lb_check"] == "FAIL":
            assert row["note"]
    text = table1.render(local_table1)
    assert "WL5" in text and "Doubling" in text
    meta = _meta()
    md = table1.markdown(local_table1, meta)
    assert sum(md.count(f"| {w} |") for w in WORKLOAD_NAMES) == 10
    path = harness.write_json(tmp_path / "t1.json", {"meta": meta, "rows": local_table1})
    assert json.loads(path.read_text())["rows"][0]["no_lb"]["runs"][0]["processed"]


def test_check_row_logic() -> None:
    def row(ours_no: float, ours_lb: float, paper: tuple[float, float], t0: float) -> dict:
        return table1.check_row({
            "paper_no_lb": paper[0], "paper_with_lb": paper[1], "t0_skew": t0,
            "no_lb": {"skew_mean": ours_no}, "with_lb": {"skew_mean": ours_lb},
        })

    assert row(0.49, 0.11, (0.49, 0.11), 0.49)["lb_check"] == "PASS"
    assert row(0.49, 0.114, (0.49, 0.11), 0.49)["lb_check"] == "PASS"  # paper rounds to 2 decimals
    failing = row(0.49, 0.49, (0.49, 0.11), 0.49)
    assert failing["lb_check"] == "FAIL" and failing["note"]
    stuck = table1.check_row({
        "method": "halving", "paper_no_lb": 0.8, "paper_with_lb": 0.52, "t0_skew": 0.8,
        "no_lb": {"skew_mean": 0.8}, "with_lb": {"skew_mean": 0.8},
        "hot_relief": {"hot": 0, "records": 85, "moved": 0, "loads_after": [85, 5, 5, 5]},
    })
    assert "moves none of its 85 records" in stuck["note"]
    moving = table1.check_row({
        "method": "halving", "paper_no_lb": 0.8, "paper_with_lb": 0.52, "t0_skew": 0.47,
        "no_lb": {"skew_mean": 0.8}, "with_lb": {"skew_mean": 0.6},
        "hot_relief": hot_relief("WL4", "halving"),
    })
    moved = hot_relief("WL4", "halving")["moved"]
    assert moving["lb_check"] == "FAIL" and f"moves {moved} of its 85 records" in moving["note"]
    assert row(0.0, 0.1, (0.0, 0.08), 0.0)["lb_check"] == "-"  # paper shows no improvement
    assert not row(0.2, 0.2, (0.0, 0.08), 0.0)["no_lb_ok"]


def test_hot_relief() -> None:
    # WL1 doubling: all 100 letters on reducer 1; doubling the others takes most of them
    # (the paper's Δ = 0.80 is 60 of the 75 records above the ideal 25).
    wl1 = hot_relief("WL1", "doubling")
    assert (wl1["hot"], wl1["records"]) == (1, 100) and wl1["moved"] >= 60
    assert wl1["loads_after"][1] == 100 - wl1["moved"] and sum(wl1["loads_after"]) == 100
    # WL3: its letter moves as a whole under doubling, and stays under halving.
    assert hot_relief("WL3", "doubling")["moved"] == 100
    assert hot_relief("WL3", "halving")["moved"] == 0


def test_instant_lb_uses_the_planner() -> None:
    # No LB: the initial ring; WL3 is a single letter, it can never be split.
    assert instant_lb("WL4", "halving", 0)["loads"] == [5, 85, 5, 5]
    assert instant_lb("WL3", "doubling", 4)["skew"] == 1.0
    one = instant_lb("WL1", "doubling", 1)
    assert one["actions"][0] == (1, "double")
    assert sum(one["loads"]) == 100


def test_run_job_rejects_wrong_results(monkeypatch) -> None:
    import dpa

    stats = run_job("WL2", "doubling", 1, "local")
    assert sum(stats["processed"]) == 100

    # A result with one extra key must be rejected.

    class Wrong:
        def __init__(self, res):
            self._res = res
            self.stats = res.stats

        def to_dict(self):
            d = self._res.to_dict()
            d["zz"] = 1
            return d

        def __len__(self):
            return len(self._res)

    real_run = dpa.run
    monkeypatch.setattr(dpa, "run", lambda *a, **k: Wrong(real_run(*a, **k)))
    with pytest.raises(ResultMismatchError):
        run_job("WL2", "doubling", 1, "local")


def test_run_cell_retries_inexact_jobs(monkeypatch) -> None:
    calls = []
    real = experiment.run_job

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise ResultMismatchError("lost a block")
        return real(*args, **kwargs)

    monkeypatch.setattr(experiment, "run_job", flaky)
    cell = run_cell("WL2", "halving", 0, 2, "local", retries=1)
    assert len(cell["runs"]) == 2 and cell["inexact"] == ["lost a block"]
    calls.clear()
    with pytest.raises(ResultMismatchError):
        run_cell("WL2", "halving", 0, 2, "local", retries=0)


def test_local_runs_are_deterministic() -> None:
    cell = run_cell("WL5", "doubling", 1, 2, "local")
    assert cell["skews"][0] == cell["skews"][1]
    assert cell["skew_std"] == 0.0


#: docs/experiments.md's Figure 3 table (local runtime, deterministic): S by max rounds 0..4.
DOCS_FIGURE3 = {
    "WL1": {"halving": [0.00, 0.00, 0.00, 0.00, 0.00], "doubling": [1.00, 0.09, 0.12, 0.08, 0.12]},
    "WL3": {"halving": [1.00, 1.00, 1.00, 0.97, 0.95], "doubling": [1.00, 0.99, 0.97, 0.97, 0.97]},
    "WL4": {"halving": [0.80, 0.48, 0.21, 0.12, 0.36], "doubling": [0.49, 0.11, 0.11, 0.20, 0.17]},
    "WL5": {"halving": [0.20, 0.20, 0.12, 0.15, 0.52], "doubling": [0.55, 0.11, 0.09, 0.09, 0.09]},
}


def test_figure3_local_is_the_documented_table() -> None:
    result = figure3.run_figure3("local", runs=1, workloads=list(DOCS_FIGURE3), log=None)
    got = {w: {m: [round(v, 2) for v in s] for m, s in by_method.items()} for w, by_method in result["series"].items()}
    assert got == DOCS_FIGURE3


def test_figure3_small_png(tmp_path) -> None:
    result = figure3.run_figure3("local", runs=1, workloads=["WL1", "WL4"], max_rounds=2, log=None)
    assert result["rounds"] == [0, 1, 2]
    assert set(result["series"]) == {"WL1", "WL4"}
    for name, by_method in result["series"].items():
        assert set(by_method) == set(METHODS)
        for method, values in by_method.items():
            assert len(values) == 3
            assert values[0] == pytest.approx(PAPER_TABLE1[(name, method)][0], abs=0.01)
    assert len(result["cells"]) == 2 * 2 * 3
    png = figure3.plot(result, tmp_path / "fig" / "figure3.png", title="test")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000
    meta = _meta()
    assert "| WL4 | halving |" in figure3.markdown(result, meta)


def test_cli_local_writes_outputs(tmp_path, capsys) -> None:
    out = tmp_path / "t1.json"
    rc = table1.main(["--runtime", "local", "--runs", "1", "--workloads", "WL2", "WL4", "--out", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["summary"]["no_lb_all_match"] is True
    assert len(data["rows"]) == 4
    assert out.with_suffix(".md").exists()
    rc = figure3.main(["--runtime", "local", "--runs", "1", "--workloads", "WL2", "--max-rounds", "1",
                       "--out-dir", str(tmp_path / "f3")])
    assert rc == 0
    assert (tmp_path / "f3" / "figure3.png").stat().st_size > 10_000
    assert json.loads((tmp_path / "f3" / "figure3.json").read_text())["series"]["WL2"]["halving"][0] == 0.0
    assert "PASS" in capsys.readouterr().out


# ----------------------------------------------------------------------------- the harness
def test_harness_main_returns_int_and_writes_json_with_metadata(tmp_path, capsys) -> None:
    seen: list[argparse.Namespace] = []

    def run(args: argparse.Namespace, log: harness.Log) -> dict:
        seen.append(args)
        return {"value": args.size * 2}

    exp = harness.Experiment(
        module="workloads.toy", description="A toy experiment.\n\nMore.", out=str(tmp_path / "toy"),
        json_name="toy.json", run=run, seed=7, runs=2, quick=("--size", "1", "--runs", "1"),
        add_arguments=lambda p: p.add_argument("--size", type=int, default=10),
        claims=lambda res: [harness.Claim("doubles", "here", res["value"] % 2 == 0, str(res["value"]))],
        markdown=lambda res: f"# toy {res['value']} ({res['meta']['command']})\n",
        plots=lambda res, out: [],
        verdict=lambda res, args: 3,
    )
    code = exp.main(["--quick", "--size", "5"])
    assert isinstance(code, int) and code == 3
    assert seen[0].size == 5 and seen[0].runs == 1 and seen[0].seed == 7  # --quick, then argv wins
    data = json.loads((tmp_path / "toy" / "toy.json").read_text())
    assert data["value"] == 10
    assert data["claims"] == [{"claim": "doubles", "where": "here", "holds": True, "evidence": "10"}]
    meta = data["meta"]
    assert meta["experiment"] == "toy" and meta["command"] == "python -m workloads.toy --quick --size 5"
    assert meta["argv"] == ["--quick", "--size", "5"] and meta["runs"] == 1 and meta["seed"] == 7
    assert meta["elapsed_s"] >= 0 and meta["created"] and meta["python"] and meta["cpus"]
    assert (tmp_path / "toy" / "toy.md").read_text().startswith("# toy 10")
    assert "[yes] here: doubles" in capsys.readouterr().out


def test_harness_out_as_a_json_file(tmp_path) -> None:
    exp = harness.Experiment(module="workloads.toy", description="Toy.", out="unused.json",
                             run=lambda args, log: {"ok": True}, markdown=lambda res: "md\n")
    assert exp.main(["--out", str(tmp_path / "r" / "x.json")], log=None) == 0
    assert json.loads((tmp_path / "r" / "x.json").read_text())["ok"] is True
    assert (tmp_path / "r" / "x.md").read_text() == "md\n"


QUICK_RUNS = {  # module -> (extra args beyond --quick, JSON file relative to --out or None = --out is the file)
    "table1": (["--workloads", "WL4"], None),
    "figure3": (["--max-rounds", "1"], "figure3.json"),
    "table1_policies": (["--policies", "hybrid"], "table1_policies.json"),
    "exp_pkg": (["--scale", "0.001"], "pkg.json"),
    "exp_dkg": (["--scale", "0.003"], "dkg.json"),
    "exp_gedik": ([], "gedik.json"),
    "exp_fang": (["--intervals", "2"], "fang.json"),
}


@pytest.mark.parametrize("name", sorted(QUICK_RUNS))
def test_every_experiment_runs_through_the_harness(name: str, tmp_path, capsys) -> None:
    module = importlib.import_module(f"workloads.{name}")
    assert isinstance(module.EXPERIMENT, harness.Experiment) and module.main == module.EXPERIMENT.main
    extra, json_name = QUICK_RUNS[name]
    out = tmp_path / ("out.json" if json_name is None else "out")
    code = module.main(["--quick", *extra, "--out", str(out)])
    assert code == 0
    path = out if json_name is None else out / json_name
    data = json.loads(path.read_text())
    assert data["meta"]["experiment"] == name and data["meta"]["command"].startswith(f"python -m workloads.{name}")
    md = path.with_suffix(".md") if json_name is None else out / module.EXPERIMENT.paths(
        module.EXPERIMENT.parse(["--out", str(out)]))[1].name
    assert md.stat().st_size > 100
    assert "wrote" in capsys.readouterr().out
