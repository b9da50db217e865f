"""docs/benchmarks.md is generated from the results files, any of them, known or not."""

from __future__ import annotations

import json

from benchmarks import docs


def write(folder, name, payload):
    (folder / f"{name}.json").write_text(json.dumps(payload))


def test_every_results_file_gets_a_section_known_or_not(tmp_path):
    write(tmp_path, "throughput", {
        "env": {"cpus": 2, "load_avg_1m": 1.5, "python": "3.11.7", "time": "2026-01-01T00:00:00"},
        "command": "/venv/bin/python -m benchmarks.throughput --reps 3 --out benchmarks/results/throughput.json",
        "results": [{"engine": "dpa", "config": "default", "median_s": 0.2, "times_s": [0.2, 0.25, 0.19]},
                    {"engine": "spark", "config": "local[2]", "median_s": 1.0, "min_s": 0.9}]})
    write(tmp_path, "unregistered", {"command": "python -m benchmarks.unregistered", "rows": 1000,
                                "results": [{"engine": "ray data", "median_s": 1.25}]})
    write(tmp_path, "spark_e2e_derived", {"workload": "derived", "defaults": [{"engine": "spark", "median_s": 2.0}]})
    write(tmp_path, "nested", {"command": "x", "stage": {"rows": [{"step": "a", "median_s": 3.5}]}})
    write(tmp_path, "summary_only", {"jobs": 12, "passed": True})
    page = docs.render(tmp_path)
    assert "## Throughput: a cheap Count of 10M Zipf records" in page
    assert "`python -m benchmarks.throughput --reps 3`" in page  # --out and the interpreter's path dropped
    assert "2 CPUs; python 3.11.7; measured 2026-01-01T00:00:00" in page
    assert "load" not in page.lower().replace("download", "")  # the run's condition, not a figure
    assert "| dpa | default | 0.2 | 0.2, 0.25, 0.19 |" in page
    assert "## unregistered" in page and "No description registered for `unregistered`" in page
    assert "| ray data | 1.25 |" in page
    assert "## Spark end to end: derived" in page  # a prefix's entry, with the file's suffix
    assert "`stage`" not in page and "| a | 3.5 |" in page  # a table one level down
    assert "| jobs | passed |" in page and "| 12 | yes |" in page
    # the peers table: Spark's time / dpa's
    assert "| cheap Count of 10M Zipf records | 0.2 s (0.19–0.25) | Spark local[2] | 1 s | 5.00x | `throughput` |" in page
    # registered benchmarks first, the others by name
    assert page.index("## Throughput") < page.index("## Spark end to end") < page.index("## unregistered")


def test_a_run_on_a_busy_machine_shows_its_command_but_not_its_figures(tmp_path):
    write(tmp_path, "throughput", {
        "env": {"cpus": 2, "load_avg_1m": 160.0}, "command": "python -m benchmarks.throughput --reps 3",
        "results": [{"engine": "dpa", "config": "default", "median_s": 8.5}]})
    write(tmp_path, "hashing", {"env": {"cpus": 2, "load_avg_1m": 7.9}, "results": [{"key type": "int64", "ms": 1.0}]})
    page = docs.render(tmp_path)
    assert "`python -m benchmarks.throughput --reps 3`" in page and "8.5" not in page
    assert "not shown: the machine was busy" in page
    assert "## Against the peers" not in page  # a busy run gives no headline either
    assert "| int64 | 1 |" in page  # 7.9 on 2 CPUs is below the threshold


def test_check_tells_whether_the_page_is_current(tmp_path):
    results, page = tmp_path / "results", tmp_path / "benchmarks.md"
    results.mkdir()
    write(results, "hashing", {"results": [{"key type": "int64", "ms": 1.0}]})
    assert docs.main(["--results", str(results), "--page", str(page), "--check"]) == 1
    assert docs.main(["--results", str(results), "--page", str(page)]) == 0
    assert docs.main(["--results", str(results), "--page", str(page), "--check"]) == 0


def test_the_committed_page_is_generated_from_the_committed_results():
    assert docs.render(docs.RESULTS) == docs.PAGE.read_text()
