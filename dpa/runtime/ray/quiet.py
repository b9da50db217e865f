"""What Ray and Ray Data print on the driver's console when dpa starts them.

``dpa.run`` prints nothing of its own. When it starts Ray itself (:func:`dpa.runtime.ray.session.ensure_ray`),
Ray's driver-side logger is set to ERROR (no start-up warnings such as the token
authentication notice); the Ray a user starts keeps the user's settings. The CLI and the main
job, which own their process, call :func:`quiet_logs` too: it also keeps the actors' log lines
off the console (``log_to_driver``) and hides Ray Data's progress bars and notices, unless
``verbose``. Spark's JVMs are configured by :mod:`spark_bridge.logs`.

A ``ray.data.Dataset`` given to ``dpa.run`` is read by executing its plan, which Ray Data
announces on the console (``Starting execution of Dataset``, ``Running Dataset``, progress
bars, ``execution finished``). :func:`quiet_ray_data_reads` keeps those off the console
while dpa reads the dataset, and puts every setting back after: the user's own Ray Data
jobs keep their behaviour, and Ray Data's log file still gets everything.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
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


#: ``DataContext`` fields :func:`quiet_ray_data_reads` sets while dpa reads a dataset.
_QUIET_CONTEXT = {"enable_progress_bars": False, "print_on_execution_start": False, "enable_auto_log_stats": False}

_READS_LOCK = threading.Lock()
# Readers in progress, and what the first of them changed (restored by the last).
_READS: dict[str, Any] = {"active": 0, "handlers": []}


def _is_ray_dataset(obj: Any) -> bool:
    return type(obj).__module__.startswith("ray.data") and type(obj).__name__ in ("Dataset", "MaterializedDataset")


def _console_handlers() -> list[logging.Handler]:
    """The handlers of Ray Data's loggers that print on the console (not its log files)."""
    found = []
    for name in ("ray.data",):
        for handler in logging.getLogger(name).handlers:
            if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler) \
                    and "File" not in type(handler).__name__:
                found.append(handler)
    return found


@contextlib.contextmanager
def quiet_ray_data_reads(source: Any) -> Iterator[None]:
    """While the block runs, Ray Data prints nothing on the console about executing
    ``source`` (a ``ray.data.Dataset``; anything else: no change).

    The dataset's own ``DataContext`` (a dataset keeps the context it was created with)
    and the current one get progress bars, the execution-start notice and the automatic
    stats log off; the console handlers of Ray Data's ``ray.data`` logger get the level
    ERROR (its file handler keeps logging). Everything is restored when the block ends
    (by the last of several concurrent readers, for the handlers).
    """
    if not _is_ray_dataset(source):
        yield
        return
    from ray.data import DataContext

    contexts = {id(c): c for c in (getattr(source, "context", None), DataContext.get_current()) if c is not None}
    saved = []
    for ctx in contexts.values():
        before = {name: getattr(ctx, name) for name in _QUIET_CONTEXT if hasattr(ctx, name)}
        saved.append((ctx, before))
        for name in before:
            setattr(ctx, name, _QUIET_CONTEXT[name])
    with _READS_LOCK:
        if _READS["active"] == 0:
            _READS["handlers"] = [(h, h.level) for h in _console_handlers()]
            for handler, _ in _READS["handlers"]:
                handler.setLevel(max(handler.level, logging.ERROR))
        _READS["active"] += 1
    try:
        yield
    finally:
        with _READS_LOCK:
            _READS["active"] -= 1
            if _READS["active"] == 0:
                for handler, level in _READS["handlers"]:
                    handler.setLevel(level)
                _READS["handlers"] = []
        for ctx, before in saved:
            for name, value in before.items():
                setattr(ctx, name, value)
