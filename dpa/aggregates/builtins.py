"""The built-in aggregations (:class:`Count`, :class:`Sum`, :class:`Min`, :class:`Max`,
:class:`Mean`, :class:`Collect`, :class:`TopK`), columnar and scalar, and the binding of a
job's reducer to its records.
"""

from __future__ import annotations

import copy
import decimal
import heapq
from fractions import Fraction
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from dpa._internal.arrays import as_float64, fill_null, scalar
from dpa.aggregates.contract import ColumnarReducer, Reducer, what_it_is
from dpa.aggregates.exact_means import (
    mean_sum_type,
    means_decimal,
    means_float64,
    spark_avg_type,
    spark_avg_value,
)
from dpa.aggregates.int_sums import exact_int_sums, finalize_int_sums, is_pending, sum_may_overflow
from dpa.errors import ConfigError, SchemaError
from dpa.input.records import HASH_COL


def _is_numeric(dtype: pa.DataType) -> bool:
    return pa.types.is_integer(dtype) or pa.types.is_floating(dtype) or pa.types.is_decimal(dtype)


def sum_type(dtype: pa.DataType) -> pa.DataType:
    """Arrow type of a sum over values of ``dtype``, as Spark types ``sum``.

    Signed integers -> int64, unsigned -> uint64, floating point -> float64,
    ``decimal(p, s)`` -> ``decimal(min(38, p + 10), s)``; a column of nulls -> int64.
    """
    if pa.types.is_signed_integer(dtype) or pa.types.is_null(dtype):
        return pa.int64()
    if pa.types.is_unsigned_integer(dtype):
        return pa.uint64()
    if pa.types.is_floating(dtype):
        return pa.float64()
    if pa.types.is_decimal(dtype):
        return pa.decimal128(min(38, dtype.precision + 10), dtype.scale)
    raise SchemaError(f"cannot sum values of type {dtype}; sum needs a numeric column")


class Count(ColumnarReducer):
    """Records per key (``Count()``, Spark's ``count(1)``) or, given a column, the non-null
    values of that column per key (``Count("v")``, SQL's ``count(v)``; a NaN is a value, as
    in Spark and DuckDB). Output ``count``, int64, never null: 0 for a key whose values are
    all null.

    Args:
        column: The column whose non-null values are counted; None counts records.
        name: Output column name (default ``count``).
    """

    kind = "count"
    default_name = "count"

    def __init__(self, column: str | None = None, name: str | None = None) -> None:
        super().__init__(column, name or self.default_name)

    def input_columns(self) -> list[str] | None:
        return [] if self.column is None else [self.column]

    def create(self) -> int:
        return 0

    def add(self, acc: int, value: Any) -> int:
        return acc + 1 if self.column is None or value is not None else acc

    def add_batch(self, acc: int, values: list[Any]) -> int:
        if self.column is None:
            return acc + len(values)
        return acc + sum(1 for v in values if v is not None)

    def merge(self, a: int, b: int) -> int:
        return a + b

    def state_aggregations(self) -> list[tuple[str | None, str, str]]:
        # Arrow's hash count counts valid values (a NaN among them) by default.
        return [(None, "count_all", "count")] if self.column is None else [(self.column, "count", "count")]

    def merge_aggregations(self) -> list[tuple[str, str]]:
        return [("count", "sum")]

    def output_field(self, input_schema: pa.Schema | None) -> pa.Field:
        return pa.field(self.name, pa.int64(), nullable=False)  # never null, as Spark's count

    def validate(self, schema: pa.Schema | None) -> None:
        if schema is not None and self.column is not None and self.column not in schema.names:
            raise SchemaError(
                f"{self!r} counts the non-null values of column {self.column!r}, which the input does not "
                f"have (columns: {', '.join(schema.names)}); to count records under a name of your own, "
                f"write dpa.Count(name={self.column!r})")
        super().validate(schema)

    def __repr__(self) -> str:
        return "Count()" if self.column is None else f"Count({self.column!r})"


