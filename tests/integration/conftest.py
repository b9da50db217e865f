"""One Ray for the whole integration session."""

from __future__ import annotations

import pytest
import ray

import dpa


@pytest.fixture(scope="session")
def ray_session():
    from dpa.runtime.ray.driver import ensure_ray

    started = not ray.is_initialized()
    if started:
        ensure_ray(num_cpus=2, logging_level="ERROR")  # as dpa starts it: 1 s metrics interval
    yield
    dpa.shutdown()
    if started:
        ray.shutdown()
