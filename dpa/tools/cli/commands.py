"""The commands that work on dpa itself: ``run``, ``simulate``, ``report`` and ``policies``.

Each ``cmd_*`` takes the parsed arguments and returns the exit code; mistakes on the
command line raise :class:`dpa.tools.cli.errors.UsageError`.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dpa.tools.cli import plugins
from dpa.tools.cli.errors import EXIT_FAILED, EXIT_OK, UsageError
from dpa.tools.cli.inputs import keys_of, load_input
from dpa.tools.cli.progress import run_with_progress
from dpa.tools.cli.ray_lifecycle import announce_dashboard, hold_dashboard, start_ray

logger = logging.getLogger(__name__)

OUTPUT_SUFFIXES = (".parquet", ".csv", ".json", ".jsonl")
REDUCERS = ("count", "sum", "min", "max", "mean")

#: Columns of the ``dpa simulate`` table, when the results have them.
SIM_COLUMNS = ("skew", "imbalance_fraction", "max_over_avg", "stddev_pct", "dist_cost", "forwarded",
               "rebalances", "makespan", "loads")


def register_policies() -> None:
    """Registers the optional policies of :mod:`dpa.routing.policies`, if they import."""
    try:
        importlib.import_module("dpa.routing.policies")
    except Exception as exc:  # a policy module being written may be missing
        logger.info("optional policies not available: %s", exc)


def list_inputs() -> int:
    """``--list`` of ``run``/``simulate``: the named workloads installed packages provide."""
    for line in plugins.listing(plugins.INPUTS):
        print(line)
    return EXIT_OK


# =================================================================================== run
def _group_function(spec: str) -> Any:
    """The function ``module:name`` of ``--apply`` (the current directory is importable)."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise UsageError(f"--apply takes MODULE:FUNCTION (e.g. --apply my_jobs:per_user), got {spec!r}")
    if "" not in sys.path:
        sys.path.insert(0, "")
    try:
        fn = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"--apply {spec}: cannot load {name!r} from module {module_name!r}: {exc}") from exc
    if not callable(fn):
        raise UsageError(f"--apply {spec}: {name!r} is a {type(fn).__name__}, not a function")
    return fn


def _reducer(args: argparse.Namespace, cols: Sequence[str] | None) -> Any:
    import dpa

    if getattr(args, "apply", None):  # a per-group function
        if args.reducer != "count" or args.value or getattr(args, "agg", None) or args.cost_us:
            raise UsageError("--apply runs a per-group function: drop --reducer, --value, --agg and --cost-us")
        return dpa.GroupApply(_group_function(args.apply))
    if getattr(args, "agg", None):  # several aggregates in one pass
        if args.reducer != "count" or args.value:
            raise UsageError("--agg replaces --reducer/--value: give every aggregate as --agg, e.g. --agg sum:bytes")
        from dpa.tools.cli.aggs import parse_aggs

        red: Any = parse_aggs(args.agg, cols)
        if args.cost_us < 0:
            raise UsageError(f"--cost-us must be >= 0, got {args.cost_us}")
        return [dpa.WithCost(red[0], args.cost_us * 1e-6, mode=args.cost_mode), *red[1:]] if args.cost_us > 0 else red
    if args.reducer == "count":
        if args.value:
            raise UsageError("--value is only used by --reducer sum/min/max/mean")
        red = dpa.Count()
    else:
        if not args.value:
            raise UsageError(f"--reducer {args.reducer} needs --value COLUMN")
        if cols is not None and args.value not in cols:
            raise UsageError(f"column {args.value!r} is not in the input; columns: {', '.join(cols)}")
        red = {"sum": dpa.Sum, "min": dpa.Min, "max": dpa.Max, "mean": dpa.Mean}[args.reducer](args.value)
    if args.cost_us < 0:
        raise UsageError(f"--cost-us must be >= 0, got {args.cost_us}")
    if args.cost_us > 0:
        red = dpa.WithCost(red, args.cost_us * 1e-6, mode=args.cost_mode)
    return red


