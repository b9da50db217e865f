"""ensure_ray: retries a start that times out, gives up on other errors (no real Ray here)."""

from __future__ import annotations

import pytest
import ray

from dpa import ray_session


@pytest.fixture
def fake_start(monkeypatch):
    calls = {"init": 0, "shutdown": 0}
    outcomes: list[BaseException | str] = []

    def init(options):
        calls["init"] += 1
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    monkeypatch.setattr(ray_session, "_init", init)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "shutdown", lambda: calls.__setitem__("shutdown", calls["shutdown"] + 1))
    return calls, outcomes


def test_a_start_that_times_out_is_retried(fake_start):
    calls, outcomes = fake_start
    outcomes += [RuntimeError("The raylet timed out during startup"), "context"]
    assert ray_session.ensure_ray() == "context"
    assert calls == {"init": 2, "shutdown": 1}


def test_other_start_errors_and_the_last_timeout_are_raised(fake_start):
    calls, outcomes = fake_start
    outcomes += [ValueError("bad option")]
    with pytest.raises(ValueError, match="bad option"):
        ray_session.ensure_ray()
    outcomes += [RuntimeError("timed out")] * ray_session.START_ATTEMPTS
    with pytest.raises(RuntimeError, match="timed out"):
        ray_session.ensure_ray()
    assert calls["init"] == 1 + ray_session.START_ATTEMPTS