class _ColumnReducer(ColumnarReducer):
    """Shared constructor for reducers that read one column."""

    default_name = "value"

    def __init__(self, column: str | None = None, name: str | None = None) -> None:
        super().__init__(column, name or self.default_name)


class Sum(_ColumnReducer):
    """Sum of ``column`` per key (nulls ignored; all-null groups give null, as in SQL).

    The result type is Spark's (:func:`sum_type`): int64 for signed integer columns (of any
    width), uint64 for unsigned ones, float64 for floating point ones, and for
    ``decimal(p, s)`` the wider ``decimal(min(38, p + 10), s)``, so that sums of many values
    keep their digits. A column whose type changes between input blocks sums in the promoted type
    (int64 then float64 -> float64; partial integer sums round to float64 there, as a
    float sum does).

    Integer sums never wrap around: a key whose sum leaves the int64 (uint64) range raises
    :class:`~dpa.errors.ArithmeticOverflowError` naming the column and the key, like
    Spark's ANSI mode; cast the column to float64 or decimal to sum beyond int64. (An
    exact answer beyond int64 would need another output type, e.g. decimal, for every
    integer sum.) The check is cheap (:func:`sum_may_overflow`): a batch of records, or of
    partial sums being merged, with ``rows * min(x)`` and ``rows * max(x)`` inside the
    range (one min/max pass), or else a float64 sum of ``|x|`` below 2**62, cannot
    overflow; only other batches are summed exactly. A partial sum out of range is kept
    exact (:func:`dpa.aggregates.int_sums.exact_int_sums`), so only the key's final sum decides: it
    may come back into range, or the column may turn out to hold floats.

    Decimal sums never wrap either: a decimal wider than 28 digits whose sums could leave
    38 digits is summed in 256 bits, and a key whose (partial) sum leaves them raises
    :class:`~dpa.errors.ArithmeticOverflowError` (:func:`dpa.aggregates.int_sums.exact_decimal_sums`).
    """

    kind = "sum"
    default_name = "sum"
    float_rounding = True

    def create(self) -> Any:
        return None

    def add(self, acc: Any, value: Any) -> Any:
        if value is None:
            return acc
        return value if acc is None else acc + value

    def merge(self, a: Any, b: Any) -> Any:
        if a is None:
            return b
        return a if b is None else a + b

    def check_type(self, dtype: pa.DataType) -> None:
        if not (_is_numeric(dtype) or pa.types.is_null(dtype)):
            raise SchemaError(
                f"{type(self).__name__}({self.column!r}) needs a numeric column, but {self.column!r} has "
                f"type {dtype}; cast it to a number first"
                + (f", or count its true values with dpa.CountIf({self.column!r})" if pa.types.is_boolean(dtype)
                   else " or use Count/Collect")
            )

    def output_type(self, input_type: pa.DataType | None) -> pa.DataType:
        if input_type is None:
            return super().output_type(input_type)
        return sum_type(input_type)

    def prepare(self, table: pa.Table) -> pa.Table:
        # Decimals widen before summing (Arrow would keep decimal(p, s) and let the sum
        # outgrow p digits); other types are summed by Arrow in the output type already.
        if self.column in table.column_names and pa.types.is_decimal(table.schema.field(self.column).type):
            idx = table.schema.get_field_index(self.column)
            wide = sum_type(table.schema.field(self.column).type)
            return table.set_column(idx, self.column, pc.cast(table[self.column], wide))
        return table

    def state_aggregations(self) -> list[tuple[str | None, str, str]]:
        return [(self.column, "sum", "sum")]

    def partial_from_batch(self, table: pa.Table, group_cols: list[str], weight_col: str | None = None) -> pa.Table:
        if self.column in table.column_names and sum_may_overflow(table[self.column]):
            aggs = [(self.column, "sum")] + ([([], "count_all")] if weight_col is not None else [])
            names = list(group_cols) + ["sum"] + ([weight_col] if weight_col is not None else [])
            return exact_int_sums(table, group_cols, self.column, aggs, names, self.column, HASH_COL)
        return super().partial_from_batch(table, group_cols, weight_col)

    def merge_partials(self, table: pa.Table, group_cols: list[str]) -> pa.Table:
        if sum_may_overflow(table["sum"]):
            return exact_int_sums(table, group_cols, "sum", [("sum", "sum")], list(group_cols) + ["sum"], self.column,
                                  HASH_COL)
        return super().merge_partials(table, group_cols)

    def finalize_table(self, table: pa.Table, key_cols: list[str]) -> pa.Table:
        return finalize_int_sums(super().finalize_table(table, key_cols), self.name, key_cols, self.column)


