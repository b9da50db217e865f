"""Writes ``docs/benchmarks.md`` from the figures the benchmarks last wrote.

Every benchmark writes its figures as JSON with ``--out`` (``benchmarks.common.write_json``:
the command that ran, the machine, the figures). The current results live in
``benchmarks/results/<name>.json``; this script renders one section per file, in the order of
:data:`BENCHMARKS` and then any other file alphabetically, so a figure in the docs is always
the last one measured, with its command, its machine and its spread. A results file no entry
of :data:`BENCHMARKS` describes still gets its section (its figures, command and machine).

Run::

    python -m benchmarks.docs                 # benchmarks/results/*.json -> docs/benchmarks.md
    python -m benchmarks.docs --check         # exit 1 if docs/benchmarks.md is not up to date
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"

#: Most columns of a rendered table (the first ones; the JSON file has them all).
MAX_COLUMNS = 11

#: A run whose 1-minute load average was above this many runnable processes per CPU timed
#: mostly the wait for a CPU: :func:`section` leaves its figures out.
BUSY_LOAD_PER_CPU = 4.0


@dataclass(frozen=True)
class Entry:
    """What the page says about one results file: a title, what it measures, and
    optionally which columns of its ``results`` rows to show, in order."""

    title: str
    what: str
    columns: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: payload -> rows of the page's "Against the peers" table (see :func:`peer_row`).
    headline: Callable[[Mapping[str, Any]], list[dict[str, str]]] | None = None


def timing(row: Mapping[str, Any], key: str = "median_s") -> str:
    """``"4.64 s (4.50–4.90)"``: a row's median and, where recorded, its range."""
    med = row.get(key)
    if not isinstance(med, (int, float)):
        return "–"
    times = row.get("times_s")
    low = row.get("min_s", min(times) if isinstance(times, list) and times else None)
    high = row.get("max_s", max(times) if isinstance(times, list) and times else None)
    spread = f" ({fmt(float(low))}–{fmt(float(high))})" if low is not None and high is not None else ""
    return f"{fmt(float(med))} s{spread}"


def peer_row(job: str, ours: Mapping[str, Any] | None, peer_name: str, peer: Mapping[str, Any] | None,
             key: str = "median_s") -> list[dict[str, str]]:
    """One row of the headline table: dpa's time, the peer's, and peer / dpa (> 1: dpa faster)."""
    if ours is None or peer is None or not ours.get(key) or not peer.get(key):
        return []
    return [{"job": job, "dpa": timing(ours, key), "peer": peer_name, "peer's time": timing(peer, key),
             "dpa faster by": f"{float(peer[key]) / float(ours[key]):.2f}x"}]


def _find(rows: Any, **match: Any) -> Mapping[str, Any] | None:
    for r in rows if isinstance(rows, list) else []:
        if isinstance(r, Mapping) and all(
                (v(r.get(k)) if callable(v) else r.get(k) == v) for k, v in match.items()):
            return r
    return None


def _main_job(p: Mapping[str, Any]) -> list[dict[str, str]]:
    rows = p.get("results")
    ours = _find(rows, engine=lambda e: isinstance(e, str) and e.startswith("dpa, JobConfig"))
    job = "main job: skewed per-key work read through Spark on Ray"
    return (peer_row(job, ours, "Spark groupBy.applyInPandas", _find(rows, engine=lambda e: str(e).startswith("Spark")))
            + peer_row(job, ours, "dpa without balancing (hash)",
                       _find(rows, engine=lambda e: "no balancing" in str(e))))


def _stragglers_spark(p: Mapping[str, Any]) -> list[dict[str, str]]:
    rows = p.get("results")
    ours = _find(rows, engine="dpa", config=lambda c: str(c).split()[0] in ("hybrid", "default"))
    spark = [r for r in rows or [] if isinstance(r, Mapping) and r.get("engine") == "spark" and r.get("makespan_s")]
    best = min(spark, key=lambda r: r["makespan_s"], default=None)
    name = f"Spark {best['config']} (its best)" if best else ""
    return peer_row("stragglers: 1 ms per record, Zipf(1.1), 8 reducers", ours, name, best, key="makespan_s")


