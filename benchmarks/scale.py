"""Scale on Ray: many logical reducers on a few cores, and what the control plane costs them.

Job: every reducer sleeps ``--cost-ms`` (default 2 ms) per record
(``dpa.WithCost(dpa.Count(), 2e-3)``, ``mode="sleep"``), so the reducers' own work needs no
CPU and whatever CPU the job uses is the control plane's: mapping and routing, steps,
reports, the balancer, the coordinator. ``--records-per-reducer`` (default 1,000) records
per reducer, keys uniform over ``10 x`` the records' count / 100 ... (one key per 10
records), so a reducer's ideal time is ``records per reducer x cost`` (2 s) whatever the
width. Ray is started in this process with ``--cpus`` (default 8) logical CPUs, and the job
runs with ``JobConfig()`` defaults but its width (``num_reducers``): the mappers are one
per logical CPU.

For each width (default 16, 64, 256) an untimed run at that width starts the pool and
warms it; then ``--reps`` timed runs. Reported per width: wall time, ideal, time / ideal,
the CPU seconds of the dpa processes (the hosts that run the reducers and mappers, and the
coordinator that runs the balancer) and that CPU per reducer-second (CPU / (reducers x
wall)), the records of the busiest reducer over the mean, the rebalances, and whether the
counts equal DuckDB's ``GROUP BY`` over the same table.
Targets: 64 reducers <= 1.3x ideal, 256 <= 2x.

``--simulate`` runs the same jobs in the in-process runtime instead (virtual time, the
message costs measured on Ray, :data:`dpa.runtime.message_costs.MEASURED`, the reducers in
``--hosts`` processes, default 2 as on this machine): time / ideal, the busiest reducer
over the mean and the rebalances, deterministic (one run per width, no Ray).

Run::

    python -m benchmarks.scale [--reducers 16 64 256] [--reps 2] [--batch-size N] [--policy P] [--policy-option K=V] [--out benchmarks/results/scale.json]
    python -m benchmarks.scale --simulate [--policy P] [--hosts 2]
    python -m benchmarks.scale --reducers 16 --reps 2 --busy   # also a busy reducer's own CPU per second

``--busy`` adds one job of one reducer and one mapper (``--busy-records``, default 5,000
records, 10 s of sleep): the CPU of the host running them per second of the job, an upper
bound of what a busy reducer's own loop costs (target 0.01 core-second per second), and
the same processes' CPU per second while the pool is idle (Ray's own threads), for comparison.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.common import CpuMeter, init_ray, print_table, stop_ray, write_json

#: Targets of time / ideal by width.
TARGETS = {64: 1.3, 256: 2.0}
#: Seconds ``--busy`` watches the idle pool's CPU before its job (Ray's own threads).
IDLE_S = 5.0


def make_table(records: int, seed: int) -> pa.Table:
    """``records`` rows of ``key`` (uniform over one key per 10 records)."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, max(1, records // 10), records)
    return pa.table({"key": pa.array(keys, pa.int64())})


def reference(table: pa.Table) -> dict[int, int]:
    """Counts per key by DuckDB (an engine independent of dpa)."""
    import duckdb

    con = duckdb.connect()
    con.register("t", table)
    rows = con.execute("SELECT key, count(*) FROM t GROUP BY key").fetchall()
    con.close()
    return {int(k): int(n) for k, n in rows}


def run_once(table: pa.Table, reducers: int, cost_s: float, batch_size: int | None = None,
             policy: str | None = None,
             policy_options: dict[str, Any] | None = None,
             mappers: int | None = None) -> tuple[Any, float, dict[str, float], Any]:
    """One job; returns ``(result table, wall seconds, CPU seconds by role, stats)``."""
    import dpa

    cfg = dpa.JobConfig(shape=dpa.ShapeConfig(num_reducers=reducers, num_mappers=mappers), recovery=dpa.RecoveryConfig(timeout_s=600),
                        flow=dpa.FlowConfig(batch_size=batch_size))
    if policy is not None:
        cfg = cfg.with_options(policy=policy)
    if policy_options:
        cfg = cfg.with_options(policy_options=policy_options)
    meter = CpuMeter()
    meter.start()
    t0 = time.perf_counter()
    res = dpa.run(table, key="key", reducer=dpa.WithCost(dpa.Count(), cost_s), config=cfg)
    out = res.to_arrow()
    wall = time.perf_counter() - t0
    return out, wall, meter.stop(), res.stats


