"""Exact distinct values per key: :class:`CountDistinct` and :class:`CollectSet`.

The state of a key is the set of its distinct non-null values, as an Arrow list built
with Arrow's hash ``distinct``; merging two partial states is their union (the lists
exploded and made distinct again), so a hot key split over several reducers merges
exactly and its state never holds more entries than the key has distinct values, however
many records it has.

Values are compared as Spark and DuckDB compare them for ``count(DISTINCT x)``: nulls are
ignored, every NaN is one value (NaN equals NaN), and ``-0.0`` equals ``0.0``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpa.aggregates.contract import ColumnarReducer
from dpa.aggregates.dense import group_aggregate
from dpa.errors import SchemaError

__all__ = ["CollectSet", "CountDistinct"]

_ONLY_VALID = pc.CountOptions(mode="only_valid")


def canonical_value(value: Any) -> Any:
    """The value a distinct set keeps for ``value``: one NaN object for every NaN, 0.0 for -0.0."""
    if isinstance(value, float):
        if value != value:
            return math.nan
        return value + 0.0
    return value


class _DistinctValues(ColumnarReducer):
    """The set of distinct non-null values of ``column`` per key (shared state)."""

    default_name = "distinct"

    def __init__(self, column: str | None = None, name: str | None = None) -> None:
        super().__init__(column, name or self.default_name)

    # -- scalar contract ------------------------------------------------------------------
    def create(self) -> set[Any]:
        return set()

    def add(self, acc: set[Any], value: Any) -> set[Any]:
        if value is not None:
            acc.add(canonical_value(value))
        return acc

    def add_batch(self, acc: set[Any], values: list[Any]) -> set[Any]:
        acc.update(canonical_value(v) for v in values if v is not None)
        return acc

    def merge(self, a: set[Any], b: set[Any]) -> set[Any]:
        return a | b

    # -- columnar contract ----------------------------------------------------------------
    def check_type(self, dtype: pa.DataType) -> None:
        if pa.types.is_nested(dtype):
            raise SchemaError(
                f"{type(self).__name__}({self.column!r}) cannot compare values of type {dtype}; "
                "give it a column of scalars (flatten or cast the column first)")

    def prepare(self, table: pa.Table) -> pa.Table:
        idx = table.schema.get_field_index(self.column)
        column = table[self.column]
        dtype = column.type
        if pa.types.is_dictionary(dtype):
            column, dtype = column.cast(dtype.value_type), dtype.value_type
        if pa.types.is_floating(dtype):  # -0.0 -> 0.0 (NaNs are one value to Arrow's hashing)
            column = pc.add(column, pa.scalar(0.0, dtype))
        return table.set_column(idx, self.column, column)

    def state_aggregations(self) -> list[tuple[str | None, str, str]]:
        return [(self.column, "distinct", "values")]

    def fused_partial(self) -> list[tuple[str | None, str, str, Any]]:
        """The partial step as Arrow aggregates with options, ``(column, function, state,
        options)``: a list of aggregates computes it in its one group-by."""
        return [(self.column, "distinct", "values", _ONLY_VALID)]

    def partial_from_batch(self, table: pa.Table, group_cols: list[str], weight_col: str | None = None) -> pa.Table:
        table = self.prepare(table)
        aggs: list[Any] = [(self.column, "distinct", _ONLY_VALID)]
        names = list(group_cols) + ["values"]
        if weight_col is not None:
            aggs.append(([], "count_all"))
            names.append(weight_col)
        return group_aggregate(table, group_cols, aggs).rename_columns(names)

    def merge_partials(self, table: pa.Table, group_cols: list[str]) -> pa.Table:
        lists = table["values"]
        flat = pc.list_flatten(lists)
        parents = pc.list_parent_indices(lists)
        exploded = table.select(group_cols).take(parents).append_column("values", flat)
        # One null row per partial row keeps keys whose sets are empty (all-null input).
        keep = table.select(group_cols).append_column("values", pa.nulls(table.num_rows, flat.type))
        both = pa.concat_tables([exploded, keep])
        out = group_aggregate(both, group_cols, [("values", "distinct", _ONLY_VALID)])
        return out.rename_columns(list(group_cols) + ["values"])


class CountDistinct(_DistinctValues):
    """Number of distinct non-null values of ``column`` per key (exact; int64, never null).

    Spark's ``count(DISTINCT c)``: nulls are not counted, NaN counts once, ``-0.0`` and
    ``0.0`` are one value. A key without non-null values counts 0.
    """

    kind = "count_distinct"
    default_name = "count_distinct"

    def finalize(self, acc: set[Any]) -> int:
        return len(acc)

    def output_type(self, input_type: pa.DataType | None) -> pa.DataType:
        return pa.int64()

    def output_field(self, input_schema: pa.Schema | None) -> pa.Field | None:
        field = super().output_field(input_schema)
        return None if field is None else field.with_nullable(False)

    def finalize_table(self, table: pa.Table, key_cols: list[str]) -> pa.Table:
        counts = pc.cast(pc.list_value_length(table["values"]), pa.int64()).fill_null(0)
        return pa.table([table[c] for c in key_cols] + [counts], names=list(key_cols) + [self.name])

    def spark_name(self) -> str:
        return self.name if self.name != self.default_name else f"count(DISTINCT {self.column})"


class CollectSet(_DistinctValues):
    """The distinct non-null values of ``column`` per key, as a sorted list (Spark's
    ``collect_set``, whose order is unspecified; dpa sorts it, NaN last, so results do not
    depend on how the key was split)."""

    kind = "collect_set"
    default_name = "collect_set"

    def finalize(self, acc: set[Any]) -> list[Any]:
        nan = [v for v in acc if isinstance(v, float) and v != v]
        return sorted(v for v in acc if not (isinstance(v, float) and v != v)) + nan[:1]

    def output_type(self, input_type: pa.DataType | None) -> pa.DataType:
        if input_type is not None and pa.types.is_dictionary(input_type):
            input_type = input_type.value_type
        # (no null among the values, as in Spark's array<T> of collect_set: containsNull false)
        return pa.list_(pa.field("item", ColumnarReducer.output_type(self, input_type), nullable=False))

    def finalize_table(self, table: pa.Table, key_cols: list[str]) -> pa.Table:
        lists = table["values"].combine_chunks() if isinstance(table["values"], pa.ChunkedArray) else table["values"]
        lists = lists.fill_null([]) if lists.null_count else lists
        flat = pc.list_flatten(lists)
        parents = np.asarray(pc.list_parent_indices(lists), dtype=np.int64)
        order = pa.table({"p": parents, "v": flat}).sort_by([("p", "ascending"), ("v", "ascending")])
        sizes = np.asarray(pc.list_value_length(lists).fill_null(0), dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
        values = order["v"].combine_chunks() if len(order) else pa.array([], flat.type)
        out = pa.ListArray.from_arrays(pa.array(offsets), values)
        return pa.table([table[c] for c in key_cols] + [out], names=list(key_cols) + [self.name])

    def spark_name(self) -> str:
        return self.name if self.name != self.default_name else f"collect_set({self.column})"
