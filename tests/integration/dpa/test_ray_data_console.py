"""Reading a Ray Dataset prints nothing: ``dpa.run(ds)``, ``dpa.groupby(ds).sum()`` and
``.map_groups()`` leave Ray Data's execution notices and progress off the console, whoever
started Ray, and the user's own Ray Data jobs keep Ray Data's settings."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd

import dpa

#: What Ray Data prints when it executes a dataset (its logger, its progress bars).
RAY_DATA_LINES = ("Running Dataset", "execution finished", "Starting execution", "Execution plan of Dataset",
                  "Progress bars disabled", "Dataset dataset_")


def lazy_dataset():
    import ray.data

    return ray.data.range(3000, override_num_blocks=6).map_batches(
        lambda b: {"k": b["id"] % 7, "x": b["id"]}, batch_format="numpy")


def dpa_jobs_on_lazy_datasets():
    """The three calls of the issue, each on a dataset Ray Data has not run yet (the two
    datasets they return are read later, by the caller: that is the user's own job)."""
    res = dpa.run(lazy_dataset(), key="k", reducer=dpa.Sum("x"))
    sums = dpa.groupby(lazy_dataset(), "k").sum("x")
    sizes = dpa.groupby(lazy_dataset(), "k").map_groups(lambda pdf: pd.DataFrame({"n": [len(pdf)]}),
                                                        batch_format="pandas")
    return res, sums, sizes


def test_dpa_reads_a_ray_dataset_without_a_line_on_the_console(ray_session, capfd):
    from ray.data import DataContext

    before = {k: getattr(DataContext.get_current(), k) for k in ("enable_progress_bars", "print_on_execution_start")}
    capfd.readouterr()
    res, sums, sizes = dpa_jobs_on_lazy_datasets()
    out, err = capfd.readouterr()
    for line in RAY_DATA_LINES:
        assert line not in out + err, f"{line!r} on the console:\n{(out + err)[-3000:]}"
    sums, sizes = sums.to_pandas(), sizes.to_pandas()
    assert res.to_dict() == {k: sum(range(k, 3000, 7)) for k in range(7)}
    assert dict(zip(sums["k"], sums["sum(x)"])) == res.to_dict()
    assert sorted(sizes["n"]) == sorted(len(range(k, 3000, 7)) for k in range(7))
    after = {k: getattr(DataContext.get_current(), k) for k in before}
    assert after == before  # the user's settings are back


USER_STARTED_RAY = textwrap.dedent(
    """
    import ray, pandas as pd
    ray.init(num_cpus=2, include_dashboard=False)
    import dpa
    from tests.integration.dpa.test_ray_data_console import dpa_jobs_on_lazy_datasets, lazy_dataset
    print("DPA-START", flush=True)
    import sys
    sys.stderr.write("DPA-START\\n"); sys.stderr.flush()
    res, sums, sizes = dpa_jobs_on_lazy_datasets()
    print("DPA-END", flush=True)
    sys.stderr.write("DPA-END\\n"); sys.stderr.flush()
    assert len(res) == 7 and sums.count() == 7 and sizes.count() == 7
    lazy_dataset().materialize()  # the user's own Ray Data job: Ray Data's console as usual
    """
)


def test_a_user_started_ray_gets_no_ray_data_lines_from_dpa_and_keeps_its_own(tmp_path):
    root = Path(__file__).resolve().parents[3]
    script = tmp_path / "user_ray.py"
    script.write_text(USER_STARTED_RAY)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=root,
                          env={**__import__("os").environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    for stream in (proc.stdout, proc.stderr):
        during = stream.split("DPA-START", 1)[1].split("DPA-END", 1)[0]
        for line in RAY_DATA_LINES:
            assert line not in during, f"{line!r} while dpa ran:\n{during[-3000:]}"
    after = proc.stdout.split("DPA-END", 1)[1] + proc.stderr.split("DPA-END", 1)[1]
    assert "execution finished" in after or "Running Dataset" in after or "Starting execution" in after, after[-2000:]
