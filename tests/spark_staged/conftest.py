"""Fixtures for the Spark bridge's staged path without RayDP (PySpark 4.x, Spark Connect).

These tests run in an environment without RayDP (``pip install '.[spark4]'``; ``.ci/run``
makes one); where RayDP is installed they are skipped, and ``tests/spark`` covers the
staged path by forcing it (``path="staged"``) on PySpark 3.5. One Ray and one Spark
session (classic ``local[2]``, or a local Spark Connect server with
``DPA_TEST_SPARK_CONNECT=1``) serve the whole test session.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_HERE = Path(__file__).parent.resolve()
CONNECT = os.environ.get("DPA_TEST_SPARK_CONNECT") == "1"


def _skip_reason() -> str | None:
    if importlib.util.find_spec("raydp") is not None:
        return "RayDP is installed: the bridge's path without RayDP is tested in the spark4 environment (.ci/run)"
    for module in ("pyspark", "ray"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install '.[spark4]')"
    from spark_bridge.java import JavaNotFoundError, check_java

    try:
        check_java()
    except JavaNotFoundError as exc:
        return f"Spark tests need Java: {exc}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ours = [item for item in items if _HERE in Path(str(item.path)).resolve().parents]
    reason = _skip_reason() if ours else None
    if reason is not None:
        for item in ours:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A local Spark session: classic, or Spark Connect with ``DPA_TEST_SPARK_CONNECT=1``."""
    import ray
    from pyspark.sql import SparkSession
    from ray.data import DataContext

    from dpa.runtime.ray.session import ensure_ray
    from spark_bridge.java import JAVA17_OPTIONS

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers: this venv
    started_ray = not ray.is_initialized()
    if started_ray:
        ensure_ray(num_cpus=2, logging_level=logging.WARNING)
    DataContext.get_current().enable_progress_bars = False
    builder = SparkSession.builder.appName("dpa-staged-tests")
    builder = builder.remote("local[2]") if CONNECT else builder.master("local[2]")
    session = (builder.config("spark.driver.extraJavaOptions", JAVA17_OPTIONS)
               .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
               .getOrCreate())
    try:
        yield session
    finally:
        session.stop()
        import dpa

        dpa.shutdown()
        if started_ray and ray.is_initialized():
            ray.shutdown()
