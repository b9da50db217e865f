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
import threading
from typing import Any

logger = logging.getLogger(__name__)

#: Ray's default metrics report interval is 10 s; dpa asks for 1 s (Ray's minimum is 1 s)
#: when it starts Ray itself. For a Ray you start: ``ray start --head
#: --system-config='{"metrics_report_interval_ms": 1000}'`` or
#: ``ray.init(_system_config={"metrics_report_interval_ms": 1000})``.
METRICS_REPORT_INTERVAL_MS = 1000

#: Starts tried before giving up: on a loaded machine the raylet can miss Ray's fixed
#: registration deadline ("timed out during startup"); the half-started node is shut down
#: and the start tried again.
START_ATTEMPTS = 3

_LOCK = threading.Lock()
_KEEPER: threading.Thread | None = None


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

    Safe to call from any thread, and from several threads at once: one of them starts
    Ray, the others wait for it. A start that times out (a loaded machine) is retried
    ``START_ATTEMPTS`` times.

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
        options: dict[str, Any] = {
            "include_dashboard": False,
            "logging_level": logging.WARNING,
            "_system_config": {"metrics_report_interval_ms": METRICS_REPORT_INTERVAL_MS},
        }
        options.update(init_kwargs)
        start = _init if threading.current_thread() is threading.main_thread() else _init_in_keeper
        for attempt in range(START_ATTEMPTS):
            try:
                return start(options)
            except Exception as exc:
                if "timed out" not in str(exc) or attempt == START_ATTEMPTS - 1:
                    raise
                logger.warning("Ray did not start in time (%s); retrying", str(exc).splitlines()[0][:200])
                ray.shutdown()
        return None
