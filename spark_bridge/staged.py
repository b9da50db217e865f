"""The Spark bridge without RayDP: data crosses through a staging directory of Parquet files.

For any Spark session (PySpark 3.5 or 4.x, classic or Spark Connect), with public
DataFrame APIs only:

1. Spark writes the columns the job reads to ``<staging>/in`` as Parquet (its own
   executors, in parallel; with Spark Connect the server writes). Where dpa would combine
   on the map side, Spark's tasks do that combine first in Arrow (``mapInArrow``,
   :func:`spark_bridge.partials.precombined`), so one partial row per key and partition is
   written instead of every row.
2. ``dpa.run`` reads the files with its parquet source (:class:`dpa.ParquetFiles`): each
   mapper reads its own row groups, so the rows pass through neither the driver nor the
   object store.
3. Each reducer's result table is written by a Ray task where it is, cast to the Spark
   result schema's Arrow types, to ``<staging>/out``, and Spark reads that directory
   (``spark.read.schema(...).parquet``). The returned DataFrame reads those files lazily,
   so the output directory lives until the Python process exits (or until
   :func:`release_staging` is called with it); the input directory is removed when the job
   ends.

The staging directory must be visible at the same path to Spark (driver and executors, or
the Spark Connect server) and to Ray's workers: on one machine any local directory, on a
cluster a shared file system. It defaults to a new directory under ``$DPA_SPARK_STAGING``
(else the system's temporary directory).
"""

from __future__ import annotations

import atexit
import glob
import logging
import os
import shutil
import tempfile
import threading
import uuid
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dpa.errors import ConfigError

from .partials import precombined
from .prepare import Job

if TYPE_CHECKING:  # pragma: no cover - type hints only
    from pyspark.sql import DataFrame

logger = logging.getLogger(__name__)

__all__ = ["STAGING_ENV", "release_staging", "run_staged"]

#: Environment variable naming the parent directory of staging directories.
STAGING_ENV = "DPA_SPARK_STAGING"

_lock = threading.Lock()
_kept: set[str] = set()


def _remove_kept() -> None:
    for path in list(_kept):
        shutil.rmtree(path, ignore_errors=True)
    _kept.clear()


atexit.register(_remove_kept)


def release_staging(path: str) -> None:
    """Removes a result's staging directory (``result.stats.extra["spark_staging"]``) now;
    a DataFrame reading it must not be used afterwards."""
    with _lock:
        _kept.discard(path)
    shutil.rmtree(path, ignore_errors=True)


def _new_staging(parent: str | None) -> str:
    parent = parent or os.environ.get(STAGING_ENV) or tempfile.gettempdir()
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the Spark staging directory under {parent!r}: {exc}; "
                          f"set {STAGING_ENV} or staging_dir= to a writable directory") from exc
    path = os.path.join(parent, f"dpa-spark-{uuid.uuid4().hex[:12]}")
    os.makedirs(path)
    with _lock:
        _kept.add(path)
    return path


def _write_result(table: pa.Table, target: pa.Schema, path: str) -> int:
    """Ray task: one reducer's result, cast to the Spark schema's Arrow types, to ``path``."""
    import pyarrow.parquet as pq

    if not table.num_rows:
        return 0
    pq.write_table(table.select(target.names).cast(target), path)
    return table.num_rows


_remote_write: Any = None


def _write_results(refs: list[Any], target: pa.Schema, out_dir: str) -> int:
    """Writes every result block where it is (one task each); returns the rows written."""
    import pyarrow.parquet as pq
    import ray

    global _remote_write
    if _remote_write is None:
        _remote_write = ray.remote(num_cpus=0)(_write_result)
    os.makedirs(out_dir, exist_ok=True)
    written = ray.get([_remote_write.remote(ref, target, os.path.join(out_dir, f"part-{i:05d}.parquet"))
                       for i, ref in enumerate(refs)])
    if not sum(written):  # Spark reads an empty directory only with a file giving the schema
        pq.write_table(target.empty_table(), os.path.join(out_dir, "part-empty.parquet"))
    return int(sum(written))


def _input_files(df: DataFrame, in_dir: str) -> list[str]:
    df.write.mode("overwrite").parquet(in_dir)
    return sorted(glob.glob(os.path.join(in_dir, "*.parquet")))


def run_staged(df: DataFrame, job: Job, staging_dir: str | None = None) -> tuple[DataFrame, Any]:
    """Runs ``job`` on ``df`` through a Parquet staging directory (see the module docstring).

    Args:
        df: The input DataFrame (any Spark session: classic, RayDP's or Spark Connect).
        job: The prepared job. Its ``precombine``: ``None`` (combine in Spark's tasks
            whenever dpa would combine on the map side), ``True`` / ``"arrow"`` (require
            it), ``False`` (write every row); ``"sql"`` needs RayDP's path.
        staging_dir: Parent directory of the staging directory (default
            ``$DPA_SPARK_STAGING`` or the system's temporary directory).

    Returns:
        ``(DataFrame, dpa.Result)``; ``result.stats.extra`` has ``spark_path="staged"``,
        ``spark_staging`` (the directory the DataFrame reads) and ``spark_precombined``.
    """
    import dpa

    use_pre = job.use_precombine("staged")
    narrow, config = job.narrowed(df), job.config
    if use_pre:
        narrow = precombined(narrow, job.key_columns, job.reducer)
        config = config.with_options(input_combined=True)

    staging = _new_staging(staging_dir)
    in_dir = os.path.join(staging, "in")
    try:
        files = _input_files(narrow, in_dir)
        if not files:
            raise ConfigError(f"Spark wrote no parquet file to {in_dir}; is the staging directory shared "
                              f"with Spark (set {STAGING_ENV} or staging_dir=)?")
        if job.map_fn is None:
            source: Any = dpa.ParquetFiles(tuple(files))
        else:  # a Ray Dataset gives dpa a sample to dry-run map_fn on
            import ray.data

            source = ray.data.read_parquet(files).materialize()
        result = dpa.run(source, key=job.key_columns, reducer=job.spark_reducer(), map_fn=job.map_fn, config=config)
    finally:
        shutil.rmtree(in_dir, ignore_errors=True)

    from pyspark.sql.pandas.types import to_arrow_schema

    out_schema = job.output_schema(result.schema)
    out_dir = os.path.join(staging, "out")
    rows = _write_results(list(result.arrow_refs or []), to_arrow_schema(out_schema), out_dir)
    result.stats.extra.update({"spark_path": "staged", "spark_staging": staging,
                               "spark_precombined": use_pre})
    logger.info("staged Spark bridge: %d result rows in %s", rows, out_dir)
    return df.sparkSession.read.schema(out_schema).parquet(out_dir), result
