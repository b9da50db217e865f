"""How good a first ring the ring policies plan on the mappers' forecast (no Ray).

For each of ``--seeds`` Zipf(``--z``) jobs (``--rows`` records over ``--keys`` keys, seeds
0, 1, ...) the forecast a mapper would send (:func:`dpa.engine.mapper.block_forecast` of the
job's first block; the whole job when it fits one block, as these do) is planned on as
``doubling`` and ``halving`` with their ``JobConfig()`` defaults do
(:func:`~dpa.routing.policies.ring.forecast.plan_first_ring`), once from the policy's first
ring alone and once also from first rings of the other sizes the planner tries
(:func:`~dpa.routing.policies.ring.forecast.first_ring_sizes`). Each planned ring is then
scored on the job's exact key counts: the records of its largest reducer, in fair shares
(``rows / R``). With a fixed cost per record, a job's makespan cannot beat that times the
ideal. Reported per policy and mode: mean, median and worst share over the seeds, and the
median planning time.

Run::

    python -m benchmarks.first_ring --seeds 30
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks.common import print_table, write_json


def planned_share(table: Any, method: str, num_reducers: int, other_sizes: bool) -> tuple[float, float]:
    """Plans ``method``'s first ring on ``table``'s forecast; returns the ring's largest
    share on the exact key counts and the seconds the planning took."""
    import dpa
    from dpa.engine.mapper import block_forecast
    from dpa.keys.columns import hash_key_columns
    from dpa.routing.policies.ring.forecast import (
        FORECAST_ROUNDS,
        first_ring_sizes,
        forecast_loads,
        plan_first_ring,
    )
    from dpa.routing.registry import make_policy

    policy = make_policy(dpa.JobConfig(shape=dpa.ShapeConfig(num_reducers=num_reducers),
                                        balance=dpa.BalanceConfig(policy=method)))
    ring = policy.make_planner(num_reducers).ring
    loads = forecast_loads(*block_forecast(hash_key_columns(table, ["key"])))  # as the planner takes it
    sizes = first_ring_sizes(method, policy.settings.initial_tokens) if other_sizes else ()
    t0 = time.perf_counter()
    plan = plan_first_ring(ring, method, loads, [FORECAST_ROUNDS] * num_reducers, sizes)
    seconds = time.perf_counter() - t0
    if plan.respace:
        ring.respace(plan.respace)
    for x in plan.relieved:
        ring.redistribute(x, method)
    exact = table.group_by("key").aggregate([([], "count_all")])
    owners = ring.snapshot().lookup_batch(hash_key_columns(exact, ["key"]))
    loads_per_reducer = np.bincount(owners, weights=exact["count_all"].to_numpy(), minlength=num_reducers)
    return float(loads_per_reducer.max()) * num_reducers / len(table), seconds


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=30, help="jobs, seeds 0 .. N-1")
    p.add_argument("--rows", type=int, default=40_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--z", type=float, default=1.1)
    p.add_argument("--reducers", type=int, default=8)
    p.add_argument("--out", default=None, help="write the figures as JSON here")
    args = p.parse_args(argv)

    from workloads.generators import zipf

    tables = [zipf(args.z, args.keys, args.rows, seed=seed) for seed in range(args.seeds)]
    planned_share(tables[0], "doubling", args.reducers, True)  # (token positions hashed once per process)
    rows = []
    for method in ("doubling", "halving"):
        for other_sizes in (False, True):
            runs = [planned_share(t, method, args.reducers, other_sizes) for t in tables]
            shares = [r[0] for r in runs]
            rows.append({
                "policy": method, "first rings": "other sizes too" if other_sizes else "the policy's",
                "mean": statistics.mean(shares), "median": statistics.median(shares), "worst": max(shares),
                "seed 1": shares[1] if len(shares) > 1 else float("nan"),
                "plan_ms": 1000 * statistics.median(r[1] for r in runs),
            })
    print_table(rows, title=f"largest share of the planned first ring, {args.seeds} Zipf({args.z}) jobs "
                            f"({args.rows} records, {args.keys} keys, {args.reducers} reducers)")
    payload = {"args": vars(args), "rows": rows}
    write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
