"""Many small groups through a cheap per-group function: dpa's ``GroupApply`` on 2 workers
against pandas' single-process ``df.groupby("key").apply(fn)``, in one run.

``--groups`` keys (default 20,000) of ``--group-rows`` rows each (default 10; several
values sweep the group size at a fixed number of groups), in a shuffled order, with a
float64 ``v``. Two functions (``--fns``):

* **assign**: ``pdf.assign(x=pdf.v - pdf.v.mean())`` (every row back, one column more);
* **summary**: one row per group, ``(key, n, mean of v)``.

Engines, alternating within each repetition so that they meet the same machine load:

* ``pandas``: ``pdf.groupby("key").apply(fn)`` on the table already converted to pandas
  (the conversion is not timed: a pandas user starts from a DataFrame);
* ``dpa``: ``dpa.run(table, key="key", reducer=dpa.GroupApply(fn), num_reducers=2)`` on the
  Arrow table, every other knob at its default, ``res.to_arrow()`` fetched, on one Ray
  session kept up over the repetitions (a pool of warm actors).

Every dpa answer is checked against pandas' (rows compared after sorting). **cold** is the
first run, **warm** the median of ``--reps`` after it; ``ratio`` = dpa's warm median /
pandas' (target <= 0.75 at 10 rows a group on 2 cores).

Run (``--out`` writes ``benchmarks/results/group_apply_small.json``)::

    python -m benchmarks.group_apply --small-groups --reps 5
    python -m benchmarks.group_apply --small-groups --group-rows 2 10 50 --reps 3
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from benchmarks.common import init_ray, median, print_table, stop_ray, write_json

#: dpa's workers (reducers) in this case.
WORKERS = 2
FNS = ("assign", "summary")


def assign_fn(pdf: pd.DataFrame) -> pd.DataFrame:
    """Every row of the group with ``x`` = ``v`` minus the group's mean."""
    return pdf.assign(x=pdf.v - pdf.v.mean())


def summary_fn(pdf: pd.DataFrame) -> pd.DataFrame:
    """One row: the group's key, rows and mean of ``v``."""
    return pd.DataFrame({"key": pdf["key"].to_numpy()[:1], "n": [len(pdf)], "m": [float(pdf.v.mean())]})


FUNCTIONS: dict[str, Callable[[pd.DataFrame], pd.DataFrame]] = {"assign": assign_fn, "summary": summary_fn}


def make_table(groups: int, group_rows: int, seed: int = 1) -> pa.Table:
    """``groups`` int64 keys of ``group_rows`` rows each, shuffled, and a float64 ``v``."""
    rng = np.random.default_rng(seed)
    keys = rng.permutation(np.repeat(np.arange(groups, dtype=np.int64), group_rows))
    return pa.table({"key": keys, "v": rng.random(len(keys))})


def run_pandas(pdf: pd.DataFrame, fn: Callable[[pd.DataFrame], pd.DataFrame]) -> pd.DataFrame:
    """pandas' own ``groupby("key").apply(fn)`` (its warning about the key column silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return pdf.groupby("key", group_keys=False).apply(fn)


def run_dpa(table: pa.Table, fn: Callable[[pd.DataFrame], pd.DataFrame]) -> tuple[pa.Table, dict[str, Any]]:
    """dpa's ``GroupApply`` on ``WORKERS`` reducers; returns the answer and its apply stats."""
    import dpa

    res = dpa.run(table, key="key", reducer=dpa.GroupApply(fn), num_reducers=WORKERS)
    return res.to_arrow(), res.stats.to_dict().get("group_apply") or {}


def same_rows(got: pa.Table, want: pd.DataFrame) -> str:
    """``"ok"`` if ``got`` has ``want``'s rows in any order (floats within 1e-12), else a mismatch."""
    cols = list(want.columns)
    g = got.to_pandas()
    if sorted(g.columns) != sorted(cols) or len(g) != len(want):
        return f"MISMATCH: {len(g)} rows of {list(g.columns)}, expected {len(want)} of {cols}"
    g = g[cols].sort_values(cols).reset_index(drop=True)
    w = want.sort_values(cols).reset_index(drop=True)
    try:
        pd.testing.assert_frame_equal(g, w, check_dtype=False, rtol=1e-12)
    except AssertionError as exc:
        return f"MISMATCH: {str(exc).splitlines()[0]}"
    return "ok"


def measure(table: pa.Table, fn_name: str, reps: int, group_rows: int) -> list[dict[str, Any]]:
    """``reps + 1`` alternating runs of pandas and dpa; one summary row per engine."""
    fn = FUNCTIONS[fn_name]
    pdf = table.to_pandas()
    times: dict[str, list[float]] = {"pandas": [], "dpa": []}
    status, stats = "ok", {}
    for rep in range(reps + 1):
        t = time.perf_counter()
        want = run_pandas(pdf, fn)
        times["pandas"].append(time.perf_counter() - t)
        t = time.perf_counter()
        got, stats = run_dpa(table, fn)
        times["dpa"].append(time.perf_counter() - t)
        check = same_rows(got, want)
        status = status if check == "ok" else check
        print(f"  {fn_name:<8} {group_rows:>4} rows/group rep {rep} ({'cold' if rep == 0 else 'warm'}): "
              f"pandas {times['pandas'][-1]:.2f}s  dpa {times['dpa'][-1]:.2f}s  {check}  "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
    rows = []
    for engine, ts in times.items():
        warm = ts[1:] or ts
        rows.append({"fn": fn_name, "group_rows": group_rows, "groups": table.num_rows // group_rows,
                     "engine": engine, "median_s": median(warm), "spread_s": max(warm) - min(warm),
                     "cold_s": ts[0], "times_s": warm, "status": status if engine == "dpa" else "ok"})
    rows[1]["ratio"] = rows[1]["median_s"] / rows[0]["median_s"]
    rows[1]["units"] = stats.get("units")
    return rows


def add_arguments(p: argparse.ArgumentParser) -> None:
    """This case's options on the group-apply benchmark's parser."""
    p.add_argument("--small-groups", action="store_true",
                   help="run the many-small-groups case (dpa on 2 workers vs pandas groupby.apply) instead")
    p.add_argument("--groups", type=int, default=20_000, help="small-groups case: keys (default 20k)")
    p.add_argument("--group-rows", type=int, nargs="+", default=[10],
                   help="small-groups case: rows per group, one run per value (default 10)")
    p.add_argument("--fns", nargs="+", default=list(FNS), choices=FNS, help="small-groups case: functions")


def main(args: argparse.Namespace) -> dict[str, Any]:
    """Runs the case for every function and group size; prints and returns the figures."""
    print(f"many small groups: {args.groups:,} groups, dpa on {WORKERS} workers vs pandas groupby.apply "
          f"({os.cpu_count()} CPUs, load {os.getloadavg()})", flush=True)
    startup = {"ray_init_s": init_ray()}
    rows: list[dict[str, Any]] = []
    try:
        for group_rows in args.group_rows:
            table = make_table(args.groups, group_rows, args.seed)
            for fn_name in args.fns:
                rows += measure(table, fn_name, args.reps, group_rows)
    finally:
        stop_ray()
    print_table(rows, ["fn", "group_rows", "groups", "engine", "median_s", "spread_s", "cold_s", "ratio", "units",
                       "status"],
                title=f"many small groups: warm = median of {args.reps} after the cold run; ratio = dpa / pandas")
    payload = {"groups": args.groups, "group_rows": args.group_rows, "workers": WORKERS, "reps": args.reps,
               "results": rows, "startup": startup}
    write_json(args.out or None, payload)
    return payload
