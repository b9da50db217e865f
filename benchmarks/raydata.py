"""dpa against Ray Data on the same Ray, in one run: cheap aggregations and a costly skewed job.

Jobs (every input is one materialized ``ray.data.Dataset``, read by both engines):

* **count / sum / mean**: 10M rows, int64 keys drawn from a Zipf(1.1) over 100k keys, an
  int64 value column. Ray Data: ``ds.groupby("key").count()`` / ``.sum("v")`` /
  ``.mean("v")``; dpa: ``dpa.groupby(ds, "key").count()`` / ... (``dpa.run`` with
  ``JobConfig()`` defaults, the result kept as a Ray Dataset: ``Result.to_ray_dataset()``).
* **costly**: 40k records with Zipf(1.1) keys over 10k, every record costing 1 ms (sleep),
  8-way. Ray Data: ``ds.groupby("key", num_partitions=8).map_groups(fn, concurrency=8)``
  (written ``compute=TaskPoolStrategy(size=8)``, its non-deprecated form)
  where ``fn`` sleeps 1 ms per row of its group and returns the group's count; dpa:
  ``WithCost(Count(), 0.001)`` with ``num_reducers=8`` and every other knob at its
  default. Ideal makespan ``N * c / 8``. Ray Data's tasks ask for one CPU each (its
  default), so on a small machine fewer than 8 run at once; the ``costly-0.25cpu`` row gives
  them ``num_cpus=0.25`` so that 8 run at once.

Both engines' jobs end with their result in the object store (``materialize()`` /
``to_ray_dataset()``); the answers are then fetched and checked equal (outside the timing).
**cold** is each engine's first run of a job in this process (dpa starts its actor pool of
that shape, Ray Data its first tasks), **warm** the median of ``--reps`` runs after it, with
their spread (max - min). Ratios are Ray Data's time over dpa's.

Run: ``python -m benchmarks.raydata [--rows 10M] [--reps 3] [--out benchmarks/results/raydata.json]``
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.common import (
    base_parser,
    init_ray,
    median,
    parse_int,
    print_table,
    stop_ray,
    write_json,
)

logger = logging.getLogger(__name__)

CHEAP_JOBS = ("count", "sum", "mean")
COSTLY_JOBS = ("costly", "costly-0.25cpu")


def command_line() -> str:
    return "python -m benchmarks.raydata " + " ".join(sys.argv[1:])


def make_dataset(rows: int, keys: int, z: float, seed: int, blocks: int) -> Any:
    """A materialized Ray Dataset of ``rows`` Zipf keys (``key``) and int64 values (``v``)."""
    import ray.data

    from workloads.generators import zipf

    table = zipf(z, keys, rows, seed=seed)
    values = np.random.default_rng(seed + 1).integers(0, 1000, rows, dtype=np.int64)
    table = table.append_column("v", pa.array(values))
    step = -(-rows // blocks)
    return ray.data.from_arrow([table.slice(i, step) for i in range(0, rows, step)]).materialize()


def _fetch(ds: Any) -> pa.Table:
    import ray

    refs = list(ds.to_arrow_refs())
    tables = [t for t in ray.get(refs) if t.num_rows]
    if not tables:
        return pa.table({})
    table = pa.concat_tables(tables, promote_options="permissive")
    return table.sort_by([("key", "ascending")])


def check_equal(name: str, got: pa.Table, want: pa.Table) -> None:
    """Raises AssertionError unless dpa's answer ``got`` equals Ray Data's ``want``."""
    if got.num_rows != want.num_rows or got["key"].to_pylist() != want["key"].to_pylist():
        raise AssertionError(f"{name}: dpa has {got.num_rows} keys, Ray Data {want.num_rows}, or other keys")
    g = np.asarray(got.column(got.num_columns - 1).to_numpy(zero_copy_only=False), dtype=np.float64)
    w = np.asarray(want.column(want.num_columns - 1).to_numpy(zero_copy_only=False), dtype=np.float64)
    if not np.allclose(g, w, rtol=1e-9, atol=0):
        bad = int(np.argmax(~np.isclose(g, w, rtol=1e-9, atol=0)))
        raise AssertionError(f"{name}: key {got['key'][bad]} dpa {g[bad]} Ray Data {w[bad]}")


def _per_group_cost(cost_s: float) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    def per_group(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        n = len(batch["key"])
        time.sleep(cost_s * n)
        return {"key": batch["key"][:1], "count()": np.array([n], dtype=np.int64)}

    return per_group


def ray_data_job(name: str, ds: Any, cost_s: float) -> Any:
    """Ray Data's own plan for job ``name``, executed (materialized)."""
    if name == "count":
        return ds.groupby("key").count().materialize()
    if name == "sum":
        return ds.groupby("key").sum("v").materialize()
    if name == "mean":
        return ds.groupby("key").mean("v").materialize()
    extra = {"num_cpus": 0.25} if name == "costly-0.25cpu" else {}
    grouped = ds.groupby("key", num_partitions=8)
    import ray.data

    # compute=TaskPoolStrategy(size=8) is what map_groups(fn, concurrency=8) means for a
    # function (Ray 2.51 deprecated the concurrency argument in its favour).
    pool = ray.data.TaskPoolStrategy(size=8)
    return grouped.map_groups(_per_group_cost(cost_s), compute=pool, **extra).materialize()


