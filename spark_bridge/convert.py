"""Spark DataFrames (Spark on Ray) into Ray: Arrow object refs and Ray Datasets.

Spark -> Ray follows :func:`ray.data.from_spark` (RayDP's recoverable path: executors cache
the partitions as Arrow and Ray tasks fetch them into the object store), but with its own
fetch task, because raydp's leaves Ray workers in "load code from local" mode.

The way back is :mod:`spark_bridge.to_spark`.
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dpa.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover - imported for type hints only
    import ray
    import ray.data
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from dpa.input.sources import ArrowRefs

logger = logging.getLogger(__name__)



# Attempts of a partition fetch task (also bounds lineage reconstruction of a lost block).
_FETCH_RETRIES = 5


# --------------------------------------------------------------------------- Spark -> Ray


# Spark ids of the Arrow caches made by spark_to_ray_dataset, per DataFrame object.
_spark_caches: weakref.WeakKeyDictionary[DataFrame, list[int]] = weakref.WeakKeyDictionary()


def _fetch_partition(
    executor_actor_name: str,
    rdd_id: int,
    partition_id: int,
    schema_json: str,
    driver_agent_url: str,
    transform: Callable[[pa.Table], pa.Table] | None = None,
) -> pa.Table:
    """Ray task body: read one cached Spark partition (Arrow IPC) from its executor actor.

    Calling a Java actor from Python needs the worker's ``load_code_from_local`` flag. raydp's
    own fetch task sets it and leaves it set, after which that worker imports every later task's
    module by name instead of unpickling it -- re-running a driver script's top level for
    functions defined in ``__main__``. Here the flag is restored as soon as the call returns.
    ``transform``, if given, is applied to the table here, in the fetch task.
    """
    import pyarrow as pa
    import ray
    from ray._private import worker as ray_worker

    worker = ray_worker.global_worker
    previous = worker.load_code_from_local
    worker.set_load_code_from_local(True)
    try:
        executor = ray.get_actor(executor_actor_name)
        call = executor.getRDDPartition.remote(rdd_id, partition_id, schema_json, driver_agent_url)
    finally:
        worker.set_load_code_from_local(previous)
    ipc_bytes = ray.get(call)
    table = pa.ipc.open_stream(pa.BufferReader(ipc_bytes)).read_all()
    # Spark attaches schema metadata; blocks are cleaner (and unify better) without it.
    table = table.replace_schema_metadata()
    return table if transform is None else transform(table)


@functools.cache
def _remote_fetch():
    import ray

    return ray.remote(max_retries=_FETCH_RETRIES)(_fetch_partition)


def spark_to_arrow_refs(
    df: DataFrame,
    num_blocks: int | None = None,
    transform: Callable[[pa.Table], pa.Table] | None = None,
    schema: pa.Schema | None = None,
) -> ArrowRefs:
    """Puts a Spark-on-Ray DataFrame's partitions into Ray's object store as Arrow tables.

    Same mechanism as :func:`ray.data.from_spark` in raydp 1.6.5 (the "recoverable" path):
    Spark computes the DataFrame once and caches every partition as Arrow IPC bytes on its
    executors (``MEMORY_AND_DISK``), then one zero-CPU Ray task per partition pulls its bytes
    from the executor actor into the object store. If a block is lost, Ray re-runs its task.
    Unlike ``from_spark`` the fetch tasks do not leave Ray workers in "load code from local"
    mode (see :func:`_fetch_partition`).

    Returns at once with a :class:`dpa.ArrowRefs` (one ref per partition, fetched by Ray
    tasks in the background; the DataFrame's Arrow schema).
    Call :func:`release_spark_dataset` when the blocks are no longer needed, to drop
    Spark's cached copy (otherwise it lives until Spark stops).

    A DataFrame with zero partitions (e.g. ``df.limit(0)``) makes ``from_spark`` return a
    dataset with no blocks and *no schema*; here it yields one empty Arrow table with the
    DataFrame's schema instead. :func:`spark_to_ray_dataset` wraps the refs as a Ray Dataset.

    Nothing passes through the driver or a Ray Data pipeline: the executors hold the
    Arrow bytes and the fetch tasks, scheduled anywhere in the cluster, ask the executor
    actors (by name) for them, so the refs work on a multi-node cluster as on one machine.

    Args:
        df: DataFrame of a RayDP SparkSession.
        num_blocks: Repartition to this many blocks first (default: keep Spark's
            partitioning, one block per partition).
        transform: A picklable function applied to every table inside its fetch task
            (e.g. :class:`spark_bridge.partials.PartialFinish`), so the blocks in the
            object store are already transformed.
        schema: The tables' schema after ``transform`` (required with ``transform``).

    Returns:
        A :class:`dpa.ArrowRefs`.
    """
    import ray
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.storagelevel import StorageLevel

    from dpa.input.sources import ArrowRefs

    if num_blocks is not None and (
        isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1
    ):
        raise ConfigError(f"num_blocks must be a positive int, got {num_blocks!r}")
    if transform is not None and schema is None:
        raise ConfigError("spark_to_arrow_refs(transform=...) needs the transformed tables' schema")
    source = df
    if num_blocks is not None and num_blocks != df.rdd.getNumPartitions():
        df = df.repartition(num_blocks)
    sc = df.sparkSession.sparkContext
    writer = sc._jvm.org.apache.spark.sql.raydp.ObjectStoreWriter
    # Not df.rdd.getNumPartitions() first: under adaptive execution that runs the shuffle
    # stages on their own to learn the final partition count (about 0.1 s more for a 10M-row
    # aggregation). RayDP fails on a DataFrame without partitions; only then is it asked.
    persisted = _persistent_rdds(sc)
    try:
        info = writer.prepareRecoverableRDD(
            df._jdf, sc._getJavaStorageLevel(StorageLevel.MEMORY_AND_DISK)
        )
    except Exception:
        if df.rdd.getNumPartitions() != 0:
            raise
        info = None
        # RayDP persists the RDD before it finds no partition to place: drop that cache.
        for rdd_id in _persistent_rdds(sc) - persisted:
            writer.releaseRecoverableRDD(rdd_id)
    locations = [] if info is None else list(info.locations())
    if not locations:
        if info is not None:
            writer.releaseRecoverableRDD(info.rddId())
        logger.debug("DataFrame has no partitions; building an empty dataset from its schema")
        empty = _empty_table(df.schema)
        if transform is not None:
            empty = transform(empty)
        return ArrowRefs([ray.put(empty)], empty.schema)
    rdd_id = info.rddId()
    _spark_caches.setdefault(source, []).append(rdd_id)

    conf = df.sparkSession.conf  # one JVM call per key; sc.getConf() copies every key
    fetch = _remote_fetch().options(
        num_cpus=float(conf.get("spark.ray.raydp_recoverable_fetch.task.resource.CPU", "0")),
        memory=_parse_bytes(
            conf.get("spark.ray.raydp_recoverable_fetch.task.resource.memory", "0")
        ),
    )
    schema_json = info.schemaJson()
    agent_url = info.driverAgentUrl()
    refs = [
        fetch.remote(f"raydp-executor-{executor_id}", rdd_id, i, schema_json, agent_url, transform)
        for i, executor_id in enumerate(locations)
    ]
    logger.debug("Spark -> Ray: %d partitions of cached RDD %d", len(refs), rdd_id)
    return ArrowRefs(refs, to_arrow_schema(df.schema) if schema is None else schema)


def _persistent_rdds(sc: Any) -> set[int]:
    """The ids of the RDDs Spark holds persisted (one call to the JVM)."""
    return {int(rdd_id) for rdd_id in sc._jsc.getPersistentRDDs().keySet()}


def spark_to_ray_dataset(df: DataFrame, num_blocks: int | None = None) -> ray.data.Dataset:
    """Converts a Spark-on-Ray DataFrame into a Ray Dataset of Arrow blocks.

    The same transfer as :func:`spark_to_arrow_refs`, wrapped by
    ``ray.data.from_arrow_refs`` (which waits for the blocks' metadata). Call
    :func:`release_spark_dataset` when the blocks are no longer needed.
    """
    import ray.data

    return ray.data.from_arrow_refs(list(spark_to_arrow_refs(df, num_blocks).refs))


def release_spark_dataset(df: DataFrame) -> None:
    """Drop the Arrow cache Spark keeps for ``df`` after :func:`spark_to_ray_dataset`.

    Only call this once nothing will read the Ray dataset's blocks any more (after that a
    lost block can no longer be rebuilt). Unreleased caches are freed when Spark stops.

    Args:
        df: The same DataFrame object given to :func:`spark_to_ray_dataset`.
    """
    rdd_ids = _spark_caches.pop(df, [])
    if not rdd_ids:
        return
    writer = df.sparkSession.sparkContext._jvm.org.apache.spark.sql.raydp.ObjectStoreWriter
    for rdd_id in rdd_ids:
        writer.releaseRecoverableRDD(rdd_id)


def _parse_bytes(value: str) -> float:
    from .cluster import parse_memory

    value = (value or "0").strip()
    return 0.0 if value in ("", "0") else float(parse_memory(value))


def _empty_table(schema: StructType) -> pa.Table:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema).empty_table()
