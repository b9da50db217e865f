"""A job of many reducers on a Ray cluster of several nodes, with a node killed mid-job.

The cluster is real Ray nodes on this machine, started as a user starts them: ``ray start
--head`` and ``ray start --address`` once per extra node, each with ``--num-cpus`` logical
CPUs, all in a temporary directory of their own (so a ``ray.init()`` elsewhere on the
machine does not join it), and torn down by killing their processes (``ray stop`` would stop
every Ray on the machine). The driver joins it with ``ray.init(address=...)``.

The job: ``--reducers`` reducers (the default: the width the default ``JobConfig`` gives on
this cluster, one reducer per CPU), ``--per-reducer`` records per reducer over Zipf(1.2) keys,
``WithCost(Count(), cost, mode="sleep")`` so the reducers' own work needs no CPU. Printed and
written to JSON: the fault-free time against the ideal (records x cost / reducers); then a run
in which one worker node (a node that holds members but not the driver's coordinator) is
killed (its raylet and every worker process on it, ``SIGKILL``) at half the fault-free time:
its time, the recovery log (seconds to recover, records replayed) and exactness against
pyarrow's ``group_by`` for both.

Run::

    python -m benchmarks.multinode --nodes 4 --cpus-per-node 32 --out benchmarks/results/multinode.json
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import psutil
import pyarrow as pa

import dpa
from benchmarks.common import command_line, environment, write_json
from benchmarks.recovery import exact
from benchmarks.recovery import reference as counts

RAY = os.path.join(os.path.dirname(sys.executable), "ray")
#: Tries of each ``ray start``.
START_ATTEMPTS = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _raylets() -> set[int]:
    return {p.pid for p in psutil.process_iter(["name", "cmdline"])
            if "raylet" in (p.info["name"] or "") or any("raylet/raylet" in c for c in p.info["cmdline"] or ())}


class LocalCluster:
    """Ray nodes started with ``ray start`` in a temporary directory of their own."""

    def __init__(self, nodes: int, cpus_per_node: int) -> None:
        self.temp = tempfile.mkdtemp(prefix="dpa-mn-")
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.raylets: list[int] = []  # per node, the head's first
        self._start(["--head", f"--port={self.port}", "--include-dashboard=false", f"--temp-dir={self.temp}"],
                    cpus_per_node)
        for _ in range(nodes - 1):
            self._start([f"--address={self.address}"], cpus_per_node)

    def _start(self, args: list[str], cpus: int) -> None:
        """``ray start`` with ``args``; a node that misses Ray's 30 s registration deadline (a
        loaded machine) is killed and started again, up to :data:`START_ATTEMPTS` times."""
        before = _raylets()
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
        for attempt in range(START_ATTEMPTS):
            done = subprocess.run([RAY, "start", *args, f"--num-cpus={cpus}", "--disable-usage-stats"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
            if done.returncode == 0:
                break
            if "--head" in args:
                self.stop()
            for pid in _raylets() - before:
                psutil.Process(pid).kill()
            if attempt == START_ATTEMPTS - 1:
                self.stop()
                raise RuntimeError(f"'ray start {' '.join(args)}' failed: {done.stderr.strip().splitlines()[-1:]}")
        new = _raylets() - before
        if len(new) != 1:
            raise RuntimeError(f"expected one new raylet after 'ray start {' '.join(args)}', found {len(new)}")
        self.raylets.append(new.pop())

    def kill_node(self, index: int) -> None:
        """Kills node ``index``'s raylet and every process under it (its workers)."""
        raylet = psutil.Process(self.raylets[index])
        procs = [raylet, *raylet.children(recursive=True)]
        for p in procs:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass

    def node_of_raylet(self, index: int) -> str:
        """The Ray node id of node ``index`` (matched by its raylet's pid)."""
        import ray

        for node in ray.nodes():
            if node.get("Alive") and node.get("NodeManagerPort") and self._pid_listens(index, node["NodeManagerPort"]):
                return node["NodeID"]
        raise RuntimeError(f"node {index} not found among Ray's nodes")

    def _pid_listens(self, index: int, port: int) -> bool:
        try:
            return any(c.laddr.port == port for c in psutil.Process(self.raylets[index]).net_connections("tcp"))
        except psutil.NoSuchProcess:
            return False

    def stop(self) -> None:
        """Kills every process of this cluster (those whose command line names its directory)."""
        for p in psutil.process_iter(["cmdline"]):
            try:
                if any(self.temp in c for c in p.info["cmdline"] or ()):
                    p.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        for pid in self.raylets:
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass


