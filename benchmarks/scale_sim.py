"""The in-process runtime as a scale simulator: time / ideal, the balancer's and the
coordinator's busy fraction, and the real seconds a run takes, at 64 to 4,096 reducers.

Each run is the in-process runtime with ``JobConfig()`` defaults but the width:
``--rows`` records (default 1M; or ``--records-per-reducer`` times the width) whose keys follow Zipf(``--zipf``, default 1.2) over
``--keys`` keys, each costing 1 ms (``dpa.WithCost(dpa.Count(), 1e-3)``), with the message
costs measured on Ray (``run_local(..., costs=MEASURED)``, :data:`dpa.runtime.message_costs.MEASURED`): every
report, block request, progress count, push and snapshot costs its receiver CPU time,
and the balancer and the coordinator are each one queue. The reducers run
``--reducers-per-host`` to a process (default 8, a node's worth of logical reducers): a
host's reports of one tick of the report clock reach the balancer as one message, as on
Ray. Reported per width: virtual
time / ideal (ideal = records x 1 ms / reducers), the balancer's and the coordinator's
busy fraction, messages per virtual second at each, the real and CPU seconds of the run,
and whether the counts equal DuckDB's.

``--measure`` measures the message costs instead (the figures behind ``MEASURED``): one
async actor on a local Ray receives each kind of call ``--calls`` times, fired without
waiting, and the CPU its process spent is divided by the calls (Ray's receiving side plus
the handler: a real :class:`~dpa.engine.balancer.BalancerMachine` for a report, an Arrow
batch for a push, a hybrid snapshot, a block's object ref returned for a block request);
then the balancer's handler and its tick are timed in-process on the runs of the
simulator at 64 and 1,024 reducers (the tick's fixed and per-reducer parts), and so is the
part of a host's batched call per report or progress count it carries (unpickling it and
running it on its receiver: ``--batch-only`` measures that alone).

Run::

    python -m benchmarks.scale_sim                     # 64 / 256 / 1,024 / 4,096 reducers
    python -m benchmarks.scale_sim --reducers-list 64,256 --rows 200k
    python -m benchmarks.scale_sim --reducers-list 4096 --records-per-reducer 1000
    python -m benchmarks.scale_sim --measure --out benchmarks/results/scale_sim_costs.json
    python -m benchmarks.scale_sim --measure --batch-only --calls 16000
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from benchmarks.common import parse_int, print_table, write_json

DEFAULT_WIDTHS = (64, 256, 1024, 4096)


def _table(rows: int, keys: int, z: float, seed: int) -> Any:
    from workloads.generators import zipf

    return zipf(z, keys, rows, seed=seed)


def _exact(table: Any, got: Any) -> bool:
    """Whether dpa's counts (an Arrow table of key and count) equal DuckDB's."""
    import duckdb

    con = duckdb.connect()
    con.register("t", table)
    want = dict(con.execute("select key, count(*) from t group by key").fetchall())
    count_col = [c for c in got.column_names if c != "key"][0]
    return want == dict(zip(got["key"].to_pylist(), got[count_col].to_pylist()))


def simulate(width: int, table: Any, cost_s: float, costs: Any, per_host: int = 1,
             period: tuple[float | None, float | None] = (None, None)) -> dict[str, Any]:
    """One run at ``width`` reducers with message ``costs``; its figures (see the module
    docstring). ``period``: ``(report_interval_s, lb_interval_s)``, None = sized by the width."""
    import pyarrow as pa

    import dpa
    from dpa.engine.planning import build_plan
    from dpa.input.sources import normalize_source
    from dpa.runtime.local import run_local

    config = dpa.JobConfig(shape=dpa.ShapeConfig(num_reducers=width), runtime="local")
    config = config.with_options(report_interval_s=period[0], lb_interval_s=period[1]).resolved()
    reducer = dpa.WithCost(dpa.Count(), cost_s)
    t0, c0 = time.perf_counter(), time.process_time()
    src = normalize_source(table, config.batch_size, config.num_mappers)
    plan, blocks = build_plan(src, "key", reducer, None, config)
    hosts = -(-width // max(1, per_host))
    out = run_local(plan, blocks, costs=costs, hosts=hosts)
    sim, processed, vt = out.extra["sim"], out.processed, out.virtual_time_s
    real, cpu = time.perf_counter() - t0, time.process_time() - c0
    exact = _exact(table, pa.concat_tables([t for t in out.tables if t is not None]))
    ideal = table.num_rows * cost_s / width
    bal, coord = sim["balancer"], sim["coordinator"]
    return {
        "reducers": width, "hosts": hosts, "records": table.num_rows, "virtual_s": round(vt, 4), "ideal_s": round(ideal, 4),
        "report_interval_s": plan.report_interval_s, "lb_interval_s": plan.lb_interval_s,
        "x_ideal": round(vt / ideal, 3),
        "balancer_busy": round(bal["busy_fraction"], 3), "coordinator_busy": round(coord["busy_fraction"], 3),
        "balancer_msgs_per_s": round(sum(bal["messages"].values()) / vt, 1),
        "coordinator_msgs_per_s": round(sum(coord["messages"].values()) / vt, 1),
        "reducer_msg_busy": round(sim["reducers"]["busy_fraction"], 4),
        "real_s": round(real, 1), "cpu_s": round(cpu, 1), "exact": exact,
        "max_processed": max(processed), "sim": sim,
    }


# ----------------------------------------------------------------------------- measuring costs
def _probe_class() -> Any:
    import ray

    @ray.remote(num_cpus=0)
    class Probe:
        """Receives calls shaped like dpa's and does what their receiver does with them."""

        def __init__(self, plan: Any, snapshot: Any, block: Any) -> None:
            from dpa.engine.balancer import BalancerMachine

            self.balancer = BalancerMachine(plan, snapshot)
            self.block = block  # a list holding one object ref: what a mapper's request returns

        async def cpu(self) -> float:
            return time.process_time()

        async def progress(self, run_id: str, reducer: int, processed: int) -> None:
            return None

        async def report(self, run_id: str, reducer: int, queue_length: int, version: int, keys: Any,
                         backlog_s: float, processed: int, forwarded: int, tokens: int) -> None:
            from dpa.engine import events as ev

            self.balancer.handle(ev.QueueReported(reducer, queue_length, version, keys, backlog_s))

        async def next_block(self, run_id: str, mapper: int, done: Any) -> Any:
            return self.block

        async def push(self, run_id: str, push_id: int, batch: Any, version: int, epoch: int) -> tuple[int, int]:
            return (0, batch.num_rows)

        async def snapshot(self, run_id: str, snapshot: Any) -> None:
            return None

    return Probe