def _is_nan(value: Any) -> bool:
    """Whether ``value`` is a floating-point NaN (the only value not equal to itself)."""
    return value != value


class Min(_ColumnReducer):
    """Minimum of ``column`` per key (nulls ignored).

    Floating-point values are ordered as Spark and DuckDB order them: NaN equals NaN and
    is larger than every other value, so the minimum is NaN only when a key holds nothing
    but NaN (and nulls). ``-0.0`` and ``0.0`` compare equal: either may come out.
    """

    kind = "min"
    default_name = "min"

    def create(self) -> Any:
        return None

    def add(self, acc: Any, value: Any) -> Any:
        if value is None:
            return acc
        if acc is None or (_is_nan(acc) and not _is_nan(value)):
            return value
        return value if value < acc else acc  # (False for a NaN value: NaN is the largest)

    def merge(self, a: Any, b: Any) -> Any:
        return self.add(a, b)

    def check_type(self, dtype: pa.DataType) -> None:
        if pa.types.is_nested(dtype) or pa.types.is_dictionary(dtype):
            raise SchemaError(f"{type(self).__name__}({self.column!r}) cannot order values of type {dtype}; give it "
                              "a column of scalars (flatten or cast the column first)")

    def state_aggregations(self) -> list[tuple[str | None, str, str]]:
        return [(self.column, self.kind, self.kind)]

    def partial_from_batch(self, table: pa.Table, group_cols: list[str], weight_col: str | None = None) -> pa.Table:
        if pa.types.is_floating(table.schema.field(self.column).type):
            return _nan_ordered(table, group_cols, self.column, self.kind, self.kind, weight_col)
        return super().partial_from_batch(table, group_cols, weight_col)

    def merge_partials(self, table: pa.Table, group_cols: list[str]) -> pa.Table:
        if pa.types.is_floating(table.schema.field(self.kind).type):
            return _nan_ordered(table, group_cols, self.kind, self.kind, self.kind, None)
        return super().merge_partials(table, group_cols)


class Max(Min):
    """Maximum of ``column`` per key (nulls ignored; a floating-point NaN is larger than
    every other value, as in Spark and DuckDB: a key holding a NaN has the maximum NaN)."""

    kind = "max"
    default_name = "max"

    def add(self, acc: Any, value: Any) -> Any:
        if value is None:
            return acc
        if acc is None or (_is_nan(value) and not _is_nan(acc)):
            return value
        return value if value > acc else acc  # (False against a NaN acc: NaN is the largest)


def _nan_ordered(table: pa.Table, group_cols: list[str], column: str, fn: str, out: str,
                 weight_col: str | None) -> pa.Table:
    """Arrow's ``hash_min``/``hash_max`` of a floating-point ``column`` under Spark's and
    DuckDB's order, where NaN is larger than every other value (Arrow skips NaN, and gives
    an infinity for a group of NaN only). One row per group: ``group_cols``, ``out`` and,
    with ``weight_col``, the group's row count."""
    # One chunk throughout: Arrow's hash_any misreads a column chunked unlike the keys.
    work = table.select(group_cols).combine_chunks()
    values = table[column].combine_chunks()
    nan = fill_null(pc.is_nan(values), False)
    numbers = pc.if_else(nan, scalar(None, values.type), values)
    work = work.append_column("__dpa_v", numbers).append_column("__dpa_nan", nan)
    aggs: list[tuple[Any, str]] = [("__dpa_v", fn), ("__dpa_nan", "any")]
    if weight_col is not None:
        aggs.append(([], "count_all"))
    grouped = work.group_by(group_cols, use_threads=False).aggregate(aggs)
    best, has_nan = grouped.column(len(group_cols)), fill_null(grouped.column(len(group_cols) + 1), False)
    nan_value = scalar(float("nan"), values.type)
    if fn == "max":  # any NaN is the maximum
        result = pc.if_else(has_nan, nan_value, best)
    else:  # NaN is the minimum only when nothing else is there
        result = pc.if_else(pc.and_(has_nan, pc.is_null(best)), nan_value, best)
    columns = [grouped[c] for c in group_cols] + [result]
    names = list(group_cols) + [out]
    if weight_col is not None:
        columns.append(grouped.column(len(group_cols) + 2))
        names.append(weight_col)
    return pa.table(columns, names=names)


