"""End to end on Spark on Ray: dpa (through ``spark_bridge.run``) vs Spark's own groupBy.

A Zipf parquet data set (default 10M rows, z=1.1, K=100k, one int64 column ``key``,
written as ``--files`` files) is counted per key, in ONE process and ONE Spark-on-Ray
session (``spark_bridge.spark_session``), by

* **dpa**: ``spark.read.parquet(path)`` -> ``spark_bridge.run_with_result(df, key="key",
  reducer=dpa.Count(), config=...)`` -> Spark DataFrame -> materialised. The DataFrame is a
  plain parquet scan, so by default dpa's mappers read the files themselves (the bridge's
  ``pushdown``); the ``through-spark`` preset (``pushdown=False``) measures the general
  path through Spark's tasks;
* **Spark**: ``spark.read.parquet(path).groupBy("key").count()`` -> materialised the same way.

``--workload derived`` replaces the plain scan, for both engines, by a DataFrame that is not
one: ``spark.read.parquet(path).select((col("key") % M).alias("key"))`` (``--modulus`` M,
default 50,000). dpa then always goes through Spark: by default Spark's own SQL aggregates
precombine (``spark_bridge.partials``); the ``arrow-precombine`` preset runs dpa's Arrow
combine in Spark's Python workers instead (``mapInArrow``), ``no-precombine`` ships every row.

``--workload tpch-q1`` is TPC-H Q1 over ``lineitem`` made with ``tpchgen-cli`` (``--scale``,
default SF1), dpa's eight aggregates through ``run_with_result`` against Spark's own
``groupBy().agg`` on the same filtered, derived DataFrame (:mod:`benchmarks.spark_tpch`;
default configuration: ``default`` only)::

    python -m benchmarks.spark_e2e --workload tpch-q1 --data-dir /tmp/tpch

Materialising (``--materialize``) is ``parquet`` (``df.write.parquet``, default) or
``count`` (``df.count()``). Both timings start at ``spark.read.parquet`` and end when the
action returns. dpa's time is split into ``bridge_s`` (Spark reads the parquet, caches it
as Arrow, Ray fetches it, the dpa job runs: the time ``run_with_result`` takes),
``core_s`` (the dpa job itself, ``Stats.wall_time_s``) and ``output_s`` (the materialising
action: Spark's Python workers fetch the result tables from Ray and write them).

Warm-up: a small file (``--warmup-rows``) is run through Spark and through every dpa
configuration first, then the full data set ``--full-warmups`` times (default 3) through
Spark and every dpa configuration (untimed); the first run of each is reported as "cold" (Spark: JIT/codegen
and the first job; dpa: starting its actors and Spark's Python workers). dpa keeps one warm
actor pool per (mappers, reducers) shape, so a configuration with a new shape pays actor
start-up again in its own warm-up, never in the timed runs. Timed repetitions are
interleaved (Spark, dpa config 1, dpa config 2, ... per repetition) so that load changes
caused by other users of the machine hit every engine alike.

Every result is checked against a pyarrow ``group_by`` of the same data (number of keys,
total, and with ``--materialize parquet`` every per-key count).

Run (small)::

    python -m benchmarks.spark_e2e --rows 1M --reps 2

Default (10M rows, 3 repetitions, the preset dpa configurations)::

    python -m benchmarks.spark_e2e --out spark_e2e.json

A configuration is ``name:field=value,...`` with JobConfig fields (``m``/``r`` are short
for num_mappers/num_reducers) and the bridge's ``pushdown``/``precombine``, e.g.
``--config m2r2-hash:m=2,r=2,policy=hash`` or ``--config spark-2x2:m=2,r=2,pushdown=false``.
"""

from __future__ import annotations

import argparse
import gc
import glob
import logging
import os
import shlex
import sys
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks import spark_tpch
from benchmarks.common import fmt, median, parse_int, print_table, temp_dir, write_json

#: Preset dpa configurations (JobConfig fields, plus the bridge's ``pushdown`` and
#: ``precombine``); "default" is ``JobConfig()`` and the bridge's defaults unchanged.
PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    "through-spark": {"pushdown": False},
    "no-lb": {"max_rounds": 0},
    "m2r2-no-lb": {"num_mappers": 2, "num_reducers": 2, "max_rounds": 0},
    "m2r2-doubling": {"num_mappers": 2, "num_reducers": 2},
    "m4r2-hash": {"num_mappers": 4, "num_reducers": 2, "policy": "hash"},
    "no-combine": {"map_side_combine": False},
    "arrow-precombine": {"pushdown": False, "precombine": "arrow"},
    "no-precombine": {"pushdown": False, "precombine": False},
}
#: Input DataFrames: a plain parquet scan, or one with a derived key column (not a scan).
WORKLOADS = ("scan", "derived", "tpch-q1")
_SHORT = {"m": "num_mappers", "r": "num_reducers"}


