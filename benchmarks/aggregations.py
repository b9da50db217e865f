"""Several aggregates per key: one dpa pass vs one job per aggregate vs pyarrow vs DuckDB.

**Five aggregates** (``--rows``, default 10M records, Zipf(``--z``=1.1) keys over ``--keys``
(default 100k) keys, on Ray with ``JobConfig()`` defaults): per key ``count(1)``,
``sum(amount)``, ``avg(latency)``, ``stddev_samp(latency)`` and ``max(amount)``

* **one pass**: ``dpa.run(table, "key", [Count(), Sum("amount"), Mean("latency"), Std("latency"), Max("amount")])``;
* **count**: the single ``dpa.run(table, "key", Count())`` job the one pass is measured against;
* **five jobs**: the five aggregates as five separate ``dpa.run`` jobs, one after the other;
* **pyarrow**: ``table.group_by("key").aggregate([...])`` in this process (no Ray);
* **duckdb**: ``SELECT key, count(*), sum(amount), ... GROUP BY key`` over the same Arrow
  table, in this process;
* **polars**: ``pl.from_arrow(table).group_by("key").agg([...])`` of the five, where Polars is
  installed (else a message says its rows are left out);
* **pyarrow count**, **duckdb count**, **polars count**: each peer's count per key, so that
  ``x_own_count`` (five aggregates over the same engine's count) compares the one-pass cost
  across engines.

The Count job, the one pass, DuckDB's five and Polars' five take turns, run by run
(``x_one_pass``: time / dpa's one pass). After the timed runs every engine's answers are
checked against dpa's (``checks``): counts, sums, maxima and exact distinct counts equal,
means and deviations within a relative 1e-9, and the approximate columns' largest relative
error against the exact answer reported.

``--sketches`` also times a pass with ``count(DISTINCT session)`` and ``percentile_approx(latency,
0.95)`` (exact distinct sets and KLL sketches), against DuckDB's ``count(DISTINCT ...)`` and
``approx_quantile``. ``--distinct`` times the distinct/quantile pass alone,
``[CountDistinct("session"), ApproxCountDistinct("session"), ApproxQuantile("latency", 0.95)]``,
beside DuckDB's ``count(DISTINCT session), approx_count_distinct(session),
approx_quantile(latency, 0.95)`` and, where Polars is installed, its ``n_unique``,
``approx_n_unique`` and ``quantile(0.95)`` on the same Arrow table; the three engines take
turns, run by run, and
``x_duckdb`` divides by DuckDB's median. Each variant runs ``--reps`` times after ``--warmup`` untimed runs (default
1: the actors' and this process's first full-size run grows their heaps and pays the page
faults; ``runs_s`` and ``warmup_s`` keep every time), the count and the one pass in turn;
the figures are medians with their spread (max - min). The count and the one pass also
record the CPU seconds each run took in the pool's hosts, its coordinator and the driver
(``cpu_s``). Target: one pass <= 1.5x the single
Count job.

**Costly skewed keys** (``--stragglers``): the stragglers workload (``benchmarks.stragglers``:
N=40k records, Zipf(1.1) over 10k keys, a 1 ms sleep per record on 8 reducers, ideal
makespan ``N * c / 8`` = 5 s) with ``[WithCost(Count(), c), CountDistinct("v")]`` and
``num_reducers=8``, otherwise defaults, interleaved with ``WithCost(Count(), c)``
alone as the peer. Target: <= 1.15x ideal.

**Kernels** (``--kernels``, ``--only-kernels``): the group-by of one block of the table
(``--block-rows``, one of the six blocks the 10M table is cut into), in this process, by
Arrow's hash group-by and by dpa's (``dpa.aggregates.dense.group_aggregate``: by key value
for a dense integer key), with the heap thresholds of dpa's hosts: the count per key, what each aggregate of the five adds to it,
and all of them, at the table's keys and with the keys folded to 1,024 and 8 values; and
apart, the distinct sessions per key (``CountDistinct("session")``'s aggregate), of the
integer sessions and of the same written as strings.

Run (small, about a minute)::

    python -m benchmarks.aggregations --rows 1M --reps 2

Full::

    python -m benchmarks.aggregations --rows 10M --reps 7 --sketches --stragglers --out benchmarks/results/aggregations.json
    python -m benchmarks.aggregations --only-kernels --out benchmarks/results/aggregations_kernels.json
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.common import (
    CpuMeter,
    base_parser,
    init_ray,
    median,
    parse_int,
    print_table,
    stop_ray,
    write_json,
)


def make_table(rows: int, keys: int, z: float, seed: int) -> pa.Table:
    """Zipf keys with an int amount, a float latency and an int session id per record."""
    from workloads.generators import zipf

    key = zipf(z, keys, rows, seed=seed)["key"]
    rng = np.random.default_rng(seed + 1)
    return pa.table({"key": key, "amount": rng.integers(0, 10_000, rows), "latency": rng.exponential(20.0, rows),
                     "session": rng.integers(0, 200_000, rows)})


def five() -> list[Any]:
    import dpa

    return [dpa.Count(), dpa.Sum("amount"), dpa.Mean("latency"), dpa.Std("latency"), dpa.Max("amount")]


def sketches() -> list[Any]:
    import dpa

    return [dpa.Count(), dpa.Sum("amount"), dpa.Mean("latency"), dpa.CountDistinct("session"),
            dpa.ApproxQuantile("latency", q=0.95)]


def distinct_trio() -> list[Any]:
    import dpa

    return [dpa.CountDistinct("session"), dpa.ApproxCountDistinct("session"), dpa.ApproxQuantile("latency", q=0.95)]


#: Why the Polars rows are missing, printed once (None: Polars is installed, or not asked yet).
POLARS_MISSING = ("polars is not installed: the Polars rows are left out (pip install polars, or the project's "
                  "test extra)")
_polars_told = False


def polars_module() -> Any | None:
    """The ``polars`` module, or None (saying once, on the console, that its rows are left out)."""
    global _polars_told
    try:
        import polars as pl
    except ImportError:
        if not _polars_told:
            print(POLARS_MISSING, flush=True)
            _polars_told = True
        return None
    return pl


def polars_job(table: pa.Table, exprs: Callable[[Any], list[Any]]) -> Callable[[], int] | None:
    """Polars' group-by of ``table`` by ``key`` (``exprs(pl)`` the aggregations), or None
    without Polars."""
    pl = polars_module()
    if pl is None:
        return None
    frame = pl.from_arrow(table)
    return lambda: frame.group_by("key").agg(exprs(pl)).height


def polars_five(pl: Any) -> list[Any]:
    """The five aggregates in Polars (``std``: the sample standard deviation, ddof 1), named as dpa's."""
    exprs = [pl.len(), pl.col("amount").sum(), pl.col("latency").mean(), pl.col("latency").std(),
             pl.col("amount").max()]
    return [e.alias(name) for e, name in zip(exprs, FIVE_COLUMNS)]


