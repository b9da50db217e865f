"""Types that change between blocks: value columns promote exactly, key columns keep one class.

Blocks are typed one by one and never cast to the first block's types. :class:`BlockTypes`
follows the types a job has seen: a value column that changes type is promoted exactly
(int64 then double -> double), a key column that changes key class raises
:class:`~dpa.errors.SchemaError` (dpa treats 1, 1.0 and True as different keys). It runs on
the driver for sources read there (:func:`checked_blocks`, whose messages give the block
and its records) and on the mappers (:meth:`dpa.engine.plan.JobPlan.prepare`). Keys returned by a
key function are checked here too (:func:`add_key_columns`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from dpa.aggregates.contract import ColumnarReducer, Reducer
from dpa.errors import DPAError, KeyEncodingError, SchemaError
from dpa.input.records import (
    FLOAT_EXACT_INT,
    HASH_COL,
    SCALAR_COLUMN,
    IntegerRangeError,
    check_float_keys,
    key_classes_of,
    tuple_columns,
)
from dpa.keys.encoding import encode_key, int_key_out_of_range, key_type_class

if TYPE_CHECKING:
    from dpa.input.sources import Source

logger = logging.getLogger(__name__)


class BlockPlan(Protocol):
    """What the type checks read of a job (:class:`dpa.engine.plan.JobPlan` is one)."""

    key_cols: list[str]
    key_types: list[pa.DataType | None] | None
    key_fn: Callable[[Any], Any] | None
    keep_cols: list[str] | None
    aggregate: Reducer


def is_record_iterable(produced: Any) -> bool:
    """Whether ``map_fn``'s result is an iterable of records (not a str, bytes or mapping)."""
    if isinstance(produced, (str, bytes, bytearray, memoryview, Mapping)):
        return False
    return isinstance(produced, Iterable)


def bad_map_output(produced: Any, record: Any) -> str:
    name = type(produced).__name__
    why = ("it would be iterated character by character" if isinstance(produced, str)
           else "it would be iterated byte by byte" if isinstance(produced, (bytes, bytearray, memoryview))
           else "it would be iterated key by key" if isinstance(produced, Mapping)
           else "it is not iterable")
    return (f"map_fn returned {_short(produced)} (type {name}) for record {_short(record)}: {why}; map_fn must return "
            "an iterable of records (e.g. a list) or None; wrap a single record as [record]")


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _example(column: pa.ChunkedArray | pa.Array) -> Any:
    """The first non-null value of a column (None if there is none)."""
    valid = pc.drop_null(column)
    return valid[0].as_py() if len(valid) else None


