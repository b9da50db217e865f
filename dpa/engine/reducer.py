"""The reducer's state machine: its bounded queue, forwarding, steps sized in time, state
migration and its share of checkpoints, plain Python.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np
import pyarrow as pa

from dpa._internal.arrays import to_numpy
from dpa.aggregates.state import make_state, split_by, split_partial
from dpa.engine.flow import PUSH_GROW, PUSH_KEEP, Chunk, top_key_counts, weight
from dpa.engine.instructions import Forward, StateMove
from dpa.engine.plan import JobPlan
from dpa.input.records import HASH_COL, WEIGHT_COL, compact, unify

#: Earlier snapshots a reducer keeps, to judge batches routed under them.
_HISTORY = 16

#: Rows of a reducer's first step, before it has measured what a row costs.
FIRST_STEP_ROWS = 16
#: A reducer step this long (or half ``step_time_s`` if less) measures its rows, not the
#: fixed cost of a step (well under a millisecond): the first such step calibrates the
#: reducer's cost per row (:attr:`ReducerLogic.calibrated`).
CALIBRATION_S = 0.01
#: Weight of the newest step in the reducer's moving estimate of its cost per row.
COST_SMOOTHING = 0.3
#: A reducer whose queue holds more than this many steps of ``step_time_s`` takes steps of
#: this fraction of its backlog instead (up to :data:`LONG_STEP_S`): a busy reducer's
#: control loop (a wake-up, a fold, a report per step) runs a few times a second, not at
#: every ``step_time_s``, while a queue near empty keeps short steps (balance and the end
#: of the job stay responsive).
LONG_QUEUE_STEPS = 4
#: The longest step a long queue gets (seconds of work).
LONG_STEP_S = 0.5
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

    Every batch belongs to an input epoch (:mod:`dpa.engine.epochs`). With checkpoints on
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
        inner = plan.aggregate
        self.cost_per_record, self.cost_mode = plan.cost.seconds_per_record, plan.cost.mode
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
        self.collect_keys = bool(plan.policy.wants_key_stats)
        self._arrivals: list[tuple[np.ndarray, np.ndarray | None]] = []
        # State migration (JobConfig.migrate="state"): the version whose owners the state was
        # last checked against (-1: a restored state is checked at the first step boundary).
        self.migrate_state = getattr(plan, "migrate", "records") == "state"
        self.swept = -1
        self.keys_moved_out = 0
        self.merged_keys = 0
        # The job's end hands the keys the final snapshot gives other owners over
        # (dpa.engine.handover): asked at the stop; the keys it handed over and, as a
        # receiver, the hashes of the keys whose partial states it merged.
        self.handover = False
        self.keys_handed = 0
        self.handover_merged = np.empty(0, np.uint32)

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
            w = to_numpy(batch[WEIGHT_COL]) if WEIGHT_COL in batch.column_names else None
            self._arrivals.append((to_numpy(batch[HASH_COL]), w))
        routed_under = None if version is None else self._history.get(version)
        if not forwarded and routed_under is not None and version < self.snapshot.version:
            version = self.snapshot.version  # what is kept below agrees with it
            dest = self.plan.policy.destinations(self.snapshot, to_numpy(batch[HASH_COL]), self.reducer_id,
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
        keys, counts, total = top_key_counts(hs, ws, int(self.plan.policy.key_stats_top))
        return keys, counts, total, self.held

    def _keys_worth_counting(self) -> bool | None:
        """Whether to count the keys that arrived now: always, unless the policy counts them
        only for backlogs worth balancing (:attr:`dpa.routing.policy.PolicySpec.key_stats_when_backlogged`,
        two steps of work or more); None = not known until a full-size step was measured."""
        if not self.plan.policy.key_stats_when_backlogged:
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
            owners = self.plan.policy.destinations(self.snapshot, to_numpy(batch[HASH_COL]), self.reducer_id, False)
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
        hashes = np.concatenate([to_numpy(b[HASH_COL]) for b in self.queue])
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
        """Rows the next step takes: what fits ``step_time_s`` at the estimated cost per row,
        or, with more than :data:`LONG_QUEUE_STEPS` steps queued, what fits a
        :data:`LONG_QUEUE_STEPS`-th of the backlog (at most :data:`LONG_STEP_S`)."""
        cap = self.plan.chunk_size
        if self.cost_per_row is None:
            return min(cap, FIRST_STEP_ROWS)
        if self.cost_per_row <= 0:
            return cap
        step_s = self.plan.step_time_s
        backlog = self.backlog_s
        if backlog is not None and step_s < LONG_STEP_S:
            step_s = max(step_s, min(LONG_STEP_S, backlog / LONG_QUEUE_STEPS))
        return int(max(1, min(cap, step_s / self.cost_per_row)))

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
            One :class:`~dpa.engine.instructions.StateMove` per (receiver, store) that gets keys.
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
        return self.plan.policy.tokens(self.snapshot, self.reducer_id) == 0

    def accept_state(self, move: StateMove) -> list[StateMove]:
        """Merges a peer's :class:`~dpa.engine.instructions.StateMove` into the store of its epochs.

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
            state = self.open_states[epoch] = make_state(self.plan.aggregate, self.plan.key_cols, self.plan.record_kind)
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
        """The reducer's share of an aggregation's result (None if it holds no keys). A
        per-group function's rows are never finalized here: its job ends in the apply phase
        (:meth:`group_units`; the coordinator's machine asks for that instead)."""
        self._fold()
        self.merged_keys = self.state.end_merge() + len(self.handover_merged)
        return self.state.finalize()

    def group_units(self, target_rows: int) -> list[Any]:
        """The groups held here packed into units for the apply phase of a per-group
        function (:meth:`dpa.aggregates.rows.RowsState.units`); ends the final merge's count."""
        self._fold()
        self.merged_keys = self.state.end_merge() + len(self.handover_merged)
        return self.state.units(target_rows)

    def counters(self) -> dict[str, int]:
        return {
            "processed": self.processed,
            "forwarded": self.forwarded,
            "received_forwards": self.received_forwards,
            "peak_queue": self.peak_queue,
            "keys_moved": self.keys_moved_out,
            "keys_handed": self.keys_handed,
            "reducer": self.reducer_id,
        }