def polars_trio(pl: Any) -> list[Any]:
    """The distinct/quantile pass in Polars, named as dpa's."""
    exprs = [pl.col("session").n_unique(), pl.col("session").approx_n_unique(), pl.col("latency").quantile(0.95)]
    return [e.alias(name) for e, name in zip(exprs, TRIO_COLUMNS)]


#: The five aggregates in SQL (DuckDB), and the distinct/quantile pass.
DUCKDB_FIVE = "count(*), sum(amount), avg(latency), stddev_samp(latency), max(amount)"
DUCKDB_TRIO = "count(DISTINCT session), approx_count_distinct(session), approx_quantile(latency, 0.95)"
#: The columns of each pass as dpa names them; ``EXACT`` those every engine must agree on
#: exactly, ``CLOSE`` within a relative 1e-9 (float sums in another order), the rest
#: approximate by design (their relative error against the exact answer is reported).
FIVE_COLUMNS = ["count(1)", "sum(amount)", "avg(latency)", "stddev_samp(latency)", "max(amount)"]
TRIO_COLUMNS = ["count(DISTINCT session)", "approx_count_distinct(session)", "percentile_approx(latency, 0.95)"]
EXACT = {"count(1)", "sum(amount)", "max(amount)", "count(DISTINCT session)"}
CLOSE = {"avg(latency)", "stddev_samp(latency)"}
#: Keys the approximate columns' error is reported over: those of at least this many rows.
APPROX_MIN_ROWS = 1000