def _per_call(probe: Any, method: str, args_of: Any, calls: int, sent: dict[str, float]) -> float:
    """Receiver CPU seconds per call of ``method`` (calls fired without waiting); the
    caller's CPU seconds per call go to ``sent[method]``."""
    import ray

    ray.get(getattr(probe, method).remote(*args_of(0)))  # (warm)
    before = ray.get(probe.cpu.remote())
    c0 = time.process_time()
    refs = [getattr(probe, method).remote(*args_of(i)) for i in range(calls)]
    sent[method] = (time.process_time() - c0) / calls
    after = ray.get(probe.cpu.remote())
    ray.get(refs)
    return (after - before) / calls


def _handler_times(width: int, rows: int, keys: int, z: float) -> dict[str, float]:
    """CPU seconds per report and per tick of the real balancer on a simulated run at
    ``width`` reducers (messages free, so the run is the protocol's own)."""
    from dpa.engine import events as ev
    from dpa.engine.balancer import BalancerMachine
    from dpa.runtime.message_costs import MessageCosts

    spent: dict[str, list[float]] = {"report": [], "tick": []}
    original = BalancerMachine.handle

    def timed_handle(self: Any, *events: Any) -> Any:
        t0 = time.process_time()
        out = original(self, *events)
        kind = ("report" if isinstance(events[0], ev.QueueReported)
                else "tick" if isinstance(events[0], ev.BalancerTick) else None)
        if kind:
            spent[kind].append(time.process_time() - t0)
        return out

    BalancerMachine.handle = timed_handle  # type: ignore[method-assign]
    try:
        simulate(width, _table(rows, keys, z, 1), 1e-3, MessageCosts.free())
    finally:
        BalancerMachine.handle = original  # type: ignore[method-assign]
    return {f"{k}_s": float(np.mean(v)) if v else 0.0 for k, v in spent.items()} | {
        f"{k}s": len(v) for k, v in spent.items()}


