"""Paying a modelled cost in wall time: sleeps that add up to the cost asked for.

A reducer with :class:`~dpa.aggregates.contract.WithCost` in ``"sleep"`` mode pays each step's
cost with ``asyncio.sleep``. A timer fires late: the event loop rounds its wait up to the
millisecond and runs the other members of the host first. At a step of 0.1 s that is a few
percent more time per record than the cost asked for, which a skewed job then reports as
imbalance. :class:`SleepPacer` pays the lateness back on the next step, so that what a
reducer has slept after any step is the cost asked for so far plus the lateness of the last
sleep only, never less than the cost.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


class SleepPacer:
    """Sleeps for a sequence of costs, carrying each sleep's lateness over to the next.

    Args:
        clock: Seconds, monotonic (``time.perf_counter``).
        sleep: The coroutine function that waits (``asyncio.sleep``).
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._clock = clock
        self._sleep = sleep
        self.ahead_s = 0.0  # slept beyond the costs asked for so far (>= 0)

    async def pay(self, cost_s: float) -> None:
        """Waits for ``cost_s`` less what earlier sleeps overran; a cost the overrun covers
        whole is paid from it without waiting."""
        due = cost_s - self.ahead_s
        if due <= 0:
            self.ahead_s = -due
            return
        start = self._clock()
        await self._sleep(due)
        self.ahead_s = max(0.0, self._clock() - start - due)