def answers(table: pa.Table, dpa_reducer: list[Any], sql: str, polars_exprs: Callable[[Any], list[Any]] | None,
            columns: list[str], **cfg: Any) -> dict[str, pa.Table]:
    """Each engine's answer to one pass, sorted by key, its columns named as dpa's."""
    import duckdb

    import dpa

    got = {"dpa": dpa.run(table, key="key", reducer=dpa_reducer, **cfg).to_arrow().select(["key", *columns])}
    con = duckdb.connect()
    con.register("t", table)
    got["duckdb"] = con.sql(f"SELECT key, {sql} FROM t GROUP BY key").to_arrow_table().rename_columns(["key", *columns])
    pl = polars_module() if polars_exprs is not None else None
    if pl is not None:
        got["polars"] = pl.from_arrow(table).group_by("key").agg(polars_exprs(pl)).to_arrow().rename_columns(
            ["key", *columns])
    return {name: t.sort_by("key") for name, t in got.items()}


def compare(got: dict[str, pa.Table], exact: pa.Table | None = None) -> dict[str, Any]:
    """Checks the engines' answers against dpa's: the keys, the :data:`EXACT` columns equal,
    the :data:`CLOSE` ones within a relative 1e-9; for the approximate columns, each engine's
    largest relative error against ``exact`` (the exact answer, same keys and columns, and
    each key's ``rows``) over the keys of at least :data:`APPROX_MIN_ROWS` rows (where a
    sketch is an estimate; a quantile of a few rows differs between engines by their
    interpolation rule, not by the sketch).

    Returns:
        ``{"status": "ok" or the first mismatch, "approx_max_rel_error": {engine: {column: error}}}``.
    """
    ref = got["dpa"]
    problems: list[str] = []
    errors: dict[str, dict[str, float]] = {}
    for name, table in got.items():
        if table["key"].to_pylist() != ref["key"].to_pylist():
            problems.append(f"{name}: {table.num_rows} keys, dpa has {ref.num_rows} (or other keys)")
            continue
        for column in ref.column_names[1:]:
            mine = table[column].to_numpy().astype(np.float64)
            if column in EXACT and name != "dpa":
                bad = np.flatnonzero(mine != ref[column].to_numpy().astype(np.float64))
                if len(bad):
                    problems.append(f"{name}: {column} differs from dpa's at {len(bad)} keys, e.g. key "
                                    f"{ref['key'][int(bad[0])].as_py()}: {mine[bad[0]]} vs {ref[column][int(bad[0])].as_py()}")
            elif column in CLOSE and name != "dpa":
                want = ref[column].to_numpy().astype(np.float64)
                if not np.allclose(mine, want, rtol=1e-9, atol=0.0, equal_nan=True):
                    problems.append(f"{name}: {column} differs from dpa's by more than 1e-9 (relative)")
            elif column not in EXACT and column not in CLOSE and exact is not None:
                big = exact["rows"].to_numpy() >= APPROX_MIN_ROWS
                want = exact[column].to_numpy().astype(np.float64)[big]
                rel = np.abs(mine[big] - want) / np.maximum(np.abs(want), 1e-300)
                errors.setdefault(name, {})[column] = float(np.nanmax(rel)) if len(rel) else 0.0
    return {"status": problems[0] if problems else "ok", "problems": problems, "approx_max_rel_error": errors}


def exact_trio(table: pa.Table) -> pa.Table:
    """The exact answer of the distinct/quantile pass (DuckDB's ``count(DISTINCT)`` for both
    distinct columns; ``quantile_disc`` for the quantile) and each key's ``rows``, sorted by
    key, named as dpa's."""
    import duckdb

    con = duckdb.connect()
    con.register("t", table)
    return con.sql("SELECT key, count(DISTINCT session), count(DISTINCT session), "
                   "quantile_disc(latency, 0.95), count(*) FROM t GROUP BY key ORDER BY key").to_arrow_table(
    ).rename_columns(["key", *TRIO_COLUMNS, "rows"])


