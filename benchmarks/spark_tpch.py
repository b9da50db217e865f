"""TPC-H Q1 on Spark on Ray: ``spark_bridge.run_with_result`` vs Spark's own ``groupBy().agg``.

``python -m benchmarks.spark_e2e --workload tpch-q1`` runs this (or ``python -m
benchmarks.spark_tpch``). The ``lineitem`` table is generated at scale factor ``--scale``
(default 1: 6,001,215 rows) with ``tpchgen-cli`` (a test-only dependency: ``pip install
tpchgen-cli``; it writes one parquet file), kept in ``--data-dir`` when given. Both engines
get the same DataFrame, Q1's general Spark plan (a filter and derived columns, not a plain
scan)::

    spark.read.parquet(lineitem)
      .where("l_shipdate <= date '1998-12-01' - interval '90' day")
      .select(flag, status, qty, price, discount,
              price * (1 - discount) AS disc_price, price * (1 - discount) * (1 + tax) AS charge)

and compute Q1's eight aggregates per ``(l_returnflag, l_linestatus)``: ``sum`` of
quantity, price, disc_price and charge, ``avg`` of quantity, price and discount, and
``count(*)``. Spark: ``groupBy(...).agg(...)``; dpa: the same as dpa reducers in one pass
through ``run_with_result`` with its defaults (``JobConfig()``, ``precombine=None``), or a
``--config``. Each timing starts at ``spark.read.parquet`` and ends when ``collect()`` of the
result returns. The results are checked equal, values and Spark types (decimals as Spark
types them: ``sum`` of ``decimal(p, s)`` a ``decimal(min(38, p + 10), s)``, ``avg`` a
``decimal(p + 4, s + 4)``).

Also timed, as the **floor** (what the bridge would take if moving the partial states to
Ray, the dpa job and the way back cost nothing): Spark computing the partial states the
bridge hands to dpa (:func:`spark_bridge.partials.native_partials` of the same frame,
collected).

Warm-up: ``--full-warmups`` untimed rounds of every engine; then ``--reps`` timed rounds,
alternating (Spark, floor, each dpa configuration); medians and per-round ratios to Spark.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import shutil
import subprocess
import sys
import time
from typing import Any

from benchmarks.common import fmt, median, print_table, temp_dir, write_json

KEYS = ["l_returnflag", "l_linestatus"]
#: Q1's aggregates: (output name, Spark function, dpa reducer class name, input column).
AGGREGATES = [
    ("sum_qty", "sum", "Sum", "l_quantity"),
    ("sum_base_price", "sum", "Sum", "l_extendedprice"),
    ("sum_disc_price", "sum", "Sum", "disc_price"),
    ("sum_charge", "sum", "Sum", "charge"),
    ("avg_qty", "avg", "Mean", "l_quantity"),
    ("avg_price", "avg", "Mean", "l_extendedprice"),
    ("avg_disc", "avg", "Mean", "l_discount"),
    ("count_order", "count", "Count", None),
]


def command_line() -> str:
    return " ".join([sys.executable, "-m", "benchmarks.spark_e2e", *sys.argv[1:]])


def tpchgen() -> str:
    """The ``tpchgen-cli`` executable (next to this Python, or on PATH)."""
    here = os.path.join(os.path.dirname(sys.executable), "tpchgen-cli")
    found = here if os.access(here, os.X_OK) else shutil.which("tpchgen-cli")
    if found is None:
        raise SystemExit("tpchgen-cli not found: pip install tpchgen-cli (a test-only dependency)")
    return found


def lineitem(scale: float, data_dir: str) -> str:
    """Path of ``lineitem.parquet`` at ``scale`` under ``data_dir``, generated if missing."""
    out = os.path.join(data_dir, f"sf{scale:g}")
    path = os.path.join(out, "lineitem.parquet")
    if not os.path.exists(path):
        t0 = time.perf_counter()
        subprocess.run([tpchgen(), "parquet", "-s", f"{scale:g}", "--tables=lineitem", f"--output-dir={out}"],
                       check=True)
        print(f"tpchgen-cli: lineitem at SF{scale:g} in {time.perf_counter() - t0:.1f}s")
    return path


def q1_frame(spark: Any, path: str) -> Any:
    """Q1's input: the shipdate filter and the derived columns (module docstring)."""
    from pyspark.sql import functions as F

    price, disc, tax = F.col("l_extendedprice"), F.col("l_discount"), F.col("l_tax")
    return (spark.read.parquet(path)
            .where(F.expr("l_shipdate <= date '1998-12-01' - interval '90' day"))
            .select(*KEYS, "l_quantity", "l_extendedprice", "l_discount",
                    (price * (1 - disc)).alias("disc_price"), (price * (1 - disc) * (1 + tax)).alias("charge")))


