"""The value at a key's largest or smallest ordering value: :class:`MaxBy` and :class:`MinBy`.

``MaxBy("status", by="updated_at")`` is Spark's ``max_by(status, updated_at)`` (DuckDB's
``arg_max_null``): per key, the ``status`` of the row whose ``updated_at`` is largest, the
usual way to keep the latest value of a field per key. The state of a key is that one row's
pair ``(value, by)``; merging two partial states keeps the better pair, so a hot key split
over several reducers merges exactly.

Rows whose ordering value is null are skipped; the value itself may be null and is then
the result (as in Spark). A key without a non-null ordering value gives null. Ordering
values compare as Spark and DuckDB compare them: a floating-point NaN equals NaN and is
larger than every other value; ``-0.0`` equals ``0.0``.

Where several rows tie on the ordering value, Spark and DuckDB return the value of
whichever row they met first, which depends on how the input was partitioned. dpa breaks
the tie by the value itself, so that the answer does not depend on the order records
arrived in: ``MaxBy`` takes the largest of the tied values and ``MinBy`` the smallest, a
null or NaN value only when every tied value is null or NaN (a NaN before a null). Values
that cannot be ordered (lists, structs, maps) keep the first tied row a reducer saw.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpa._internal.arrays import from_numpy, scalar, to_numpy
from dpa.aggregates.builtins import _is_nan
from dpa.aggregates.composite import group_ids
from dpa.aggregates.contract import GROUP_ID_COL, ColumnarReducer, by_group_id
from dpa.aggregates.dense import group_aggregate
from dpa.errors import ConfigError, SchemaError

__all__ = ["MaxBy", "MinBy"]

#: Names of a key's state columns: the chosen row's value and ordering value.
VALUE, BY = "value", "by"

#: (an Arrow scalar: a Python bool given to a compute function goes through pyarrow's pandas shim)
_FALSE = scalar(False, pa.bool_())


def orderable(dtype: pa.DataType) -> bool:
    """Whether Arrow can sort values of ``dtype`` (scalars; not lists, structs or maps)."""
    return not (pa.types.is_nested(dtype) or pa.types.is_dictionary(dtype) or pa.types.is_null(dtype))


def _compare(a: Any, b: Any) -> int:
    """-1, 0 or 1 as ``a`` is below, equal to or above ``b`` (NaN above every number)."""
    a_nan, b_nan = _is_nan(a), _is_nan(b)
    if a_nan or b_nan:
        return int(a_nan) - int(b_nan)
    return (a > b) - (a < b)


def chosen_rows(value: pa.ChunkedArray | pa.Array, by: pa.ChunkedArray | pa.Array, gid: np.ndarray, size: int,
                largest: bool) -> np.ndarray:
    """The row each group takes (see the module docstring), -1 for a group whose ordering
    values are all null.

    One group-by finds each group's best ordering value; only the rows holding it (one per
    group unless the group ties) are then sorted, by group and value.

    Args:
        value: The values, one per row.
        by: The ordering values, one per row.
        gid: Group id per row, in ``[0, size)``.
        size: Number of groups.
        largest: Take the row with the largest ordering value (``MaxBy``), else the smallest.

    Returns:
        An int64 array of ``size`` row indices.
    """
    chosen = np.full(size, -1, dtype=np.int64)
    if not len(gid) or pa.types.is_null(by.type):
        return chosen
    groups = from_numpy(gid)
    floating = pa.types.is_floating(by.type)
    nan = pc.is_nan(by).fill_null(_FALSE) if floating else None
    # Each group's best number (Arrow's min and max skip NaN, but give an infinity for a
    # group of NaN alone: NaN is made null first, so that such a group's best is null).
    numbers = pc.if_else(nan, scalar(None, by.type), by) if floating else by
    best = group_aggregate(pa.table({GROUP_ID_COL: groups, "by": numbers}), [GROUP_ID_COL],
                           [("by", "max" if largest else "min")])
    best = by_group_id(best, size).column(1)
    candidates = pc.equal(by, best.take(groups))
    nan_rows = to_numpy(pc.indices_nonzero(nan)).astype(np.int64, copy=False) if floating else ()
    if len(nan_rows):  # a NaN ranks above every number, as in Spark
        has_nan = np.zeros(size, dtype=bool)
        has_nan[gid[nan_rows]] = True
        # MaxBy: a group holding a NaN takes its NaN rows; MinBy: only a group of NaNs alone.
        if largest:
            nan_wins = has_nan
        else:
            nan_wins = np.zeros(size, dtype=bool)
            nan_wins[to_numpy(pc.indices_nonzero(pc.is_null(best)))] = True
            nan_wins &= has_nan
        wins = from_numpy(nan_wins.view(np.uint8)).take(groups)
        candidates = pc.if_else(pc.not_equal(wins, scalar(0, pa.uint8())), nan, candidates)
    rows = to_numpy(pc.indices_nonzero(candidates.fill_null(_FALSE))).astype(np.int64, copy=False)
    if not len(rows):
        return chosen
    cand_groups = gid[rows]
    taken, first = np.unique(cand_groups, return_index=True)  # (each group's first candidate)
    if len(taken) < len(rows) and orderable(value.type):  # ties: the value decides
        order = "descending" if largest else "ascending"
        sort = pa.table({"g": from_numpy(cand_groups), "v": value.take(from_numpy(rows))})
        idx = to_numpy(pc.sort_indices(sort, sort_keys=[("g", "ascending"), ("v", order)], null_placement="at_end"))
        rows, cand_groups = rows[idx], cand_groups[idx]
        taken, first = np.unique(cand_groups, return_index=True)
    chosen[taken] = rows[first]
    return chosen


def _take(column: pa.ChunkedArray | pa.Array, chosen: np.ndarray) -> pa.Array | pa.ChunkedArray:
    """``column``'s rows at ``chosen``, null where ``chosen`` is -1."""
    missing = chosen < 0
    return column.take(from_numpy(np.where(missing, 0, chosen), mask=missing if missing.any() else None))


