"""Per-group functions on skewed keys: dpa's ``GroupApply`` against Spark's ``applyInPandas``
and Ray Data's ``map_groups``, in one run.

A user function ``fn(pdf) -> DataFrame`` is called once per key with all the key's rows (a
whole-group function: nothing can be pre-aggregated, a group cannot be split), on 40,000
records whose int64 keys follow Zipf(1.1) over 10,000 keys (the hottest holds ~15%), with 8
workers. Two workloads:

* **sleep**: ``fn`` sleeps 1 ms per row of its group and returns ``(key, n)``. Ideal makespan
  ``N * 1 ms / 8`` = 5 s; a whole-group function cannot beat its largest group either, so
  the bound is ``max(ideal, largest group's seconds)``.
* **cpu**: ``fn`` does real numpy work per row: the eigenvalues of a ``--cpu-dim`` square
  symmetric matrix built from the row's value ``v`` (``numpy.linalg.eigvalsh``, 128 rows a
  call), and returns ``(key, n, x)``, ``x`` the sum of each row's largest eigenvalue, summed
  in ascending order so that it does not depend on the order rows arrive in. Its work is
  the CPU seconds of ``fn`` on every group in this process (computing the reference answer);
  the ideal is that work over the machine's cores (at most 8), the bound
  ``max(ideal, the slowest group's seconds)``. BLAS runs one thread per process in every
  engine and in this driver (``OMP_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS`` /
  ``MKL_NUM_THREADS`` = 1 unless set; the script restarts itself to set them).

Engines (``--engines``), all on this machine:

* ``dpa``: ``dpa.run(table, key="key", reducer=dpa.GroupApply(fn), num_reducers=8)`` on a
  pyarrow Table, every other ``JobConfig`` knob at its default; ``res.to_arrow()`` fetched.
  dpa's own figures (``res.stats.to_dict()["group_apply"]``) are printed and recorded.
* ``dpa-dataset``: the same on the data as a materialized Ray Dataset (16 blocks).
* ``ray-data``: ``ds.groupby("key", num_partitions=8).map_groups(fn, batch_format="pandas",
  compute=TaskPoolStrategy(size=8))`` materialized and fetched, as ``benchmarks.raydata``
  runs it; ``ray-data-0.25cpu`` gives its tasks ``num_cpus=0.25`` so that 8 run at once.
* ``spark-default``: ``df.groupBy("key").applyInPandas(fn, schema).toPandas()`` on plain
  ``local[8]`` (``benchmarks.common.start_spark``) with Spark's default shuffle partitions
  and adaptive execution (which coalesces this small shuffle into very few tasks);
  ``spark-tuned``: 8 shuffle partitions, coalescing off. Spark runs in a **subprocess**, apart
  from Ray (as in ``benchmarks.stragglers``), on a cached DataFrame; it is driven one
  repetition at a time, so that its runs alternate with the Ray engines' and meet the same
  machine load.
* ``dpa-bridge``: ``spark_bridge.apply_in_pandas(df, "key", fn, schema,
  config=JobConfig(shape=ShapeConfig(num_reducers=8))).toPandas()`` on Spark on Ray (RayDP,
  ``spark_bridge.spark_session``), ``df`` read from a parquet file (in its time), after the
  Ray engines.

Every run's answer is fetched to the driver (in its time) and checked equal to the
reference: ``fn`` applied to each group of ``table.to_pandas().groupby("key")``. **cold** is
each engine's first run of a workload in its process (actor pools, Python workers and Spark
codegen start there), **warm** the median of ``--reps`` runs after it, with their spread
(max - min). ``dpa_faster_by`` = an engine's warm median / dpa's. Targets: sleep, dpa within
1.15x of the bound and >= 3x faster than Spark default and Ray Data, >= 1.5x faster than
Spark tuned; cpu, dpa no slower than the best peer.

Run (about 20 minutes; writes ``benchmarks/results/group_apply.json``)::

    python -m benchmarks.group_apply --reps 3

Smoke run (about a minute on a quiet machine; writes nothing unless ``--out`` is given)::

    python -m benchmarks.group_apply --quick
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from benchmarks import group_apply_first, group_apply_small
from benchmarks.common import (
    fmt,
    init_ray,
    median,
    parse_int,
    print_table,
    start_spark,
    stop_ray,
    write_json,
)
from benchmarks.raydata import _fetch as fetch_dataset
from benchmarks.stragglers import _SPARK_KEYS, SPARK_VARIANTS, load_avg
from benchmarks.stragglers import make_table as zipf_keys

#: Workers of every engine: dpa's reducers, Ray Data's partitions and tasks, Spark's local[N].
WORKERS = 8
WORKLOADS = ("sleep", "cpu")
#: Engine -> what runs (see the module docstring).
ENGINES: dict[str, str] = {
    "dpa": "dpa.GroupApply, pyarrow Table",
    "dpa-dataset": "dpa.GroupApply, Ray Dataset",
    "ray-data": "Ray Data map_groups, 8 partitions",
    "ray-data-0.25cpu": "Ray Data map_groups, num_cpus=0.25",
    "spark-default": "Spark applyInPandas, default partitions",
    "spark-tuned": "Spark applyInPandas, 8 partitions, no coalescing",
    "dpa-bridge": "dpa via spark_bridge.apply_in_pandas",
}
DEFAULT_ENGINES = list(ENGINES)
QUICK_ENGINES = ["dpa", "dpa-dataset", "ray-data", "spark-default", "spark-tuned"]
#: Spark engine -> its SQL settings (``benchmarks.stragglers`` variants).
SPARK_ENGINES = {"spark-default": SPARK_VARIANTS["partitions=default"],
                 "spark-tuned": SPARK_VARIANTS["partitions=8,no-coalesce"]}
#: Output schema of each workload's function, as Spark's DDL.
SCHEMAS = {"sleep": "key long, n long", "cpu": "key long, n long, x double"}
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
#: Starts each line the Spark child answers with (other lines on its stdout are ignored).
SPARK_MARK = "@@group-apply-spark "

GroupFn = Callable[[pd.DataFrame], pd.DataFrame]


# ----------------------------------------------------------------------------- workloads
def sleep_fn(cost_s: float) -> GroupFn:
    """The sleep workload's function: sleeps ``cost_s`` per row of the group.

    Args:
        cost_s: Seconds per row.

    Returns:
        ``fn(pdf) -> DataFrame`` of one row ``(key, n)``, ``n`` the group's rows.
    """

    def per_group(pdf: pd.DataFrame) -> pd.DataFrame:
        time.sleep(cost_s * len(pdf))
        return pd.DataFrame({"key": pdf["key"].to_numpy()[:1], "n": np.array([len(pdf)], dtype=np.int64)})

    return per_group


def cpu_fn(dim: int, chunk: int = 128) -> GroupFn:
    """The cpu workload's function: the eigenvalues of one ``dim`` x ``dim`` matrix per row.

    Row ``i`` with value ``v`` gets ``B * (1 + v/1000) + I * v/100`` (``B`` a fixed symmetric
    matrix); its largest eigenvalue is computed by ``numpy.linalg.eigvalsh``, ``chunk`` rows
    a call, so the cost is proportional to the group's rows.

    Args:
        dim: Matrix size (112: about 0.25 ms per row on one core).
        chunk: Rows per ``eigvalsh`` call.

    Returns:
        ``fn(pdf) -> DataFrame`` of one row ``(key, n, x)``, ``x`` the rows' largest
        eigenvalues summed in ascending order (the same whatever the rows' order).
    """
    base = np.sin(np.arange(dim * dim, dtype=np.float64)).reshape(dim, dim)
    base = base + base.T
    eye = np.eye(dim)

    def per_group(pdf: pd.DataFrame) -> pd.DataFrame:
        v = pdf["v"].to_numpy(dtype=np.float64)
        top = np.empty(len(v))
        for i in range(0, len(v), chunk):
            w = v[i:i + chunk, None, None]
            top[i:i + chunk] = np.linalg.eigvalsh(base * (1.0 + w / 1000.0) + eye * (w / 100.0))[:, -1]
        return pd.DataFrame({"key": pdf["key"].to_numpy()[:1], "n": np.array([len(v)], dtype=np.int64),
                             "x": [float(np.sort(top).sum())]})

    return per_group


def workload_fn(workload: str, args: argparse.Namespace, cost_s: float | None = None) -> GroupFn:
    """The function of ``workload`` (``cost_s`` overrides the sleep per row)."""
    if workload == "sleep":
        return sleep_fn(args.cost_ms / 1000.0 if cost_s is None else cost_s)
    return cpu_fn(args.cpu_dim)


def make_table(args: argparse.Namespace) -> pa.Table:
    """``args.rows`` Zipf keys (``key``, as ``benchmarks.stragglers``) and an int64 ``v`` in [0, 1000)."""
    table = zipf_keys(args)
    values = np.random.default_rng(args.seed + 1).integers(0, 1000, table.num_rows, dtype=np.int64)
    return table.append_column("v", pa.array(values))


def reference(table: pa.Table, fn: GroupFn) -> tuple[pa.Table, np.ndarray]:
    """``fn`` on every group of ``table``, in this process (pandas ``groupby("key")``).

    Args:
        table: The input, with a ``key`` column.
        fn: The per-group function.

    Returns:
        ``(the answer sorted by key, CPU seconds of each group's call)``.
    """
    parts, seconds = [], []
    for _, group in table.to_pandas().groupby("key", sort=True):
        t0 = time.process_time()
        parts.append(fn(group))
        seconds.append(time.process_time() - t0)
    answer = pa.Table.from_pandas(pd.concat(parts, ignore_index=True), preserve_index=False)
    return answer.sort_by("key"), np.array(seconds)


def check_answer(got: pa.Table, want: pa.Table, rtol: float = 1e-9) -> str:
    """``"ok"`` if ``got`` has ``want``'s rows (any order; floats within ``rtol``), else
    ``"MISMATCH: ..."`` naming the first difference."""
    if sorted(got.column_names) != sorted(want.column_names):
        return f"MISMATCH: columns {got.column_names}, expected {want.column_names}"
    if got.num_rows != want.num_rows:
        return f"MISMATCH: {got.num_rows:,} groups, expected {want.num_rows:,}"
    got = got.select(want.column_names).sort_by("key")
    keys = want["key"].to_numpy()
    for name in want.column_names:
        g, w = got[name].to_numpy(), want[name].to_numpy()
        same = np.isclose(g, w, rtol=rtol, atol=0) if np.issubdtype(w.dtype, np.floating) else g == w
        if not same.all():
            bad = int(np.argmin(same))
            return f"MISMATCH: {name} of key {keys[bad]} is {g[bad]}, expected {w[bad]}"
    return "ok"


@dataclass(frozen=True)
class Bounds:
    """What a perfect engine could reach on a workload."""

    #: Work / workers (sleep) or work / cores (cpu), seconds.
    ideal_s: float
    #: The largest group's seconds: a whole-group function cannot split it.
    largest_group_s: float
    #: Rows of the largest group.
    largest_group_rows: int

    @property
    def bound_s(self) -> float:
        """``max(ideal, largest group)``."""
        return max(self.ideal_s, self.largest_group_s)

    def to_dict(self) -> dict[str, float]:
        return {"ideal_s": self.ideal_s, "largest_group_s": self.largest_group_s,
                "largest_group_rows": self.largest_group_rows, "bound_s": self.bound_s}


def sleep_bounds(keys: np.ndarray, cost_s: float, workers: int = WORKERS) -> Bounds:
    """Bounds of the sleep workload: ``N * cost / workers`` and the largest group's sleep."""
    largest = int(np.unique(keys, return_counts=True)[1].max()) if len(keys) else 0
    return Bounds(len(keys) * cost_s / workers, largest * cost_s, largest)


def cpu_bounds(group_seconds: np.ndarray, group_rows: np.ndarray, cores: int) -> Bounds:
    """Bounds of the cpu workload: its measured work over ``cores`` and its slowest group."""
    slowest = int(np.argmax(group_seconds))
    return Bounds(float(group_seconds.sum()) / cores, float(group_seconds[slowest]), int(group_rows[slowest]))


def summarise(workload: str, engine: str, runs: list[dict[str, Any]], bounds: Bounds) -> dict[str, Any]:
    """One row of the table: cold run, warm median and spread, against the bound."""
    times = [r["s"] for r in runs]
    warm = times[1:] or times
    bad = [r["status"] for r in runs if r["status"] != "ok"]
    return {"workload": workload, "engine": engine, "what": ENGINES.get(engine), "median_s": median(warm),
            "spread_s": max(warm) - min(warm), "cold_s": times[0], "times_s": warm,
            "x_ideal": median(warm) / bounds.ideal_s, "x_bound": median(warm) / bounds.bound_s,
            "tasks": runs[-1].get("tasks"), "load_avg_1m": median(r["load_avg_1m"] for r in runs),
            "status": bad[0] if bad else "ok", "runs": runs}


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """Sets ``dpa_faster_by`` (= the row's warm median / dpa's, same workload) on every row."""
    dpa = {r["workload"]: r["median_s"] for r in rows if r["engine"] == "dpa"}
    for r in rows:
        r["dpa_faster_by"] = r["median_s"] / dpa[r["workload"]] if r["workload"] in dpa else None


def check_targets(rows: Sequence[dict[str, Any]], bounds: dict[str, Bounds]) -> dict[str, list[dict[str, Any]]]:
    """The targets, per workload: ``[{"target", "value", "met"}]`` for those measured.

    sleep: dpa <= 1.15x its bound; Spark default and Ray Data >= 3x dpa's time; Spark tuned
    >= 1.5x. cpu: the best peer (any engine not dpa's) >= dpa's time.
    """
    out: dict[str, list[dict[str, Any]]] = {}
    for workload, bound in bounds.items():
        times = {r["engine"]: r["median_s"] for r in rows if r["workload"] == workload and r["status"] == "ok"}
        dpa = times.get("dpa")
        if dpa is None:
            continue
        checks: list[tuple[str, float, bool]] = []  # (target, value, met)
        if workload == "sleep":
            x = dpa / bound.bound_s
            checks.append(("dpa / max(ideal, largest group) <= 1.15", x, x <= 1.15))
            for engine, want in (("spark-default", 3.0), ("ray-data", 3.0), ("spark-tuned", 1.5)):
                if engine in times:
                    x = times[engine] / dpa
                    checks.append((f"{engine} / dpa >= {want:g}", x, x >= want))
        else:
            peers = {e: t for e, t in times.items() if not e.startswith("dpa")}
            if peers:
                best = min(peers, key=peers.__getitem__)
                checks.append((f"best peer ({best}) / dpa >= 1", peers[best] / dpa, peers[best] >= dpa))
        out[workload] = [{"target": name, "value": value, "met": bool(met)} for name, value, met in checks]
    return out


def describe(stats: dict[str, Any]) -> str:
    """dpa's ``group_apply`` stats on one line: scalars as they are, lists of numbers as
    ``max/mean``, other lists by their length."""
    parts = []
    for name, value in stats.items():
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, (int, float)) for v in value):
            parts.append(f"{name} max/mean {fmt(max(value))}/{fmt(sum(value) / len(value))}")
        elif isinstance(value, (list, tuple)):
            parts.append(f"{name} {len(value)}")
        else:
            parts.append(f"{name} {fmt(value)}")
    return ", ".join(parts)