def command_line() -> str:
    return shlex.join([sys.executable, "-m", "benchmarks.spark_e2e", *sys.argv[1:]])


def load_avg() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def parse_config(text: str) -> tuple[str, dict[str, Any]]:
    """``name:field=value,...`` (or a preset name) -> (name, JobConfig overrides)."""
    if ":" not in text:
        if text not in PRESETS:
            raise argparse.ArgumentTypeError(f"unknown preset {text!r}; presets: {', '.join(PRESETS)}")
        return text, dict(PRESETS[text])
    name, _, spec = text.partition(":")
    fields: dict[str, Any] = {}
    for item in filter(None, spec.split(",")):
        key, _, value = item.partition("=")
        key = _SHORT.get(key.strip(), key.strip())
        value = value.strip()
        if key in ("policy", "runtime") or (key == "precombine" and value in ("sql", "arrow")):
            fields[key] = value
        elif value.lower() in ("true", "false"):
            fields[key] = value.lower() == "true"
        elif key in ("tau", "lb_interval_s", "report_interval_s"):
            fields[key] = float(value)
        elif key == "d":  # d=3 -> policy_options
            fields.setdefault("policy_options", {})[key] = int(value)
        else:
            fields[key] = parse_int(value)
    return name, fields


# ----------------------------------------------------------------------------- data
def write_dataset(table: pa.Table, path: str, files: int) -> None:
    """Writes ``table`` as ``files`` parquet files of equal row ranges under ``path``."""
    os.makedirs(path, exist_ok=True)
    step = -(-table.num_rows // files)
    for i in range(files):
        part = table.slice(i * step, step)
        if part.num_rows:
            pq.write_table(part, os.path.join(path, f"part-{i:05d}.parquet"))


def sorted_counts(keys: Any, counts: Any) -> tuple[np.ndarray, np.ndarray]:
    k = np.asarray(keys, dtype=np.int64)
    c = np.asarray(counts, dtype=np.int64)
    order = np.argsort(k, kind="stable")
    return k[order], c[order]


def check(got: tuple[np.ndarray, np.ndarray] | None, keys: int, total: int,
          ref: tuple[np.ndarray, np.ndarray]) -> str:
    """'ok' or what differs from the pyarrow reference."""
    if keys != len(ref[0]):
        return f"MISMATCH: {keys} keys vs {len(ref[0])}"
    if total != int(ref[1].sum()):
        return f"MISMATCH: total {total} vs {int(ref[1].sum())}"
    if got is not None and not (np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1])):
        return "MISMATCH: per-key counts differ"
    return "ok"


def input_frame(spark: Any, path: str, workload: str, modulus: int) -> Any:
    """The input DataFrame of ``workload`` over the parquet files at ``path``."""
    df = spark.read.parquet(path)
    if workload == "derived":
        from pyspark.sql import functions as F

        df = df.select((F.col("key") % modulus).alias("key"))
    return df


def materialize(df: Any, mode: str, out_path: str) -> None:
    if mode == "parquet":
        df.write.mode("overwrite").parquet(out_path)
    else:
        df.count()


def inspect_output(spark: Any, df: Any, mode: str, out_path: str) -> tuple[Any, int, int]:
    """(per-key counts or None, number of keys, total) of a materialised result (untimed)."""
    if mode == "parquet":
        files = sorted(glob.glob(os.path.join(out_path, "*.parquet")))
        table = pa.concat_tables([pq.read_table(f) for f in files]) if files else None
        if table is None or table.num_rows == 0:
            return None, 0, 0
        got = sorted_counts(table["key"], table["count"])
        return got, len(got[0]), int(got[1].sum())
    from pyspark.sql import functions as F

    row = df.agg(F.count(F.lit(1)).alias("n"), F.sum("count").alias("total")).collect()[0]
    return None, int(row["n"]), int(row["total"] or 0)