class BlockTypes:
    """Follows the column types of a job's blocks and rejects changes dpa cannot handle exactly.

    Blocks are typed one by one (:mod:`dpa.input.records`), so a column may change type between
    blocks. Rules:

    * a key column keeps its key class (:func:`dpa.keys.encoding.key_type_class`): int32 then
      int64 is fine, int then float is a :class:`SchemaError`, since ``1`` and ``1.0`` are
      different keys;
    * a value column may change to a type it promotes to exactly
      (``pa.unify_schemas(promote_options="permissive")``: null -> any, int -> wider int or
      float, float32 -> float64, ``list<int64>`` -> ``list<double>``); the reducer is
      re-validated against the promoted type (a ``Sum`` of a column that turns to strings
      fails here). Any other change is a :class:`SchemaError`;
    * for reducers that keep input values (all but ``Sum`` and ``Mean``), a column with
      both ints and floats must have every int exactly representable as float64
      (``|x| <= 2**53``), else :class:`SchemaError`: promoting it would change values.

    Args:
        plan: The job.
        values: Check value columns too (else only keys).
    """

    def __init__(self, plan: BlockPlan, values: bool = True) -> None:
        self.plan = plan
        self.key_cols = list(plan.key_cols)
        self.key_types: dict[str, pa.DataType | None] = dict(zip(self.key_cols, plan.key_types or [None] * len(self.key_cols)))
        self.values = values
        self.value_types: dict[str, pa.DataType] = {}
        aggregate = plan.aggregate
        self.exact = not (isinstance(aggregate, ColumnarReducer) and aggregate.float_rounding)
        self.int_peak: dict[str, tuple[int, str]] = {}  # column -> (max |int| seen, where)
        self.float_at: dict[str, str] = {}  # column -> where floats were first seen
        self._last: list[pa.DataType] | None = None

    def check(self, table: pa.Table, where: Callable[[], str]) -> None:
        """Checks one block.

        Args:
            table: The block (key columns and the columns the reducer reads).
            where: Describes the block for messages, e.g. ``"block 3 (records 12-15)"``.

        Raises:
            SchemaError: what changed where, and how to fix it.
        """
        types = table.schema.types
        same = types == self._last
        self._last = types
        if same and not (self.values and self.exact):
            return
        if not same:
            self._check_keys(table, where)
        if not self.values:
            return
        value_cols = [c for c in table.column_names if c not in self.key_cols and c != HASH_COL]
        changed = False
        for name in value_cols:
            dtype = table.schema.field(name).type
            prev = self.value_types.get(name)
            if prev is None:
                self.value_types[name] = dtype
            elif prev != dtype:
                self.value_types[name] = self._promote(name, prev, dtype, table, where)
                changed = changed or self.value_types[name] != prev
            if self.exact:
                self._track_exactness(name, table[name], where)
        if changed:
            schema = pa.schema([(n, t) for n, t in self.value_types.items()])
            try:
                self.plan.aggregate.validate(schema)
            except SchemaError as exc:
                raise SchemaError(f"{exc} (after the column types changed in {where()})") from exc

    def _check_keys(self, table: pa.Table, where: Callable[[], str]) -> None:
        for name in self.key_cols:
            if name not in table.column_names:
                continue
            dtype = table.schema.field(name).type
            if pa.types.is_null(dtype):
                continue
            expected = self.key_types.get(name)
            if expected is None or pa.types.is_null(expected):
                self.key_types[name] = dtype
            elif expected != dtype and key_type_class(expected) != key_type_class(dtype):
                raise SchemaError(
                    f"key column {name!r} changes type: {expected} keys before, {dtype} keys in {where()} "
                    f"(e.g. {_short(_example(table[name]), 60)}). dpa treats 1, 1.0 and True as different keys "
                    "(see dpa.keys.encoding), so a key column keeps one type for the whole job: give all keys one type, "
                    "e.g. convert them with float(), int() or str() (or cast the column) before the job"
                )

    def _promote(self, name: str, prev: pa.DataType, dtype: pa.DataType, table: pa.Table,
                 where: Callable[[], str]) -> pa.DataType:
        try:
            return pa.unify_schemas([pa.schema([(name, prev)]), pa.schema([(name, dtype)])],
                                    promote_options="permissive").field(name).type
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise SchemaError(
                f"column {name!r} changes type from {prev} to {dtype} in {where()} (e.g. "
                f"{_short(_example(table[name]), 60)}), and the two do not combine ({exc}). dpa promotes a value "
                "column only where no value changes (null -> any type, int -> wider int or float64, float32 -> "
                "float64); give the column one type in every record or table, e.g. cast it to float64 or str "
                "before the job"
            ) from exc

    def _track_exactness(self, name: str, column: pa.ChunkedArray, where: Callable[[], str]) -> None:
        dtype = column.type
        if pa.types.is_integer(dtype) and len(column) > column.null_count:
            low, high = pc.min_max(column).as_py().values()
            peak = max(abs(low), abs(high))
            if peak > self.int_peak.get(name, (0, ""))[0]:
                self.int_peak[name] = (peak, where() if peak > FLOAT_EXACT_INT else "")
        elif pa.types.is_floating(dtype) and name not in self.float_at:
            self.float_at[name] = where()
        peak, at = self.int_peak.get(name, (0, ""))
        if peak > FLOAT_EXACT_INT and name in self.float_at:
            raise SchemaError(
                f"column {name!r} holds both floats (first in {self.float_at[name]}) and integers beyond 2**53 "
                f"(up to {peak}, in {at}); float64 cannot hold such integers exactly, so promoting the column "
                f"would change values {self.plan.aggregate!r} keeps. Cast the column to float64 yourself to accept "
                "the rounding, or to decimal, or give it one type"
            )


