"""What Spark on Ray prints on the console: a log4j2 configuration for its JVMs.

Left to themselves, the three JVMs of Spark on Ray talk on the console: the driver JVM loads
Spark's default log4j2 profile (``WARN Utils`` hostname lines, ``WARN NativeCodeLoader``,
"Setting default log level"), RayDP's app-master JVM is pointed at a ``log4j2.xml`` that is
not on its class path (``ERROR StatusConsoleListener Reconfiguration failed``), and the Ray
core worker inside every JVM logs its start at INFO (``gcs_client.cc`` lines) before it reads
any log level, and the Ray Java runtime inside the driver JVM replaces the driver's log4j2
configuration with its own (everything at INFO on stdout, so a failed task prints
``WARN TaskSetManager`` and its Java stack trace on the console).

:func:`log4j2_file` writes one log4j2 properties file per level, which
:class:`spark_bridge.SparkConfig` hands to every JVM (``spark.log4j.config.file.name``,
``spark.ray.log4j.config.file.name`` and the executors' ``-Dlog4j2.configurationFile``), and
:func:`quiet_jvm_start` keeps what the JVMs print outside log4j (the Ray core worker's
start-up lines) off the console. :func:`reapply_log4j2` puts the configuration back in the
driver JVM once Ray's runtime has replaced it, and :func:`drop_jvm_start_lines` keeps the
start-up lines of the JVMs Ray starts (the executor actors, whose stderr Ray forwards to the
driver as ``(raylet)`` lines) off the console.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

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


#: Lines the Ray core worker inside a JVM logs at INFO before it has read any log level: they
#: say nothing a user can act on.
JVM_START_LINES = re.compile(r"gcs_client\.cc:\d+: GcsClient has no Cluster ID set")

_FILTER_NAME = "ray_print_logs"


def _without_start_lines(handler: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def handle(batch: dict[str, Any]) -> None:
        lines = batch.get("lines") or []
        kept = [line for line in lines if not JVM_START_LINES.search(line)]
        if len(kept) != len(lines):
            if not kept:
                return
            batch = {**batch, "lines": kept}
        handler(batch)

    handle.dpa_filters_jvm_start = True  # type: ignore[attr-defined]
    return handle


def drop_jvm_start_lines() -> bool:
    """Keeps the Ray core worker's start-up lines of Spark's JVMs (:data:`JVM_START_LINES`)
    off the driver's console, every other forwarded line unchanged.

    The executor actors are JVMs that the raylet starts: their stderr goes to the raylet's
    error log, which Ray forwards to every driver (``(raylet) ... gcs_client.cc:96: GcsClient
    has no Cluster ID set``), and so does RayDP's master actor for the app-master JVM it
    starts. This wraps the handler with which Ray prints forwarded lines on this driver
    (``log_to_driver``); it stays until Ray shuts down. Nothing to do when the driver prints
    no forwarded lines.

    Returns:
        Whether Ray's printing handler was found (it is filtered from then on).
    """
    try:
        from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher
    except ImportError:  # another Ray layout: the lines stay, nothing breaks
        return False
    found = False
    with dispatcher._lock:
        for index, (name, handler) in enumerate(dispatcher.handlers):
            if name == _FILTER_NAME:
                found = True
                if not getattr(handler, "dpa_filters_jvm_start", False):
                    dispatcher.handlers[index] = (name, _without_start_lines(handler))
    return found


def reapply_log4j2(spark: Any, config_uri: str) -> None:
    """Points the driver JVM's log4j2 back at ``config_uri``.

    The Ray Java runtime that RayDP starts inside the driver JVM replaces its log4j2
    configuration with one of its own (root logger at INFO, on stdout); Spark then lowers
    the root to WARN, and a failed task prints ``WARN TaskSetManager`` with its Java stack
    trace on the caller's stdout. Reconfiguring from the file the session was given restores
    its level and destination (stderr).

    Args:
        spark: The SparkSession (its driver JVM is reached through py4j).
        config_uri: The log4j2 file the session's JVMs were given.
    """
    if "://" not in config_uri and not config_uri.startswith("file:"):
        config_uri = Path(config_uri).resolve().as_uri()  # a plain path, as a user may give it
    try:
        jvm = spark.sparkContext._jvm
        context = jvm.org.apache.logging.log4j.LogManager.getContext(False)
        context.setConfigLocation(jvm.java.net.URI(config_uri))
    except Exception as exc:  # noqa: BLE001 - a louder console is no reason to fail the session
        logger.warning("could not reconfigure the Spark driver's logging from %s: %s", config_uri, exc)
