"""The ``dpa`` command line's arguments: the parser of every subcommand.

``experiment`` and ``bench`` run another package's script: :func:`split_passthrough` cuts
their command line after the script's name, and everything from there on is the script's.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from dpa.tools.cli import commands, scripts
from dpa.tools.cli.errors import UsageError


class _Parser(argparse.ArgumentParser):
    """argparse that raises :class:`UsageError` instead of printing usage and exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see '{self.prog} --help')")


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


def add_source_arguments(p: argparse.ArgumentParser) -> None:
    """The input of ``run`` and ``simulate``: a named workload or ``--input`` files."""
    g = p.add_argument_group("input (a named workload or --input files)")
    g.add_argument("workload", nargs="?", metavar="WORKLOAD",
                   help="a named workload an installed package provides (--list shows them)")
    g.add_argument("--list", action="store_true", help="list the named workloads and exit")
    g.add_argument("--input", "-i", action="append", metavar="FILE",
                   help="CSV (.csv/.tsv), parquet (file or directory), JSON lines (.jsonl) or text file; "
                        "repeat for several")
    g.add_argument("--key", "-k", help="key column of CSV/parquet/JSON input (default: the only column)")
    g.add_argument("--words", action="store_true",
                   help="split the key column into lower-cased words and count those (text files always do)")
    g = p.add_argument_group("named workloads (each uses the options it understands)")
    g.add_argument("--records", "-n", type=parse_count, default=1_000_000,
                   help="records of a generated workload (default 1M; accepts 500k, 2M)")
    g.add_argument("--repeat", type=int, default=1, help="repeat a fixed workload this many times")
    g.add_argument("--keys", type=parse_count, default=10_000, help="distinct keys (default 10k)")
    g.add_argument("--z", type=float, default=1.1, help="Zipf exponent (default 1.1)")
    g.add_argument("--mu", type=float, default=1.789, help="log-normal mu (default 1.789)")
    g.add_argument("--sigma", type=float, default=2.366, help="log-normal sigma (default 2.366)")
    g.add_argument("--hot-fraction", type=float, default=0.3, help="drifting: share of the hot key")
    g.add_argument("--period", type=parse_count, default=None, help="drifting: records per hot key (default n/10)")
    g.add_argument("--seed", type=int, default=0, help="generator and policy seed")


