"""Conversions between user records and the Arrow tables dpa moves around.

Internally every batch is a ``pyarrow.Table``. User records come in three kinds, and a
callable ``key``, a per-record ``map_fn`` or a user-defined reducer sees them in the kind
the user gave:

* ``"dict"``:   ``{"word": "a", "n": 1}`` -> one column per field;
* ``"tuple"``:  ``("a", 1)`` -> columns ``f0``, ``f1``, ...;
* ``"scalar"``: ``"a"`` -> one column ``value``.

Records are converted block by block, and each block's column types are inferred from
that block alone: nothing is ever cast to an earlier block's type (a cast would turn a
``1.5`` into ``1``). A column whose type changes between blocks is dealt with by the job
(see :mod:`dpa.engine.plan`): a *value* column is promoted the way
``pa.concat_tables(promote_options="permissive")`` does (int64 then double -> double,
exactly: :func:`unify` refuses casts that change a value), a *key* column must keep one
key class (:func:`dpa.keys.encoding.key_type_class`) and otherwise raises
:class:`~dpa.errors.SchemaError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from dpa._internal.arrays import join_chunks
from dpa.errors import SchemaError
from dpa.keys.encoding import int_key_out_of_range, python_key_class

#: Name of the internal column carrying each record's 32-bit key hash.
HASH_COL = "__dpa_h"
#: Name of the internal column of map-side combined batches: how many input records each
#: partial-state row stands for (queue lengths, forwarded and processed counts stay in records).
WEIGHT_COL = "__dpa_w"

SCALAR_COLUMN = "value"
_SCALAR_TYPES = (str, bytes, int, float, bool, type(None))
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
#: Integers up to this magnitude convert to float64 exactly.
FLOAT_EXACT_INT = 2**53


class IntegerRangeError(SchemaError):
    """A record field holds a Python int that no Arrow integer column can hold (beyond int64).

    Attributes:
        column: The column (field) holding it.
        value: The int.
        index: The record's position in the input (or in its block when unknown).
        record: The record.
    """

    def __init__(self, message: str, *, column: str, value: int, index: int, record: Any) -> None:
        super().__init__(message)
        self.column = column
        self.value = value
        self.index = index
        self.record = record

    def __reduce__(self):
        return (_rebuild_range_error, (str(self), self.column, self.value, self.index, self.record))

    def where(self, kind: str) -> str:
        """Where the int is, e.g. ``"in field 'k' of record 7 ({'k': ...})"``."""
        return f"in {field_name(kind, self.column)} of record {self.index} ({_short(self.record)})"


def _rebuild_range_error(message: str, column: str, value: int, index: int, record: Any) -> IntegerRangeError:
    return IntegerRangeError(message, column=column, value=value, index=index, record=record)


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def field_name(kind: str, column: str) -> str:
    """How messages name a column: ``field 'k'``, ``tuple field 1 (column 'f1')`` or (scalar
    records) ``the value``."""
    if kind == "tuple" and column.startswith("f") and column[1:].isdigit():
        return f"tuple field {column[1:]} (column {column!r})"
    if kind == "scalar" and column == SCALAR_COLUMN:
        return "the value"
    return f"field {column!r}"


def record_kind_of(record: Any) -> str:
    """Returns ``"dict"``, ``"tuple"`` or ``"scalar"`` for one user record."""
    if isinstance(record, dict):
        return "dict"
    if isinstance(record, tuple):
        return "tuple"
    return "scalar"


def tuple_columns(width: int) -> list[str]:
    """Column names used for tuple records of ``width`` fields."""
    return [f"f{i}" for i in range(width)]


def _columns(records: Sequence[Any], kind: str, schema: pa.Schema | None) -> tuple[list[str], list[list[Any]]]:
    """The column names and the per-column value lists of ``records``."""
    if kind == "dict":
        bad = next((r for r in records if not isinstance(r, dict)), None)
        if bad is not None:
            raise SchemaError(f"expected dict records (like the first one), got {type(bad).__name__}: {_short(bad)}")
        if schema is not None:
            names = list(schema.names)
        else:  # every field of these records, in order of appearance
            names = list(dict.fromkeys(name for r in records for name in r))
        return names, [[r.get(name) for r in records] for name in names]
    if kind == "tuple":
        width = len(records[0]) if records else (len(schema) if schema is not None else 0)
        if schema is not None and records and len(schema) != width:
            raise SchemaError(f"expected tuples of {len(schema)} fields (like the first records), got {_short(records[0])}")
        bad = next((r for r in records if not isinstance(r, tuple) or len(r) != width), None)
        if bad is not None:
            raise SchemaError(f"expected tuples of {width} fields (like the first record), got {_short(bad)}")
        cols = [list(c) for c in zip(*records)] if records else [[] for _ in range(width)]
        return tuple_columns(width), cols
    return [SCALAR_COLUMN], [list(records)]


def records_to_table(records: Sequence[Any], kind: str, schema: pa.Schema | None = None, *,
                     key_cols: Sequence[str] = (), first_index: int = 0) -> pa.Table:
    """Converts a list of user records of one ``kind`` into an Arrow table.

    Each column's type is inferred from these records alone. ``schema`` (an earlier
    block's) only fixes the columns: for dict records its field names (a field a record
    lacks is null, a field the schema lacks is dropped), for tuples the width. It never
    casts, so a column may come out with another type than in ``schema``.

    Args:
        records: The records, all of ``kind``.
        kind: ``"dict"``, ``"tuple"`` or ``"scalar"``.
        schema: The columns to produce (default: those of the records).
        key_cols: Columns that hold keys. An int beyond int64 in one raises
            :class:`~dpa.errors.KeyEncodingError`, and ints mixed with floats raise
            :class:`SchemaError` (Arrow would make them float keys: ``1`` would become the
            different key ``1.0``).
        first_index: Position of ``records[0]`` in the input, for messages.

    Raises:
        SchemaError: the records are not of one consistent shape and Arrow-typable
            (:class:`IntegerRangeError` for an int beyond int64 in a value column).
        KeyEncodingError: an int beyond int64 in a key column.
    """
    names, columns = _columns(records, kind, schema)
    arrays = [_to_array(values, name, records, kind, name in key_cols, first_index) for name, values in zip(names, columns)]
    return pa.Table.from_arrays(arrays, names=names)


def _to_array(values: list[Any], name: str, records: Sequence[Any], kind: str, is_key: bool, first_index: int) -> pa.Array:
    """One column of records as an Arrow array, with errors that name the field and record."""
    try:
        arr = pa.array(values)
    except OverflowError:
        bad = next((i for i, v in enumerate(values) if isinstance(v, int) and not _INT64_MIN <= v <= _INT64_MAX), None)
        if bad is None:
            raise SchemaError(f"could not convert {field_name(kind, name)} of {kind} records {first_index}-"
                              f"{first_index + len(records) - 1} to Arrow: a number is too large. "
                              f"First values: {_short(values[:3])}") from None
        exc = IntegerRangeError(
            f"{field_name(kind, name)} of record {first_index + bad} ({_short(records[bad])}) holds the int "
            f"{_short(values[bad], 60)}, outside the int64 range [{_INT64_MIN}, {_INT64_MAX}]; Arrow (like Spark) has no "
            "wider integer type: convert the field to float, decimal.Decimal or str",
            column=name, value=values[bad], index=first_index + bad, record=records[bad])
        if is_key:
            raise int_key_out_of_range(values[bad], exc.where(kind)) from None
        raise exc from None
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError) as exc:
        raise SchemaError(
            f"could not convert {field_name(kind, name)} of {kind} records {first_index}-"
            f"{first_index + len(records) - 1} to Arrow ({exc}); every record needs the same fields with one "
            f"consistent type per field (a block of records is one Arrow table). First values: {_short(values[:3])}"
        ) from exc
    if is_key and pa.types.is_floating(arr.type):
        check_float_keys(values, name, records, kind, first_index)
    return arr


def key_classes_of(values: Sequence[Any]) -> dict[str, int]:
    """The key classes (:func:`dpa.keys.encoding.python_key_class`) among ``values``, each with the
    index of its first value; ``"null"`` (None) is left out."""
    types = set(map(type, values))
    if len(types) == 1:
        (t,) = types
        cls = python_key_class(values[0]) if values else "null"
        return {} if cls == "null" else {cls: 0}
    first: dict[type, int] = {}
    for i, v in enumerate(values):
        if type(v) not in first:
            first[type(v)] = i
            if len(first) == len(types):
                break
    out: dict[str, int] = {}
    for i in sorted(first.values()):
        cls = python_key_class(values[i])
        if cls != "null":
            out.setdefault(cls, i)
    return out


def check_float_keys(values: Sequence[Any], name: str, records: Sequence[Any], kind: str, first_index: int = 0) -> None:
    """Raises :class:`SchemaError` if the values of a float key column include ints.

    Arrow stores ``[1, 1.5]`` as floats, which would silently turn the int key ``1`` into
    the different key ``1.0``.
    """
    classes = key_classes_of(values)
    if "int" not in classes or "float" not in classes:
        return
    i, j = classes["int"], classes["float"]
    subject = "the scalar records (the keys)" if kind == "scalar" else f"key {field_name(kind, name)}"
    raise SchemaError(
        f"{subject} mix{'' if kind == 'scalar' else 'es'} int and float keys: {values[i]!r} in record {first_index + i} "
        f"({_short(records[i])}) and {values[j]!r} in record {first_index + j} ({_short(records[j])}); dpa treats "
        "1 and 1.0 as different keys (see dpa.keys.encoding) and a key column holds one type: give the keys one type, "
        "e.g. float(k) for all of them"
    )


def table_to_records(table: pa.Table, kind: str) -> list[Any]:
    """Converts an Arrow table back into user records of ``kind`` (internal columns dropped)."""
    if HASH_COL in table.column_names:
        table = table.drop_columns([HASH_COL])
    if kind == "dict":
        return table.to_pylist()
    if kind == "tuple":
        return list(zip(*(c.to_pylist() for c in table.columns))) if table.num_columns else [()] * table.num_rows
    return table[SCALAR_COLUMN].to_pylist()


def unify(tables: Sequence[pa.Table], *, float_rounding: bool = False) -> pa.Table:
    """Concatenates tables whose column types may differ, promoting them exactly.

    Types are promoted as ``pa.concat_tables(promote_options="permissive")`` does (null ->
    any type, narrower -> wider integer, int -> float, ``list<int64>`` ->
    ``list<double>``), with Arrow's *safe* casts: a value that would change (an int beyond
    2**53 becoming a float64) raises instead.

    Args:
        tables: The tables (same column names).
        float_rounding: Let integers become the nearest float64 where a column is promoted
            from an integer to a floating point type (for sums, whose float result is
            rounded anyway).

    Raises:
        SchemaError: The types cannot be combined, or a value would change; the message
            names the column and the types.
    """
    if len(tables) == 1:
        return tables[0]
    try:
        return pa.concat_tables(list(tables), promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        error = exc
    if float_rounding:
        try:
            return _concat_rounding(tables)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            error = exc
    raise SchemaError(_unify_message(tables, error)) from error


def _concat_rounding(tables: Sequence[pa.Table]) -> pa.Table:
    schema = pa.unify_schemas([t.schema for t in tables], promote_options="permissive")
    out = []
    for table in tables:
        columns = []
        for name in schema.names:
            want = schema.field(name).type
            if name not in table.column_names:
                columns.append(pa.nulls(table.num_rows, want))
                continue
            col = table[name]
            if col.type != want:
                lossy = pa.types.is_integer(col.type) and pa.types.is_floating(want)
                col = pc.cast(col, want, safe=not lossy)
            columns.append(col)
        out.append(pa.Table.from_arrays(columns, schema=schema))
    return pa.concat_tables(out)


def _unify_message(tables: Sequence[pa.Table], exc: Exception) -> str:
    differing = []
    for name in dict.fromkeys(n for t in tables for n in t.column_names):
        types = list(dict.fromkeys(str(t.schema.field(name).type) for t in tables if name in t.column_names))
        if len(types) > 1:
            differing.append(f"{name!r} ({' / '.join(types)})")
    cols = ", ".join(differing) or "?"
    return (
        f"cannot combine blocks whose column types differ: {cols}: {exc}. dpa promotes a column only "
        "where no value changes (int -> float for ints up to 2**53, narrower -> wider); give the column "
        "one type in every record or table, e.g. cast it to float64 (or decimal) before the job"
    )


def compact(table: pa.Table) -> pa.Table:
    """Copies a (sliced) table into compact buffers of its own.

    Pickling a ``slice`` of a table serialises the whole parent buffers; tables that
    cross actor boundaries must be compacted first.
    """
    return pa.Table.from_arrays([join_chunks(col.chunks, col.type) for col in table.columns],
                                schema=table.schema)
