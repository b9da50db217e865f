"""The ``dpa`` command line.

Subcommands::

    dpa run WL4 --policy halving --rounds 2 --cost-us 2000 --report out/wl4
    dpa run zipf --records 1M --keys 10000 --z 1.2 --output counts.parquet
    dpa run --input logs.csv --key user --reducer sum --value bytes
    dpa run --input book.txt                      # word count of a text file
    dpa experiment table1 --runtime local --runs 1
    dpa experiment --report out/table1 table1 --out out/table1/results.json
    dpa simulate zipf --records 100k --policy hash,doubling,pkg
    dpa bench --rows 20000                        # benchmarks/throughput.py
    dpa report out/wl4/stats.json --baseline out/wl4/baseline_stats.json -o out/wl4-again

``dpa``'s own options of ``experiment`` and ``bench`` go *before* the script's name;
everything after the name is passed to the script's ``main(argv)`` unchanged.

Exit codes: 0 success; 1 the job or script failed; 2 a usage error (bad argument, unknown
policy, missing file, ...); 130 interrupted. Errors are one line on stderr;
``--verbose`` adds the traceback and dpa's INFO logging.

Progress: a tqdm bar on stderr when it is a terminal, otherwise one plain line every
few seconds (``--no-progress`` turns both off). If :func:`dpa.run` accepts a
``progress`` callback it is used; otherwise, on Ray, the bar polls the
``dpa_job_records_processed`` metric of each node's Prometheus endpoint.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import logging
import os
import re
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

logger = logging.getLogger("dpa.cli")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

PAPER_WORKLOADS = ("WL1", "WL2", "WL3", "WL4", "WL5")
GENERATED = ("zipf", "uniform", "lognormal", "LN1", "LN2", "drifting")
EXPERIMENTS = {"table1": "workloads.table1", "figure3": "workloads.figure3", "wordcount": "workloads.wordcount"}
OUTPUT_SUFFIXES = (".parquet", ".csv", ".json", ".jsonl")
REDUCERS = ("count", "sum", "min", "max", "mean")


class UsageError(Exception):
    """A mistake on the command line; reported as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse that raises :class:`UsageError` instead of printing usage and exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see '{self.prog} --help')")


# ============================================================================ arguments
def parse_count(text: str) -> int:
    """``"10M"``, ``"500k"``, ``"1_000_000"`` or ``"2e6"`` -> int (>= 0)."""
    s = text.strip().lower().replace("_", "").replace(",", "")
    factor = 1
    if s and s[-1] in "kmg":
        factor = {"k": 1_000, "m": 1_000_000, "g": 1_000_000_000}[s[-1]]
        s = s[:-1]
    try:
        value = float(s) * factor
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a count like 100000, 500k or 2M, got {text!r}") from None
    if value < 0 or value != int(value):
        raise argparse.ArgumentTypeError(f"expected a whole count >= 0, got {text!r}")
    return int(value)


def _add_common(p: argparse.ArgumentParser, top: bool = False) -> None:
    default = False if top else argparse.SUPPRESS
    p.add_argument("-v", "--verbose", action="store_true", default=default,
                   help="show tracebacks and dpa's INFO logging")


