"""The README's first command: the main job (``./run.sh main``) end to end, on a small input."""

from __future__ import annotations

import logging

import pyarrow.parquet as pq

from workloads import skewed_job


def test_main_job_prints_its_table_writes_its_plot_and_the_engines_agree(spark, tmp_path, capsys):
    rc = skewed_job.main(["--rows", "1200", "--keys", "50", "--cost-ms", "0.2", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "answers agree: yes" in out
    header = next(line for line in out.splitlines() if line.startswith("engine"))
    for column in ("time", "x ideal", "skew S", "rebalances"):
        assert column in header
    for label in ("dpa, JobConfig() defaults", "dpa, no balancing (hash)", "Spark groupBy.applyInPandas"):
        assert any(line.startswith(label) for line in out.splitlines()), label
    png = tmp_path / "load_over_time.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    sums = pq.read_table(str(tmp_path / "sums.parquet"))
    assert set(sums.column_names) == {"user", "sum"}
    events = pq.read_table(str(tmp_path / "input" / "events.parquet"))
    assert sum(sums["sum"].to_pylist()) == sum(events["amount"].to_pylist())
    # Quiet without --verbose: Ray Data's progress bars and notices are off.
    from ray.data import DataContext

    assert logging.getLogger("ray.data").getEffectiveLevel() >= logging.ERROR
    assert not DataContext.get_current().enable_progress_bars


def test_main_job_explains_a_missing_column(spark, tmp_path, capsys):
    rc = skewed_job.main(["--rows", "200", "--key", "nope", "--out", str(tmp_path)])
    assert rc == 2
    assert "column 'nope' not in" in capsys.readouterr().err