def dpa_job(name: str, ds: Any, cost_s: float, timeout_s: float) -> tuple[Any, Any]:
    """dpa's run of job ``name``: ``(its result as a Ray Dataset, the dpa.Result)``."""
    import dpa

    if name in CHEAP_JOBS:
        grouped = dpa.groupby(ds, "key")
        reducer = {"count": dpa.Count(name="count()"), "sum": dpa.Sum("v", "sum(v)"),
                   "mean": dpa.Mean("v", "mean(v)")}[name]
    else:
        grouped = dpa.groupby(ds, "key", num_reducers=8, timeout_s=timeout_s)
        reducer = dpa.WithCost(dpa.Count(name="count()"), cost_s, mode="sleep")
    result = grouped.run(reducer)
    return result.to_ray_dataset(), result


def measure(name: str, ds: Any, args: Any, ideal: float | None) -> dict[str, Any]:
    """Cold then ``args.reps`` warm runs of both engines on job ``name``; answers checked."""
    cost = args.cost_ms / 1000.0
    timeout = max(300.0, 20 * ideal) if ideal else 600.0
    times: dict[str, list[float]] = {"ray_data": [], "dpa": []}
    loads = []
    want = got = None
    for rep in range(args.reps + 1):
        loads.append(os.getloadavg()[0])
        for engine in ("ray_data", "dpa"):
            t0 = time.perf_counter()
            out = ray_data_job(name, ds, cost) if engine == "ray_data" else dpa_job(name, ds, cost, timeout)[0]
            times[engine].append(time.perf_counter() - t0)
            table = _fetch(out)
            if engine == "ray_data":
                want = table
            else:
                got = table
            del out
        check_equal(name, got, want)
        print(f"  {name:<15} rep {rep} ({'cold' if rep == 0 else 'warm'}): Ray Data {times['ray_data'][-1]:7.2f}s"
              f"  dpa {times['dpa'][-1]:6.2f}s  answers equal ({got.num_rows:,} keys)  load {loads[-1]:.1f}",
              flush=True)
    row: dict[str, Any] = {"job": name, "keys": got.num_rows}
    for engine in ("ray_data", "dpa"):
        warm = times[engine][1:]
        row[f"{engine}_cold_s"] = times[engine][0]
        row[f"{engine}_warm_s"] = median(warm)
        row[f"{engine}_warm_spread_s"] = max(warm) - min(warm)
        row[f"{engine}_runs_s"] = times[engine]
    row["speedup_warm"] = row["ray_data_warm_s"] / row["dpa_warm_s"]
    row["speedup_cold"] = row["ray_data_cold_s"] / row["dpa_cold_s"]
    if ideal:
        row["ideal_s"] = ideal
        row["ray_data_x_ideal_warm"] = row["ray_data_warm_s"] / ideal
        row["dpa_x_ideal_warm"] = row["dpa_warm_s"] / ideal
        row["dpa_x_ideal_cold"] = row["dpa_cold_s"] / ideal
    row["load_avg_1m"] = median(loads)
    return row


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__.splitlines()[0], rows=10_000_000)
    p.add_argument("--keys", type=parse_int, default=100_000, help="distinct keys of the cheap jobs (default 100k)")
    p.add_argument("--z", type=float, default=1.1, help="Zipf exponent (default 1.1)")
    p.add_argument("--blocks", type=int, default=16, help="blocks of the input datasets (default 16)")
    p.add_argument("--costly-rows", type=parse_int, default=40_000, help="records of the costly job (default 40k)")
    p.add_argument("--costly-keys", type=parse_int, default=10_000, help="distinct keys of the costly job (default 10k)")
    p.add_argument("--cost-ms", type=float, default=1.0, help="cost per record of the costly job (default 1 ms)")
    p.add_argument("--reps", type=int, default=3, help="warm runs per engine and job (default 3)")
    p.add_argument("--jobs", default=",".join(CHEAP_JOBS + COSTLY_JOBS),
                   help=f"comma-separated jobs (default all: {','.join(CHEAP_JOBS + COSTLY_JOBS)})")
    args = p.parse_args(argv)
    jobs = [j for j in args.jobs.split(",") if j]
    unknown = sorted(set(jobs) - set(CHEAP_JOBS + COSTLY_JOBS))
    if unknown:
        p.error(f"unknown job(s) {unknown}; choose from {', '.join(CHEAP_JOBS + COSTLY_JOBS)}")
    ray_init_s = init_ray()
    import ray.data

    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    rows = []
    try:
        if any(j in CHEAP_JOBS for j in jobs):
            ds = make_dataset(args.rows, args.keys, args.z, args.seed, args.blocks)
            for name in (j for j in jobs if j in CHEAP_JOBS):
                rows.append(measure(name, ds, args, None))
            del ds
        if any(j in COSTLY_JOBS for j in jobs):
            ds = make_dataset(args.costly_rows, args.costly_keys, args.z, args.seed, args.blocks)
            ideal = args.costly_rows * args.cost_ms / 1000.0 / 8
            for name in (j for j in jobs if j in COSTLY_JOBS):
                rows.append(measure(name, ds, args, ideal))
    finally:
        stop_ray()
    print_table(rows, ["job", "ray_data_warm_s", "ray_data_warm_spread_s", "dpa_warm_s", "dpa_warm_spread_s",
                       "speedup_warm", "ray_data_cold_s", "dpa_cold_s", "speedup_cold", "load_avg_1m"],
                title=f"dpa vs Ray Data, same Ray; warm = median of {args.reps}, spread = max - min")
    write_json(args.out, {"command": command_line(), "ray_init_s": ray_init_s, "rows": args.rows,
                          "keys": args.keys, "z": args.z, "costly_rows": args.costly_rows,
                          "costly_keys": args.costly_keys, "cost_ms": args.cost_ms, "reps": args.reps,
                          "results": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