def measure(reducers: int, args: argparse.Namespace) -> dict[str, Any]:
    cost_s = args.cost_ms / 1e3
    records = reducers * args.records_per_reducer
    table = make_table(records, args.seed + reducers)
    ref = reference(table)
    options = policy_options(args)
    run_once(make_table(reducers * 20, 0), reducers, cost_s, args.batch_size, args.policy, options)  # starts the pool
    ideal = args.records_per_reducer * cost_s
    reps = []
    for _ in range(args.reps):
        out, wall, cpu, stats = run_once(table, reducers, cost_s, args.batch_size, args.policy, options)
        processed = np.asarray(stats.processed, dtype=np.float64)
        got = dict(zip(out.column("key").to_pylist(), out.column(out.column_names[-1]).to_pylist()))
        dpa_cpu = cpu.get("host", 0.0) + cpu.get("coordinator", 0.0)
        reps.append({"wall_s": wall, "x_ideal": wall / ideal, "exact": got == ref,
                     "host_cpu_s": cpu.get("host", 0.0), "coordinator_cpu_s": cpu.get("coordinator", 0.0),
                     "driver_cpu_s": cpu.get("driver", 0.0), "ray_cpu_s": cpu.get("raylet", 0.0) + cpu.get("gcs", 0.0),
                     "cpu_per_reducer_s": dpa_cpu / (reducers * wall),
                     "busiest_over_mean": float(processed.max() / processed.mean()), "rebalances": len(stats.rebalances)})
    best = min(reps, key=lambda r: r["wall_s"])
    return {"reducers": reducers, "records": records, "ideal_s": ideal, "reps": reps,
            "wall_s": statistics.median(r["wall_s"] for r in reps), "x_ideal": statistics.median(r["x_ideal"] for r in reps),
            "best_x_ideal": best["x_ideal"], "exact": all(r["exact"] for r in reps),
            "host_cpu_s": statistics.median(r["host_cpu_s"] for r in reps),
            "coordinator_cpu_s": statistics.median(r["coordinator_cpu_s"] for r in reps),
            "cpu_per_reducer_s": statistics.median(r["cpu_per_reducer_s"] for r in reps),
            "busiest_over_mean": statistics.median(r["busiest_over_mean"] for r in reps),
            "rebalances": statistics.median(r["rebalances"] for r in reps),
            "target_x_ideal": TARGETS.get(reducers)}


def busy_reducer(args: argparse.Namespace) -> dict[str, Any]:
    """One reducer and one mapper (a pool of its own), ``--busy-records`` records of
    ``--cost-ms`` each: the reducer is busy the whole job, sleeping its cost, so the CPU of
    the host running it over the wall time is what a busy reducer's own loop costs per
    second (steps, reports, timers, pacing), with the mapper's pushes on top: an upper
    bound of the reducer's share. Target (issue item 1): <= 0.01 core-second per second."""
    cost_s = args.cost_ms / 1e3
    table = make_table(args.busy_records, args.seed)
    run_once(make_table(20, 0), 1, cost_s, mappers=1)  # the pool
    idle = CpuMeter()  # the same processes with no job: what Ray's own threads use
    idle.start()
    time.sleep(IDLE_S)
    idle_cpu = idle.stop()
    reps = []
    for _ in range(args.reps):
        out, wall, cpu, _ = run_once(table, 1, cost_s, mappers=1)
        got = dict(zip(out.column("key").to_pylist(), out.column(out.column_names[-1]).to_pylist()))
        reps.append({"wall_s": wall, "host_cpu_s": cpu.get("host", 0.0), "coordinator_cpu_s": cpu.get("coordinator", 0.0),
                     "host_cpu_per_s": cpu.get("host", 0.0) / wall, "exact": got == reference(table)})
    return {"records": args.busy_records, "ideal_s": args.busy_records * cost_s, "reps": reps,
            "wall_s": statistics.median(r["wall_s"] for r in reps),
            "host_cpu_per_s": statistics.median(r["host_cpu_per_s"] for r in reps),
            "coordinator_cpu_per_s": statistics.median(r["coordinator_cpu_s"] / r["wall_s"] for r in reps),
            "host_idle_cpu_per_s": idle_cpu.get("host", 0.0) / IDLE_S,
            "coordinator_idle_cpu_per_s": idle_cpu.get("coordinator", 0.0) / IDLE_S,
            "exact": all(r["exact"] for r in reps), "target_cpu_per_s": 0.01}


def policy_options(args: argparse.Namespace) -> dict[str, Any]:
    """``--policy-option k=v`` as ``BalanceConfig.policy_options`` (values read as Python literals)."""
    import ast

    options = {}
    for item in getattr(args, "policy_option", None) or ():
        key, _, value = item.partition("=")
        options[key] = ast.literal_eval(value)
    return options