class Mean(_ColumnReducer):
    """Arithmetic mean of ``column`` per key (nulls ignored, as Spark's ``avg``), float64.

    Integer and decimal columns are summed exactly (integers as int64, kept exact beyond
    it as :class:`Sum` keeps them; a ``decimal(p, s)`` as the sum of its unscaled integers,
    :func:`~dpa.aggregates.exact_means.mean_sum_type`) and divided by the count once, at
    the end: the result is the float64 nearest to the exact mean, as in DuckDB and Spark,
    and the same under every policy (partial sums merge exactly in any order). Floating
    point columns are summed as float64, whose rounding depends on the order of the
    additions (as in any parallel engine).

    Args:
        column: The numeric column.
        name: Output column name (default ``mean``).
        as_decimal: For a ``decimal(p, s)`` column, give the mean as Spark's ``avg`` types
            and rounds it, ``decimal(min(38, p + 4), min(38, s + 4))`` rounded half up
            (:func:`~dpa.aggregates.exact_means.means_decimal`), instead of float64. Other
            columns' means stay float64. The Spark bridge sets it.
    """

    kind = "mean"
    default_name = "mean"

    def __init__(self, column: str | None = None, name: str | None = None, as_decimal: bool = False) -> None:
        if not isinstance(as_decimal, bool):
            raise ConfigError(f"Mean as_decimal must be True or False, got {as_decimal!r}")
        super().__init__(column, name)
        self.as_decimal = as_decimal
        self._decimal_type: pa.DataType | None = None  # the column's decimal type, for as_decimal

    # -- scalar contract: an exact sum (int, or Fraction for Decimal values) until a float comes
    def create(self) -> tuple[Any, int]:
        return (0, 0)

    def add(self, acc: tuple[Any, int], value: Any) -> tuple[Any, int]:
        if value is None:
            return acc
        if isinstance(value, decimal.Decimal):
            value = Fraction(value) if value.is_finite() else float(value)
        return (acc[0] + value, acc[1] + 1)

    def merge(self, a: tuple[Any, int], b: tuple[Any, int]) -> tuple[Any, int]:
        return (a[0] + b[0], a[1] + b[1])

    def finalize(self, acc: tuple[Any, int]) -> Any:
        total, count = acc
        if count == 0:
            return None
        if isinstance(total, float):
            return total / count
        dtype = self._decimal_type
        if isinstance(total, Fraction) and self.as_decimal and dtype is not None:
            unscaled = total * 10**dtype.scale
            if unscaled.denominator == 1:  # (values of the column's scale)
                return spark_avg_value(unscaled.numerator, count, dtype)
        return float(Fraction(total) / count)  # (rounded once: a Fraction's float is n / d of integers)

    check_type = Sum.check_type
    float_rounding = True

    def validate(self, schema: pa.Schema | None) -> None:
        super().validate(schema)
        if schema is not None and self.column is not None and pa.types.is_decimal(schema.field(self.column).type):
            self._decimal_type = schema.field(self.column).type

    def prepare(self, table: pa.Table) -> pa.Table:
        # Floats become float64; a decimal widens to its exact sum type; integers are summed
        # by Arrow as int64 / uint64 (checked for overflow in partial_from_batch).
        idx = table.schema.get_field_index(self.column)
        dtype = table.schema.field(self.column).type
        if pa.types.is_integer(dtype):
            return table
        if pa.types.is_decimal(dtype):
            return table.set_column(idx, self.column, pc.cast(table[self.column], mean_sum_type(dtype)))
        return table.set_column(idx, self.column, as_float64(table[self.column]))

    def output_type(self, input_type: pa.DataType | None) -> pa.DataType:
        if self.as_decimal and input_type is not None and pa.types.is_decimal(input_type):
            return spark_avg_type(input_type)
        return pa.float64()

    def spark_types(self, input_schema: pa.Schema | None = None) -> Mean:
        """This mean with the result types of Spark's ``avg`` (``as_decimal``); the input
        schema tells a decimal column's precision wherever the job's partial states come
        from."""
        out = copy.copy(self)
        out.as_decimal = True
        if input_schema is not None and self.column in input_schema.names:
            dtype = input_schema.field(self.column).type
            out._decimal_type = dtype if pa.types.is_decimal(dtype) else None
        return out

    def state_aggregations(self) -> list[tuple[str | None, str, str]]:
        return [(self.column, "sum", "msum"), (self.column, "count", "mcount")]

    def merge_aggregations(self) -> list[tuple[str, str]]:
        return [("msum", "sum"), ("mcount", "sum")]

    def partial_from_batch(self, table: pa.Table, group_cols: list[str], weight_col: str | None = None) -> pa.Table:
        if self.column in table.column_names and sum_may_overflow(table[self.column]):
            aggs = [(self.column, "sum"), (self.column, "count")] + ([([], "count_all")] if weight_col else [])
            names = list(group_cols) + ["msum", "mcount"] + ([weight_col] if weight_col is not None else [])
            return exact_int_sums(table, group_cols, self.column, aggs, names, self.column, HASH_COL)
        return super().partial_from_batch(table, group_cols, weight_col)

    def merge_partials(self, table: pa.Table, group_cols: list[str]) -> pa.Table:
        if sum_may_overflow(table["msum"]):
            return exact_int_sums(table, group_cols, "msum", [("msum", "sum"), ("mcount", "sum")],
                                  list(group_cols) + ["msum", "mcount"], self.column, HASH_COL)
        return super().merge_partials(table, group_cols)

    def finalize_table(self, table: pa.Table, key_cols: list[str]) -> pa.Table:
        total, count = table["msum"], table["mcount"]
        if self.as_decimal and pa.types.is_decimal(total.type) and not is_pending(total.type):
            known = self._decimal_type
            mean = means_decimal(total, count, known if known is not None and known.scale == total.type.scale else None)
        else:
            mean = means_float64(total, count)
        return pa.table([table[c] for c in key_cols] + [mean], names=list(key_cols) + [self.name])


