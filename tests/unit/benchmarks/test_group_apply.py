"""The per-group benchmark's helpers: the reference answer and its check, the bounds, the
targets and its docs section (no Ray, no Spark)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest


def small_table() -> pa.Table:
    keys = np.array([3, 1, 3, 2, 3, 1, 3, 3], dtype=np.int64)
    return pa.table({"key": keys, "v": np.arange(8, dtype=np.int64) * 397 % 1000})


def test_the_reference_has_one_row_per_group_and_the_check_ignores_their_order(repo_benchmark):
    ga = repo_benchmark("group_apply")
    want, seconds = ga.reference(small_table(), ga.sleep_fn(0.0))
    assert want.to_pydict() == {"key": [1, 2, 3], "n": [2, 1, 5]} and len(seconds) == 3
    assert ga.check_answer(want.take([2, 0, 1]), want) == "ok"
    assert ga.check_answer(pa.table({"key": [1, 2, 3], "n": [2, 1, 4]}), want) == "MISMATCH: n of key 3 is 4, expected 5"
    assert ga.check_answer(want.slice(0, 2), want) == "MISMATCH: 2 groups, expected 3"
    assert ga.check_answer(want.select(["key"]), want).startswith("MISMATCH: columns")


def test_the_cpu_function_is_the_same_whatever_the_order_of_rows(repo_benchmark):
    ga = repo_benchmark("group_apply")
    fn = ga.cpu_fn(dim=8, chunk=3)
    group = small_table().to_pandas().query("key == 3")
    forward, backward = fn(group), fn(group.iloc[::-1])
    assert list(forward.columns) == ["key", "n", "x"] and forward["n"].tolist() == [5]
    assert forward["x"].tolist() == backward["x"].tolist()
    want, _ = ga.reference(small_table(), fn)
    close = want.set_column(2, "x", pa.array(want["x"].to_numpy() * (1 + 1e-12)))
    far = want.set_column(2, "x", pa.array(want["x"].to_numpy() * (1 + 1e-6)))
    assert ga.check_answer(close, want) == "ok"
    assert ga.check_answer(far, want).startswith("MISMATCH: x of key 1")


def test_bounds_are_the_larger_of_the_ideal_and_the_largest_group(repo_benchmark):
    ga = repo_benchmark("group_apply")
    hot = ga.sleep_bounds(np.array([7] * 6 + [1, 2]), 0.001, workers=8)
    assert (hot.ideal_s, hot.largest_group_s, hot.largest_group_rows) == pytest.approx((0.001, 0.006, 6))
    assert hot.bound_s == pytest.approx(0.006)
    assert ga.sleep_bounds(np.arange(80), 0.001).bound_s == pytest.approx(0.01)  # even keys: work / 8
    cpu = ga.cpu_bounds(np.array([1.0, 3.0, 0.5, 0.5]), np.array([10, 30, 5, 5]), cores=2)
    assert cpu.to_dict() == {"ideal_s": 2.5, "largest_group_s": 3.0, "largest_group_rows": 30, "bound_s": 3.0}


def test_the_default_sleep_workload_is_5_s_ideal_with_a_15_percent_key(repo_benchmark):
    ga = repo_benchmark("group_apply")
    args = ga.parse_args([])
    assert (args.rows, args.keys, args.reps, args.out) == (40_000, 10_000, 3, "benchmarks/results/group_apply.json")
    quick = ga.parse_args(["--quick"])
    assert (quick.rows, quick.reps, quick.out) == (2_000, 1, None) and "dpa-bridge" not in quick.engines
    assert "dpa-bridge" in args.engines
    table = ga.make_table(args)
    assert table.column_names == ["key", "v"] and table.num_rows == 40_000
    b = ga.sleep_bounds(table["key"].to_numpy(), 0.001)
    assert b.ideal_s == pytest.approx(5.0) and 0.12 < b.largest_group_rows / 40_000 < 0.18


def rows_of(medians: dict[tuple[str, str], float]) -> list[dict]:
    return [{"workload": w, "engine": e, "median_s": m, "status": "ok"} for (w, e), m in medians.items()]


def test_summaries_ratios_and_targets(repo_benchmark):
    ga = repo_benchmark("group_apply")
    bounds = {"sleep": ga.Bounds(5.0, 0.9, 6000), "cpu": ga.Bounds(5.0, 1.5, 6000)}
    runs = [{"s": s, "load_avg_1m": 1.0, "status": "ok"} for s in (9.0, 5.0, 6.0, 5.5)]
    row = ga.summarise("sleep", "dpa", runs, bounds["sleep"])
    assert (row["cold_s"], row["median_s"], row["spread_s"], row["times_s"]) == (9.0, 5.5, 1.0, [5.0, 6.0, 5.5])
    assert row["x_bound"] == pytest.approx(1.1)
    rows = rows_of({("sleep", "dpa"): 5.5, ("sleep", "spark-default"): 20.0, ("sleep", "ray-data"): 15.0,
                    ("sleep", "spark-tuned"): 8.0, ("cpu", "dpa"): 6.0, ("cpu", "dpa-dataset"): 5.0,
                    ("cpu", "spark-tuned"): 5.9, ("cpu", "ray-data"): 7.0})
    ga.add_ratios(rows)
    assert [r["dpa_faster_by"] for r in rows[:2]] == [1.0, pytest.approx(20 / 5.5)]
    targets = ga.check_targets(rows, bounds)
    assert [(t["target"], t["met"]) for t in targets["sleep"]] == [
        ("dpa / max(ideal, largest group) <= 1.15", True), ("spark-default / dpa >= 3", True),
        ("ray-data / dpa >= 3", False), ("spark-tuned / dpa >= 1.5", False)]
    assert targets["cpu"] == [{"target": "best peer (spark-tuned) / dpa >= 1", "value": 5.9 / 6.0, "met": False}]
    assert ga.check_targets(rows_of({("sleep", "ray-data"): 1.0}), bounds) == {}  # no dpa: nothing to check


def test_the_docs_section_and_the_peer_rows(repo_benchmark, tmp_path):
    docs = repo_benchmark("docs")
    rows = [{"workload": "sleep", "engine": "dpa", "median_s": 5.5, "times_s": [5.4, 5.5, 5.9], "status": "ok"},
            {"workload": "sleep", "engine": "spark-default", "median_s": 22.0, "times_s": [22.0], "status": "ok"},
            {"workload": "cpu", "engine": "dpa", "median_s": 6.0, "times_s": [6.0], "status": "ok"},
            {"workload": "cpu", "engine": "spark-tuned", "median_s": 6.6, "times_s": [6.6], "status": "ok"},
            {"workload": "cpu", "engine": "ray-data", "median_s": 5.0, "times_s": [5.0], "status": "MISMATCH: x"}]
    targets = {"sleep": [{"target": "spark-default / dpa >= 3", "value": 4.0, "met": True}]}
    (tmp_path / "group_apply.json").write_text(json.dumps({"command": "python -m benchmarks.group_apply --reps 3",
                                                           "results": rows, "targets": targets}))
    page = docs.render(tmp_path)
    assert "## Per-group functions: dpa's GroupApply against applyInPandas and map_groups" in page
    assert "| 5.5 s (5.4–5.9) | Spark applyInPandas, default partitions | 22 s (22–22) | 4.00x |" in page
    assert "| spark-tuned (the best peer) | 6.6 s (6.6–6.6) | 1.10x |" in page  # a wrong answer is no peer
    assert "`targets.sleep`:" in page and "| spark-default / dpa >= 3 | 4 | yes |" in page


def test_the_small_groups_case_has_equal_groups_and_checks_rows_in_any_order(repo_benchmark):
    ga = repo_benchmark("group_apply")
    small = repo_benchmark("group_apply_small")
    args = ga.parse_args(["--small-groups", "--groups", "50", "--group-rows", "3", "7"])
    assert args.small_groups and args.group_rows == [3, 7] and args.out == "benchmarks/results/group_apply_small.json"
    table = small.make_table(50, 3)
    assert table.num_rows == 150 and set(np.unique(table["key"].to_numpy(), return_counts=True)[1]) == {3}
    for fn in small.FUNCTIONS.values():
        want = small.run_pandas(table.to_pandas(), fn)
        shuffled = pa.Table.from_pandas(want.iloc[::-1], preserve_index=False)
        assert small.same_rows(shuffled, want) == "ok"
        assert small.same_rows(shuffled.slice(1), want).startswith("MISMATCH")
    summary = small.run_pandas(table.to_pandas(), small.summary_fn)
    wrong = summary.assign(n=summary.n + 1)
    assert small.same_rows(pa.Table.from_pandas(wrong, preserve_index=False), summary).startswith("MISMATCH")


def test_the_first_jobs_case_has_its_own_results_file_and_defaults(repo_benchmark):
    ga = repo_benchmark("group_apply")
    args = ga.parse_args(["--first-jobs", "4", "--pools", "2"])
    assert (args.first_jobs, args.pools, args.out) == (4, 2, "benchmarks/results/group_apply_first.json")
    assert ga.parse_args([]).first_jobs == 0  # (the engines' comparison unless asked)
