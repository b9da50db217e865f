"""What Ray and Ray Data print on the driver's console when dpa starts them.

``dpa.run`` prints nothing of its own. When it starts Ray itself (:func:`dpa.runtime.ray.session.ensure_ray`),
Ray's driver-side logger is set to ERROR (no start-up warnings such as the token
authentication notice); the Ray a user starts keeps the user's settings. The CLI and the main
job, which own their process, call :func:`quiet_logs` too: it also keeps the actors' log lines
off the console (``log_to_driver``) and hides Ray Data's progress bars and notices, unless
``verbose``. Spark's JVMs are configured by :mod:`spark_bridge.logs`.
"""

from __future__ import annotations

import logging
from typing import Any

#: ``ray.init`` options :func:`dpa.runtime.ray.session.ensure_ray` uses unless told otherwise.
RAY_INIT_DEFAULTS: dict[str, Any] = {"logging_level": logging.ERROR}

#: Whether :func:`after_ray_start` quiets Ray Data (set by :func:`quiet_logs`).
_QUIET_RAY_DATA = {"on": False}


def quiet_logs(verbose: bool = False) -> None:
    """Quiet console for a process dpa owns (the CLI, the main job); ``verbose`` turns it off.

    Args:
        verbose: Show Ray's INFO logs, the actors' log lines and Ray Data's progress bars.
    """
    if verbose:
        RAY_INIT_DEFAULTS.update(logging_level=logging.INFO, log_to_driver=True)
        return
    RAY_INIT_DEFAULTS.update(logging_level=logging.ERROR, log_to_driver=False)
    _QUIET_RAY_DATA["on"] = True
    import sys

    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        quiet_ray_data()


def after_ray_start() -> None:
    """Called by :func:`dpa.runtime.ray.session.ensure_ray` once it started Ray: applies
    :func:`quiet_ray_data` when :func:`quiet_logs` asked for a quiet console (importing
    ``ray.data`` only then, as it costs a second or two)."""
    if _QUIET_RAY_DATA["on"]:
        quiet_ray_data()


def quiet_ray_data() -> None:
    """Ray Data's progress bars off and its notices below ERROR hidden.

    Ray Data configures its loggers when ``ray.data`` is first imported, so this imports it
    first and sets the levels after.
    """
    from ray.data import DataContext

    ctx = DataContext.get_current()
    ctx.enable_progress_bars = False
    if hasattr(ctx, "print_on_execution_start"):
        ctx.print_on_execution_start = False
    for name in ("ray", "ray.data"):
        logging.getLogger(name).setLevel(logging.ERROR)