def _add_job(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("job")
    g.add_argument("--policy", "-p", default=None,
                   help="partitioning policy (see 'dpa policies'; default: JobConfig()'s, hybrid)")
    g.add_argument("--tau", type=float, default=None, help="straggler threshold tau >= 0 (default: JobConfig()'s, 0.2)")
    g.add_argument("--rounds", type=int, default=None,
                   help="max rebalances per reducer; 0 = no LB (default: JobConfig()'s, 1)")
    g.add_argument("--mappers", type=int, default=None, help="mapper actors (default: one per CPU, at most 16)")
    g.add_argument("--reducers", type=int, default=None,
                   help="reducer actors (default: one per CPU, at least 2, at most 16)")
    g.add_argument("--initial-tokens", type=int, default=None,
                   help="ring policies: tokens per reducer on the first ring (power of two; default: JobConfig()'s, "
                        "16; the paper's doubling: 1)")
    g.add_argument("--token-spacing", choices=("even", "hashed"), default=None,
                   help="ring policies: first ring's tokens evenly spaced (default) or at their hashes "
                        "(the paper's ring, which its workloads WL1-WL5 are built for)")
    g.add_argument("--batch-size", type=parse_count, default=None, help="records per input block")
    g.add_argument("--chunk-size", type=parse_count, default=None, help="records a reducer takes per step")
    g.add_argument("--reducer", default="count", choices=commands.REDUCERS, help="aggregation (default count)")
    g.add_argument("--value", help="value column of sum/min/max/mean")
    g.add_argument("--agg", action="append", metavar="NAME[:COLUMN[:PARAM]]",
                   help="an aggregate; repeat for several in one pass (replaces --reducer), e.g. --agg count "
                        "--agg sum:bytes --agg count_distinct:user --agg quantile:latency:0.95 "
                        "--agg max_by:status:updated_at")
    g.add_argument("--apply", metavar="MODULE:FUNCTION",
                   help="run a per-group function instead of an aggregate (dpa.GroupApply): FUNCTION(group) gets "
                        "every row of one key as a pandas.DataFrame and returns a DataFrame; e.g. --apply jobs:per_user")
    g.add_argument("--cost-us", type=float, default=0.0,
                   help="per-record reducer cost in microseconds (models an expensive reducer)")
    g.add_argument("--cost-mode", choices=("sleep", "spin"), default="sleep")
    g.add_argument("--runtime", choices=("ray", "local"), default="ray",
                   help="'ray' actors (default) or 'local' in-process simulation (virtual time)")
    g.add_argument("--timeout", type=float, default=None, help="fail the job after this many seconds")
    g.add_argument("--max-reducers", type=int, default=None,
                   help="elastic reducers: grow up to this many when every reducer is backlogged")
    g.add_argument("--min-reducers", type=int, default=None, help="elastic reducers: shrink down to this many")
    g.add_argument("--migrate", choices=("records", "state"), default="records",
                   help="a moved key's records are forwarded and merged at the end ('records', the paper), "
                        "or its state is handed over too ('state': no final merge)")


def build_parser() -> argparse.ArgumentParser:
    """The parser of the whole command line; each subcommand sets ``func``."""
    parser = _Parser(prog="dpa", description="Data Parallel Actors: skew-aware keyed aggregation on Ray.",
                     epilog="Run 'dpa <command> --help' for a command's options.")
    _add_common(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("run", help="run a keyed aggregation job", description="Run one dpa job and print what happened.")
    _add_common(p)
    add_source_arguments(p)
    _add_job(p)
    g = p.add_argument_group("output")
    g.add_argument("--output", "-o", help=f"write the result table ({', '.join(commands.OUTPUT_SUFFIXES)})")
    g.add_argument("--top", type=int, default=10, help="print the N most frequent keys (default 10; 0 = none)")
    g.add_argument("--report", metavar="DIR", help="write a run report (stats.json and plots) into DIR")
    g.add_argument("--no-baseline", action="store_true",
                   help="with --report: skip the second run without load balancing (max_rounds=0)")
    g.add_argument("--json", action="store_true", help="print the stats as JSON on stdout instead of a summary")
    g.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")
    g.add_argument("--dashboard", action="store_true",
                   help="start Ray with its dashboard, print the URL and keep it up until Enter")
    p.set_defaults(func=commands.cmd_run)

    p = sub.add_parser("experiment", help="run an experiment an installed package provides (e.g. table1)",
                       description="Run an experiment's main(ARGS) (the dpa.experiments entry points); "
                                   "dpa's options go before NAME.")
    _add_common(p)
    p.add_argument("--list", action="store_true", help="list the installed experiments and exit")
    p.add_argument("--report", metavar="DIR",
                   help="plot S per workload and method beside the reference values registered under NAME "
                        "(dpa.references, e.g. table1) into DIR (reads the JSON the experiment returns or "
                        "writes with --out/--output/--json FILE.json)")
    p.add_argument("--dashboard", action="store_true", help="start Ray with its dashboard first")
    p.add_argument("name", nargs="?", metavar="NAME", help="the experiment ('dpa experiment --list'); any further "
                   "arguments are the experiment's (e.g. 'dpa experiment table1 --help')")
    p.set_defaults(func=scripts.cmd_experiment, args=[])

    p = sub.add_parser("simulate", help="replay a key stream through policies without Ray",
                       description="Replay a workload's keys through partitioning policies (dpa.tools.simulate).")
    _add_common(p)
    add_source_arguments(p)
    p.add_argument("--policy", "-p", default=None,
                   help="policy name, or several separated by commas (default: JobConfig()'s)")
    p.add_argument("--sources", type=int, default=4, help="number of sources (mappers)")
    p.add_argument("--workers", type=int, default=4, help="number of workers (reducers)")
    p.add_argument("--tau", type=float, default=None, help="straggler threshold of halving/doubling")
    p.add_argument("--rounds", type=int, default=None, help="max rebalances per worker (halving/doubling)")
    p.add_argument("--service-rate", type=float, default=None,
                   help="messages each worker processes per arrival: enables queues and the LB planner")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(func=commands.cmd_simulate)

    p = sub.add_parser("bench", help=f"run a benchmark an installed package provides (default {scripts.DEFAULT_BENCHMARK})",
                       description="Run a benchmark's main(ARGS) (the dpa.benchmarks entry points); "
                                   "dpa's options go before NAME.")
    _add_common(p)
    p.add_argument("--list", action="store_true", help="list the installed benchmarks and exit")
    p.add_argument("--dashboard", action="store_true", help="start Ray with its dashboard first")
    p.add_argument("name", nargs="?", default=scripts.DEFAULT_BENCHMARK, metavar="NAME",
                   help=f"the benchmark ('dpa bench --list'; default {scripts.DEFAULT_BENCHMARK}); any further "
                        "arguments are the benchmark's (e.g. 'dpa bench --rows 20000', 'dpa bench throughput --help')")
    p.set_defaults(func=scripts.cmd_bench, args=[])

    p = sub.add_parser("report", help="write a report from saved stats.json / Table 1 JSON",
                       description="Re-plot a run report from a stats.json, or a Table 1 JSON.")
    _add_common(p)
    p.add_argument("stats", nargs="?", help="a stats.json written by 'dpa run --report'")
    p.add_argument("--baseline", help="the baseline_stats.json of the same report")
    p.add_argument("--table1", help="Table 1 results JSON to plot beside the reference values "
                                    "registered as 'table1' (dpa.references), if any")
    p.add_argument("--out", "-o", required=True, metavar="DIR", help="directory to write into")
    p.add_argument("--title", help="plot title prefix")
    p.set_defaults(func=commands.cmd_report)

    p = sub.add_parser("policies", help="list the registered partitioning policies")
    _add_common(p)
    p.set_defaults(func=commands.cmd_policies)
    return parser


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
    flags = {"-v", "--verbose", "--dashboard", "--list", "-h", "--help"}
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
