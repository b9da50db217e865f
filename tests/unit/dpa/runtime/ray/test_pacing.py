"""Paying costs in wall time: late timers are paid back, and the cost is never paid short."""

from __future__ import annotations

import asyncio

import pytest

from dpa.runtime.ray.pacing import SleepPacer


class LateTimers:
    """A clock and a sleep whose every wait overruns by ``late_s`` (as a loaded event loop's)."""

    def __init__(self, late_s: float) -> None:
        self.late_s = late_s
        self.now = 0.0
        self.waits: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds + self.late_s


def pay_all(pacer: SleepPacer, costs: list[float]) -> None:
    async def run() -> None:
        for cost in costs:
            await pacer.pay(cost)

    asyncio.run(run())


def test_each_sleep_is_shortened_by_the_last_ones_lateness() -> None:
    timers = LateTimers(late_s=0.003)
    pay_all(SleepPacer(timers.clock, timers.sleep), [0.1, 0.1, 0.1])
    assert timers.waits == pytest.approx([0.1, 0.097, 0.097])


def test_time_paid_is_the_cost_plus_one_lateness_not_one_per_step() -> None:
    timers = LateTimers(late_s=0.002)
    costs = [0.1] * 50
    pacer = SleepPacer(timers.clock, timers.sleep)
    pay_all(pacer, costs)
    assert timers.now == pytest.approx(sum(costs) + 0.002)
    assert timers.now >= sum(costs)
    assert pacer.ahead_s == pytest.approx(0.002)


def test_a_cost_the_lateness_covers_is_paid_without_waiting() -> None:
    timers = LateTimers(late_s=0.01)
    pacer = SleepPacer(timers.clock, timers.sleep)
    pay_all(pacer, [0.05, 0.004, 0.004, 0.05])
    # The first wait overran by 10 ms: the two 4 ms costs come out of it, the rest (2 ms)
    # shortens the last wait.
    assert timers.waits == pytest.approx([0.05, 0.048])
    assert timers.now >= 0.05 + 0.004 + 0.004 + 0.05


def test_punctual_timers_sleep_exactly_the_costs() -> None:
    timers = LateTimers(late_s=0.0)
    pay_all(SleepPacer(timers.clock, timers.sleep), [0.2, 0.01, 0.3])
    assert timers.waits == pytest.approx([0.2, 0.01, 0.3])


def test_real_sleeps_add_up_to_at_least_the_costs() -> None:
    import time

    pacer = SleepPacer()
    costs = [0.004] * 10
    start = time.perf_counter()
    pay_all(pacer, costs)
    elapsed = time.perf_counter() - start
    assert elapsed >= sum(costs) - 1e-6  # (a timer may fire within the clock's resolution of its time)
    assert elapsed < sum(costs) + 0.2  # (one lateness, with a loaded machine's margin)
