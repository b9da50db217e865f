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


@pytest.mark.parametrize("args, needle", [
    (["--agg", "nope:bytes"], "unknown aggregate 'nope'"),
    (["--agg", "sum"], "sum needs a column"),
    (["--agg", "sum:nope"], "column 'nope' is not in the input"),
    (["--agg", "quantile:bytes:2"], "must be in [0, 1]"),
    (["--agg", "count", "--reducer", "sum", "--value", "bytes"], "--agg replaces --reducer"),
])
def test_bad_aggregates_give_one_line_errors(tmp_path, capsys, args, needle):
    path = tmp_path / "events.csv"
    path.write_text("user,bytes\nann,3\n")
    code = main(["run", "--input", str(path), "--key", "user", "--runtime", "local", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and needle in err[0], err