class Collect(_ColumnReducer):
    """All values of ``column`` per key, as a list (order unspecified; nulls kept)."""

    kind = "collect"
    default_name = "collect"

    def create(self) -> list[Any]:
        return []

    def add(self, acc: list[Any], value: Any) -> list[Any]:
        acc.append(value)
        return acc

    def add_batch(self, acc: list[Any], values: list[Any]) -> list[Any]:
        acc.extend(values)
        return acc

    def merge(self, a: list[Any], b: list[Any]) -> list[Any]:
        return a + b

    def output_type(self, input_type: pa.DataType | None) -> pa.DataType:
        return pa.list_(ColumnarReducer.output_type(self, input_type))

    def state_aggregations(self) -> list[tuple[str | None, str, str]]:
        return [(self.column, "list", "items")]

    def merge_partials(self, table: pa.Table, group_cols: list[str]) -> pa.Table:
        flat = pc.list_flatten(table["items"])
        parents = pc.list_parent_indices(table["items"])
        exploded = table.select(group_cols).take(parents).append_column("items", flat)
        out = exploded.group_by(group_cols, use_threads=False).aggregate([("items", "list")])
        return out.rename_columns(list(group_cols) + ["items"])


def _rank(value: Any) -> tuple[bool, Any]:
    """TopK's order: a floating-point NaN above every number, as Spark and DuckDB order
    values (and as Min/Max do), so the result never depends on the order records arrived in."""
    return (_is_nan(value), value)


