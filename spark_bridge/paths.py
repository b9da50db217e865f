"""Which way a Spark DataFrame's rows go to dpa: through RayDP, or through Parquet files.

* ``"raydp"``: Spark on Ray (:func:`spark_bridge.get_or_create_spark`); partitions move
  between Spark's executors and Ray's object store directly (:mod:`spark_bridge.convert`).
  Needs RayDP installed (PySpark 3.5) and the DataFrame's session to be RayDP's.
* ``"staged"``: any session, PySpark 3.5 or 4.x, classic or Spark Connect: Spark writes
  Parquet files that dpa's mappers read, and reads dpa's result back the same way
  (:mod:`spark_bridge.staged`).

:func:`choose_path` takes ``"raydp"`` where it works, ``"staged"`` otherwise; the chosen
path is recorded in the result's ``stats.extra["spark_path"]``.
"""

from __future__ import annotations

import logging
from typing import Any

from dpa.errors import ConfigError

logger = logging.getLogger(__name__)

__all__ = ["PATHS", "choose_path", "is_raydp_session"]

#: Values of ``spark_bridge.run(path=...)`` besides ``None`` (choose).
PATHS = ("raydp", "staged")


def is_connect(df: Any) -> bool:
    """Whether ``df`` is a Spark Connect DataFrame (``pyspark.sql.connect``)."""
    return type(df).__module__.startswith("pyspark.sql.connect")


def is_raydp_session(df: Any) -> bool:
    """Whether ``df`` belongs to the running RayDP session (its SparkContext) of this process.

    False when RayDP is not installed, no RayDP session runs, ``df`` is a Spark Connect
    DataFrame, or its session is another one (e.g. a plain ``local[*]`` session).
    """
    if is_connect(df):
        return False
    try:
        from .cluster import raydp_session

        session = raydp_session()
    except ImportError:
        return False
    # RayDP's executors belong to its SparkContext: any session on it (newSession()) works.
    return session is not None and df.sparkSession.sparkContext is session.sparkContext


def choose_path(df: Any, path: str | None = None) -> str:
    """The bridge path for ``df``: ``path`` if given (checked to be usable), else
    ``"raydp"`` for a DataFrame of the RayDP session and ``"staged"`` for any other.

    Raises:
        ConfigError: ``path`` is not one of :data:`PATHS`, or is ``"raydp"`` for a
            DataFrame whose session is not RayDP's.
    """
    if path is None:
        chosen = "raydp" if is_raydp_session(df) else "staged"
        logger.debug("Spark bridge path: %s", chosen)
        return chosen
    if path not in PATHS:
        raise ConfigError(f"path must be None, 'raydp' or 'staged', got {path!r}")
    if path == "raydp" and not is_raydp_session(df):
        raise ConfigError(
            "path='raydp' needs RayDP installed (pip install '.[spark]', PySpark 3.5) and a DataFrame of "
            "the RayDP session (spark_bridge.get_or_create_spark); Spark Connect and other sessions "
            "go through path='staged' (the default for them)"
        )
    return path