def key_columns_for(keys: list[Any], key_cols: list[str], records: list[Any]) -> list[pa.Array]:
    """The key columns for the keys a key function returned (a tuple -> several columns).

    Args:
        keys: One key per record.
        key_cols: The key column names (several when the keys are tuples).
        records: The records, for messages.

    Returns:
        One Arrow array per key column.

    Raises:
        KeyEncodingError: a key of a type dpa cannot encode (a list, dict, set, ...), an
            element of a tuple key that is a tuple itself, or an int beyond int64.
        SchemaError: tuple keys of the wrong width, or keys of different types at one
            position (an int and a float, say: Arrow would make both floats).
    """
    for key, record in zip(keys, records):
        try:
            encode_key(key)
        except KeyEncodingError as exc:
            raise KeyEncodingError(f"key function returned a {type(key).__name__} for record {_short(record)}: {exc}") from exc
    if len(key_cols) == 1:
        columns = [keys]
    else:
        for key, record in zip(keys, records):
            if not isinstance(key, tuple) or len(key) != len(key_cols):
                raise SchemaError(
                    f"key function returned {_short(key)} for record {_short(record)}; expected a tuple of "
                    f"{len(key_cols)} values like the first record's key"
                )
        columns = [list(c) for c in zip(*keys)] if keys else [[] for _ in key_cols]
    arrays = []
    for pos, values in enumerate(columns):
        what = "key function's key" if len(key_cols) == 1 else f"element {pos} of the key function's tuple keys"
        classes = key_classes_of(values)
        if len(classes) > 1:
            (a, i), (b, j) = list(classes.items())[:2]
            raise SchemaError(
                f"the {what} has different types: {a} {_short(values[i], 60)} for record {_short(records[i])} and "
                f"{b} {_short(values[j], 60)} for record {_short(records[j])}; a key column holds one type and dpa "
                "treats 1, 1.0 and True as different keys: return one type, e.g. str(k) or float(k)"
            )
        if "tuple" in classes:
            i = classes["tuple"]
            raise KeyEncodingError(
                f"the {what} is a tuple, {_short(values[i], 60)}, for record {_short(records[i])}; keys of a job "
                "are flat: return a flat tuple of str, bytes, int, float, bool or None (e.g. (a, b, c), not (a, (b, c)))"
            )
        try:
            arrays.append(pa.array(values))
        except OverflowError:
            i = next(i for i, v in enumerate(values) if isinstance(v, int) and not -(2**63) <= v < 2**63)
            raise int_key_out_of_range(values[i], f"returned by the key function for record {_short(records[i])}") from None
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise SchemaError(
                f"the {what} could not be stored as an Arrow column ({exc}); return one type per key position. "
                f"First keys: {_short(values[:3])}"
            ) from exc
    return arrays


def add_key_columns(table: pa.Table, keys: list[Any], key_cols: list[str], records: list[Any]) -> pa.Table:
    """Appends key values returned by a key function as columns (tuples -> several).

    Raises:
        KeyEncodingError, SchemaError: see :func:`key_columns_for`.
    """
    for name, arr in zip(key_cols, key_columns_for(keys, key_cols, records)):
        table = table.append_column(name, arr)
    return table


BAD_KEY_TYPES = (pa.types.is_list, pa.types.is_large_list, pa.types.is_struct, pa.types.is_map,
                  pa.types.is_fixed_size_list, pa.types.is_dictionary)


def checked_blocks(blocks: Iterator[pa.Table], plan: BlockPlan) -> Iterator[pa.Table]:
    """``blocks``, each checked by a :class:`BlockTypes` (key columns keep their class, value
    columns promote exactly), with messages naming the block and its records."""
    tracker = BlockTypes(plan)
    if plan.key_fn is not None:  # the key columns do not exist yet
        tracker.key_cols = []
    wanted = None if plan.keep_cols is None else set(tracker.key_cols) | set(plan.keep_cols)
    offset = 0
    for i, block in enumerate(blocks):
        n = block.num_rows
        if n:
            table = block if wanted is None else block.select([c for c in block.column_names if c in wanted])
            tracker.check(table, functools.partial(_block_name, i, offset, n))
        offset += n
        yield block


def _block_name(index: int, offset: int, rows: int) -> str:
    return f"block {index} of the input (records {offset}-{offset + rows - 1})"


def _column_values(records: list[Any], kind: str, name: str) -> list[Any]:
    if kind == "dict":
        return [r.get(name) for r in records]
    if kind == "tuple":
        pos = int(name[1:])
        return [r[pos] for r in records]
    return list(records)


def check_head_keys(source: Source, key_cols: list[str]) -> None:
    """Ints mixed with floats in a key column of the first block of records (Arrow made them
    all floats) raise :class:`SchemaError`."""
    if source.head_records is None or source.schema is None:
        return
    for name in key_cols:
        if name in source.schema.names and pa.types.is_floating(source.schema.field(name).type):
            values = _column_values(source.head_records, source.kind, name)
            check_float_keys(values, name, source.head_records, source.kind)


def classify_range_error(exc: IntegerRangeError, kind: str, key: Any) -> DPAError:
    """The error for an int beyond int64 in records of ``kind``: a :class:`KeyEncodingError`
    if its field is a key column named by ``key``, else ``exc`` itself (a :class:`SchemaError`)."""
    names: list[Any] = []
    if key is None and kind == "scalar":
        names = [SCALAR_COLUMN]
    elif isinstance(key, int) and not isinstance(key, bool) and key >= 0:
        names = [tuple_columns(key + 1)[key]]
    elif isinstance(key, str):
        names = [key]
    elif isinstance(key, (list, tuple)):
        names = list(key)
    if exc.column in names:
        return int_key_out_of_range(exc.value, exc.where(kind))
    return exc
