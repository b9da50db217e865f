"""Stragglers: a per-record cost that cannot be pre-aggregated, dpa policies vs Spark.

Every record costs a fixed ``c`` seconds of *sleep* at the reducer (``dpa.WithCost(dpa.Count(),
c, mode="sleep")``), so 8 workers fit on a 2-core machine and the makespan is decided by how
evenly the records are spread, not by CPU. Keys are Zipf(z=1.1) over ``K`` keys (default
N=40k records, K=10k, c=1 ms: 40 s of work, ideal makespan ``N * c / 8`` = 5 s).

* **dpa**: ``dpa.run(table, key="key", reducer=WithCost(Count(), c), config=...)`` on an
  in-memory Arrow table, 8 reducers, for the policies in :data:`POLICIES` (hash = no load
  balancing, DPA halving/doubling with 1-4 rounds, shuffle, pkg with d=2..8, potc, dkg).
  The makespan is the wall time of ``dpa.run`` plus fetching the result (``to_arrow()``).
  The actors are started (and warmed) by an untimed run first.
* **Spark**: ``df.groupBy("key").applyInPandas(fn, "key long, count long").collect()`` where
  ``fn`` sleeps ``len(pdf) * c`` and returns the group's count, on a plain
  ``SparkSession.builder.master("local[8]")`` (Java 17 options from
  ``spark_bridge.session.JAVA17_OPTIONS``), run in a **separate process** so it cannot clash
  with Ray. The input DataFrame is cached and counted first; the Python workers are
  started by an untimed warm-up. Variants: ``spark.sql.shuffle.partitions`` left at its
  default (200) and 8, each with Spark's default adaptive execution (which coalesces small
  shuffle partitions: this input is tiny, so that can mean very few tasks) and with
  ``spark.sql.adaptive.coalescePartitions.enabled=false``. The tasks per stage are reported.
* Optionally (``--bridge``) the best dpa policy again, reading the same data through
  ``spark_bridge.run_with_result`` on Spark on Ray (in this process, after the rest).

``--defaults`` (the balancing-with-defaults targets) runs ``JobConfig()`` defaults instead (only
``num_reducers=8`` and the policy) on a Zipf job, uniform keys, one hot key and a
user-defined CPU-bound reducer. It first prints the best ring token doubling can reach
on the Zipf job (:func:`doubling_bound`, 1..``--bound-rounds`` rounds per reducer);
``--oracle`` also runs the job on each of those rings from its first record
(:func:`fixed_ring_policy`), doubling's floor at run time.

Reported per run: makespan, ideal ``N * c / R``, makespan / ideal, speedup vs each Spark
variant, the records each reducer processed (max / mean), rebalances, forwarded records,
and the load average. Targets: best dpa policy >= 1.5x faster than Spark and <= 1.25x ideal.

Run (small, ~2 minutes)::

    python -m benchmarks.stragglers --rows 16k --policies hash doubling-r2 shuffle pkg-d2

Default::

    python -m benchmarks.stragglers --out stragglers.json

Why small chunks (``--chunk-size``, default 32): a reducer takes up to ``chunk_size``
records off its queue, sleeps ``chunk_size * c`` and only then looks at its queue again.
Records in a taken chunk can no longer be forwarded when the balancer moves their key; with
the default ``JobConfig.chunk_size`` (65 536) a reducer swallows its whole queue in its first
chunk, so a rebalance cannot take effect. Small chunks bound the work stuck in flight to
``chunk_size * c`` (32 ms here). Each chunk also costs the reducer roughly 3 ms of CPU (Arrow
slicing and group-by, and a queue report to the balancer). With 8 reducers on 2 cores this
CPU cost becomes the bottleneck below 16-32 records per chunk. Measured for pkg-d2: chunk 8
-> 1.72x ideal, 16 -> 1.27x, 32 -> 1.11x, 64 -> 1.09x, 4096 -> 1.05x. Splitting policies
(pkg, shuffle) never move queued records, so for them bigger chunks are simply cheaper.
32-64 is the compromise that keeps the ring policies responsive. ``--batch-size`` (default
4096, i.e. 10 input blocks) matters less: mappers hash and route a block in milliseconds, so
every record is queued within a fraction of a second whatever the size. 512 (80 blocks) adds
per-block overhead (1.25x ideal); 262144 (one block, so one busy mapper) gives 1.13x.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.common import fmt, init_ray, median, parse_int, print_table, stop_ray, write_json
from dpa.routing.policies.ring.oracle import doubling_bound, fixed_ring_factory

#: dpa policies: name -> JobConfig fields.
POLICIES: dict[str, dict[str, Any]] = {
    "hash": {"policy": "hash"},
    "ring-no-lb": {"policy": "doubling", "max_rounds": 0},
    "halving-r1": {"policy": "halving", "max_rounds": 1},
    "halving-r4": {"policy": "halving", "max_rounds": 4},
    "doubling-r1": {"policy": "doubling", "max_rounds": 1},
    "doubling-r2": {"policy": "doubling", "max_rounds": 2},
    "doubling-r4": {"policy": "doubling", "max_rounds": 4},
    "shuffle": {"policy": "shuffle"},
    "pkg-d2": {"policy": "pkg", "policy_options": {"d": 2}},
    "pkg-d4": {"policy": "pkg", "policy_options": {"d": 4}},
    "pkg-d8": {"policy": "pkg", "policy_options": {"d": 8}},
    "potc-d2": {"policy": "potc", "policy_options": {"d": 2}},
    "dkg": {"policy": "dkg"},
    "hybrid": {"policy": "hybrid"},
}
DEFAULT_POLICIES = [p for p in POLICIES if p != "dkg"]

#: Spark variants: name -> SQL settings for the query.
SPARK_VARIANTS: dict[str, dict[str, str]] = {
    "partitions=default": {},
    "partitions=8": {"spark.sql.shuffle.partitions": "8"},
    "partitions=default,no-coalesce": {"spark.sql.adaptive.coalescePartitions.enabled": "false"},
    "partitions=8,no-coalesce": {"spark.sql.shuffle.partitions": "8",
                                 "spark.sql.adaptive.coalescePartitions.enabled": "false"},
}
_SPARK_KEYS = ("spark.sql.shuffle.partitions", "spark.sql.adaptive.coalescePartitions.enabled")


def command_line() -> str:
    return shlex.join([sys.executable, "-m", "benchmarks.stragglers", *sys.argv[1:]])


def load_avg() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def make_table(args: Any) -> pa.Table:
    from workloads.generators import zipf

    return zipf(args.z, args.keys, args.rows, seed=args.seed)


def reference(table: pa.Table) -> dict[int, int]:
    out = table.group_by("key").aggregate([([], "count_all")])
    return dict(zip(out["key"].to_pylist(), out["count_all"].to_pylist()))


def same_counts(keys: list[int], counts: list[int], ref: dict[int, int]) -> str:
    got = dict(zip(keys, counts))
    if len(got) != len(keys):
        return "MISMATCH: duplicate keys in the result"
    if got != ref:
        diff = sum(1 for k in ref.keys() | got.keys() if ref.get(k) != got.get(k))
        return f"MISMATCH: {diff} keys differ ({len(got)} vs {len(ref)} keys)"
    return "ok"


# ----------------------------------------------------------------------------- Spark (child)
def spark_child(args: Any) -> None:
    """Runs the Spark side in this (child) process; writes JSON to ``args.spark_child``."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import pandas as pd
    from pyspark.sql import SparkSession

    from spark_bridge.session import JAVA17_OPTIONS

    cost = args.cost_ms / 1000.0
    table = make_table(args)
    ref = reference(table)
    t0 = time.perf_counter()
    spark = (
        SparkSession.builder.master(f"local[{args.spark_cores}]")
        .appName("dpa-stragglers")
        .config("spark.driver.extraJavaOptions", JAVA17_OPTIONS)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    sc = spark.sparkContext
    sc.setLogLevel("ERROR")
    out: dict[str, Any] = {"spark_start_s": time.perf_counter() - t0, "default_parallelism": sc.defaultParallelism,
                           "shuffle_partitions_default": spark.conf.get("spark.sql.shuffle.partitions"),
                           "adaptive": spark.conf.get("spark.sql.adaptive.enabled"), "runs": []}
    try:
        df = spark.createDataFrame(table.to_pandas()).cache()
        assert df.count() == table.num_rows
        small = spark.createDataFrame(table.slice(0, 2000).to_pandas()).cache()
        small.count()
        out["input_partitions"] = df.rdd.getNumPartitions()

        def make_fn(c: float) -> Any:
            def fn(pdf: pd.DataFrame) -> pd.DataFrame:
                time.sleep(len(pdf) * c)
                return pd.DataFrame({"key": [int(pdf["key"].iloc[0])], "count": [len(pdf)]})

            return fn

        def run(data: Any, c: float, settings: dict[str, str], group: str) -> tuple[float, list[Any], list[Any]]:
            for k in _SPARK_KEYS:
                spark.conf.unset(k)
            for k, v in settings.items():
                spark.conf.set(k, v)
            sc.setJobGroup(group, group)
            t = time.perf_counter()
            rows = data.groupBy("key").applyInPandas(make_fn(c), "key long, count long").collect()
            elapsed = time.perf_counter() - t
            tracker = sc.statusTracker()
            stages = []
            for job in sorted(tracker.getJobIdsForGroup(group)):
                info = tracker.getJobInfo(job)
                for sid in (info.stageIds if info else []):
                    st = tracker.getStageInfo(sid)
                    if st is not None:
                        stages.append((sid, st.numTasks))
            return elapsed, rows, sorted(set(stages))

        # Warm-up: start local[N]'s Python workers (8 tasks at once), untimed.
        warm = {"spark.sql.shuffle.partitions": str(args.spark_cores),
                "spark.sql.adaptive.coalescePartitions.enabled": "false"}
        for i in range(2):
            t, _, _ = run(small, 0.0, warm, f"warmup-{i}")
            out[f"warmup_{i + 1}_s"] = t
        print(f"[spark child] local[{args.spark_cores}] up in {out['spark_start_s']:.1f}s, warm-up "
              f"{out['warmup_1_s']:.1f}s / {out['warmup_2_s']:.1f}s; load avg {load_avg()}", flush=True)
        for rep in range(args.reps):
            for name, settings in SPARK_VARIANTS.items():
                if args.spark_variants and name not in args.spark_variants:
                    continue
                la = os.getloadavg()[0]
                t, rows, stages = run(df, cost, settings, f"{name}-{rep}")
                verdict = same_counts([r["key"] for r in rows], [r["count"] for r in rows], ref)
                out["runs"].append({"variant": name, "rep": rep, "makespan_s": t, "stages": stages,
                                    "result_tasks": stages[-1][1] if stages else None, "load_avg_1m": la,
                                    "status": verdict})
                print(f"[spark child] rep {rep + 1} {name:<32} {t:7.2f}s  tasks per stage "
                      f"{[n for _, n in stages]}  {verdict}  load {la:.1f}", flush=True)
        # The same queries without the sleep: Spark's own per-group cost (applyInPandas builds
        # a pandas DataFrame per key and calls fn once per key), for reading the figures above.
        for name in ("partitions=default,no-coalesce", "partitions=8,no-coalesce"):
            if args.spark_variants and name not in args.spark_variants:
                continue
            la = os.getloadavg()[0]
            t, rows, stages = run(df, 0.0, SPARK_VARIANTS[name], f"{name}-c0")
            verdict = same_counts([r["key"] for r in rows], [r["count"] for r in rows], ref)
            out["runs"].append({"variant": f"{name},c=0", "rep": 0, "makespan_s": t, "stages": stages,
                                "result_tasks": stages[-1][1] if stages else None, "load_avg_1m": la,
                                "status": verdict})
            print(f"[spark child] c=0 {name:<32} {t:7.2f}s  (no sleep: Spark's own overhead)  {verdict}  "
                  f"load {la:.1f}", flush=True)
    finally:
        spark.stop()
    with open(args.spark_child, "w") as fh:
        json.dump(out, fh)


def run_spark_subprocess(args: Any, argv: list[str]) -> dict[str, Any] | None:
    with tempfile.TemporaryDirectory(prefix="dpa-stragglers-") as tmp:
        result = os.path.join(tmp, "spark.json")
        log = os.path.join(tmp, "spark.log")
        cmd = [sys.executable, "-m", "benchmarks.stragglers", *argv, "--spark-child", result]
        print(f"\nSpark local[{args.spark_cores}] in a subprocess: {shlex.join(cmd)}", flush=True)
        with open(log, "w") as err:
            proc = subprocess.run(cmd, stdout=None, stderr=err, cwd=os.path.dirname(os.path.dirname(
                os.path.abspath(__file__))), check=False)
        if proc.returncode != 0 or not os.path.exists(result):
            with open(log) as fh:
                tail = fh.read()[-3000:]
            print(f"Spark subprocess failed (exit {proc.returncode}); stderr tail:\n{tail}", file=sys.stderr)
            return None
        with open(result) as fh:
            return json.load(fh)


# ----------------------------------------------------------------------------- defaults mode
class CpuReducer:
    """Builds a user-defined ``dpa.Reducer`` whose ``add`` burns real CPU (no ``WithCost``).

    Each record costs ``rounds`` rounds of SHA-256 on a small buffer (about 1 us each), so
    the balancer can only know what a record costs from the reducer's own measurement.
    """

    @staticmethod
    def make(rounds: int) -> Any:
        import hashlib

        import dpa

        class BurnCount(dpa.Reducer):
            def __init__(self) -> None:
                super().__init__(None, "count")

            def create(self) -> int:
                return 0

            def add(self, acc: int, value: Any) -> int:
                digest = b"dpa"
                for _ in range(rounds):
                    digest = hashlib.sha256(digest).digest()
                return acc + 1

            def merge(self, a: int, b: int) -> int:
                return a + b

        return BurnCount()


def run_defaults_once(table: pa.Table, policy: str | None, reducer: Any, ref: dict[int, int]) -> dict[str, Any]:
    """One job with ``JobConfig()`` defaults: only ``num_reducers=8`` (and ``policy`` if named)."""
    import dpa
    from dpa.metrics import skew

    fields: dict[str, Any] = {"num_reducers": 8}
    if policy is not None:
        fields["policy"] = policy
    cfg = dpa.JobConfig().with_options(**fields)
    t0 = time.perf_counter()
    res = dpa.run(table, key="key", reducer=reducer, config=cfg)
    out = res.to_arrow()
    makespan = time.perf_counter() - t0
    processed = res.stats.processed
    return {"policy": policy or f"default ({cfg.policy_name})", "makespan_s": makespan,
            "S": skew(processed), "max_over_mean": max(processed) / (sum(processed) / len(processed)),
            "rebalances": len(res.stats.rebalances), "forwarded": sum(res.stats.forwarded),
            "status": same_counts(out["key"].to_pylist(), out["count"].to_pylist(), ref),
            "load_avg_1m": os.getloadavg()[0]}


def fixed_ring_policy(name: str, tokens: tuple[int, ...], first_tokens: int | None = None) -> str:
    """Registers, in this driver, ``doubling`` started on a given ring that never rebalances
    (:func:`~dpa.routing.policies.ring.oracle.fixed_ring_factory`); returns ``name``."""
    import dpa

    dpa.register_policy(name, fixed_ring_factory(tokens, first_tokens),
                        "doubling started on a given ring, never rebalancing (benchmark oracle)")
    return name


def run_defaults(args: Any) -> dict[str, Any]:
    """The balancing-with-defaults targets with ``JobConfig()`` defaults (only ``num_reducers=8`` and the policy)."""
    import dpa
    from workloads.generators import zipf

    cost = args.cost_ms / 1000.0
    with_cost = dpa.WithCost(dpa.Count(), cost, mode="sleep")
    zipf_table = zipf(args.z, args.keys, args.rows, seed=args.seed)
    hot_table = pa.table({"key": np.zeros(args.hot_rows, dtype=np.int64)})
    cpu_table = zipf(args.z, args.keys, args.cpu_rows, seed=args.seed)
    uniform_table = pa.table({"key": np.random.default_rng(args.seed).integers(0, args.keys, args.rows)})
    zipf_policies: list[str | None] = [None, "doubling", "halving", "hybrid", "pkg"]
    workloads = [
        ("zipf", zipf_table, with_cost, args.rows * cost / 8, zipf_policies),
        ("uniform", uniform_table, with_cost, args.rows * cost / 8, [None, "doubling", "halving", "hash"]),
        ("one-hot-key", hot_table, with_cost, args.hot_rows * cost / 8, [None, "doubling"]),
        ("user-cpu-reducer", cpu_table, CpuReducer.make(args.cpu_rounds), None, [None, "hash"]),
    ]
    info: dict[str, Any] = {"ray_init_s": init_ray()}
    if "zipf" in args.workloads:
        for rounds in range(1, args.bound_rounds + 1):
            bound = doubling_bound(zipf_table, rounds=rounds)
            info[f"doubling_bound_r{rounds}"] = bound.share
            print(f"zipf: the best ring any set of doubling rounds (at most {rounds} per reducer) reaches holds "
                  f"{bound.share:.3f}x a fair share on its largest reducer (first ring of {bound.first_tokens} "
                  f"tokens per reducer, rounds {bound.rounds}; before any overhead)", flush=True)
            if args.oracle:
                zipf_policies.append(fixed_ring_policy(f"doubling-best-ring-r{rounds}", bound.tokens,
                                                       bound.first_tokens))
    warm = zipf_table.slice(0, 2000)
    run_defaults_once(warm, None, dpa.Count(), reference(warm))  # start the actors (untimed)
    rows = []
    for name, table, reducer, ideal, policies in workloads:
        if name not in args.workloads:
            continue
        ref = reference(table)
        for policy in policies:
            runs = [run_defaults_once(table, policy, reducer, ref) for _ in range(args.reps)]
            ms = [r["makespan_s"] for r in runs]
            row = {"workload": name, **runs[0], "makespan_s": median(ms), "spread_s": max(ms) - min(ms),
                   "S": median(r["S"] for r in runs), "rebalances": median(r["rebalances"] for r in runs),
                   "x_ideal": None if ideal is None else median(ms) / ideal,
                   "status": next((r["status"] for r in runs if r["status"] != "ok"), "ok")}
            rows.append(row)
            versus = "" if ideal is None else f" = {row['x_ideal']:.2f}x ideal"
            print(f"{name:<17} {row['policy']:<20} {row['makespan_s']:6.2f}s (spread {row['spread_s']:.2f}){versus}"
                  f"  S {row['S']:.3f}  rebalances {row['rebalances']}  {row['status']}  load {row['load_avg_1m']:.1f}",
                  flush=True)
    stop_ray()
    print_table(rows, ["workload", "policy", "makespan_s", "spread_s", "x_ideal", "S", "max_over_mean", "rebalances",
                       "forwarded", "status"],
                title=f"stragglers with JobConfig() defaults (num_reducers=8), median of {args.reps}")
    return {"command": command_line(), "defaults": rows, "startup": info}


# ----------------------------------------------------------------------------- dpa
def job_config(args: Any, fields: dict[str, Any], chunk_size: int | None = None,
               batch_size: int | None = None) -> Any:
    import dpa

    base = {"num_mappers": args.mappers, "num_reducers": args.reducers, "tau": args.tau,
            "batch_size": batch_size or args.batch_size, "chunk_size": chunk_size or args.chunk_size,
            "timeout_s": max(120.0, 10 * args.rows * args.cost_ms / 1000.0)}
    return dpa.JobConfig().with_options(**{**base, **fields})


def run_dpa_once(table: pa.Table, cfg: Any, cost: float, ref: dict[int, int]) -> dict[str, Any]:
    import dpa

    la = os.getloadavg()[0]
    t0 = time.perf_counter()
    res = dpa.run(table, key="key", reducer=dpa.WithCost(dpa.Count(), cost, mode="sleep"), config=cfg)
    out = res.to_arrow()
    makespan = time.perf_counter() - t0
    st = res.stats
    processed = st.processed
    return {
        "makespan_s": makespan, "core_s": st.wall_time_s, "load_avg_1m": la,
        "processed": processed, "max_over_mean": max(processed) / (sum(processed) / len(processed)),
        "rebalances": len(st.rebalances), "forwarded": sum(st.forwarded), "peak_queue": max(st.peak_queue),
        "status": same_counts(out["key"].to_pylist(), out["count"].to_pylist(), ref),
        "events": [f"{e.action}:r{e.reducer}@{e.time_s:.2f}s" for e in st.rebalances],
    }


def summarise_dpa(name: str, runs: list[dict[str, Any]], ideal: float) -> dict[str, Any]:
    ms = [r["makespan_s"] for r in runs]
    best = min(runs, key=lambda r: r["makespan_s"])
    bad = [r["status"] for r in runs if r["status"] != "ok"]
    return {"engine": "dpa", "config": name, "makespan_s": median(ms), "min_s": min(ms), "times_s": ms,
            "x_ideal": median(ms) / ideal, "max_over_mean": median(r["max_over_mean"] for r in runs),
            "rebalances": best["rebalances"], "forwarded": best["forwarded"], "processed": best["processed"],
            "events": best["events"], "load_avg": median(r["load_avg_1m"] for r in runs),
            "status": bad[0] if bad else "ok"}


def run_dpa(table: pa.Table, args: Any, ref: dict[int, int], ideal: float) -> tuple[list[dict[str, Any]], dict]:
    cost = args.cost_ms / 1000.0
    info: dict[str, Any] = {"ray_init_s": init_ray()}
    warm_table = table.slice(0, min(2000, table.num_rows))
    warm_ref = reference(warm_table)
    for i in range(2):  # start (then re-use) the actor pool: the shape is the same for all policies
        r = run_dpa_once(warm_table, job_config(args, POLICIES["shuffle"]), 0.0, warm_ref)
        info[f"dpa_warmup_{i + 1}_s"] = r["makespan_s"]
    print(f"Ray up in {info['ray_init_s']:.1f}s; dpa warm-up {info['dpa_warmup_1_s']:.1f}s (cold, starts "
          f"{args.mappers + args.reducers + 2} actors) / {info['dpa_warmup_2_s']:.1f}s; load avg {load_avg()}",
          flush=True)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in args.policies}
    for rep in range(args.reps):
        for name in args.policies:
            r = run_dpa_once(table, job_config(args, POLICIES[name]), cost, ref)
            runs[name].append(r)
            print(f"rep {rep + 1} dpa {name:<12} {r['makespan_s']:7.2f}s = {r['makespan_s'] / ideal:.2f}x ideal  "
                  f"max/mean load {r['max_over_mean']:.2f}  rebalances {r['rebalances']}  forwarded "
                  f"{r['forwarded']:,}  {r['status']}  load {r['load_avg_1m']:.1f}", flush=True)
    rows = [summarise_dpa(name, rs, ideal) for name, rs in runs.items()]
    best = min((r for r in rows if r["status"] == "ok"), key=lambda r: r["makespan_s"], default=None)
    if args.sweep and best is not None:
        info["sweep"] = sweep(table, args, ref, ideal, best["config"])
    return rows, info