def timed(fn: Callable[[], Any], reps: int, warmup: int = 0) -> dict[str, Any]:
    """Runs ``fn`` ``warmup`` times untimed (their times kept apart), then ``reps`` times."""
    return timed_alternately([fn], reps, warmup)[0]


def timed_alternately(fns: list[Callable[[], Any]], reps: int, warmup: int = 0,
                      cpu: bool = False) -> list[dict[str, Any]]:
    """:func:`timed` for several functions, run in turn: ``warmup`` untimed rounds, then ``reps``.

    With ``cpu``, also the CPU seconds each timed run took in each role's processes (the
    pool's hosts together, its coordinator, this driver; ``benchmarks.common.CpuMeter``):
    ``cpu_s`` holds their medians, ``cpu_runs_s`` every run's.
    """
    warm: list[list[float]] = [[] for _ in fns]
    times: list[list[float]] = [[] for _ in fns]
    cpus: list[list[dict[str, float]]] = [[] for _ in fns]
    for r in range(warmup + reps):
        for i, fn in enumerate(fns):
            meter = CpuMeter() if cpu else None
            if meter is not None:
                meter.start()
            t0 = time.perf_counter()
            fn()
            (warm if r < warmup else times)[i].append(time.perf_counter() - t0)
            if meter is not None and r >= warmup:
                used = meter.stop()
                cpus[i].append({role: used.get(role, 0.0) for role in CPU_ROLES})
    out = [{"median_s": median(t), "spread_s": max(t) - min(t), "runs_s": t, "warmup_s": w} for t, w in zip(times, warm)]
    if cpu:
        for row, runs in zip(out, cpus):
            row["cpu_s"] = {role: median([c[role] for c in runs]) for role in CPU_ROLES}
            row["cpu_runs_s"] = runs
    return out


#: The processes whose CPU the Count job and the one pass are charged (``benchmarks.common.role_of``).
CPU_ROLES = ("host", "coordinator", "driver", "total")


def dpa_job(table: pa.Table, reducer: Any, **cfg: Any) -> Callable[[], int]:
    import dpa

    def run() -> int:
        return dpa.run(table, key="key", reducer=reducer, **cfg).to_arrow().num_rows

    return run


def pyarrow_job(table: pa.Table, aggs: list[tuple[str, str]]) -> Callable[[], int]:
    return lambda: table.group_by("key").aggregate(aggs).num_rows


def duckdb_job(table: pa.Table, select: str) -> Callable[[], int]:
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads TO {os.cpu_count() or 1}")
    con.register("t", table)
    return lambda: len(con.execute(f"SELECT key, {select} FROM t GROUP BY key").fetchall())


