"""Fault recovery: members killed mid-job, a node removed, and what checkpoints cost.

Three parts (all with the default ``JobConfig`` except ``num_reducers=8`` and the policy):

* **kills** (one local Ray): the straggler workload of ``benchmarks.stragglers`` (N=40k
  records, Zipf(1.1) over 10k keys, 1 ms of sleep per record, 4 mappers x 8 reducers) for
  the default policy and ``doubling``. Each is run fault-free ``--reps`` times; then, per
  victim (``reducer-3``; ``mapper``: the first mapper seen routing a block from a
  quarter of the fault-free median on), ``--reps`` runs in which the host running the
  victim (with the members it shares the host with) is killed with
  ``ray.kill(no_restart=True)`` at half the fault-free median. Printed: makespan, its ratio
  to the fault-free median, the seconds from the kill's detection until the job ran again
  (``recover_s``), the checkpoint rolled back to, records replayed, and exactness against
  pyarrow's ``group_by``. Targets: ratio <= 1.5, recover_s <= 5.
* **cost**: the 10M-record Zipf Count of ``benchmarks.throughput`` (Zipf(1.1) over 100k
  keys, 1M-row blocks), default checkpoints against ``checkpoint_interval_s=0``,
  alternating, ``--reps`` each; the ratio of medians. Target <= 1.05. The 10M job is over
  before its first epoch can close, so the same is run on 40M records, whose jobs take
  checkpoints (their count is printed).
* **overhead** (``--only overhead``): the kills' workload (default policy) without a
  fault, checkpoints every 0.5 s and every 1 s against none, alternating.
* **cluster** (``--cluster``): a 3-node ``ray.cluster_utils.Cluster`` in this process (head
  and two workers, 1 CPU each); the straggler workload (smaller with ``--quick``); after a
  fault-free run, one run with ``reducer-3`` killed, one with the busy mapper killed, and
  one in which a worker node is removed, each at half the fault-free time; then six short
  jobs, each with a member killed at a seeded random moment (``--seed``). Printed with
  exactness and the recovery log (``node-removal``, ``random-kill``).

Run::

    python -m benchmarks.recovery --reps 3            # kills and cost (~8 minutes)
    python -m benchmarks.recovery --cluster [--quick] # kills and node removal on 3 nodes
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import threading
import time
from typing import Any

import pyarrow as pa

import dpa

COST_S = 1e-3


def zipf_table(rows: int, keys: int, seed: int = 1) -> pa.Table:
    from workloads.generators import zipf

    return zipf(1.1, keys, rows, seed=seed)


def reference(table: pa.Table) -> dict[Any, int]:
    out = table.group_by("key").aggregate([([], "count_all")])
    return dict(zip(out["key"].to_pylist(), out["count_all"].to_pylist()))


def exact(result: dpa.Result, ref: dict[Any, int]) -> bool:
    table = result.to_arrow()
    got = dict(zip(table["key"].to_pylist(), table["count"].to_pylist()))
    return len(got) == table.num_rows and got == ref


def member(role: str) -> Any:
    """The host running the running job's member ``role`` (``reducer-3``, ``mapper-1``...):
    killing it kills every member it runs."""
    from dpa.runtime.ray.host import find_member

    found = find_member(role)
    return None if found is None else found[0]


def routing_mapper() -> Any:
    """The host of a mapper routing a block now (with one input block the others are idle), or None."""
    import ray

    for i in range(16):
        host = member(f"mapper-{i}")
        if host is None:
            break
        try:
            routing = ray.get(host.__ray_call__.remote(
                lambda self, role: self.members[role].machine is not None and self.members[role].machine.routing,
                f"mapper-{i}"))
        except ray.exceptions.RayActorError:  # (one killed before, still listed)
            continue
        if routing:
            return host
    return None


def kill_later(victim: str, delay: float) -> threading.Thread:
    """Kills the host of ``victim`` with ``ray.kill`` after ``delay`` seconds: a member by its
    role, or for ``mapper`` the first mapper seen routing a block from ``delay / 2`` on (else
    ``mapper-1`` at ``delay``). The members it shares its host with are lost with it."""
    import ray

    def kill() -> None:
        if victim == "mapper":
            end = time.monotonic() + delay / 2
            while (actor := routing_mapper()) is None and time.monotonic() < end:
                time.sleep(0.02)
            actor = actor or member("mapper-1")
        else:
            actor = member(victim)
        if actor is not None:
            ray.kill(actor, no_restart=True)

    return at(delay / 2 if victim == "mapper" else delay, kill)


def killed_run(table: pa.Table, reducer: Any, config: dpa.JobConfig, victim: str, delay: float,
               ref: dict[Any, int]) -> tuple[float, dpa.Result, bool]:
    """One job with ``victim`` killed after ``delay`` seconds (:func:`kill_later`):
    ``(makespan, result, exact)``."""
    thread = kill_later(victim, delay)
    seconds, res = timed(table, reducer, config)
    thread.join()
    return seconds, res, exact(res, ref)


def at(delay: float, action: Any) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def timed(table: pa.Table, reducer: Any, config: dpa.JobConfig) -> tuple[float, dpa.Result]:
    started = time.perf_counter()
    res = dpa.run(table, key="key", reducer=reducer, config=config)
    res.to_arrow()
    return time.perf_counter() - started, res


def describe(res: dpa.Result) -> dict[str, Any]:
    recs = res.stats.recoveries
    if not recs:
        return {"recoveries": 0}
    r = recs[0]
    return {"recoveries": len(recs), "recover_s": round(r.recover_s, 2), "at_s": round(r.at_s, 2),
            "epoch": r.epoch, "replayed_records": r.replayed_records, "replayed_blocks": r.replayed_blocks,
            "actors": ",".join(r.actors)}


#: Summary rows of the parts run, written by ``--out``.
RESULTS: list[dict[str, Any]] = []


def kills(args: argparse.Namespace) -> None:
    from benchmarks.common import init_ray

    init_ray()
    table = zipf_table(args.rows, 10_000)
    ref = reference(table)
    reducer = dpa.WithCost(dpa.Count(), COST_S)
    for policy in ("default", "doubling"):
        config = dpa.JobConfig().with_options(num_reducers=8, **({} if policy == "default" else {"policy": policy}))
        timed(table, reducer, config)  # warm the pool
        base = [timed(table, reducer, config)[0] for _ in range(args.reps)]
        base_med = statistics.median(base)
        print(f"{policy:9s} fault-free  makespan median {base_med:.2f} s (runs {', '.join(f'{b:.2f}' for b in base)})"
              f"  checkpoints {timed(table, reducer, config)[1].stats.checkpoints}", flush=True)
        for victim in ("reducer-3", "mapper"):
            ratios, recover = [], []
            for _ in range(args.reps):
                seconds, res, ok = killed_run(table, reducer, config, victim, base_med / 2, ref)
                info = describe(res)
                ratios.append(seconds / base_med)
                if info["recoveries"]:
                    recover.append(info["recover_s"])
                print(f"{policy:9s} kill {victim:9s} makespan {seconds:.2f} s  ratio {seconds / base_med:.2f}  "
                      f"exact={ok}  {info}", flush=True)
            RESULTS.append({"part": "kills", "policy": policy, "victim": victim, "fault_free_s": base_med,
                            "ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
                            "ratio_max": max(ratios),
                            "recover_s_median": statistics.median(recover) if recover else None,
                            "runs": len(ratios)})
            print(f"{policy:9s} kill {victim:9s} SUMMARY ratio median {statistics.median(ratios):.2f} "
                  f"(min {min(ratios):.2f}, max {max(ratios):.2f}); recover_s median "
                  f"{statistics.median(recover) if recover else float('nan'):.2f} "
                  f"(max {max(recover) if recover else float('nan'):.2f})", flush=True)


def cost(args: argparse.Namespace) -> None:
    from benchmarks.common import init_ray

    init_ray()
    for rows in args.cost_rows:
        cost_of(rows, args.reps)


def cost_of(rows: int, reps: int) -> None:
    table = zipf_table(rows, 100_000)
    on = dpa.JobConfig(flow=dpa.FlowConfig(batch_size=1 << 20))
    off = on.with_options(checkpoint_interval_s=0)
    timed(table, dpa.Count(), on)
    timed(table, dpa.Count(), off)
    times: dict[str, list[float]] = {"on": [], "off": []}
    checkpoints = []
    for _ in range(reps):
        for name, config in (("on", on), ("off", off)):
            seconds, res = timed(table, dpa.Count(), config)
            times[name].append(seconds)
            if name == "on":
                checkpoints.append(res.stats.checkpoints)
    med = {k: statistics.median(v) for k, v in times.items()}
    for name in ("on", "off"):
        rate = rows / med[name] / 1e6
        print(f"cost {rows:,} Zipf Count checkpoints {name:3s}: median {med[name]:.3f} s ({rate:.1f}M rec/s), "
              f"runs {', '.join(f'{t:.3f}' for t in times[name])}", flush=True)
    RESULTS.append({"part": "cost", "records": rows, "on_median_s": med["on"], "off_median_s": med["off"],
                    "on_off": med["on"] / med["off"], "runs": reps})
    print(f"cost {rows:,} SUMMARY on/off {med['on'] / med['off']:.3f} (checkpoints per job {checkpoints})",
          flush=True)


def overhead(args: argparse.Namespace) -> None:
    """The straggler workload (default policy) with checkpoints every 0.5 s and every 1 s
    against none, alternating, ``--reps`` runs each; medians and their ratio."""
    from benchmarks.common import init_ray

    init_ray()
    table = zipf_table(args.rows, 10_000)
    reducer = dpa.WithCost(dpa.Count(), COST_S)
    for interval in (0.5, 1.0):
        on = dpa.JobConfig(shape=dpa.ShapeConfig(num_reducers=8),
                           recovery=dpa.RecoveryConfig(checkpoint_interval_s=interval))
        off = on.with_options(checkpoint_interval_s=0)
        timed(table, reducer, on)
        times: dict[str, list[float]] = {"on": [], "off": []}
        for _ in range(args.reps):
            for name, config in (("on", on), ("off", off)):
                times[name].append(timed(table, reducer, config)[0])
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"overhead interval {interval} s: on median {med['on']:.2f} s "
              f"(runs {', '.join(f'{t:.2f}' for t in times['on'])}), off median {med['off']:.2f} s "
              f"(runs {', '.join(f'{t:.2f}' for t in times['off'])}), on/off {med['on'] / med['off']:.3f}",
              flush=True)


def cluster(args: argparse.Namespace) -> int:
    import ray
    from ray.cluster_utils import Cluster

    rows = 12_000 if args.quick else args.rows
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    workers = [c.add_node(num_cpus=1) for _ in range(2)]
    ray.init(address=c.address, logging_level="ERROR")
    if ray.get_runtime_context().get_node_id() != c.head_node.node_id:
        # The driver attached to a worker's raylet (all share one IP): never remove that one.
        workers.append(c.head_node)
    failed = 0
    try:
        table = zipf_table(rows, 10_000)
        ref = reference(table)
        reducer = dpa.WithCost(dpa.Count(), COST_S)
        for policy in ("default", "doubling"):
            config = dpa.JobConfig().with_options(num_reducers=8, timeout_s=300,
                                                  **({} if policy == "default" else {"policy": policy}))
            timed(table, reducer, config)
            base, res = timed(table, reducer, config)
            print(f"cluster {policy:9s} fault-free makespan {base:.2f} s exact={exact(res, ref)}", flush=True)
            for victim in ("reducer-3", "mapper"):
                seconds, res, ok = killed_run(table, reducer, config, victim, base / 2, ref)
                failed += not ok
                print(f"cluster {policy:9s} kill {victim:9s} makespan {seconds:.2f} s ratio {seconds / base:.2f} "
                      f"exact={ok} {describe(res)}", flush=True)
            # Not the node this driver is attached to (and so not the coordinator's).
            from dpa.runtime.ray.pool import idle_pools

            here = ray.get_runtime_context().get_node_id()
            where: collections.Counter = collections.Counter()
            keep = {here}
            for pool in idle_pools():
                for actor in pool.processes():  # (the coordinator and the members' hosts)
                    try:
                        node = ray.get(actor.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()))
                    except ray.exceptions.RayActorError:  # killed after its job ended: replaced by the next
                        continue
                    where[("coordinator " if actor is pool.coordinator else "") + node[:8]] += 1
                    if actor is pool.coordinator:
                        keep.add(node)
            victim = next(w for w in workers if w.node_id not in keep)
            workers.remove(victim)
            print(f"cluster {policy:9s} driver node {here[:8]}, members per node {dict(where)}, "
                  f"removing {victim.node_id[:8]}", flush=True)
            thread = at(base / 2, lambda victim=victim: c.remove_node(victim))
            seconds, res = timed(table, reducer, config)
            thread.join()
            ok = exact(res, ref)
            failed += not ok
            info = describe(res)
            print(f"cluster {policy:9s} node-removal makespan {seconds:.2f} s ratio {seconds / base:.2f} "
                  f"exact={ok} {info} nodes={[r.nodes for r in res.stats.recoveries]}", flush=True)
            if not res.stats.recoveries:
                print(f"cluster {policy:9s} node-removal: no member ran on the removed node", flush=True)
            workers.append(c.add_node(num_cpus=1))  # back to three nodes for the next policy
            c.wait_for_nodes()
        failed += random_kills(args.seed)
    finally:
        dpa.shutdown()
        ray.shutdown()
        c.shutdown()
    return 1 if failed else 0


def random_kills(seed: int) -> int:
    """Six short jobs (6k records, 2 mappers x 4 reducers, 300-row blocks), each with one
    member killed at a seeded random moment; returns how many results were not exact."""
    import random

    dpa.shutdown()  # only this part's pool is left: the victims are found by their roles
    rnd = random.Random(seed)
    table = zipf_table(6_000, 200, seed=seed)
    ref = reference(table)
    reducer = dpa.WithCost(dpa.Count(), COST_S)
    failed = 0
    for i, role in enumerate(["reducer-0", "mapper", "reducer-1", "reducer-3", "mapper", "reducer-2"]):
        policy = "doubling" if i % 2 else "hybrid"
        config = dpa.JobConfig().with_options(num_mappers=2, num_reducers=4, batch_size=300, policy=policy,
                                              timeout_s=300)
        delay = rnd.uniform(0.2, 1.5)
        dpa.run(table.slice(0, 100), key="key", reducer=dpa.Count(), config=config)  # the pool repaired and warm
        seconds, res, ok = killed_run(table, reducer, config, role, delay, ref)
        failed += not ok
        print(f"cluster random-kill {role:9s} at {delay:.2f} s {policy:9s} makespan {seconds:.2f} s exact={ok} "
              f"{describe(res)}", flush=True)
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rows", type=int, default=40_000)
    parser.add_argument("--cost-rows", type=int, nargs="+", default=[10_000_000, 40_000_000],
                        help="input sizes of the cost part (a 10M job ends before its first checkpoint)")
    parser.add_argument("--only", choices=["kills", "cost", "overhead"], default=None)
    parser.add_argument("--cluster", action="store_true", help="the node-removal run on a 3-node local cluster")
    parser.add_argument("--quick", action="store_true", help="a smaller input (with --cluster)")
    parser.add_argument("--seed", type=int, default=11, help="of the random kills (with --cluster)")
    parser.add_argument("--out", default=None, help="write the figures as JSON to this file")
    args = parser.parse_args(argv)
    print(f"# {' '.join([sys.executable, '-m', 'benchmarks.recovery', *(argv or sys.argv[1:])])}  "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    if args.cluster:
        return cluster(args)
    if args.only in (None, "kills"):
        kills(args)
    if args.only in (None, "cost"):
        cost(args)
    if args.only == "overhead":
        overhead(args)
    from benchmarks.common import write_json

    write_json(args.out, {"reps": args.reps, "rows": args.rows, "results": RESULTS})
    return 0


if __name__ == "__main__":
    sys.exit(main())
