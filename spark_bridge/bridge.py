"""Run a dpa keyed aggregation on a Spark DataFrame and get a Spark DataFrame back."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dpa.errors import ConfigError

from .convert import release_spark_dataset, spark_to_arrow_refs, validate_columns
from .failures import spark_errors
from .partials import native_partials
from .paths import choose_path
from .pushdown import parquet_scan
from .staged import run_staged
from .to_spark import arrow_refs_to_spark, result_spark_schema, spark_typed

if TYPE_CHECKING:  # pragma: no cover - imported for type hints only
    from pyspark.sql import DataFrame

logger = logging.getLogger(__name__)

__all__ = ["PRECOMBINE_MODES", "can_precombine", "is_group_apply", "output_schema", "precombined", "run",
           "run_with_result"]

#: Values of ``run_with_result(precombine=...)`` besides ``None`` / ``True`` / ``False``.
PRECOMBINE_MODES = ("sql", "arrow")


def _key_columns(key: str | Sequence[str]) -> list[str]:
    if isinstance(key, str):
        columns = [key]
    elif isinstance(key, Sequence) and not isinstance(key, (bytes, bytearray)):
        columns = list(key)
    else:
        raise ConfigError(f"key must be a column name or a list of column names, got {key!r}")
    if not columns:
        raise ConfigError("key must name at least one column")
    bad = [c for c in columns if not isinstance(c, str) or not c]
    if bad:
        raise ConfigError(f"key column names must be non-empty strings, got {bad!r}")
    duplicates = sorted({c for c in columns if columns.count(c) > 1})
    if duplicates:
        raise ConfigError(f"key lists column(s) {duplicates} more than once")
    return columns


def _schema_after_map(input_schema: Any, key_columns: list[str], arrow_schema: Any) -> Any:
    """Result schema when a map_fn ran: input key columns keep their Spark types, the rest
    are typed from the result's Arrow schema."""
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructField, StructType

    spark_fields = {f.name: f for f in input_schema.fields}
    fields = []
    for field in arrow_schema:
        if field.name in key_columns and field.name in spark_fields:
            fields.append(spark_fields[field.name])
        else:
            fields.append(StructField(field.name, from_arrow_type(field.type), True))
    return StructType(fields)


def is_group_apply(reducer: Any) -> bool:
    """Whether ``reducer`` is a per-group function (:class:`dpa.GroupApply`)."""
    from dpa.aggregates.requested import requested

    return requested(reducer).group_apply is not None


def output_schema(input_schema: Any, key_columns: list[str], reducer: Any, map_fn: Any, arrow_schema: Any) -> Any:
    """The Spark schema of a job's result: a per-group function's own (given or inferred),
    else the key columns and the reducer's outputs."""
    if is_group_apply(reducer):
        from pyspark.sql.pandas.types import from_arrow_schema

        return from_arrow_schema(reducer.schema or arrow_schema)
    if map_fn is None:
        return result_spark_schema(input_schema, key_columns, reducer, arrow_schema)
    return _schema_after_map(input_schema, key_columns, arrow_schema)


def run(
    df: DataFrame,
    key: str | Sequence[str],
    reducer: Any,
    map_fn: Callable[..., Any] | None = None,
    config: Any = None,
    precombine: bool | str | None = None,
    pushdown: bool | None = None,
    path: str | None = None,
    staging_dir: str | None = None,
) -> DataFrame:
    """Aggregates ``df`` by ``key`` with dpa; returns a Spark DataFrame.

    See :func:`run_with_result` (which also returns the :class:`dpa.Result` with its
    stats) for the arguments.
    """
    return run_with_result(df, key, reducer, map_fn, config, precombine, pushdown, path, staging_dir)[0]


def can_precombine(reducer: Any, map_fn: Any, config: Any) -> bool:
    """Whether Spark's tasks may do dpa's map-side combine (see :func:`run_with_result`)."""
    from dpa.aggregates.contract import ColumnarReducer
    from dpa.aggregates.requested import requested
    from dpa.routing.registry import make_policy

    asked = requested(reducer)
    return (map_fn is None and isinstance(asked.aggregate, ColumnarReducer) and not asked.cost.seconds_per_record
            and bool(config.map_side_combine) and make_policy(config).combinable)


