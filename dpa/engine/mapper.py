"""The mapper's state machine: maps input blocks and routes them, push by push, plain Python.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from dpa._internal.arrays import from_numpy, to_numpy
from dpa.aggregates.state import split_by
from dpa.engine.flow import PUSH_GROW, PUSH_SHRINK, top_key_counts, weight
from dpa.engine.instructions import Push
from dpa.engine.plan import JobPlan
from dpa.errors import SchemaError
from dpa.input.records import HASH_COL, WEIGHT_COL, compact
from dpa.keys.columns import canonical_float_keys, hash_key_columns
from dpa.keys.encoding import KeyHashCache

#: Rows of a mapper's first push in a job (:class:`MapperLogic`'s slow start).
FIRST_PUSH_ROWS = 2048
#: Growth of a mapper's push after one no reducer made wait.
PUSH_GROWTH = 8
#: Fewest rows of a push the reducers' queue bounds cap (:meth:`MapperLogic.on_pushed`).
MIN_PUSH_ROWS = 256
#: A push never needs more rows than this (a whole block fits).
MAX_PUSH_ROWS = 1 << 40
#: A mapper's forecast (:meth:`MapperLogic.take_forecast`) counts the keys of at most
#: this many rows of its first block ...
FORECAST_SAMPLE_ROWS = 1 << 16
#: ... and reports this many of the most frequent.
FORECAST_TOP = 512

def block_forecast(hashes: np.ndarray, weights: np.ndarray | None = None,
                   top: int = FORECAST_TOP, sample: int = FORECAST_SAMPLE_ROWS) -> tuple[np.ndarray, np.ndarray, int]:
    """The ``top`` most frequent keys of a block and their records, from its first ``sample`` rows.

    Args:
        hashes: The block's ``uint32`` key hashes, one per row.
        weights: Records each row stands for (map-side combined rows), default 1 each.
        top: Most keys returned.
        sample: Rows counted; the counts are scaled up to the whole block.

    Returns:
        ``(hashes uint32, counts int64, total)``: most frequent first; ``total`` is the
        block's records.
    """
    total = len(hashes) if weights is None else int(np.asarray(weights, dtype=np.int64).sum())
    keys, counts, seen = top_key_counts(hashes[:sample], None if weights is None else weights[:sample], top)
    if 0 < seen < total:  # scaled up to the block (rounded down: they sum to <= total)
        counts = np.floor(counts * (total / seen)).astype(np.int64)
    keep = counts > 0
    return keys[keep], counts[keep], total


def join_blocks(tables: list[pa.Table]) -> pa.Table:
    """Blocks of one run as one table, after each was mapped and type-checked on its own
    (:class:`~dpa.engine.block_types.BlockTypes`): a column whose type changed between them
    changed to one it promotes to exactly, so Arrow's permissive promotion joins them
    without changing a value. Blocks without rows are left out (``map_fn`` may have emitted
    none, without the columns).

    Raises:
        SchemaError: The blocks' columns differ in a way Arrow cannot join (the names).
    """
    filled = [t for t in tables if t.num_rows] or tables[:1]
    if len(filled) == 1:
        return filled[0]
    try:
        return pa.concat_tables(filled, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise SchemaError(
            f"blocks of one input item have columns that do not join ({exc}); give the input one schema, "
            "or pass batch_size=1 to map a Ray Dataset's blocks one by one") from exc


class MapperLogic:
    """Maps input blocks and routes the output, push by push, with a local ring snapshot.

    A block is mapped (``map_fn``, key, map-side combine) and hashed once, then routed in
    pushes (:meth:`next_pushes`), each under the newest snapshot the mapper has. The
    pushes of a job start at :data:`FIRST_PUSH_ROWS` rows and grow
    :data:`PUSH_GROWTH`-fold after each push no reducer made wait, halving after one
    that waited (TCP's slow start, clocked by the reducers' time-bounded queues): a cheap
    job soon routes whole blocks at once, an expensive one keeps the input it has not
    routed yet where a rebalance reaches it without forwarding.
    """

    def __init__(self, mapper_id: int, plan: JobPlan, snapshot: Any) -> None:
        self.mapper_id = mapper_id
        self.plan = plan
        self.snapshot = snapshot
        self.router = plan.policy.make_router(mapper_id, plan.num_reducers)
        self.cache = KeyHashCache()
        self.emitted = 0
        self.blocks = 0
        self.pushes = 0
        self.combiner = plan.aggregate if plan.combine else None
        self.window = FIRST_PUSH_ROWS  # rows of the next push
        #: Version of the snapshot this mapper's first push was routed under (None: none yet).
        self.first_routed: int | None = None
        self._last_push: tuple[int, dict[int, int]] = (0, {})  # its rows, and rows per reducer
        # The planner's forecast from the first block (PolicySpec.wants_block_stats); not
        # for combined rows: a key is one row per block then, there is nothing to split.
        self._forecast_due = (bool(plan.policy.wants_block_stats)
                              and not plan.combine and not plan.input_combined)
        self._forecast: tuple[np.ndarray, np.ndarray, int] | None = None
        self._table: pa.Table | None = None  # the block being routed (with HASH_COL)
        self._hashes: np.ndarray | None = None
        self._offset = 0

    def on_snapshot(self, snapshot: Any) -> None:
        """Adopts a newer routing snapshot (older or equal versions are ignored)."""
        if snapshot.version > self.snapshot.version:
            self.snapshot = snapshot

    def start_block(self, block: pa.Table | tuple[pa.Table, ...], prepared: bool = False) -> None:
        """Applies ``map_fn`` and the key, combines and hashes a block, ready to route.

        A ``prepared`` block is the :meth:`rest` of one: routed as it is. A tuple of tables
        is a run of blocks read as one (a Ray Dataset's, :mod:`dpa.runtime.ray.blocks`):
        each is mapped and its types checked on its own, as a block is, then they are joined
        (:func:`join_blocks`) and combined together.
        """
        if prepared:
            self.emitted += weight(block)
            self._table, self._offset = block, 0
            self._hashes = to_numpy(block[HASH_COL])
            return
        self.blocks += 1
        if self.plan.input_combined:  # partial states already: hash and route only
            block = block if isinstance(block, pa.Table) else join_blocks(list(block))
            self.emitted += weight(block)
            table = canonical_float_keys(block, self.plan.key_cols)
        else:
            table = (self.plan.prepare(block) if isinstance(block, pa.Table)
                     else join_blocks([self.plan.prepare(b) for b in block]))
            self.emitted += table.num_rows
            if self.combiner is not None and table.num_rows:
                # One partial-state row per key (plus its record count): hashing, routing and
                # shipping then cost per distinct key instead of per record.
                table = self.combiner.partial_from_batch(table, self.plan.key_cols, WEIGHT_COL)
        if table.num_rows == 0:
            self._table, self._hashes, self._offset = None, None, 0
            return
        # Combined rows (here or at the source) hold each key about once per block.
        distinct = self.combiner is not None or self.plan.input_combined
        hashes = hash_key_columns(table, self.plan.key_cols, cache=self.cache, distinct=distinct)
        if self._forecast_due:
            self._forecast_due = False
            self._forecast = block_forecast(hashes)  # (never due for weighted, combined rows)
        self._table = table.append_column(HASH_COL, from_numpy(hashes, pa.uint32()))
        self._hashes, self._offset = hashes, 0

    def take_forecast(self) -> tuple[np.ndarray, np.ndarray, int] | None:
        """The key counts of the job's first block (for :meth:`~dpa.routing.policy.Planner.observe_forecast`),
        once, after :meth:`start_block`; None if the policy does not want them or they were taken."""
        forecast, self._forecast = self._forecast, None
        return forecast

    @property
    def routing(self) -> bool:
        """Whether rows of the current block are still to be routed."""
        return self._table is not None

    def next_pushes(self, rows: int | None = None) -> list[Push]:
        """Routes the next push (``rows`` rows, default the window) under the current snapshot.

        Returns one :class:`Push` per reducer that gets rows (empty when the block is done).
        """
        table = self._table
        if table is None:
            return []
        n = self.window if rows is None else rows
        start, end = self._offset, min(table.num_rows, self._offset + max(1, n))
        part = table if start == 0 and end == table.num_rows else table.slice(start, end - start)
        dest = np.asarray(self.router.route(self._hashes[start:end], self.snapshot), dtype=np.int64)
        if self.first_routed is None:
            self.first_routed = self.snapshot.version
        self._offset = end
        if end >= table.num_rows:
            self._table, self._hashes, self._offset = None, None, 0
        parts = split_by(part, dest, self.plan.num_reducers)
        self._last_push = (end - start, {r: p.num_rows for r, p in enumerate(parts) if p.num_rows})
        self.pushes += 1
        return [Push(r, p) for r, p in enumerate(parts) if p.num_rows]

    def rest(self) -> tuple[pa.Table, int] | None:
        """The rows of the current block not routed yet (compact, ready for
        ``start_block(..., prepared=True)``) and the records they stand for; None when the
        block is done. Routing goes on from the same rows."""
        table = self._table
        if table is None:
            return None
        rest = compact(table.slice(self._offset))
        return rest, weight(rest)

    def on_pushed(self, outcome: int, capacities: dict[int, int | None] | None = None) -> None:
        """The shell's news that a push was accepted: the worst outcome among its reducers
        (:data:`PUSH_GROW`, :data:`PUSH_KEEP` or :data:`PUSH_SHRINK`) and, per reducer,
        the rows its queue holds at most (:attr:`ReducerLogic.capacity_rows`).

        The window never grows past what, split like the last push, gives some reducer
        more than its queue holds (nor below :data:`MIN_PUSH_ROWS`): a queue is refilled
        at most one bound at a time, and the rest of the input waits at the mapper, where
        a rebalance reaches it without forwarding.
        """
        if outcome >= PUSH_SHRINK:
            self.window = max(FIRST_PUSH_ROWS, self.window // 2)
        elif outcome == PUSH_GROW and self.window < MAX_PUSH_ROWS:
            self.window *= PUSH_GROWTH
        rows, parts = self._last_push
        fits = [capacities[r] / n for r, n in parts.items() if capacities and capacities.get(r) is not None]
        if fits:
            self.window = max(MIN_PUSH_ROWS, min(self.window, int(rows * min(fits))))

    def map_block(self, block: pa.Table) -> list[Push]:
        """Maps and routes a whole block at once; returns one :class:`Push` per reducer."""
        self.start_block(block)
        return self.next_pushes(rows=MAX_PUSH_ROWS)

