"""Conversions between user records and the Arrow tables dpa moves around.

Internally every batch is a ``pyarrow.Table``. User records come in three kinds, and a
callable ``key``, a per-record ``map_fn`` or a user-defined reducer sees them in the kind
the user gave:

* ``"dict"``:   ``{"word": "a", "n": 1}`` -> one column per field;
* ``"tuple"``:  ``("a", 1)`` -> columns ``f0``, ``f1``, ...;
* ``"scalar"``: ``"a"`` -> one column ``value``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from dpa.errors import SchemaError
from dpa.reducers import HASH_COL

SCALAR_COLUMN = "value"
_SCALAR_TYPES = (str, bytes, int, float, bool, type(None))


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


def records_to_table(records: Sequence[Any], kind: str, schema: pa.Schema | None = None) -> pa.Table:
    """Converts a list of user records of one ``kind`` into an Arrow table.

    Raises:
        SchemaError: the records are not of one consistent shape and Arrow-typable.
    """
    try:
        if kind == "dict":
            bad = next((r for r in records if not isinstance(r, dict)), None)
            if bad is not None:
                raise SchemaError(f"expected dict records (like the first one), got {type(bad).__name__}: {bad!r}")
            return pa.Table.from_pylist(list(records), schema=schema)
        if kind == "tuple":
            width = len(records[0]) if records else (len(schema) if schema is not None else 0)
            bad = next((r for r in records if not isinstance(r, tuple) or len(r) != width), None)
            if bad is not None:
                raise SchemaError(f"expected tuples of {width} fields (like the first record), got {bad!r}")
            cols = list(zip(*records)) if records else [[] for _ in range(width)]
            names = tuple_columns(width)
            if schema is not None:
                return pa.table([pa.array(c, type=schema.field(n).type) for c, n in zip(cols, names)], names=names)
            return pa.table([pa.array(c) for c in cols], names=names)
        if schema is not None:
            return pa.table({SCALAR_COLUMN: pa.array(list(records), type=schema.field(SCALAR_COLUMN).type)})
        return pa.table({SCALAR_COLUMN: pa.array(list(records))})
    except SchemaError:
        raise
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
        sample = list(records[:3])
        raise SchemaError(
            f"could not convert {kind} records to Arrow ({exc}); every record needs the same fields with "
            f"one consistent type per field. First records: {sample!r}"
        ) from exc


def table_to_records(table: pa.Table, kind: str) -> list[Any]:
    """Converts an Arrow table back into user records of ``kind`` (internal columns dropped)."""
    if HASH_COL in table.column_names:
        table = table.drop_columns([HASH_COL])
    if kind == "dict":
        return table.to_pylist()
    if kind == "tuple":
        return list(zip(*(c.to_pylist() for c in table.columns))) if table.num_columns else [()] * table.num_rows
    return table[SCALAR_COLUMN].to_pylist()


def unify(tables: Sequence[pa.Table]) -> pa.Table:
    """Concatenates tables whose schemas differ only by null-typed or widened columns."""
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(list(tables), promote_options="permissive")


def compact(table: pa.Table) -> pa.Table:
    """Copies a (sliced) table into compact buffers of its own.

    Pickling a ``slice`` of a table serialises the whole parent buffers; tables that
    cross actor boundaries must be compacted first.
    """
    return pa.Table.from_arrays([pa.concat_arrays(col.chunks) if col.num_chunks else pa.array([], col.type) for col in table.columns],
                                schema=table.schema)
