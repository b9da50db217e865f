"""One Ray for the whole integration session."""

from __future__ import annotations

import pytest
import ray

import dpa


@pytest.fixture(scope="session")
def ray_session():
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR")
    yield
    dpa.shutdown()
    if started:
        ray.shutdown()