# ----------------------------------------------------------------------------- engines
def run_spark_once(spark: Any, path: str, mode: str, out_path: str, workload: str = "scan",
                   modulus: int = 50_000) -> tuple[float, Any]:
    t0 = time.perf_counter()
    df = input_frame(spark, path, workload, modulus).groupBy("key").count()
    materialize(df, mode, out_path)
    return time.perf_counter() - t0, df


#: Configuration fields that are arguments of ``spark_bridge.run_with_result``, not JobConfig fields.
BRIDGE_OPTIONS = ("pushdown", "precombine")


def run_dpa_once(spark: Any, path: str, cfg: Any, mode: str, out_path: str,
                 bridge: dict[str, Any] | None = None, workload: str = "scan",
                 modulus: int = 50_000) -> tuple[dict[str, float], Any, Any]:
    import dpa
    from spark_bridge import run_with_result

    t0 = time.perf_counter()
    df = input_frame(spark, path, workload, modulus)
    out, result = run_with_result(df, key="key", reducer=dpa.Count(), config=cfg, **(bridge or {}))
    t1 = time.perf_counter()
    materialize(out, mode, out_path)
    t2 = time.perf_counter()
    times = {"total_s": t2 - t0, "bridge_s": t1 - t0, "core_s": result.stats.wall_time_s, "output_s": t2 - t1}
    return times, out, result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=parse_int, default=10_000_000, help="rows (default 10M; accepts 1M, 500k)")
    p.add_argument("--keys", type=parse_int, default=100_000, help="distinct keys K (default 100k)")
    p.add_argument("--z", type=float, default=1.1, help="Zipf exponent (default 1.1)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--files", type=int, default=4,
                   help="parquet files the data set is written as (Spark -> one partition each, "
                        "and dpa one input block per partition; default 4)")
    p.add_argument("--warmup-rows", type=parse_int, default=200_000, help="rows of the warm-up file")
    p.add_argument("--reps", type=int, default=3, help="timed repetitions per engine/configuration")
    p.add_argument("--full-warmups", type=int, default=3,
                   help="untimed full-size rounds of every engine and configuration before the timed ones (default 3)")
    p.add_argument("--materialize", choices=("parquet", "count"), default="parquet")
    p.add_argument("--workload", choices=WORKLOADS, default="scan",
                   help="scan: spark.read.parquet(path) (default); derived: its key column replaced by "
                        "key %% MODULUS, a DataFrame that is not a plain scan; tpch-q1: TPC-H Q1 (--scale)")
    p.add_argument("--modulus", type=parse_int, default=50_000, help="M of --workload derived (default 50k)")
    p.add_argument("--config", action="append", type=parse_config, default=None, metavar="NAME[:FIELD=V,...]",
                   help=f"dpa configuration (repeatable); presets: {', '.join(PRESETS)} (default: all presets)")
    p.add_argument("--executors", type=int, default=None, help="Spark executors (SparkConfig default)")
    p.add_argument("--executor-cores", type=int, default=None, help="cores per executor (SparkConfig default)")
    p.add_argument("--executor-memory", default=None, help="e.g. 2g (SparkConfig default)")
    p.add_argument("--executor-actor-cpus", type=float, default=None,
                   help="Ray CPUs reserved per executor actor (SparkConfig.executor_actor_cpus)")
    p.add_argument("--out", default=None, help="write the figures as JSON to this file")
    spark_tpch.add_arguments(p)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.workload == "tpch-q1":
        return spark_tpch.run_q1(args, args.config or [("default", {})], BRIDGE_OPTIONS)
    configs = args.config or [(n, dict(f)) for n, f in PRESETS.items()]

    import dpa
    from spark_bridge import SparkConfig, spark_session
    from workloads.generators import zipf

    print(f"command: {command_line()}")
    print(f"load avg (1/5/15 min) at start: {load_avg()}  ({os.cpu_count()} CPUs)")
    t0 = time.perf_counter()
    table = zipf(args.z, args.keys, args.rows, seed=args.seed)
    warm_table = zipf(args.z, args.keys, args.warmup_rows, seed=args.seed + 1)
    keys = table["key"] if args.workload == "scan" else pa.array(table["key"].to_numpy() % args.modulus)
    ref_out = pa.table({"key": keys}).group_by("key").aggregate([([], "count_all")])
    ref = sorted_counts(ref_out["key"], ref_out["count_all"])
    print(f"{args.rows:,} Zipf(z={args.z}, K={args.keys:,}) rows -> {len(ref[0]):,} distinct keys, "
          f"top key {int(ref[1].max()):,} rows ({100 * ref[1].max() / args.rows:.1f}%); "
          f"generated in {time.perf_counter() - t0:.1f}s")

    payload: dict[str, Any] = {"command": command_line(), "workload": args.workload, "rows": args.rows,
                               "keys": args.keys, "z": args.z,
                               "files": args.files, "reps": args.reps, "materialize": args.materialize,
                               "load_avg_start": os.getloadavg()}
    with temp_dir("dpa-spark-e2e-") as tmp:
        data, warm = os.path.join(tmp, "data"), os.path.join(tmp, "warm")
        write_dataset(table, data, args.files)
        write_dataset(warm_table, warm, 2)
        size = sum(os.path.getsize(f) for f in glob.glob(os.path.join(data, "*.parquet")))
        print(f"parquet: {args.files} file(s), {size / 2**20:.1f} MiB in {data}")
        del table, warm_table
        gc.collect()

        sconf = SparkConfig(app_name="dpa-spark-e2e", num_executors=args.executors,
                            executor_cores=args.executor_cores, executor_memory=args.executor_memory,
                            executor_actor_cpus=args.executor_actor_cpus)
        startup: dict[str, Any] = {}
        t0 = time.perf_counter()
        with spark_session(sconf) as spark:
            startup["spark_on_ray_start_s"] = time.perf_counter() - t0
            spark.sparkContext.setLogLevel("ERROR")
            sc = spark.sparkContext
            print(f"Spark on Ray up in {startup['spark_on_ray_start_s']:.1f}s: {sconf.num_executors} executor(s) x "
                  f"{sconf.executor_cores} core(s) x {sconf.executor_memory}, defaultParallelism "
                  f"{sc.defaultParallelism}, shuffle partitions {spark.conf.get('spark.sql.shuffle.partitions')}, "
                  f"input partitions {spark.read.parquet(data).rdd.getNumPartitions()}; load avg {load_avg()}")
            try:
                rows = run_all(spark, args, configs, data, warm, tmp, ref, startup)
            finally:
                dpa.shutdown()
        print(f"Spark/Ray stopped; load avg at end: {load_avg()}")

    spark_row = next(r for r in rows if r["engine"] == "spark")
    for r in rows:
        r["x_spark"] = r["median_s"] / spark_row["median_s"]
    print_table(rows, ["engine", "config", "median_s", "min_s", "bridge_s", "core_s", "output_s", "x_spark",
                       "x_spark_rep_median", "x_spark_rep_min", "x_spark_rep_max", "load_avg", "status"],
                title=f"end to end, {args.rows:,} rows, workload={args.workload}, materialize={args.materialize} "
                      "(x_spark = time / Spark's time)")
    print_table([{"what": k, "seconds": v} for k, v in startup.items()], title="cold / start-up (not in the figures above)")
    dpa_rows = [r for r in rows if r["engine"] == "dpa" and r["status"] == "ok"]
    if dpa_rows:
        best = min(dpa_rows, key=lambda r: r["median_s"])
        default = next((r for r in dpa_rows if r["config"] == "default"), None)
        target = 2.0 if args.workload == "scan" else 1.2
        print(f"\nbest dpa: {best['config']} {fmt(best['median_s'])}s = {best['x_spark']:.2f}x Spark "
              f"({fmt(spark_row['median_s'])}s): target <= {target}x {'MET' if best['x_spark'] <= target else 'MISSED'}")
        if default is not None:
            print(f"default JobConfig(): {fmt(default['median_s'])}s = {default['x_spark']:.2f}x Spark")
    payload.update({"results": rows, "startup": startup, "load_avg_end": os.getloadavg(),
                    "configs": {n: f for n, f in configs}})
    write_json(args.out, payload)
    return payload


