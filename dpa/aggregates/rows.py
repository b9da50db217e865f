"""The row store of :class:`~dpa.aggregates.group_apply.GroupApply`: every row of a reducer's keys, in Arrow.

The store knows its reducer only by what it calls (``apply``, ``empty_output``,
``max_group_bytes``), so this module does not import the reducer's.

It has the interface of the other keyed stores (:mod:`dpa.aggregates.state`): ``add``,
``add_partial``, ``extract``, ``partition``, ``export``/``restore``, so state migration,
checkpoints and the final merge move rows as they move partial states. A "partial state"
here is a table of rows (key columns, hash, the input's other columns); merging is
concatenation. Instead of a result it packs its groups into :class:`GroupUnit` s for the
apply phase (:meth:`RowsState.units`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from dpa.aggregates.state import KeyTypeGuard, merged_hashes, split_by, split_partial
from dpa.errors import GroupTooLargeError, SchemaError
from dpa.input.records import HASH_COL, unify

logger = logging.getLogger(__name__)

_ROW = "__dpa_row"


@dataclass
class GroupUnit:
    """Rows of one or more whole groups, handed to ``fn`` as one piece of work.

    Attributes:
        table: The groups' rows, each group's rows contiguous (key columns and the input's
            other columns; no hash column).
        offsets: Row offsets of the groups in ``table`` (``len = groups + 1``).
    """

    table: pa.Table
    offsets: np.ndarray

    @property
    def rows(self) -> int:
        return self.table.num_rows

    @property
    def groups(self) -> int:
        return len(self.offsets) - 1


@dataclass
class UnitSize:
    """What the scheduler knows of a unit: its rows, groups and largest group's rows."""

    rows: int
    groups: int
    largest: int


