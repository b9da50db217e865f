"""Results back into Spark: Arrow object refs as a Spark DataFrame, and its schema.

Ray -> Spark does *not* use ``Dataset.to_spark``: in raydp 1.6.5 that goes through
``mapInPandas``, which turns int64 columns with nulls into float64 (values above 2**53 are
silently changed) and turns NaN into null; it also ``ray.get``-s the first block on the
driver and fails on a dataset without blocks. :func:`arrow_refs_to_spark` instead casts
the Arrow tables to the target schema in Arrow and hands them to Spark either through the
driver's JVM (small results: no Python worker, no second Spark job) or, for larger ones,
by letting Spark's Python workers fetch them themselves (``mapInArrow``), so that the
driver never holds a large result.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dpa.errors import ConfigError, SchemaError
from spark_bridge.convert import _RAYDP_MASTER_SUFFIX, validate_columns

if TYPE_CHECKING:  # pragma: no cover - imported for type hints only
    import ray
    import ray.data
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructField, StructType

logger = logging.getLogger(__name__)


#: Results up to this many bytes (Ray's object sizes) go to Spark through the driver
#: (:func:`arrow_refs_to_spark`). Measured on 1 executor x 1 core, two int64 columns written
#: as parquet, medians of 5: through the driver 0.16-0.23 s from 100 rows to 500,000
#: (8 MB), against 0.28-0.33 s for the Python workers' ``mapInArrow``; at 1,000,000 rows
#: (16 MB) 0.47 s against 0.35 s.
DRIVER_RESULT_MAX_BYTES = 8 * 2**20

# Spark's session option that picks a LocalRelation (below it) or an RDD of Arrow batches
# for a DataFrame made from Arrow; see _arrow_batches_to_spark.
_LOCAL_RELATION_CONF = "spark.sql.execution.arrow.localRelationThreshold"
_LOCAL_RELATION_LOCK = threading.Lock()

def _make_block_reader(
    holder_name: str, namespace: str, ray_address: str, key: str, target: pa.Schema
):
    """Build the ``mapInArrow`` function run by Spark's Python workers.

    The function is self-contained (imports inside, no module globals) so cloudpickle ships
    it by value and executors do not need dpa installed.
    """

    def read_blocks(batches):
        import logging as _logging

        import pyarrow as _pa
        import ray as _ray

        if not _ray.is_initialized():
            _ray.init(
                address=ray_address,
                namespace=namespace,
                logging_level=_logging.ERROR,
                log_to_driver=False,
            )
        holder = _ray.get_actor(holder_name, namespace=namespace)
        names = target.names
        for batch in batches:
            for idx in batch.column(0).to_pylist():
                table = _ray.get(_ray.get(holder.get_object.remote(key, idx)))
                if isinstance(table, _pa.RecordBatch):
                    table = _pa.Table.from_batches([table])
                missing = [n for n in names if n not in table.column_names]
                if missing:
                    raise ValueError(
                        f"Arrow block {idx} lacks column(s) {missing}; it has {table.column_names}"
                    )
                table = table.select(names).cast(target)
                yield from table.to_batches()

    return read_blocks


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


class _ArrowStream:
    """A pyspark serializer (only ``dump_stream``) that writes record batches as an Arrow IPC stream."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema

    def dump_stream(self, batches: Iterable[pa.RecordBatch], stream: Any) -> None:
        with pa.ipc.new_stream(stream, self.schema) as writer:
            for batch in batches:
                writer.write_batch(batch)


