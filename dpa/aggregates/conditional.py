"""Aggregates of boolean columns: :class:`CountIf`, :class:`Any` and :class:`All`.

Plain Arrow aggregates, so in a list of aggregates they share the one hash group-by of
the batch. Nulls are ignored, as Spark's ``count_if``, ``bool_or`` and ``bool_and``
ignore them: ``CountIf`` of a key without true values is 0; ``Any``/``All`` of a key
without non-null values is null.
"""

from __future__ import annotations

from typing import Any as AnyType

import pyarrow as pa
import pyarrow.compute as pc

from dpa.aggregates.contract import ColumnarReducer
from dpa.errors import SchemaError

__all__ = ["All", "Any", "CountIf"]


class _Boolean(ColumnarReducer):
    default_name = "bool"

    def __init__(self, column: str | None = None, name: str | None = None) -> None:
        super().__init__(column, name or self.default_name)

    def check_type(self, dtype: pa.DataType) -> None:
        if not (pa.types.is_boolean(dtype) or pa.types.is_null(dtype)):
            raise SchemaError(
                f"{type(self).__name__}({self.column!r}) needs a boolean column, but {self.column!r} has type "
                f"{dtype}; make one first, e.g. pc.greater(table['x'], 0)")

    def prepare(self, table: pa.Table) -> pa.Table:
        if pa.types.is_null(table.schema.field(self.column).type):
            idx = table.schema.get_field_index(self.column)
            return table.set_column(idx, self.column, table[self.column].cast(pa.bool_()))
        return table

    def spark_name(self) -> str:
        return self.name if self.name != self.default_name else f"{self._spark}({self.column})"


class CountIf(_Boolean):
    """Number of true values of a boolean ``column`` per key (int64, never null)."""

    kind = "count_if"
    default_name = "count_if"
    _spark = "count_if"

    def create(self) -> int:
        return 0

    def add(self, acc: int, value: AnyType) -> int:
        return acc + (value is True or value == True)  # noqa: E712 (numpy booleans too)

    def merge(self, a: int, b: int) -> int:
        return a + b

    def prepare(self, table: pa.Table) -> pa.Table:
        table = super().prepare(table)
        idx = table.schema.get_field_index(self.column)
        return table.set_column(idx, self.column, pc.cast(table[self.column], pa.int64()))

    def state_aggregations(self) -> list[tuple[str | None, str, str]]:
        return [(self.column, "sum", "trues")]

    def output_type(self, input_type: pa.DataType | None) -> pa.DataType:
        return pa.int64()

    def output_field(self, input_schema: pa.Schema | None) -> pa.Field | None:
        field = super().output_field(input_schema)
        return None if field is None else field.with_nullable(False)

    def finalize_table(self, table: pa.Table, key_cols: list[str]) -> pa.Table:
        counts = pc.cast(table["trues"], pa.int64()).fill_null(0)
        return pa.table([table[c] for c in key_cols] + [counts], names=list(key_cols) + [self.name])


class Any(_Boolean):
    """Whether any non-null value of a boolean ``column`` is true, per key (Spark's ``bool_or``)."""

    kind = "any"
    default_name = "any"
    _spark = "bool_or"

    def create(self) -> bool | None:
        return None

    def add(self, acc: bool | None, value: AnyType) -> bool | None:
        if value is None:
            return acc
        return bool(value) if acc is None else (acc or bool(value))

    def merge(self, a: bool | None, b: bool | None) -> bool | None:
        return self.add(a, b)

    def state_aggregations(self) -> list[tuple[str | None, str, str]]:
        # max of booleans: Arrow 17's hash "any"/"all" misread sliced batches (they ignore the
        # array offset), hash "max"/"min" do not.
        return [(self.column, "max", "any")]

    def output_type(self, input_type: pa.DataType | None) -> pa.DataType:
        return pa.bool_()


class All(Any):
    """Whether every non-null value of a boolean ``column`` is true, per key (Spark's ``bool_and``)."""

    kind = "all"
    default_name = "all"
    _spark = "bool_and"

    def add(self, acc: bool | None, value: AnyType) -> bool | None:
        if value is None:
            return acc
        return bool(value) if acc is None else (acc and bool(value))

    def state_aggregations(self) -> list[tuple[str | None, str, str]]:
        return [(self.column, "min", "all")]