def zipf_table(rows: int, seed: int = 3) -> pa.Table:
    from workloads.generators import zipf

    return zipf(1.2, max(1000, rows // 20), rows, seed=seed)


def member_nodes() -> dict[str, int]:
    """Node id -> members of the running job's pool on it (hosts count once per member)."""
    import ray

    from dpa.runtime.ray.pool import idle_pools

    where: dict[str, int] = {}
    for pool in idle_pools():
        for actor in pool.processes():
            node = ray.get(actor.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()))
            where[node] = where.get(node, 0) + 1
    return where


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--cpus-per-node", type=int, default=32, help="logical CPUs per node")
    p.add_argument("--reducers", type=int, default=None, help="default: JobConfig()'s width on the cluster")
    p.add_argument("--per-reducer", type=int, default=250, help="records per reducer")
    p.add_argument("--cost-ms", type=float, default=2.0, help="sleep per record at the reducer")
    p.add_argument("--out", default=None, help="JSON file to write")
    args = p.parse_args(argv)
    # Ray's token authentication, with a token of this cluster's own that every node and the
    # driver present (set before Ray is imported: it reads them then).
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)

    import ray

    cluster = LocalCluster(args.nodes, args.cpus_per_node)
    try:
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        width = args.reducers or dpa.JobConfig().resolved().num_reducers
        table = zipf_table(width * args.per_reducer)
        ref = counts(table)
        reducer = dpa.WithCost(dpa.Count(), args.cost_ms / 1000)
        config = dpa.JobConfig(shape=dpa.ShapeConfig(num_reducers=width)) if args.reducers else dpa.JobConfig()
        ideal = table.num_rows * args.cost_ms / 1000 / width
        print(f"cluster: {args.nodes} nodes x {args.cpus_per_node} logical CPUs; job: {table.num_rows:,} records, "
              f"{width} reducers, {args.cost_ms} ms of sleep per record; ideal {ideal:.2f} s", flush=True)
        dpa.run(table, key="key", reducer=reducer, config=config)  # warm pool
        t0 = time.perf_counter()
        res = dpa.run(table, key="key", reducer=reducer, config=config)
        base = time.perf_counter() - t0
        ok = exact(res, ref)
        where = member_nodes()
        print(f"fault-free: {base:.2f} s ({base / ideal:.2f}x ideal) exact={ok}; members per node "
              f"{sorted(where.values(), reverse=True)}", flush=True)
        here = ray.get_runtime_context().get_node_id()
        victim = next(i for i in range(1, args.nodes) if cluster.node_of_raylet(i) != here)
        lost = cluster.node_of_raylet(victim)
        killer = threading.Timer(base / 2, cluster.kill_node, args=(victim,))
        killer.start()
        t0 = time.perf_counter()
        res2 = dpa.run(table, key="key", reducer=reducer, config=config)
        killed = time.perf_counter() - t0
        killer.join()
        ok2 = exact(res2, ref)
        recoveries = [r.as_dict() for r in res2.stats.recoveries]
        print(f"node {lost[:8]} killed at {base / 2:.2f} s: {killed:.2f} s ({killed / base:.2f}x fault-free) "
              f"exact={ok2}; recoveries: " + "; ".join(
                  f"{r.get('recover_s', float('nan')):.2f} s to recover, {r.get('replayed_records', 0):,} records replayed"
                  for r in recoveries), flush=True)
        write_json(args.out, {
            "benchmark": "multinode", "command": command_line(), "environment": environment(),
            "nodes": args.nodes, "cpus_per_node": args.cpus_per_node, "reducers": width,
            "records": table.num_rows, "cost_ms": args.cost_ms, "ideal_s": ideal,
            "fault_free_s": base, "fault_free_exact": ok, "members_per_node": sorted(where.values(), reverse=True),
            "killed_s": killed, "killed_exact": ok2, "killed_node": lost, "recoveries": recoveries,
        })
        return 0 if ok and ok2 else 1
    finally:
        try:
            dpa.shutdown()
            ray.shutdown()
        finally:
            cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
