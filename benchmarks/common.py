"""Shared helpers of the dpa benchmarks: Ray/Spark start-up and shutdown, timing, process
CPU/RSS accounting, table printing and JSON output.

Every benchmark script is runnable as ``python -m benchmarks.<name> --help``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager
from typing import Any

import psutil

#: Actor classes of dpa, as they appear in a worker's process title (``ray::HostActor...``):
#: the coordinator, and the hosts that run the balancer, mappers and reducers.
DPA_ACTOR_CLASSES = ("CoordinatorActor", "HostActor")

#: JVM flags Spark 3.5 needs on Java 17 (same list as ``spark_bridge.session``).
_ADD_OPENS = (
    "java.lang", "java.lang.invoke", "java.io", "java.net", "java.nio", "java.math", "java.text",
    "java.util", "java.util.concurrent", "java.util.concurrent.atomic", "sun.nio.ch", "sun.nio.cs",
    "sun.security.action", "sun.util.calendar",
)
JAVA17_OPTIONS = " ".join(["-XX:+IgnoreUnrecognizedVMOptions"]
                          + [f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in _ADD_OPENS])


# ----------------------------------------------------------------------------- arguments
def parse_int(text: str) -> int:
    """``"10M"``, ``"500k"``, ``"1_000_000"`` or ``"2e6"`` -> int."""
    s = text.strip().lower().replace("_", "")
    factor = 1
    if s and s[-1] in "kmg":
        factor = {"k": 1_000, "m": 1_000_000, "g": 1_000_000_000}[s[-1]]
        s = s[:-1]
    return int(float(s) * factor)


def base_parser(description: str, rows: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--rows", type=parse_int, default=rows, help=f"records (default {rows:,}; accepts 10M, 500k)")
    p.add_argument("--mappers", type=int, default=None, help="JobConfig.num_mappers (default: dpa's, one per CPU)")
    p.add_argument("--reducers", type=int, default=None, help="JobConfig.num_reducers (default: dpa's, one per CPU, >= 2)")
    p.add_argument("--batch-size", type=parse_int, default=None, help="JobConfig.batch_size (default: dpa's)")
    p.add_argument("--report-interval", type=float, default=None, help="JobConfig.report_interval_s")
    p.add_argument("--lb-interval", type=float, default=None, help="JobConfig.lb_interval_s")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default=None, help="write the figures as JSON to this file")
    return p


def parse_shaped(p: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parses ``argv``; ``--mappers`` / ``--reducers`` left unset become the shape dpa's
    ``JobConfig`` picks by default on this machine (printed and recorded as numbers)."""
    import dpa

    args = p.parse_args(argv)
    shape = dpa.JobConfig(shape=dpa.ShapeConfig(num_mappers=args.mappers, num_reducers=args.reducers)).resolved()
    args.mappers, args.reducers = shape.num_mappers, shape.num_reducers
    return args


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """JobConfig fields given on the command line."""
    out: dict[str, Any] = {}
    if args.batch_size is not None:
        out["batch_size"] = args.batch_size
    if args.report_interval is not None:
        out["report_interval_s"] = args.report_interval
    if args.lb_interval is not None:
        out["lb_interval_s"] = args.lb_interval
    return out


