"""benchmarks.aggregations: the kernels table (Arrow's and dpa's group-by per aggregate on one block), and
the answers of dpa, DuckDB and Polars checked against each other (runtime="local", no Ray)."""

from __future__ import annotations

import json
import sys

import pyarrow as pa
import pytest

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


def test_the_engines_agree_on_the_exact_columns_of_both_passes():
    pytest.importorskip("polars")
    table = aggregations.make_table(30_000, 300, 1.1, 3)
    five = aggregations.answers(table, aggregations.five(), aggregations.DUCKDB_FIVE, aggregations.polars_five,
                                aggregations.FIVE_COLUMNS, runtime="local")
    assert set(five) == {"dpa", "duckdb", "polars"}
    assert aggregations.compare(five)["status"] == "ok"
    exact = aggregations.exact_trio(table)
    trio = aggregations.answers(table, aggregations.distinct_trio(), aggregations.DUCKDB_TRIO,
                                aggregations.polars_trio, aggregations.TRIO_COLUMNS, runtime="local")
    check = aggregations.compare(trio, exact)
    assert check["status"] == "ok"
    errors = check["approx_max_rel_error"]
    assert set(errors) == {"dpa", "duckdb", "polars"}
    assert 0 <= errors["dpa"]["approx_count_distinct(session)"] < 0.1  # (a sketch: within a few percent)


def test_a_wrong_exact_or_close_column_is_a_mismatch_naming_the_engine_and_key():
    ref = pa.table({"key": [1, 2, 3], "count(1)": [5, 6, 7], "avg(latency)": [1.0, 2.0, 3.0]})
    assert aggregations.compare({"dpa": ref, "duckdb": ref})["status"] == "ok"
    off = ref.set_column(1, "count(1)", pa.array([5, 6, 8]))
    assert aggregations.compare({"dpa": ref, "duckdb": off})["status"] == (
        "duckdb: count(1) differs from dpa's at 1 keys, e.g. key 3: 8.0 vs 7")
    near = ref.set_column(2, "avg(latency)", pa.array([1.0, 2.0, 3.0 * (1 + 1e-12)]))
    far = ref.set_column(2, "avg(latency)", pa.array([1.0, 2.0, 3.0 * (1 + 1e-6)]))
    assert aggregations.compare({"dpa": ref, "polars": near})["status"] == "ok"
    assert aggregations.compare({"dpa": ref, "polars": far})["status"].startswith("polars: avg(latency) differs")
    assert aggregations.compare({"dpa": ref, "polars": ref.slice(0, 2)})["status"].startswith("polars: 2 keys")


def test_without_polars_its_rows_are_left_out_with_a_message(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "polars", None)  # (import polars raises ImportError)
    monkeypatch.setattr(aggregations, "_polars_told", False)
    table = aggregations.make_table(2_000, 50, 1.1, 1)
    assert aggregations.polars_job(table, aggregations.polars_five) is None
    assert aggregations.polars_version() is None
    got = aggregations.answers(table, aggregations.five(), aggregations.DUCKDB_FIVE, aggregations.polars_five,
                               aggregations.FIVE_COLUMNS, runtime="local")
    assert set(got) == {"dpa", "duckdb"} and aggregations.compare(got)["status"] == "ok"
    assert capsys.readouterr().out.count("polars is not installed") == 1
