"""The README's first command: the main job (``./run.sh main``) on a small corpus."""

from __future__ import annotations

import logging

import pyarrow.parquet as pq

from workloads import wordcount


def test_main_job_counts_words_and_agrees_with_and_without_balancing(spark, tmp_path, capsys):
    rc = wordcount.main(["--lines", "2000", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "balanced and unbalanced counts agree" in out
    assert "per-reducer load" in out and "S=" in out
    counts = pq.read_table(str(tmp_path / "counts.parquet"))
    assert set(counts.column_names) == {"word", "count"}
    assert sum(counts["count"].to_pylist()) == 2000 * 12  # 12 words per generated line
    # Quiet without --verbose: Ray Data's INFO lines and progress bars are off.
    from ray.data import DataContext

    assert logging.getLogger("ray.data").getEffectiveLevel() >= logging.WARNING
    assert not DataContext.get_current().enable_progress_bars
    assert "streaming_executor" not in out