def _batch_member_times(plan: Any, key_stats: Any, calls: int, batch: int = 8) -> dict[str, float]:
    """CPU seconds per call carried in a host's batch (``call_batch``), beyond the batch's
    own call: unpickling the batch and running each call on its receiver, in-process. A
    report (with ``key_stats``) on a real :class:`~dpa.runtime.ray.balancer.BalancerActor`;
    a progress count handed to a real :class:`~dpa.engine.coordinator_machine.CoordinatorMachine`."""
    import asyncio
    import pickle

    from dpa.engine import events as ev
    from dpa.engine.coordinator_machine import CoordinatorMachine
    from dpa.runtime.ray.balancer import BalancerActor

    coordinator = CoordinatorMachine(plan, time.monotonic, range(plan.num_reducers), finalize_at_stop=False)
    coordinator.handle(ev.JobStarted(plan.policy.initial_snapshot(plan.num_reducers)))

    async def timed() -> dict[str, float]:
        balancer = BalancerActor("balancer")
        await balancer.start_job(plan, plan.policy.initial_snapshot(plan.num_reducers), ([], [], None), "run")

        async def progress(run_id: str, reducer: int, processed: int) -> None:
            coordinator.handle(ev.ProgressReported(reducer, processed))

        shapes = {"report_member_s": (lambda *a: BalancerActor.report(balancer, *a),
                                      lambda i: ("run", i % plan.num_reducers, 100 + i % 7, 0, key_stats, 0.1)),
                  "progress_member_s": (progress, lambda i: ("run", i % plan.num_reducers, i))}
        out = {}
        for name, (handler, args_of) in shapes.items():
            blob = pickle.dumps([args_of(i) for i in range(batch)])
            rounds = max(1, calls // batch)
            c0 = time.process_time()
            for _ in range(rounds):
                for args in pickle.loads(blob):
                    await handler(*args)
            out[name] = (time.process_time() - c0) / (rounds * batch)
        return out

    return asyncio.run(timed())


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The message costs (see the module docstring); prints and returns them."""
    import pyarrow as pa
    import ray

    import dpa
    from benchmarks.common import init_ray, stop_ray
    from dpa.engine.planning import build_plan
    from dpa.input.records import HASH_COL
    from dpa.input.sources import normalize_source
    from dpa.keys.columns import hash_key_columns

    width = 64
    config = dpa.JobConfig(shape=dpa.ShapeConfig(num_reducers=width), runtime="local").resolved()
    table = _table(100_000, args.keys, args.zipf, 1)
    plan, _ = build_plan(normalize_source(table, config.batch_size, config.num_mappers), "key",
                         dpa.WithCost(dpa.Count(), 1e-3), None, config)
    planner = plan.policy.make_planner(width)
    hashes = np.asarray(hash_key_columns(table, ["key"]), dtype=np.uint32)
    top, counts = np.unique(hashes[:5000], return_counts=True)
    order = np.argsort(-counts)[:32]
    key_stats = (top[order], counts[order].astype(np.int64), 5000, 5000)
    # a hybrid snapshot with hot keys split (what a reducer receives when the balancer publishes)
    planner.observe_forecast(0, top[order], counts[order] * 20, 100_000)
    for r in range(width):
        planner.observe(r, 1000 if r else 20_000, 0)
    decisions = planner.check(0.0)
    snapshot = next((d.snapshot for d in decisions if d.snapshot is not None), planner.snapshot)
    batch = table.slice(0, 1000).append_column(HASH_COL, pa.array(hashes[:1000]))
    members = _batch_member_times(plan, key_stats, args.calls)
    print_table([{"call": k, "receiver_cpu_us": round(v * 1e6, 1)} for k, v in members.items()],
                title="CPU per call carried in a host's batch of 8, beyond the batch's own (in-process)")
    if args.batch_only:
        return {"batch_members": members}

    init_ray(num_cpus=2)
    try:
        block_ref = ray.put(table.slice(0, 10_000))
        probe = _probe_class().remote(plan, plan.policy.initial_snapshot(width), [block_ref])
        n = args.calls
        sent: dict[str, float] = {}
        ray_side = {
            "progress_s": _per_call(probe, "progress", lambda i: ("run", i % width, i), n, sent),
            "report_s": _per_call(probe, "report", lambda i: ("run", i % width, 100, 0, key_stats, 0.1, i, 0, 16),
                                  n, sent),
            "block_request_s": _per_call(probe, "next_block", lambda i: ("run", i % 2, (0, 1000)), n, sent),
            "push_s": _per_call(probe, "push", lambda i: ("run", i, batch, 0, 0), n, sent),
            "snapshot_s": _per_call(probe, "snapshot", lambda i: ("run", snapshot), max(50, n // 10), sent),
        }
        ray.kill(probe)
    finally:
        stop_ray()
    print_table([{"call": k, "receiver_cpu_us": round(v * 1e6, 1), "caller_cpu_us": round(c * 1e6, 1)}
                 for (k, v), c in zip(ray_side.items(), sent.values())],
                title=f"CPU per call on Ray ({n:,} calls each, one async actor)")
    if args.ray_only:
        return {"ray": ray_side, "caller": sent, "batch_members": members}
    small = _handler_times(64, args.measure_rows, args.keys, args.zipf)
    large = _handler_times(1024, args.measure_rows, args.keys, args.zipf)
    per_reducer = max(0.0, (large["tick_s"] - small["tick_s"]) / (1024 - 64))
    out = {"ray": ray_side, "caller": sent, "batch_members": members, "handlers_64": small, "handlers_1024": large,
           "tick_s": max(0.0, small["tick_s"] - 64 * per_reducer), "tick_per_reducer_s": per_reducer}
    print_table([{"reducers": w, "report_us": round(h["report_s"] * 1e6, 1), "reports": h["reports"],
                  "tick_ms": round(h["tick_s"] * 1e3, 2), "ticks": h["ticks"]}
                 for w, h in ((64, small), (1024, large))],
                title=f"the balancer's handlers in-process (simulated runs of {args.measure_rows:,} records)")
    print(f"\ntick = {out['tick_s'] * 1e3:.2f} ms + {per_reducer * 1e6:.1f} us per reducer")
    return out


# ----------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=parse_int, default=1_000_000, help="records (default 1M)")
    p.add_argument("--records-per-reducer", type=parse_int, default=None,
                   help="records = this many per reducer at each width instead of --rows (e.g. 1000: the "
                        "ideal is the same second at every width)")
    p.add_argument("--keys", type=parse_int, default=100_000, help="distinct keys (default 100k)")
    p.add_argument("--zipf", type=float, default=1.2)
    p.add_argument("--cost-ms", type=float, default=1.0, help="work per record, ms (default 1)")
    p.add_argument("--reducers-list", default=",".join(map(str, DEFAULT_WIDTHS)),
                   help="widths to simulate (default 64,256,1024,4096)")
    p.add_argument("--reducers-per-host", type=int, default=8,
                   help="reducers per host process, whose reports travel together (default 8)")
    p.add_argument("--free", action="store_true", help="messages cost nothing (the protocol alone)")
    p.add_argument("--report-interval", type=float, default=None,
                   help="FlowConfig.report_interval_s (default: sized by the width)")
    p.add_argument("--lb-interval", type=float, default=None,
                   help="BalanceConfig.lb_interval_s (default: sized by the width)")
    p.add_argument("--measure", action="store_true", help="measure the message costs on Ray instead")
    p.add_argument("--calls", type=int, default=3000, help="--measure: calls per kind")
    p.add_argument("--ray-only", action="store_true", help="--measure: the calls on Ray only")
    p.add_argument("--batch-only", action="store_true",
                   help="--measure: the per-call part of a host's batch only (in-process, no Ray)")
    p.add_argument("--measure-rows", type=parse_int, default=200_000,
                   help="--measure: records of the in-process runs that time the balancer's handlers")
    p.add_argument("--out", default=None, help="write the figures as JSON (default benchmarks/results/scale_sim.json)")
    args = p.parse_args(argv)

    if args.measure:
        payload = measure(args)
        write_json(args.out, payload)
        return payload

    from dpa.runtime.message_costs import MEASURED, MessageCosts

    table = _table(args.rows, args.keys, args.zipf, 1)
    rows = []
    for width in [int(w) for w in args.reducers_list.split(",")]:
        if args.records_per_reducer:
            table = _table(args.records_per_reducer * width, args.keys, args.zipf, 1)
        row = simulate(width, table, args.cost_ms * 1e-3, MessageCosts.free() if args.free else MEASURED,
                       args.reducers_per_host, (args.report_interval, args.lb_interval))
        rows.append(row)
        print_table([row], columns=["reducers", "hosts", "x_ideal", "balancer_busy", "coordinator_busy",
                                    "balancer_msgs_per_s", "coordinator_msgs_per_s", "real_s", "cpu_s", "exact"],
                    title=f"{width} reducers")
    print_table(rows, columns=["reducers", "hosts", "records", "report_interval_s", "virtual_s", "ideal_s", "x_ideal",
                               "balancer_busy",
                               "coordinator_busy", "balancer_msgs_per_s", "coordinator_msgs_per_s",
                               "reducer_msg_busy", "real_s", "cpu_s", "exact"],
                title=f"simulator: Zipf {args.zipf} over {args.keys:,} keys, "
                      + (f"{args.records_per_reducer:,} records per reducer" if args.records_per_reducer
                         else f"{args.rows:,} records") + " x "
                      f"{args.cost_ms} ms, JobConfig() defaults but the width"
                      + (", messages free" if args.free else ", measured message costs"))
    payload = {"rows": args.rows, "records_per_reducer": args.records_per_reducer, "keys": args.keys, "zipf": args.zipf, "cost_ms": args.cost_ms,
               "reducers_per_host": args.reducers_per_host,
               "free": args.free, "results": rows,
               "note": "real_s and cpu_s measured on a shared 2-core machine; virtual figures are deterministic"}
    write_json(args.out or "benchmarks/results/scale_sim.json", payload)
    return payload


if __name__ == "__main__":
    main()