def _throughput(p: Mapping[str, Any]) -> list[dict[str, str]]:
    rows = p.get("results")
    ours = _find(rows, engine="dpa", config="default")
    spark = _find(rows, engine="spark")
    return (peer_row("cheap Count of 10M Zipf records", ours, f"Spark {spark['config']}" if spark else "", spark)
            + peer_row("cheap Count of 10M Zipf records", ours, "pyarrow group_by, one process",
                       _find(rows, engine="pyarrow")))


def _spark_e2e(p: Mapping[str, Any]) -> list[dict[str, str]]:
    rows = p.get("results")
    what = {"scan": "Count of a 10M-row parquet scan, written back", "derived":
            "Count of 10M rows with a key derived in Spark, written back", "tpch-q1":
            "TPC-H Q1 (SF1): filter, derived columns, 8 aggregates"}.get(str(p.get("workload")), "Spark end to end")
    peer = "Spark groupBy().agg()" if p.get("workload") == "tpch-q1" else "Spark groupBy().count()"
    return peer_row(what, _find(rows, engine="dpa", config="default"), peer, _find(rows, engine="spark"))


def _group_apply(p: Mapping[str, Any]) -> list[dict[str, str]]:
    rows = p.get("results")
    job = "per-group function, 1 ms sleep per row, Zipf(1.1), 8 workers"
    ours = _find(rows, workload="sleep", engine="dpa")
    out = []
    for engine, name in (("spark-default", "Spark applyInPandas, default partitions"),
                         ("spark-tuned", "Spark applyInPandas, 8 partitions, no coalescing"),
                         ("ray-data", "Ray Data map_groups")):
        out += peer_row(job, ours, name, _find(rows, workload="sleep", engine=engine))
    peers = [r for r in rows or [] if isinstance(r, Mapping) and r.get("workload") == "cpu" and r.get("median_s")
             and r.get("status") == "ok" and not str(r.get("engine")).startswith("dpa")]
    best = min(peers, key=lambda r: r["median_s"], default=None)
    return out + peer_row("per-group function, numpy work per row (CPU-bound)", _find(rows, workload="cpu", engine="dpa"),
                          f"{best['engine']} (the best peer)" if best else "", best)


