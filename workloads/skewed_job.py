"""The main job: skewed per-key work read through Spark on Ray, balanced by dpa.

Run it with ``./run.sh main`` (or ``python -m workloads.skewed_job``). It generates a table of
events (16,000 by default) whose keys follow Zipf(1.5) over 1,000 users (the hottest user holds about 40% of the
events; no download), writes it as parquet and reads it through Spark on Ray. Each event costs
``--cost-ms`` (0.5 ms) of work at the reducer (``dpa.WithCost``: a model call, a lookup, a
parser), and the job sums ``amount`` per user. The same job runs three ways, each once on a
small warm-up input first so that no timed run pays a start-up:

* **dpa**: ``spark_bridge.run_with_result(df, ..., config=JobConfig())``, dpa's defaults;
* **dpa, no balancing**: the same with ``policy="hash"`` (``murmur3(key) % R``, what a hash
  shuffle does);
* **Spark**: ``df.groupBy(key).applyInPandas(...)`` with the same per-event cost, one shuffle
  partition per task slot without coalescing (Spark's best setting for this job).

It prints a table (time, x ideal, skew S, rebalances), checks that the three answers agree,
writes dpa's result as parquet and a PNG of per-worker load over time under ``--out``
(default ``out/skewed_job/``). Give ``--input`` (parquet or CSV) with ``--key`` and
``--value`` to run the same comparison on your own data.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import dpa
from dpa.metrics import skew

logger = logging.getLogger(__name__)

#: Rows of the warm-up input (every engine runs it once, untimed).
WARMUP_ROWS = 400


@dataclass
class Run:
    """One timed run: what the table and the plot show."""

    label: str
    seconds: float
    loads: list[int]
    rebalances: int | None
    answer: dict[Any, Any]
    #: Per worker, (time_s, backlog) points: records queued at a dpa reducer, or records
    #: left in a Spark task.
    series: list[list[tuple[float, int]]] = field(default_factory=list)
    backlog_label: str = "records queued"

    @property
    def skew(self) -> float:
        return skew(self.loads)

    def ideal_s(self, work_s: float) -> float:
        """The time ``work_s`` of work takes spread evenly over this run's workers."""
        return work_s / max(1, len(self.loads))


def make_events(rows: int, keys: int, z: float, seed: int) -> pa.Table:
    """``rows`` events: ``user`` Zipf(z) over ``keys`` users, ``amount`` an int in [1, 100]."""
    from workloads.generators import zipf

    users = zipf(z, keys, rows, seed=seed)["key"].to_numpy()
    amounts = np.random.default_rng(seed + 1).integers(1, 101, rows)
    return pa.table({"user": users.astype(np.int64), "amount": amounts.astype(np.int64)})


def read_table(spark: Any, path: str) -> Any:
    """A Spark DataFrame of parquet files (a file or a directory) or a CSV file with a header."""
    if path.lower().endswith(".csv"):
        return spark.read.option("header", True).option("inferSchema", True).csv(path)
    return spark.read.parquet(path)


def run_dpa(df: Any, label: str, key: str, value: str, cost_s: float, config: dpa.JobConfig) -> Run:
    """Sums ``value`` per ``key`` with dpa through the Spark bridge; times the whole call."""
    from spark_bridge import run_with_result

    reducer = dpa.WithCost(dpa.Sum(value), cost_s, mode="sleep")
    started = time.perf_counter()
    out_df, res = run_with_result(df, key=key, reducer=reducer, config=config)
    seconds = time.perf_counter() - started
    table = res.to_arrow()
    answer = dict(zip(table.column(key).to_pylist(), table.column(table.num_columns - 1).to_pylist()))
    times = [t for t, _, _ in res.stats.timeline]
    queues = [list(q) for _, q, _ in res.stats.timeline]
    width = len(res.stats.processed)
    series = [[(0.0, 0)] + [(t, q[i] if i < len(q) else 0) for t, q in zip(times, queues)] for i in range(width)]
    run = Run(label, seconds, list(res.stats.processed), len(res.stats.rebalances), answer, series)
    run.result_df = out_df  # type: ignore[attr-defined]
    return run


