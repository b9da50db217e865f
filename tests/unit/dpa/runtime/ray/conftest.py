"""The coordinator built without Ray: its own handle (the host of the balancer it runs) is a
stand-in that names the process ``coordinator`` and takes no calls."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import dpa.runtime.ray.host as ray_host


@pytest.fixture(autouse=True)
def coordinator_handle(monkeypatch) -> SimpleNamespace:
    handle = SimpleNamespace(_actor_id=SimpleNamespace(hex=lambda: "id-coordinator"))
    monkeypatch.setattr(ray_host, "own_handle", lambda: handle)
    return handle
