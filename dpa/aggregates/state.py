"""Per-reducer keyed state: where records are folded into accumulators.

Two interchangeable stores share one interface (``add``, ``add_partial``, ``partition``,
``finalize``):

* :class:`ColumnarState` for the built-in reducers: Arrow group-by on whole batches, with
  partial-state tables compacted as they accumulate;
* :class:`DictState` for user-defined reducers: a dict from key to accumulator, driven
  through the scalar combine contract.

``partition(n)`` splits the state by ``hash % n`` for the partitioned final state merge:
partition ``j`` is shipped to reducer ``j``, which merges what it receives with
``add_partial`` and finalizes.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import numpy as np
import pyarrow as pa

from dpa._internal.arrays import from_numpy, to_numpy
from dpa.aggregates.contract import ColumnarReducer, Reducer
from dpa.errors import SchemaError
from dpa.input.records import HASH_COL, WEIGHT_COL, table_to_records, unify
from dpa.keys.encoding import canonical_key, key_type_class

logger = logging.getLogger(__name__)

#: Compact partial tables once this many rows have accumulated since the last compaction.
COMPACT_MIN_ROWS = 200_000


def split_partial(partial: Any, destinations: Any, me: int, n: int) -> tuple[Any, list[tuple[int, Any, int]]]:
    """Splits a partial state (either store's: a table with the hash column, or
    ``(key, hash, acc)`` triples) by where its keys belong now.

    Args:
        partial: What a store's ``extract`` or ``partition`` produced.
        destinations: Called with the keys' hashes; returns where each key belongs
            (``me`` = keep it) or None (keep everything).
        me: This reducer's id.
        n: Number of reducers.

    Returns:
        ``(kept, [(reducer, part, keys), ...])``: the part to keep (None if none) and the
        parts for the other reducers that get keys.
    """
    if partial is None or not len(partial):
        return None, []
    dest = destinations(partial_hashes(partial))
    if dest is None:
        return partial, []
    dest = np.asarray(dest, dtype=np.int64)
    if (dest == me).all():
        return partial, []
    if isinstance(partial, pa.Table):
        parts: list[Any] = split_by(partial, dest, n)
    else:
        parts = [[] for _ in range(n)]
        for triple, d in zip(partial, dest.tolist()):
            parts[d].append(triple)
    kept = parts[me] if len(parts[me]) else None
    return kept, [(r, p, len(p)) for r, p in enumerate(parts) if r != me and len(p)]


def partial_hashes(partial: Any) -> np.ndarray:
    """The key hashes of a partial state (either store's, as :func:`split_partial` takes)."""
    if isinstance(partial, pa.Table):
        return to_numpy(partial[HASH_COL])
    return np.fromiter((h for _, h, _ in partial), dtype=np.uint32, count=len(partial))


def split_by(table: pa.Table, parts: np.ndarray, n: int) -> list[pa.Table]:
    """Splits ``table`` into ``n`` tables by the integer label per row in ``parts``.

    Each part is gathered with its own ``take`` so that it owns compact buffers: a
    ``slice`` would keep (and pickle, when shipped to another actor) the whole parent.
    Empty parts are one shared empty table (no ``take``): with a thousand labels most
    parts of a batch are empty.
    """
    if table.num_rows == 0:
        return [table] * n
    parts = np.asarray(parts)
    if n <= 8:  # a pass per part beats a sort
        rows = {i: np.flatnonzero(parts == i) for i in range(n)}
    else:  # (numpy sorts 16-bit labels by radix: 3-5x faster than 64-bit ones)
        order = np.argsort(parts.astype(np.int16 if n <= 1 << 15 else np.int64), kind="stable")
        sizes = np.bincount(parts, minlength=n)
        bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        rows = {i: order[bounds[i]:bounds[i + 1]] for i in np.flatnonzero(sizes).tolist()}
    empty = table.slice(0, 0)
    return [table.take(from_numpy(rows[i])) if i in rows and len(rows[i]) else empty for i in range(n)]


class KeyTypeGuard:
    """Checks that the key columns of every batch a state receives keep one key class.

    Mappers check this against the plan already; this is the last line of defence for
    inputs whose key types the plan could not know (e.g. a key column that is all null in
    the sample), where two mappers could see different types. Without it, Arrow would
    promote an int key column to float on concatenation and merge keys dpa keeps apart.
    """

    def __init__(self, key_cols: list[str]) -> None:
        self.key_cols = list(key_cols)
        self.types: list[pa.DataType | None] = [None] * len(key_cols)

    def check(self, table: pa.Table) -> None:
        """Raises :class:`SchemaError` if a key column's class differs from the earlier batches'."""
        for i, name in enumerate(self.key_cols):
            if name not in table.column_names:
                continue
            dtype = table.schema.field(name).type
            if pa.types.is_null(dtype):
                continue
            seen = self.types[i]
            if seen is None:
                self.types[i] = dtype
            elif seen != dtype and key_type_class(seen) != key_type_class(dtype):
                raise SchemaError(
                    f"key column {name!r} holds {dtype} keys in one batch and {seen} keys in another; dpa treats "
                    "1, 1.0 and True as different keys, so a key column must keep one type for the whole job: "
                    "give every key one type (e.g. convert them with str(), int() or float())"
                )


def merged_hashes(parts: list[np.ndarray]) -> int:
    """Key hashes found in more than one of ``parts`` (each a reducer's keys' hashes).

    Counted by hash, not by key value: keys that share a hash travel together (every
    policy routes by hash), so this is the number of merged keys except that colliding
    keys count once. A sort of the hashes: a few milliseconds for 200k keys, where a
    group-by over the key columns took 14.
    """
    if len(parts) < 2:
        return 0
    h = np.sort(np.concatenate([np.unique(p) for p in parts]))
    if len(h) < 2:
        return 0
    same = h[1:] == h[:-1]
    return int(same[0]) + int(np.count_nonzero(same[1:] & ~same[:-1]))


class ColumnarState:
    """Vectorised keyed state for :class:`~dpa.aggregates.contract.ColumnarReducer` built-ins."""

    def __init__(self, reducer: ColumnarReducer, key_cols: list[str]) -> None:
        self.reducer = reducer
        self.key_cols = list(key_cols)
        self.group_cols = self.key_cols + [HASH_COL]
        cols = reducer.input_columns() or []
        self.input_cols = self.group_cols + [c for c in cols if c not in self.group_cols]
        self._parts: list[pa.Table] = []
        self._rows_since_compact = 0
        self._compacted_rows = 0
        self._guard = KeyTypeGuard(self.key_cols)
        self._merging = False  # the final merge: partials are kept apart until counted

    def add(self, table: pa.Table) -> None:
        """Folds a batch of raw records (key columns, hash, input columns) in."""
        if table.num_rows:
            self._append(self.reducer.partial_from_batch(table.select(self.input_cols), self.group_cols))

    def add_combined(self, table: pa.Table) -> None:
        """Folds map-side combined partial states (group columns, state columns, weight) in."""
        if table.num_rows:
            self._append(table.select(self.group_cols + self.reducer.state_columns()))

    def add_partial(self, partial: pa.Table) -> None:
        """Merges partial states produced by another reducer's :meth:`partition`."""
        if partial is not None and partial.num_rows:
            self._append(partial)

    def _append(self, part: pa.Table) -> None:
        self._guard.check(part)
        self._parts.append(part)
        self._rows_since_compact += part.num_rows
        if not self._merging and self._rows_since_compact > max(COMPACT_MIN_ROWS, self._compacted_rows):
            self._compact()

    def begin_merge(self) -> None:
        """The final merge starts: the partitions that arrive (one per reducer, each with
        every key at most once) are kept apart until :meth:`end_merge` counts them."""
        self._merging = True

    def end_merge(self) -> int:
        """Ends the final merge; returns the keys that arrived from more than one reducer
        (their partial states were merged)."""
        if not self._merging:
            return 0
        self._merging = False
        parts = [p for p in self._parts if p.num_rows]
        return merged_hashes([to_numpy(p[HASH_COL]) for p in parts])

    def extract(self, destinations: Any, me: int, n: int) -> list[tuple[int, pa.Table]]:
        """Takes out the keys this reducer no longer holds (state migration).

        Args:
            destinations: Called with the keys' hashes; returns where each key belongs
                (``me`` = keep it) or None (keep everything).
            me: This reducer's id.
            n: Number of reducers.

        Returns:
            ``(reducer, partial states)`` per reducer that gets keys (for its :meth:`add_partial`).
        """
        table = self._compact()
        kept, parts = split_partial(table, destinations, me, n)
        if not parts:
            return []
        self._parts = [] if kept is None else [kept]
        self._compacted_rows, self._rows_since_compact = 0 if kept is None else kept.num_rows, 0
        return [(r, p) for r, p, _ in parts]

    def _compact(self) -> pa.Table | None:
        if not self._parts:
            return None
        if len(self._parts) > 1 or self._rows_since_compact:
            try:
                parts = unify(self._parts, float_rounding=self.reducer.float_rounding)
            except SchemaError as exc:
                raise SchemaError(f"{self.reducer!r}: the partial states of different input blocks do not combine: {exc}") from exc
            merged = self.reducer.merge_partials(parts, self.group_cols)
            self._parts = [merged]
            self._compacted_rows = merged.num_rows
            self._rows_since_compact = 0
        return self._parts[0]

    def hashes(self) -> np.ndarray:
        """The hashes of the keys held, unique (uint32)."""
        return np.unique(np.concatenate([to_numpy(p[HASH_COL]) for p in self._parts] or [np.empty(0, np.uint32)]))

    @property
    def num_keys(self) -> int:
        """Distinct keys held (compacts first)."""
        table = self._compact()
        return 0 if table is None else table.num_rows

    def export(self) -> pa.Table | None:
        """The state as one partial table (a checkpoint; the state is kept)."""
        return self._compact()

    def restore(self, exported: pa.Table | None) -> None:
        """Folds a table made by :meth:`export` in."""
        self.add_partial(exported)

    def fold(self, other: ColumnarState) -> None:
        """Merges another store of the same reducer into this one (``other`` is emptied)."""
        for part in other._parts:
            self._append(part)
        other._parts, other._rows_since_compact, other._compacted_rows = [], 0, 0

    def partition(self, n: int) -> list[pa.Table | None]:
        """Splits the state into ``n`` partial tables by ``hash % n`` and clears it (None
        for a part without keys: nothing is sent for it)."""
        table = self._compact()
        self._parts, self._rows_since_compact, self._compacted_rows = [], 0, 0
        if table is None:
            return [None] * n
        labels = (to_numpy(table[HASH_COL]) % n).astype(np.int64)
        return [p if p.num_rows else None for p in split_by(table, labels, n)]

    def finalize(self) -> pa.Table | None:
        """Returns the output table (key columns then the reducer's output), or None if empty."""
        table = self._compact()
        if table is None:
            return None
        return self.reducer.finalize_table(table, self.key_cols)

    def empty_result(self, input_schema: pa.Schema) -> pa.Table:
        """An empty output table with the right types for ``input_schema``."""
        empty = input_schema.empty_table()
        if HASH_COL not in empty.column_names:
            empty = empty.append_column(HASH_COL, pa.array([], pa.uint32()))
        states = self.reducer.state_columns()
        if WEIGHT_COL in empty.column_names:  # partial states (JobConfig.input_combined)
            partial = empty.select([*self.group_cols, *states])
        else:
            partial = self.reducer.partial_from_batch(empty.select(self.input_cols), self.group_cols)
        return self.reducer.finalize_table(partial, self.key_cols)


class DictState:
    """Keyed state for user-defined reducers, through the scalar combine contract."""

    def __init__(self, reducer: Reducer, key_cols: list[str], record_kind: str) -> None:
        self.reducer = reducer
        self.key_cols = list(key_cols)
        self.record_kind = record_kind
        self._accs: dict[Any, list[Any]] = {}  # key -> [hash, acc]
        self._key_schema: pa.Schema | None = None
        self._guard = KeyTypeGuard(self.key_cols)
        self.current_key: Any = None
        self._merged: set[Any] | None = None  # keys merged in the final merge (while it runs)

    def _keys(self, table: pa.Table) -> list[Any]:
        columns = []
        for c in self.key_cols:
            values = table[c].to_pylist()
            if pa.types.is_floating(table.schema.field(c).type):
                values = [canonical_key(v) for v in values]  # every NaN one object: one dict key
            columns.append(values)
        if len(columns) == 1:
            return columns[0]
        return list(zip(*columns))

    def add(self, table: pa.Table) -> None:
        """Folds a batch of raw records in, one ``add_batch`` per distinct key."""
        if not table.num_rows:
            return
        self._guard.check(table)
        self._widen_key_schema(pa.schema([table.schema.field(c) for c in self.key_cols]))
        keys = self._keys(table)
        hashes = table[HASH_COL].to_pylist()
        if self.reducer.column is not None:
            values = table[self.reducer.column].to_pylist()
        else:
            values = table_to_records(table, self.record_kind)
        groups: dict[Any, list[Any]] = {}
        first_hash: dict[Any, int] = {}
        for k, h, v in zip(keys, hashes, values):
            bucket = groups.get(k)
            if bucket is None:
                groups[k] = bucket = []
                first_hash[k] = h
            bucket.append(v)
        for k, vals in groups.items():
            self.current_key = k  # named in the error if the user's reducer raises
            entry = self._accs.get(k)
            if entry is None:
                entry = self._accs[k] = [first_hash[k], self.reducer.create()]
            entry[1] = self.reducer.add_batch(entry[1], vals)

    def add_partial(self, partial: list[tuple[Any, int, Any]] | None) -> None:
        """Merges ``(key, hash, acc)`` triples produced by another reducer's partition."""
        for k, h, acc in partial or ():
            k = canonical_key(k)  # (a NaN key unpickled from a peer is another object)
            mine = self._accs.get(k)
            if mine is None:
                self._accs[k] = [h, acc]
            else:
                self.current_key = k
                mine[1] = self.reducer.merge(mine[1], acc)
                if self._merged is not None:
                    self._merged.add(k)

    def begin_merge(self) -> None:
        """The final merge starts: keys merged from here on are counted."""
        self._merged = set()

    def end_merge(self) -> int:
        """Ends the final merge; returns the keys that arrived from more than one reducer."""
        merged, self._merged = self._merged or set(), None
        return len(merged)

    def extract(self, destinations: Any, me: int, n: int) -> list[tuple[int, list[tuple[Any, int, Any]]]]:
        """Takes out the keys this reducer no longer holds (see :meth:`ColumnarState.extract`)."""
        kept, parts = split_partial([(k, h, acc) for k, (h, acc) in self._accs.items()], destinations, me, n)
        for _, part, _ in parts:
            for k, _, _ in part:
                del self._accs[k]
        return [(r, p) for r, p, _ in parts]

    def set_key_schema(self, schema: pa.Schema) -> None:
        """Records the key columns' Arrow types (used when this store saw no raw records)."""
        if self._key_schema is None:
            self._key_schema = schema

    def _widen_key_schema(self, schema: pa.Schema) -> None:
        """Keeps the key types wide enough for every batch seen (int32 then int64 -> int64)."""
        if self._key_schema is None or self._key_schema == schema:
            self._key_schema = schema if self._key_schema is None else self._key_schema
            return
        try:
            self._key_schema = pa.unify_schemas([self._key_schema, schema], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise SchemaError(f"key columns change type between batches ({self._key_schema} vs {schema}): {exc}") from exc

    def hashes(self) -> np.ndarray:
        """The hashes of the keys held, unique (uint32)."""
        return np.unique(np.fromiter((h for h, _ in self._accs.values()), dtype=np.uint32, count=len(self._accs)))

    @property
    def num_keys(self) -> int:
        """Distinct keys held."""
        return len(self._accs)

    def export(self) -> tuple[list[tuple[Any, int, Any]], pa.Schema | None]:
        """The state as ``(triples, key schema)`` (a checkpoint; the state is kept). The
        accumulators are deep copies: a user's accumulator may be mutated in place later."""
        return copy.deepcopy([(k, h, acc) for k, (h, acc) in self._accs.items()]), self._key_schema

    def restore(self, exported: tuple[list[tuple[Any, int, Any]], pa.Schema | None] | None) -> None:
        """Folds what :meth:`export` made in."""
        if exported is None:
            return
        triples, schema = exported
        if schema is not None:
            self._widen_key_schema(schema)
        self.add_partial(triples)

    def fold(self, other: DictState) -> None:
        """Merges another store of the same reducer into this one (``other`` is emptied)."""
        if other._key_schema is not None:
            self._widen_key_schema(other._key_schema)
        self.add_partial(other.partition(1)[0])

    def partition(self, n: int) -> list[list[tuple[Any, int, Any]] | None]:
        """Splits the state into ``n`` lists of ``(key, hash, acc)`` by ``hash % n``."""
        parts: list[list[tuple[Any, int, Any]]] = [[] for _ in range(n)]
        for k, (h, acc) in self._accs.items():
            parts[h % n].append((k, h, acc))
        self._accs = {}
        return [p or None for p in parts]

    def finalize(self) -> pa.Table | None:
        """Returns the output table, or None if no key was seen."""
        if not self._accs:
            return None
        keys = list(self._accs)
        results = [self.reducer.finalize(acc) for _, acc in self._accs.values()]
        if len(self.key_cols) == 1:
            key_arrays = [keys]
        else:
            key_arrays = [list(col) for col in zip(*keys)]
        arrays = []
        for i, values in enumerate(key_arrays):
            dtype = self._key_schema.field(i).type if self._key_schema is not None else None
            if dtype is not None and pa.types.is_null(dtype):
                dtype = None  # keys first seen all null, then typed ones (merged from peers)
            arrays.append(pa.array(values, type=dtype))
        names = _output_names(self.reducer)
        outputs = [results] if len(names) == 1 and not hasattr(self.reducer, "members") else (
            [list(col) for col in zip(*results)])
        for name, values in zip(names, outputs):
            try:
                arrays.append(pa.array(values))
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise TypeError(
                    f"{self.reducer!r}.finalize() returned values Arrow cannot type consistently for {name!r} ({exc}); "
                    f"first results: {values[:3]!r}"
                ) from exc
        return pa.table(arrays, names=self.key_cols + names)

    def empty_result(self, input_schema: pa.Schema) -> pa.Table:
        """An empty output table (the output column is typed null: nothing to infer from)."""
        fields = [input_schema.field(c) for c in self.key_cols]
        return pa.schema(fields + [pa.field(n, pa.null()) for n in _output_names(self.reducer)]).empty_table()


def _output_names(reducer: Reducer) -> list[str]:
    """The output columns of a reducer: its name, or each member's for several aggregates."""
    members = getattr(reducer, "members", None)
    return [reducer.name] if members is None else [m.name for m in members]


def make_state(reducer: Reducer, key_cols: list[str], record_kind: str) -> Any:
    """Builds the state store that fits ``reducer`` (the bare aggregate: the plan's ``aggregate``, no cost wrapper).

    A reducer with its own store says so with ``new_state(key_cols)`` (e.g.
    :class:`~dpa.aggregates.group_apply.GroupApply`'s rows)."""
    if hasattr(reducer, "new_state"):
        return reducer.new_state(key_cols)
    if isinstance(reducer, ColumnarReducer):
        return ColumnarState(reducer, key_cols)
    return DictState(reducer, key_cols, record_kind)


def concat_results(tables: list[pa.Table | None], empty: pa.Table) -> pa.Table:
    """Concatenates the per-reducer outputs, or returns ``empty`` when there are none.

    Outputs are promoted like input blocks (:func:`dpa.input.records.unify`). One exception: an
    integer output column meeting a floating one may round to float64. Reducers only
    produce that for a value column that is integer in some blocks and floating in others:
    sums (which round anyway), or values already checked to be exact in float64 when the
    blocks were read (:func:`dpa.engine.planning.build_plan`).
    """
    parts = [t for t in tables if t is not None and t.num_rows]
    if not parts:
        return empty
    try:
        return unify(parts)
    except SchemaError:
        return unify(parts, float_rounding=True)