def run_spark(spark: Any, df: Any, label: str, key: str, value: str, cost_s: float, slots: int) -> Run:
    """The same job in Spark: ``groupBy(key).applyInPandas`` paying ``cost_s`` per row.

    Each group reports the task partition it ran in and when it ran, which gives Spark's
    per-task load and its backlog over time.
    """
    import pandas as pd

    def per_group(pdf: pd.DataFrame) -> pd.DataFrame:
        from pyspark import TaskContext

        start = time.time()
        time.sleep(len(pdf) * cost_s)
        return pd.DataFrame({key: [pdf[key].iloc[0]], "total": [int(pdf[value].sum())], "rows": [len(pdf)],
                             "part": [TaskContext.get().partitionId()], "start": [start], "end": [time.time()]})

    key_type = df.schema[key].dataType.simpleString()
    schema = f"`{key}` {key_type}, total long, rows long, part int, start double, end double"
    conf = {"spark.sql.shuffle.partitions": str(slots), "spark.sql.adaptive.coalescePartitions.enabled": "false"}
    saved = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        t0 = time.time()
        started = time.perf_counter()
        rows = df.groupBy(key).applyInPandas(per_group, schema).collect()
        seconds = time.perf_counter() - started
    finally:
        for k, v in saved.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)
    loads = [0] * slots
    done: list[list[tuple[float, int]]] = [[] for _ in range(slots)]
    for r in rows:
        loads[r["part"]] += r["rows"]
        done[r["part"]].append((r["end"] - t0, r["rows"]))
    series = []
    for part, finished in enumerate(done):
        left, points = loads[part], [(0.0, loads[part])]
        for t, n in sorted(finished):
            left -= n
            points.append((t, left))
        series.append(points)
    answer = {r[key]: r["total"] for r in rows}
    return Run(label, seconds, loads, None, answer, series, backlog_label="records left in the task")


def plot_runs(runs: list[Run], work_s: float, path: Path) -> Path:
    """One panel per run: each worker's backlog over time, the ideal finish marked."""
    from dpa.tools.report.figures import new_figure, palette, save_figure

    fig, axes = new_figure(width=4.2 * len(runs), height=3.8, ncols=len(runs))
    end = max(r.seconds for r in runs) * 1.05
    top = max((n for r in runs for s in r.series for _, n in s), default=1) * 1.1
    for ax, run in zip(axes, runs):
        colors = palette(max(1, len(run.series)))
        for i, points in enumerate(run.series):
            if points:
                xs, ys = zip(*points)
                ax.step(xs, ys, where="post", color=colors[i], linewidth=1.8,
                        label=f"worker {i}: {run.loads[i]:,} records")
        ideal_s = run.ideal_s(work_s)
        ax.axvline(ideal_s, color="#444444", linestyle="--", linewidth=1)
        ax.text(ideal_s, top * 0.97, " ideal", va="top", fontsize=8, color="#444444")
        ax.axvline(run.seconds, color="#cc0000", linewidth=1)
        ax.set_xlim(0, end)
        ax.set_ylim(0, top)
        ax.set_title(f"{run.label}\n{run.seconds:.1f} s = {run.seconds / ideal_s:.2f}x ideal, S = {run.skew:.2f}",
                     fontsize=10)
        ax.set_xlabel("seconds since the job started")
        ax.set_ylabel(run.backlog_label)
        ax.legend(fontsize=8, loc="upper right")
        ax.grid(True, alpha=0.3)
    fig.suptitle("per-worker backlog over time (dashed: ideal finish; red: the job's end)", fontsize=11)
    return save_figure(fig, path)


