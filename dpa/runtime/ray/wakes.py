"""Wake-ups at clock times, one timer per time for every member of a process.

A reducer's machine asks to be woken at a tick of its report clock
(:class:`~dpa.engine.instructions.ReportAt`); every reducer of a host asks for the same
ticks, so :func:`wake_at` keeps one event-loop timer per distinct time and runs every
callback due then in one step of the loop. The reports and progress those callbacks post
(:func:`~dpa.runtime.ray.outbox.post`) then leave the process as one Ray call per
destination process: a host sends the balancer one message per tick however many
reducers it runs, and none at a tick where none of them had anything to say.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)


class _Wakes(threading.local):
    """The callbacks waiting per clock time (per thread: an actor's event loop runs in one)."""

    def __init__(self) -> None:
        self.due: dict[float, list[Callable[[], None]]] = {}
        self.fired = 0  # timers fired (for tests and diagnostics)

    def add(self, at: float, callback: Callable[[], None], clock: Callable[[], float]) -> None:
        group = self.due.get(at)
        if group is None:
            group = self.due[at] = []
            asyncio.get_running_loop().call_later(max(0.0, at - clock()), self._fire, at)
        group.append(callback)

    def _fire(self, at: float) -> None:
        self.fired += 1
        for callback in self.due.pop(at, ()):
            try:
                callback()
            except Exception:  # one member's failure is its own: the others still wake
                logger.warning("a wake-up callback failed", exc_info=True)


_WAKES = _Wakes()


def wake_at(at: float, callback: Callable[[], None], clock: Callable[[], float] = time.perf_counter) -> None:
    """Runs ``callback()`` on this thread's event loop once ``clock()`` reaches ``at``,
    in the same loop step as every other callback asked for the same ``at``."""
    _WAKES.add(at, callback, clock)


def timers_fired() -> int:
    """Timers this thread's event loop has fired (one per distinct wake time)."""
    return _WAKES.fired
