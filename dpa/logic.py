"""The mapper, reducer, balancer and coordinator state machines — plain Python, no Ray.

Each class takes events (a block to map, a batch pushed into a queue, a new ring, a
queue-length report, a tick) and returns what should happen next (batches to send, a
cost to pay, a snapshot to publish). The Ray actors in :mod:`dpa.runtime_ray` and the
in-process runtime in :mod:`dpa.runtime_local` are thin shells that feed events to these
objects and carry out what they return, so both runtimes run the same logic.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpa.elastic import ScalingEvent, ScalingRule
from dpa.epochs import EpochLedger, Rest
from dpa.instructions import Forward, Publish, Push, ScaleOut, StateMove
from dpa.key_columns import canonical_float_keys, hash_key_columns
from dpa.keys import KeyHashCache
from dpa.plan import JobPlan
from dpa.policy import Decision, RebalanceEvent
from dpa.records import compact, unify
from dpa.reducers import HASH_COL, WEIGHT_COL, unwrap
from dpa.state import make_state, split_by, split_partial

logger = logging.getLogger(__name__)

#: Earlier snapshots a reducer keeps, to judge batches routed under them.
_HISTORY = 16

#: Rows of a reducer's first step, before it has measured what a row costs.
FIRST_STEP_ROWS = 16
#: Rows of a mapper's first push in a job (:class:`MapperLogic`'s slow start).
FIRST_PUSH_ROWS = 2048
#: Growth of a mapper's push after one no reducer made wait.
PUSH_GROWTH = 8
#: What a reducer tells a mapper about its push: accepted at once by a reducer that knows
#: its cost (the mapper may grow its pushes), accepted while the cost was still unknown
#: (keep the size), or made to wait by a full queue (shrink).
PUSH_GROW, PUSH_KEEP, PUSH_SHRINK = 0, 1, 2
#: Fewest rows of a push the reducers' queue bounds cap (:meth:`MapperLogic.on_pushed`).
MIN_PUSH_ROWS = 256
#: A push never needs more rows than this (a whole block fits).
MAX_PUSH_ROWS = 1 << 40
#: A reducer step this long (or half ``step_time_s`` if less) measures its rows, not the
#: fixed cost of a step (well under a millisecond): the first such step calibrates the
#: reducer's cost per row (:attr:`ReducerLogic.calibrated`).
CALIBRATION_S = 0.01
#: Weight of the newest step in the reducer's moving estimate of its cost per row.
COST_SMOOTHING = 0.3
#: A mapper's forecast (:meth:`MapperLogic.take_forecast`) counts the keys of at most
#: this many rows of its first block ...
FORECAST_SAMPLE_ROWS = 1 << 16
#: ... and reports this many of the most frequent.
FORECAST_TOP = 512


def top_key_counts(hashes: np.ndarray, weights: np.ndarray | None, top: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The ``top`` most frequent key hashes of a batch of arrivals (a reducer's key report).

    Args:
        hashes: Key hashes of the arrivals (repeats allowed).
        weights: Records each arrival stands for (None = 1 each).
        top: Most hashes to return.

    Returns:
        ``(hashes, counts, total)``: distinct ``uint32`` hashes, most frequent first, their
        ``int64`` record counts, and the records of all arrivals.
    """
    keys, inverse = np.unique(hashes, return_inverse=True)
    counts = np.bincount(inverse, weights=weights, minlength=len(keys)).astype(np.int64)
    total = int(counts.sum())
    if len(keys) > top:
        pick = np.argpartition(-counts, top - 1)[:top]
        keys, counts = keys[pick], counts[pick]
    order = np.argsort(-counts, kind="stable")
    return keys[order].astype(np.uint32), counts[order], total


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
        self.combiner = unwrap(plan.reducer)[0] if plan.combine else None
        self.window = FIRST_PUSH_ROWS  # rows of the next push
        #: Version of the snapshot this mapper's first push was routed under (None: none yet).
        self.first_routed: int | None = None
        self._last_push: tuple[int, dict[int, int]] = (0, {})  # its rows, and rows per reducer
        # The planner's forecast from the first block (PolicySpec.wants_block_stats); not
        # for combined rows: a key is one row per block then, there is nothing to split.
        self._forecast_due = (bool(getattr(plan.policy, "wants_block_stats", False))
                              and not plan.combine and not plan.input_combined)
        self._forecast: tuple[np.ndarray, np.ndarray, int] | None = None
        self._table: pa.Table | None = None  # the block being routed (with HASH_COL)
        self._hashes: np.ndarray | None = None
        self._offset = 0

    def on_snapshot(self, snapshot: Any) -> None:
        """Adopts a newer routing snapshot (older or equal versions are ignored)."""
        if snapshot.version > self.snapshot.version:
            self.snapshot = snapshot

    def start_block(self, block: pa.Table, prepared: bool = False) -> None:
        """Applies ``map_fn`` and the key, combines and hashes a block, ready to route.

        A ``prepared`` block is the :meth:`rest` of one: routed as it is.
        """
        if prepared:
            self.emitted += weight(block)
            self._table, self._offset = block, 0
            self._hashes = block[HASH_COL].to_numpy()
            return
        self.blocks += 1
        if self.plan.input_combined:  # partial states already: hash and route only
            self.emitted += weight(block)
            table = canonical_float_keys(block, self.plan.key_cols)
        else:
            table = self.plan.prepare(block)
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
        self._table = table.append_column(HASH_COL, pa.array(hashes, pa.uint32()))
        self._hashes, self._offset = hashes, 0

    def take_forecast(self) -> tuple[np.ndarray, np.ndarray, int] | None:
        """The key counts of the job's first block (for :meth:`~dpa.policy.Planner.observe_forecast`),
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


@dataclass
class Chunk:
    """Work taken from a reducer's queue: records it owns and records to forward.

    Attributes:
        owned: The records to fold into the state (None if every record is forwarded).
        forwards: Records to send to the reducers that own them now.
        cost_s: The :class:`~dpa.reducers.WithCost` cost to pay before applying.
        rows: Rows taken off the queue (what the reducer's cost estimate is per).
    """

    owned: pa.Table | None
    forwards: list[Forward]
    cost_s: float
    rows: int = 0
    epoch: int = 0

    @property
    def num_owned(self) -> int:
        """Records owned (a map-side combined row counts as the records it stands for)."""
        return 0 if self.owned is None else weight(self.owned)


def weight(table: pa.Table) -> int:
    """Records a batch stands for: its rows, or the sum of WEIGHT_COL for combined batches."""
    if WEIGHT_COL in table.column_names:
        return int(pc.sum(table[WEIGHT_COL]).as_py() or 0)
    return table.num_rows


class ReducerLogic:
    """A reducer and its bounded input queue.

    Records pushed by mappers count against ``queue_capacity`` (the shell makes mappers
    wait while :meth:`has_room` is false). Forwarded records are always accepted: they
    are already inside the system, whose total is bounded by the capacities, and refusing
    them could deadlock two full reducers forwarding to each other.

    Steps are sized in time: the shell tells :meth:`on_step` how long each step took (its
    real work: splitting, the per-record cost, folding into the state), the reducer keeps
    a moving estimate of the seconds per row, and :meth:`take_chunk` takes the rows that
    fit ``step_time_s`` (at least one, at most ``chunk_size``). Records still queued can
    be forwarded when the balancer moves their key; those taken cannot, so an expensive
    reducer takes few records at a time and a cheap one (Count over combined batches)
    large steps. :attr:`backlog_s` is the queue in seconds of work, what the balancer
    compares.

    Every batch belongs to an input epoch (:mod:`dpa.epochs`). With checkpoints on
    (``plan.checkpoint_interval_s > 0``) the reducer keeps one partial state per open epoch
    besides its base state; :meth:`checkpoint` folds the epochs of a checkpoint into the
    base and returns a copy of it with the records of those epochs still pending, and
    :meth:`restore` starts from one.

    With ``plan.migrate == "state"`` a key's state follows the key: :meth:`state_moves`
    hands the keys it no longer owns to their owners, and :meth:`accept_state` takes
    those of peers (see ``docs/elastic.md``).
    """

    def __init__(self, reducer_id: int, plan: JobPlan, snapshot: Any) -> None:
        self.reducer_id = reducer_id
        self.plan = plan
        self.snapshot = snapshot
        inner, self.cost_per_record, self.cost_mode = unwrap(plan.reducer)
        self.state = make_state(inner, plan.key_cols, plan.record_kind)
        # Sums may round ints to float64 where a column is int in some blocks and float in others.
        self.float_rounding = bool(getattr(inner, "float_rounding", False))
        self.queue: deque[pa.Table] = deque()
        self.queue_epochs: deque[int] = deque()  # the input epoch of each queued batch
        self.epochs_on = plan.checkpoint_interval_s > 0
        self.open_states: dict[int, Any] = {}  # epoch -> partial state (epochs after `closed`)
        self.closed = -1  # the last epoch folded into `state` (checkpointed)
        self.by_epoch: dict[int, int] = {}  # records absorbed per epoch after `closed`
        # Forwards per (destination, epoch) sent and per epoch received, in records: a
        # checkpoint waits until every forward of its epochs sent before it has arrived.
        self.fwd_sent: dict[tuple[int, int], int] = {}
        self.fwd_received: dict[int, int] = {}
        self.hold: int | None = None  # forwards of epochs <= hold wait in `outbox` (a checkpoint)
        self.outbox: list[Forward] = []
        self._taken: tuple[pa.Table, int] | None = None  # the owned rows of the chunk being applied
        # Per queued batch: the snapshot version its routing is known to agree with (-1 =
        # unknown). A batch routed under the reducer's current version needs no
        # ownership check when it is taken.
        self.routed: deque[int] = deque()
        self._history: dict[int, Any] = {}  # recent earlier snapshots by version
        self.queued = 0
        self.queued_rows = 0  # rows of the queue (a combined row stands for many records)
        self.cost_per_row: float | None = None  # moving estimate, seconds; None = not measured yet
        # Whether a "full-size" step was measured (CALIBRATION_S or more, or chunk_size
        # rows): small first steps are dominated by the fixed cost of a step and
        # overstate the cost per row of cheap reducers.
        self.calibrated = False
        self.processed = 0
        self.in_process = 0  # records of the chunk taken off the queue and not yet applied
        self.forwarded = 0
        self.received_forwards = 0
        self.peak_queue = 0
        # Per-key arrival counts for planners that want them (PolicySpec.wants_key_stats).
        self.collect_keys = bool(getattr(plan.policy, "wants_key_stats", False))
        self._arrivals: list[tuple[np.ndarray, np.ndarray | None]] = []
        # State migration (JobConfig.migrate="state"): the version whose owners the state was
        # last checked against (-1: a restored state is checked at the first step boundary).
        self.migrate_state = getattr(plan, "migrate", "records") == "state"
        self.swept = -1
        self.keys_moved_out = 0
        self.merged_keys = 0

    # -- queue ----------------------------------------------------------------------
    def has_room(self) -> bool:
        """Whether a mapper may push now.

        An empty queue always has room. Otherwise the queue must be below
        ``queue_capacity`` records and, once a full-size step measured the cost per row
        (:attr:`calibrated`), below ``queue_time_s`` seconds of work at that cost. Before
        the first step has measured anything, a queue that holds something has no room
        (a reducer takes no more work than it knows the cost of); the first, small steps
        of a cheap reducer overstate its cost, so they bound nothing. With
        ``queue_time_s=math.inf`` only ``queue_capacity`` counts (the paper's queues).
        """
        if not self.queued_rows:
            return True
        if self.queued >= self.plan.queue_capacity:
            return False
        if math.isinf(self.plan.queue_time_s):  # no bound in time: records only (the paper's queues)
            return True
        if self.cost_per_row is None:
            return False
        if not self.calibrated:  # small steps overstate a cheap reducer's cost: no bound in time yet
            return True
        return self.queued_rows * self.cost_per_row < self.plan.queue_time_s

    @property
    def capacity_rows(self) -> int | None:
        """Rows the queue holds at most: ``queue_time_s`` of work at the measured cost per
        row (at least 1), or None while unknown (not :attr:`calibrated`) or unbounded (free rows)."""
        if (self.cost_per_row is None or not self.calibrated or self.cost_per_row <= 0
                or math.isinf(self.plan.queue_time_s)):
            return None
        return max(1, int(self.plan.queue_time_s / self.cost_per_row))

    def push_outcome(self) -> int:
        """What a mapper's push arriving now tells the mapper: :data:`PUSH_GROW` once the
        reducer has measured its cost, :data:`PUSH_KEEP` before. The shell turns it into
        :data:`PUSH_SHRINK` if the push then waits while the queue is :attr:`congested`."""
        return PUSH_KEEP if self.cost_per_row is None else PUSH_GROW

    @property
    def congested(self) -> bool:
        """Whether a mapper that must wait now waits for work (a full queue), not for the
        reducer's first measurements of its cost (which overstate a cheap reducer's): only
        then does it shrink its pushes."""
        return not self.has_room() and (self.calibrated or self.queued >= self.plan.queue_capacity)

    def enqueue(self, batch: pa.Table, forwarded: bool = False,
                version: int | None = None, epoch: int = 0) -> list[Forward]:
        """Appends a batch to the queue; returns the records to forward at once.

        A mapper's batch routed under an older snapshot ``version`` than this reducer's is
        judged as the queue was when the newer snapshot was adopted, against the snapshot
        it was routed under (a policy may spread a key that became hot since over several
        reducers); the records this reducer should not hold are returned. ``version`` also
        spares the ownership check when the batch is taken, if it is the current one.
        """
        if not batch.num_rows:
            return []
        forwards: list[Forward] = []
        if not forwarded and self.collect_keys:
            w = batch[WEIGHT_COL].to_numpy() if WEIGHT_COL in batch.column_names else None
            self._arrivals.append((batch[HASH_COL].to_numpy(), w))
        routed_under = None if version is None else self._history.get(version)
        if not forwarded and routed_under is not None and version < self.snapshot.version:
            version = self.snapshot.version  # what is kept below agrees with it
            dest = self.plan.policy.destinations(self.snapshot, batch[HASH_COL].to_numpy(), self.reducer_id,
                                                 True, routed_under)
            kept, forwards = self._split(batch, None if dest is None else np.asarray(dest, dtype=np.int64), epoch)
            moved = sum(weight(f.batch) for f in forwards)
            self.forwarded += moved
            forwards = self._release(forwards)
            if kept is None:
                return forwards
            batch = kept
        n = self._append(batch, epoch, -1 if version is None else version)
        if forwarded:
            self.received_forwards += n
            self.fwd_received[epoch] = self.fwd_received.get(epoch, 0) + n
        return forwards

    def _append(self, batch: pa.Table, epoch: int, routed: int) -> int:
        """Queues ``batch`` of ``epoch``, routed under version ``routed``; its records."""
        n = weight(batch)
        self.queue.append(batch)
        self.queue_epochs.append(epoch)
        self.routed.append(routed)
        self.queued += n
        self.queued_rows += batch.num_rows
        self.peak_queue = max(self.peak_queue, self.queued)
        return n

    @property
    def has_key_stats(self) -> bool:
        """Whether key arrivals are waiting to be reported (not while they are kept until the
        reducer has measured its cost)."""
        return bool(self._arrivals) and self._keys_worth_counting() is not None

    def take_key_stats(self) -> tuple[np.ndarray, np.ndarray, int, int] | None:
        """The interval's key arrivals: top hashes, their record counts, all records, holdings.

        Returns ``(hashes, counts, total, held)`` with at most ``policy.key_stats_top``
        hashes, the most frequent first, and ``held`` = records processed, being processed
        or queued here now (empty arrays when nothing arrived); None when the policy wants
        no key stats.
        """
        if not self.collect_keys:
            return None
        if not self._arrivals:
            return np.zeros(0, np.uint32), np.zeros(0, np.int64), 0, self.held
        worth = self._keys_worth_counting()
        if worth is None:  # not measured yet: keep the arrivals for later
            return np.zeros(0, np.uint32), np.zeros(0, np.int64), 0, self.held
        if not worth:
            # Counting keys costs a sort of the arrivals: skip it while the backlog is not
            # worth balancing (a cheap job), reporting only how many records arrived.
            total = sum(len(h) if w is None else int(w.sum()) for h, w in self._arrivals)
            self._arrivals = []
            return np.zeros(0, np.uint32), np.zeros(0, np.int64), total, self.held
        hs = np.concatenate([h for h, _ in self._arrivals])
        ws = np.concatenate([np.ones(len(h), np.int64) if w is None else w.astype(np.int64) for h, w in self._arrivals])
        self._arrivals = []
        keys, counts, total = top_key_counts(hs, ws, int(getattr(self.plan.policy, "key_stats_top", 1024)))
        return keys, counts, total, self.held

    def _keys_worth_counting(self) -> bool | None:
        """Whether to count the keys that arrived now: always, unless the policy counts them
        only for backlogs worth balancing (:attr:`dpa.policy.PolicySpec.key_stats_when_backlogged`,
        two steps of work or more); None = not known until a full-size step was measured."""
        if not getattr(self.plan.policy, "key_stats_when_backlogged", False):
            return True
        backlog = self.backlog_s
        return None if backlog is None else backlog >= 2 * self.plan.step_time_s

    @property
    def held(self) -> int:
        """Records this reducer holds: processed, being processed or queued."""
        return self.processed + self.in_process + self.queued

    def _split(self, batch: pa.Table, owners: np.ndarray | None = None,
               epoch: int = 0) -> tuple[pa.Table | None, list[Forward]]:
        """Splits a batch into the part this reducer keeps and the parts to forward."""
        if owners is None:
            owners = self.plan.policy.destinations(self.snapshot, batch[HASH_COL].to_numpy(), self.reducer_id, False)
        if owners is None:
            return batch, []
        mine = owners == self.reducer_id
        if mine.all():
            return batch, []
        parts = split_by(batch, np.asarray(owners, dtype=np.int64), self.plan.num_reducers)
        forwards = [Forward(r, p, epoch) for r, p in enumerate(parts) if p.num_rows and r != self.reducer_id]
        owned = parts[self.reducer_id] if parts[self.reducer_id].num_rows else None
        return owned, forwards

    # -- events ---------------------------------------------------------------------
    def on_snapshot(self, snapshot: Any) -> list[Forward]:
        """Adopts a newer snapshot and returns queued records it no longer owns (to forward).

        Forwarding eagerly on adoption (rather than when each record reaches the head of
        the queue) makes the reported queue length reflect the new ring at once.
        """
        if snapshot.version <= self.snapshot.version:
            return []
        previous, self.snapshot = self.snapshot, snapshot
        self._history[previous.version] = previous
        while len(self._history) > _HISTORY:
            self._history.pop(min(self._history))
        if not self.queue:
            return []
        # One decision over the whole queue (a policy may spread a key's queued records
        # over several reducers; per batch, rounding would favour the same reducer).
        hashes = np.concatenate([b[HASH_COL].to_numpy() for b in self.queue])
        policy = self.plan.policy
        dest = policy.destinations(snapshot, hashes, self.reducer_id, True, previous)
        if dest is None:
            return []
        dest = policy.handover(snapshot, hashes, np.asarray(dest, dtype=np.int64), self.reducer_id)
        kept: deque[pa.Table] = deque()
        kept_epochs: deque[int] = deque()
        forwards: list[Forward] = []
        offset = 0
        self.routed = deque()
        for batch, epoch in zip(self.queue, self.queue_epochs):
            part = np.asarray(dest[offset : offset + batch.num_rows], dtype=np.int64)
            offset += batch.num_rows
            owned, fwd = self._split(batch, part, epoch)
            if owned is not None:
                kept.append(owned)
                kept_epochs.append(epoch)
                self.routed.append(snapshot.version)
            forwards.extend(fwd)
        moved = sum(weight(f.batch) for f in forwards)
        self.queue, self.queue_epochs = kept, kept_epochs
        self.queued -= moved
        self.queued_rows -= sum(f.batch.num_rows for f in forwards)
        self.forwarded += moved
        return self._release(forwards)

    # -- step sizing ----------------------------------------------------------------
    @property
    def step_rows(self) -> int:
        """Rows the next step takes: what fits ``step_time_s`` at the estimated cost per row."""
        cap = self.plan.chunk_size
        if self.cost_per_row is None:
            return min(cap, FIRST_STEP_ROWS)
        if self.cost_per_row <= 0:
            return cap
        return int(max(1, min(cap, self.plan.step_time_s / self.cost_per_row)))

    def on_step(self, rows: int, seconds: float) -> None:
        """The shell's measurement of a step: ``rows`` taken, done in ``seconds``."""
        if rows <= 0 or seconds < 0:
            return
        sample = seconds / rows
        full = seconds >= min(self.plan.step_time_s / 2, CALIBRATION_S) or rows >= self.plan.chunk_size
        if self.cost_per_row is None or (full and not self.calibrated):
            self.cost_per_row = sample  # the first full-size step replaces the warm-up guesses
        else:
            self.cost_per_row += COST_SMOOTHING * (sample - self.cost_per_row)
        self.calibrated = self.calibrated or full

    @property
    def backlog_s(self) -> float | None:
        """The queue in estimated seconds of work (None until a full-size step was measured:
        the first, small steps of a cheap reducer measure mostly the fixed cost of a step)."""
        if self.cost_per_row is None or not self.calibrated:
            return None
        return self.queued_rows * self.cost_per_row

    def take_chunk(self) -> Chunk | None:
        """Takes :attr:`step_rows` rows off the queue and splits owned vs forwarded (a
        chunk holds records of one input epoch: it stops where the next epoch starts)."""
        if not self.queue:
            return None
        limit = self.step_rows
        taken: list[pa.Table] = []
        current = True  # every taken batch was routed under the current snapshot
        n = 0  # rows
        epoch = self.queue_epochs[0]
        while self.queue and n < limit and self.queue_epochs[0] == epoch:
            head = self.queue[0]
            room = limit - n
            current = current and self.routed[0] == self.snapshot.version
            if head.num_rows <= room:
                taken.append(self.queue.popleft())
                self.routed.popleft()
                self.queue_epochs.popleft()
                n += head.num_rows
            else:
                taken.append(head.slice(0, room))
                self.queue[0] = head.slice(room)
                n += room
        # Batches of different input blocks may differ in type (int64 then double values):
        # promote them exactly instead of failing.
        batch = taken[0] if len(taken) == 1 else unify(taken, float_rounding=self.float_rounding)
        self.queued -= weight(batch)
        self.queued_rows -= n
        owned, forwards = (batch, []) if current else self._split(batch, None, epoch)
        self.forwarded += sum(weight(f.batch) for f in forwards)
        chunk = Chunk(owned, self._release(forwards), 0.0, n, epoch)
        chunk.cost_s = chunk.num_owned * self.cost_per_record
        self.in_process = 0 if owned is None else weight(owned)
        self._taken = None if owned is None else (owned, epoch)
        return chunk

    def apply(self, chunk: Chunk) -> None:
        """Folds a chunk's owned records into the state (after its cost was paid)."""
        self.in_process = 0
        self._taken = None
        if chunk.owned is not None:
            owned = chunk.owned
            state = self._applying = self._state_for(chunk.epoch)
            if WEIGHT_COL in owned.column_names:
                n = weight(owned)
                state.add_combined(owned)
            else:
                state.add(owned)
                n = owned.num_rows
            self.processed += n
            self.by_epoch[chunk.epoch] = self.by_epoch.get(chunk.epoch, 0) + n

    @property
    def current_key(self) -> Any:
        """The key a user reducer was working on when it raised (None if unknown)."""
        state = getattr(self, "_applying", None) or self.state
        return getattr(state, "current_key", None)

    # -- state migration --------------------------------------------------------------
    def state_moves(self) -> list[StateMove]:
        """With ``migrate="state"`` (or when this reducer is :attr:`retired`): hands over
        the keys in the state it no longer owns under its snapshot, once per snapshot
        version, at a step boundary.

        Not while a chunk is being applied (its keys were owned when it was taken: they
        are checked at the next boundary) nor while a checkpoint holds forwards (a move
        is counted like a forward, one unit per message, so a checkpoint waits for those
        sent before it and none crosses it). Each store moves apart, tagged with its
        epoch (the base state with :attr:`closed`), so the receiver folds it into the
        store of the same epochs. Records absorbed stay counted where they were absorbed
        (conservation counts records, not where their state lives).

        Returns:
            One :class:`~dpa.instructions.StateMove` per (receiver, store) that gets keys.
        """
        if (not (self.migrate_state or self.retired) or self.swept >= self.snapshot.version
                or self._taken is not None or self.hold is not None):
            return []
        self.swept = self.snapshot.version
        snapshot, policy, me = self.snapshot, self.plan.policy, self.reducer_id

        def destinations(hashes: np.ndarray) -> np.ndarray | None:
            return policy.destinations(snapshot, hashes, me, False)

        moves: list[StateMove] = []
        for epoch, store in [(self.closed, self.state), *sorted(self.open_states.items())]:
            for dest, partial in store.extract(destinations, me, self.plan.num_reducers):
                keys = partial.num_rows if isinstance(partial, pa.Table) else len(partial)
                moves.append(StateMove(dest, partial, epoch, keys, snapshot.version))
                self.fwd_sent[(dest, epoch)] = self.fwd_sent.get((dest, epoch), 0) + 1
        self.keys_moved_out += sum(m.keys for m in moves)
        return moves

    @property
    def retired(self) -> bool:
        """Whether this reducer is an elastic job's slot that owns no keys now: it hands
        its whole state over whatever ``migrate`` says, so that it holds nothing."""
        if not self.plan.active_reducers:
            return False
        counts = getattr(self.snapshot, "token_counts", None)
        return counts is not None and counts[self.reducer_id] == 0

    def accept_state(self, move: StateMove) -> list[StateMove]:
        """Merges a peer's :class:`~dpa.instructions.StateMove` into the store of its epochs.

        A move made under an older snapshot than this reducer's may hold keys this reducer
        no longer owns, and its sweep of the newer snapshot may be over: those keys go on
        to their owners now (returned), or they would stay here while their owner builds a
        second state for them. While a checkpoint holds forwards (no move may cross it)
        they are merged and the state is swept again at the next step boundary instead.

        Returns:
            The moves to pass on (one per reducer that gets keys).
        """
        self.fwd_received[move.epoch] = self.fwd_received.get(move.epoch, 0) + 1
        store = self._state_for(move.epoch)
        if move.version >= self.snapshot.version or not (self.migrate_state or self.retired):
            store.add_partial(move.partial)
            return []
        if self.hold is not None:
            store.add_partial(move.partial)
            self.swept = min(self.swept, move.version)
            return []
        snapshot, policy, me = self.snapshot, self.plan.policy, self.reducer_id
        kept, parts = split_partial(move.partial, lambda hashes: policy.destinations(snapshot, hashes, me, False),
                                    me, self.plan.num_reducers)
        if kept is not None:
            store.add_partial(kept)
        onward = [StateMove(r, part, move.epoch, keys, snapshot.version) for r, part, keys in parts]
        for m in onward:
            self.fwd_sent[(m.dest, m.epoch)] = self.fwd_sent.get((m.dest, m.epoch), 0) + 1
        self.keys_moved_out += sum(m.keys for m in onward)
        return onward

    # -- epochs and checkpoints -------------------------------------------------------
    def _state_for(self, epoch: int) -> Any:
        if not self.epochs_on or epoch <= self.closed:
            return self.state
        state = self.open_states.get(epoch)
        if state is None:
            inner = unwrap(self.plan.reducer)[0]
            state = self.open_states[epoch] = make_state(inner, self.plan.key_cols, self.plan.record_kind)
        return state

    def _fold(self, upto: int | None = None) -> None:
        """Folds the open epochs' states (up to ``upto``; None = all) into the base state."""
        for epoch in sorted(self.open_states):
            if upto is not None and epoch > upto:
                break
            self.state.fold(self.open_states.pop(epoch))

    def _release(self, forwards: list[Forward]) -> list[Forward]:
        """The forwards to send now (counted as sent); those a checkpoint holds (of epochs
        up to :attr:`hold`) wait in :attr:`outbox`."""
        if self.hold is not None:
            held = [f for f in forwards if f.epoch <= self.hold]
            if held:
                self.outbox.extend(held)
                forwards = [f for f in forwards if f.epoch > self.hold]
        for f in forwards:
            key = (f.dest, f.epoch)
            self.fwd_sent[key] = self.fwd_sent.get(key, 0) + weight(f.batch)
        return forwards

    def prepare_checkpoint(self, epoch: int) -> list[int]:
        """Phase one of a checkpoint of ``epoch``: from now on forwards of the epochs up to
        it are held (:attr:`outbox`), so none is in flight once those sent before arrive.

        Returns:
            Per reducer, the records of those epochs forwarded to it so far.
        """
        self.hold = epoch
        sent = [0] * self.plan.num_reducers
        for (dest, e), n in self.fwd_sent.items():
            if e <= epoch:
                sent[dest] += n
        return sent

    def release_held(self) -> list[Forward]:
        """The checkpoint is taken (or given up): the forwards held for it, to send now."""
        held, self.outbox, self.hold = self.outbox, [], None
        return self._release(held)

    def forwards_received(self, epoch: int) -> int:
        """Records of the epochs up to ``epoch`` received from peers so far."""
        return sum(n for e, n in self.fwd_received.items() if e <= epoch)

    def checkpoint(self, epoch: int) -> tuple[Any, int, list[tuple[pa.Table, int]]]:
        """Phase two: this reducer's share of a consistent cut of the epochs up to
        ``epoch``, taken once every forward of them counted by :meth:`prepare_checkpoint`
        (at every reducer) has arrived here.

        Every record of those epochs this reducer holds is in the cut: absorbed ones in the
        base state (their epochs' states are folded into it), and the pending ones (queued,
        being applied, held in the outbox) as batches. No barrier is needed: the records
        pending now are processed on as usual, and restored as pending. Forwards stay held
        until every reducer has taken its share (:meth:`release_held`): one sent now could
        reach a peer before its share and be counted twice.

        Returns:
            ``(state, records, pending)``: a copy of the base state, the records it holds,
            and the pending ``(batch, epoch)`` pairs (compact copies).
        """
        self._fold(epoch)
        self.closed = max(self.closed, epoch)
        for e in [e for e in self.by_epoch if e <= epoch]:
            del self.by_epoch[e]
        pending = [(b, e) for b, e in zip(self.queue, self.queue_epochs) if e <= epoch]
        if self._taken is not None and self._taken[1] <= epoch:
            pending.append(self._taken)
        pending.extend((f.batch, f.epoch) for f in self.outbox)
        return (self.state.export(), self.processed - sum(self.by_epoch.values()),
                [(compact(b), e) for b, e in pending])

    def restore(self, exported: Any, records: int, epoch: int,
                pending: list[tuple[pa.Table, int]] = ()) -> None:
        """Starts from a checkpoint of ``epoch`` (made by :meth:`checkpoint`): its base
        state, holding ``records`` records, and its ``pending`` batches, queued again."""
        self.state.restore(exported)
        self.processed += int(records)
        self.closed = epoch
        for batch, e in pending:
            self._append(batch, e, -1)

    # -- final merge ----------------------------------------------------------------
    def partition_state(self, n: int | None = None) -> list[Any]:
        """Splits the state by ``hash % n`` (default ``R``) for the partitioned final merge
        (and starts counting the keys merged here)."""
        self._fold()
        parts = self.state.partition(self.plan.num_reducers if n is None else n)
        self.state.begin_merge()
        return parts

    def merge_partial(self, partial: Any) -> None:
        """Merges one partition received from a peer."""
        self.state.add_partial(partial)

    def finalize(self) -> pa.Table | None:
        """The reducer's share of the result (None if it holds no keys)."""
        self._fold()
        self.merged_keys = self.state.end_merge()
        return self.state.finalize()

    def counters(self) -> dict[str, int]:
        return {
            "processed": self.processed,
            "forwarded": self.forwarded,
            "received_forwards": self.received_forwards,
            "peak_queue": self.peak_queue,
            "keys_moved": self.keys_moved_out,
            "reducer": self.reducer_id,
        }


@dataclass
class BalancerLogic:
    """Wraps a policy's planner with the event log, the published snapshot and a timeline.

    The timeline samples the latest reported queue lengths at every tick (only when they
    changed), so run reports can plot queue length per reducer over time; it keeps at
    most ``max_samples`` points, thinning evenly when full.

    Elastic jobs (``plan.active_reducers > 0``) also run a :class:`~dpa.elastic.ScalingRule`
    when the planner has nothing to publish: a scale-in is applied at once (the planner
    takes the slot's tokens away); a scale-out is returned as a
    :class:`~dpa.instructions.ScaleOut` for the runtime to start the reducers, which then
    calls :meth:`scaled_out`. Both are logged in :attr:`scaling`.
    """

    plan: JobPlan
    snapshot: Any
    planner: Any = None
    events: list[RebalanceEvent] = field(default_factory=list)
    timeline: list[tuple[float, tuple[int, ...], int]] = field(default_factory=list)
    max_samples: int = 4000
    resume: bool = False

    def __post_init__(self) -> None:
        # ``resume``: a balancer restarted after a failure continues from ``snapshot`` (the
        # last checkpoint's) if the policy's planner can (Planner.resume).
        self.planner = self.plan.policy.make_planner(self.plan.num_reducers)
        if self.planner is not None and not (self.resume and self.planner.resume(self.snapshot)):
            self.snapshot = self.planner.snapshot
        self.queue_lengths = [0] * self.plan.num_reducers
        self.backlogs: list[float | None] = [None] * self.plan.num_reducers
        self._stride = 1
        self._ticks = 0
        self.scaling: list[ScalingEvent] = []
        self.rule: ScalingRule | None = None
        self.scaling_out: tuple[tuple[int, ...], str, tuple[float, ...]] | None = None  # started, not yet done
        if self.plan.active_reducers and self.planner is not None:
            self.rule = ScalingRule(self.plan.num_reducers, max(1, self.plan.min_reducers),
                                    self.plan.scale_out_backlog_s)
        #: Reducer slots ``0 .. width - 1`` took part in the job (slots are taken lowest first).
        self.width = max(self.active_slots) + 1

    @property
    def active_slots(self) -> list[int]:
        """The reducer slots that take part (own keys) now."""
        if self.planner is None or not self.rule:
            return list(range(self.plan.num_reducers))
        return [int(r) for r in np.flatnonzero(self.planner.active)]

    @property
    def active(self) -> bool:
        """Whether there is anything to balance."""
        return self.planner is not None

    def forecast(self, mapper: int, hashes: np.ndarray, counts: np.ndarray, total: int,
                 now: float) -> Publish | None:
        """A mapper's key counts of its first block, before it routes any of it
        (:meth:`~dpa.policy.Planner.observe_forecast`): the policy's rule is evaluated at
        once; returns the snapshot to publish, if any (the mapper routes under it)."""
        if self.planner is None:
            return None
        self.planner.observe_forecast(mapper, hashes, counts, total)
        published = self._decide(now)
        return None if published is None else Publish(published)

    def report(self, reducer: int, queue_length: int, version: int,
               keys: tuple[np.ndarray, np.ndarray, int, int] | None = None,
               backlog_s: float | None = None) -> None:
        """A reducer's queue length under ``version``, with its key arrivals if collected
        and its backlog in estimated seconds of work if measured."""
        self.queue_lengths[reducer] = int(queue_length)
        if backlog_s is not None:
            self.backlogs[reducer] = float(backlog_s)
        if self.planner is not None:
            if keys is not None:
                hashes, counts, total, held = keys
                self.planner.observe_keys(reducer, hashes, counts, total)
                self.planner.observe_held(reducer, held)
            if backlog_s is not None:
                self.planner.observe_work(reducer, float(backlog_s), version)
            self.planner.observe(reducer, queue_length, version)

    def sample(self, now: float) -> None:
        """Appends the current queue lengths to the timeline if they changed."""
        point = tuple(self.queue_lengths)
        if self.timeline and self.timeline[-1][1] == point:
            return
        self._ticks += 1
        if self._ticks % self._stride:
            return
        self.timeline.append((now, point, self.snapshot.version))
        if len(self.timeline) > self.max_samples:
            self.timeline = self.timeline[::2]
            self._stride *= 2

    def tick(self, now: float) -> Publish | ScaleOut | None:
        """Samples the timeline and evaluates the policy (then, for an elastic job, the
        scaling rule); returns the snapshot to publish or the reducers to start, if any."""
        self.sample(now)
        if self.planner is None:
            return None
        published = self._decide(now)
        if published is None and self.rule is not None and self.scaling_out is None:
            return self._scale(now)
        if published is None:
            return None
        self.sample(now)
        return Publish(published)

    def _decide(self, now: float) -> Any:
        """Runs the planner's rule; returns the snapshot it publishes, if any."""
        published = None
        decisions: list[Decision] = self.planner.check(now)
        for decision in decisions:
            self._apply(decision)
            if decision.snapshot is not None:
                published = decision.snapshot
        return published

    def _apply(self, decision: Decision) -> None:
        self.events.append(decision.event)
        if decision.snapshot is not None:
            self.snapshot = decision.snapshot

    def _scale(self, now: float) -> Publish | ScaleOut | None:
        active = self.active_slots
        verdict = self.rule.decide(now, active, {r: self.backlogs[r] for r in active},
                                   {r: self.queue_lengths[r] for r in active})
        if verdict is None:
            return None
        action, slots, reason = verdict
        seen = tuple(round(self.backlogs[r] or 0.0, 4) for r in active)
        if action == "scale_out":
            self.scaling_out = (tuple(slots), reason, seen)
            return ScaleOut(tuple(slots))
        for slot in slots:
            self._apply(self.planner.scale_in(slot, now))
        self.rule.changed(now)
        self.scaling.append(ScalingEvent(now, "scale_in", tuple(slots), len(self.active_slots), seen, reason))
        self.sample(now)
        return Publish(self.snapshot)

    def on_input_done(self) -> None:
        """Every input record is in a reducer's queue: an elastic job retires no reducer
        any more (:meth:`dpa.elastic.ScalingRule.input_done`)."""
        if self.rule is not None:
            self.rule.input_done()

    def scaled_out(self, now: float, started: list[int], refused: str | None = None) -> Publish | None:
        """The runtime carried out the last :class:`~dpa.instructions.ScaleOut`: the
        reducers of ``started`` run (and every member knows them); ``refused`` says why
        the others did not start. Returns the routing that gives the new ones tokens."""
        if self.scaling_out is None:
            return None
        slots, reason, seen = self.scaling_out
        self.scaling_out = None
        self.rule.changed(now)
        for slot in started:
            self._apply(self.planner.scale_out(slot, now))
            self.width = max(self.width, slot + 1)
        if started:
            self.scaling.append(ScalingEvent(now, "scale_out", tuple(started), len(self.active_slots), seen, reason))
        missing = tuple(s for s in slots if s not in started)
        if missing:
            why = refused or "the reducers did not start"
            logger.warning("dpa: scale-out to reducer(s) %s refused: %s; the job carries on with %d reducers",
                           list(missing), why, len(self.active_slots))
            self.scaling.append(ScalingEvent(now, "refused", missing, len(self.active_slots), seen, why))
        if not started:
            return None
        self.sample(now)
        return Publish(self.snapshot)


class CoordinatorLogic:
    """Block hand-out bookkeeping and termination by conservation.

    The job is complete when the input is exhausted, every mapper has finished, every
    item handed out was mapped and pushed (:class:`~dpa.epochs.EpochLedger`), and the
    records the reducers absorbed equal the records those items emitted (a forwarded
    record is counted once, by the reducer that absorbs it).
    """

    def __init__(self, num_mappers: int, num_reducers: int, checkpoint_interval_s: float = 0.0) -> None:
        self.num_mappers = num_mappers
        self.num_reducers = num_reducers
        self.input_done = False
        self.blocks_offered = 0
        self.mappers_done: set[int] = set()
        self.blocks_per_mapper = [0] * num_mappers
        self.processed = [0] * num_reducers  # records each reducer holds (its checkpoint included)
        self.ledger = EpochLedger(checkpoint_interval_s)
        self._pending_at_close = 0

    def on_block_taken(self, mapper: int, item: Any = None, now: float = 0.0) -> tuple[int, int]:
        """A mapper took an item (a block or a :class:`~dpa.epochs.Rest`, kept for replay)
        at ``now``; returns its ``(epoch, token)``."""
        if not isinstance(item, Rest):
            self.blocks_per_mapper[mapper] += 1
        return self.ledger.hand_out(item, now)

    def on_block_split(self, mapper: int, epoch: int, emitted: int, rest: Any, parent: int,
                       now: float) -> tuple[int, int]:
        """A mapper pushed ``emitted`` records of item ``parent`` (of ``epoch``) and goes on
        routing its ``rest`` (a :class:`~dpa.epochs.Rest`, kept for replay) in the epoch
        returned with its token."""
        return self.ledger.split(epoch, emitted, mapper, rest, parent, now)

    def on_block_done(self, mapper: int, epoch: int, emitted: int) -> None:
        """A mapper pushed every record of a block of ``epoch``: ``emitted`` records."""
        self.ledger.block_done(epoch, emitted, mapper)

    def on_mapper_done(self, mapper: int) -> None:
        self.mappers_done.add(mapper)

    def on_progress(self, reducer: int, processed: int) -> None:
        """A reducer's records absorbed so far (its checkpoint's included; reports may
        arrive out of order, so the count only grows)."""
        self.processed[reducer] = max(self.processed[reducer], processed)

    @property
    def emitted(self) -> list[int]:
        """Records emitted per mapper by the blocks the result holds (replays not counted twice)."""
        return self.ledger.emitted_by_mapper(self.num_mappers)

    def checkpoint_due(self, now: float) -> int | None:
        """The epoch to take a checkpoint of at ``now`` (:meth:`EpochLedger.closable`), or
        None; not one that would hold nothing new. The caller takes it (begun here)."""
        ledger = self.ledger
        epoch = ledger.closable(now)
        if epoch is None or (epoch == ledger.closed and not self._pending_at_close):
            return None  # (the last checkpoint again, and it had nothing pending: the same)
        ledger.begin_close(epoch, now)
        return epoch

    def on_checkpoint(self, epoch: int, absorbed: int, pending: int) -> bool:
        """The reducers' shares of a checkpoint of ``epoch`` arrived, holding ``absorbed``
        records in their states and ``pending`` ones not absorbed yet. True if that is
        every record the epochs' blocks emitted: the checkpoint is stored. Otherwise it is
        dropped (a bug; logged)."""
        expected, held = self.ledger.emitted_upto(epoch), absorbed + pending
        if held != expected:
            logger.error("dpa checkpoint of epoch %d dropped: it holds %d records, its blocks emitted %d",
                         epoch, held, expected)
            self.ledger.abandon_close()
            return False
        self.ledger.end_close(epoch)
        self._pending_at_close = pending
        return True

    def rollback(self, processed: list[int]) -> list[Any]:
        """Rolls back to the last checkpoint, whose reducers hold ``processed`` records;
        returns the blocks to hand out again (in their first order)."""
        self.mappers_done = set()
        self.processed = list(processed)
        self._pending_at_close = 0
        return self.ledger.rollback()

    @property
    def mapping_done(self) -> bool:
        return self.input_done and len(self.mappers_done) == self.num_mappers

    def complete(self) -> bool:
        """Conservation: all mappers done and every record their blocks emitted absorbed."""
        return self.mapping_done and self.ledger.all_done and sum(self.processed) == sum(self.emitted)
