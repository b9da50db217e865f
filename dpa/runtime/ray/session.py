"""Starting Ray for dpa, from any thread of the driver.

``ray.init`` started from a worker thread ties Ray's head processes (GCS, raylet, ...) to
that thread: Ray starts them with ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, which Linux fires
when the *thread* that forked them exits, not the process. A ``dpa.run`` called first from
a short-lived thread would then leave a driver whose Ray died under it. :func:`ensure_ray`
therefore starts Ray from the main thread when it is called there, and otherwise from a
keeper thread that lives as long as the process.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any

logger = logging.getLogger(__name__)

#: Ray's default metrics report interval is 10 s; dpa asks for 1 s (Ray's minimum is 1 s)
#: when it starts Ray itself. For a Ray you start: ``ray start --head
#: --system-config='{"metrics_report_interval_ms": 1000}'`` or
#: ``ray.init(_system_config={"metrics_report_interval_ms": 1000})``.
METRICS_REPORT_INTERVAL_MS = 1000

#: How often Ray deletes the objects no one references any more from the object store; Ray's
#: default is 1 s, dpa asks for 20 ms when it starts Ray. A job's coordinator lets go of the
#: input blocks when the job ends, so the next job's blocks are written into memory the last
#: job's used, not into pages never touched, each of which costs a page fault (4 KB zeroed
#: and mapped) in every process that writes or reads it. For a Ray you start: ``ray start
#: --head --system-config='{"free_objects_period_milliseconds": 20}'``.
FREE_OBJECTS_PERIOD_MS = 20

#: Starts tried before giving up: on a loaded machine the raylet can miss Ray's fixed
#: registration deadline ("timed out during startup"); the half-started node is shut down
#: and the start tried again.
START_ATTEMPTS = 3

#: ``ray.init`` options that only a new Ray accepts: Ray refuses each of them ("When
#: connecting to an existing cluster, ... must not be provided") when it joins a running one.
START_ONLY_OPTIONS = ("num_cpus", "num_gpus", "resources", "labels", "object_store_memory",
                      "_system_config", "_node_name", "_enable_object_reconstruction")

#: Seconds to wait for the recorded cluster's GCS port to answer.
PROBE_TIMEOUT_S = 1.0

_LOCK = threading.Lock()
_KEEPER: threading.Thread | None = None


def _recorded_address(temp_dir: str | None) -> str | None:
    """The address ``ray start`` (or ``ray.cluster_utils.Cluster``) recorded in Ray's temp
    directory (``/tmp/ray/ray_current_cluster``), which a bare ``ray.init()`` joins."""
    try:
        from ray._private.utils import read_ray_address
    except ImportError:  # moved in another Ray version: leave the choice to ray.init
        return None
    try:
        return read_ray_address(temp_dir) or None
    except OSError:
        return None


def _answers(address: str) -> bool:
    """Whether something listens at ``host:port`` (the recorded cluster's GCS)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S):
            return True
    except (OSError, ValueError):
        return False


def _where_to_start(options: dict[str, Any]) -> dict[str, Any]:
    """Resolves a bare start against a cluster recorded by ``ray start``.

    With no ``address`` and no ``RAY_ADDRESS``, ``ray.init`` joins the cluster named in
    ``ray_current_cluster``. That file outlives a cluster that was not stopped with
    ``ray stop`` (killed, or a ``ray.cluster_utils.Cluster`` whose process was), and then
    every start fails: with
    ``num_cpus`` or ``_system_config`` ("When connecting to an existing cluster, ... must not
    be provided") or, without them, by timing out on the dead address. So: a recorded cluster
    that answers is joined (as a bare ``ray.init()`` would; options only a new Ray takes are
    dropped); one that does not is ignored, and a local Ray is started.
    """
    if options.get("address") is not None or os.environ.get("RAY_ADDRESS"):
        return options
    recorded = _recorded_address(options.get("_temp_dir"))
    if recorded is None:
        return options
    if not _answers(recorded):
        logger.warning(
            "ignoring the Ray cluster recorded at %s: nothing answers there (a cluster that was not "
            "stopped with `ray stop` leaves its address behind in ray_current_cluster); starting a "
            "local Ray instead",
            recorded,
        )
        return {**options, "address": "local"}
    dropped = sorted(k for k in START_ONLY_OPTIONS if options.get(k) is not None)
    logger.info(
        "joining the Ray cluster at %s (started with `ray start`)%s",
        recorded,
        f"; options only a new Ray takes are not used: {', '.join(dropped)}" if dropped else "",
    )
    return {k: v for k, v in options.items() if k not in START_ONLY_OPTIONS}


def _init(options: dict[str, Any]) -> Any:
    import ray

    return ray.init(**options)


def _init_in_keeper(options: dict[str, Any]) -> Any:
    """Runs ``ray.init`` in a daemon thread that never exits (the parent of Ray's processes)."""
    global _KEEPER
    done = threading.Event()
    outcome: dict[str, Any] = {}

    def keep() -> None:
        try:
            outcome["context"] = _init(options)
        except BaseException as exc:  # handed to the caller below
            outcome["error"] = exc
        done.set()
        if "error" not in outcome:
            threading.Event().wait()  # live as long as the process: Ray's head processes die with us

    _KEEPER = threading.Thread(target=keep, name="dpa-ray-keeper", daemon=True)
    _KEEPER.start()
    done.wait()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["context"]


def ensure_ray(**init_kwargs: Any) -> Any:
    """Starts a local Ray if none is running in this process (reuses one that is).

    Like a bare ``ray.init()``, it joins a cluster started on this machine with ``ray start``;
    an address that ``ray start`` left behind and nothing answers at is ignored with a
    warning (see :func:`_where_to_start`). Safe to call from any thread, and from several
    threads at once: one of them starts Ray, the others wait for it. A start that times out
    (a loaded machine) is retried ``START_ATTEMPTS`` times.

    Args:
        **init_kwargs: Extra ``ray.init`` arguments (e.g. ``num_cpus``, ``include_dashboard``).

    Returns:
        ``ray.init``'s ``RayContext`` (``.dashboard_url``) when this call started Ray, else None.
    """
    import ray

    if ray.is_initialized():
        return None
    with _LOCK:
        if ray.is_initialized():
            return None
        from dpa.runtime.ray.quiet import RAY_INIT_DEFAULTS, after_ray_start

        options: dict[str, Any] = {
            "include_dashboard": False,
            **RAY_INIT_DEFAULTS,
            "_system_config": {"metrics_report_interval_ms": METRICS_REPORT_INTERVAL_MS,
                               "free_objects_period_milliseconds": FREE_OBJECTS_PERIOD_MS},
        }
        options.update(init_kwargs)
        options = _where_to_start(options)
        start = _init if threading.current_thread() is threading.main_thread() else _init_in_keeper
        for attempt in range(START_ATTEMPTS):
            try:
                context = start(options)
                after_ray_start()
                return context
            except Exception as exc:
                if "timed out" not in str(exc) or attempt == START_ATTEMPTS - 1:
                    raise
                logger.warning("Ray did not start in time (%s); retrying", str(exc).splitlines()[0][:200])
                ray.shutdown()
        return None