def _top(k: int, values: list[Any]) -> list[Any]:
    return heapq.nlargest(k, values, key=_rank)


class TopK(_ColumnReducer):
    """The ``k`` largest values of ``column`` per key, largest first (nulls ignored; a
    floating-point NaN ranks above every number, as in Spark and DuckDB)."""

    kind = "top_k"
    default_name = "top_k"

    def __init__(self, column: str | None = None, k: int = 10, name: str | None = None) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"TopK needs k >= 1, got {k!r}")
        super().__init__(column, name)
        self.k = k

    def create(self) -> list[Any]:
        return []

    def add(self, acc: list[Any], value: Any) -> list[Any]:
        if value is None:
            return acc
        return _top(self.k, acc + [value])

    def add_batch(self, acc: list[Any], values: list[Any]) -> list[Any]:
        return _top(self.k, acc + [v for v in values if v is not None])

    def merge(self, a: list[Any], b: list[Any]) -> list[Any]:
        return _top(self.k, a + b)

    check_type = Min.check_type
    output_type = Collect.output_type

    def state_aggregations(self) -> list[tuple[str | None, str, str]]:
        return [(self.column, "list", "items")]

    def _truncate(self, table: pa.Table) -> pa.Table:
        items = table["items"]
        dtype = items.type.value_type
        top = [_top(self.k, [v for v in row if v is not None]) for row in items.to_pylist()]
        return table.set_column(table.schema.get_field_index("items"), "items", pa.array(top, pa.list_(dtype)))

    def partial_from_batch(self, table: pa.Table, group_cols: list[str], weight_col: str | None = None) -> pa.Table:
        return self._truncate(super().partial_from_batch(table, group_cols, weight_col))

    def merge_partials(self, table: pa.Table, group_cols: list[str]) -> pa.Table:
        # Arrow has no hash_list over list columns, and exploding would drop keys whose
        # lists are empty (all-null input): fold the partial rows in Python instead.
        merged: dict[tuple[Any, ...], list[Any]] = {}
        group_values = list(zip(*(table[c].to_pylist() for c in group_cols)))
        for group, items in zip(group_values, table["items"].to_pylist()):
            merged[group] = _top(self.k, merged.get(group, []) + items)
        groups = list(merged)
        arrays = [pa.array([g[i] for g in groups], table.schema.field(c).type) for i, c in enumerate(group_cols)]
        arrays.append(pa.array(list(merged.values()), table.schema.field("items").type))
        return pa.table(arrays, names=list(group_cols) + ["items"])

    def __repr__(self) -> str:
        return f"TopK({self.column!r}, k={self.k})"

def bind_reducer(reducer: Reducer, record_kind: str) -> Reducer:
    """Resolves a built-in's default column for scalar records (``"value"``).

    Args:
        reducer: The aggregate (no cost wrapper: :func:`dpa.aggregates.requested.requested`).
        record_kind: The kind of the records it reads.

    Raises:
        ConfigError: a built-in that needs a column got none for dict/tuple records.
    """
    if not isinstance(reducer, Reducer):
        raise ConfigError(
            f"reducer must be a dpa.Reducer (e.g. dpa.Count(), dpa.Sum('x')), {what_it_is(reducer)}"
        )
    if hasattr(reducer, "bind"):  # several aggregates (dpa.aggregates.combine): bound member by member
        reducer.bind(record_kind)
        return reducer
    if isinstance(reducer, ColumnarReducer) and not isinstance(reducer, Count) and reducer.column is None:
        if record_kind == "scalar":
            reducer.column = "value"
        else:
            raise ConfigError(f"{type(reducer).__name__} needs a column to read, e.g. {type(reducer).__name__}('price')")
    return reducer
