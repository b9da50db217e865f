"""A pool that runs integer-keyed jobs never loads pandas (a fresh process and Ray).

pyarrow's numpy conversions import pandas (about 0.25 s of CPU and 35 MB per process), and
Arrow's group-by imports it with its query engine; dpa's hot path for number keys and
aggregates avoids both (:mod:`dpa._internal.arrays`, :mod:`dpa.aggregates.dense`). A string key
still needs Arrow's group-by: that is the control showing the check sees pandas at all.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import json, psutil
    import numpy as np, pyarrow as pa
    import dpa

    def pools_with_pandas():
        out = {}
        for proc in psutil.Process().children(recursive=True):
            try:
                title = proc.cmdline()[0] if proc.cmdline() else ""
                if not title.startswith(("ray::HostActor", "ray::CoordinatorActor")):
                    continue
                with open(f"/proc/{proc.pid}/maps") as maps:
                    out[f"{title.split()[0]}-{proc.pid}"] = "/pandas/" in maps.read()
            except (psutil.Error, OSError):
                pass
        return out

    rng = np.random.default_rng(3)
    keys = rng.zipf(1.2, 200_000) % 50_000
    table = pa.table({"key": keys, "v": rng.integers(0, 100, len(keys)), "x": rng.random(len(keys))})
    config = dpa.JobConfig(shape=dpa.ShapeConfig(num_mappers=2, num_reducers=4))
    got = dpa.run(table, key="key", reducer=[dpa.Count(), dpa.Sum("v"), dpa.Max("v"), dpa.Mean("x"), dpa.Std("x")],
                  config=config).to_arrow()
    want = table.group_by("key").aggregate([([], "count_all"), ("v", "sum"), ("v", "max"), ("x", "mean")])
    assert got.num_rows == want.num_rows
    after_ints = pools_with_pandas()
    dpa.run(table.set_column(0, "key", table["key"].cast(pa.string())), key="key", reducer=dpa.Count(),
            config=config).to_arrow()
    after_strings = pools_with_pandas()
    dpa.shutdown()
    print(json.dumps({"ints": after_ints, "strings": after_strings}))
""")


def test_integer_keyed_jobs_leave_the_pool_without_pandas():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(seen["ints"]) >= 2, seen  # the coordinator and the hosts
    assert not any(seen["ints"].values()), f"pandas loaded in {seen['ints']}"
    assert any(seen["strings"].values()), seen  # (a string key groups with Arrow: pandas)
