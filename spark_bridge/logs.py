"""What Spark on Ray prints on the console: a log4j2 configuration for its JVMs.

Left to themselves, the three JVMs of Spark on Ray talk on the console: the driver JVM loads
Spark's default log4j2 profile (``WARN Utils`` hostname lines, ``WARN NativeCodeLoader``,
"Setting default log level"), RayDP's app-master JVM is pointed at a ``log4j2.xml`` that is
not on its class path (``ERROR StatusConsoleListener Reconfiguration failed``), and the Ray
core worker inside the app master logs its start at INFO (``gcs_client.cc`` lines).

:func:`log4j2_file` writes one log4j2 properties file per level, which
:class:`spark_bridge.SparkConfig` hands to every JVM (``spark.log4j.config.file.name``,
``spark.ray.log4j.config.file.name`` and the executors' ``-Dlog4j2.configurationFile``), and
:func:`quiet_jvm_start` keeps what the JVMs print outside log4j (the Ray core worker's
start-up lines) off the console.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

#: Levels :class:`spark_bridge.SparkConfig` accepts for ``log_level`` (log4j2's names).
LOG_LEVELS = ("ERROR", "WARN", "INFO", "DEBUG")

_TEMPLATE = """\
# dpa's log4j2 configuration for Spark on Ray (spark_bridge.logs): console at {level}.
rootLogger.level = {level_lower}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
# pyspark's driver counts as Spark's shell: its level comes from this logger, and when it
# differs from the root's Spark prints "Setting default log level" on the console.
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = {level_lower}
# Spark's own noisy-at-WARN loggers stay quiet unless asked for DEBUG.
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = {quiet}
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = {quiet}
"""


def log4j2_file(level: str) -> Path:
    """The path of a log4j2 properties file that logs at ``level`` to stderr (written once).

    Args:
        level: One of :data:`LOG_LEVELS`.

    Returns:
        An absolute path under the temporary directory, named after the level and user.
    """
    if level not in LOG_LEVELS:
        raise ValueError(f"log_level must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    quiet = "debug" if level == "DEBUG" else "error"
    text = _TEMPLATE.format(level=level, level_lower=level.lower(), quiet=quiet)
    folder = Path(tempfile.gettempdir()) / f"dpa-log4j2-{os.getuid()}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"log4j2-{level.lower()}.properties"
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)  # atomic: concurrent drivers never read half a file
    return path


def java_option(level: str) -> str:
    """JVM options for ``extraJavaOptions``: the log4j2 file of ``level``, and the same level
    for the Ray Java runtime inside the JVM (RayDP's object-store writer), which sets up
    log4j2 again when it connects to Ray and otherwise logs at INFO on stdout."""
    return f"-Dlog4j2.configurationFile={log4j2_file(level).as_uri()} -Dray.logging.level={level}"


@contextlib.contextmanager
def quiet_jvm_start(level: str) -> Iterator[Path | None]:
    """While RayDP starts Spark's driver and app-master JVMs (children of this process), and
    ``level`` is ERROR: Ray's C++ backend in them logs at WARNING, and their stderr goes to a
    file instead of the console. The Ray core worker inside the driver JVM prints a few INFO
    lines (``gcs_client.cc``) before it reads any log level, so only a redirected stderr keeps
    them off the console. The JVMs keep the redirection; this process gets its stderr back.

    Yields:
        The file the JVMs' stderr goes to, or None when nothing is redirected.
    """
    if level != "ERROR":
        yield None
        return
    set_env = "RAY_BACKEND_LOG_LEVEL" not in os.environ
    if set_env:
        os.environ["RAY_BACKEND_LOG_LEVEL"] = "warning"
    path = log4j2_file(level).parent / f"spark-jvm-{os.getpid()}.log"
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "ab") as sink:
            os.dup2(sink.fileno(), 2)
        yield path
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        if set_env:
            os.environ.pop("RAY_BACKEND_LOG_LEVEL", None)