class RowsState:
    """Rows of the keys a reducer holds, kept as Arrow tables until the apply phase."""

    def __init__(self, reducer: Any, key_cols: list[str]) -> None:
        self.reducer = reducer
        self.key_cols = list(key_cols)
        self.group_cols = self.key_cols + [HASH_COL]
        self._parts: list[pa.Table] = []
        self._guard = KeyTypeGuard(self.key_cols)
        self._merging = False

    def add(self, table: pa.Table) -> None:
        """Keeps a batch of rows."""
        if table.num_rows:
            self._guard.check(table)
            self._parts.append(table)

    def add_partial(self, partial: pa.Table | None) -> None:
        """Keeps rows another reducer handed over (state migration, the final merge)."""
        if partial is not None and partial.num_rows:
            self.add(partial)

    def begin_merge(self) -> None:
        """The final merge starts: the partitions that arrive are counted at :meth:`end_merge`."""
        self._merging = True
        self._compact()

    def end_merge(self) -> int:
        """Keys whose rows arrived from more than one reducer."""
        if not self._merging:
            return 0
        self._merging = False
        parts = [p for p in self._parts if p.num_rows]
        return merged_hashes([np.unique(p[HASH_COL].to_numpy()) for p in parts])

    def _compact(self) -> pa.Table | None:
        if not self._parts:
            return None
        if len(self._parts) > 1:
            try:
                self._parts = [unify(self._parts)]
            except SchemaError as exc:
                raise SchemaError(f"{self.reducer!r}: the rows of different input blocks do not combine: {exc}") from exc
        return self._parts[0]

    def extract(self, destinations: Any, me: int, n: int) -> list[tuple[int, pa.Table]]:
        """Takes out the rows of the keys this reducer no longer holds (state migration)."""
        kept, parts = split_partial(self._compact(), destinations, me, n)
        if not parts:
            return []
        self._parts = [] if kept is None else [kept]
        return [(r, p) for r, p, _ in parts]

    def hashes(self) -> np.ndarray:
        """The hashes of the keys held, unique (uint32)."""
        return np.unique(np.concatenate([p[HASH_COL].to_numpy() for p in self._parts] or [np.empty(0, np.uint32)]))

    @property
    def num_keys(self) -> int:
        table = self._compact()
        if table is None:
            return 0
        return table.select(self.group_cols).group_by(self.group_cols, use_threads=False).aggregate([]).num_rows

    def export(self) -> pa.Table | None:
        """Every row held, as one table (a checkpoint; the rows are kept)."""
        return self._compact()

    def restore(self, exported: pa.Table | None) -> None:
        self.add_partial(exported)

    def fold(self, other: RowsState) -> None:
        """Takes ``other``'s rows (``other`` is emptied)."""
        for part in other._parts:
            self.add(part)
        other._parts = []

    def partition(self, n: int) -> list[pa.Table | None]:
        """Splits the rows into ``n`` tables by ``hash % n`` and clears the store."""
        table = self._compact()
        self._parts = []
        if table is None:
            return [None] * n
        parts = split_by(table, (table[HASH_COL].to_numpy() % n).astype(np.int64), n)
        return [p if p.num_rows else None for p in parts]  # (None: nothing to send)

    def empty_result(self, input_schema: pa.Schema) -> pa.Table:
        return self.reducer.empty_output()

    # -- the apply phase --------------------------------------------------------------
    def units(self, target_rows: int | None) -> list[GroupUnit]:
        """Packs the groups held here into units and clears the store.

        A group of at least ``target_rows`` rows is a unit of its own; smaller ones are
        packed, largest first, into units of about ``target_rows`` rows. None: one unit.
        Units come largest first.

        Raises:
            GroupTooLargeError: a group's rows exceed the reducer's ``max_group_bytes``.
        """
        table = self._compact()
        self._parts = []
        if table is None or not table.num_rows:
            return []
        rows = pa.array(np.arange(table.num_rows, dtype=np.int64))
        grouped = (table.select(self.group_cols).append_column(_ROW, rows)
                   .group_by(self.group_cols, use_threads=False).aggregate([(_ROW, "list")]))
        lists = grouped[f"{_ROW}_list"].combine_chunks()
        offsets = lists.offsets.to_numpy()
        members = lists.values.to_numpy()
        sizes = np.diff(offsets)
        self._check_sizes(table, sizes, grouped)
        order = np.argsort(-sizes, kind="stable")
        body = table.drop_columns([HASH_COL])
        target = int(sizes.sum()) if target_rows is None else max(1, int(target_rows))
        units: list[GroupUnit] = []
        batch: list[int] = []
        filled = 0
        for g in order.tolist():
            batch.append(g)
            filled += int(sizes[g])
            if filled >= target:
                units.append(_unit(body, batch, offsets, members, sizes))
                batch, filled = [], 0
        if batch:
            units.append(_unit(body, batch, offsets, members, sizes))
        return units

    def _check_sizes(self, table: pa.Table, sizes: np.ndarray, grouped: pa.Table) -> None:
        """Raises :class:`GroupTooLargeError` if the largest group is over the byte bound
        (its bytes estimated from the average row's)."""
        biggest = int(np.argmax(sizes))
        per_row = table.nbytes / max(1, table.num_rows)
        estimate = int(sizes[biggest] * per_row)
        limit = self.reducer.max_group_bytes
        if estimate > limit:
            shown = shown_key(tuple(grouped.column(c)[biggest].as_py() for c in self.key_cols))
            raise GroupTooLargeError(
                f"the group of key {shown!r} holds {int(sizes[biggest])} rows, about {estimate} bytes, over "
                f"GroupApply(max_group_bytes={limit}); raise max_group_bytes if a worker has the memory, or split "
                "the key (e.g. group by more columns)", key=shown)


def _unit(body: pa.Table, groups: list[int], offsets: np.ndarray, members: np.ndarray, sizes: np.ndarray) -> GroupUnit:
    """The unit of ``groups``: their rows gathered contiguously, and where each starts."""
    idx = np.concatenate([members[offsets[g]:offsets[g + 1]] for g in groups])
    bounds = np.concatenate([[0], np.cumsum(sizes[groups])]).astype(np.int64)
    return GroupUnit(body.take(pa.array(idx)), bounds)


def shown_key(key: tuple[Any, ...]) -> Any:
    """A key as messages and errors name it: its value, or the tuple of a composite key's."""
    return key[0] if len(key) == 1 else key


def unit_size(unit: GroupUnit) -> UnitSize:
    """What the scheduler is told of ``unit``."""
    return UnitSize(unit.rows, unit.groups, int(np.diff(unit.offsets).max()) if unit.groups else 0)