def median_run(runs: list[Run]) -> Run:
    """The run of median time (the lower median), with every run's time kept for the spread."""
    ranked = sorted(runs, key=lambda r: r.seconds)
    chosen = ranked[(len(ranked) - 1) // 2]
    chosen.times = [r.seconds for r in runs]  # type: ignore[attr-defined]
    return chosen


def write_figures(path: str, every: list[list[Run]], work_s: float, rows: int, args: argparse.Namespace) -> None:
    """The figures as JSON in the layout of the benchmarks' results files."""
    import json
    import platform
    import shlex
    import statistics

    import ray

    rows_out = []
    for i in range(len(every[0])):
        runs = [rep[i] for rep in every]
        times = [r.seconds for r in runs]
        med = statistics.median(times)
        rows_out.append({"engine": runs[0].label, "median_s": med, "min_s": min(times), "max_s": max(times),
                         "times_s": times, "x_ideal": med / runs[0].ideal_s(work_s), "workers": len(runs[0].loads),
                         "skew_S": statistics.median(r.skew for r in runs),
                         "rebalances": None if runs[0].rebalances is None else statistics.median(
                             r.rebalances for r in runs), "runs": len(runs)})
    payload = {
        "env": {"python": platform.python_version(), "ray": ray.__version__, "pyarrow": pa.__version__,
                "cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0],
                "time": time.strftime("%Y-%m-%dT%H:%M:%S")},
        "command": shlex.join(["python", "-m", "workloads.skewed_job", *sys.argv[1:]]),
        "rows": rows, "cost_ms": args.cost_ms, "work_s": work_s, "results": rows_out,
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(payload, indent=2))


def answers_agree(runs: list[Run]) -> bool:
    """Whether every run found the same keys with the same sums."""
    first = runs[0].answer
    return all(r.answer == first for r in runs[1:])


def print_table(runs: list[Run], work_s: float) -> None:
    print(f"\n{'engine':<28} {'time':>7} {'x ideal':>8} {'skew S':>7} {'rebalances':>10}   records per worker")
    for r in runs:
        rebalances = "-" if r.rebalances is None else str(r.rebalances)
        loads = " / ".join(f"{n:,}" for n in r.loads)
        print(f"{r.label:<28} {r.seconds:6.2f}s {r.seconds / r.ideal_s(work_s):7.2f}x {r.skew:7.3f} {rebalances:>10}   {loads}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m workloads.skewed_job", description=__doc__.splitlines()[0])
    p.add_argument("--input", help="parquet file/directory or CSV with a header (default: generated events)")
    p.add_argument("--key", default="user", help="key column (default: user)")
    p.add_argument("--value", default="amount", help="integer column summed per key (default: amount)")
    p.add_argument("--rows", type=int, default=16_000, help="generated events (default 16,000)")
    p.add_argument("--keys", type=int, default=1_000, help="generated distinct users (default 1,000)")
    p.add_argument("--zipf", type=float, default=1.5, help="Zipf exponent of the users (default 1.5)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cost-ms", type=float, default=0.5, help="work per event at the reducer, ms (default 0.5)")
    p.add_argument("--policy", default=None, choices=sorted(dpa.policies()),
                   help="dpa's policy (default: JobConfig()'s)")
    p.add_argument("--no-spark", action="store_true", help="skip Spark's own run")
    p.add_argument("--reps", type=int, default=1,
                   help="timed runs of each engine, alternating (default 1); the table shows medians")
    p.add_argument("--json", default=None, metavar="PATH",
                   help="also write the figures as JSON (e.g. benchmarks/results/skewed_job.json)")
    p.add_argument("--out", default="out/skewed_job", help="output directory (default out/skewed_job)")
    p.add_argument("--verbose", action="store_true", help="show Ray's and Spark's logs")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.cost_ms <= 0:
        print("error: --cost-ms must be > 0 (the job is about costly per-key work)", file=sys.stderr)
        return 2
    from dpa.runtime.ray.quiet import quiet_logs

    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    quiet_logs(verbose=args.verbose)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    if args.input is None:
        source = out / "input" / "events.parquet"
        source.parent.mkdir(parents=True, exist_ok=True)
        events = make_events(args.rows, args.keys, args.zipf, args.seed)
        pq.write_table(events, source)
        counts = np.bincount(events["user"].to_numpy())
        print(f"input: {args.rows:,} events over {len(counts.nonzero()[0]):,} users (Zipf z={args.zipf}); "
              f"the hottest user holds {counts.max() / args.rows:.0%} of them; {args.cost_ms:g} ms of work per event")
    elif not os.path.exists(args.input):
        print(f"error: input {args.input!r} does not exist", file=sys.stderr)
        return 2
    else:
        source = Path(args.input)
    warmup = out / "input" / "warmup.parquet"
    warmup.parent.mkdir(parents=True, exist_ok=True)

    from dpa.runtime.ray.session import ensure_ray
    from spark_bridge import SparkConfig, spark_session

    try:
        ensure_ray()
    except Exception as exc:  # noqa: BLE001 - Ray's start-up error is a plain Exception
        print(f"error: Ray did not start: {str(exc).splitlines()[0]} A heavily loaded machine can miss Ray's "
              "start-up deadline: try again when it is quieter.", file=sys.stderr)
        return 1

    cost_s = args.cost_ms / 1000
    config = dpa.JobConfig() if args.policy is None else dpa.JobConfig(balance=dpa.BalanceConfig(policy=args.policy))
    baseline = dpa.JobConfig(balance=dpa.BalanceConfig(policy="hash"))
    with spark_session(SparkConfig(log_level="WARN" if args.verbose else "ERROR")) as spark:
        df = read_table(spark, str(source))
        for name in (args.key, args.value):
            if name not in df.columns:
                print(f"error: column {name!r} not in {source}; columns: {', '.join(df.columns)}", file=sys.stderr)
                return 2
        df = df.select(args.key, args.value)
        rows = df.count()
        sc = spark.sparkContext
        slots = int(sc.defaultParallelism)
        workers = config.resolved().num_reducers
        pq.write_table(pa.Table.from_pandas(df.limit(WARMUP_ROWS).toPandas(), preserve_index=False), warmup)
        small = read_table(spark, str(warmup))
        print(f"Spark on Ray up; {workers} dpa reducers, {slots} Spark task slots "
              f"(setup {time.perf_counter() - started:.0f} s); warming up each engine")
        run_dpa(small, "warm-up", args.key, args.value, cost_s, config)
        run_dpa(small, "warm-up", args.key, args.value, cost_s, baseline)
        if not args.no_spark:
            run_spark(spark, small, "warm-up", args.key, args.value, cost_s, slots)
        print("running the job three ways" if not args.no_spark else "running the job two ways")
        label = "dpa, JobConfig() defaults" if args.policy is None else f"dpa, policy={args.policy}"
        every: list[list[Run]] = []
        for _ in range(max(1, args.reps)):
            runs = [run_dpa(df, label, args.key, args.value, cost_s, config),
                    run_dpa(df, "dpa, no balancing (hash)", args.key, args.value, cost_s, baseline)]
            if not args.no_spark:
                runs.append(run_spark(spark, df, "Spark groupBy.applyInPandas", args.key, args.value, cost_s, slots))
            every.append(runs)
        runs = [median_run([rep[i] for rep in every]) for i in range(len(every[0]))]
        target = out / "sums.parquet"
        runs[0].result_df.write.mode("overwrite").parquet(str(target))  # type: ignore[attr-defined]

    work_s = rows * cost_s
    print(f"\n{rows:,} events x {args.cost_ms:g} ms = {work_s:.1f} s of work; ideal on {workers} workers: "
          f"{work_s / max(workers, 1):.2f} s (x ideal: time / (work / the engine's workers))")
    print_table(runs, work_s)
    agree = all(answers_agree(rep) for rep in every) and answers_agree(runs)
    if args.json:
        write_figures(args.json, every, work_s, rows, args)
    png = plot_runs(runs, work_s, out / "load_over_time.png")
    best_other = min(r.seconds for r in runs[1:])
    print(f"\nanswers agree: {'yes' if agree else 'NO'} ({len(runs[0].answer):,} keys); "
          f"dpa with its defaults is {best_other / runs[0].seconds:.2f}x faster than the best of the others")
    print(f"wrote {target} and {png}; total {time.perf_counter() - started:.0f} s")
    if not agree:
        print("error: the engines' answers differ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