def _config(args: argparse.Namespace, **changes: Any) -> Any:
    import dpa

    given = {"policy": args.policy, "tau": args.tau, "max_rounds": args.rounds, "initial_tokens": args.initial_tokens}
    fields: dict[str, Any] = dict(
        num_mappers=args.mappers, num_reducers=args.reducers, runtime=args.runtime,
        timeout_s=args.timeout, seed=args.seed, migrate=getattr(args, "migrate", "records"),
        max_reducers=getattr(args, "max_reducers", None), min_reducers=getattr(args, "min_reducers", None),
    )
    fields.update({name: value for name, value in given.items() if value is not None})  # else JobConfig()'s
    if args.batch_size is not None:
        fields["batch_size"] = args.batch_size
    if args.chunk_size is not None:
        fields["chunk_size"] = args.chunk_size
    if args.token_spacing is not None:
        fields["policy_options"] = {"token_spacing": args.token_spacing}
    fields.update(changes)
    return dpa.JobConfig().with_options(**fields)


def _describe_stats(stats: Any, baseline: Any = None, num_keys: int | None = None) -> list[str]:
    total = max(1, sum(stats.processed))
    loads = "  ".join(f"r{i}={n:,} ({100 * n / total:.0f}%)" for i, n in enumerate(stats.processed))
    virtual = "" if stats.virtual_time_s is None else f" (virtual {stats.virtual_time_s:.3f} s)"
    skew = f"S={stats.skew:.3f}" + ("" if baseline is None else f" (without LB: {baseline.skew:.3f})")
    lines = [f"done in {stats.wall_time_s:.2f} s{virtual}: {sum(stats.processed):,} records, "
             f"{num_keys if num_keys is not None else stats.num_keys:,} keys, {skew}",
             f"  processed per reducer: {loads}"]
    if baseline is not None:
        base_total = max(1, sum(baseline.processed))
        base = "  ".join(f"r{i}={n:,} ({100 * n / base_total:.0f}%)" for i, n in enumerate(baseline.processed))
        lines.append(f"  without LB:            {base}")
    lines.append(f"  forwarded: {sum(stats.forwarded):,}   ring version: {stats.ring_version}"
                 + ("" if stats.final_tokens is None else f"   tokens: {list(stats.final_tokens)}"))
    lines.append(f"  rebalances ({len(stats.rebalances)}):")
    for e in stats.rebalances[:20]:
        who = f"reducer {e.reducer}" if e.reducer >= 0 else "whole ring"
        lines.append(f"    t={e.time_s:.3f}s {e.action:<10} {who}  queues={list(e.queue_lengths)}"
                     f"  tokens after={list(e.tokens_after)}  v{e.version}")
    if len(stats.rebalances) > 20:
        lines.append(f"    ... {len(stats.rebalances) - 20} more (see --report)")
    if stats.merged_keys or stats.state_moves:
        lines.append(f"  final merge combined {stats.merged_keys:,} keys; {stats.state_moves:,} keys' state handed over")
    for e in stats.scaling:
        lines.append(f"    t={e.time_s:.3f}s {e.action:<9} reducers {list(e.reducers)} -> width {e.width}: {e.reason}")
    lines += _describe_apply(stats.group_apply)
    return lines


def _same_answer(a: Any, b: Any) -> bool:
    """Whether two results hold the same answer (a per-group function's rows in any order)."""
    if a.key_columns:
        return a.to_dict() == b.to_dict()
    return sorted(map(repr, a.to_arrow().to_pylist())) == sorted(map(repr, b.to_arrow().to_pylist()))


def _describe_apply(ga: dict[str, Any] | None) -> list[str]:
    """The apply phase of a per-group function (``Stats.group_apply``), if the job had one."""
    if not ga:
        return []
    rate = ga["seconds_per_row"]
    busy = "  ".join(f"w{i}={s:.2f}s" for i, s in enumerate(ga["busy_s"]))
    return [f"  groups applied: {ga['groups']:,} in {ga['units']:,} units; largest group {ga['largest_group_rows']:,} "
            f"rows; {'n/a' if rate is None else f'{rate * 1e6:.1f} us'} per row",
            f"  moved to a free worker: {ga['moved_units']:,} units ({ga['moved_groups']:,} groups, "
            f"{ga['moved_rows']:,} rows)",
            f"  busy per worker: {busy}"]


def _write_output(result: Any, path: str) -> None:
    table = result.to_arrow()
    suffix = Path(path).suffix.lower()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, path)
    elif suffix == ".csv":
        import pyarrow.csv as pacsv

        pacsv.write_csv(table, path)
    elif suffix == ".json":
        with open(path, "w", encoding="utf-8") as f:
            json.dump(table.to_pylist(), f, default=str)
    else:  # .jsonl
        with open(path, "w", encoding="utf-8") as f:
            for row in table.to_pylist():
                f.write(json.dumps(row, default=str) + "\n")