#: Results file stem (or a prefix of it, e.g. ``spark_e2e`` for ``spark_e2e_derived``) ->
#: its entry. Files without one are rendered too, with a generic heading.
BENCHMARKS: dict[str, Entry] = {
    "skewed_job": Entry(
        "Main job: skewed per-key work, dpa against hash partitioning and Spark",
        "The main job (`./run.sh main`): events whose keys follow Zipf(1.5) over 1,000 users, "
        "0.5 ms of work per event at the reducer, a sum per user, read through Spark on Ray. dpa "
        "with `JobConfig()` defaults against the same job with `policy=\"hash\"` and against "
        "Spark's `groupBy().applyInPandas` with the same per-event cost (one shuffle partition "
        "per task slot, no coalescing); each after a warm-up. `x_ideal` = time / (work / workers).",
        ("engine", "median_s", "min_s", "max_s", "x_ideal", "skew_S", "rebalances", "runs"),
        headline=_main_job,
    ),
    "stragglers_spark": Entry(
        "Stragglers against Spark: a per-record cost on Zipf keys",
        "40,000 records, Zipf(1.1) over 10,000 keys (the hottest holds 15%), 1 ms of sleep per "
        "record at the reducer, 8 reducers; Spark runs `groupBy(\"key\").applyInPandas` with the "
        "same per-row cost on `local[8]`. `vs_spark_best` = Spark's best makespan / this one "
        "(a speed-up). dpa's rows use the benchmark's `--batch-size` and `--chunk-size`.",
        ("engine", "config", "makespan_s", "min_s", "x_ideal", "vs_spark_best", "max_over_mean", "rebalances",
         "status"),
        headline=_stragglers_spark,
    ),
    "stragglers": Entry(
        "Balancing with defaults: Zipf, uniform, one hot key, a CPU-bound reducer",
        "`JobConfig()` defaults (only `num_reducers=8` and the policy named) on 40,000 Zipf(1.1) "
        "records with 1 ms per record, the same over uniform keys, 20,000 records of one key, "
        "and a user-defined reducer burning SHA-256 rounds (no `WithCost`). Ideal = work / 8.",
        ("workload", "policy", "makespan_s", "spread_s", "x_ideal", "S", "max_over_mean", "rebalances", "status"),
    ),
    "throughput": Entry(
        "Throughput: a cheap Count of 10M Zipf records",
        "10M records, Zipf(1.1) over 100,000 keys, `Count`, warm actors; against Spark "
        "`groupBy().count()` on the same machine and pyarrow's `group_by` in one process. "
        "`x_spark` = Spark's time / this one.",
        ("engine", "config", "median_s", "times_s", "Mrec_per_s", "cpu_s", "x_spark", "x_pyarrow", "status"),
        headline=_throughput,
    ),
    "spark_e2e": Entry(
        "Spark end to end",
        "A 10M-row parquet data set through `spark_bridge.run` (or `run_with_result`) against "
        "Spark's own `groupBy(\"key\").count()`, both written as parquet, in one Spark-on-Ray "
        "session. `scan`: a plain parquet scan (dpa's mappers read the files); `derived`: a key "
        "derived in Spark (`key % 50000`), which goes through Spark's partial aggregation; "
        "`tpch-q1`: TPC-H Q1 over `lineitem` made with `tpchgen-cli`, collected (`floor`: Spark "
        "computing the partial states the bridge hands to dpa, alone).",
        ("engine", "config", "median_s", "min_s", "bridge_s", "core_s", "output_s", "x_spark", "status"),
        headline=_spark_e2e,
    ),
    "small_job": Entry(
        "Start-up and small jobs",
        "`ray.init`, the first job of a driver (it starts the actor pool) and a warm "
        "1,000-record job, dpa's default shape.",
        ("what", "median_s", "min_s", "max_s", "runs"),
    ),
    "hashing": Entry(
        "Hashing keys",
        "`dpa.keys.columns.hash_key_columns` on one mapper block of Zipf keys, raw and map-side "
        "combined, against the dictionary-encoding path (distinct values first); median of the reps.",
    ),
    "lb_overhead": Entry(
        "Load-balancer overhead on uniform keys",
        "10M uniform records (100,000 keys), the balancer on against off, alternating pairs: "
        "what balancing costs when there is nothing to balance (target: within 5%).",
    ),
    "scale_sim_costs": Entry(
        "Message costs measured on Ray (the simulator's defaults)",
        "Receiver CPU per call of one async actor on a local Ray, per kind of dpa message "
        "(`python -m benchmarks.scale_sim --measure`), and the balancer's report handler and tick "
        "timed in-process at 64 and 1,024 reducers; `dpa.runtime.message_costs.MEASURED` and "
        "`docs/scale.md` (\"Simulator\").",
    ),
    "scale_sim": Entry(
        "The in-process runtime as a scale simulator, 64 to 4,096 reducers",
        "No Ray: 1M records, Zipf(1.2) over 100,000 keys, 1 ms per record, `JobConfig()` defaults "
        "but the width, `runtime=\"local\"` with the message costs measured on Ray (`_free`: "
        "messages cost nothing). Time / ideal, the balancer's and the coordinator's busy fraction "
        "and message rates in virtual time, the run's real and CPU seconds, exact against DuckDB "
        "(`docs/scale.md`, \"Simulator\").",
    ),
    "first_ring": Entry(
        "First ring planned on the forecast",
        "No Ray: Zipf(1.1) jobs of 40,000 records over 10,000 keys, 8 reducers; the ring the "
        "planner picks from the mappers' forecast, scored on the exact key counts (largest "
        "share, in fair shares), and the planning time.",
    ),
    "memory": Entry(
        "Memory: streaming 10M against 50M records",
        "Peak summed PSS of the job's processes for the same job over 10M and 50M streamed "
        "records (a generator of Arrow blocks); flat memory means the ratio stays near 1.",
    ),
    "elastic": Entry(
        "Elastic reducers and state migration",
        "`scale`: 16,000 uniform records x 1 ms, 2 reducers fixed against `max_reducers=8`. "
        "`migrate`: the straggler workload, 8 reducers, `doubling`, `migrate=\"records\"` against "
        "`\"state\"`. Alternating, after a warm-up of each. See [elastic.md](elastic.md).",
    ),
    "recovery": Entry(
        "Fault recovery",
        "The straggler workload (40,000 records, Zipf(1.1), 1 ms per record, 8 reducers) with a "
        "reducer or the busy mapper killed at half the fault-free time: makespan over the "
        "fault-free one, and the time to recover. Every result is checked exact. See "
        "[fault_recovery.md](fault_recovery.md).",
    ),
    "gcs_growth": Entry(
        "Ray GCS memory over many jobs",
        "RSS of Ray's `gcs_server` while one driver runs many 20,000-record jobs; the slope is "
        "what each job leaves in the GCS.",
    ),
    "soak": Entry(
        "Soak: a mix of jobs, bad inputs and killed actors",
        "Jobs of every policy, source kind, size and shape, two at a time from two driver "
        "threads, about 10% bad inputs, random actor kills, one job in ten long enough to "
        "outlive several checkpoints; every result checked against a pure-Python oracle and "
        "every job run again on `runtime=\"local\"`, whose answer or error must agree with "
        "Ray's; no hang, no leaked actor, bounded memory.",
    ),
    "raydata": Entry(
        "Ray Data: dpa against Ray Data's groupby on the same Ray",
        "Cheap aggregations (count, sum, mean) of 10M rows whose int keys follow Zipf(1.1) over "
        "100,000 values, and a costly skewed job (40,000 Zipf records, 1 ms per record, 8 workers: "
        "Ray Data's `groupby(num_partitions=8).map_groups` against dpa's `WithCost(Count())` with "
        "`JobConfig()` defaults), answers checked equal. Warm = median of the reps after the first "
        "(cold) run; `speedup_warm` = Ray Data's warm time / dpa's.",
        ("job", "ray_data_warm_s", "ray_data_warm_spread_s", "dpa_warm_s", "dpa_warm_spread_s",
         "speedup_warm", "ray_data_cold_s", "dpa_cold_s", "speedup_cold"),
    ),
    "group_apply": Entry(
        "Per-group functions: dpa's GroupApply against applyInPandas and map_groups",
        "A whole-group function `fn(pdf) -> DataFrame` on 40,000 records whose int keys follow "
        "Zipf(1.1) over 10,000 values (the hottest holds 15%), 8 workers. `sleep`: `fn` sleeps 1 ms "
        "per row of its group; `cpu`: `fn` computes the eigenvalues of a 112x112 matrix per row "
        "(numpy, one BLAS thread). dpa's `GroupApply` (`num_reducers=8`, every other knob at its "
        "default; on a pyarrow Table, on a Ray Dataset, and through `spark_bridge.apply_in_pandas` "
        "on Spark on Ray) against Spark's "
        "`groupBy(\"key\").applyInPandas` on `local[8]` (default partitions; 8 partitions without "
        "coalescing) and Ray Data's `groupby(num_partitions=8).map_groups` (default CPUs; 0.25 CPU a "
        "task), runs of every engine alternating, every answer checked against pandas. Warm = "
        "median of the reps after the first "
        "(cold) run; `x_bound` = time / max(ideal, largest group), ideal = work / 8 (`sleep`) or work "
        "/ cores (`cpu`); `dpa_faster_by` = time / dpa's.",
        ("workload", "engine", "median_s", "spread_s", "cold_s", "x_bound", "dpa_faster_by", "tasks",
         "status"),
        headline=_group_apply,
    ),
    "group_apply_small": Entry(
        "Per-group functions: many small groups against pandas",
        "20,000 int keys of 2, 10 or 50 rows each (shuffled), a cheap pandas `fn`: `assign` "
        "(`pdf.assign(x=pdf.v - pdf.v.mean())`, every row back) and `summary` (one row of key, rows "
        "and mean). dpa's `GroupApply` on 2 workers, every other knob at its default, against "
        "pandas' single-process `groupby(\"key\").apply(fn)` on the frame already in pandas, the "
        "two alternating, every answer checked against pandas'. Warm = median of the reps after "
        "the first (cold) run; `ratio` = dpa / pandas (target <= 0.75 at 10 rows a group on 2 "
        "cores). See [group_apply.md](group_apply.md#many-small-groups).",
        ("fn", "group_rows", "groups", "engine", "median_s", "spread_s", "cold_s", "ratio", "units",
         "status"),
    ),
    "group_apply_first": Entry(
        "Per-group functions: the first jobs of a pool",
        "The sleep workload of `group_apply` (40,000 Zipf(1.1) records, 1 ms per row, 8 workers) "
        "run N times in a row on a new pool, for each of P fresh pools: each job's time over the "
        "bound max(work / 8, largest group); job 0 starts the pool.",
        ("job", "median_x_bound", "x_bound_runs", "median_s", "status"),
    ),
    "aggregations": Entry(
        "Aggregations: several aggregates in one pass",
        "10M rows, Zipf(1.1) keys over 100,000 values: five aggregates per key in one dpa job "
        "against a single `Count` job, five separate dpa jobs, pyarrow's `group_by().aggregate` "
        "and DuckDB, each peer's own count beside, same run (`x_count` = time / dpa's Count job's; "
        "`x_own_count` = time / the same engine's count). `stragglers`: the 40,000-record "
        "Zipf job at 1 ms per record, 8 reducers, with `[WithCost(Count()), CountDistinct(v)]` "
        "beside `WithCost(Count())` alone (`x_ideal` = time / (work / 8)).",
    ),
    "aggregations_peers": Entry(
        "Aggregations: dpa beside DuckDB and Polars",
        "The five aggregates per key (`count`, `sum`, `avg`, `stddev_samp`, `max`) and the "
        "distinct/quantile pass (`count(DISTINCT)`, `approx_count_distinct`, a 0.95 quantile) on one "
        "Zipf(1.1) table: dpa's one pass on Ray with `JobConfig()` defaults, its Count job, and "
        "DuckDB's and Polars' own group-by of the same Arrow table in this process, taking turns run "
        "by run (`x_one_pass` = time / dpa's one pass; `x_duckdb` = time / DuckDB's distinct pass). "
        "Every engine's answers are checked against dpa's (`checks`): counts, sums, maxima and "
        "exact distinct counts equal, means and deviations within 1e-9; the approximate columns' "
        "largest relative error over keys of at least 1,000 rows.",
    ),
    "aggregations_kernels": Entry(
        "Aggregations: the group-by per aggregate on one block",
        "One 1.67M-row block of the 10M-row table (what a mapper combines at once), in one process "
        "with the heap thresholds of dpa's hosts, "
        "by Arrow's hash group-by and by dpa's (by key value for this integer key, Arrow's below 8,192 "
        "groups but for counts): the count per key, what each aggregate of the five adds to it, and all "
        "of them (ms), at the table's keys and with the keys folded to 1,024 and 8 values; and apart, "
        "the distinct sessions per key (`CountDistinct(\"session\")`'s aggregate), of the integer "
        "sessions and of the same written as strings.",
    ),
    "first_job": Entry(
        "First job of a wide pool: cold against warm",
        "4 mappers and 8 reducers, 20,000 Zipf records at 1 ms each, each trial in a fresh process "
        "with a fresh Ray: the first (cold) job, which starts the actors, against the same job "
        "warm; RSS and PSS per actor process (the coordinator and the hosts running the members), "
        "and the PSS summed over them.",
    ),
    "first_job_bytecode": Entry(
        "First job of a wide pool: with and without dpa's bytecode cached",
        "The first-job benchmark with its trials alternating between dpa's compiled bytecode "
        "cached (as `pip install` and `./run.sh setup` leave it) and removed (every process of "
        "the pool then compiles dpa's sources inside the first job).",
    ),
    "spark_paths": Entry(
        "Spark bridge paths: RayDP and Parquet staging",
        "1M rows counted and summed per key through the bridge's RayDP path and its staged path "
        "(Spark writes Parquet, dpa reads it, results come back as Parquet), against Spark's own "
        "`groupBy`, on PySpark 3.5 with RayDP and on PySpark 4 without it.",
    ),
    "scale": Entry(
        "Width on Ray: 16 to 256 logical reducers",
        "Ray with 8 logical CPUs on the 2-core machine; reducers sleep 2 ms per record, 1,000 "
        "records each (ideal 2 s at every width), `JobConfig()` but the width; time over ideal, "
        "CPU per reducer-second, exact against DuckDB. See [scale.md](scale.md).",
    ),
    "multinode": Entry(
        "Several Ray nodes, one killed mid-job",
        "Ray nodes started with `ray start` on this machine, a job of one reducer per logical "
        "CPU sleeping per record; the fault-free time, then a worker node killed at half of it: "
        "time, recovery and exactness. See [scale.md](scale.md).",
    ),
}