def _arrow_batches_to_spark(
    spark: SparkSession, batches: list[pa.RecordBatch], target: pa.Schema, schema: StructType
) -> DataFrame:
    """A DataFrame over Arrow batches held by the driver: one Spark partition per batch.

    The batches reach the driver's JVM as pyspark's own ``createDataFrame`` sends them (a
    temporary file, or a socket when Spark encrypts I/O), and Spark's JVM decodes them in its
    tasks: no Python worker runs. Spark keeps small inputs as a ``LocalRelation`` (below
    ``spark.sql.execution.arrow.localRelationThreshold``, 48 MB by default), which it turns
    back into rows on the driver and ships row by row: 50,000 rows of two longs written as
    parquet took 0.37 s that way against 0.16 s as an RDD of the Arrow batches, so the
    option is set to 0 for the call and restored right after (under a lock; a concurrent
    ``createDataFrame`` of the same session meanwhile also gets an RDD, which is only a
    matter of speed).
    """
    from pyspark.sql import DataFrame

    sc = spark.sparkContext
    jvm = sc._jvm
    with _LOCAL_RELATION_LOCK:
        previous = spark.conf.get(_LOCAL_RELATION_CONF, None)
        spark.conf.set(_LOCAL_RELATION_CONF, "0")
        try:
            batch_bytes = sc._serialize_to_jvm(
                batches,
                _ArrowStream(target),
                jvm.PythonSQLUtils.readArrowStreamFromFile,
                jvm.ArrowIteratorServer,
            )
            jdf = jvm.PythonSQLUtils.toDataFrame(batch_bytes, schema.json(), spark._jsparkSession)
        finally:
            if previous is None:
                spark.conf.unset(_LOCAL_RELATION_CONF)
            else:
                spark.conf.set(_LOCAL_RELATION_CONF, previous)
    return DataFrame(jdf, spark)


def _result_bytes(refs: Sequence[ray.ObjectRef]) -> int | None:
    """Total size of the objects behind ``refs``, or ``None`` if Ray does not know one yet."""
    import ray

    try:
        locations = ray.experimental.get_object_locations(list(refs), timeout_ms=5_000)
    except Exception:  # noqa: BLE001 - the size only picks a path; the other one always works
        logger.debug("object sizes unavailable; results go through Spark's workers", exc_info=True)
        return None
    sizes = [locations.get(ref, {}).get("object_size") for ref in refs]
    return None if any(size is None for size in sizes) else int(sum(sizes))


