"""Run reports (dpa.tools.report): every file from a real local run, valid PNGs, stats.json
round trip, the data preparation behind each plot, and the Table 1 plot."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import dpa
from dpa.tools.report import (
    event_markers,
    initial_token_counts,
    load_stats,
    queue_series,
    records_comparison,
    stats_dict,
    table1_rows,
    token_steps,
    write_experiment_report,
    write_report,
)
from workloads.paper import PAPER_TABLE1, workload

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RUN_FILES = {"stats.json", "baseline_stats.json", "queues.png", "records.png", "tokens.png", "report.md"}


def _run(policy: str, rounds: int):
    return dpa.run(workload("WL4"), reducer=dpa.WithCost(dpa.Count(), 0.01),
                   config=dpa.JobConfig(runtime="local", policy=policy, max_rounds=rounds, batch_size=5, chunk_size=1,
                                        policy_options={"token_spacing": "hashed", "lookahead": False}))  # the paper's


@pytest.fixture(scope="module")
def halving():
    """WL4 under halving: reducer 0 holds 85% and is halved (forced rebalance); plus its No-LB run."""
    res, base = _run("halving", 2), _run("halving", 0)
    assert res.stats.rebalances and res.stats.timeline, "the fixture must rebalance"
    return res, base


def assert_png(path, min_bytes=5_000):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path.name} is not a PNG"
    assert len(data) > min_bytes, f"{path.name} is only {len(data)} bytes"
    from PIL import Image

    with Image.open(path) as img:
        img.verify()
    with Image.open(path) as img:
        width, height = img.size
    assert width >= 600 and height >= 400, (path.name, img.size)


# ------------------------------------------------------------------------ write_report
def test_write_report_writes_every_file(halving, tmp_path):
    res, base = halving
    files = write_report(res, tmp_path / "rep", baseline_stats=base.stats, title="WL4 halving")
    assert {f.name for f in files} == RUN_FILES
    assert {p.name for p in (tmp_path / "rep").iterdir()} == RUN_FILES
    for f in files:
        if f.suffix == ".png":
            assert_png(f)
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "halve" in md and "queues.png" in md and "S with LB" in md


def test_stats_json_round_trips(halving, tmp_path):
    res, base = halving
    write_report(res.stats, tmp_path / "a", baseline_stats=base)
    saved = json.loads((tmp_path / "a" / "stats.json").read_text())
    assert saved == json.loads(json.dumps(res.stats.to_dict()))
    assert saved["skew"] == pytest.approx(res.stats.skew)
    assert saved["rebalances"][0]["action"] == "halve"
    assert json.loads((tmp_path / "a" / "baseline_stats.json").read_text())["processed"] == base.stats.processed
    # A saved report re-plots from its JSON alone, to the same set of files.
    again = write_report(load_stats(tmp_path / "a" / "stats.json"), tmp_path / "b",
                         baseline_stats=load_stats(tmp_path / "a" / "baseline_stats.json"))
    assert {f.name for f in again} == RUN_FILES
    assert json.loads((tmp_path / "b" / "stats.json").read_text()) == saved


def test_result_stats_and_dict_give_the_same_data(halving):
    res, _ = halving
    assert stats_dict(res) == stats_dict(res.stats) == stats_dict(json.loads(json.dumps(res.stats.to_dict())))
    with pytest.raises(TypeError):
        stats_dict(42)
    with pytest.raises(ValueError):
        stats_dict({"policy": "x"})


def test_no_baseline_and_no_ring(tmp_path):
    res = dpa.run(workload("WL2"), config=dpa.JobConfig(runtime="local", policy="hash", batch_size=10))
    files = write_report(res, tmp_path)
    assert {f.name for f in files} == {"stats.json", "queues.png", "records.png", "report.md"}
    assert_png(tmp_path / "records.png")


def test_report_module_does_not_import_ray(tmp_path):
    code = ("import sys, dpa; from dpa.tools.report import write_report; "
            f"write_report({{'processed': [3, 1], 'policy': 'hash', 'final_tokens': None}}, {str(tmp_path)!r}); "
            "assert 'ray' not in sys.modules, 'dpa.tools.report imported ray'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ------------------------------------------------------------------------- data prep
def test_queue_series_and_event_markers(halving):
    res, _ = halving
    s = stats_dict(res)
    times, series = queue_series(s)
    assert len(series) == 4 and all(len(q) == len(times) for q in series)
    assert times[0] == 0.0 and times == sorted(times)
    straggler = res.stats.rebalances[0].reducer
    assert max(series[straggler]) == max(q[straggler] for _, q, _ in res.stats.timeline)
    assert max(series[straggler]) == max(max(q) for q in series)  # the halved reducer had the longest queue
    marks = event_markers(s)
    assert [m["label"] for m in marks] == [f"{e.action} r{e.reducer}" for e in res.stats.rebalances]
    assert marks[0]["label"] == f"halve r{straggler}"


def test_token_steps_start_at_the_initial_ring_and_end_at_the_final_one(halving):
    res, _ = halving
    s = stats_dict(res)
    assert initial_token_counts(s) == [16, 16, 16, 16]  # inferred from the first "halve"
    times, series = token_steps(s)
    assert [row[0] for row in series] == [16, 16, 16, 16]
    assert [row[-1] for row in series] == res.stats.final_tokens
    assert times == sorted(times) and len(times) == len(res.stats.rebalances) + 2


def test_initial_token_counts_rules():
    doubling = {"processed": [1, 1, 1], "policy": "doubling", "final_tokens": [1, 4, 4],
                "rebalances": [{"time_s": 0.1, "reducer": 0, "action": "double", "queue_lengths": [9, 1, 1],
                                "tokens_after": [1, 2, 2], "version": 1}]}
    assert initial_token_counts(doubling) == [1, 1, 1]  # the first "double" undone
    doubling["rebalances"][0]["tokens_after"] = [16, 32, 32]
    assert initial_token_counts(doubling) == [16, 16, 16]
    first_ring = {"time_s": 0.0, "reducer": -1, "action": "first_ring", "queue_lengths": [0, 0, 0],
                  "tokens_after": [4, 4, 4], "version": 1}
    doubling["rebalances"].insert(0, first_ring)  # the ring the first record was routed under
    assert initial_token_counts(doubling) == [4, 4, 4]
    assert [m["label"] for m in event_markers(doubling)] == ["first_ring", "double r0"]
    assert initial_token_counts({"processed": [1, 1], "policy": "halving", "final_tokens": [8, 8]}) == [8, 8]
    assert initial_token_counts({"processed": [1, 1], "final_tokens": [8, 8]}, initial_tokens=4) == [4, 4]
    assert initial_token_counts({"processed": [1, 1], "policy": "hash", "final_tokens": None}) is None
    assert token_steps({"processed": [1], "policy": "hash", "final_tokens": None}) is None


def test_records_comparison(halving):
    res, base = halving
    cmp = records_comparison(stats_dict(res), stats_dict(base))
    assert cmp["with_lb"] == res.stats.processed and cmp["without_lb"] == base.stats.processed
    assert cmp["skew_without_lb"] == pytest.approx(0.80, abs=0.01)  # WL4 halving, paper Table 1
    assert cmp["skew_with_lb"] == pytest.approx(res.stats.skew)
    assert cmp["skew_with_lb"] < cmp["skew_without_lb"]
    assert cmp["ideal"] == 25


# --------------------------------------------------------------------------- Table 1
def test_table1_rows_understands_the_common_shapes():
    script_shape = {"meta": {}, "rows": [
        {"workload": "WL4", "method": "halving", "paper_no_lb": 0.8, "paper_with_lb": 0.52,
         "no_lb": {"skew_mean": 0.8, "skews": [0.8]}, "with_lb": {"skew_mean": 0.5, "skews": [0.4, 0.6]}}]}
    nested = {"WL4": {"halving": {"no_lb": 0.8, "with_lb": [0.4, 0.6]}}}
    flat = {"WL4/halving": [0.8, 0.5]}
    for data in (script_shape, nested, flat):
        rows = {(r.workload, r.method): r for r in table1_rows(data, PAPER_TABLE1)}
        assert len(rows) == len(PAPER_TABLE1)  # every paper cell, measured or not
        r = rows[("WL4", "halving")]
        assert (r.no_lb, r.with_lb) == (pytest.approx(0.8), pytest.approx(0.5))
        assert (r.paper_no_lb, r.paper_with_lb) == PAPER_TABLE1[("WL4", "halving")]
        assert rows[("WL1", "doubling")].no_lb is None
        # Without reference values (the caller passes none): the measured cells only.
        (alone,) = table1_rows(data)
        assert (alone.workload, alone.method, alone.paper_no_lb, alone.paper_with_lb) == ("WL4", "halving", None, None)
        assert (alone.no_lb, alone.with_lb) == (pytest.approx(0.8), pytest.approx(0.5))


def test_write_experiment_report(tmp_path):
    data = [{"workload": w, "method": m, "no_lb": a, "with_lb": b} for (w, m), (a, b) in PAPER_TABLE1.items()]
    path = tmp_path / "t1.json"
    path.write_text(json.dumps(data))
    files = write_experiment_report(str(path), tmp_path / "out", paper=PAPER_TABLE1)
    assert {f.name for f in files} == {"table1.json", "table1.png"}
    assert_png(tmp_path / "out" / "table1.png")
    rows = json.loads((tmp_path / "out" / "table1.json").read_text())
    assert len(rows) == 10 and all(r["no_lb"] == r["paper_no_lb"] for r in rows)
    write_experiment_report(data[:2], tmp_path / "measured_only")  # no reference values: still a plot
    assert_png(tmp_path / "measured_only" / "table1.png")
    rows = json.loads((tmp_path / "measured_only" / "table1.json").read_text())
    assert len(rows) == 2 and all(r["paper_no_lb"] is None for r in rows)
    with pytest.raises(ValueError):
        write_experiment_report({"nothing": 1}, tmp_path / "none")