# ----------------------------------------------------------------------------- output
def fmt(value: Any) -> str:
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 1e5:
            return f"{value:,.0f}"
        if abs(value) >= 100:
            return f"{value:.1f}"
        return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return "-" if value is None else str(value)


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None, title: str | None = None) -> None:
    """Prints ``rows`` (dicts) as an aligned text table."""
    if not rows:
        return
    columns = list(columns or rows[0].keys())
    cells = [[fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    if title:
        print(f"\n== {title}")
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(v.rjust(w) for v, w in zip(row, widths)))
    sys.stdout.flush()


def environment() -> dict[str, Any]:
    import pyarrow
    import ray

    return {
        "python": platform.python_version(), "ray": ray.__version__, "pyarrow": pyarrow.__version__,
        "cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0], "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "dpa_bytecode_cached": bytecode_cached(),
    }


def package_dir(package: str = "dpa") -> Any:
    """The directory of ``package``'s sources (a ``pathlib.Path``), or None if it is not found."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def bytecode_cached(package: str = "dpa") -> float:
    """The share of ``package``'s modules whose compiled bytecode is cached and current.

    Every actor process imports dpa. Without cached bytecode (a source checkout run with
    ``PYTHONDONTWRITEBYTECODE=1``, as on the development machine) each process compiles
    dpa's sources again, about 0.2 s of CPU; ``./run.sh setup`` compiles them once, as
    ``pip install`` does for an installed package. Start-up figures say which case they
    measured.
    """
    import importlib.util
    from pathlib import Path

    root = package_dir(package)
    sources = list(root.rglob("*.py")) if root is not None else []
    fresh = 0
    for src in sources:
        cached = Path(importlib.util.cache_from_source(str(src)))
        fresh += cached.exists() and cached.stat().st_mtime >= src.stat().st_mtime
    return fresh / len(sources) if sources else 0.0


def command_line() -> str:
    """The command that runs this script, as a user would type it (``python -m benchmarks.x ...``)."""
    import shlex

    import __main__

    spec = getattr(__main__, "__spec__", None)
    head = ["python", "-m", spec.name] if spec is not None and spec.name else ["python", *sys.argv[:1]]
    return shlex.join([*head, *sys.argv[1:]])


def write_json(path: str | None, payload: dict[str, Any]) -> None:
    if not path:
        return
    payload = {"env": environment(), "command": command_line(), **payload}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(payload, fh, indent=2, default=_json_default)
    print(f"\nwrote {path}")


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "item"):
        return obj.item()
    return repr(obj)


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


# ----------------------------------------------------------------------------- Ray
def init_ray(num_cpus: int | None = None) -> float:
    """Starts a local Ray for this driver (quiet); returns the seconds it took.

    :func:`dpa.runtime.ray.session.ensure_ray` retries a start that misses Ray's registration
    deadline on a loaded machine.
    """
    from dpa.runtime.ray.session import ensure_ray

    t0 = time.perf_counter()
    kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING,
                              "configure_logging": True}
    if num_cpus is not None:
        kwargs["num_cpus"] = num_cpus
    ensure_ray(**kwargs)
    return time.perf_counter() - t0


def stop_ray() -> None:
    import ray

    import dpa

    try:
        dpa.shutdown()
    finally:
        if ray.is_initialized():
            ray.shutdown()


# ----------------------------------------------------------------------------- Spark
def start_spark(parallelism: int = 2, driver_memory: str = "4g") -> Any:
    """Plain pyspark ``local[N]`` session with the Java 17 flags; returns the SparkSession."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master(f"local[{parallelism}]")
        .appName("dpa-benchmark")
        .config("spark.driver.memory", driver_memory)
        .config("spark.driver.extraJavaOptions", JAVA17_OPTIONS)
        .config("spark.executor.extraJavaOptions", JAVA17_OPTIONS)
        .config("spark.sql.shuffle.partitions", str(parallelism))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.adaptive.enabled", "true")
        .getOrCreate()
    )


@contextmanager
def temp_dir(prefix: str = "dpa-bench-"):
    path = tempfile.mkdtemp(prefix=prefix)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# ----------------------------------------------------------------------------- processes
def _title(proc: psutil.Process) -> str:
    try:
        cmd = proc.cmdline()
        return cmd[0] if cmd else proc.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return ""


def role_of(proc: psutil.Process, driver_pid: int) -> str:
    """``driver``, ``coordinator``, ``host`` (a process running balancer, mappers and
    reducers), ``raylet``, ``gcs``, ``ray-worker`` (other Ray workers: idle pool, data tasks)
    or ``other``."""
    if proc.pid == driver_pid:
        return "driver"
    title = _title(proc)
    for cls, role in (("CoordinatorActor", "coordinator"), ("HostActor", "host")):
        if title.startswith(f"ray::{cls}"):
            return role
    base = os.path.basename(title.split()[0]) if title else ""
    if base == "raylet":
        return "raylet"
    if base == "gcs_server":
        return "gcs"
    if title.startswith("ray::"):
        return "ray-worker"
    try:
        if "/ray/" in " ".join(proc.cmdline()):
            return "ray-system"  # dashboard agent, runtime-env agent, log monitor
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        pass
    return "other"


def job_processes() -> list[psutil.Process]:
    """This driver and every process it started (Ray's gcs/raylet/workers/actors, JVMs)."""
    me = psutil.Process()
    return [me] + me.children(recursive=True)