# ----------------------------------------------------------------------------- Spark (child)
def spark_tasks(sc: Any, group: str) -> list[int]:
    """Tasks of each stage the job group ``group`` ran."""
    tracker = sc.statusTracker()
    stages = sorted({s for job in tracker.getJobIdsForGroup(group)
                     for s in (getattr(tracker.getJobInfo(job), "stageIds", None) or [])})
    return [info.numTasks for s in stages if (info := tracker.getStageInfo(s)) is not None]


def reply(obj: Any) -> None:
    """The Spark child's answer to its parent: one marked line of JSON on stdout."""
    print(SPARK_MARK + json.dumps(obj, default=int), flush=True)


def spark_child(args: argparse.Namespace) -> None:
    """Runs the Spark engines in this (child) process, one ``"<workload> <rep>"`` line of stdin
    at a time, and answers each (and the start) with :func:`reply`."""
    table = make_table(args)
    t0 = time.perf_counter()
    spark = start_spark(parallelism=WORKERS)
    sc = spark.sparkContext
    sc.setLogLevel("ERROR")
    spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
    try:
        df = spark.createDataFrame(table.to_pandas()).cache()
        assert df.count() == table.num_rows
        reply({"spark_start_s": time.perf_counter() - t0, "input_partitions": df.rdd.getNumPartitions(),
               "adaptive": spark.conf.get("spark.sql.adaptive.enabled")})
        for line in sys.stdin:
            workload, rep = line.split()
            fn, runs = workload_fn(workload, args), []
            for engine in (e for e in SPARK_ENGINES if e in args.engines):
                for k in _SPARK_KEYS:
                    spark.conf.unset(k)
                for k, v in SPARK_ENGINES[engine].items():
                    spark.conf.set(k, v)
                group = f"{workload}-{engine}-{rep}"
                sc.setJobGroup(group, group)
                la = os.getloadavg()[0]
                t = time.perf_counter()
                got = df.groupBy("key").applyInPandas(fn, SCHEMAS[workload]).toPandas()
                runs.append({"workload": workload, "engine": engine, "rep": int(rep), "s": time.perf_counter() - t,
                             "load_avg_1m": la, "tasks": spark_tasks(sc, group),
                             "shuffle_partitions": spark.conf.get("spark.sql.shuffle.partitions"),
                             "answer": got.to_dict(orient="list")})
            reply(runs)
    finally:
        spark.stop()


