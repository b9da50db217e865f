"""The Spark bridge's two paths on one DataFrame: RayDP's object store against Parquet staging.

Input: ``--rows`` rows of Zipf(1.1) int64 keys over ``--keys`` and an int64 value, written by
pyarrow to a parquet file and read by Spark, then cached in Spark (so every run starts from
Spark's memory, not from the file: no pushdown). Jobs: ``Count`` and ``Sum("v")`` through
``spark_bridge.run_with_result`` with ``path="raydp"`` (when RayDP is installed; the session
is then RayDP's) and ``path="staged"``, and Spark's own ``groupBy().agg`` as the reference;
each answer is checked equal to Spark's and written out with ``count()`` of the result
(``.write.format("noop")``). Median of ``--reps`` runs after one untimed run, with spread.

Run: ``python -m benchmarks.spark_paths [--rows 2M] [--reps 3] [--out FILE]`` (in the PySpark 4
environment, only the staged path and Spark run).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import (
    base_parser,
    init_ray,
    median,
    print_table,
    stop_ray,
    temp_dir,
    write_json,
)


def _session(raydp: bool) -> Any:
    if raydp:
        from spark_bridge.session import SparkConfig, get_or_create_spark

        return get_or_create_spark(SparkConfig(app_name="dpa-spark-paths", num_executors=1, executor_cores=2,
                                               executor_memory="2g"))
    from pyspark.sql import SparkSession

    from spark_bridge.java import JAVA17_OPTIONS

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return (SparkSession.builder.master("local[2]").appName("dpa-spark-paths")
            .config("spark.driver.extraJavaOptions", JAVA17_OPTIONS).config("spark.driver.memory", "2g")
            .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false").getOrCreate())


def _rows(df: Any) -> list[tuple]:
    return sorted((r[0], r[1]) for r in df.collect())


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__.splitlines()[0], rows=2_000_000)
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args(argv)
    import dpa
    from spark_bridge import run_with_result
    from workloads.generators import zipf

    has_raydp = importlib.util.find_spec("raydp") is not None
    init_ray()
    spark = _session(has_raydp)
    spark.sparkContext.setLogLevel("ERROR")
    from pyspark.sql import functions as F

    rows = []
    try:
        with temp_dir() as tmp:
            table = zipf(1.1, args.keys, args.rows, seed=args.seed)
            table = table.append_column("v", pa.array(np.random.default_rng(args.seed).integers(0, 1000, args.rows)))
            pq.write_table(table, os.path.join(tmp, "in.parquet"))
            df = spark.read.parquet(os.path.join(tmp, "in.parquet")).cache()
            df.count()
            for name, reducer, agg in (("count", dpa.Count(), F.count("*").alias("count")),
                                       ("sum", dpa.Sum("v"), F.sum("v").alias("sum"))):
                want = _rows(df.groupBy("key").agg(agg))
                engines: list[tuple[str, Any]] = [("spark", lambda a=agg: (df.groupBy("key").agg(a), None))]
                for path in (("raydp", "staged") if has_raydp else ("staged",)):
                    engines.append((path, lambda r=reducer, pa_=path: run_with_result(df, "key", r, path=pa_,
                                                                                        pushdown=False)))
                for engine, job in engines:
                    times = []
                    for rep in range(args.reps + 1):
                        t0 = time.perf_counter()
                        out, result = job()
                        out.write.format("noop").mode("overwrite").save()
                        if rep:
                            times.append(time.perf_counter() - t0)
                        if result is not None:
                            assert result.stats.extra["spark_path"] == engine
                    assert _rows(out) == want, f"{engine} {name}: answer differs from Spark's"
                    rows.append({"job": name, "engine": engine, "median_s": median(times),
                                 "spread_s": max(times) - min(times), "load": os.getloadavg()[0]})
                    print(f"{name:<6} {engine:<7} {median(times):7.2f}s (spread {max(times) - min(times):.2f})"
                          f"  answers equal  load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        spark.stop()
        stop_ray()
    import pyspark

    print_table(rows, ["job", "engine", "median_s", "spread_s", "load"],
                title=f"Spark bridge paths, PySpark {pyspark.__version__}, {args.rows:,} rows; median of {args.reps}")
    write_json(args.out, {"command": "python -m benchmarks.spark_paths " + " ".join(sys.argv[1:]),
                          "pyspark": pyspark.__version__, "rows": args.rows, "results": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
