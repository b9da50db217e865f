"""Group-by for keys that are small integers: each key's value is its group's index.

Most group-bys hash every row's key to find its group; Arrow's hash aggregation does, and
its cost grows with the number of groups (at 78k keys in a block of 1.7M rows, Arrow's
grouped variance alone costs twice its count). When the key is one column of integers (or
of dates, timestamps, times or durations, integers underneath) whose values span a range
not much larger than the batch, the key itself numbers the groups: ``id = key - min`` (or
``id = key`` when ``0 <= min <= max - min + 1``).
The aggregates are then ``numpy.bincount`` and ``numpy.add.at`` (``maximum.at``, ...) over
that id, and the groups present are those with rows. DuckDB calls this a perfect hash
aggregate.

:func:`group_aggregate` is ``table.group_by(group_cols, use_threads=False).aggregate(aggs)``
with Arrow's output (the same columns, types, nulls and values) computed this way when it
can be, and by Arrow otherwise; rows come ordered by key rather than by first appearance.
It computes ``count_all``, ``count`` (of valid values), ``sum`` (int64 or uint64, wrapping
around as Arrow's does, or float64), ``mean`` (of integers only while every sum fits a
float64 exactly, as Arrow's integer mean never wraps around), ``variance`` (float64,
population, Arrow's two passes per batch), ``min`` and ``max`` (integers, booleans), each
without options, and ``distinct`` of integer-like values, strings and binaries with
``CountOptions(mode="only_valid")`` (each group's distinct non-null values as a list: one
sort of ``group * span + value`` over the rows, while ``group * span`` stays far inside
int64, a string numbered by a dictionary of the batch's strings first; integers come
ascending, strings in order of the dictionary, where Arrow lists both in order of first
appearance in the group). Anything else, a key with nulls, several key columns, a key range wider
than ``DENSE_SPAN_ROWS`` times the rows (plus ``DENSE_SPAN_SLACK``), or a batch of more than
``DENSE_SMALL_ROWS`` rows with fewer groups than ``DENSE_MIN_GROUPS`` and an aggregate other
than a count goes to Arrow's group-by unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpa._internal.arrays import buffer_values, from_numpy, numpy_dtype, one_array, scalar, to_numpy
from dpa.input.records import HASH_COL

logger = logging.getLogger(__name__)

__all__ = ["DENSE_MIN_GROUPS", "DENSE_SMALL_ROWS", "DENSE_SPAN_ROWS", "DENSE_SPAN_SLACK", "DenseKeys", "dense_keys",
           "group_aggregate", "group_order", "groups_by_value"]

#: A key column is dense when ``max - min + 1 <= DENSE_SPAN_ROWS * rows + DENSE_SPAN_SLACK``:
#: the per-group arrays then cost about as much as the rows themselves.
DENSE_SPAN_ROWS = 2
DENSE_SPAN_SLACK = 1 << 16

#: Fewer groups than this go to Arrow unless only counts are asked for: Arrow's hash table
#: is then small and its aggregates cheaper than numpy's passes over the rows (on a block of
#: 1.7M rows the two break even at about 8k groups; counts are cheaper here at any number).
DENSE_MIN_GROUPS = 8192

#: A batch of at most this many rows is grouped here whatever its number of groups: both
#: ways cost well under a millisecond (within 0.25 ms of each other at 64k rows), and
#: Arrow's group-by loads its query engine first (``pyarrow.acero``, which imports pandas:
#: about 0.25 s of CPU in a new process), which a job's small merges need not pay.
DENSE_SMALL_ROWS = 1 << 16

#: An integer mean is computed from a float64 sum, exact while every sum stays below this.
_EXACT_FLOAT = 2**53

#: Rows per step of the variance's second pass (:func:`_sum_of_squared_deviations`): 512 KB
#: of float64, which stays in a core's cache.
PASS_ROWS = 1 << 16

_FUNCTIONS = ("count_all", "count", "sum", "mean", "variance", "min", "max", "distinct")

#: The one option ``distinct`` is computed here with: non-null values only.
_ONLY_VALID = pc.CountOptions(mode="only_valid")

#: ``distinct`` numbers ``(group, value)`` pairs as ``group * span + value``: below this.
_PAIR_LIMIT = 2**62


def _storage_type(dtype: pa.DataType) -> pa.DataType | None:
    """The integer type a key type is stored as, or None if it is not integer-like."""
    if pa.types.is_integer(dtype):
        return dtype
    if pa.types.is_date32(dtype) or pa.types.is_time32(dtype):
        return pa.int32()
    if (pa.types.is_date64(dtype) or pa.types.is_timestamp(dtype) or pa.types.is_time64(dtype)
            or pa.types.is_duration(dtype)):
        return pa.int64()
    return None


def groups_by_value(key_types: Sequence[pa.DataType | None] | None) -> bool:
    """Whether a job keyed by columns of ``key_types`` may group its batches by key value:
    one key column of an integer-like type (its batches still need no nulls and a narrow
    range). Any other key groups with Arrow's group-by.

    Args:
        key_types: The key columns' Arrow types (None where unknown), or None.

    Returns:
        True for one integer, date, timestamp, time or duration key column.
    """
    return (key_types is not None and len(key_types) == 1 and key_types[0] is not None
            and _storage_type(key_types[0]) is not None)


@dataclass
class DenseKeys:
    """A key column numbered by its values: row ``i`` is in group ``ids[i]``, ``0 <= ids < size``.

    Attributes:
        ids: Group id per row (``key - low``).
        size: Number of ids (the key's range; not every id need have rows).
        low: The key of id 0: the smallest key, or 0.
        dtype: The key column's Arrow type.
    """

    ids: np.ndarray
    size: int
    low: int
    dtype: pa.DataType

    def keys(self, present: np.ndarray) -> pa.Array:
        """The key values of the groups ``present`` (ids), as the key column's type."""
        storage = _storage_type(self.dtype)
        if pa.types.is_uint64(storage):
            values = present.astype(np.uint64) + np.uint64(self.low)
        else:
            values = (present.astype(np.int64) + self.low).astype(numpy_dtype(storage))
        out = from_numpy(values, storage)
        return out if storage.equals(self.dtype) else out.view(self.dtype)

    def group_ids(self) -> tuple[np.ndarray, int]:
        """``(id per row, number of groups)`` with only the key values present numbered:
        every id in ``[0, n)`` has rows, in the order of the key values."""
        used = np.zeros(self.size, dtype=np.int64)
        used[self.ids] = 1
        present = np.cumsum(used) - 1
        return present[self.ids], int(present[-1]) + 1


def dense_keys(column: pa.ChunkedArray | pa.Array) -> DenseKeys | None:
    """The key column's values as group ids, or None when they are not dense (see the
    module docstring): a type that is not integer-like, a null, or too wide a range."""
    dtype = column.type
    storage = _storage_type(dtype)
    rows = len(column)
    if storage is None or column.null_count or rows == 0:
        return None
    column = one_array(column)
    if not storage.equals(column.type):
        column = column.view(storage)
    values = to_numpy(column)
    low, high = int(values.min()), int(values.max())
    size = high - low + 1
    if size > DENSE_SPAN_ROWS * rows + DENSE_SPAN_SLACK:
        return None
    if 0 <= low <= size and values.dtype == np.int64:
        # The values are the ids (from 0, even when the smallest key is larger, as long as
        # that at most doubles the ids): the column's own buffer, where ``values - low``
        # would be a new array as long as the batch.
        low, size = 0, high + 1
        ids = values
    elif pa.types.is_uint64(storage):
        ids = (values - np.uint64(low)).view(np.int64)
    else:
        ids = np.subtract(values, low, dtype=np.int64)
    return DenseKeys(ids, size, low, dtype)


def group_order(ids: np.ndarray, size: int) -> np.ndarray:
    """A permutation that lists the rows group by group: ``ids[order]`` is sorted, and the
    rows of a group keep their order.

    numpy sorts 16-bit integers stably by radix, in one pass over them; ids below ``2**32``
    take two such sorts (by the low half, then by the high half), several times faster than
    a comparison sort of the ids themselves.

    Args:
        ids: Group id per row, in ``[0, size)``.
        size: Number of groups.

    Returns:
        The row order (intp).
    """
    ids = np.asarray(ids)
    if size <= 1 << 16:
        return np.argsort(ids.astype(np.uint16), kind="stable")
    if size <= 1 << 32:
        low = np.argsort((ids & 0xFFFF).astype(np.uint16), kind="stable")
        return low[np.argsort((ids[low] >> 16).astype(np.uint16), kind="stable")]
    return np.argsort(ids, kind="stable")


class _Column:
    """One value column of the batch, read once into numpy for every aggregate on it."""

    def __init__(self, column: pa.ChunkedArray, ids: np.ndarray, size: int, rows_per_group: np.ndarray) -> None:
        self.type = column.type
        self.column = column
        self.valid: np.ndarray | None = None
        if column.null_count:
            self.valid = np.asarray(pc.is_valid(column), dtype=bool)
        self._ids = ids
        self._size = size
        self._values: np.ndarray | None = None
        self._count: np.ndarray | None = None if self.valid is not None else rows_per_group
        self._sum: np.ndarray | None = None
        self._range: tuple[int, int] | None = None
        self._dictionary: tuple[np.ndarray, pa.Array] | None = None

    @property
    def values(self) -> np.ndarray:
        """The values, nulls as 0."""
        if self._values is None:
            col = one_array(self.column)
            if self.valid is not None:
                col = pc.fill_null(col, scalar(False if pa.types.is_boolean(self.type) else 0, self.type))
            self._values = to_numpy(col)
        return self._values

    def storage_values(self) -> np.ndarray:
        """The values as the integers they are stored as (a date as its int32 days, ...);
        under a null, whatever the buffer holds (see :attr:`valid`)."""
        storage = _storage_type(self.type)
        assert storage is not None
        array = one_array(self.column)
        if not storage.equals(array.type):
            array = array.view(storage)
        return buffer_values(array)

    def dictionary(self) -> tuple[np.ndarray, pa.Array]:
        """A string or binary column as ``(code per row, the distinct values)``: a code
        numbers its value in order of first appearance (a null's code is whatever the buffer
        holds, see :attr:`valid`)."""
        if self._dictionary is None:
            encoded = pc.dictionary_encode(one_array(self.column))
            self._dictionary = (buffer_values(encoded.indices), encoded.dictionary)
        return self._dictionary

    def value_range(self) -> tuple[int, int]:
        """``(min, max - min + 1)`` of the valid values as their stored integers, or for
        strings and binaries ``(0, number of distinct values)`` (``(0, 1)`` when there are
        none)."""
        if self._range is None and _is_text(self.type):
            self._range = (0, max(1, len(self.dictionary()[1])))
        if self._range is None:
            values = self.storage_values()
            if self.valid is not None:
                values = values[self.valid]
            low = int(values.min()) if len(values) else 0
            self._range = (low, int(values.max()) - low + 1 if len(values) else 1)
        return self._range

    def count(self) -> np.ndarray:
        """Valid values per group (int64)."""
        if self._count is None:
            ids = self._ids if self.valid is None else self._ids[self.valid]
            self._count = np.bincount(ids, minlength=self._size).astype(np.int64, copy=False)
        return self._count

    def exact_in_float64(self) -> bool:
        """Whether every sum of this integer column's values is exact as a float64 (and so
        as an int64: a mean divides it exactly as Arrow's does)."""
        values = self.values
        if len(values) == 0:
            return True
        bound = max(abs(int(values.min())), abs(int(values.max())))
        return bound * len(values) < _EXACT_FLOAT

    def sum(self) -> np.ndarray:
        """The sum per group as Arrow's hash sum has it (nulls add nothing): float64 for
        floats, int64 (uint64 for unsigned integers) wrapping around on overflow for integers."""
        if self._sum is None:
            if pa.types.is_floating(self.type):
                acc = np.float64
            else:
                acc = np.uint64 if pa.types.is_unsigned_integer(self.type) else np.int64
            out = np.zeros(self._size, dtype=acc)
            np.add.at(out, self._ids, self.values.astype(acc, copy=False))
            self._sum = out
        return self._sum


def _supported(fn: str, dtype: pa.DataType | None) -> bool:
    """Whether ``fn`` on a column of ``dtype`` is computed here (exactly as Arrow does)."""
    if fn == "count_all" or fn == "count":
        return True
    if dtype is None:
        return False
    if fn in ("sum", "mean"):
        return pa.types.is_integer(dtype) or pa.types.is_float32(dtype) or pa.types.is_float64(dtype)
    if fn == "variance":
        return pa.types.is_float64(dtype)
    if fn in ("min", "max"):
        return pa.types.is_integer(dtype) or pa.types.is_boolean(dtype)
    if fn == "distinct":
        storage = _storage_type(dtype)
        return (storage is not None and not pa.types.is_uint64(storage)) or _is_text(dtype)
    return False


def _is_text(dtype: pa.DataType) -> bool:
    """Strings and binaries, whose distinct values are numbered by a dictionary first."""
    return (pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or pa.types.is_binary(dtype)
            or pa.types.is_large_binary(dtype))


def _masked(values: np.ndarray, count: np.ndarray, present: np.ndarray, dtype: pa.DataType) -> pa.Array:
    """``values`` of the present groups as ``dtype``, null where a group has no valid value."""
    empty = count[present] == 0
    return from_numpy(values[present], dtype, mask=empty if empty.any() else None)


def _aggregate(col: _Column | None, fn: str, counts: np.ndarray, present: np.ndarray,
               ids: np.ndarray, size: int) -> pa.Array:
    """One aggregate of the present groups, as Arrow's hash aggregate would give it."""
    if fn == "count_all":
        return from_numpy(counts[present], pa.int64())
    assert col is not None
    if fn == "count":
        return from_numpy(col.count()[present], pa.int64())
    if fn == "distinct":
        return _distinct(col, ids, size, present)
    dtype = col.type
    if fn == "sum":
        if pa.types.is_floating(dtype):
            return _masked(col.sum(), col.count(), present, pa.float64())
        out_type = pa.uint64() if pa.types.is_unsigned_integer(dtype) else pa.int64()
        return _masked(col.sum(), col.count(), present, out_type)
    if fn == "mean":  # (of integers only when their sums are exact: see _dense_aggregate)
        with np.errstate(invalid="ignore", divide="ignore"):
            return _masked(col.sum().astype(np.float64, copy=False) / col.count(), col.count(), present, pa.float64())
    if fn == "variance":
        n = col.count()
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = col.sum() / n
            var = _sum_of_squared_deviations(col.values, col.valid, ids, mean, size) / n
        return _masked(var, n, present, pa.float64())
    # min / max of integers or booleans
    if pa.types.is_boolean(dtype):
        out = np.full(size, fn == "min", dtype=np.bool_)
    else:
        info = np.iinfo(numpy_dtype(dtype))
        out = np.full(size, info.max if fn == "min" else info.min, dtype=info.dtype)
    values, where = col.values, ids
    if col.valid is not None:
        values, where = values[col.valid], ids[col.valid]
    (np.minimum if fn == "min" else np.maximum).at(out, where, values)
    return _masked(out, col.count(), present, dtype)


def _distinct(col: _Column, ids: np.ndarray, size: int, present: np.ndarray) -> pa.Array:
    """Each present group's distinct valid values as a list array of the column's type:
    the sorted ``group * span + (value - min)`` pairs, without repeats (integers ascending;
    strings and binaries by their dictionary code, in order of first appearance)."""
    text = _is_text(col.type)
    values, where = col.dictionary()[0] if text else col.storage_values(), ids
    if col.valid is not None:
        values, where = values[col.valid], ids[col.valid]
    low, span = col.value_range()
    pairs = np.multiply(where, span, dtype=np.int64)
    pairs += values.astype(np.int64, copy=False) - low
    # Timsort: as fast as numpy's default sort on rows in any order, and it merges runs that
    # are sorted already, as a merge's partial states are (each ordered by key and value).
    pairs.sort(kind="stable")
    if len(pairs):
        fresh = np.empty(len(pairs), dtype=bool)
        fresh[0] = True
        np.not_equal(pairs[1:], pairs[:-1], out=fresh[1:])
        pairs = pairs[fresh]
    group = pairs // span
    if text:
        items = col.dictionary()[1].take(from_numpy(pairs - group * span))
    else:
        storage = _storage_type(col.type)
        assert storage is not None
        items = from_numpy((pairs - group * span + low).astype(numpy_dtype(storage)), storage)
        if not storage.equals(col.type):
            items = items.view(col.type)
    offsets = np.zeros(len(present) + 1, dtype=np.int32)
    np.cumsum(np.bincount(group, minlength=size)[present], out=offsets[1:])
    return pa.ListArray.from_arrays(from_numpy(offsets), items)


def _rows_per_id(ids: np.ndarray, size: int) -> np.ndarray:
    """The rows of each id (int64). ``numpy.bincount`` copies an index array it may not write
    (the key column's own Arrow buffer) before counting, a copy as long as the batch;
    ``numpy.add.at`` reads it where it is."""
    if ids.flags.writeable:
        return np.bincount(ids, minlength=size)
    counts = np.zeros(size, dtype=np.int64)
    np.add.at(counts, ids, 1)
    return counts


def _sum_of_squared_deviations(values: np.ndarray, valid: np.ndarray | None, ids: np.ndarray, mean: np.ndarray,
                                size: int) -> np.ndarray:
    """Per group, the sum of ``(value - mean[group]) ** 2`` over its valid values: the second
    of the variance's two passes.

    It runs over :data:`PASS_ROWS` rows at a time through one small buffer: a deviation
    buffer as long as the batch would be new memory each time (a fault per page on first
    touch, which costs more than the arithmetic), and this one stays in cache. The sums are
    added in row order, as in one pass over the whole batch.
    """
    m2 = np.zeros(size)
    buffer = np.empty(min(len(ids), PASS_ROWS))
    for start in range(0, len(ids), PASS_ROWS):
        part = ids[start:start + PASS_ROWS]
        deviation = buffer[:len(part)]
        np.take(mean, part, out=deviation, mode="clip")  # (ids are in range: no check needed)
        np.subtract(values[start:start + PASS_ROWS], deviation, out=deviation)
        if valid is not None:
            deviation[~valid[start:start + PASS_ROWS]] = 0.0
        np.multiply(deviation, deviation, out=deviation)
        np.add.at(m2, part, deviation)
    return m2


def _plan(table: pa.Table, group_cols: Sequence[str], aggs: Sequence[Any]) -> tuple[str, list[tuple[str | None, str]]] | None:
    """The key column and ``(column, function)`` per aggregate, if all of it is computed here."""
    keys = [c for c in group_cols if c != HASH_COL]
    if len(keys) != 1 or len(set(group_cols)) != len(group_cols):
        return None
    wanted: list[tuple[str | None, str]] = []
    for agg in aggs:
        if len(agg) == 3 and agg[1] == "distinct" and agg[2] == _ONLY_VALID:
            agg = agg[:2]
        elif len(agg) != 2 or agg[1] not in _FUNCTIONS or agg[1] == "distinct":
            return None
        target, fn = agg
        column = None if (isinstance(target, (list, tuple)) and not target) else target
        if isinstance(column, (list, tuple)):
            if len(column) != 1:
                return None
            column = column[0]
        if (column is None) != (fn == "count_all"):
            return None
        if column is not None and (column not in table.column_names or
                                   not _supported(fn, table.schema.field(column).type)):
            return None
        wanted.append((column, fn))
    return keys[0], wanted


def group_aggregate(table: pa.Table, group_cols: Sequence[str], aggs: Sequence[Any]) -> pa.Table:
    """``table.group_by(group_cols, use_threads=False).aggregate(aggs)``, by key value when
    the key is dense (see the module docstring), else by Arrow.

    Args:
        table: The batch.
        group_cols: The key column, possibly with :data:`~dpa.input.records.HASH_COL` (the
            key's hash: any row's value is the group's).
        aggs: Arrow aggregations: ``([], "count_all")``, ``(column, function)`` or
            ``(column, function, options)``.

    Returns:
        The group columns, then one column per aggregation, named as Arrow names them.
    """
    plan = _plan(table, group_cols, aggs)
    dense = None if plan is None else dense_keys(table[plan[0]])
    if dense is not None:
        counts_only = all(fn in ("count_all", "count") for _, fn in plan[1])
        min_groups = 0 if counts_only or table.num_rows <= DENSE_SMALL_ROWS else DENSE_MIN_GROUPS
        if dense.size >= min_groups:
            out = _dense_aggregate(table, group_cols, plan[0], plan[1], dense, min_groups)
            if out is not None:
                return out
    return table.group_by(list(group_cols), use_threads=False).aggregate(list(aggs))


def _dense_aggregate(table: pa.Table, group_cols: Sequence[str], key: str, wanted: list[tuple[str | None, str]],
                     dense: DenseKeys, min_groups: int) -> pa.Table | None:
    """The group-by by key value; None if an integer mean could lose precision as float64,
    or the batch has fewer than ``min_groups`` groups."""
    ids, size = dense.ids, dense.size
    counts = _rows_per_id(ids, size)
    present = np.flatnonzero(counts)
    if len(present) < min_groups:
        return None
    columns: dict[str, _Column] = {}
    for column, _ in wanted:
        if column is None or column in columns:
            continue
        col = columns[column] = _Column(table[column], ids, size, counts)
        if pa.types.is_integer(col.type) and (column, "mean") in wanted and not col.exact_in_float64():
            return None
        if (column, "distinct") in wanted and size * col.value_range()[1] >= _PAIR_LIMIT:
            return None
    out: list[pa.Array] = []
    names: list[str] = []
    for group in group_cols:
        if group == key:
            out.append(dense.keys(present))
        else:  # the key's hash: every row of a group has the same one
            per_group = np.zeros(size, dtype=np.uint32)
            per_group[ids] = to_numpy(table[group])
            out.append(from_numpy(per_group[present], table.schema.field(group).type))
        names.append(group)
    for column, fn in wanted:
        out.append(_aggregate(None if column is None else columns[column], fn, counts, present, ids, size))
        names.append(fn if column is None else f"{column}_{fn}")
    return pa.table(out, names=names)