def precombined(df: DataFrame, key_columns: list[str], reducer: Any) -> DataFrame:
    """``df`` pre-aggregated per Spark partition into dpa partial states, in Spark's Python.

    The fallback of :func:`spark_bridge.partials.native_partials` (Spark SQL aggregates,
    several times faster) for the reducers and column types it does not cover, and
    ``precombine="arrow"``. Each Spark task runs the reducer's own map-side combine
    (``reducer.partial_from_batch(partition, key_columns, WEIGHT_COL)``) on its partition
    as Arrow (``mapInArrow``): the same step a dpa mapper would do on a block, done where
    the data already is, so only one partial row per key and partition leaves Spark.
    Key columns keep their Spark types; state columns and the record count are typed from
    the partial table's Arrow schema.
    """
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_type, to_arrow_schema
    from pyspark.sql.types import StructField, StructType

    from dpa.aggregates.requested import requested
    from dpa.input.records import WEIGHT_COL

    inner = requested(reducer).aggregate
    needed = [*key_columns, *[c for c in (inner.input_columns() or []) if c not in key_columns]]
    narrow = df.select(*needed)
    proto = inner.partial_from_batch(to_arrow_schema(narrow.schema).empty_table(), key_columns, WEIGHT_COL)
    spark_fields = {f.name: f for f in narrow.schema.fields}
    fields = [spark_fields[c] for c in key_columns]
    fields += [StructField(f.name, from_arrow_type(f.type), True) for f in proto.schema if f.name not in key_columns]

    def combine(batches: Any) -> Any:
        tables = [pa.Table.from_batches([b]) for b in batches]
        if tables:
            yield from inner.partial_from_batch(pa.concat_tables(tables), key_columns, WEIGHT_COL).to_batches()

    return narrow.mapInArrow(combine, StructType(fields))


def run_with_result(
    df: DataFrame,
    key: str | Sequence[str],
    reducer: Any,
    map_fn: Callable[..., Any] | None = None,
    config: Any = None,
    precombine: bool | str | None = None,
    pushdown: bool | None = None,
    path: str | None = None,
    staging_dir: str | None = None,
) -> tuple[DataFrame, Any]:
    """Aggregate ``df`` by ``key`` with a dpa reducer running on Ray actors.

    Two paths (:mod:`spark_bridge.paths`; ``result.stats.extra["spark_path"]`` says which
    ran): a DataFrame of a Spark-on-Ray session (see
    :func:`spark_bridge.get_or_create_spark`, RayDP) goes the way described below; any
    other (PySpark 4, Spark Connect, a plain session) crosses through a staging directory
    of Parquet files (:mod:`spark_bridge.staged`). Columns are validated before anything runs;
    the data goes Spark -> Ray object store -> dpa actors -> Spark; only a result of at most
    :data:`spark_bridge.to_spark.DRIVER_RESULT_MAX_BYTES` passes through the driver on its way
    back (:func:`spark_bridge.to_spark.arrow_refs_to_spark`).

    Args:
        df: Input DataFrame (RayDP session).
        key: Grouping column name or list of names.
        reducer: A ``dpa.Reducer``, or a list of them (one output column each, computed
            in one pass); it types its own output column (:meth:`dpa.Reducer.output_field`).
        map_fn: Optional per-row/batch function dpa applies before reducing. When given, the
            reducer's input column may be produced by it; such outputs are typed from the
            result's Arrow schema.
        config: dpa run configuration, passed to ``dpa.run`` (default ``dpa.JobConfig()``).
        precombine: Let Spark do dpa's map-side combine so that one partial row per key
            and partition, not every row, moves from Spark to Ray; dpa's mappers then only
            hash and route (``JobConfig.input_combined``). Spark computes the partial
            states with its own SQL aggregates where the reducer has a formulation
            (:func:`spark_bridge.partials.native_partials`: every built-in, with the
            exceptions listed there), else its tasks run the reducer's Arrow combine in
            Python (:func:`precombined`, ``mapInArrow``). ``None`` (default) = whenever
            dpa itself would combine on the map side (built-in reducer without cost, no
            ``map_fn``, ``map_side_combine``, a policy that accepts combined rows);
            ``True`` = require it; ``"sql"`` = require the SQL aggregates; ``"arrow"`` =
            require ``mapInArrow``; ``False`` = ship every row. Queue lengths, loads and
            ``processed`` stay in records either way.
        pushdown: Let dpa's mappers read the parquet files of a DataFrame that is a plain
            parquet scan (``spark.read.parquet(...)``, possibly with a ``select`` of
            columns) themselves (:func:`spark_bridge.pushdown.parquet_scan`): the rows skip
            Spark's executors and the object store. ``None`` (default) = whenever possible
            (no ``map_fn``; local, non-partitioned files that pyarrow reads with Spark's
            types); ``False`` = always through Spark; ``True`` = require it.
        path: ``None`` (default) = ``"raydp"`` for a DataFrame of the RayDP session, else
            ``"staged"``; or force one (:func:`spark_bridge.paths.choose_path`).
        staging_dir: Parent of the staged path's Parquet directory (default
            ``$DPA_SPARK_STAGING`` or the temporary directory); shared with Spark.

    Returns:
        ``(DataFrame, dpa.Result)``: the DataFrame has the key columns (input types) followed
        by the reducer's outputs; the Result carries the job's stats.

    Raises:
        dpa.errors.SchemaError: A key or input column is missing (lists available columns).
        dpa.errors.ConfigError: Bad ``key`` or reducer description; ``pushdown=True`` for
            a DataFrame that is not a plain parquet scan.
        dpa.errors.JobFailedError: A Spark task failed while computing ``df`` (the message
            names what it raised; :mod:`spark_bridge.failures`), or the dpa job failed.
    """
    with spark_errors():
        out, result = _run_with_result(df, key, reducer, map_fn, config, precombine, pushdown, path, staging_dir)
    result.set_spark_frame(out)
    return out, result


