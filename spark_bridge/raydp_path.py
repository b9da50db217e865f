"""The RayDP path: a DataFrame of the Spark-on-Ray session, its rows through Ray's object store.

One prepared job (:class:`spark_bridge.prepare.Job`) runs in four steps:

1. **Source.** A plain parquet scan is read by dpa's mappers from its files
   (:func:`spark_bridge.pushdown.parquet_scan`); any other DataFrame is computed by Spark,
   whose tasks first do dpa's map-side combine where they may (Spark SQL aggregates,
   :func:`spark_bridge.partials.native_partials`, else dpa's Arrow combine in Spark's Python
   workers, :func:`spark_bridge.partials.precombined`).
2. **Transfer.** Spark's partitions move to Ray's object store as Arrow
   (:func:`spark_bridge.convert.spark_to_arrow_refs`), one fetch task per partition.
3. **dpa.** ``dpa.run`` aggregates the blocks on its actors.
4. **Back.** The result's tables become a Spark DataFrame
   (:func:`spark_bridge.to_spark.arrow_refs_to_spark`), through the driver when small.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from dpa.errors import ConfigError

from .convert import release_spark_dataset, spark_to_arrow_refs
from .partials import PartialFinish, native_partials, precombined
from .prepare import Job
from .pushdown import parquet_scan
from .to_spark import arrow_refs_to_spark

if TYPE_CHECKING:  # pragma: no cover - imported for type hints only
    from pyspark.sql import DataFrame

    from dpa.input.sources import ParquetFiles

logger = logging.getLogger(__name__)

__all__ = ["run_raydp"]


def run_raydp(df: DataFrame, job: Job, pushdown: bool | None) -> tuple[DataFrame, Any]:
    """Runs ``job`` on ``df``, a DataFrame of the RayDP session (see the module docstring).

    Args:
        df: The input DataFrame.
        job: The prepared job.
        pushdown: ``None`` = read a plain parquet scan's files directly where possible,
            ``True`` = require it, ``False`` = always through Spark.

    Returns:
        ``(DataFrame, dpa.Result)``; ``result.stats.extra`` has ``spark_path="raydp"``,
        ``spark_precombined`` (whether Spark's tasks combined first) and, when they did,
        ``spark_combine`` (``"sql"``: Spark SQL aggregates; ``"arrow"``: ``mapInArrow``).

    Raises:
        ConfigError: ``pushdown=True`` for a DataFrame that is not a plain parquet scan;
            ``precombine`` asks for a combine that cannot apply.
    """
    import dpa

    scan = _pushdown_scan(df, job, pushdown)
    source: DataFrame | None = None
    config, combined = job.config, False
    if scan is not None:
        dataset: Any = scan
    else:
        source, finish, combined = _spark_source(df, job)
        if combined:
            config = config.with_options(input_combined=True)
        dataset = spark_to_arrow_refs(source, transform=finish, schema=None if finish is None else finish.schema)
    if job.map_fn is not None:  # a Ray Dataset gives dpa a sample to dry-run map_fn on
        import ray.data

        dataset = ray.data.from_arrow_refs(list(dataset.refs))
    try:
        result = dpa.run(dataset, key=job.key_columns, reducer=job.spark_reducer(), map_fn=job.map_fn, config=config)
    finally:
        if source is not None:
            release_spark_dataset(source)
    logger.info("dpa.run finished: %s", result.stats)
    result.stats.extra.update({"spark_path": "raydp", "spark_precombined": bool(combined)})
    if combined:
        result.stats.extra["spark_combine"] = combined
    out = arrow_refs_to_spark(df.sparkSession, list(result.arrow_refs), job.output_schema(result.schema))
    return out, result


def _pushdown_scan(df: DataFrame, job: Job, pushdown: bool | None) -> ParquetFiles | None:
    """The files dpa's mappers read themselves, or None to go through Spark."""
    scan = None
    if job.map_fn is None and pushdown is not False:
        scan = parquet_scan(df, job.needed_columns())
    if pushdown and scan is None:
        raise ConfigError(
            "pushdown=True needs a DataFrame that is a plain parquet scan of local, non-partitioned "
            "files (spark.read.parquet(path), optionally .select(columns)) and no map_fn; "
            "use pushdown=None to fall back to reading through Spark"
        )
    return scan


def _spark_source(df: DataFrame, job: Job) -> tuple[DataFrame, PartialFinish | None, str | bool]:
    """The DataFrame whose partitions go to Ray, the transform its fetch tasks apply, and
    how Spark's tasks combined (``"sql"``, ``"arrow"`` or ``False``: every row)."""
    if not job.use_precombine("raydp"):
        return df, None, False
    native = None if job.precombine == "arrow" else native_partials(df, job.key_columns, job.reducer)
    if native is not None:
        return native[0], native[1], "sql"
    if job.precombine == "sql":
        raise ConfigError(
            f"precombine='sql': {job.reducer!r} over this column type has no Spark SQL formulation "
            "(see spark_bridge.partials); use precombine=True to fall back to mapInArrow"
        )
    return precombined(df, job.key_columns, job.reducer), None, "arrow"