def sweep(table: pa.Table, args: Any, ref: dict[int, int], ideal: float, policy: str) -> list[dict[str, Any]]:
    """The best policy (and doubling-r2) with other chunk and batch sizes."""
    cost = args.cost_ms / 1000.0
    rows = []
    policies = [policy] + (["doubling-r2"] if policy != "doubling-r2" and "doubling-r2" in POLICIES else [])
    settings = [(c, args.batch_size) for c in args.sweep_chunks] + [(args.chunk_size, b) for b in args.sweep_batches]
    for name in policies:
        for chunk, batch in settings:
            r = run_dpa_once(table, job_config(args, POLICIES[name], chunk_size=chunk, batch_size=batch), cost, ref)
            rows.append({"policy": name, "chunk_size": chunk, "batch_size": batch, "makespan_s": r["makespan_s"],
                         "x_ideal": r["makespan_s"] / ideal, "max_over_mean": r["max_over_mean"],
                         "rebalances": r["rebalances"], "forwarded": r["forwarded"], "load_avg": r["load_avg_1m"],
                         "status": r["status"]})
            print(f"sweep {name:<12} chunk {chunk:>6} batch {batch:>7}: {r['makespan_s']:7.2f}s "
                  f"= {r['makespan_s'] / ideal:.2f}x ideal  max/mean {r['max_over_mean']:.2f}  "
                  f"{r['status']}  load {r['load_avg_1m']:.1f}", flush=True)
    return rows


