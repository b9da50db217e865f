"""A Spark job that fails while the bridge reads its input becomes one :class:`dpa.JobFailedError`.

PySpark raises a task's failure as a ``PythonException`` (the user's function raised in a
Python worker) or another captured JVM exception whose text carries Spark's stack trace. The
bridge turns it into a :class:`dpa.errors.JobFailedError` that says where it happened and
what the task raised; the Python worker's traceback stays in the message, Spark's own error
is kept as ``__cause__`` when it is a JVM failure.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from dpa.errors import DPAError, JobFailedError

#: Lines of the Python worker's traceback kept in the message (its end: the user's frames).
TRACEBACK_LINES = 12

_PREFIX = "Spark failed computing the input DataFrame"


def _is_spark_error(exc: BaseException) -> bool:
    module = type(exc).__module__
    return module.startswith(("pyspark.errors", "pyspark.sql.utils", "py4j"))


def _python_worker_traceback(text: str) -> list[str]:
    """The traceback a Python worker reported, without PySpark's preamble."""
    lines = [line.rstrip() for line in text.strip().splitlines()]
    start = next((i for i, line in enumerate(lines) if line.startswith("Traceback")), 0)
    return [line for line in lines[start:] if line.strip()]


def spark_failure(exc: BaseException) -> JobFailedError | None:
    """The dpa error for a Spark failure ``exc``, or None when ``exc`` is not Spark's.

    Args:
        exc: What a Spark action raised.

    Returns:
        A :class:`JobFailedError` whose message names the failing task's error: the last
        line of a Python worker's traceback first, then the traceback's end
        (:data:`TRACEBACK_LINES` lines); for a JVM error, its first line.
    """
    if isinstance(exc, DPAError) or not _is_spark_error(exc):
        return None
    text = str(exc)
    if type(exc).__name__ == "PythonException":
        trace = _python_worker_traceback(text)
        last = trace[-1] if trace else type(exc).__name__
        shown = "\n".join(trace[-TRACEBACK_LINES:])
        return JobFailedError(f"{_PREFIX}: a Spark task raised {last}\n{shown}")
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    return JobFailedError(f"{_PREFIX}: {type(exc).__name__}: {first[:500]} "
                          "(SparkConfig(log_level='WARN') shows Spark's own log)")


@contextlib.contextmanager
def spark_errors() -> Iterator[None]:
    """Re-raises a Spark failure inside the block as :func:`spark_failure`'s error."""
    try:
        yield
    except Exception as exc:
        failure = spark_failure(exc)
        if failure is None:
            raise
        if type(exc).__name__ == "PythonException":
            raise failure from None  # the message holds the worker's traceback
        raise failure from exc