class MaxBy(ColumnarReducer):
    """The value of ``column`` in the row with the largest ``by`` per key: Spark's
    ``max_by(column, by)``, e.g. the latest status per order with
    ``dpa.MaxBy("status", by="updated_at")``.

    Rows with a null ``by`` are skipped; a NaN ``by`` is the largest. Ties on ``by`` take
    the largest value (see :mod:`dpa.aggregates.extremes`). The output has the type of
    ``column``, null for a key without a non-null ``by``.

    Args:
        column: The column whose value is returned (any type).
        by: The ordering column (scalars: numbers, strings, dates, timestamps, ...).
        name: Output column name (default ``max_by``; in a list of aggregates Spark's
            ``max_by(column, by)``).
    """

    kind = "max_by"
    default_name = "max_by"
    largest = True

    def __init__(self, column: str | None = None, by: str | None = None, name: str | None = None) -> None:
        fn = type(self).__name__
        if not isinstance(column, str) or not column:
            raise ConfigError(f"{fn} needs the column whose value it returns, e.g. dpa.{fn}('status', by='updated_at')")
        if not isinstance(by, str) or not by:
            raise ConfigError(f"{fn}({column!r}) needs by=, the column that orders the rows, "
                              f"e.g. dpa.{fn}({column!r}, by='updated_at')")
        super().__init__(column, name or self.default_name)
        self.by = by

    def input_columns(self) -> list[str] | None:
        return [self.column] if self.by == self.column else [self.column, self.by]

    @property
    def record_fields(self) -> tuple[str, str]:
        """The fields :meth:`add` takes from a record, as a ``(value, by)`` tuple."""
        return (self.column, self.by)

    # -- scalar contract: the state is None or (by, value) ---------------------------------
    def create(self) -> tuple[Any, Any] | None:
        return None

    def add(self, acc: tuple[Any, Any] | None, value: Any) -> tuple[Any, Any] | None:
        """Folds in one record's ``(value, by)`` pair."""
        v, b = value
        return acc if b is None else self.merge(acc, (b, v))

    def merge(self, a: tuple[Any, Any] | None, b: tuple[Any, Any] | None) -> tuple[Any, Any] | None:
        if a is None or b is None:
            return a if b is None else b
        return b if self._better(b, a) else a

    def _better(self, new: tuple[Any, Any], old: tuple[Any, Any]) -> bool:
        sign = 1 if self.largest else -1
        by = _compare(new[0], old[0]) * sign
        if by:
            return by > 0
        new_v, old_v = new[1], old[1]
        new_rank, old_rank = (new_v is None, _is_nan(new_v)), (old_v is None, _is_nan(old_v))
        if new_rank != old_rank:  # a value before a NaN before a null
            return new_rank < old_rank
        if new_v is None or _is_nan(new_v):
            return False
        try:
            return _compare(new_v, old_v) * sign > 0
        except TypeError:  # values that do not order: the first one stays
            return False

    def finalize(self, acc: tuple[Any, Any] | None) -> Any:
        return None if acc is None else acc[1]

    # -- columnar contract ----------------------------------------------------------------
    def validate(self, schema: pa.Schema | None) -> None:
        if schema is None:
            return
        for col in dict.fromkeys([self.column, self.by]):
            if col not in schema.names:
                raise SchemaError(f"{self!r} reads column {col!r}, which the input does not have; "
                                  f"available columns: {', '.join(schema.names)}")
        dtype = schema.field(self.by).type
        if not orderable(dtype) and not pa.types.is_null(dtype):
            raise SchemaError(f"{self!r} cannot order rows by values of type {dtype}; give by= a column of "
                              "scalars (numbers, strings, dates, timestamps)")

    def state_aggregations(self) -> list[tuple[str | None, str, str]]:
        # (no Arrow hash aggregate computes these: the steps below choose the rows)
        return [(self.column, self.kind, VALUE), (self.by, self.kind, BY)]

    def partial_from_batch(self, table: pa.Table, group_cols: list[str], weight_col: str | None = None) -> pa.Table:
        gid, size = group_ids(table, group_cols)
        out = self._best(table[self.column], table[self.by], table.select(group_cols), gid, size)
        if weight_col is not None:
            out = out.append_column(weight_col, from_numpy(np.bincount(gid, minlength=size).astype(np.int64)))
        return out

    def merge_partials(self, table: pa.Table, group_cols: list[str]) -> pa.Table:
        gid, size = group_ids(table, group_cols)
        return self._best(table[VALUE], table[BY], table.select(group_cols), gid, size)

    def merge_groups(self, table: pa.Table, gid: np.ndarray, size: int) -> pa.Table:
        chosen = chosen_rows(table[VALUE], table[BY], gid, size, self.largest)
        return pa.table([_take(table[VALUE], chosen), _take(table[BY], chosen)], names=[VALUE, BY])

    def _best(self, value: pa.ChunkedArray, by: pa.ChunkedArray, keys: pa.Table, gid: np.ndarray,
              size: int) -> pa.Table:
        """One row per group: the group's key columns, then its chosen value and ordering value."""
        chosen = chosen_rows(value, by, gid, size, self.largest)
        first = np.full(size, len(gid), dtype=np.int64)
        np.minimum.at(first, gid, np.arange(len(gid), dtype=np.int64))
        out = keys.take(from_numpy(first))
        return out.append_column(VALUE, _take(value, chosen)).append_column(BY, _take(by, chosen))

    def finalize_table(self, table: pa.Table, key_cols: list[str]) -> pa.Table:
        return pa.table([table[c] for c in key_cols] + [table[VALUE]], names=list(key_cols) + [self.name])

    def spark_name(self) -> str:
        return self.name if self.name != self.default_name else f"{self.kind}({self.column}, {self.by})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.column!r}, by={self.by!r})"


class MinBy(MaxBy):
    """The value of ``column`` in the row with the smallest ``by`` per key: Spark's
    ``min_by(column, by)``, e.g. the first page of each session with
    ``dpa.MinBy("page", by="ts")``.

    Rows with a null ``by`` are skipped; a NaN ``by`` is taken only when every ``by`` of
    the key is NaN. Ties on ``by`` take the smallest value (see
    :mod:`dpa.aggregates.extremes`).

    Args:
        column: The column whose value is returned (any type).
        by: The ordering column.
        name: Output column name (default ``min_by``).
    """

    kind = "min_by"
    default_name = "min_by"
    largest = False