def entry_for(stem: str) -> Entry | None:
    """The entry of ``stem``: its own, else the longest registered prefix's, else None."""
    if stem in BENCHMARKS:
        return BENCHMARKS[stem]
    prefixes = [name for name in BENCHMARKS if stem.startswith(name + "_")]
    return BENCHMARKS[max(prefixes, key=len)] if prefixes else None


def order(paths: Sequence[Path]) -> list[Path]:
    """Registered files first (in :data:`BENCHMARKS` order), then the others by name."""
    rank = {name: i for i, name in enumerate(BENCHMARKS)}

    def key(path: Path) -> tuple[int, str]:
        stem = path.stem
        known = [rank[name] for name in BENCHMARKS if stem == name or stem.startswith(name + "_")]
        return (min(known) if known else len(rank), stem)

    return sorted(paths, key=key)


def fmt(value: Any) -> str:
    """A table cell: numbers to 3 significant digits (thousands separated), lists shortened."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != value:  # NaN
            return "–"
        if value == 0:
            return "0"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.3g}"
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value) and value:
            shown = ", ".join(fmt(float(v)) for v in value[:6])
            return shown + (", …" if len(value) > 6 else "")
        return "–" if not value else f"{len(value)} items"
    if isinstance(value, Mapping):
        return f"{len(value)} fields"
    return str(value).replace("|", "\\|").replace("\n", " ")


def scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def command_of(payload: Mapping[str, Any]) -> str | None:
    """The recorded command, without its ``--out``/``--json`` argument and interpreter path."""
    command = payload.get("command")
    if not isinstance(command, str):
        return None
    command = re.sub(r"\s--(out|json)(=|\s+)\S+", "", command)
    return re.sub(r"^\S*python\S*\s", "python ", command)


def machine_of(payload: Mapping[str, Any]) -> str:
    env = payload.get("env")
    if not isinstance(env, Mapping):
        return "not recorded"
    parts = []
    if env.get("cpus") is not None:
        parts.append(f"{env['cpus']} CPUs")
    versions = ", ".join(f"{name} {env[name]}" for name in ("python", "ray", "pyarrow") if env.get(name))
    if versions:
        parts.append(versions)
    if env.get("time"):
        parts.append(f"measured {env['time']}")
    return "; ".join(parts) or "not recorded"


def busy(payload: Mapping[str, Any]) -> bool:
    """Whether the run was taken on a machine busy with other work (its 1-minute load average
    above :data:`BUSY_LOAD_PER_CPU` per CPU): its times are mostly the wait for a CPU."""
    env = payload.get("env")
    if not isinstance(env, Mapping):
        return False
    try:
        return float(env["load_avg_1m"]) > BUSY_LOAD_PER_CPU * max(1, int(env.get("cpus") or 1))
    except (KeyError, TypeError, ValueError):
        return False


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] = ()) -> list[str]:
    """A markdown table of ``rows`` (dicts): the given columns that occur, else every column
    whose values are scalars or lists of numbers, at most :data:`MAX_COLUMNS`. The machine's
    load (``load_avg_*`` columns) is the run's condition, not a figure: it is left out."""
    rows = [r for r in rows if isinstance(r, Mapping)]
    if not rows:
        return []
    seen: list[str] = []
    for r in rows:
        for k, v in r.items():
            if k not in seen and not k.startswith("load_avg") and (scalar(v) or isinstance(v, (list, tuple))):
                seen.append(k)
    cols = [c for c in columns if c in seen] or seen
    cols = cols[:MAX_COLUMNS]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r.get(c)) for c in cols) + " |")
    return lines