class CpuMeter:
    """CPU seconds used by each role between :meth:`start` and :meth:`stop`.

    Includes processes started during the interval (their whole CPU time).
    """

    def __init__(self) -> None:
        self.driver = os.getpid()
        self.before: dict[int, float] = {}

    @staticmethod
    def _cpu(proc: psutil.Process) -> float | None:
        try:
            t = proc.cpu_times()
            return t.user + t.system
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None

    def start(self) -> None:
        self.procs = {p.pid: p for p in job_processes()}
        self.before = {pid: c for pid, p in self.procs.items() if (c := self._cpu(p)) is not None}

    def stop(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for p in job_processes():
            proc = self.procs.get(p.pid, p)
            now = self._cpu(proc)
            if now is None:
                continue
            used = now - self.before.get(p.pid, 0.0)
            role = role_of(proc, self.driver)
            out[role] = out.get(role, 0.0) + used
        out["total"] = sum(out.values())
        return out


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """Calls ``fn()`` and measures it.

    Args:
        fn: What to measure.

    Returns:
        ``(fn's result, wall seconds, CPU seconds of all job processes)``.
    """
    cpu = CpuMeter()
    cpu.start()
    t0 = time.perf_counter()
    result = fn()
    wall = time.perf_counter() - t0
    return result, wall, cpu.stop()["total"]


def _memory(pid: int) -> tuple[int, int] | None:
    """(RSS, PSS) bytes of a process from /proc/<pid>/smaps_rollup.

    PSS (proportional set size) splits every shared page among the processes mapping it,
    so summing PSS over processes counts the Plasma object store and shared libraries
    once, where summing RSS would count them once per process.
    """
    rss = pss = None
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        return None
    if rss is None or pss is None:
        return None
    return rss, pss


class RssSampler:
    """Samples the memory of a set of processes every ``interval`` seconds.

    Each sample sums RSS and PSS over the selected processes (per role too); the peaks
    of the sums are kept. Processes that start during sampling are picked up.

    Args:
        select: ``Process -> role or None``; None skips the process.
        interval: Seconds between samples.
    """

    def __init__(self, select: Callable[[psutil.Process], str | None], interval: float = 0.2) -> None:
        self.select = select
        self.interval = interval
        self.peak_rss = 0
        self.peak_pss = 0
        self.peak_rss_by_role: dict[str, int] = {}
        self.peak_pss_by_role: dict[str, int] = {}
        self.peak_procs = 0
        self.samples = 0
        self.pids_seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rss-sampler")
        self._roles: dict[int, str | None] = {}

    def _role(self, proc: psutil.Process) -> str | None:
        # A Ray worker's title changes with the method it runs: re-check unknown ones.
        role = self._roles.get(proc.pid)
        if role is None or role in ("ray-worker", "ray-system", "other"):
            role = self.select(proc)
            self._roles[proc.pid] = role
        return role

    def sample(self) -> None:
        rss_sum = pss_sum = procs = 0
        rss_role: dict[str, int] = {}
        pss_role: dict[str, int] = {}
        for proc in job_processes():
            role = self._role(proc)
            if role is None:
                continue
            mem = _memory(proc.pid)
            if mem is None:
                continue
            rss, pss = mem
            procs += 1
            self.pids_seen.add(proc.pid)
            rss_sum += rss
            pss_sum += pss
            rss_role[role] = rss_role.get(role, 0) + rss
            pss_role[role] = pss_role.get(role, 0) + pss
        self.samples += 1
        if rss_sum > self.peak_rss:
            self.peak_rss, self.peak_rss_by_role = rss_sum, rss_role
        if pss_sum > self.peak_pss:
            self.peak_pss, self.peak_pss_by_role, self.peak_procs = pss_sum, pss_role, procs

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception:  # a process vanished mid-walk: skip this sample
                pass
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def mb(nbytes: float) -> float:
    return nbytes / (1 << 20)


def count_keys(table: Any, config: Any) -> tuple[Any, Any]:
    """Counts the records per ``key`` of ``table`` with dpa and fetches the counts.

    Args:
        table: The input (an Arrow table with a ``key`` column).
        config: The ``dpa.JobConfig``.

    Returns:
        ``(dpa result, its Arrow table of key and count)``.
    """
    import dpa

    result = dpa.run(table, key="key", reducer=dpa.Count(), config=config)
    return result, result.to_arrow()


def dpa_run_timed(table_or_source: Any, config: Any, reducer: Any = None, key: str = "key") -> tuple[Any, float]:
    """Runs ``dpa.run`` and returns ``(result, wall seconds)`` (result refs not fetched)."""
    import dpa

    t0 = time.perf_counter()
    result = dpa.run(table_or_source, key=key, reducer=reducer or dpa.Count(), config=config)
    return result, time.perf_counter() - t0
