"""The Spark schema of a job's result, and the column checks made before anything runs.

:func:`result_spark_schema` types a reducer's outputs as Spark types its own aggregates
(the reducer says, :meth:`dpa.Reducer.output_field`); :func:`output_schema` is the schema
of any job's result (a per-group function's own, or the key columns and the outputs of
the reducer or of a ``map_fn``). Both the RayDP path and the staged path hand Spark their
result in this schema.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dpa.errors import ConfigError, SchemaError

if TYPE_CHECKING:  # pragma: no cover - imported for type hints only
    from pyspark.sql.types import DataType, StructField, StructType

__all__ = ["is_group_apply", "output_schema", "result_spark_schema", "spark_typed", "validate_columns"]


def validate_columns(df_columns: Iterable[str], needed: Iterable[str | None]) -> None:
    """Check that every needed column exists (exact, case-sensitive match).

    Args:
        df_columns: The columns the data has.
        needed: Columns the job reads; ``None`` entries (e.g. a row count) are ignored.

    Raises:
        SchemaError: Naming the missing columns and the available ones.
    """
    available = list(df_columns)
    present = set(available)
    missing: list[str] = []
    for column in needed:
        if column is not None and column not in present and column not in missing:
            missing.append(column)
    if missing:
        noun = "column" if len(missing) == 1 else "columns"
        raise SchemaError(
            f"missing {noun} {missing}; available columns: {available}. "
            "Column names are case-sensitive."
        )


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
