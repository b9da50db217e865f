"""The first per-group jobs of a pool: ``--first-jobs N`` identical ``GroupApply`` jobs in a row.

The sleep workload of ``benchmarks.group_apply`` (40,000 Zipf(1.1) records over 10,000 keys,
``fn`` sleeps 1 ms per row of its group, 8 workers; bound = max(work / 8, the largest
group's sleep)) runs ``--first-jobs`` times in a row on one pool: the first job starts the
pool (its hosts warm up for group apply as they start, see ``docs/group_apply.md``), the
others reuse it. Each job's time over the bound is printed, and its apply phase's busiest
worker. ``--pools`` repeats the sequence on that many fresh pools (``dpa.shutdown()`` between
them, one Ray session) and gives the median ratio per position in the sequence. Every
answer is checked against pandas'.

Run (writes ``benchmarks/results/group_apply_first.json``)::

    python -m benchmarks.group_apply --first-jobs 4 --pools 3
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from benchmarks.common import init_ray, median, print_table, stop_ray, write_json


def add_arguments(p: argparse.ArgumentParser) -> None:
    """This case's options on the group-apply benchmark's parser."""
    p.add_argument("--first-jobs", type=int, default=0,
                   help="run N identical sleep-workload jobs in a row on a new pool and print each one's time "
                        "over the bound, instead of the engines' comparison")
    p.add_argument("--pools", type=int, default=1, help="first-jobs case: fresh pools, one sequence each (default 1)")


def main(args: argparse.Namespace) -> dict[str, Any]:
    """Runs ``args.pools`` sequences of ``args.first_jobs`` jobs; prints and returns the figures."""
    import dpa
    from benchmarks import group_apply as ga

    table = ga.make_table(args)
    cost = args.cost_ms / 1000.0
    bounds = ga.sleep_bounds(table["key"].to_numpy(), cost)
    want, _ = ga.reference(table, ga.sleep_fn(0.0))
    fn = ga.sleep_fn(cost)
    print(f"first per-group jobs of a pool: {args.first_jobs} jobs x {args.pools} pools, {args.rows:,} rows, "
          f"bound {bounds.bound_s:.2f}s ({os.cpu_count()} CPUs, load {os.getloadavg()})", flush=True)
    startup = {"ray_init_s": init_ray()}
    runs: list[dict[str, Any]] = []
    try:
        for pool in range(args.pools):
            dpa.shutdown()  # (the idle pools: the next job starts a new one)
            for job in range(args.first_jobs):
                load = os.getloadavg()[0]
                t0 = time.perf_counter()
                res = dpa.run(table, key="key", reducer=dpa.GroupApply(fn), num_reducers=ga.WORKERS)
                got = res.to_arrow()
                seconds = time.perf_counter() - t0
                stats = res.stats.to_dict().get("group_apply") or {}
                run = {"pool": pool, "job": job, "s": seconds, "x_bound": seconds / bounds.bound_s,
                       "busiest_worker_s": max(stats.get("busy_s") or [0.0]), "load_avg_1m": load,
                       "status": ga.check_answer(got, want)}
                runs.append(run)
                print(f"  pool {pool} job {job}: {seconds:6.2f}s = {run['x_bound']:.2f}x the bound; busiest worker "
                      f"{run['busiest_worker_s']:.2f}s; {run['status']}; load {load:.1f}", flush=True)
    finally:
        stop_ray()
    rows = []
    for job in range(args.first_jobs):
        mine = [r for r in runs if r["job"] == job]
        rows.append({"job": job, "median_x_bound": median([r["x_bound"] for r in mine]),
                     "x_bound_runs": [round(r["x_bound"], 3) for r in mine],
                     "median_s": median([r["s"] for r in mine]),
                     "status": next((r["status"] for r in mine if r["status"] != "ok"), "ok")})
    print_table(rows, ["job", "median_x_bound", "x_bound_runs", "median_s", "status"],
                title=f"the first {args.first_jobs} per-group jobs of a pool (job 0 starts it); x_bound = time / "
                      f"max(work / {ga.WORKERS}, largest group) = time / {bounds.bound_s:.2f}s")
    payload = {"rows": args.rows, "keys": args.keys, "z": args.z, "seed": args.seed, "cost_ms": args.cost_ms,
               "workers": ga.WORKERS, "jobs": args.first_jobs, "pools": args.pools, "bounds": bounds.to_dict(),
               "results": rows, "runs": runs, "startup": startup}
    write_json(args.out or None, payload)
    return payload
