"""Overhead of the DPA load balancer when there is nothing to balance.

Uniform keys (default 10M records over K=100k keys) are counted with the balancer on
(``--policy``: hybrid, the default policy, or doubling / halving with ``max_rounds=1``,
``tau=0.2``) and off (``max_rounds=0``; for hybrid its halving ring alone), alternating on/off
for ``--reps`` pairs so that drifting machine load hits both alike. Reported: median wall
time per mode, the overhead ``(on - off) / off``, the CPU seconds of all job processes
per run (less sensitive to other load than wall time), and how often the balancer fired.
The ring policies' first ring has evenly spaced tokens (``token_spacing="even"``), so
uniform keys are uniform load on every policy; with the paper's hashed ring
(``token_spacing="hashed"``) the reducers' arcs differ by tens of percent and the balancer
may legitimately fire.

Run (small)::

    python -m benchmarks.lb_overhead --rows 1M --reps 3

Default::

    python -m benchmarks.lb_overhead --out lb_overhead.json
"""

from __future__ import annotations

import gc
import time
from typing import Any

import pyarrow.compute as pc

from benchmarks.common import (
    base_parser,
    config_overrides,
    count_keys,
    init_ray,
    median,
    parse_shaped,
    print_table,
    stop_ray,
    timed,
    write_json,
)

MODES = {"off": {"max_rounds": 0}, "on": {"max_rounds": 1}}
#: ``--policy hybrid`` (the default policy): off = its ring alone (halving, no rebalancing).
HYBRID_MODES = {"off": {"policy": "halving", "max_rounds": 0}, "on": {"max_rounds": 1}}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = base_parser(__doc__.split("\n")[0], 10_000_000)
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--reps", type=int, default=5, help="on/off pairs")
    p.add_argument("--tau", type=float, default=0.2)
    p.add_argument("--policy", choices=["hybrid", "doubling", "halving"], default="hybrid",
                   help="hybrid (the default policy; off = its halving ring without rebalancing), doubling, halving")
    p.add_argument("--patience", type=int, default=1,
                   help="checks the straggler must persist before the balancer acts (1 = the paper's rule)")
    args = parse_shaped(p, argv)

    import dpa
    from workloads.generators import uniform

    table = uniform(args.keys, args.rows, seed=args.seed)
    distinct = pc.count_distinct(table["key"]).as_py()
    base = {"num_mappers": args.mappers, "num_reducers": args.reducers, "policy": args.policy,
            "tau": args.tau, "policy_options": {"patience": args.patience}, **config_overrides(args)}
    modes = HYBRID_MODES if args.policy == "hybrid" else MODES
    configs = {mode: dpa.JobConfig().with_options(**{**base, **extra}) for mode, extra in modes.items()}
    startup = {"ray_init_s": init_ray()}
    runs: list[dict[str, Any]] = []
    try:
        t0 = time.perf_counter()
        for mode in MODES:  # start the pooled actors and warm both paths up
            count_keys(table, configs[mode])
        startup["cold_warmup_s"] = time.perf_counter() - t0
        for rep in range(args.reps):
            order = list(MODES) if rep % 2 == 0 else list(reversed(MODES))
            for mode in order:
                gc.collect()
                (res, out), wall, cpu_s = timed(lambda mode=mode: count_keys(table, configs[mode]))
                total = int(out["count"].to_numpy().sum())
                runs.append({
                    "rep": rep, "mode": mode, "wall_s": wall, "cpu_s": cpu_s,
                    "rebalances": sum(1 for e in res.stats.rebalances if getattr(e, "action", "") != "exhausted"),
                    "forwarded": sum(res.stats.forwarded), "skew": res.stats.skew,
                    "ok": total == args.rows and out.num_rows == distinct,
                })
    finally:
        stop_ray()

    print_table(runs, ["rep", "mode", "wall_s", "cpu_s", "rebalances", "forwarded", "skew", "ok"],
                title=f"runs ({args.rows:,} uniform records, K={args.keys:,}, {args.policy}, tau={args.tau})")
    summary = []
    for mode in MODES:
        mine = [r for r in runs if r["mode"] == mode]
        summary.append({
            "mode": mode, "median_wall_s": median(r["wall_s"] for r in mine),
            "median_cpu_s": median(r["cpu_s"] for r in mine),
            "Mrec_per_s": args.rows / median(r["wall_s"] for r in mine) / 1e6,
            "runs_with_rebalance": sum(1 for r in mine if r["rebalances"]),
            "median_forwarded": median(r["forwarded"] for r in mine),
            "all_ok": all(r["ok"] for r in mine),
        })
    off, on = summary[0], summary[1]
    overhead = {
        "wall_overhead_pct": 100.0 * (on["median_wall_s"] - off["median_wall_s"]) / off["median_wall_s"],
        "cpu_overhead_pct": 100.0 * (on["median_cpu_s"] - off["median_cpu_s"]) / off["median_cpu_s"],
        # Paired: each on-run against the off-run of the same repetition.
        "paired_median_wall_overhead_pct": median(
            100.0 * (a["wall_s"] - b["wall_s"]) / b["wall_s"]
            for a, b in zip([r for r in runs if r["mode"] == "on"], [r for r in runs if r["mode"] == "off"])
        ),
    }
    print_table(summary, title="load balancer on vs off (medians)")
    print_table([overhead], title="overhead of LB on (positive = slower)")
    payload = {"rows": args.rows, "keys": args.keys, "tau": args.tau, "policy": args.policy, "reps": args.reps,
               "mappers": args.mappers, "reducers": args.reducers, "config_overrides": config_overrides(args),
               "startup": startup, "runs": runs, "summary": summary, "overhead": overhead}
    write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