def _split_rows(table: pa.Table, parts: int) -> list[pa.RecordBatch]:
    """``table`` as ``parts`` record batches of nearly equal rows (at least one batch)."""
    table = table.combine_chunks()
    parts = max(1, min(parts, table.num_rows))
    bounds = [table.num_rows * i // parts for i in range(parts + 1)]
    batches: list[pa.RecordBatch] = []
    for start, stop in zip(bounds, bounds[1:]):
        batches.extend(table.slice(start, stop - start).to_batches())
    return batches or [pa.RecordBatch.from_pylist([], schema=table.schema)]


def arrow_refs_to_spark(
    spark: SparkSession,
    refs: Sequence[ray.ObjectRef],
    schema: StructType,
    num_partitions: int | None = None,
    via_driver: bool | None = None,
) -> DataFrame:
    """Turn Ray object refs of Arrow tables into a Spark DataFrame with ``schema``.

    Every table is cast to ``schema`` in Arrow (safe casts: overflow raises instead of
    wrapping); nothing passes through pandas. Two ways to Spark:

    * **through the driver** (small results): the driver fetches the tables, casts them and
      sends them to its JVM as Arrow, where Spark's own tasks decode them. A cast that
      fails raises here, at once.
    * **through Spark's Python workers** (larger results): the refs are handed to RayDP's
      master actor, which keeps them alive for as long as the Spark session runs (the
      DataFrame is lazy and may be recomputed by later actions). Spark's Python workers
      connect to Ray, fetch their share of the tables and cast them; the driver never holds
      them, and a failing cast raises in the action that reads them.

    Args:
        spark: A RayDP SparkSession.
        refs: Refs of ``pyarrow.Table`` (or ``RecordBatch``) objects; every table must have
            the columns of ``schema`` (extra columns are dropped, order does not matter).
        schema: Spark schema of the result.
        num_partitions: Spark partitions to spread the tables over (default: one per table,
            at most as many as the executors run at once (:func:`executor_task_slots`): a
            second wave of tasks costs more than reading two small tables in one; measured
            on 1 executor x 1 core, 4 tables of 12,500 rows written as parquet: 0.37 s in
            one partition against 0.55 s in Spark's default parallelism of 2).
        via_driver: ``None`` (default) = through the driver when Ray knows the objects'
            sizes and they add up to at most :data:`DRIVER_RESULT_MAX_BYTES`; ``True`` /
            ``False`` = always / never through the driver.

    Returns:
        A DataFrame with exactly ``schema``; empty (with that schema) if there are no refs.
    """
    import ray
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import NullType

    placeholders = [f.name for f in schema.fields if isinstance(f.dataType, NullType)]
    if placeholders:
        raise SchemaError(
            f"schema still has untyped (NullType) column(s) {placeholders}; pass the result's "
            "Arrow schema to result_spark_schema() to resolve custom outputs"
        )
    refs = list(refs)
    if not refs:
        return spark.createDataFrame([], schema)
    target = to_arrow_schema(schema)
    if num_partitions is None:
        num_partitions = min(len(refs), executor_task_slots(spark))
    num_partitions = max(1, min(int(num_partitions), len(refs)))
    if via_driver is None:
        size = _result_bytes(refs)
        via_driver = size is not None and size <= DRIVER_RESULT_MAX_BYTES
    if via_driver:
        tables = [_as_table(t) for t in ray.get(refs)]
        for index, table in enumerate(tables):
            _check_columns(table, target.names, index)
        try:
            table = pa.concat_tables([t.select(target.names).cast(target) for t in tables])
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SchemaError(f"the result does not fit the Spark schema {schema.simpleString()}: {exc}") from exc
        logger.debug("Arrow refs -> Spark through the driver: %d rows in %d partitions", table.num_rows, num_partitions)
        return _arrow_batches_to_spark(spark, _split_rows(table, num_partitions), target, schema)

    holder_name = spark.sparkContext.appName + _RAYDP_MASTER_SUFFIX
    namespace = ray.get_runtime_context().namespace
    try:
        holder = ray.get_actor(holder_name, namespace=namespace)
    except ValueError as exc:
        raise RuntimeError(
            f"no RayDP master actor {holder_name!r} in Ray namespace {namespace!r}: the "
            "SparkSession must come from raydp.init_spark / spark_bridge.get_or_create_spark "
            "in this Ray job"
        ) from exc
    key = f"dpa-{uuid.uuid4().hex}"
    ray.get(holder.add_objects.remote(key, refs))

    ray_address = ray.get_runtime_context().gcs_address
    reader = _make_block_reader(holder_name, namespace, ray_address, key, target)
    indexes = spark.range(0, len(refs), 1, num_partitions)
    logger.debug("Arrow refs -> Spark: %d tables in %d partitions", len(refs), num_partitions)
    return indexes.mapInArrow(reader, schema)


def _as_table(block: pa.Table | pa.RecordBatch) -> pa.Table:
    return pa.Table.from_batches([block]) if isinstance(block, pa.RecordBatch) else block


def _check_columns(table: pa.Table, names: Sequence[str], index: int) -> None:
    missing = [n for n in names if n not in table.column_names]
    if missing:
        raise SchemaError(f"Arrow block {index} lacks column(s) {missing}; it has {table.column_names}")


# --------------------------------------------------------------------------- result schema


def _output_spark_type(arrow_type: pa.DataType, input_field: StructField | None) -> DataType:
    """Spark type of an output column from its Arrow type.

    An output whose Arrow type is the input column's own (min, max), or a list of it
    (collect, top-k), keeps the input's exact Spark type; others convert from Arrow. A
    list whose items are declared non-nullable is an array without nulls
    (``containsNull=False``), as Spark types ``collect_set`` and ``percentile_approx``.
    """
    from pyspark.sql.pandas.types import from_arrow_type, to_arrow_type
    from pyspark.sql.types import ArrayType

    if input_field is not None:
        try:
            input_arrow = to_arrow_type(input_field.dataType)
        except TypeError:
            input_arrow = None
        if input_arrow is not None and arrow_type.equals(input_arrow):
            return input_field.dataType
        if input_arrow is not None and pa.types.is_list(arrow_type) and arrow_type.value_type.equals(input_arrow):
            return ArrayType(input_field.dataType, containsNull=arrow_type.value_field.nullable)
    try:
        spark_type = from_arrow_type(arrow_type)
    except TypeError as exc:
        raise SchemaError(f"the reducer's output type {arrow_type} has no Spark type: {exc}") from exc
    if pa.types.is_list(arrow_type) and not arrow_type.value_field.nullable:  # (pyspark drops it)
        return ArrayType(spark_type.elementType, containsNull=False)
    return spark_type


def result_spark_schema(
    input_schema: StructType,
    key_columns: Sequence[str],
    reducer: Any,
    arrow_schema: pa.Schema | None = None,
) -> StructType:
    """Spark schema of a dpa result: key columns, then the reducer's output column.

    Key columns keep their Spark type and nullability. The output column is typed by the
    reducer itself (:meth:`dpa.Reducer.output_field`, given the input columns as Arrow),
    which types the built-ins like Spark's own aggregates: count -> ``LongType`` (not
    nullable); sum -> ``LongType`` / ``DoubleType`` / ``decimal(min(38, p + 10), s)``;
    mean -> ``DoubleType``, or ``decimal(min(38, p + 4), min(38, s + 4))`` for a decimal
    (the reducer's :meth:`dpa.Reducer.spark_types`, which the bridge runs); min / max ->
    the input's type; collect / top-k -> an array of it. A reducer that cannot tell before it runs (a user-defined one) is typed from
    ``arrow_schema``, the result's; without it the column is a ``NullType`` placeholder.

    Args:
        input_schema: Schema of the input DataFrame.
        key_columns: Grouping columns, in result order.
        reducer: A ``dpa.Reducer`` (its ``name``, ``column`` and ``output_field``).
        arrow_schema: Arrow schema of the result, used when the reducer cannot type its
            output up front.

    Returns:
        The result StructType.

    Raises:
        SchemaError: A key or input column is missing, or the input column's type does
            not fit the reducer (e.g. a sum of strings).
        ConfigError: The output name is empty or clashes with a key column.
    """
    from pyspark.sql.types import StructType

    from dpa.aggregates.contract import Reducer

    if not isinstance(reducer, Reducer):
        raise ConfigError(
            f"reducer must be a dpa.Reducer (e.g. dpa.Count(), dpa.Sum('x')), got {type(reducer).__name__}"
        )
    by_name = {f.name: f for f in input_schema.fields}
    validate_columns(by_name, [*key_columns, *(reducer.input_columns() or [])])
    from dpa.aggregates.requested import requested

    reducer = spark_typed(reducer, input_schema)  # (the reducer the bridge runs: Spark's result types)
    members = getattr(requested(reducer).aggregate, "members", None)  # several aggregates: a column each
    outputs = [_output_struct_field(m, by_name, key_columns, arrow_schema) for m in (members or [reducer])]
    return StructType([by_name[k] for k in key_columns] + outputs)


def spark_typed(reducer: Any, input_schema: StructType) -> Any:
    """The reducer the bridge runs: ``reducer.spark_types(...)`` (Spark's result types, e.g.
    a decimal ``avg``) given the input columns as Arrow (those Arrow can hold)."""
    from pyspark.sql.pandas.types import to_arrow_type

    fields = []
    for field in input_schema.fields:
        try:
            fields.append(pa.field(field.name, to_arrow_type(field.dataType)))
        except TypeError:
            continue  # (a column Arrow cannot hold: no aggregate of dpa's reads it)
    return reducer.spark_types(pa.schema(fields))


def _output_struct_field(reducer: Any, by_name: dict[str, StructField], key_columns: Sequence[str],
                         arrow_schema: pa.Schema | None) -> StructField:
    """The Spark field of one reducer's output column (see :func:`result_spark_schema`)."""
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import NullType, StructField

    name, column = reducer.name, reducer.column
    validate_columns(by_name, reducer.input_columns() or [])
    if not isinstance(name, str) or not name:
        raise ConfigError(f"output names must be non-empty strings, got {name!r}")
    if name in key_columns:
        raise ConfigError(f"output name {name!r} clashes with a key column; give the reducer another name")

    arrow_inputs = []
    for input_name in reducer.input_columns() or []:
        try:
            arrow_inputs.append(pa.field(input_name, to_arrow_type(by_name[input_name].dataType)))
        except TypeError as exc:
            raise SchemaError(
                f"column {input_name!r} has type {by_name[input_name].dataType.simpleString()}, which dpa "
                f"cannot read through Arrow ({exc}); cast or drop it first"
            ) from exc
    field = reducer.output_field(pa.schema(arrow_inputs))  # raises SchemaError on a bad type
    if field is None and arrow_schema is not None:
        field = _arrow_field(arrow_schema, name)
    if field is None:
        dtype: DataType = NullType()  # placeholder: type it from the result's Arrow schema
    else:
        dtype = _output_spark_type(field.type, by_name.get(column) if column is not None else None)
    return StructField(name, dtype, nullable=True if field is None else field.nullable)


def _arrow_field(arrow_schema: pa.Schema, name: str) -> pa.Field:
    index = arrow_schema.get_field_index(name)
    if index < 0:
        raise SchemaError(
            f"the result has no column {name!r}; result columns: {arrow_schema.names}"
        )
    return arrow_schema.field(index)
