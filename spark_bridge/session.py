"""Start, reuse and stop Spark on Ray (RayDP) for dpa.

The functions here wrap :func:`raydp.init_spark` / :func:`raydp.stop_spark` with the things
every dpa user otherwise has to rediscover:

* a Java check that fails early with an actionable message instead of a py4j stack trace;
* the ``--add-opens`` flags Java 17 needs (without them ``ray.data.from_spark`` kills the
  executor actor), merged into -- never replacing -- user supplied ``extraJavaOptions``;
* ``PYSPARK_PYTHON`` pointed at the running interpreter, so Python UDF workers started by
  the executor JVM import the same pyspark/pyarrow/ray as the driver;
* sizing defaults that fit the machine;
* clean shutdown: the RayDP actors, the driver JVM and (only if dpa started it) Ray.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - imported for type hints only
    from pyspark.sql import SparkSession

from spark_bridge.java import (  # re-exported: part of this module's API
    JAVA17_OPTIONS,
    JavaNotFoundError,
    check_java,
    find_java,
    java_version,
    parse_java_version,
)
from spark_bridge.logs import (
    LOG_LEVELS,
    drop_jvm_start_lines,
    java_option,
    log4j2_file,
    quiet_jvm_start,
    reapply_log4j2,
)
from spark_bridge.security import local_ray, loopback_conf

from .cluster import parse_memory  # re-exported: part of this module's API
from .cluster import raydp_session as _raydp_session

logger = logging.getLogger(__name__)

#: Spark/RayDP settings that receive :data:`JAVA17_OPTIONS`: the driver JVM, the executor
#: JVMs (RayDP Java actors) and the RayDP app-master JVM.
JAVA_OPTION_KEYS: tuple[str, ...] = (
    "spark.driver.extraJavaOptions",
    "spark.executor.extraJavaOptions",
    "spark.ray.raydp_app_master.extraJavaOptions",
)

# Ray CPU share of each executor actor (RayDP defaults it to executor_cores).
_EXECUTOR_ACTOR_CPU_KEY = "spark.ray.raydp_spark_executor.actor.resource.cpu"

_MIN_EXECUTOR_MEMORY = 512 << 20

__all__ = [
    "JAVA17_OPTIONS",
    "JAVA_OPTION_KEYS",
    "JavaNotFoundError",
    "SparkConfig",
    "check_java",
    "find_java",
    "get_or_create_spark",
    "java_version",
    "merge_java_options",
    "parse_java_version",
    "default_executor_cores",
    "default_executor_memory",
    "default_executors",
    "default_num_executors",
    "is_spark_running",
    "parse_memory",
    "spark_session",
    "stop_spark",
]

# --------------------------------------------------------------------------- configuration


def merge_java_options(user: str | None, required: str = JAVA17_OPTIONS) -> str:
    """Combine required JVM flags with user flags without losing either.

    Required flags the user already passes are not repeated; the user's flags come last so
    that, for flags where the JVM keeps the last value (``-D``, ``-Xss``...), the user wins.

    Args:
        user: The user's option string (may be ``None`` or empty).
        required: Flags that must be present.

    Returns:
        A single option string.
    """
    user_tokens = shlex.split(user) if user else []
    present = set(user_tokens)
    merged = [tok for tok in shlex.split(required) if tok not in present] + user_tokens
    return " ".join(shlex.quote(tok) for tok in merged)


def _total_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _available_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_executors(cpus: int | None = None) -> tuple[int, int]:
    """Spark's executors for a machine: how many, and cores per executor.

    One executor per 8 CPUs (at least one, i.e. one on laptops / small boxes), each with
    half the CPUs but at most 4 cores, which leaves at least half the machine to dpa's
    actors.

    Args:
        cpus: CPU count to size for (defaults to this machine's).

    Returns:
        ``(executor count, cores per executor)``, both >= 1.
    """
    cpus = cpus or _available_cpus()
    return max(1, cpus // 8), max(1, min(4, cpus // 2))


def default_executor_cores(cpus: int | None = None) -> int:
    """Cores per executor for ``cpus`` CPUs (default: this machine's), see :func:`default_executors`."""
    return default_executors(cpus)[1]


def default_num_executors(cpus: int | None = None) -> int:
    """Executors for ``cpus`` CPUs (default: this machine's), see :func:`default_executors`."""
    return default_executors(cpus)[0]


def default_executor_memory(total_bytes: int | None = None, num_executors: int = 1) -> str:
    """Executor heap: 10% of RAM split over the executors, clamped to [1g, 4g].

    Args:
        total_bytes: Physical memory to size for (defaults to this machine's).
        num_executors: How many executors share the budget.

    Returns:
        A Spark memory string such as ``"2g"`` or ``"1536m"``.
    """
    total = total_bytes if total_bytes is not None else _total_memory_bytes()
    if not total:
        return "1g"
    per_executor = total // 10 // max(1, num_executors)
    per_executor = max(1 << 30, min(4 << 30, per_executor))
    mib = per_executor // (1 << 20) // 512 * 512  # round down to 512 MiB steps
    return f"{mib // 1024}g" if mib % 1024 == 0 else f"{mib}m"


@dataclass
class SparkConfig:
    """How to size and configure Spark on Ray.

    Attributes:
        app_name: Spark application name (also names the RayDP master actor).
        num_executors: Executor count; defaults from the machine (see
            :func:`default_num_executors`).
        executor_cores: Cores per executor; defaults from the machine.
        executor_memory: Heap per executor, e.g. ``"2g"``/``"1536m"`` or bytes; defaults to
            ~10% of RAM clamped to [1g, 4g].
        extra_conf: Extra Spark settings. ``*.extraJavaOptions`` are merged with
            :data:`JAVA17_OPTIONS`, not replaced.
        executor_actor_cpus: Ray CPUs reserved by each executor actor (RayDP default: its
            ``executor_cores``). Lower it (e.g. ``0.5``) to leave Ray CPUs to dpa's actors on
            a small machine; Spark still runs ``executor_cores`` tasks at once.
        python_executable: Python that Spark's executor-side Python workers run (default:
            this interpreter, unless ``PYSPARK_PYTHON`` is already set).
        log_level: What Spark's JVMs print on the console (log4j2 level: ``"ERROR"``,
            ``"WARN"``, ``"INFO"``, ``"DEBUG"``); ``"ERROR"`` keeps the console to the job's
            own output (see :mod:`spark_bridge.logs`).
    """

    app_name: str = "dpa"
    num_executors: int | None = None
    executor_cores: int | None = None
    executor_memory: str | int | None = None
    extra_conf: dict[str, str] = field(default_factory=dict)
    executor_actor_cpus: float | None = None
    python_executable: str | None = None
    log_level: str = "ERROR"

    def __post_init__(self) -> None:
        if not isinstance(self.app_name, str) or not self.app_name.strip():
            raise ValueError(f"app_name must be a non-empty string, got {self.app_name!r}")
        if self.num_executors is None:
            self.num_executors = default_num_executors()
        if self.executor_cores is None:
            self.executor_cores = default_executor_cores()
        if self.executor_memory is None:
            self.executor_memory = default_executor_memory(num_executors=self.num_executors)
        for name in ("num_executors", "executor_cores"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        size = parse_memory(self.executor_memory)
        if size < _MIN_EXECUTOR_MEMORY:
            raise ValueError(
                f"executor_memory={self.executor_memory!r} is below 512m; Spark executors "
                "do not start reliably with less (1g or more recommended)"
            )
        if not isinstance(self.extra_conf, Mapping):
            raise ValueError(f"extra_conf must be a dict of str -> str, got {self.extra_conf!r}")
        conf: dict[str, str] = {}
        for key, value in self.extra_conf.items():
            if not isinstance(key, str) or not key:
                raise ValueError(f"extra_conf keys must be non-empty strings, got {key!r}")
            if value is None:
                raise ValueError(f"extra_conf[{key!r}] is None; give a string value")
            conf[key] = str(value).lower() if isinstance(value, bool) else str(value)
        self.extra_conf = conf
        if self.log_level not in LOG_LEVELS:
            raise ValueError(f"log_level must be one of {', '.join(LOG_LEVELS)}, got {self.log_level!r}")
        if self.executor_actor_cpus is not None:
            cpus = self.executor_actor_cpus
            if isinstance(cpus, bool) or not isinstance(cpus, (int, float)) or cpus < 0:
                raise ValueError(f"executor_actor_cpus must be a number >= 0, got {cpus!r}")

    def spark_conf(self, loopback: bool = False) -> dict[str, str]:
        """Return the ``configs`` dict handed to :func:`raydp.init_spark`.

        Args:
            loopback: Every JVM binds to ``127.0.0.1`` (a single-node Ray this process
                started; :func:`spark_bridge.security.loopback_conf`).

        Returns:
            dpa defaults, overridden by ``extra_conf``, with Java 17 options merged in.
        """
        conf: dict[str, str] = {
            # The UI is useless inside a library call and costs startup time and a port.
            "spark.ui.enabled": "false",
            # Progress bars interleave with (and overwrite) the caller's own output.
            "spark.ui.showConsoleProgress": "false",
            # 200 shuffle partitions is far too many for a few executor cores.
            "spark.sql.shuffle.partitions": str(
                max(2, 2 * int(self.num_executors) * int(self.executor_cores))
            ),
        }
        if self.executor_actor_cpus is not None:
            conf[_EXECUTOR_ACTOR_CPU_KEY] = str(self.executor_actor_cpus)
        # One log4j2 file for the driver, app-master and executor JVMs (RayDP's keys).
        log_file = log4j2_file(self.log_level).as_uri()
        conf["spark.log4j.config.file.name"] = log_file
        conf["spark.ray.log4j.config.file.name"] = log_file
        placement = loopback_conf(self.extra_conf) if loopback else {}
        actor_options = placement.pop("java_options", "")
        conf.update(placement)
        conf.update(self.extra_conf)
        for key in JAVA_OPTION_KEYS:  # the user's options last: they win
            required = f"{JAVA17_OPTIONS} {java_option(self.log_level)}"
            if key != "spark.driver.extraJavaOptions":
                required = f"{required} {actor_options}"
            conf[key] = merge_java_options(conf.get(key), required)
        return conf


# --------------------------------------------------------------------------- lifecycle

# What this module started, so that we only tear down our own things.
_state: dict[str, bool] = {"ray": False, "spark": False}


def _is_alive(spark: SparkSession) -> bool:
    """Whether ``spark`` has not been stopped behind RayDP's back (``spark.stop()``)."""
    try:
        return spark.sparkContext._jsc is not None
    except Exception:  # noqa: BLE001 - any failure here means "not usable"
        return False


def is_spark_running() -> bool:
    """Whether a RayDP Spark session is currently up in this process.

    Returns:
        ``True`` if :func:`raydp.init_spark` has been called and not stopped.
    """
    return _raydp_session() is not None


def _prepare_environment(config: SparkConfig) -> None:
    """Set process environment the Spark JVMs and Python workers rely on."""
    python = config.python_executable
    if python:
        os.environ["PYSPARK_PYTHON"] = python
    else:
        # Without this the executor runs `python3` from PATH, which usually lacks pyspark.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        java_bin = os.path.join(java_home, "bin")
        on_path = shutil.which("java")
        if on_path is None:
            # RayDP starts its app master with plain `java` from PATH.
            os.environ["PATH"] = java_bin + os.pathsep + os.environ.get("PATH", "")
        elif os.path.realpath(os.path.dirname(on_path)) != os.path.realpath(java_bin):
            logger.warning(
                "JAVA_HOME (%s) and `java` on PATH (%s) differ; the Spark driver uses "
                "JAVA_HOME, RayDP's app master uses PATH",
                java_home,
                on_path,
            )


def _ensure_ray() -> None:
    from dpa.runtime.ray.session import ensure_ray

    if ensure_ray() is not None:
        logger.info("started a local Ray instance for Spark on Ray")
        _state["ray"] = True


def get_or_create_spark(config: SparkConfig | None = None) -> SparkSession:
    """Return the running RayDP SparkSession, starting Ray and Spark on Ray if needed.

    If a RayDP session is already up (started by dpa or by the caller) it is returned as is
    and ``config`` is ignored. Otherwise Java is checked, Ray is started when not yet
    initialised (reusing an initialised one), and :func:`raydp.init_spark` is called with
    ``config`` plus the Java 17 options.

    Args:
        config: Sizing and Spark settings; defaults to ``SparkConfig()``.

    Returns:
        The SparkSession (Spark on Ray).

    Raises:
        JavaNotFoundError: If no suitable Java runtime is installed.
    """
    import ray

    existing = _raydp_session()
    if existing is not None and not _is_alive(existing):
        logger.warning("the RayDP SparkSession was stopped directly; cleaning up and restarting")
        _stop(shutdown_ray=False)
        existing = None
    if existing is not None:
        if config is not None:
            logger.info("reusing the running RayDP Spark session; the given config is ignored")
        return existing
    if config is None:
        config = SparkConfig()
    check_java()
    _prepare_environment(config)
    started_ray_before = _state["ray"]
    _ensure_ray()
    import raydp

    logger.info(
        "starting Spark on Ray: %d executor(s) x %d core(s) x %s",
        config.num_executors,
        config.executor_cores,
        config.executor_memory,
    )
    if config.log_level == "ERROR":
        drop_jvm_start_lines()
    conf = config.spark_conf(loopback=local_ray())
    try:
        with quiet_jvm_start(config.log_level) as jvm_log:
            if jvm_log is not None:
                logger.info("Spark's JVMs write their console output to %s", jvm_log)
            spark = raydp.init_spark(
                app_name=config.app_name,
                num_executors=int(config.num_executors),
                executor_cores=int(config.executor_cores),
                executor_memory=config.executor_memory,
                configs=conf,
            )
        reapply_log4j2(spark, conf["spark.log4j.config.file.name"])
    except BaseException:
        _shutdown_driver_gateway()
        if _state["ray"] and not started_ray_before:
            ray.shutdown()
            _state["ray"] = False
        raise
    _state["spark"] = True
    return spark


def _shutdown_driver_gateway() -> None:
    """Stop pyspark's driver JVM (py4j gateway), which outlives ``SparkSession.stop()``.

    Spark only reads driver JVM settings (class path with the RayDP jars, Java options) when
    the gateway is launched, so a stale gateway would also break the next Spark on Ray start.
    """
    try:
        from pyspark import SparkContext
    except ImportError:  # pragma: no cover - pyspark is a hard dependency of raydp
        return
    if SparkContext._active_spark_context is not None:
        return  # someone else's live SparkContext still uses the JVM
    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    with contextlib.suppress(Exception):
        gateway.shutdown()
    if proc is not None:
        with contextlib.suppress(Exception):
            if proc.stdin is not None:
                proc.stdin.close()  # the gateway JVM exits when its stdin closes
        try:
            proc.wait(timeout=15)
        except Exception:  # noqa: BLE001 - last resort: make sure no JVM is left behind
            with contextlib.suppress(Exception):
                proc.kill()
                proc.wait(timeout=5)
    SparkContext._gateway = None
    SparkContext._jvm = None


def _stop(shutdown_ray: bool) -> None:
    import ray
    import raydp

    if is_spark_running():
        logger.info("stopping Spark on Ray")
        try:
            raydp.stop_spark()
        finally:
            _state["spark"] = False
            _shutdown_driver_gateway()
    if shutdown_ray:
        _state["ray"] = False
        if ray.is_initialized():
            logger.info("shutting down the Ray instance dpa started")
            ray.shutdown()


def stop_spark() -> None:
    """Stop Spark on Ray and release everything it holds.

    Stops the RayDP session (executor actors, app master actor and JVM), then pyspark's
    driver JVM, then Ray -- the latter only if dpa started it. Safe to call when nothing is
    running.
    """
    _stop(shutdown_ray=_state["ray"])


@contextlib.contextmanager
def spark_session(config: SparkConfig | None = None) -> Iterator[SparkSession]:
    """Context manager yielding a Spark-on-Ray session.

    On exit it stops only what it started: a session that was already running stays up, and
    Ray is shut down only if this call started it.

    Args:
        config: Passed to :func:`get_or_create_spark`.

    Yields:
        The SparkSession.
    """
    import ray

    owns_spark = not is_spark_running()
    owns_ray = owns_spark and not ray.is_initialized()
    spark = get_or_create_spark(config)
    try:
        yield spark
    finally:
        if owns_spark:
            _stop(shutdown_ray=owns_ray and _state["ray"])
