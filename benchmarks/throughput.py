"""Throughput of dpa on Ray vs single-process pyarrow vs Spark ``local[N]``.

An in-memory Zipf table (default 10M records, z=1.1, K=100k keys) is counted per key by

* ``dpa.run(..., reducer=dpa.Count())`` in ``JobConfig``'s default shape (or ``--mappers`` x
  ``--reducers``), for the policies
  "default" (``JobConfig()``'s, ``hybrid``), "no-lb" (doubling ring, ``max_rounds=0``), "halving" and "doubling" (``max_rounds=1``),
  and "no-lb,no-combine" / "doubling,no-combine" (``map_side_combine=False``);
* ``table.group_by("key").aggregate([([], "count_all")])`` in this process (pyarrow), with
  Arrow's thread pool (every core) and with ``use_threads=False`` (one core: the
  single-core floor dpa is compared with);
* Spark: ``df.groupBy("key").count().collect()`` on a cached DataFrame read from a
  parquet copy of the same table (plain pyspark ``local[N]``, not RayDP).

dpa times include fetching the result to the driver (``Result.to_arrow()``), as Spark's
``collect()`` does. Ray start-up, the first job (which starts the pooled actors) and one
warm-up job are reported separately and not counted. Every engine's result is checked
against pyarrow's (same keys, same counts).

Run (small)::

    python -m benchmarks.throughput --rows 1M --reps 2

Default (10M records, 3 repetitions per configuration)::

    python -m benchmarks.throughput --out throughput.json
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.common import (
    base_parser,
    config_overrides,
    count_keys,
    init_ray,
    median,
    parse_shaped,
    print_table,
    start_spark,
    stop_ray,
    temp_dir,
    timed,
    write_json,
)

POLICIES = {
    "default": {},  # JobConfig() as users run it (policy "hybrid")
    "no-lb": {"policy": "doubling", "max_rounds": 0},
    "halving": {"policy": "halving", "max_rounds": 1},
    "doubling": {"policy": "doubling", "max_rounds": 1},
    # the same without map-side combining: every record is hashed, shipped and reduced
    "no-lb,no-combine": {"policy": "doubling", "max_rounds": 0, "map_side_combine": False},
    "doubling,no-combine": {"policy": "doubling", "max_rounds": 1, "map_side_combine": False},
}


def sorted_counts(keys: Any, counts: Any) -> tuple[np.ndarray, np.ndarray]:
    k = np.asarray(keys)
    c = np.asarray(counts, dtype=np.int64)
    order = np.argsort(k, kind="stable")
    return k[order], c[order]


def check(name: str, got: tuple[np.ndarray, np.ndarray], ref: tuple[np.ndarray, np.ndarray], rows: int) -> str:
    """'ok' or what differs (keys, total, per-key counts)."""
    if len(got[0]) != len(ref[0]):
        return f"MISMATCH: {len(got[0])} keys vs {len(ref[0])}"
    if int(got[1].sum()) != rows:
        return f"MISMATCH: total {int(got[1].sum())} != {rows}"
    if not (np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1])):
        return "MISMATCH: per-key counts differ"
    return "ok"


def repeat_timed(fn: Any, reps: int) -> tuple[list[float], list[float], Any]:
    """Measures ``fn()`` ``reps`` times: ``(wall seconds, CPU seconds, the last result)``."""
    times, cpus = [], []
    out = None
    for _ in range(reps):
        out, wall, cpu_s = timed(fn)
        times.append(wall)
        cpus.append(cpu_s)
    return times, cpus, out


def run_pyarrow(table: pa.Table, reps: int, threads: bool = True) -> tuple[list[float], list[float], pa.Table]:
    return repeat_timed(lambda: table.group_by("key", use_threads=threads).aggregate([([], "count_all")]), reps)


def run_dpa(table: pa.Table, args: Any, ref: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    import dpa

    base = {"num_mappers": args.mappers, "num_reducers": args.reducers, **config_overrides(args)}
    startup: dict[str, Any] = {"ray_init_s": init_ray()}
    rows_out = []
    first = True
    for name in args.policies:
        cfg = dpa.JobConfig().with_options(**base, **POLICIES[name])
        t0 = time.perf_counter()
        count_keys(table, cfg)
        elapsed = time.perf_counter() - t0
        if first:  # the first job of the driver starts the pooled actors
            startup["cold_first_job_s"] = elapsed
            t0 = time.perf_counter()
            count_keys(table, cfg)
            startup["warm_job_s"] = time.perf_counter() - t0
            first = False
        times, cpus, stats, status = [], [], None, "ok"
        for _ in range(args.reps):
            gc.collect()
            (res, out), wall, cpu_s = timed(lambda cfg=cfg: count_keys(table, cfg))
            times.append(wall)
            cpus.append(cpu_s)
            stats = res.stats
            verdict = check(name, sorted_counts(out["key"], out["count"]), ref, table.num_rows)
            if verdict != "ok":
                status = verdict
        rows_out.append({
            "engine": "dpa", "config": name, "median_s": median(times), "min_s": min(times),
            "times_s": times, "cpu_s": median(cpus), "status": status, "rebalances": len(stats.rebalances),
            "forwarded": sum(stats.forwarded), "skew": round(stats.skew, 3),
        })
    stop_ray()
    return rows_out, startup


def run_spark(table: pa.Table, args: Any) -> tuple[list[float], list[float], Any, dict[str, Any]]:
    import pyarrow.parquet as pq

    info: dict[str, Any] = {}
    with temp_dir() as tmp:
        path = os.path.join(tmp, "data.parquet")
        pq.write_table(table, path)
        t0 = time.perf_counter()
        spark = start_spark(args.spark_parallelism)
        info["spark_start_s"] = time.perf_counter() - t0
        spark.sparkContext.setLogLevel("ERROR")
        try:
            df = spark.read.parquet(path).cache()
            t0 = time.perf_counter()
            assert df.count() == table.num_rows
            info["spark_cache_s"] = time.perf_counter() - t0
            df.groupBy("key").count().collect()  # warm-up (JIT, codegen)
            times, cpus, rows = repeat_timed(lambda: df.groupBy("key").count().collect(), args.reps)
            result = sorted_counts([r[0] for r in rows], [r[1] for r in rows])
            df.unpersist()
        finally:
            spark.stop()
    return times, cpus, result, info


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = base_parser(__doc__.split("\n")[0], 10_000_000)
    p.add_argument("--keys", type=int, default=100_000, help="distinct keys K")
    p.add_argument("--z", type=float, default=1.1, help="Zipf exponent")
    p.add_argument("--reps", type=int, default=3, help="timed repetitions per configuration")
    p.add_argument("--policies", nargs="+", default=list(POLICIES), choices=list(POLICIES))
    p.add_argument("--no-spark", action="store_true")
    p.add_argument("--spark-parallelism", type=int, default=2, help="Spark local[N]")
    args = parse_shaped(p, argv)

    from workloads.generators import zipf

    t0 = time.perf_counter()
    table = zipf(args.z, args.keys, args.rows, seed=args.seed)
    gen_s = time.perf_counter() - t0
    print(f"{args.rows:,} Zipf(z={args.z}, K={args.keys:,}) records generated in {gen_s:.1f}s; "
          f"{args.mappers} mappers x {args.reducers} reducers; {args.reps} reps; load avg {os.getloadavg()[0]:.1f}")

    pa_times, pa_cpus, pa_out = run_pyarrow(table, args.reps)
    ref = sorted_counts(pa_out["key"], pa_out["count_all"])
    results = [{"engine": "pyarrow", "config": "group_by (1 process)", "median_s": median(pa_times),
                "min_s": min(pa_times), "times_s": pa_times, "cpu_s": median(pa_cpus),
                "status": check("pyarrow", ref, ref, args.rows)}]
    one_times, one_cpus, one_out = run_pyarrow(table, args.reps, threads=False)
    results.append({"engine": "pyarrow", "config": "group_by (1 thread)", "median_s": median(one_times),
                    "min_s": min(one_times), "times_s": one_times, "cpu_s": median(one_cpus),
                    "status": check("pyarrow", sorted_counts(one_out["key"], one_out["count_all"]), ref, args.rows)})

    dpa_rows, startup = run_dpa(table, args, ref)
    results += dpa_rows

    spark_info: dict[str, Any] = {}
    if not args.no_spark:
        sp_times, sp_cpus, sp_res, spark_info = run_spark(table, args)
        results.append({"engine": "spark", "config": f"local[{args.spark_parallelism}]", "median_s": median(sp_times),
                        "min_s": min(sp_times), "times_s": sp_times, "cpu_s": median(sp_cpus),
                        "status": check("spark", sp_res, ref, args.rows)})

    spark_s = next((r["median_s"] for r in results if r["engine"] == "spark"), None)
    pa_s, one_s = results[0]["median_s"], results[1]["median_s"]
    for r in results:
        r["Mrec_per_s"] = args.rows / r["median_s"] / 1e6
        r["x_spark"] = None if spark_s is None else spark_s / r["median_s"]
        r["x_pyarrow"] = pa_s / r["median_s"]
        r["x_pyarrow_1thread"] = one_s / r["median_s"]
    print_table(results, ["engine", "config", "median_s", "min_s", "Mrec_per_s", "x_spark", "x_pyarrow",
                          "x_pyarrow_1thread", "cpu_s", "status"],
                title="throughput (x_spark / x_pyarrow / x_pyarrow_1thread = speed relative to Spark / pyarrow "
                      "on every core / pyarrow on one thread, >1 = faster; cpu_s = CPU seconds of all processes "
                      "of the run)")
    startup.update(spark_info)
    print_table([{k: round(v, 2) for k, v in startup.items()}], title="start-up (not in the figures above)")
    payload = {"rows": args.rows, "keys": args.keys, "z": args.z, "reps": args.reps,
               "mappers": args.mappers, "reducers": args.reducers, "config_overrides": config_overrides(args),
               "generate_s": gen_s, "results": results, "startup": startup}
    write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
