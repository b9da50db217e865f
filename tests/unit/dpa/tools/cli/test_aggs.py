"""``dpa run --agg``: several aggregates in one pass from the command line."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from dpa.tools.cli import main


def test_several_aggregates_to_parquet(tmp_path, capsys):
    path = tmp_path / "events.csv"
    path.write_text("user,bytes,session,score\nann,3,a,1\nbob,4,b,\nann,5,c,\nann,5,a,2\n")
    out = tmp_path / "out.parquet"
    code = main(["run", "--input", str(path), "--key", "user", "--agg", "count", "--agg", "count:score",
                 "--agg", "sum:bytes",
                 "--agg", "count_distinct:session", "--agg", "quantile:bytes:0.5", "--agg", "std_pop:bytes",
                 "--runtime", "local", "--output", str(out), "--no-baseline"])
    assert code == 0, capsys.readouterr().err
    rows = {r["user"]: r for r in pq.read_table(out).to_pylist()}
    assert rows["ann"]["count(1)"] == 3 and rows["ann"]["sum(bytes)"] == 13
    assert rows["ann"]["count(score)"] == 2 and rows["bob"]["count(score)"] == 0  # (empty numbers are null)
    assert rows["ann"]["count(DISTINCT session)"] == 2 and rows["ann"]["percentile_approx(bytes, 0.5)"] == 5.0
    assert rows["bob"]["stddev_pop(bytes)"] == 0.0


def test_max_by_and_min_by_take_the_ordering_column(tmp_path, capsys):
    path = tmp_path / "orders.csv"
    path.write_text("order,status,ts\n1,new,10\n1,paid,30\n1,sent,20\n2,new,5\n2,void,\n")
    out = tmp_path / "out.parquet"
    code = main(["run", "--input", str(path), "--key", "order", "--agg", "max_by:status:ts", "--agg", "min_by:status:ts",
                 "--runtime", "local", "--output", str(out), "--no-baseline"])
    assert code == 0, capsys.readouterr().err
    rows = {r["order"]: r for r in pq.read_table(out).to_pylist()}
    assert rows[1]["max_by(status, ts)"] == "paid" and rows[1]["min_by(status, ts)"] == "new"
    assert rows[2]["max_by(status, ts)"] == "new"  # (a row without ts is skipped)


@pytest.mark.parametrize("args, needle", [
    (["--agg", "nope:bytes"], "unknown aggregate 'nope'"),
    (["--agg", "sum"], "sum needs a column"),
    (["--agg", "sum:nope"], "column 'nope' is not in the input"),
    (["--agg", "quantile:bytes:2"], "must be in [0, 1]"),
    (["--agg", "max_by:bytes"], "max_by needs the column that orders the rows"),
    (["--agg", "min_by:bytes:nope"], "column 'nope' is not in the input"),
    (["--agg", "sum:bytes:3"], "only quantile, max_by and min_by take a parameter"),
    (["--agg", "count", "--reducer", "sum", "--value", "bytes"], "--agg replaces --reducer"),
])
def test_bad_aggregates_give_one_line_errors(tmp_path, capsys, args, needle):
    path = tmp_path / "events.csv"
    path.write_text("user,bytes\nann,3\n")
    code = main(["run", "--input", str(path), "--key", "user", "--runtime", "local", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and needle in err[0], err