def simulate(reducers: int, args: argparse.Namespace) -> dict[str, Any]:
    """The job at ``reducers`` in the in-process runtime with the measured message costs."""
    import dpa
    from dpa.engine.planning import build_plan
    from dpa.input.sources import normalize_source
    from dpa.runtime.local import run_local
    from dpa.runtime.message_costs import MEASURED

    cost_s = args.cost_ms / 1e3
    table = make_table(reducers * args.records_per_reducer, args.seed + reducers)
    cfg = dpa.JobConfig(shape=dpa.ShapeConfig(num_reducers=reducers), runtime="local",
                        flow=dpa.FlowConfig(batch_size=args.batch_size))
    if args.policy is not None:
        cfg = cfg.with_options(policy=args.policy)
    if policy_options(args):
        cfg = cfg.with_options(policy_options=policy_options(args))
    cfg = cfg.resolved()
    plan, blocks = build_plan(normalize_source(table, cfg.batch_size, cfg.num_mappers), "key",
                              dpa.WithCost(dpa.Count(), cost_s), None, cfg)
    out = run_local(plan, blocks, costs=MEASURED, hosts=args.hosts)
    processed = np.asarray(out.processed, dtype=np.float64)
    tables = [t for t in out.tables if t is not None]
    got = dict(zip(*(pa.concat_tables(tables).column(i).to_pylist() for i in (0, 1))))
    ideal = args.records_per_reducer * cost_s
    return {"reducers": reducers, "hosts": args.hosts, "virtual_s": out.virtual_time_s, "ideal_s": ideal,
            "x_ideal": out.virtual_time_s / ideal, "busiest_over_mean": float(processed.max() / processed.mean()),
            "rebalances": len(out.rebalances), "balancer_busy": out.extra["sim"]["balancer"]["busy_fraction"],
            "exact": got == reference(table)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reducers", type=int, nargs="+", default=[16, 64, 256])
    p.add_argument("--records-per-reducer", type=int, default=1_000)
    p.add_argument("--cost-ms", type=float, default=2.0)
    p.add_argument("--cpus", type=int, default=8, help="logical CPUs of the Ray started here")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--policy", default=None, help="BalanceConfig.policy (default dpa's)")
    p.add_argument("--policy-option", action="append", metavar="K=V",
                   help="BalanceConfig.policy_options entry, e.g. level_rounds=0 (repeatable)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="FlowConfig.batch_size (default dpa's: one block for these tables, so one busy mapper)")
    p.add_argument("--out", default=None, help="JSON (default benchmarks/results/scale.json, or scale_sim_ray_job.json)")
    p.add_argument("--simulate", action="store_true", help="the in-process runtime with measured message costs")
    p.add_argument("--hosts", type=int, default=2, help="--simulate: the reducers' host processes")
    p.add_argument("--busy", action="store_true", help="also a busy reducer's own CPU per second (one reducer)")
    p.add_argument("--busy-records", type=int, default=5_000, help="--busy: records of the one reducer")
    args = p.parse_args(argv)
    if args.simulate:
        rows = [simulate(w, args) for w in args.reducers]
        print_table(rows, columns=["reducers", "hosts", "virtual_s", "ideal_s", "x_ideal", "busiest_over_mean",
                                   "rebalances", "balancer_busy", "exact"],
                    title=f"simulated: sleep-cost job, {args.cost_ms:g} ms x {args.records_per_reducer:,} records per "
                          f"reducer, policy {args.policy or 'default'}, measured message costs")
        write_json(args.out or os.path.join("benchmarks", "results", "scale_sim_ray_job.json"),
                   {"simulated": rows, "policy": args.policy, "cost_ms": args.cost_ms,
                    "records_per_reducer": args.records_per_reducer})
        return
    args.out = args.out or os.path.join("benchmarks", "results", "scale.json")
    init_ray(num_cpus=args.cpus)
    try:
        rows = [measure(w, args) for w in args.reducers]
        busy = busy_reducer(args) if args.busy else None
    finally:
        stop_ray()
    print_table([{"reducers": r["reducers"], "wall_s": r["wall_s"], "ideal_s": r["ideal_s"], "x_ideal": r["x_ideal"],
                  "target": r["target_x_ideal"], "hosts_cpu_s": r["host_cpu_s"], "coord_cpu_s": r["coordinator_cpu_s"],
                  "cpu/reducer-s": r["cpu_per_reducer_s"], "busiest/mean": r["busiest_over_mean"],
                  "rebalances": r["rebalances"], "exact": r["exact"]} for r in rows],
                title=f"sleep-cost job, {args.cost_ms:g} ms x {args.records_per_reducer:,} records per reducer, "
                      f"Ray with {args.cpus} logical CPUs on {os.cpu_count()} cores")
    if busy is not None:
        print_table([{k: busy[k] for k in ("records", "ideal_s", "wall_s", "host_cpu_per_s", "host_idle_cpu_per_s",
                                           "coordinator_cpu_per_s", "coordinator_idle_cpu_per_s", "target_cpu_per_s",
                                           "exact")}],
                    title="a busy reducer: one reducer and one mapper; the host's CPU per second of the job")
    write_json(args.out, {"ray": rows, "busy_reducer": busy, "cpus": args.cpus, "cost_ms": args.cost_ms,
                          "records_per_reducer": args.records_per_reducer, "policy": args.policy})


if __name__ == "__main__":
    main()
