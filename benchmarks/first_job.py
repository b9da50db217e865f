"""The first job of a wide pool: cold makespan against warm, and the actors' memory.

Job: 20k records with Zipf(1.1) keys over 10k, 1 ms (sleep) per record at the reducer,
``num_mappers=4, num_reducers=8`` (a coordinator and 13 members, run by one host process per
CPU). Each trial is a fresh Python process with a fresh Ray (as a batch script that runs one
job): it times ``ray.init``, the first job (which starts the pool), then ``--warm`` more jobs
on the warm pool, and reads the RSS and PSS of every dpa actor process (coordinator and
hosts), per process and summed, and the CPU time those processes use per warm job.
``--startup-concurrency``
sets Ray's ``worker_maximum_startup_concurrency`` (worker processes the raylet starts at
once; Ray's default is the number of CPUs), ``0`` leaving dpa's default. ``--bytecode
cached,none`` compares trials with dpa's compiled bytecode cached (as ``pip install`` and
``./run.sh setup`` leave it) and removed, so that every process compiles dpa's sources.
Settings are interleaved trial by trial. Each trial starts on a settled machine: the
bytecode step's files are synced to disk and the trial waits (up to 30 s) until the CPUs
are idle, so that it does not pay for the benchmark's own set-up or the previous trial's
teardown.

Run: ``python -m benchmarks.first_job [--trials 3] [--startup-concurrency 0,2] [--bytecode cached,none]
[--mappers 0 --reducers 0] [--out FILE]`` (``0``: dpa's default shape).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from benchmarks.common import bytecode_cached, package_dir, print_table, write_json


def trial(startup_concurrency: int, warm: int, rows: int, mappers: int = 4, reducers: int = 8) -> dict[str, Any]:
    """One fresh-Ray trial in this process (run by the parent in a child process)."""
    import psutil

    import dpa
    from benchmarks.common import _memory, role_of
    from dpa.runtime.ray.session import ensure_ray
    from workloads.generators import zipf

    table = zipf(1.1, 10_000, rows, seed=7)
    cached = bytecode_cached()  # (as the trial starts: its processes may write some)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    kwargs: dict[str, Any] = {"logging_level": "ERROR"}
    if startup_concurrency:
        from dpa.runtime.ray.session import METRICS_REPORT_INTERVAL_MS

        kwargs["_system_config"] = {"metrics_report_interval_ms": METRICS_REPORT_INTERVAL_MS,
                                    "worker_maximum_startup_concurrency": startup_concurrency}
    ensure_ray(**kwargs)
    init_s = time.perf_counter() - t0
    cfg = dpa.JobConfig(shape=dpa.ShapeConfig(num_mappers=mappers or None, num_reducers=reducers or None),
                        recovery=dpa.RecoveryConfig(timeout_s=600))
    reducer = dpa.WithCost(dpa.Count(), 0.001)
    me = os.getpid()
    times = []
    cpu_after_cold = 0.0
    for i in range(1 + warm):
        t0 = time.perf_counter()
        dpa.run(table, key="key", reducer=reducer, config=cfg).to_arrow()
        times.append(time.perf_counter() - t0)
        if i == 0:
            cpu_after_cold = _pool_cpu_s(me)
    warm_cpu = (_pool_cpu_s(me) - cpu_after_cold) / warm if warm else None
    rss, pss = [], []
    for proc in psutil.Process().children(recursive=True):
        if role_of(proc, me) in ("coordinator", "host"):
            m = _memory(proc.pid)
            if m:
                rss.append(m[0] / 2**20)
                pss.append(m[1] / 2**20)
    dpa.shutdown()
    import ray

    ray.shutdown()
    return {"load": load, "init_s": init_s, "cold_s": times[0], "warm_s": statistics.median(times[1:]),
            "actors": len(rss), "rss_mb_per_actor": statistics.median(rss) if rss else None,
            "pss_mb_per_actor": statistics.median(pss) if pss else None,
            "rss_mb_total": sum(rss), "pss_mb_total": sum(pss), "dpa_bytecode_cached": cached,
            "pool_cpu_s_per_warm_job": warm_cpu}


def _pool_cpu_s(driver_pid: int) -> float:
    """CPU seconds (user + system) the pool's processes (coordinator and hosts) used so far."""
    import psutil

    from benchmarks.common import role_of

    total = 0.0
    for proc in psutil.Process(driver_pid).children(recursive=True):
        try:
            if role_of(proc, driver_pid) in ("coordinator", "host"):
                times = proc.cpu_times()
                total += times.user + times.system
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return total


def _bytecode(mode: str) -> None:
    """Before a trial: dpa's bytecode compiled (``cached``) or removed (``none``: every
    process then compiles dpa's sources, as a source checkout under
    ``PYTHONDONTWRITEBYTECODE=1`` without ``./run.sh setup`` does)."""
    import compileall
    import shutil

    root = package_dir("dpa")
    if mode == "none":
        for cache in root.rglob("__pycache__"):
            shutil.rmtree(cache, ignore_errors=True)
    else:
        compileall.compile_dir(str(root), quiet=1)