def row_lists(payload: Mapping[str, Any]) -> list[tuple[str, list[Mapping[str, Any]]]]:
    """The payload's tables: ``results`` first, then every other list of dicts, at the top
    level or one level down (``{"aggregates": {"rows": [...]}}`` is the table ``aggregates``)."""
    found = []
    for name, value in sorted(payload.items(), key=lambda kv: kv[0] != "results"):
        if isinstance(value, list) and value and all(isinstance(r, Mapping) for r in value):
            found.append((name, value))
        elif isinstance(value, Mapping) and name != "env":
            for inner, rows in value.items():
                if isinstance(rows, list) and rows and all(isinstance(r, Mapping) for r in rows):
                    found.append((name if inner in ("rows", "results") else f"{name}.{inner}", rows))
    return found


def section(path: Path) -> list[str]:
    """The markdown section of one results file."""
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return [f"## {path.stem}", "", f"`{path.name}` could not be read: {exc}", ""]
    if not isinstance(payload, Mapping):
        return [f"## {path.stem}", "", f"`{path.name}` holds no JSON object.", ""]
    entry = entry_for(path.stem)
    title = entry.title if entry else path.stem.replace("_", " ")
    if entry and path.stem not in BENCHMARKS:
        prefix = max((n for n in BENCHMARKS if path.stem.startswith(n + "_")), key=len)
        title = f"{title}: {path.stem[len(prefix) + 1:].replace('_', ' ')}"
    out = [f"## {title}", ""]
    out.append(entry.what if entry else f"No description registered for `{path.stem}` in `benchmarks/docs.py`.")
    out.append("")
    command = command_of(payload)
    out.append(f"- **Command:** `{command}`" if command else "- **Command:** not recorded")
    out.append(f"- **Machine:** {machine_of(payload)}")
    out.append(f"- **Figures:** [`benchmarks/results/{path.name}`](../benchmarks/results/{path.name})")
    out.append("")
    if busy(payload):
        out += ["The figures of this file's run are not shown: the machine was busy with other work "
                f"(load above {BUSY_LOAD_PER_CPU:g} per CPU), so they time the wait for a CPU. The command "
                "above re-takes them.", ""]
        return out
    tables = row_lists(payload)
    for name, rows in tables:
        if len(tables) > 1:
            out += [f"`{name}`:", ""]
        out += table(rows, entry.columns if entry else ())
        out.append("")
    if not tables:
        summary = {k: v for k, v in payload.items() if k not in ("env", "command") and scalar(v)}
        out += (table([summary]) if summary else ["(no figures in the file)"]) + [""]
    for note in entry.notes if entry else ():
        out += [note, ""]
    return out