def _top_keys(result: Any, n: int) -> list[str]:
    import pyarrow.compute as pc

    table = result.to_arrow()
    value = result.value_columns[0]
    if n <= 0 or table.num_rows == 0 or value not in table.column_names:
        return []
    try:
        order = pc.sort_indices(table, sort_keys=[(value, "descending")])
    except Exception:  # values that do not sort (lists, ...)
        return []
    top = table.take(order[:n]).to_pylist()
    width = max(len(str(tuple(r[k] for k in result.key_columns) if len(result.key_columns) > 1
                       else r[result.key_columns[0]])) for r in top)
    lines = [f"top {len(top)} keys by {value}:"]
    for r in top:
        key = tuple(r[k] for k in result.key_columns) if len(result.key_columns) > 1 else r[result.key_columns[0]]
        v = r[value]
        lines.append(f"  {str(key):<{width}}  {v:,}" if isinstance(v, int) else f"  {str(key):<{width}}  {v}")
    return lines


def cmd_run(args: argparse.Namespace) -> int:
    """``dpa run``: one job (and, with ``--report``, its baseline without load balancing)."""
    if args.list:
        return list_inputs()
    register_policies()
    if args.output and Path(args.output).suffix.lower() not in OUTPUT_SUFFIXES:
        raise UsageError(f"--output must end in one of {', '.join(OUTPUT_SUFFIXES)}, got {args.output!r}")
    if args.dashboard and args.runtime != "ray":
        raise UsageError("--dashboard needs --runtime ray")
    config = _config(args)  # validates policy, tau, rounds, ... before reading anything
    baseline_config = None
    if args.report and not args.no_baseline:
        baseline_config = _config(args, max_rounds=0) if config.policy_name in ("halving", "doubling") \
            else _config(args, policy="hash", max_rounds=0)
    inp = load_input(args)
    cols = inp.source.column_names if hasattr(inp.source, "column_names") else None
    reducer = _reducer(args, cols)

    url = None
    if args.runtime == "ray":
        url = start_ray(dashboard=args.dashboard, verbose=args.verbose)
        if args.dashboard:
            announce_dashboard(url)
    show = not args.no_progress
    out = sys.stderr if args.json else sys.stdout
    print(f"dpa run: {inp.label}; policy={config.policy} tau={config.tau} rounds={config.max_rounds} "
          f"mappers={config.resolved().num_mappers} reducers={config.resolved().num_reducers} "
          f"runtime={config.runtime}", file=out, flush=True)
    common = dict(key=inp.key, reducer=reducer, map_fn=inp.map_fn)
    baseline = None
    if baseline_config is not None:
        baseline = run_with_progress(inp.source, total=inp.total, desc="baseline (no LB)", show=show,
                                     config=baseline_config, **common)
    result = run_with_progress(inp.source, total=inp.total, desc=f"{config.policy}", show=show, config=config, **common)
    stats = result.stats
    if args.json:
        payload = {"stats": stats.to_dict()}
        if baseline is not None:
            payload["baseline_stats"] = baseline.stats.to_dict()
        print(json.dumps(payload, default=str))
    else:
        for line in _describe_stats(stats, None if baseline is None else baseline.stats, len(result)):
            print(line)
        for line in ([] if not result.key_columns else _top_keys(result, args.top)):
            print(line)
    if args.output:
        _write_output(result, args.output)
        print(f"wrote {args.output} ({len(result):,} keys)", file=out)
    if baseline is not None and not _same_answer(baseline, result):
        print("dpa: error: the results with and without load balancing differ", file=sys.stderr)
        return EXIT_FAILED
    if args.report:
        from dpa.tools.report import write_report

        files = write_report(result, args.report, baseline_stats=None if baseline is None else baseline.stats,
                             title=f"{inp.name} {config.policy}",
                             initial_tokens=config.initial_tokens if config.policy_name in ("halving", "doubling") else None)
        print(f"report: {len(files)} files in {args.report}/ ({', '.join(f.name for f in files)})", file=out)
    if args.dashboard:
        hold_dashboard(url)
    return EXIT_OK


# ============================================================================== simulate
def _as_dict(value: Any) -> Any:
    if callable(getattr(value, "summary", None)):  # dpa.tools.simulate.SimResult
        out = dict(value.summary())
        loads = getattr(value, "loads", None)
        if loads is not None:
            out["loads"] = [int(x) for x in loads]
        return out
    if hasattr(value, "to_dict") and callable(value.to_dict):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, dict):
        return value
    if hasattr(value, "__dict__"):
        return {k: v for k, v in vars(value).items() if not k.startswith("_")}
    return value