def run_aggregates(args: Any) -> dict[str, Any]:
    import dpa

    table = make_table(args.rows, args.keys, args.z, args.seed)
    print(f"table: {args.rows:,} records, {args.keys:,} Zipf({args.z}) keys", flush=True)
    init_ray()
    dpa_job(table.slice(0, 100_000), five())()  # start and warm the actors (untimed)
    rows = []

    def add(name: str, fn: Callable[[], Any], timing: dict[str, Any] | None = None) -> dict[str, Any]:
        row = {"variant": name, **(timing or timed(fn, args.reps, args.warmup))}
        rows.append(row)
        print(f"{name:<28} {row['median_s']:7.2f}s  (spread {row['spread_s']:.2f}s)", flush=True)
        return row

    # The Count job, the one pass and DuckDB's and Polars' own five-aggregate group-by
    # alternate, run by run: their ratios are what is compared, and the machine's speed drifts.
    cfg = {} if args.batch_size is None else {"batch_size": args.batch_size}
    peers = {"duckdb (5)": duckdb_job(table, DUCKDB_FIVE)}
    polars_five_job = polars_job(table, polars_five)
    if polars_five_job is not None:
        peers["polars (5)"] = polars_five_job
    turns = timed_alternately([dpa_job(table, dpa.Count(), **cfg), dpa_job(table, five(), **cfg), *peers.values()],
                              args.reps, args.warmup, cpu=True)
    count = add("dpa count (1 aggregate)", None, turns[0])
    one = add("dpa one pass (5 aggregates)", None, turns[1])
    add("dpa 5 separate jobs", lambda: [dpa_job(table, r, **cfg)() for r in five()])
    arrow_count = add("pyarrow count", pyarrow_job(table, [("key", "count")]))
    add("pyarrow group_by (5)", pyarrow_job(table, [("key", "count"), ("amount", "sum"), ("latency", "mean"),
                                                     ("latency", "stddev", pa.compute.VarianceOptions(ddof=1)),
                                                     ("amount", "max")]))
    duck_count = add("duckdb count", duckdb_job(table, "count(*)"))
    for (name, _), timing in zip(peers.items(), turns[2:]):
        add(name, None, {k: v for k, v in timing.items() if not k.startswith("cpu")})
    polars_count = None
    if polars_five_job is not None:
        polars_count = add("polars count", polars_job(table, lambda pl: [pl.len()]))
    checks = {"five": compare(answers(table, five(), DUCKDB_FIVE, polars_five, FIVE_COLUMNS, **cfg))}
    print(f"answers of the five aggregates (dpa, duckdb{', polars' if polars_count else ''}): "
          f"{checks['five']['status']}", flush=True)
    out: dict[str, Any] = {"rows": rows, "one_pass_over_count": one["median_s"] / count["median_s"],
                           "polars": polars_version(), "checks": checks}
    if args.distinct:
        out["distinct"] = run_distinct(table, args, cfg, add)
        checks["distinct"] = out["distinct"].pop("check")
    if args.sketches:
        sk = add("dpa one pass with sketches", dpa_job(table, sketches(), **cfg))
        add("duckdb with sketches", duckdb_job(
            table, "count(*), sum(amount), avg(latency), count(DISTINCT session), approx_quantile(latency, 0.95)"))
        out["sketches_over_count"] = sk["median_s"] / count["median_s"]
    stop_ray()
    for row in rows:
        row["x_count"] = row["median_s"] / count["median_s"]
        row["x_one_pass"] = row["median_s"] / one["median_s"]
        own = duck_count if row["variant"].startswith("duckdb") else (
            arrow_count if row["variant"].startswith("pyarrow") else
            polars_count if row["variant"].startswith("polars") else count)
        row["x_own_count"] = row["median_s"] / own["median_s"]
    out["peers_five_over_count"] = {name: next(r["x_own_count"] for r in rows if r["variant"] == name)
                                    for name in ("pyarrow group_by (5)", "duckdb (5)", "polars (5)")
                                    if any(r["variant"] == name for r in rows)}
    out["five_over_peers"] = {name: one["median_s"] / next(r["median_s"] for r in rows if r["variant"] == name)
                              for name in ("pyarrow group_by (5)", "duckdb (5)", "polars (5)")
                              if any(r["variant"] == name for r in rows)}
    print_table(rows, ["variant", "median_s", "spread_s", "x_count", "x_own_count", "x_one_pass"],
                title=f"{args.rows:,} records, {args.keys:,} keys, median of {args.reps} (x_count: / the dpa Count "
                      f"job; x_own_count: / the same engine's count; x_one_pass: / dpa's one pass)")
    print_table([{"variant": row["variant"], **{f"{role}_cpu_s": row["cpu_s"][role] for role in CPU_ROLES}}
                 for row in (count, one)], title="CPU seconds per job (median; host: the pool's hosts together)")
    print(f"one pass / single Count job = {out['one_pass_over_count']:.2f}x; dpa's one pass / "
          + ", ".join(f"{name} {x:.2f}x" for name, x in out["five_over_peers"].items()))
    for name, check in checks.items():
        print(f"answers ({name}): {check['status']}")
    return out


def polars_version() -> str | None:
    """Polars' version, or None when it is not installed."""
    pl = polars_module()
    return None if pl is None else pl.__version__


