"""Wake-ups without Ray: one timer per wake time, and every callback due then runs in one
step of the event loop (so what they post leaves the process as one call per destination)."""

from __future__ import annotations

import asyncio
import logging
import time
from types import SimpleNamespace

import pytest

from dpa.runtime.ray.host import MemberRef
from dpa.runtime.ray.outbox import post
from dpa.runtime.ray.wakes import timers_fired, wake_at


def test_callbacks_asked_for_the_same_time_share_one_timer_and_one_loop_step():
    ran: list[str] = []
    sent: list = []
    coordinator = SimpleNamespace(_actor_id=SimpleNamespace(hex=lambda: "coord"),
                                  call_batch=SimpleNamespace(remote=lambda calls: sent.append(calls)),
                                  call=SimpleNamespace(remote=lambda *args: sent.append([args])))

    async def scenario() -> None:
        fired = timers_fired()
        at = time.perf_counter() + 0.02
        for r in range(5):  # five reducers of a host, each with a report for the balancer
            wake_at(at, lambda r=r: (ran.append(f"r{r}"),
                                     post(MemberRef(coordinator, "balancer"), "report", "job", r)))
        wake_at(at + 0.03, lambda: ran.append("later"))
        await asyncio.sleep(0.035)
        assert ran == ["r0", "r1", "r2", "r3", "r4"] and timers_fired() - fired == 1
        assert len(sent) == 1 and [args[2][1] for args in sent[0]] == [0, 1, 2, 3, 4]  # one message
        await asyncio.sleep(0.04)
        assert ran[-1] == "later" and timers_fired() - fired == 2

    asyncio.run(scenario())


def test_a_failing_callback_does_not_stop_the_others(caplog: pytest.LogCaptureFixture):
    ran: list[int] = []

    async def scenario() -> None:
        at = time.perf_counter() + 0.01
        wake_at(at, lambda: 1 / 0)
        wake_at(at, lambda: ran.append(1))
        await asyncio.sleep(0.03)

    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
    assert ran == [1] and "wake-up callback failed" in caplog.text
