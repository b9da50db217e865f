"""Ray for one command: starting it (with the dashboard if asked), and stopping it at the end.

A command that needs Ray starts it through :func:`dpa.runtime.ray.driver.ensure_ray` and leaves it
to :func:`cleanup`, which :func:`dpa.tools.cli.main` calls on the way out. With ``--dashboard`` the
dashboard's URL is printed and, on a terminal, Ray stays up until Enter.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

logger = logging.getLogger(__name__)

#: Tries to start Ray (a loaded machine sometimes misses Ray's start-up deadline).
#: Whether a CLI command started Ray in this process (only then does :func:`cleanup` stop it).
_started_ray = False


def start_ray(*, dashboard: bool, verbose: bool) -> str | None:
    """Starts Ray through :func:`dpa.runtime.ray.session.ensure_ray`; returns the dashboard URL, if any."""
    import ray

    from dpa.runtime.ray.session import ensure_ray

    options: dict[str, Any] = {}
    if dashboard:
        options.update(include_dashboard=True, dashboard_host="127.0.0.1")
    if verbose:
        options["logging_level"] = logging.INFO
    was_up = ray.is_initialized()
    if was_up and dashboard:
        logger.warning("Ray is already running in this process; its dashboard setting is kept")
    context = ensure_ray(**options)  # retries a start that times out on a loaded machine
    global _started_ray
    _started_ray = _started_ray or context is not None
    if not dashboard:
        return None
    return dashboard_url(context)


def dashboard_url(context: Any = None) -> str | None:
    """The dashboard URL from ``ray.init``'s RayContext or, failing that, the running node."""
    url = getattr(context, "dashboard_url", None)
    if not url:
        try:
            from ray._private import worker

            url = getattr(getattr(worker, "_global_node", None), "webui_url", None)
        except Exception:  # pragma: no cover - private API moved
            url = None
    if not url:
        return None
    return url if "://" in url else f"http://{url}"


def announce_dashboard(url: str | None) -> None:
    """Prints the dashboard's URL, or why there is none."""
    if url:
        print(f"Ray dashboard: {url}", flush=True)
    else:
        print("Ray dashboard did not start (is ray[default] installed? see --verbose)", file=sys.stderr, flush=True)


def hold_dashboard(url: str | None) -> None:
    """Keeps Ray (and its dashboard) up until Enter or Ctrl-C when stdin is a terminal."""
    if not url or not sys.stdin or not sys.stdin.isatty():
        return
    try:
        input(f"Dashboard still up at {url} — press Enter (or Ctrl-C) to stop Ray and exit. ")
    except (EOFError, KeyboardInterrupt):
        print(file=sys.stderr)


def hold_dashboard_if_running(url: str | None) -> None:
    """:func:`hold_dashboard` when Ray is still up in this process."""
    import ray

    if ray.is_initialized():
        hold_dashboard(url)


def cleanup() -> None:
    """Releases dpa's actors and stops the Ray this process started."""
    if "ray" not in sys.modules:
        return
    import ray

    try:
        import dpa

        dpa.shutdown()
    except Exception as exc:  # pragma: no cover
        logger.debug("dpa.shutdown failed: %s", exc)
    global _started_ray
    if _started_ray and ray.is_initialized():  # a Ray the caller started stays up
        ray.shutdown()
    _started_ray = False