def run_distinct(table: pa.Table, args: Any, cfg: dict[str, Any], add: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """The distinct/quantile pass: dpa, DuckDB and Polars in turn (see the module docstring)."""
    jobs = {"dpa distinct+approx+quantile": dpa_job(table, distinct_trio(), **cfg),
            "duckdb distinct+approx+quantile": duckdb_job(table, DUCKDB_TRIO)}
    polars = polars_job(table, polars_trio)
    if polars is not None:
        jobs["polars distinct+approx+quantile"] = polars
    timings = timed_alternately(list(jobs.values()), args.reps, args.warmup)
    rows = {name: add(name, None, timing) for name, timing in zip(jobs, timings)}
    duck = rows["duckdb distinct+approx+quantile"]["median_s"]
    for row in rows.values():
        row["x_duckdb"] = row["median_s"] / duck
    print(f"dpa distinct/quantile pass / DuckDB's = {rows['dpa distinct+approx+quantile']['x_duckdb']:.2f}x "
          "(target <= 1.5x)")
    check = compare(answers(table, distinct_trio(), DUCKDB_TRIO, polars_trio if polars else None, TRIO_COLUMNS, **cfg),
                    exact_trio(table))
    print(f"answers of the distinct/quantile pass: {check['status']}; largest relative error of the approximate "
          f"columns: {check['approx_max_rel_error']}", flush=True)
    return {"x_duckdb": {name: row["x_duckdb"] for name, row in rows.items()}, "check": check}


#: Arrow hash aggregates of the five, as the one pass asks for them (Mean's sum and count of
#: latency, Std's count, mean and variance of it: the count once).
KERNELS = [("count", ([], "count_all")), ("sum(amount)", ("amount", "sum")), ("sum(latency)", ("latency", "sum")),
           ("count(latency)", ("latency", "count")), ("mean(latency)", ("latency", "mean")),
           ("variance(latency)", ("latency", "variance")), ("max(amount)", ("amount", "max"))]


#: ``CountDistinct("session")``'s aggregate (timed alone): the distinct non-null sessions per key;
#: and the same of the sessions written as strings (``"s-123"``).
DISTINCT_KERNEL = ("session", "distinct", pc.CountOptions(mode="only_valid"))
DISTINCT_TEXT_KERNEL = ("session_text", "distinct", pc.CountOptions(mode="only_valid"))


def run_kernels(args: Any) -> dict[str, Any]:
    """Where a block's time goes: the group-by of one block of the table (what a mapper
    combines), the count alone, the count with each other aggregate, and all of them (and,
    apart, the distinct sessions per key that ``CountDistinct("session")`` asks for, of the
    integer sessions and of the same written as strings); by
    Arrow's hash group-by and by dpa's (:func:`dpa.aggregates.dense.group_aggregate`, which
    indexes groups by key value when the key is a dense integer); at the table's keys and at
    fewer distinct keys (the same rows, keys folded)."""
    from dpa.aggregates.dense import group_aggregate
    from dpa.runtime.ray.heap import keep_freed_memory

    keep_freed_memory()  # (as the hosts that combine blocks run)
    engines: dict[str, Callable[[pa.Table, list[Any]], Any]] = {
        "arrow": lambda block, aggs: block.group_by(["key"], use_threads=False).aggregate(aggs),
        "dpa": lambda block, aggs: group_aggregate(block, ["key"], aggs),
    }
    table = make_table(args.block_rows, args.keys, args.z, args.seed)
    rows = []
    for keys in (table["key"], pa.compute.bit_wise_and(table["key"], 1023), pa.compute.bit_wise_and(table["key"], 7)):
        block = table.set_column(0, "key", keys)
        block = block.append_column("session_text", pc.binary_join_element_wise(
            "s-", pc.cast(block["session"], pa.string()), "")).combine_chunks()
        groups = len(pa.compute.unique(keys))
        for engine, group_by in engines.items():

            def cost(aggs: list[Any], block: pa.Table = block, group_by: Any = group_by) -> float:
                return timed(lambda: group_by(block, aggs), args.kernel_reps)["median_s"]

            count = cost([KERNELS[0][1]])
            row: dict[str, Any] = {"groups": groups, "engine": engine, "count_ms": 1000 * count}
            for name, agg in KERNELS[1:]:
                row[f"+{name}_ms"] = 1000 * (cost([KERNELS[0][1], agg]) - count)
            row["all_ms"] = 1000 * cost([agg for _, agg in KERNELS])
            row["distinct(session)_ms"] = 1000 * cost([DISTINCT_KERNEL])
            row["distinct(session as text)_ms"] = 1000 * cost([DISTINCT_TEXT_KERNEL])
            rows.append(row)
    print_table(rows, list(rows[0]), title=f"group-by of one {args.block_rows:,}-row block (Arrow's hash group-by; dpa's, "
                                           f"by key value): the count, what each aggregate adds to it, all of them "
                                           f"(ms, median of {args.kernel_reps})")
    return {"block_rows": args.block_rows, "reps": args.kernel_reps, "rows": rows}


def run_stragglers(args: Any) -> dict[str, Any]:
    import dpa
    from workloads.generators import zipf

    cost = args.cost_ms / 1000.0
    table = zipf(1.1, 10_000, args.straggler_rows, seed=args.seed)
    table = table.append_column("v", pa.array(np.random.default_rng(args.seed).integers(0, 500, table.num_rows)))
    ideal = table.num_rows * cost / 8
    variants = {
        "[WithCost(Count()), CountDistinct('v')]": [dpa.WithCost(dpa.Count(), cost), dpa.CountDistinct("v")],
        "WithCost(Count()) alone": dpa.WithCost(dpa.Count(), cost),
    }
    init_ray()
    dpa.run(table.slice(0, 2000), key="key", reducer=variants["WithCost(Count()) alone"], num_reducers=8).to_arrow()
    runs: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.reps):  # interleaved, so both see the same load
        for name, reducer in variants.items():
            t0 = time.perf_counter()
            result = dpa.run(table, key="key", reducer=reducer, num_reducers=8)
            result.to_arrow()
            runs[name].append(time.perf_counter() - t0)
            print(f"stragglers {name}: {runs[name][-1]:.2f}s = {runs[name][-1] / ideal:.2f}x ideal "
                  f"({result.stats.policy}, {len(result.stats.rebalances)} rebalances, load {os.getloadavg()[0]:.0f})",
                  flush=True)
    stop_ray()
    rows = [{"reducer": name, "median_s": median(ts), "spread_s": max(ts) - min(ts), "x_ideal": median(ts) / ideal,
             "runs_s": ts} for name, ts in runs.items()]
    print_table(rows, ["reducer", "median_s", "spread_s", "x_ideal"],
                title=f"stragglers: {table.num_rows:,} records, {args.cost_ms} ms each, 8 reducers, ideal {ideal:.1f}s, "
                      f"median of {args.reps} (target <= 1.15x ideal)")
    return {"records": table.num_rows, "cost_ms": args.cost_ms, "ideal_s": ideal, "rows": rows,
            "x_ideal": rows[0]["x_ideal"], "over_count_alone": rows[0]["median_s"] / rows[1]["median_s"]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = base_parser(__doc__.split("\n")[0], 10_000_000)
    p.add_argument("--keys", type=parse_int, default=100_000, help="distinct keys (default 100k)")
    p.add_argument("--z", type=float, default=1.1, help="Zipf exponent (default 1.1)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1, help="untimed runs of each variant first (default 1)")
    p.add_argument("--sketches", action="store_true", help="also time count(DISTINCT) and p95 in one pass")
    p.add_argument("--distinct", action="store_true", help="also time the distinct/quantile pass beside DuckDB and "
                   "Polars")
    p.add_argument("--stragglers", action="store_true", help="also run the costly skewed case")
    p.add_argument("--only-stragglers", action="store_true")
    p.add_argument("--straggler-rows", type=parse_int, default=40_000)
    p.add_argument("--cost-ms", type=float, default=1.0)
    p.add_argument("--kernels", action="store_true", help="also time the group-by per aggregate on one block (Arrow's and dpa's)")
    p.add_argument("--block-rows", type=parse_int, default=1_666_667, help="rows of the --kernels block (one of six "
                   "blocks of the 10M table)")
    p.add_argument("--kernel-reps", type=int, default=9)
    p.add_argument("--only-kernels", action="store_true")
    args = p.parse_args(argv)
    payload: dict[str, Any] = {"command": "python -m benchmarks.aggregations " + " ".join(argv or sys.argv[1:])}
    if not (args.only_stragglers or args.only_kernels):
        payload["aggregates"] = run_aggregates(args)
    if args.kernels or args.only_kernels:
        payload["kernels"] = run_kernels(args)
    if args.stragglers or args.only_stragglers:
        payload["stragglers"] = run_stragglers(args)
    write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