def run_bridge(table: pa.Table, args: Any, ref: dict[int, int], ideal: float, policy: str) -> dict[str, Any]:
    """``policy`` through spark_bridge on Spark on Ray (Ray is already up in this process)."""
    import pyarrow.parquet as pq

    import dpa
    from spark_bridge import SparkConfig, run_with_result, spark_session

    cost = args.cost_ms / 1000.0
    reducer = dpa.WithCost(dpa.Count(), cost, mode="sleep")
    cfg = job_config(args, POLICIES[policy])
    with tempfile.TemporaryDirectory(prefix="dpa-stragglers-bridge-") as tmp:
        path, warm = os.path.join(tmp, "data.parquet"), os.path.join(tmp, "warm.parquet")
        pq.write_table(table, path)
        pq.write_table(table.slice(0, 2000), warm)
        t0 = time.perf_counter()
        with spark_session(SparkConfig(app_name="dpa-stragglers-bridge")) as spark:
            spark.sparkContext.setLogLevel("ERROR")
            info: dict[str, Any] = {"spark_on_ray_start_s": time.perf_counter() - t0}
            for i in range(2):
                t = time.perf_counter()
                run_with_result(spark.read.parquet(warm), key="key", reducer=dpa.Count(), config=cfg)[0].collect()
                info[f"warmup_{i + 1}_s"] = time.perf_counter() - t
            runs = []
            for _ in range(args.reps):
                la = os.getloadavg()[0]
                t = time.perf_counter()
                out, res = run_with_result(spark.read.parquet(path), key="key", reducer=reducer, config=cfg)
                rows = out.collect()
                makespan = time.perf_counter() - t
                verdict = same_counts([r["key"] for r in rows], [r["count"] for r in rows], ref)
                p = res.stats.processed
                runs.append({"makespan_s": makespan, "core_s": res.stats.wall_time_s, "load_avg_1m": la,
                             "max_over_mean": max(p) / (sum(p) / len(p)), "rebalances": len(res.stats.rebalances),
                             "forwarded": sum(res.stats.forwarded), "processed": p, "status": verdict,
                             "events": [], "blocks_per_mapper": res.stats.blocks_per_mapper})
                print(f"bridge dpa {policy}: {makespan:.2f}s (dpa job {res.stats.wall_time_s:.2f}s) = "
                      f"{makespan / ideal:.2f}x ideal  blocks/mapper {res.stats.blocks_per_mapper}  {verdict}  "
                      f"load {la:.1f}", flush=True)
        row = summarise_dpa(f"{policy} via spark_bridge", runs, ideal)
        row["core_s"] = median(r["core_s"] for r in runs)
        row["startup"] = info
        return row


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=parse_int, default=40_000, help="records N (default 40k; accepts 16k)")
    p.add_argument("--keys", type=parse_int, default=10_000, help="distinct keys K (default 10k)")
    p.add_argument("--z", type=float, default=1.1, help="Zipf exponent (default 1.1)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cost-ms", type=float, default=1.0, help="sleep per record c, in ms (default 1)")
    p.add_argument("--reducers", type=int, default=8)
    p.add_argument("--mappers", type=int, default=2)
    p.add_argument("--batch-size", type=parse_int, default=4096, help="JobConfig.batch_size (default 4096)")
    p.add_argument("--chunk-size", type=parse_int, default=32, help="JobConfig.chunk_size (default 32)")
    p.add_argument("--tau", type=float, default=0.2)
    p.add_argument("--reps", type=int, default=1, help="repetitions per policy / Spark variant")
    p.add_argument("--policies", nargs="+", default=DEFAULT_POLICIES, choices=list(POLICIES))
    p.add_argument("--spark-cores", type=int, default=8, help="Spark local[N] (default 8)")
    p.add_argument("--spark-variants", nargs="+", default=None, choices=list(SPARK_VARIANTS))
    p.add_argument("--no-spark", action="store_true")
    p.add_argument("--no-dpa", action="store_true")
    p.add_argument("--bridge", action="store_true", help="also run the best policy through spark_bridge")
    p.add_argument("--sweep", action="store_true", help="also sweep chunk/batch sizes for the best policy")
    p.add_argument("--sweep-chunks", type=parse_int, nargs="+", default=[8, 16, 64, 256, 4096, 65536])
    p.add_argument("--sweep-batches", type=parse_int, nargs="+", default=[512, 262144])
    p.add_argument("--defaults", action="store_true",
                   help="defaults mode: JobConfig() defaults (only num_reducers=8 and the policy) on a Zipf "
                        "workload, one hot key and a user-defined CPU-bound reducer; no Spark")
    p.add_argument("--workloads", nargs="+", default=["zipf", "uniform", "one-hot-key", "user-cpu-reducer"],
                   help="with --defaults: which workloads")
    p.add_argument("--hot-rows", type=parse_int, default=20_000, help="with --defaults: records of the one hot key")
    p.add_argument("--cpu-rows", type=parse_int, default=20_000, help="with --defaults: records for the CPU reducer")
    p.add_argument("--cpu-rounds", type=int, default=200, help="with --defaults: SHA-256 rounds per record")
    p.add_argument("--bound-rounds", type=int, default=3,
                   help="with --defaults: print doubling's best reachable ring for 1..N rounds per reducer (default 3)")
    p.add_argument("--oracle", action="store_true",
                   help="with --defaults: also run the Zipf job on each of those best rings from its first record, "
                        "never rebalancing (doubling's floor at run time)")
    p.add_argument("--spark-child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help="write the figures as JSON to this file")
    args = p.parse_args(argv)
    if args.spark_child:
        spark_child(args)
        return {}
    if args.defaults:
        payload = run_defaults(args)
        write_json(args.out, payload)
        return payload

    cost = args.cost_ms / 1000.0
    ideal = args.rows * cost / args.reducers
    table = make_table(args)
    ref = reference(table)
    counts = np.array(sorted(ref.values(), reverse=True))
    print(f"command: {command_line()}")
    print(f"load avg (1/5/15 min) at start: {load_avg()}  ({os.cpu_count()} CPUs)")
    print(f"{args.rows:,} Zipf(z={args.z}, K={args.keys:,}) records, {len(counts):,} distinct keys, top key "
          f"{counts[0]:,} = {100 * counts[0] / args.rows:.1f}% (1/R = {100 / args.reducers:.1f}%); cost {args.cost_ms} ms"
          f"/record; total work {args.rows * cost:.1f}s; ideal makespan N*c/R = {ideal:.2f}s; a policy that keeps "
          f"keys whole needs >= {counts[0] * cost:.2f}s = {counts[0] * cost / ideal:.2f}x ideal")
    payload: dict[str, Any] = {"command": command_line(), "rows": args.rows, "keys": args.keys, "z": args.z,
                               "cost_ms": args.cost_ms, "reducers": args.reducers, "mappers": args.mappers,
                               "batch_size": args.batch_size, "chunk_size": args.chunk_size, "tau": args.tau,
                               "ideal_s": ideal, "top_key_share": counts[0] / args.rows,
                               "load_avg_start": os.getloadavg()}

    spark: dict[str, Any] | None = None
    if not args.no_spark:
        spark = run_spark_subprocess(args, argv)
    rows: list[dict[str, Any]] = []
    info: dict[str, Any] = {}
    if not args.no_dpa:
        try:
            rows, info = run_dpa(table, args, ref, ideal)
            best = min((r for r in rows if r["status"] == "ok"), key=lambda r: r["makespan_s"], default=None)
            if args.bridge and best is not None:
                rows.append(run_bridge(table, args, ref, ideal, best["config"]))
        finally:
            stop_ray()
    print(f"Ray stopped; load avg at end: {load_avg()}")

    spark_rows = []
    if spark is not None:
        by_variant: dict[str, list[dict[str, Any]]] = {}
        for r in spark["runs"]:
            by_variant.setdefault(r["variant"], []).append(r)
        for name, rs in by_variant.items():
            ms = [r["makespan_s"] for r in rs]
            bad = [r["status"] for r in rs if r["status"] != "ok"]
            spark_rows.append({"engine": "spark", "config": f"local[{args.spark_cores}] {name}",
                               "makespan_s": median(ms), "min_s": min(ms), "times_s": ms,
                               "x_ideal": median(ms) / ideal, "tasks": rs[0]["result_tasks"],
                               "stages": rs[0]["stages"], "load_avg": median(r["load_avg_1m"] for r in rs),
                               "status": bad[0] if bad else "ok"})
    spark_default = next((r for r in spark_rows if r["config"].endswith(" partitions=default")), None)
    spark_8 = next((r for r in spark_rows if r["config"].endswith(" partitions=8")), None)
    for r in spark_rows:
        if r["config"].endswith(",c=0"):
            r["engine"] = "spark c=0"  # no sleep: overhead only, not a competitor
    timed_spark = [r for r in spark_rows if r["engine"] == "spark"]
    spark_best = min(timed_spark, key=lambda r: r["makespan_s"], default=None)
    for r in rows + timed_spark:
        r["ideal_s"] = ideal
        r["vs_spark_default"] = spark_default["makespan_s"] / r["makespan_s"] if spark_default else None
        r["vs_spark_p8"] = spark_8["makespan_s"] / r["makespan_s"] if spark_8 else None
        r["vs_spark_best"] = spark_best["makespan_s"] / r["makespan_s"] if spark_best else None
    print_table(rows + spark_rows, ["engine", "config", "makespan_s", "ideal_s", "x_ideal", "vs_spark_default",
                                    "vs_spark_p8", "vs_spark_best", "max_over_mean", "rebalances", "forwarded",
                                    "tasks", "load_avg", "status"],
                title=f"stragglers: N={args.rows:,} K={args.keys:,} z={args.z} c={args.cost_ms}ms R={args.reducers} "
                      f"(vs_spark_* = Spark makespan / this one: speedup; x_ideal = makespan / (N*c/R))")
    if info.get("sweep"):
        print_table(info["sweep"], ["policy", "chunk_size", "batch_size", "makespan_s", "x_ideal", "max_over_mean",
                                    "rebalances", "forwarded", "load_avg", "status"],
                    title="chunk_size / batch_size sweep")
    startup = {k: v for k, v in info.items() if k != "sweep"}
    if spark is not None:
        startup.update({f"spark_{k}": v for k, v in spark.items() if k.endswith("_s")})
        print(f"\nSpark: defaultParallelism {spark['default_parallelism']}, input partitions "
              f"{spark['input_partitions']}, spark.sql.shuffle.partitions default "
              f"{spark['shuffle_partitions_default']}, adaptive {spark['adaptive']}")
    print_table([{"what": k, "seconds": v} for k, v in startup.items()], title="start-up / warm-up (not in the figures)")

    ok = [r for r in rows if r["status"] == "ok" and r["engine"] == "dpa" and "bridge" not in r["config"]]
    if ok:
        best = min(ok, key=lambda r: r["makespan_s"])
        print(f"\nbest dpa policy: {best['config']} {fmt(best['makespan_s'])}s = {best['x_ideal']:.2f}x ideal "
              f"(target <= 1.25: {'MET' if best['x_ideal'] <= 1.25 else 'MISSED'})")
        for label, ref_row in (("Spark default", spark_default), ("Spark partitions=8", spark_8),
                               ("best Spark variant", spark_best)):
            if ref_row is not None:
                x = ref_row["makespan_s"] / best["makespan_s"]
                print(f"  vs {label} ({ref_row['config']}, {fmt(ref_row['makespan_s'])}s): {x:.2f}x faster "
                      f"(target >= 1.5: {'MET' if x >= 1.5 else 'MISSED'})")
    payload.update({"results": rows + spark_rows, "startup": startup, "sweep": info.get("sweep"),
                    "spark": spark, "load_avg_end": os.getloadavg()})
    write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