class SparkChild:
    """The Spark engines in a subprocess (this script with ``--spark-child``), apart from Ray
    as in ``benchmarks.stragglers``, driven one repetition at a time so that its runs
    interleave with the Ray engines' and meet the same machine load.

    Args:
        argv: This script's arguments.
    """

    def __init__(self, argv: list[str]) -> None:
        cmd = [sys.executable, "-m", "benchmarks.group_apply", *argv, "--spark-child"]
        print(f"Spark local[{WORKERS}] in a subprocess: {shlex.join(cmd)}", flush=True)
        self.log = tempfile.TemporaryFile("w+")
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True, cwd=root)
        self.info: dict[str, Any] = self._reply()

    def _reply(self) -> Any:
        for line in self.proc.stdout or ():
            if line.startswith(SPARK_MARK):
                return json.loads(line[len(SPARK_MARK):])
        self.log.seek(0)
        raise RuntimeError(f"the Spark subprocess ended (exit {self.proc.wait()}); stderr tail:\n"
                           f"{self.log.read()[-3000:]}")

    def run(self, workload: str, rep: int) -> list[dict[str, Any]]:
        """The Spark engines' runs of ``workload``, repetition ``rep`` (with their answers)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{workload} {rep}\n")
        self.proc.stdin.flush()
        return self._reply()

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


# ----------------------------------------------------------------------------- Ray engines
def to_dataset(table: pa.Table, blocks: int) -> Any:
    """``table`` as a materialized Ray Dataset of ``blocks`` blocks, in the table's order."""
    import ray.data

    step = max(1, -(-table.num_rows // blocks))
    return ray.data.from_arrow([table.slice(i, step) for i in range(0, table.num_rows, step)]).materialize()


def run_ray_engine(engine: str, data: Any, fn: GroupFn) -> tuple[pa.Table, dict[str, Any]]:
    """One run of a Ray engine on ``data`` (a Table for ``dpa``, else a Dataset).

    Returns:
        ``(the answer, extra figures of the run)``: dpa's ``group_apply`` stats.
    """
    import ray.data

    if engine.startswith("dpa"):
        import dpa

        res = dpa.run(data, key="key", reducer=dpa.GroupApply(fn), num_reducers=WORKERS)
        answer = res.to_arrow()
        return answer, {"group_apply": res.stats.to_dict().get("group_apply")}
    extra = {"num_cpus": 0.25} if engine == "ray-data-0.25cpu" else {}
    pool = ray.data.TaskPoolStrategy(size=WORKERS)
    out = data.groupby("key", num_partitions=WORKERS).map_groups(fn, batch_format="pandas", compute=pool, **extra)
    return fetch_dataset(out.materialize()), {}


def report(run: dict[str, Any]) -> dict[str, Any]:
    """Prints one run's line (and dpa's ``group_apply`` stats); returns the run."""
    tasks = f"  tasks per stage {run['tasks']}" if run.get("tasks") else ""
    print(f"  {run['workload']:<5} rep {run['rep']} ({'cold' if run['rep'] == 0 else 'warm'}) {run['engine']:<16} "
          f"{run['s']:7.2f}s  {run['status']}  load {run['load_avg_1m']:.1f}{tasks}", flush=True)
    if run.get("group_apply"):
        print(f"        group_apply: {describe(run['group_apply'])}", flush=True)
    return run


def run_bridge(table: pa.Table, args: argparse.Namespace, refs: dict[str, pa.Table]) -> list[dict[str, Any]]:
    """``dpa-bridge``: ``spark_bridge.apply_in_pandas`` on Spark on Ray (Ray is up)."""
    import pyarrow.parquet as pq

    import dpa
    from spark_bridge import SparkConfig, apply_in_pandas_with_result, spark_session

    runs = []
    with tempfile.TemporaryDirectory(prefix="dpa-group-apply-bridge-") as tmp, \
            spark_session(SparkConfig(app_name="dpa-group-apply")) as spark:
        spark.sparkContext.setLogLevel("ERROR")
        path = os.path.join(tmp, "data.parquet")
        pq.write_table(table, path)
        for workload in args.workloads:
            fn = workload_fn(workload, args)
            for rep in range(args.reps + 1):
                la = os.getloadavg()[0]
                t = time.perf_counter()
                out, res = apply_in_pandas_with_result(spark.read.parquet(path), "key", fn, SCHEMAS[workload],
                                                       config=dpa.JobConfig(shape=dpa.ShapeConfig(num_reducers=WORKERS)))
                got = pa.Table.from_pandas(out.toPandas(), preserve_index=False)
                runs.append(report({"workload": workload, "engine": "dpa-bridge", "rep": rep,
                                    "s": time.perf_counter() - t, "load_avg_1m": la,
                                    "status": check_answer(got, refs[workload]),
                                    "group_apply": res.stats.to_dict().get("group_apply")}))
    return runs


def measure(table: pa.Table, args: argparse.Namespace, argv: list[str],
            refs: dict[str, pa.Table]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every engine's runs: per workload and repetition, Spark's (in its subprocess) then the
    Ray engines'; the bridge last. Returns ``(the runs, start-up figures)``."""
    engines = [e for e in ENGINES if e in args.engines and e not in SPARK_ENGINES and e != "dpa-bridge"]
    spark = SparkChild(argv) if any(e in SPARK_ENGINES for e in args.engines) else None
    startup: dict[str, Any] = {**(spark.info if spark else {}), "ray_init_s": init_ray()}
    runs: list[dict[str, Any]] = []
    try:
        import ray.data

        ray.data.DataContext.get_current().enable_progress_bars = False
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        ds = to_dataset(table, args.blocks) if any(e != "dpa" for e in engines) else None
        for workload in args.workloads:
            fn = workload_fn(workload, args)
            for rep in range(args.reps + 1):
                for r in spark.run(workload, rep) if spark else []:
                    got = pa.Table.from_pandas(pd.DataFrame(r.pop("answer")), preserve_index=False)
                    runs.append(report({**r, "status": check_answer(got, refs[workload])}))
                for engine in engines:
                    la = os.getloadavg()[0]
                    t = time.perf_counter()
                    answer, extra = run_ray_engine(engine, table if engine == "dpa" else ds, fn)
                    runs.append(report({"workload": workload, "engine": engine, "rep": rep,
                                        "s": time.perf_counter() - t, "load_avg_1m": la,
                                        "status": check_answer(answer, refs[workload]), **extra}))
        if spark is not None:
            spark.close()
            spark = None
        if "dpa-bridge" in args.engines:
            runs += run_bridge(table, args, refs)
    finally:
        if spark is not None:
            spark.close()
        stop_ray()
    return runs, startup


# ----------------------------------------------------------------------------- main
def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=parse_int, default=None, help="records N (default 40k; --quick 2k)")
    p.add_argument("--keys", type=parse_int, default=None, help="distinct keys K (default 10k; --quick 500)")
    p.add_argument("--z", type=float, default=1.1, help="Zipf exponent (default 1.1)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cost-ms", type=float, default=1.0, help="sleep per row of the sleep workload (default 1 ms)")
    p.add_argument("--cpu-dim", type=int, default=112, help="matrix size of the cpu workload (default 112)")
    p.add_argument("--blocks", type=int, default=16, help="blocks of the Ray Dataset (default 16)")
    p.add_argument("--reps", type=int, default=None, help="warm runs per engine after the cold one (default 3; --quick 1)")
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    p.add_argument("--engines", nargs="+", default=None, choices=list(ENGINES),
                   help=f"default: {' '.join(DEFAULT_ENGINES)} (--quick: {' '.join(QUICK_ENGINES)})")
    p.add_argument("--quick", action="store_true", help="smoke run: 2k rows over 500 keys, 1 warm run, fewer engines")
    p.add_argument("--out", default=None,
                   help="JSON file (default benchmarks/results/group_apply.json; none with --quick; '' for none)")
    p.add_argument("--spark-child", action="store_true", help=argparse.SUPPRESS)
    group_apply_small.add_arguments(p)
    group_apply_first.add_arguments(p)
    args = p.parse_args(argv)
    args.rows = args.rows or (2_000 if args.quick else 40_000)
    args.keys = args.keys or (500 if args.quick else 10_000)
    args.reps = args.reps if args.reps is not None else (1 if args.quick else 3)
    args.engines = args.engines or (QUICK_ENGINES if args.quick else DEFAULT_ENGINES)
    if args.out is None and not args.quick:
        case = "_small" if args.small_groups else "_first" if args.first_jobs else ""
        args.out = f"benchmarks/results/group_apply{case}.json"
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    for var in THREAD_VARS:  # one BLAS thread per process, in every engine's workers
        os.environ.setdefault(var, "1")
    if args.spark_child:
        spark_child(args)
        return {}
    if args.small_groups:
        return group_apply_small.main(args)
    if args.first_jobs:
        return group_apply_first.main(args)
    table = make_table(args)
    cost = args.cost_ms / 1000.0
    cores = min(os.cpu_count() or 1, WORKERS)
    refs, bounds = {}, {}
    load_start = load_avg()
    print(f"load avg (1/5/15 min) at start: {load_start}  ({os.cpu_count()} CPUs)")
    for workload in args.workloads:
        refs[workload], seconds = reference(table, workload_fn(workload, args, cost_s=0.0))
        if workload == "sleep":
            bounds[workload] = sleep_bounds(table["key"].to_numpy(), cost)
        else:
            bounds[workload] = cpu_bounds(seconds, refs[workload]["n"].to_numpy(), cores)
        b = bounds[workload]
        print(f"{workload}: {args.rows:,} rows, {refs[workload].num_rows:,} groups, largest {b.largest_group_rows:,} "
              f"rows = {b.largest_group_s:.2f}s; work {b.ideal_s * (WORKERS if workload == 'sleep' else cores):.2f}s; "
              f"ideal {b.ideal_s:.2f}s; bound max(ideal, largest group) {b.bound_s:.2f}s", flush=True)

    runs, startup = measure(table, args, argv, refs)

    rows = []
    for workload in args.workloads:
        for engine in ENGINES:
            mine = [r for r in runs if r["workload"] == workload and r["engine"] == engine]
            if mine:
                rows.append(summarise(workload, engine, mine, bounds[workload]))
    add_ratios(rows)
    print_table(rows, ["workload", "engine", "median_s", "spread_s", "cold_s", "x_bound", "dpa_faster_by", "tasks",
                       "load_avg_1m", "status"],
                title=f"per-group functions, {WORKERS} workers: warm = median of {args.reps} after the cold run, "
                      f"spread = max - min, x_bound = time / max(ideal, largest group), dpa_faster_by = time / dpa's")
    targets = check_targets(rows, bounds)
    for workload, checks in targets.items():
        for c in checks:
            print(f"target {workload}: {c['target']}: {c['value']:.2f} {'MET' if c['met'] else 'MISSED'}")
    payload = {"rows": args.rows, "keys": args.keys, "z": args.z, "seed": args.seed, "cost_ms": args.cost_ms,
               "cpu_dim": args.cpu_dim, "workers": WORKERS, "reps": args.reps,
               "bounds": {w: b.to_dict() for w, b in bounds.items()},
               "load_avg_start": load_start, "load_avg_end": load_avg(), "results": rows, "targets": targets,
               "startup": startup}
    write_json(args.out or None, payload)
    return payload


if __name__ == "__main__":
    if any(var not in os.environ for var in THREAD_VARS):
        # numpy (and its BLAS) is loaded already: start again with one BLAS thread, so that the
        # reference's work is measured as the engines' workers (which inherit it) run it.
        os.environ.update({var: os.environ.get(var, "1") for var in THREAD_VARS})
        os.execv(sys.executable, [sys.executable, "-m", "benchmarks.group_apply", *sys.argv[1:]])
    main()
