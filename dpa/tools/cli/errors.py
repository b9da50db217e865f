"""How the ``dpa`` command line fails: exit codes and the usage error.

Exit codes: 0 success; 1 the job or script failed; 2 a usage error (bad argument, unknown
policy, missing file, ...); 130 interrupted.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A mistake on the command line; reported as one line, exit code 2."""


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line (its type name when it has none)."""
    return " ".join(str(exc).split()) or type(exc).__name__