def render(results: Path = RESULTS) -> str:
    """The whole page for the results files under ``results``."""
    paths = order(sorted(results.glob("*.json"))) if results.is_dir() else []
    lines = [
        "# Benchmarks",
        "",
        "<!-- Generated by `python -m benchmarks.docs` from benchmarks/results/*.json: do not edit. -->",
        "",
        "Each section is one benchmark's last run: what it measures, the command (add `--out "
        "benchmarks/results/<name>.json` to refresh its file, then run `python -m benchmarks.docs`), "
        "the machine, and its figures. Times are medians of the runs named, with their spread "
        "(min, max or every run) where the benchmark records it. Compare figures of the same run "
        "(ratios), not across runs.",
        "",
    ]
    peers = []
    for path in paths:
        entry = entry_for(path.stem)
        if entry is None or entry.headline is None:
            continue
        try:
            payload = json.loads(path.read_text())
            if busy(payload):
                continue
            peers += [{**row, "section": f"`{path.stem}`"} for row in entry.headline(payload)]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a file of another layout: its own section still shows it
    if peers:
        lines += ["## Against the peers", "", "Medians (with their range), from the sections below; "
                  "`dpa faster by` = the peer's time / dpa's (below 1: the peer is faster).", ""]
        lines += table(peers, ("job", "dpa", "peer", "peer's time", "dpa faster by", "section"))
        lines.append("")
    if not paths:
        lines += ["No results yet: run a benchmark with `--out benchmarks/results/<name>.json`.", ""]
    else:
        lines += ["Contents:", ""]
        for path in paths:
            entry = entry_for(path.stem)
            lines.append(f"- `{path.stem}`: {entry.title if entry else path.stem.replace('_', ' ')}")
        lines.append("")
    for path in paths:
        lines += section(path)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.docs", description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder of results JSON files")
    parser.add_argument("--page", type=Path, default=PAGE, help="page to write")
    parser.add_argument("--check", action="store_true", help="exit 1 if the page differs from what it would be")
    args = parser.parse_args(argv)
    text = render(args.results)
    if args.check:
        current = args.page.read_text() if args.page.exists() else ""
        if current != text:
            print(f"{args.page} is out of date: run python -m benchmarks.docs", file=sys.stderr)
            return 1
        return 0
    args.page.parent.mkdir(parents=True, exist_ok=True)
    args.page.write_text(text)
    print(f"wrote {args.page} ({len(text.splitlines())} lines, {text.count(chr(10) + '## ')} sections)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