def _run_with_result(df: DataFrame, key: str | Sequence[str], reducer: Any, map_fn: Callable[..., Any] | None,
                     config: Any, precombine: bool | str | None, pushdown: bool | None, path: str | None,
                     staging_dir: str | None) -> tuple[DataFrame, Any]:
    """:func:`run_with_result`'s work, its Spark failures not yet translated."""
    key_columns = _key_columns(key)
    if isinstance(reducer, (list, tuple)):  # several aggregates in one pass
        from dpa.aggregates.composite import combine

        reducer = combine(list(reducer))
    input_schema = df.schema
    if is_group_apply(reducer):
        validate_columns([f.name for f in input_schema.fields], key_columns)
    elif map_fn is None:
        result_spark_schema(input_schema, key_columns, reducer)  # column and type checks, fail fast
    if choose_path(df, path) == "staged":
        import dpa

        if pushdown:
            raise ConfigError("pushdown=True needs the RayDP path; the staged path reads through Spark")
        return run_staged(df, key_columns, reducer, map_fn, dpa.JobConfig() if config is None else config,
                          precombine, staging_dir)
    columns = [f.name for f in input_schema.fields]

    # Validated above, before any Spark job or Ray work starts.
    # With a map_fn the key and input columns may be ones it creates: dpa.run checks them
    # on a dry run over the first rows, still before any actor starts.

    import dpa

    spark = df.sparkSession
    config = dpa.JobConfig() if config is None else config
    scan = None
    if map_fn is None and pushdown is not False:
        wanted = reducer.input_columns()
        needed = columns if wanted is None else [*key_columns, *(c for c in wanted if c not in key_columns)]
        scan = parquet_scan(df, needed)
    if pushdown and scan is None:
        raise ConfigError(
            "pushdown=True needs a DataFrame that is a plain parquet scan of local, non-partitioned "
            "files (spark.read.parquet(path), optionally .select(columns)) and no map_fn; "
            "use pushdown=None to fall back to reading through Spark"
        )
    if not (precombine is None or isinstance(precombine, bool) or precombine in PRECOMBINE_MODES):
        raise ConfigError(f"precombine must be None, True, False, 'sql' or 'arrow', got {precombine!r}")
    possible = can_precombine(reducer, map_fn, config)
    use_pre = scan is None and (possible if precombine is None else bool(precombine))
    finish = None
    if scan is not None:
        source = None
    elif use_pre:
        if not possible:
            raise ConfigError(
                f"precombine={precombine!r} needs a built-in reducer without cost, no map_fn, "
                "map_side_combine=True and a policy that accepts map-side combined rows (e.g. hybrid, doubling, halving, hash)"
            )

        native = None if precombine == "arrow" else native_partials(df, key_columns, reducer)
        if native is None and precombine == "sql":
            raise ConfigError(
                f"precombine='sql': {reducer!r} over this column type has no Spark SQL formulation "
                "(see spark_bridge.partials); use precombine=True to fall back to mapInArrow"
            )
        source, finish = native if native is not None else (precombined(df, key_columns, reducer), None)
        config = config.with_options(input_combined=True)
    else:
        source = df
    if source is None:
        dataset: Any = scan
    else:
        dataset = spark_to_arrow_refs(source, transform=finish, schema=None if finish is None else finish.schema)
    if map_fn is not None:  # a Ray Dataset gives dpa a sample to dry-run map_fn on
        import ray.data

        dataset = ray.data.from_arrow_refs(list(dataset.refs))
    try:
        # ---- dpa core runtime call (contract: dpa.run -> result with .arrow_refs,
        # ---- .schema (pyarrow.Schema) and .stats) ------------------------------------
        result = dpa.run(dataset, key=key_columns, reducer=spark_typed(reducer, input_schema), map_fn=map_fn, config=config)
        # -------------------------------------------------------------------------------
    finally:
        if source is not None:
            release_spark_dataset(source)
    logger.info("dpa.run finished: %s", getattr(result, "stats", None))
    result.stats.extra["spark_path"] = "raydp"

    out_schema = output_schema(input_schema, key_columns, reducer, map_fn, result.schema)
    return arrow_refs_to_spark(spark, list(result.arrow_refs), out_schema), result
