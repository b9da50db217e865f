"""``dpa run --apply MODULE:FUNCTION``: a per-group function from the command line."""

from __future__ import annotations

import sys

import pyarrow.parquet as pq
import pytest

from dpa.tools.cli import main

JOBS = '''
import pandas as pd

def per_user(pdf):
    return pd.DataFrame({"user": [pdf.user.iloc[0]], "n": [len(pdf)], "bytes": [int(pdf.bytes.sum())]})

NOT_A_FUNCTION = 3
'''


@pytest.fixture
def jobs_module(tmp_path, monkeypatch):
    (tmp_path / "cli_jobs_mod.py").write_text(JOBS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("cli_jobs_mod", None)


def _events(path):
    path.write_text("user,bytes\n" + "".join(f"u{i % 3 if i % 4 else 0},{i}\n" for i in range(40)))
    return path


def test_a_per_group_function_runs_and_its_schedule_is_summarised(jobs_module, capsys):
    out = jobs_module / "out.parquet"
    code = main(["run", "--input", str(_events(jobs_module / "e.csv")), "--key", "user", "--apply",
                 "cli_jobs_mod:per_user", "--runtime", "local", "--no-progress", "--output", str(out),
                 "--report", str(jobs_module / "report")])
    printed = capsys.readouterr().out
    assert code == 0, printed
    rows = {r["user"]: (r["n"], r["bytes"]) for r in pq.read_table(out).to_pylist()}
    want: dict = {}
    for i in range(40):
        user = f"u{i % 3 if i % 4 else 0}"
        n, total = want.get(user, (0, 0))
        want[user] = (n + 1, total + i)
    assert rows == want
    assert "groups applied: 3 in" in printed and "moved to a free worker:" in printed


@pytest.mark.parametrize("spec, needle", [
    ("cli_jobs_mod", "takes MODULE:FUNCTION"),
    ("cli_jobs_mod:nope", "cannot load 'nope'"),
    ("cli_jobs_mod:NOT_A_FUNCTION", "not a function"),
])
def test_a_bad_apply_spec_is_a_one_line_error(jobs_module, capsys, spec, needle):
    code = main(["run", "--input", str(_events(jobs_module / "e.csv")), "--key", "user", "--apply", spec,
                 "--runtime", "local"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and needle in err[0], err
