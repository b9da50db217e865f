"""benchmarks.aggregations --only-kernels: Arrow's and dpa's group-by per aggregate on one block."""

from __future__ import annotations

import json

from benchmarks import aggregations


def test_the_kernels_table_has_a_row_per_key_count_and_every_aggregate(tmp_path):
    out = tmp_path / "kernels.json"
    payload = aggregations.main(["--only-kernels", "--block-rows", "20000", "--keys", "5000", "--kernel-reps", "1",
                                 "--out", str(out)])
    rows = payload["kernels"]["rows"]
    assert [row["engine"] for row in rows] == ["arrow", "dpa"] * 3
    groups = [row["groups"] for row in rows[::2]]
    assert groups[0] > groups[1] > groups[2]  # the table's keys, folded to 1,024, to 8
    assert groups[1] <= 1024 and groups[2] <= 8
    for row in rows:
        assert set(row) == {"groups", "engine", "count_ms", "all_ms", "distinct(session)_ms", "distinct(session as text)_ms",
                            *(f"+{name}_ms" for name, _ in aggregations.KERNELS[1:])}
        assert row["count_ms"] > 0 and row["all_ms"] > 0 and row["distinct(session)_ms"] > 0
    assert "aggregates" not in payload and json.loads(out.read_text())["kernels"]["block_rows"] == 20000
