"""The ``dpa`` command line (the ``dpa`` console script, or ``python -m dpa.tools.cli``).

Subcommands::

    dpa run WL4 --policy halving --rounds 2 --cost-us 2000 --report out/wl4
    dpa run zipf --records 1M --keys 10000 --z 1.2 --output counts.parquet
    dpa run --input logs.csv --key user --reducer sum --value bytes
    dpa run --input book.txt                      # word count of a text file
    dpa run --list                                # the named workloads installed
    dpa experiment table1 --runtime local --runs 1
    dpa experiment --report out/table1 table1 --out out/table1/results.json
    dpa experiment --list
    dpa simulate zipf --records 100k --policy hash,doubling,pkg
    dpa bench --rows 20000                        # the 'throughput' benchmark
    dpa bench --list
    dpa report out/wl4/stats.json --baseline out/wl4/baseline_stats.json -o out/wl4-again
    dpa policies

``dpa`` imports no package above it. Named workloads (``WL4``, ``zipf``), experiments,
benchmarks and reference tables come from the entry point groups ``dpa.inputs``,
``dpa.experiments``, ``dpa.benchmarks`` and ``dpa.references`` that installed packages
register in (:mod:`dpa.tools.cli.plugins`); ``dpa run FILE`` and ``dpa policies`` need none.

``dpa``'s own options of ``experiment`` and ``bench`` go *before* the script's name;
everything after the name is passed to the script's ``main(argv)`` unchanged.

Exit codes: 0 success; 1 the job or script failed; 2 a usage error (bad argument, unknown
policy, missing file, ...); 130 interrupted. Errors are one line on stderr;
``--verbose`` adds the traceback and dpa's INFO logging.

Progress: a tqdm bar on stderr when it is a terminal, otherwise one plain line every few
seconds (``--no-progress`` turns both off).

Modules: :mod:`~dpa.tools.cli.parser` (arguments), :mod:`~dpa.tools.cli.commands` (run, simulate,
report, policies), :mod:`~dpa.tools.cli.scripts` (experiment, bench), :mod:`~dpa.tools.cli.inputs`
(files and named workloads), :mod:`~dpa.tools.cli.plugins` (entry point discovery),
:mod:`~dpa.tools.cli.progress`, :mod:`~dpa.tools.cli.ray_lifecycle` and :mod:`~dpa.tools.cli.errors`.
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Sequence

from dpa.tools.cli.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, UsageError, one_line

logger = logging.getLogger(__name__)

__all__ = ["main"]


def _setup_logging(verbose: bool) -> None:
    from dpa.runtime.ray.quiet import quiet_logs

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    quiet_logs(verbose=verbose)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dpa`` console script; returns the exit code.

    Args:
        argv: The arguments after the program name (default: ``sys.argv[1:]``).
    """
    from dpa.tools.cli.parser import build_parser, split_passthrough
    from dpa.tools.cli.ray_lifecycle import cleanup

    own, passthrough = split_passthrough(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(own)
    except UsageError as exc:
        print(f"dpa: error: {one_line(exc)}", file=sys.stderr)
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
        return fail("error: ", one_line(exc), EXIT_USAGE)
    except JobFailedError as exc:
        return fail("job failed: ", one_line(exc), EXIT_FAILED)
    except DPAError as exc:
        # ConfigError, SchemaError, KeyEncodingError: bad input; UserCodeError: user code raised.
        if type(exc).__name__ == "UserCodeError":
            return fail("job failed: ", one_line(exc), EXIT_FAILED)
        return fail("error: ", one_line(exc), EXIT_USAGE)
    except FileNotFoundError as exc:
        message = one_line(exc) if exc.filename is None else f"{exc.strerror or 'not found'}: {exc.filename}"
        return fail("error: ", message, EXIT_USAGE)
    except (ValueError, TypeError) as exc:
        return fail("error: ", one_line(exc), EXIT_USAGE)
    except Exception as exc:
        suffix = "" if verbose else " (rerun with --verbose for the traceback)"
        return fail("error: ", f"{type(exc).__name__}: {one_line(exc)}{suffix}", EXIT_FAILED)
    finally:
        try:
            cleanup()
        except Exception as exc:  # pragma: no cover
            logger.debug("cleanup failed: %s", exc)