def spark_aggregates() -> list[Any]:
    from pyspark.sql import functions as F

    made = {"sum": F.sum, "avg": F.avg}
    return [(F.count(F.lit(1)) if fn == "count" else made[fn](column)).alias(name)
            for name, fn, _, column in AGGREGATES]


def dpa_reducers() -> list[Any]:
    import dpa

    return [getattr(dpa, kind)(name=name) if column is None else getattr(dpa, kind)(column, name=name)
            for name, _, kind, column in AGGREGATES]


def run_spark_once(spark: Any, path: str) -> tuple[float, Any, list[Any]]:
    t0 = time.perf_counter()
    out = q1_frame(spark, path).groupBy(*KEYS).agg(*spark_aggregates())
    rows = out.collect()
    return time.perf_counter() - t0, out.schema, rows


def run_floor_once(spark: Any, path: str) -> float:
    """Spark computing the partial states the bridge hands to dpa (no transfer, no dpa)."""
    from dpa.aggregates.composite import combine
    from spark_bridge.partials import native_partials

    t0 = time.perf_counter()
    df = q1_frame(spark, path)
    native = native_partials(df, KEYS, combine(dpa_reducers()))
    if native is None:
        raise SystemExit("Q1's aggregates have no Spark SQL precombine (spark_bridge.partials)")
    native[0].collect()
    return time.perf_counter() - t0


def run_dpa_once(spark: Any, path: str, cfg: Any, bridge: dict[str, Any]) -> tuple[dict[str, float], Any, list[Any], Any]:
    from spark_bridge import run_with_result

    t0 = time.perf_counter()
    out, result = run_with_result(q1_frame(spark, path), key=KEYS, reducer=dpa_reducers(), config=cfg, **bridge)
    t1 = time.perf_counter()
    rows = out.collect()
    t2 = time.perf_counter()
    times = {"total_s": t2 - t0, "bridge_s": t1 - t0, "core_s": result.stats.wall_time_s, "output_s": t2 - t1}
    return times, out.schema, rows, result


def check(schema: Any, rows: list[Any], ref_schema: Any, ref_rows: list[Any]) -> str:
    """'ok' or what differs from Spark's own result (types and every value, exactly)."""
    if [(f.name, f.dataType) for f in schema.fields] != [(f.name, f.dataType) for f in ref_schema.fields]:
        return f"MISMATCH: schema {schema.simpleString()} vs Spark's {ref_schema.simpleString()}"
    got, want = sorted(tuple(r) for r in rows), sorted(tuple(r) for r in ref_rows)
    if got != want:
        return f"MISMATCH: rows {got} vs Spark's {want}"
    return "ok"


def run_q1(args: Any, configs: list[tuple[str, dict[str, Any]]], bridge_options: tuple[str, ...]) -> dict[str, Any]:
    """The Q1 benchmark (see the module docstring); returns the JSON payload."""
    import dpa
    from spark_bridge import SparkConfig, spark_session

    print(f"command: {command_line()}")
    with temp_dir("dpa-spark-tpch-") as tmp:
        path = lineitem(args.scale, args.data_dir or tmp)
        sconf = SparkConfig(app_name="dpa-spark-tpch", num_executors=args.executors,
                            executor_cores=args.executor_cores, executor_memory=args.executor_memory,
                            executor_actor_cpus=args.executor_actor_cpus)
        cfgs = {n: dpa.JobConfig().with_options(**{k: v for k, v in f.items() if k not in bridge_options})
                for n, f in configs}
        bridge = {n: {k: v for k, v in f.items() if k in bridge_options} for n, f in configs}
        with spark_session(sconf) as spark:
            spark.sparkContext.setLogLevel("ERROR")
            print(f"Spark on Ray: {sconf.num_executors} executor(s) x {sconf.executor_cores} core(s); "
                  f"input partitions {spark.read.parquet(path).rdd.getNumPartitions()}")
            try:
                rows, extra = _rounds(spark, path, args, cfgs, bridge)
            finally:
                dpa.shutdown()
    spark_row = rows[0]
    for r in rows:
        r["x_spark"] = r["median_s"] / spark_row["median_s"]
    print_table(rows, ["engine", "config", "median_s", "min_s", "bridge_s", "core_s", "output_s", "x_spark",
                       "x_spark_rep_median", "x_spark_rep_min", "x_spark_rep_max", "status"],
                title=f"TPC-H Q1, lineitem SF{args.scale:g}, alternating, warm (x_spark = time / Spark's time)")
    default = next((r for r in rows if r["config"] == "default"), None)
    if default is not None:
        print(f"\ndefault: {fmt(default['median_s'])}s = {default['x_spark']:.2f}x Spark "
              f"({fmt(spark_row['median_s'])}s): target <= 1.0x {'MET' if default['x_spark'] <= 1.0 else 'MISSED'}; "
              f"floor {rows[1]['x_spark']:.2f}x")
    payload = {"command": command_line(), "workload": "tpch-q1", "scale": args.scale, "reps": args.reps,
               "results": rows, "dpa_stats": extra, "configs": dict(configs)}
    write_json(args.out, payload)
    return payload