def _short(value: Any) -> str:
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return str(value)
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.2e}" if 0 < abs(value) < 1e-3 else f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        items = ", ".join(_short(v) for v in value[:12])
        return f"[{items}{', ...' if len(value) > 12 else ''}] ({len(value)})" if len(value) > 12 else f"[{items}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_short(v)}" for k, v in list(value.items())[:8]) + (", ...}" if len(value) > 8 else "}")
    return str(value)


def _simulate_table(results: dict[str, Any]) -> list[str]:
    """One row per policy (known metrics), or every field per policy for other shapes."""
    if not all(isinstance(r, dict) for r in results.values()):
        return [f"{name}: {_short(r)}" for name, r in results.items()]
    cols = [c for c in SIM_COLUMNS if any(c in r for r in results.values())]
    if not cols:
        return [f"{name}: " + ", ".join(f"{k}={_short(v)}" for k, v in r.items()) for name, r in results.items()]
    rows = [["policy", *cols]]
    for name, r in results.items():
        rows.append([name, *[_short(r[c]) if c in r else "-" for c in cols]])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i in (0, len(widths) - 1) else c.rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths))).rstrip() for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    return lines


def cmd_simulate(args: argparse.Namespace) -> int:
    """``dpa simulate``: replays the input's keys through policies with :func:`dpa.tools.simulate.simulate`."""
    if args.list:
        return list_inputs()
    from dpa.tools.simulate import simulate

    register_policies()
    import dpa

    policy = args.policy if args.policy is not None else dpa.JobConfig(runtime="local").policy_name
    names = [p.strip() for p in policy.split(",") if p.strip()]
    if not names:
        raise UsageError("--policy needs at least one policy name")
    if args.tau is not None and args.tau < 0:
        raise UsageError(f"--tau must be >= 0, got {args.tau}")
    for n in ("sources", "workers"):
        if getattr(args, n) < 1:
            raise UsageError(f"--{n} must be >= 1, got {getattr(args, n)}")
    inp = load_input(args)
    keys = keys_of(inp)
    extra = {param: getattr(args, arg_name)
             for arg_name, param in (("tau", "tau"), ("rounds", "max_rounds"), ("service_rate", "service_rate"))
             if getattr(args, arg_name) is not None}
    results = {}
    out = sys.stderr if args.json else sys.stdout
    print(f"dpa simulate: {inp.label}; {len(keys):,} messages; sources={args.sources} workers={args.workers}",
          file=out, flush=True)
    for name in names:
        results[name] = _as_dict(simulate(keys, name, num_sources=args.sources, num_workers=args.workers,
                                          seed=args.seed, **extra))
    if args.json:
        print(json.dumps(results, default=str))
    else:
        for line in _simulate_table(results):
            print(line)
    return EXIT_OK


# ============================================================================ report etc.
def cmd_report(args: argparse.Namespace) -> int:
    """``dpa report``: re-plots a run report, and/or Table 1 results beside the reference values."""
    from dpa.tools.report import load_stats, write_experiment_report, write_report

    if not args.stats and not args.table1:
        raise UsageError("give a stats.json and/or --table1 FILE")
    files: list[Path] = []
    if args.stats:
        for path in (args.stats, args.baseline):
            if path and not Path(path).exists():
                raise FileNotFoundError(f"{path!r} does not exist")
        stats = load_stats(args.stats)
        base = load_stats(args.baseline) if args.baseline else None
        files += write_report(stats, args.out, baseline_stats=base, title=args.title)
    if args.table1:
        if not Path(args.table1).exists():
            raise FileNotFoundError(f"{args.table1!r} does not exist")
        paper = plugins.load_optional(plugins.REFERENCES, "table1")
        if paper is None:
            logger.warning("no 'table1' reference table is installed (dpa.references); plotting measured values only")
        files += write_experiment_report(args.table1, args.out, paper=paper)
    print(f"report: {len(files)} files in {args.out}/ ({', '.join(f.name for f in files)})")
    return EXIT_OK


def cmd_policies(args: argparse.Namespace) -> int:
    """``dpa policies``: the registered partitioning policies, one a line."""
    from dpa.routing.registry import policies

    register_policies()
    for name, description in policies().items():
        print(f"{name:<12} {description}")
    return EXIT_OK
