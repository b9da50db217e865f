"""``dpa experiment`` and ``dpa bench``: run a script another package registers.

The scripts live in the packages above ``dpa`` (the repository's ``workloads`` and
``benchmarks``), which register their ``main(argv)`` in the ``dpa.experiments`` and
``dpa.benchmarks`` entry point groups (:mod:`dpa.tools.cli.plugins`). Everything after the
script's name on the command line is passed to ``main`` unchanged.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dpa.tools.cli import plugins
from dpa.tools.cli.errors import EXIT_FAILED, EXIT_OK, UsageError
from dpa.tools.cli.ray_lifecycle import announce_dashboard, hold_dashboard_if_running, start_ray

logger = logging.getLogger(__name__)

#: What ``dpa bench`` runs without a name.
DEFAULT_BENCHMARK = "throughput"


def _call_main(main: Any, label: str, argv: list[str]) -> Any:
    """Calls a script's ``main(argv)`` with ``sys.argv`` set to match; returns what it returned."""
    if not callable(main):
        raise UsageError(f"{label}: the registered entry is not a main(argv) function")
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


def _with_dashboard(args: argparse.Namespace, run: Callable[[], int]) -> int:
    """``run()``, after starting Ray with its dashboard when ``--dashboard`` asks for it."""
    url = None
    if args.dashboard:
        url = start_ray(dashboard=True, verbose=args.verbose)
        announce_dashboard(url)
    code = run()
    if args.dashboard:
        hold_dashboard_if_running(url)
    return code


def _print_listing(group: plugins.PluginGroup) -> int:
    for line in plugins.listing(group):
        print(line)
    return EXIT_OK


def cmd_experiment(args: argparse.Namespace) -> int:
    """``dpa experiment [--report DIR] NAME ARGS...``."""
    if args.list:
        return _print_listing(plugins.EXPERIMENTS)
    if not plugins.registered(plugins.EXPERIMENTS):
        raise UsageError(plugins.not_installed_message(plugins.EXPERIMENTS))
    if not args.name:
        raise UsageError(f"name an experiment: {', '.join(plugins.registered(plugins.EXPERIMENTS))}")
    name, main = plugins.load(plugins.EXPERIMENTS, args.name)
    paper = None
    if args.report:
        paper = plugins.load_optional(plugins.REFERENCES, name)
        if paper is None:
            having = [n for n in plugins.registered(plugins.REFERENCES) if n in plugins.registered(plugins.EXPERIMENTS)]
            raise UsageError(f"--report needs reference values registered as {name!r} (dpa.references); "
                             f"experiments with them: {', '.join(having) or 'none'}")
    argv = list(args.args)
    if args.report and _json_path_in(argv) is None:
        # The experiment writes its results where --out says; put them into the report directory.
        argv += ["--out", str(Path(args.report) / f"{name}_results.json")]

    def run() -> int:
        value = _call_main(main, f"dpa experiment {name}", argv)
        code = _exit_code(value)
        if args.report and code == EXIT_OK:
            data = value if isinstance(value, (dict, list)) else None
            if data is None:
                path = _json_path_in(argv)
                if path is None or not Path(path).exists():
                    raise UsageError(f"--report needs {name}'s results: pass its JSON output option, "
                                     f"e.g. 'dpa experiment --report DIR {name} --out DIR/results.json'")
                data = path
            from dpa.tools.report import write_experiment_report

            files = write_experiment_report(data, args.report, paper=paper)
            print(f"report: {', '.join(str(f) for f in files)}")
        return code

    return _with_dashboard(args, run)


def cmd_bench(args: argparse.Namespace) -> int:
    """``dpa bench [NAME] ARGS...``."""
    if args.list:
        return _print_listing(plugins.BENCHMARKS)
    name, main = plugins.load(plugins.BENCHMARKS, args.name)
    argv = list(args.args)
    return _with_dashboard(args, lambda: _exit_code(_call_main(main, f"dpa bench {name}", argv)))
