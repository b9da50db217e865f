"""ensure_ray: retries a start that times out, gives up on other errors (no real Ray here)."""

from __future__ import annotations

import pytest
import ray

import dpa.runtime.ray.session as ray_session


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
    monkeypatch.setattr(ray_session, "_recorded_address", lambda temp_dir: None)  # not this machine's
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


def _record(monkeypatch, address, answers):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray_session, "_recorded_address", lambda temp_dir: address)
    monkeypatch.setattr(ray_session, "_answers", lambda addr: answers)


def test_a_dead_recorded_cluster_is_ignored_and_a_local_ray_started(fake_start, monkeypatch, caplog):
    """`ray_current_cluster` outlives a cluster not stopped with `ray stop`: a bare
    ray.init(num_cpus=...) would fail on it ("When connecting to an existing cluster ...")."""
    calls, outcomes = fake_start
    seen = []
    monkeypatch.setattr(ray_session, "_init", lambda options: seen.append(options) or "context")
    _record(monkeypatch, "192.0.2.2:38395", answers=False)
    with caplog.at_level("WARNING", logger="dpa.runtime.ray.session"):
        assert ray_session.ensure_ray(num_cpus=2) == "context"
    assert seen[0]["address"] == "local" and seen[0]["num_cpus"] == 2
    assert "192.0.2.2:38395" in caplog.text and "ray stop" in caplog.text


def test_a_live_recorded_cluster_is_joined_without_start_only_options(fake_start, monkeypatch):
    seen = []
    monkeypatch.setattr(ray_session, "_init", lambda options: seen.append(options) or "context")
    _record(monkeypatch, "127.0.0.1:6379", answers=True)
    ray_session.ensure_ray(num_cpus=2, logging_level="ERROR")
    assert "address" not in seen[0] and "num_cpus" not in seen[0] and "_system_config" not in seen[0]
    assert seen[0]["logging_level"] == "ERROR"


def test_an_explicit_address_or_ray_address_is_left_to_ray(fake_start, monkeypatch):
    seen = []
    monkeypatch.setattr(ray_session, "_init", lambda options: seen.append(options) or "context")
    _record(monkeypatch, "192.0.2.2:38395", answers=False)
    ray_session.ensure_ray(address="10.0.0.1:6379")
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.2:6379")
    ray_session.ensure_ray(num_cpus=2)
    assert seen[0]["address"] == "10.0.0.1:6379" and "address" not in seen[1] and seen[1]["num_cpus"] == 2


def test_answers_probes_the_port():
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert ray_session._answers(f"127.0.0.1:{port}")
    assert not ray_session._answers(f"127.0.0.1:{port}")
    assert not ray_session._answers("not-an-address")