def _rounds(spark: Any, path: str, args: Any, cfgs: dict[str, Any],
            bridge: dict[str, dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Warm-up rounds, then the timed, alternating ones; one row per engine."""
    _, ref_schema, ref_rows = run_spark_once(spark, path)
    for i in range(args.full_warmups):
        t = run_spark_once(spark, path)[0]
        f = run_floor_once(spark, path)
        dpa_t = [run_dpa_once(spark, path, cfg, bridge[n])[0]["total_s"] for n, cfg in cfgs.items()]
        print(f"warm-up {i + 1}: spark {t:.2f}s, floor {f:.2f}s, dpa " + ", ".join(f"{x:.2f}s" for x in dpa_t))
    samples: dict[str, list[dict[str, float]]] = {"spark": [], "floor": [], **{n: [] for n in cfgs}}
    status = {n: "ok" for n in samples}
    extra: dict[str, Any] = {}
    for rep in range(args.reps):
        for name in samples:
            gc.collect()
            if name == "spark":
                t, schema, rows = run_spark_once(spark, path)
                times = {"total_s": t}
                verdict = check(schema, rows, ref_schema, ref_rows)
            elif name == "floor":
                times, verdict = {"total_s": run_floor_once(spark, path)}, "ok"
            else:
                times, schema, rows, result = run_dpa_once(spark, path, cfgs[name], bridge[name])
                verdict = check(schema, rows, ref_schema, ref_rows)
                extra[name] = {k: v for k, v in result.stats.extra.items() if k.startswith("spark_")}
            if verdict != "ok":
                status[name] = verdict
            samples[name].append(times)
            print(f"rep {rep + 1} {name:<10} {times['total_s']:6.2f}s  "
                  + "  ".join(f"{k}={v:.2f}" for k, v in times.items() if k != "total_s") + f"  {verdict}")
            sys.stdout.flush()
    spark_times = [r["total_s"] for r in samples["spark"]]
    out = []
    for name, runs in samples.items():
        totals = [r["total_s"] for r in runs]
        ratios = [t / s for t, s in zip(totals, spark_times)]
        row: dict[str, Any] = {"engine": name if name in ("spark", "floor") else "dpa",
                               "config": {"spark": "groupBy.agg", "floor": "partials only"}.get(name, name),
                               "median_s": median(totals), "min_s": min(totals), "times_s": totals,
                               "x_spark_reps": [round(x, 3) for x in ratios], "x_spark_rep_median": median(ratios),
                               "x_spark_rep_min": min(ratios), "x_spark_rep_max": max(ratios),
                               "status": status[name]}
        for k in ("bridge_s", "core_s", "output_s"):
            if k in runs[0]:
                row[k] = median(r[k] for r in runs)
        out.append(row)
    return out, extra


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The Q1 options (also offered by ``benchmarks.spark_e2e``)."""
    p.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor of --workload tpch-q1 (default 1)")
    p.add_argument("--data-dir", default=None,
                   help="keep the generated lineitem here and reuse it (default: a temporary directory)")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from benchmarks import spark_e2e

    return spark_e2e.main(["--workload", "tpch-q1", *(argv or sys.argv[1:])])


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    main()