def _add_source(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("input (a workload name or --input files)")
    g.add_argument("workload", nargs="?", metavar="WORKLOAD",
                   help=f"paper workload {', '.join(PAPER_WORKLOADS)} or generated {', '.join(GENERATED)}")
    g.add_argument("--input", "-i", action="append", metavar="FILE",
                   help="CSV (.csv/.tsv), parquet (file or directory), JSON lines (.jsonl) or text file; "
                        "repeat for several")
    g.add_argument("--key", "-k", help="key column of CSV/parquet/JSON input (default: the only column)")
    g.add_argument("--words", action="store_true",
                   help="split the key column into lower-cased words and count those (text files always do)")
    g.add_argument("--records", "-n", type=parse_count, default=1_000_000,
                   help="records of a generated workload (default 1M; accepts 500k, 2M)")
    g.add_argument("--repeat", type=int, default=1, help="repeat a paper workload's 100 items this many times")
    g.add_argument("--keys", type=parse_count, default=10_000, help="distinct keys of zipf/uniform/drifting")
    g.add_argument("--z", type=float, default=1.1, help="Zipf exponent (default 1.1)")
    g.add_argument("--mu", type=float, default=1.789, help="log-normal mu (default: LN1's)")
    g.add_argument("--sigma", type=float, default=2.366, help="log-normal sigma (default: LN1's)")
    g.add_argument("--hot-fraction", type=float, default=0.3, help="drifting: share of the hot key")
    g.add_argument("--period", type=parse_count, default=None, help="drifting: records per hot key (default n/10)")
    g.add_argument("--seed", type=int, default=0, help="generator and policy seed")


def _add_job(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("job")
    g.add_argument("--policy", "-p", default="doubling", help="partitioning policy (see 'dpa policies')")
    g.add_argument("--tau", type=float, default=0.2, help="straggler threshold tau >= 0 (default 0.2)")
    g.add_argument("--rounds", type=int, default=1, help="max rebalances per reducer; 0 = no LB (default 1)")
    g.add_argument("--mappers", type=int, default=4)
    g.add_argument("--reducers", type=int, default=4)
    g.add_argument("--initial-tokens", type=int, default=16, help="halving: tokens per reducer (power of two)")
    g.add_argument("--batch-size", type=parse_count, default=None, help="records per input block")
    g.add_argument("--chunk-size", type=parse_count, default=None, help="records a reducer takes per step")
    g.add_argument("--reducer", default="count", choices=REDUCERS, help="aggregation (default count)")
    g.add_argument("--value", help="value column of sum/min/max/mean")
    g.add_argument("--cost-us", type=float, default=0.0,
                   help="per-record reducer cost in microseconds (models an expensive reducer)")
    g.add_argument("--cost-mode", choices=("sleep", "spin"), default="sleep")
    g.add_argument("--runtime", choices=("ray", "local"), default="ray",
                   help="'ray' actors (default) or 'local' in-process simulation (virtual time)")
    g.add_argument("--timeout", type=float, default=None, help="fail the job after this many seconds")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dpa", description="Data Parallel Actors: skew-aware keyed aggregation on Ray.",
                     epilog="Run 'dpa <command> --help' for a command's options.")
    _add_common(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("run", help="run a keyed aggregation job", description="Run one dpa job and print what happened.")
    _add_common(p)
    _add_source(p)
    _add_job(p)
    g = p.add_argument_group("output")
    g.add_argument("--output", "-o", help=f"write the result table ({', '.join(OUTPUT_SUFFIXES)})")
    g.add_argument("--top", type=int, default=10, help="print the N most frequent keys (default 10; 0 = none)")
    g.add_argument("--report", metavar="DIR", help="write a run report (stats.json and plots) into DIR")
    g.add_argument("--no-baseline", action="store_true",
                   help="with --report: skip the second run without load balancing (max_rounds=0)")
    g.add_argument("--json", action="store_true", help="print the stats as JSON on stdout instead of a summary")
    g.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")
    g.add_argument("--dashboard", action="store_true",
                   help="start Ray with its dashboard, print the URL and keep it up until Enter")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("experiment", help="run a paper experiment (table1, figure3)",
                       description="Run workloads/<NAME>.py's main(ARGS); dpa's options go before NAME.")
    _add_common(p)
    p.add_argument("--report", metavar="DIR",
                   help="table1: plot S per workload and method beside the paper's values into DIR (reads the "
                        "JSON the experiment returns or writes with --out/--output/--json FILE.json)")
    p.add_argument("--dashboard", action="store_true", help="start Ray with its dashboard first")
    p.add_argument("name", metavar="NAME", help=f"one of {', '.join(EXPERIMENTS)}; any further arguments "
                   "are the experiment's (e.g. 'dpa experiment table1 --help')")
    p.set_defaults(func=cmd_experiment, args=[])

    p = sub.add_parser("simulate", help="replay a key stream through policies without Ray",
                       description="Replay a workload's keys through partitioning policies (dpa.simulate).")
    _add_common(p)
    _add_source(p)
    p.add_argument("--policy", "-p", default="doubling", help="policy name, or several separated by commas")
    p.add_argument("--sources", type=int, default=4, help="number of sources (mappers)")
    p.add_argument("--workers", type=int, default=4, help="number of workers (reducers)")
    p.add_argument("--tau", type=float, default=None, help="straggler threshold of halving/doubling")
    p.add_argument("--rounds", type=int, default=None, help="max rebalances per worker (halving/doubling)")
    p.add_argument("--service-rate", type=float, default=None,
                   help="messages each worker processes per arrival: enables queues and the LB planner")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("bench", help="run a benchmark (default benchmarks/throughput.py)",
                       description="Run benchmarks/<NAME>.py's main(ARGS); dpa's options go before NAME.")
    _add_common(p)
    p.add_argument("--dashboard", action="store_true", help="start Ray with its dashboard first")
    p.add_argument("name", nargs="?", default="throughput", metavar="NAME",
                   help="benchmarks/NAME.py (default throughput); any further arguments are the benchmark's "
                        "(e.g. 'dpa bench --rows 20000', 'dpa bench throughput --help')")
    p.set_defaults(func=cmd_bench, args=[])

    p = sub.add_parser("report", help="write a report from saved stats.json / Table 1 JSON",
                       description="Re-plot a run report from a stats.json, or a Table 1 JSON.")
    _add_common(p)
    p.add_argument("stats", nargs="?", help="a stats.json written by 'dpa run --report'")
    p.add_argument("--baseline", help="the baseline_stats.json of the same report")
    p.add_argument("--table1", help="Table 1 results JSON to plot beside the paper's values")
    p.add_argument("--out", "-o", required=True, metavar="DIR", help="directory to write into")
    p.add_argument("--title", help="plot title prefix")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("policies", help="list the registered partitioning policies")
    _add_common(p)
    p.set_defaults(func=cmd_policies)
    return parser


# ============================================================================= progress
class ProgressDisplay:
    """Records processed so far: a tqdm bar on a terminal, else a plain line every ``interval`` s.

    Callable as ``display(done, total=None)`` from any thread (the signature of the proposed
    ``dpa.run(progress=...)`` hook).
    """

    def __init__(self, total: int | None, desc: str, *, enabled: bool = True, stream: Any = None,
                 interval: float = 10.0) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total = total
        self.desc = desc
        self.enabled = enabled
        self.interval = interval
        self.done = 0
        self.started = time.monotonic()
        self.last_line = self.started
        self.lock = threading.Lock()
        self.bar = None
        isatty = getattr(self.stream, "isatty", lambda: False)()
        if enabled and isatty:
            from tqdm import tqdm

            try:
                columns = os.get_terminal_size(self.stream.fileno()).columns
            except (AttributeError, OSError, ValueError):
                columns = 0
            # Some pseudo-terminals report 0 columns, which would make tqdm print nothing.
            width = {"dynamic_ncols": True} if columns > 0 else {"ncols": 100, "nrows": 24}
            self.bar = tqdm(total=total, desc=desc, unit="rec", unit_scale=True, file=self.stream,
                            mininterval=0.2, leave=True, **width)

    def __call__(self, done: int, total: int | None = None) -> None:
        if not self.enabled:
            return
        with self.lock:
            if total is not None and total != self.total:
                self.total = total
                if self.bar is not None:
                    self.bar.total = total
                    self.bar.refresh()
            done = int(done)
            if done <= self.done:
                return
            if self.bar is not None:
                self.bar.update(done - self.done)
            self.done = done
            now = time.monotonic()
            if self.bar is None and now - self.last_line >= self.interval:
                self.last_line = now
                print(self._line(now), file=self.stream, flush=True)

    def _line(self, now: float) -> str:
        rate = self.done / max(1e-9, now - self.started)
        of = f"/{self.total:,}" if self.total else ""
        pct = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        return f"{self.desc}: {self.done:,}{of} records{pct}, {rate:,.0f} rec/s"

    def close(self, done: int | None = None) -> None:
        if done is not None:
            self(done)
        with self.lock:
            if self.bar is not None:
                self.bar.close()
                self.bar = None
            self.enabled = False


_METRIC_LINE = re.compile(r'^ray_dpa_job_records_processed\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)')
_JOB_ID = re.compile(r'(?:^|,)job_id="(?P<job>[^"]*)"')
#: Job ids of earlier jobs of this process, never shown again by a new poller.
_SEEN_JOBS: set[str] = set()


def parse_records_metric(text: str) -> dict[str, float]:
    """``{job_id: records processed}`` from a Prometheus text page."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _METRIC_LINE.match(line)
        if not m:
            continue
        job = _JOB_ID.search(m.group("labels"))
        if job is None:
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            continue
        out[job.group("job")] = max(value, out.get(job.group("job"), 0.0))
    return out


class MetricPoller(threading.Thread):
    """Polls ``ray_dpa_job_records_processed`` on every node and reports the new job's value.

    The fallback while :func:`dpa.run` has no progress hook. Ray exports the metric about
    once a second when dpa started Ray, so the bar lags by a second or two; any failure
    (no metrics agent, ...) just leaves the bar where it is.
    """

    def __init__(self, callback: Callable[[int], None], interval: float = 0.5) -> None:
        super().__init__(name="dpa-progress-poller", daemon=True)
        self.callback = callback
        self.interval = interval
        self.stop_event = threading.Event()
        self.urls = self._urls()
        self.before = set(_SEEN_JOBS) | set(self._read())

    @staticmethod
    def _urls() -> list[str]:
        try:
            import ray

            return [f"http://{n['NodeManagerAddress']}:{n['MetricsExportPort']}/metrics"
                    for n in ray.nodes() if n.get("Alive") and n.get("MetricsExportPort")]
        except Exception as exc:  # pragma: no cover - depends on the cluster
            logger.debug("no metrics endpoints: %s", exc)
            return []

    def _read(self) -> dict[str, float]:
        import urllib.request

        values: dict[str, float] = {}
        for url in self.urls:
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    page = resp.read().decode("utf-8", "replace")
            except Exception as exc:
                logger.debug("metrics poll of %s failed: %s", url, exc)
                continue
            for job, value in parse_records_metric(page).items():
                values[job] = max(value, values.get(job, 0.0))
        return values

    def run(self) -> None:
        while not self.stop_event.wait(self.interval):
            new = [v for j, v in self._read().items() if j not in self.before]
            if new:
                self.callback(int(max(new)))

    def stop(self) -> None:
        self.stop_event.set()


def _run_supports_progress() -> bool:
    import dpa

    try:
        return "progress" in inspect.signature(dpa.run).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return False


def run_with_progress(source: Any, *, total: int | None, desc: str, show: bool, **kwargs: Any) -> Any:
    """``dpa.run(source, **kwargs)`` with a progress display (see the module docstring)."""
    import dpa

    display = ProgressDisplay(total, desc, enabled=show)
    poller = None
    if show and _run_supports_progress():
        kwargs["progress"] = display
    elif show and kwargs["config"].runtime == "ray":
        poller = MetricPoller(lambda done: display(done, total))
        poller.start()
    try:
        result = dpa.run(source, **kwargs)
        display(result.stats.total_processed)  # the poller lags; end at the true count
    finally:
        if poller is not None:
            poller.stop()
        display.close()
    _SEEN_JOBS.add(result.stats.job_id)
    return result


# ================================================================================ inputs
class Input:
    """A job's source and what ``dpa.run`` needs to read it."""

    def __init__(self, source: Any, key: Any, label: str, total: int | None, map_fn: Any = None,
                 name: str | None = None) -> None:
        self.name = name or label
        self.source = source
        self.key = key
        self.label = label
        self.total = total
        self.map_fn = map_fn


def _split_words_of(column: str) -> Any:
    import dpa

    def split(batch: Any) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        text = pc.cast(batch.column(column), pa.string())
        words = pc.list_flatten(pc.split_pattern_regex(pc.utf8_lower(text), r"[^\w']+"))
        words = pc.filter(words, pc.not_equal(words, ""))
        return pa.table({"word": words})

    return dpa.BatchMap(split)


def _read_file(path: str) -> tuple[Any, str]:
    """(table, kind) of one input file; kind is 'text' or 'table'."""
    import pyarrow as pa

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"input {path!r} does not exist")
    suffix = p.suffix.lower()
    if suffix in (".parquet", ".pq") or (p.is_dir() and any(p.glob("*.parquet"))):
        import pyarrow.parquet as pq

        return pq.read_table(p), "table"
    if p.is_dir():
        raise ValueError(f"input directory {path!r} has no parquet files")
    if suffix in (".csv", ".tsv"):
        import pyarrow.csv as pacsv

        opts = pacsv.ParseOptions(delimiter="\t" if suffix == ".tsv" else ",")
        try:
            return pacsv.read_csv(p, parse_options=opts), "table"
        except pa.ArrowInvalid as exc:
            raise ValueError(f"cannot read {path!r} as CSV: {exc}") from None
    if suffix in (".jsonl", ".ndjson"):
        import pyarrow.json as pajson

        try:
            return pajson.read_json(p), "table"
        except pa.ArrowInvalid as exc:
            raise ValueError(f"cannot read {path!r} as JSON lines: {exc}") from None
    with open(p, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    return pa.table({"line": pa.array(lines, type=pa.string())}), "text"


def load_input(args: argparse.Namespace) -> Input:
    """Builds the source named on the command line."""
    if args.workload and args.input:
        raise UsageError("give either a WORKLOAD or --input files, not both")
    if args.input:
        return _load_files(args)
    if not args.workload:
        raise UsageError(f"name a WORKLOAD ({', '.join(PAPER_WORKLOADS + GENERATED)}) or give --input FILE")
    name = args.workload
    upper = name.upper()
    if upper in PAPER_WORKLOADS:
        from workloads.paper import workload

        if args.repeat < 1:
            raise UsageError(f"--repeat must be >= 1, got {args.repeat}")
        items = workload(upper) * args.repeat
        return Input(items, None, f"{upper}{f' x{args.repeat}' if args.repeat > 1 else ''}", len(items), name=upper)
    from workloads import generators as gen

    n = args.records
    if name.lower() == "zipf":
        table, label = gen.zipf(args.z, args.keys, n, seed=args.seed), f"zipf(z={args.z}, keys={args.keys:,})"
    elif name.lower() == "uniform":
        table, label = gen.uniform(args.keys, n, seed=args.seed), f"uniform(keys={args.keys:,})"
    elif name.lower() == "lognormal":
        table, label = gen.lognormal(args.mu, args.sigma, None, n, seed=args.seed), f"lognormal(mu={args.mu}, sigma={args.sigma})"
    elif upper in ("LN1", "LN2"):
        table, label = gen.lognormal_preset(upper, n, seed=args.seed), upper
    elif name.lower() == "drifting":
        period = args.period or max(1, n // 10)
        table = gen.drifting(args.keys, n, args.hot_fraction, period, seed=args.seed)
        label = f"drifting(keys={args.keys:,}, hot={args.hot_fraction}, period={period:,})"
    else:
        raise UsageError(f"unknown workload {name!r}; use one of {', '.join(PAPER_WORKLOADS + GENERATED)} or --input FILE")
    return Input(table, "key", f"{label}, {n:,} records", table.num_rows, name=name)


def _load_files(args: argparse.Namespace) -> Input:
    import pyarrow as pa

    tables, kinds = [], set()
    for path in args.input:
        table, kind = _read_file(path)
        tables.append(table)
        kinds.add(kind)
    if len(kinds) > 1:
        raise UsageError("cannot mix text files with CSV/parquet/JSON input in one job")
    try:
        table = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise ValueError(f"the input files have incompatible columns: {exc}") from None
    label = ", ".join(args.input) + f" ({table.num_rows:,} rows)"
    name = Path(args.input[0]).name + (f" +{len(args.input) - 1}" if len(args.input) > 1 else "")
    if kinds == {"text"}:
        return Input(table, "word", label, None, map_fn=_split_words_of("line"), name=name)
    key = args.key
    if key is None:
        if table.num_columns != 1:
            raise UsageError(f"--key is needed to choose among the columns: {', '.join(table.column_names)}")
        key = table.column_names[0]
    if key not in table.column_names:
        raise UsageError(f"column {key!r} is not in the input; columns: {', '.join(table.column_names)}")
    if args.words:
        return Input(table, "word", label, None, map_fn=_split_words_of(key), name=name)
    return Input(table, key, label, table.num_rows, name=name)


def _reducer(args: argparse.Namespace, cols: Sequence[str] | None) -> Any:
    import dpa

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


def _register_policies() -> None:
    """Registers the optional policies of :mod:`dpa.partitioners`, if they import."""
    try:
        importlib.import_module("dpa.partitioners")
    except Exception as exc:  # a policy module being written may be missing
        logger.info("optional policies not available: %s", exc)


def _config(args: argparse.Namespace, **changes: Any) -> Any:
    import dpa

    fields: dict[str, Any] = dict(
        num_mappers=args.mappers, num_reducers=args.reducers, policy=args.policy, tau=args.tau,
        max_rounds=args.rounds, initial_tokens=args.initial_tokens, runtime=args.runtime,
        timeout_s=args.timeout, seed=args.seed,
    )
    if args.batch_size is not None:
        fields["batch_size"] = args.batch_size
    if args.chunk_size is not None:
        fields["chunk_size"] = args.chunk_size
    fields.update(changes)
    return dpa.JobConfig(**fields)


# ================================================================================== Ray
#: Tries to start Ray (a loaded machine sometimes misses Ray's start-up deadline).
RAY_START_ATTEMPTS = 3


def start_ray(*, dashboard: bool, verbose: bool) -> str | None:
    """Starts Ray through ``dpa.runtime_ray.ensure_ray``; returns the dashboard URL, if any."""
    import ray

    from dpa.runtime_ray import ensure_ray

    options: dict[str, Any] = {}
    if dashboard:
        options.update(include_dashboard=True, dashboard_host="127.0.0.1")
    if verbose:
        options["logging_level"] = logging.INFO
    was_up = ray.is_initialized()
    if was_up and dashboard:
        logger.warning("Ray is already running in this process; its dashboard setting is kept")
    context = None
    for attempt in range(RAY_START_ATTEMPTS):
        try:
            context = ensure_ray(**options)
            break
        except Exception as exc:
            # On a loaded machine the raylet can miss Ray's fixed registration deadline.
            if "timed out" not in str(exc) or attempt == RAY_START_ATTEMPTS - 1:
                raise
            logger.warning("Ray did not start in time (%s); retrying", _one_line(exc))
            ray.shutdown()
    if not dashboard:
        return None
    return dashboard_url(context)


def dashboard_url(context: Any = None) -> str | None:
    """The dashboard URL from ``ray.init``'s RayContext or, failing that, the running node."""
    url = getattr(context, "dashboard_url", None)
    if not url:
        try:
            from ray._private import worker

            url = getattr(getattr(worker, "_global_node", None), "webui_url", None)
        except Exception:  # pragma: no cover - private API moved
            url = None
    if not url:
        return None
    return url if "://" in url else f"http://{url}"


def _announce_dashboard(url: str | None) -> None:
    if url:
        print(f"Ray dashboard: {url}", flush=True)
    else:
        print("Ray dashboard did not start (is ray[default] installed? see --verbose)", file=sys.stderr, flush=True)


def _hold_dashboard(url: str | None) -> None:
    """Keeps Ray (and its dashboard) up until Enter or Ctrl-C when stdin is a terminal."""
    if not url or not sys.stdin or not sys.stdin.isatty():
        return
    try:
        input(f"Dashboard still up at {url} — press Enter (or Ctrl-C) to stop Ray and exit. ")
    except (EOFError, KeyboardInterrupt):
        print(file=sys.stderr)


def _cleanup() -> None:
    """Releases dpa's actors and stops the Ray this process started."""
    if "ray" not in sys.modules:
        return
    import ray

    try:
        import dpa

        dpa.shutdown()
    except Exception as exc:  # pragma: no cover
        logger.debug("dpa.shutdown failed: %s", exc)
    if ray.is_initialized():
        ray.shutdown()


# ============================================================================= commands
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
        lines.append(f"    t={e.time_s:.3f}s {e.action:<9} reducer {e.reducer}  queues={list(e.queue_lengths)}"
                     f"  tokens after={list(e.tokens_after)}  v{e.version}")
    if len(stats.rebalances) > 20:
        lines.append(f"    ... {len(stats.rebalances) - 20} more (see --report)")
    return lines


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
    value = result.value_column
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
    _register_policies()
    if args.output and Path(args.output).suffix.lower() not in OUTPUT_SUFFIXES:
        raise UsageError(f"--output must end in one of {', '.join(OUTPUT_SUFFIXES)}, got {args.output!r}")
    if args.dashboard and args.runtime != "ray":
        raise UsageError("--dashboard needs --runtime ray")
    config = _config(args)  # validates policy, tau, rounds, ... before reading anything
    baseline_config = None
    if args.report and not args.no_baseline:
        baseline_config = _config(args, max_rounds=0) if args.policy in ("halving", "doubling") \
            else _config(args, policy="hash", max_rounds=0)
    inp = load_input(args)
    cols = inp.source.column_names if hasattr(inp.source, "column_names") else None
    reducer = _reducer(args, cols)

    url = None
    if args.runtime == "ray":
        url = start_ray(dashboard=args.dashboard, verbose=args.verbose)
        if args.dashboard:
            _announce_dashboard(url)
    show = not args.no_progress
    out = sys.stderr if args.json else sys.stdout
    print(f"dpa run: {inp.label}; policy={config.policy} tau={config.tau} rounds={config.max_rounds} "
          f"mappers={config.num_mappers} reducers={config.num_reducers} runtime={config.runtime}", file=out, flush=True)
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
        for line in _top_keys(result, args.top):
            print(line)
    if args.output:
        _write_output(result, args.output)
        print(f"wrote {args.output} ({len(result):,} keys)", file=out)
    if baseline is not None and baseline.to_dict() != result.to_dict():
        print("dpa: error: the results with and without load balancing differ", file=sys.stderr)
        return EXIT_FAILED
    if args.report:
        from dpa.report import write_report

        files = write_report(result, args.report, baseline_stats=None if baseline is None else baseline.stats,
                             title=f"{inp.name} {config.policy}",
                             initial_tokens=args.initial_tokens if config.policy == "halving" else None)
        print(f"report: {len(files)} files in {args.report}/ ({', '.join(f.name for f in files)})", file=out)
    if args.dashboard:
        _hold_dashboard(url)
    return EXIT_OK


def _call_main(module_name: str, label: str, argv: list[str]) -> Any:
    """Imports ``module_name`` lazily and calls its ``main(argv)``; returns what it returned."""
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            path = module_name.replace(".", "/") + ".py"
            raise UsageError(f"{label} is not available ({path} is missing)") from None
        raise
    main = getattr(module, "main", None)
    if not callable(main):
        raise UsageError(f"{label}: {module_name} has no main(argv) function")
    saved = sys.argv
    sys.argv = [label, *argv]
    try:
        return main(argv)
    except SystemExit as exc:  # argparse inside the script
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else EXIT_FAILED)
    finally:
        sys.argv = saved


def _exit_code(value: Any) -> int:
    if value is None or value is True:
        return EXIT_OK
    if isinstance(value, bool):
        return EXIT_FAILED
    if isinstance(value, int):
        return value
    return EXIT_OK  # the script returned data


def _json_path_in(argv: Sequence[str]) -> str | None:
    for i, arg in enumerate(argv):
        for flag in ("--out", "--output", "--json", "-o"):
            if arg == flag and i + 1 < len(argv) and argv[i + 1].endswith(".json"):
                return argv[i + 1]
            if arg.startswith(flag + "=") and arg.endswith(".json"):
                return arg.split("=", 1)[1]
    return None


def cmd_experiment(args: argparse.Namespace) -> int:
    name = args.name
    if name not in EXPERIMENTS:
        raise UsageError(f"unknown experiment {name!r}; use one of {', '.join(EXPERIMENTS)}")
    if args.report and name != "table1":
        raise UsageError("--report is supported for the table1 experiment")
    url = None
    if args.dashboard:
        url = start_ray(dashboard=True, verbose=args.verbose)
        _announce_dashboard(url)
    argv = list(args.args)
    if args.report and _json_path_in(argv) is None:
        # table1 writes its results where --out says; put them into the report directory.
        argv += ["--out", str(Path(args.report) / "table1_results.json")]
    value = _call_main(EXPERIMENTS[name], f"dpa experiment {name}", argv)
    code = _exit_code(value)
    if args.report and code == EXIT_OK:
        data = value if isinstance(value, (dict, list)) else None
        if data is None:
            path = _json_path_in(argv)
            if path is None or not Path(path).exists():
                raise UsageError("--report needs table1's results: pass its JSON output option, "
                                 "e.g. 'dpa experiment --report DIR table1 --out DIR/results.json'")
            data = path
        from dpa.report import write_experiment_report

        files = write_experiment_report(data, args.report, title="Table 1: skew S, measured vs. the paper")
        print(f"report: {', '.join(str(f) for f in files)}")
    if args.dashboard:
        import ray

        if ray.is_initialized():
            _hold_dashboard(url)
    return code


def _keys_of(inp: Input) -> Any:
    """The key stream of an input, in order (a list or a numpy array)."""
    import pyarrow as pa

    source = inp.source
    if isinstance(source, list):
        return source
    table = source if isinstance(source, pa.Table) else pa.table(source)
    if inp.map_fn is not None:
        table = inp.map_fn(table)
    column = table.column(inp.key)
    if pa.types.is_integer(column.type) and column.null_count == 0:
        return column.to_numpy()
    return column.to_pylist()


def _as_dict(value: Any) -> Any:
    import dataclasses

    if callable(getattr(value, "summary", None)):  # dpa.simulate.SimResult
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


def cmd_simulate(args: argparse.Namespace) -> int:
    try:
        sim = importlib.import_module("dpa.simulate")
    except ModuleNotFoundError as exc:
        if exc.name in ("dpa.simulate", "dpa"):
            raise UsageError("simulate is not available (dpa/simulate.py is missing)") from None
        raise
    _register_policies()
    simulate = getattr(sim, "simulate", None)
    if not callable(simulate):
        raise UsageError("dpa.simulate has no simulate() function")
    names = [p.strip() for p in args.policy.split(",") if p.strip()]
    if not names:
        raise UsageError("--policy needs at least one policy name")
    if args.tau is not None and args.tau < 0:
        raise UsageError(f"--tau must be >= 0, got {args.tau}")
    for n in ("sources", "workers"):
        if getattr(args, n) < 1:
            raise UsageError(f"--{n} must be >= 1, got {getattr(args, n)}")
    inp = load_input(args)
    keys = _keys_of(inp)
    params = inspect.signature(simulate).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    extra = {}
    for arg_name, param in (("tau", "tau"), ("rounds", "max_rounds"), ("service_rate", "service_rate")):
        value = getattr(args, arg_name)
        if value is not None:
            if param not in params and not takes_any:
                raise UsageError(f"--{arg_name.replace('_', '-')} is not supported by this dpa.simulate.simulate()")
            extra[param] = value
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


#: Columns of the ``dpa simulate`` table, when the results have them.
SIM_COLUMNS = ("skew", "imbalance_fraction", "max_over_avg", "stddev_pct", "dist_cost", "forwarded",
               "rebalances", "makespan", "loads")


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


def cmd_bench(args: argparse.Namespace) -> int:
    argv = list(args.args)
    name = args.name
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise UsageError(f"bad benchmark name {name!r}")
    url = None
    if args.dashboard:
        url = start_ray(dashboard=True, verbose=args.verbose)
        _announce_dashboard(url)
    code = _exit_code(_call_main(f"benchmarks.{name}", f"dpa bench {name}", argv))
    if args.dashboard:
        import ray

        if ray.is_initialized():
            _hold_dashboard(url)
    return code


def cmd_report(args: argparse.Namespace) -> int:
    from dpa.report import load_stats, write_experiment_report, write_report

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
        files += write_experiment_report(args.table1, args.out)
    print(f"report: {len(files)} files in {args.out}/ ({', '.join(f.name for f in files)})")
    return EXIT_OK


def cmd_policies(args: argparse.Namespace) -> int:
    from dpa.policy import policies

    _register_policies()
    for name, description in policies().items():
        print(f"{name:<12} {description}")
    return EXIT_OK


# ================================================================================= main
def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text


def split_passthrough(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Splits ``experiment``/``bench`` command lines into dpa's part and the script's part.

    dpa's own options come first, then the script's name; everything after the name
    (even ``--help``) belongs to the script. Other commands are returned whole.
    """
    argv = list(argv)
    i = 0
    while i < len(argv) and argv[i] in ("-v", "--verbose"):
        i += 1
    if i >= len(argv) or argv[i] not in ("experiment", "bench"):
        return argv, []
    command = argv[i]
    flags = {"-v", "--verbose", "--dashboard", "-h", "--help"}
    with_value = {"--report"} if command == "experiment" else set()
    j = i + 1
    while j < len(argv):
        a = argv[j]
        if a in flags or any(a.startswith(f + "=") for f in with_value):
            j += 1
        elif a in with_value:
            j += 2
        else:
            break
    if j < len(argv) and not argv[j].startswith("-"):
        j += 1  # the script's name
    return argv[:j], argv[j:]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dpa`` console script; returns the exit code."""
    own, passthrough = split_passthrough(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(own)
    except UsageError as exc:
        print(f"dpa: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    args.args = passthrough
    verbose = args.verbose = bool(getattr(args, "verbose", False))
    _setup_logging(verbose)

    from dpa.errors import DPAError, JobFailedError

    def fail(prefix: str, message: str, code: int) -> int:
        if verbose:
            traceback.print_exc()
        print(f"dpa: {prefix}{message}", file=sys.stderr)
        return code

    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("dpa: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except UsageError as exc:
        return fail("error: ", _one_line(exc), EXIT_USAGE)
    except JobFailedError as exc:
        return fail("job failed: ", _one_line(exc), EXIT_FAILED)
    except DPAError as exc:
        # ConfigError, SchemaError, KeyEncodingError: bad input; UserCodeError: user code raised.
        if type(exc).__name__ == "UserCodeError":
            return fail("job failed: ", _one_line(exc), EXIT_FAILED)
        return fail("error: ", _one_line(exc), EXIT_USAGE)
    except FileNotFoundError as exc:
        message = _one_line(exc) if exc.filename is None else f"{exc.strerror or 'not found'}: {exc.filename}"
        return fail("error: ", message, EXIT_USAGE)
    except (ValueError, TypeError) as exc:
        return fail("error: ", _one_line(exc), EXIT_USAGE)
    except Exception as exc:
        suffix = "" if verbose else " (rerun with --verbose for the traceback)"
        return fail("error: ", f"{type(exc).__name__}: {_one_line(exc)}{suffix}", EXIT_FAILED)
    finally:
        try:
            _cleanup()
        except Exception as exc:  # pragma: no cover
            logger.debug("cleanup failed: %s", exc)


if __name__ == "__main__":
    sys.exit(main())