def _cpu_busy(interval_s: float = 0.5) -> float:
    """The fraction of CPU time spent busy over the next ``interval_s`` (``/proc/stat``)."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        return sum(values), values[3] + values[4]  # (total, idle + iowait)

    total, idle = sample()
    time.sleep(interval_s)
    total2, idle2 = sample()
    return 1.0 - (idle2 - idle) / max(1, total2 - total)


def _settle(limit_s: float = 30.0, busy: float = 0.15) -> None:
    """Writes dirty pages out and waits until the CPUs are idle (at most ``limit_s``)."""
    os.sync()
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and os.path.exists("/proc/stat") and _cpu_busy() > busy:
        pass


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=3, help="fresh processes per setting (default 3)")
    p.add_argument("--warm", type=int, default=3, help="warm jobs after the first (default 3)")
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--mappers", type=int, default=4, help="num_mappers (0: dpa's default shape)")
    p.add_argument("--reducers", type=int, default=8, help="num_reducers (0: dpa's default shape)")
    p.add_argument("--startup-concurrency", default="0", help="comma-separated settings (0 = dpa's default)")
    p.add_argument("--bytecode", default="cached",
                   help="comma-separated: cached (dpa's bytecode compiled before each trial), none (removed)")
    p.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.child is not None:
        print("RESULT " + json.dumps(trial(args.child, args.warm, args.rows, args.mappers, args.reducers)))
        return 0
    settings = [(int(c), b) for c in args.startup_concurrency.split(",") for b in args.bytecode.split(",")]
    if any(b not in ("cached", "none") for _, b in settings):
        raise SystemExit("--bytecode takes cached and/or none")
    trials: dict[tuple[int, str], list[dict[str, Any]]] = {s: [] for s in settings}
    for i in range(args.trials):  # settings interleaved, so that each sees the same load
        for setting, bytecode in settings:
            _bytecode(bytecode)
            _settle()
            # (none: no process of the trial, Ray's workers among them, may write the cache either)
            env = {**os.environ, **({"PYTHONDONTWRITEBYTECODE": "1"} if bytecode == "none" else {})}
            out = subprocess.run([sys.executable, "-m", "benchmarks.first_job", "--child", str(setting),
                                  "--warm", str(args.warm), "--rows", str(args.rows),
                                  "--mappers", str(args.mappers), "--reducers", str(args.reducers)],
                                 capture_output=True, text=True, timeout=1800, env=env)
            line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                print(out.stdout[-2000:], out.stderr[-4000:], file=sys.stderr)
                raise SystemExit(f"trial {i} failed")
            t = json.loads(line[7:])
            trials[(setting, bytecode)].append(t)
            print(f"startup_concurrency={setting or 'default'} bytecode={bytecode} trial {i}: init {t['init_s']:.2f}s "
                  f"cold {t['cold_s']:.2f}s warm {t['warm_s']:.2f}s ({t['cold_s'] / t['warm_s']:.2f}x) "
                  f"{t['actors']} actors RSS {t['rss_mb_per_actor']:.0f} MB PSS {t['pss_mb_per_actor']:.0f} MB "
                  f"(total {t['pss_mb_total']:.0f} MB) pool CPU {t['pool_cpu_s_per_warm_job'] or 0:.2f} s/warm job  "
                  f"load {t['load']:.1f}",
                  flush=True)
    _bytecode("cached")
    rows = []
    for (setting, bytecode), ts in trials.items():
        ratios = [t["cold_s"] / t["warm_s"] for t in ts]
        rows.append({"startup_concurrency": setting or "default", "bytecode": bytecode,
                     "cold_s": statistics.median(t["cold_s"] for t in ts),
                     "warm_s": statistics.median(t["warm_s"] for t in ts),
                     "cold_over_warm": statistics.median(ratios), "ratio_spread": max(ratios) - min(ratios),
                     "pool_cpu_s_per_warm_job": (statistics.median(t["pool_cpu_s_per_warm_job"] for t in ts)
                                                 if all(t.get("pool_cpu_s_per_warm_job") is not None for t in ts)
                                                 else None),
                     "init_s": statistics.median(t["init_s"] for t in ts),
                     "rss_mb_per_actor": statistics.median(t["rss_mb_per_actor"] for t in ts),
                     "pss_mb_per_actor": statistics.median(t["pss_mb_per_actor"] for t in ts),
                     "pss_mb_total": statistics.median(t["pss_mb_total"] for t in ts),
                     "load": statistics.median(t["load"] for t in ts),
                     "actors": statistics.median(t["actors"] for t in ts), "trials": ts})
    print_table(rows, ["startup_concurrency", "bytecode", "cold_s", "warm_s", "cold_over_warm", "ratio_spread",
                       "pool_cpu_s_per_warm_job", "init_s", "rss_mb_per_actor", "pss_mb_per_actor", "pss_mb_total",
                       "load", "actors"],
                title=f"first job, {args.mappers or 'default'} mappers x {args.reducers or 'default'} reducers, "
                      f"{args.rows:,} records x 1 ms; median of {args.trials} trials")
    write_json(args.out, {"command": "python -m benchmarks.first_job " + " ".join(sys.argv[1:]), "results": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
