"""The running Spark on Ray as the data path sees it.

The bridge's data path asks a few things of the session it runs in: whether a DataFrame's
session is RayDP's, how many tasks its executors run at once, the name of RayDP's master
actor (which holds the result's object refs), and the memory sizes in its settings. They
are answered here, so that the data path (:mod:`spark_bridge.convert`,
:mod:`spark_bridge.to_spark`, :mod:`spark_bridge.partials`, :mod:`spark_bridge.paths`)
never imports the modules that start and stop Spark (:mod:`spark_bridge.session`,
:mod:`spark_bridge.java`, :mod:`spark_bridge.logs`, :mod:`spark_bridge.security`), and
those never import the data path.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - imported for type hints only
    from pyspark.sql import SparkSession

__all__ = ["RAYDP_MASTER_SUFFIX", "executor_task_slots", "parse_memory", "raydp_session"]

#: RayDP names its master actor <appName> + this suffix; it also serves as object holder.
RAYDP_MASTER_SUFFIX = "_SPARK_MASTER"

_MEMORY_RE = re.compile(r"^\s*(\d+)\s*([kmgt]?)b?\s*$", re.IGNORECASE)
_MEMORY_FACTORS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def raydp_session() -> SparkSession | None:
    """The SparkSession of the running RayDP context, if there is one.

    Raises:
        ImportError: RayDP is not installed.
    """
    import raydp.context as raydp_context

    ctx = getattr(raydp_context, "_global_spark_context", None)
    if ctx is None:
        return None
    return getattr(ctx, "_spark_session", None)


def executor_task_slots(spark: SparkSession) -> int:
    """How many tasks the session's executors run at once (instances x cores).

    Read from ``spark.executor.instances`` and ``spark.executor.cores``, which RayDP sets;
    Spark's ``defaultParallelism`` is at least 2 even on a single core. Falls back to
    ``defaultParallelism`` if either is unset.
    """
    conf = spark.conf  # one JVM call per key; sparkContext.getConf() copies every key
    instances, cores = conf.get("spark.executor.instances", None), conf.get("spark.executor.cores", None)
    try:
        return max(1, int(instances) * int(cores))
    except (TypeError, ValueError):
        return max(1, spark.sparkContext.defaultParallelism)


def parse_memory(value: str | int) -> int:
    """Parse a Spark/JVM memory size (``"1g"``, ``"512m"``, ``"2GB"``, bytes as int).

    Args:
        value: The size.

    Returns:
        Size in bytes.

    Raises:
        ValueError: If the value is not a positive size.
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"memory size must be like '1g', '512m' or bytes, got {value!r}")
    if isinstance(value, int):
        size = value
    else:
        match = _MEMORY_RE.match(value)
        if match is None:
            raise ValueError(
                f"memory size must be like '1g', '512m', '2048m' or a byte count, got {value!r}"
            )
        size = int(match.group(1)) * _MEMORY_FACTORS[match.group(2).lower()]
    if size <= 0:
        raise ValueError(f"memory size must be positive, got {value!r}")
    return size
