"""Fixtures for the Spark-on-Ray tests.

Every test in this directory is skipped, with the reason, when Java (or raydp/pyspark) is
unavailable. A single Ray instance and a single Spark-on-Ray session are shared by the whole
test session: starting Spark on Ray costs 15-30 s on a small machine.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

_HERE = Path(__file__).parent.resolve()


def _skip_reason() -> str | None:
    for module in ("pyspark", "raydp", "ray"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install 'dpa[spark]')"
    from spark_bridge.session import JavaNotFoundError, check_java

    try:
        check_java()
    except JavaNotFoundError as exc:
        return f"Spark tests need Java: {exc}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the tests of this directory when Spark cannot run here."""
    ours = [item for item in items if _HERE in Path(str(item.path)).resolve().parents]
    if not ours:
        return
    reason = _skip_reason()
    if reason is None:
        return
    marker = pytest.mark.skip(reason=reason)
    for item in ours:
        item.add_marker(marker)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A Spark-on-Ray session (1 executor x 1 core x 1g) shared by all tests."""
    import ray
    from ray.data import DataContext

    from dpa.runtime.ray.session import ensure_ray
    from spark_bridge.session import SparkConfig, get_or_create_spark, stop_spark

    started_ray = False
    if not ray.is_initialized():
        ensure_ray(num_cpus=2, logging_level=logging.WARNING)  # a stale `ray start` record ignored
        started_ray = True
    DataContext.get_current().enable_progress_bars = False
    try:
        session = get_or_create_spark(
            SparkConfig(
                app_name="dpa-tests", num_executors=1, executor_cores=1, executor_memory="1g"
            )
        )
        session.sparkContext.setLogLevel("ERROR")
        yield session
    finally:
        stop_spark()
        if started_ray and ray.is_initialized():
            ray.shutdown()