def run_all(spark: Any, args: Any, configs: list[tuple[str, dict[str, Any]]], data: str, warm: str, tmp: str,
            ref: Any, startup: dict[str, Any]) -> list[dict[str, Any]]:
    import dpa

    mode = args.materialize
    out_path = os.path.join(tmp, "out")
    wl = {"workload": args.workload, "modulus": args.modulus}
    # ---- warm-up (cold runs reported separately)
    for i in range(2):
        t, _ = run_spark_once(spark, warm, mode, out_path, **wl)
        startup[f"spark warm-up run {i + 1} (small file)"] = t
    cfgs = {name: dpa.JobConfig().with_options(**{k: v for k, v in fields.items() if k not in BRIDGE_OPTIONS})
            for name, fields in configs}
    bridge = {name: {k: v if isinstance(v, str) else bool(v) for k, v in fields.items() if k in BRIDGE_OPTIONS}
              for name, fields in configs}
    for name, cfg in cfgs.items():
        for i in range(2):
            times, _, _ = run_dpa_once(spark, warm, cfg, mode, out_path, bridge[name], **wl)
            startup[f"dpa {name} warm-up run {i + 1} (small file)"] = times["total_s"]
    # The first full-size runs of a session are slower (JVM JIT and code generation, memory
    # pools, Python workers reading larger blocks) for both engines: on the derived workload
    # the first 3-4 of each ran 20-60% slower than the rest. ``--full-warmups`` untimed
    # rounds of every engine and configuration absorb it.
    for i in range(args.full_warmups):
        t, _ = run_spark_once(spark, data, mode, out_path, **wl)
        startup[f"spark full-size warm-up run {i + 1}"] = t
        for name, cfg in cfgs.items():
            times, _, _ = run_dpa_once(spark, data, cfg, mode, out_path, bridge[name], **wl)
            startup[f"dpa {name} full-size warm-up run {i + 1}"] = times["total_s"]
    print("warm-up done: " + ", ".join(f"{k} {v:.1f}s" for k, v in startup.items()))

    samples: dict[str, list[dict[str, Any]]] = {"spark": [], **{n: [] for n in cfgs}}
    status: dict[str, str] = {"spark": "ok", **{n: "ok" for n in cfgs}}
    extra: dict[str, Any] = {}
    last = list(cfgs.values())[-1]
    current_shape = (last.num_mappers, last.num_reducers)
    for rep in range(args.reps):
        order = ["spark", *cfgs]
        for name in order:
            gc.collect()
            la = os.getloadavg()[0]
            if name == "spark":
                t, df = run_spark_once(spark, data, mode, out_path, **wl)
                times: dict[str, Any] = {"total_s": t}
            else:
                cfg = cfgs[name]
                shape = (cfg.resolved().num_mappers, cfg.resolved().num_reducers)
                if shape != current_shape:
                    # dpa keeps one warm actor pool per shape; a new shape restarts the actors,
                    # which an untimed run on the small file absorbs.
                    run_dpa_once(spark, warm, cfg, mode, out_path, bridge[name], **wl)
                    current_shape = shape
                times, df, result = run_dpa_once(spark, data, cfg, mode, out_path, bridge[name], **wl)
                st = result.stats
                extra[name] = {"rebalances": len(st.rebalances), "forwarded": sum(st.forwarded),
                               "processed": st.processed, "blocks_per_mapper": st.blocks_per_mapper,
                               "skew": round(st.skew, 3)}
            times["load_avg_1m"] = la
            got, nkeys, total = inspect_output(spark, df, mode, out_path)
            verdict = check(got, nkeys, total, ref)
            if verdict != "ok":
                status[name] = verdict
            samples[name].append(times)
            print(f"rep {rep + 1} {name:<16} {times['total_s']:7.2f}s  "
                  + "  ".join(f"{k}={v:.2f}" for k, v in times.items() if k not in ("total_s", "load_avg_1m"))
                  + f"  keys={nkeys:,} total={total:,} {verdict}  load {la:.1f}")
            sys.stdout.flush()
    rows = []
    spark_times = [r["total_s"] for r in samples["spark"]]
    for name, runs in samples.items():
        totals = [r["total_s"] for r in runs]
        row: dict[str, Any] = {"engine": "spark" if name == "spark" else "dpa",
                               "config": "groupBy.count" if name == "spark" else name,
                               "median_s": median(totals), "min_s": min(totals), "times_s": totals,
                               "load_avg": median(r["load_avg_1m"] for r in runs), "status": status[name]}
        if name != "spark":
            for k in ("bridge_s", "core_s", "output_s"):
                row[k] = median(r[k] for r in runs)
            # Same-repetition ratios: each dpa run against the Spark run just before it.
            ratios = [r["total_s"] / t for r, t in zip(runs, spark_times)]
            row.update(x_spark_reps=[round(x, 3) for x in ratios], x_spark_rep_median=median(ratios),
                       x_spark_rep_min=min(ratios), x_spark_rep_max=max(ratios))
            row["job_config"] = {n: f for n, f in configs}[name]
            row.update(extra.get(name, {}))
        rows.append(row)
    return rows


if __name__ == "__main__":
    main()
