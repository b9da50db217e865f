"""The in-process runtime: the same state machines as the Ray actors, without Ray.

It is a deterministic discrete-event simulation in *virtual* time. Mappers are
infinitely fast (blocks are handed out round-robin as mappers ask), reducers pay
their :class:`~dpa.aggregates.contract.WithCost` cost in virtual seconds, and the balancer ticks
every ``lb_interval_s`` virtual seconds. Ring updates and forwards arrive instantly.
Because nothing sleeps, a job that would take minutes on Ray with expensive reducers
runs here in milliseconds — it serves as the correctness oracle for the Ray runtime
and as a fast simulator of the load balancer.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from dpa.engine.balancer import BalancerLogic
from dpa.engine.coordinator import CoordinatorLogic
from dpa.engine.epochs import Checkpoint, Recovery, Rest
from dpa.engine.flow import PUSH_GROW, PUSH_SHRINK, Chunk, weight
from dpa.engine.instructions import Forward, Publish, Push
from dpa.engine.mapper import MapperLogic
from dpa.engine.output import DRIVER_PROGRESS_INTERVAL_S, RunOutput, needs_final_merge
from dpa.engine.plan import JobPlan
from dpa.engine.reducer import ReducerLogic

logger = logging.getLogger(__name__)


def run_local(plan: JobPlan, blocks: Iterator[pa.Table],
              progress: Callable[[int], None] | None = None,
              faults: Sequence[tuple[float, str]] = ()) -> RunOutput:
    """Runs ``plan`` over ``blocks`` in-process and returns the per-reducer outputs.

    ``progress(records_processed)`` is called about every ``DRIVER_PROGRESS_INTERVAL_S``.
    ``faults`` injects failures: at each virtual time a member (``"reducer-2"``,
    ``"mapper-0"``, ``"balancer"``) dies, and the job recovers as on Ray: every member
    rolls back to the last checkpoint (:mod:`dpa.engine.epochs`; a dead balancer restarts from
    the checkpoint's snapshot, a live one keeps its own) and the blocks after it are
    handed out again.
    """
    started = time.perf_counter()
    last_progress = started
    policy, R, M = plan.policy, plan.num_reducers, plan.num_mappers
    snapshot = policy.initial_snapshot(R)
    mappers = [MapperLogic(i, plan, snapshot) for i in range(M)]
    reducers = [ReducerLogic(i, plan, snapshot) for i in range(R)]
    balancer = BalancerLogic(plan, snapshot)
    coord = CoordinatorLogic(M, R, plan.checkpoint_interval_s)
    checkpoint = Checkpoint(-1, [None] * R, [0] * R, snapshot)
    checkpoints = 0
    recoveries: list[Recovery] = []
    replay: deque[Any] = deque()  # blocks (and rests) to hand out again after a rollback
    recovered = False

    seq = itertools.count()
    heap: list[tuple[float, int, str, int]] = []
    for i, (at, _role) in enumerate(faults):
        heapq.heappush(heap, (float(at), next(seq), "fault", i))
    busy: list[Chunk | None] = [None] * R
    now = 0.0
    pending: list[list[Push]] = [[] for _ in range(M)]  # blocked pushes per mapper
    versions = [snapshot.version] * M  # snapshot version each mapper's pending batches were routed under
    block_iter = iter(blocks)
    next_mapper = itertools.cycle(range(M))

    def report(r: int) -> None:
        balancer.report(r, reducers[r].queued, reducers[r].snapshot.version, reducers[r].take_key_stats(),
                        reducers[r].backlog_s)
        coord.on_progress(r, reducers[r].processed)

    def deliver(forwards: list[Forward]) -> None:
        for dest, batch, epoch in forwards:
            reducers[dest].enqueue(batch, forwarded=True, epoch=epoch)
            start(dest)
            report(dest)

    def move_state(r: int) -> None:
        """Hands over the keys reducer r no longer owns (migrate="state", or retired)."""
        moves = reducers[r].state_moves()
        while moves:  # (a receiver passes on keys it no longer owns)
            move = moves.pop()
            moves.extend(reducers[move.dest].accept_state(move))

    def move_idle_states() -> None:
        """Reducers not in a step hand over now (a busy one at the end of its step)."""
        for r in range(R):
            if busy[r] is None:
                move_state(r)

    def start(r: int) -> None:
        if busy[r] is not None:
            return
        chunk = reducers[r].take_chunk()
        if chunk is None:
            report(r)
            return
        busy[r] = chunk  # (first: delivering the forwards may start this reducer again)
        heapq.heappush(heap, (now + chunk.cost_s, next(seq), "done", r))
        deliver(chunk.forwards)

    def publish(new_snapshot: Any) -> None:
        for m in mappers:
            m.on_snapshot(new_snapshot)
        # Every reducer adopts before any forward is delivered (on Ray a push carrying a
        # newer version makes the receiver adopt first), so no record is judged by a
        # reducer still on the old snapshot.
        forwards = [reducers[r].on_snapshot(new_snapshot) for r in range(R)]
        for r in range(R):
            deliver(forwards[r])
            report(r)
        move_idle_states()

    block_epoch = [0] * M  # the epoch of the block mapper m is routing
    block_emitted = [-1] * M  # the records it emitted (-1 = no block)
    block_token = [0] * M  # its ledger token
    block_since = [0.0] * M  # when it was handed out
    interval = plan.checkpoint_interval_s

    outcome = [PUSH_GROW] * M  # what mapper m's current push tells it so far (ReducerLogic.push_outcome)
    tried = [False] * M  # whether the head of mapper m's pending batches reached its reducer
    outstanding = [False] * M  # whether mapper m has a push not yet fully accepted
    capacities: list[dict[int, int | None]] = [{} for _ in range(M)]  # its reducers' ReducerLogic.capacity_rows
    waiting: list[int | None] = [None] * M  # when mapper m's push began to wait for room (FIFO order)

    def push_pending(m: int) -> bool:
        """Pushes mapper m's routed batches while queues have room, routing its next push
        (under the newest snapshot) when one is done; True when its block is all sent."""
        mapper = mappers[m]
        while True:
            while pending[m]:
                dest, batch = pending[m][0]
                red = reducers[dest]
                if not tried[m]:  # what the reducer knew when the batch arrived
                    outcome[m] = max(outcome[m], red.push_outcome())
                    tried[m] = True
                if not red.has_room():
                    if red.congested:
                        outcome[m] = PUSH_SHRINK
                    if waiting[m] is None:
                        waiting[m] = next(seq)
                    return False
                waiting[m] = None
                pending[m].pop(0)
                tried[m] = False
                deliver(reducers[dest].enqueue(batch, version=versions[m], epoch=block_epoch[m]))
                capacities[m][dest] = red.capacity_rows
                start(dest)
                report(dest)
            if outstanding[m]:
                mapper.on_pushed(outcome[m], capacities[m])
                outstanding[m], outcome[m], capacities[m] = False, PUSH_GROW, {}
            if not mapper.routing:
                if block_emitted[m] >= 0:
                    coord.on_block_done(m, block_epoch[m], block_emitted[m])
                    block_emitted[m] = -1
                return True
            if interval > 0 and now - block_since[m] >= interval:
                # The epoch's time is up: the rest of the block becomes an item of its own.
                rest, records = mapper.rest()
                block_epoch[m], block_token[m] = coord.on_block_split(
                    m, block_epoch[m], block_emitted[m] - records, Rest(rest), block_token[m], now)
                block_emitted[m], block_since[m] = records, now
            pending[m] = mapper.next_pushes()
            versions[m] = mapper.snapshot.version
            outstanding[m] = True

    def feed() -> None:
        """Lets mappers pull and route blocks until input ends or every mapper is blocked."""
        progress = True
        while progress and not coord.mapping_done:
            progress = False
            # Pushes waiting for room go first, oldest first (as Ray wakes waiters), then
            # the other mappers round-robin: no mapper starves behind a full queue.
            turn = [next(next_mapper) for _ in range(M)]
            blocked = sorted((waiting[m], m) for m in range(M) if waiting[m] is not None)
            for m in [m for _, m in blocked] + [m for m in turn if waiting[m] is None]:
                if m in coord.mappers_done or not push_pending(m):
                    continue
                block = replay.popleft() if replay else next(block_iter, None)
                if block is None:
                    coord.input_done = True
                    coord.on_mapper_done(m)
                    progress = True
                    continue
                block_epoch[m], block_token[m] = coord.on_block_taken(m, block, now)
                block_since[m] = now
                before = mappers[m].emitted
                if isinstance(block, Rest):
                    mappers[m].start_block(block.table, prepared=True)
                else:
                    mappers[m].start_block(block)
                    forecast = mappers[m].take_forecast()
                    if forecast is not None:  # the mapper routes under what the balancer makes of it
                        published = balancer.forecast(m, *forecast, now)
                        if published is not None:
                            publish(published.snapshot)
                block_emitted[m] = mappers[m].emitted - before
                push_pending(m)
                progress = True

    def take_checkpoint() -> None:
        nonlocal checkpoint, checkpoints
        epoch = coord.checkpoint_due(now)
        if epoch is None:
            return
        sent = [red.prepare_checkpoint(epoch) for red in reducers]
        for r, red in enumerate(reducers):  # (forwards arrive at once here)
            if red.forwards_received(epoch) != sum(s[r] for s in sent):
                raise RuntimeError(f"reducer {r} received other forwards than were sent (bug)")
        parts = [red.checkpoint(epoch) for red in reducers]
        pending = sum(weight(b) for _, _, batches in parts for b, _ in batches)
        if coord.on_checkpoint(epoch, sum(p[1] for p in parts), pending):
            checkpoint = Checkpoint(epoch, [p[0] for p in parts], [p[1] for p in parts], balancer.snapshot,
                                    coord.ledger.blocks_closed, [p[2] for p in parts])
            checkpoints += 1
        for red in reducers:
            deliver(red.release_held())
        move_idle_states()

    def recover(role: str) -> None:
        """Every member rolls back to the last checkpoint; its later blocks go out again."""
        nonlocal balancer, recovered
        recovered = True
        replayed_records = max(0, sum(coord.processed) - sum(checkpoint.processed))
        items = coord.rollback(checkpoint.processed)
        replay.extendleft(reversed(items))
        if role == "balancer":
            balancer = BalancerLogic(plan, checkpoint.snapshot, resume=True)
        snap = balancer.snapshot
        reducers[:] = [ReducerLogic(i, plan, snap) for i in range(R)]
        for i, red in enumerate(reducers):  # (a copy: the checkpoint may be restored again)
            red.restore(copy.deepcopy(checkpoint.states[i]), checkpoint.processed[i], checkpoint.epoch,
                        checkpoint.pending[i] if checkpoint.pending else ())
        mappers[:] = [MapperLogic(i, plan, snap) for i in range(M)]
        busy[:] = [None] * R
        heap[:] = [e for e in heap if e[2] != "done"]
        heapq.heapify(heap)
        for m in range(M):
            pending[m], versions[m], block_emitted[m], waiting[m] = [], snap.version, -1, None
            outcome[m], tried[m], outstanding[m], capacities[m] = PUSH_GROW, False, False, {}
        recoveries.append(Recovery(now, [role], [], "injected", checkpoint.epoch, len(items), replayed_records, 0.0))

    feed()
    heapq.heappush(heap, (plan.lb_interval_s, next(seq), "tick", -1))
    while not coord.complete():
        if not heap:
            feed()
            if not heap and not coord.complete():
                idle = [r for r in range(R) if busy[r] is None and reducers[r].queued]
                if not idle:
                    raise RuntimeError("local runtime stalled: queues full and no reducer running (bug)")
                for r in idle:
                    start(r)
            continue
        now, _, kind, r = heapq.heappop(heap)
        if kind == "done":
            chunk = busy[r]
            busy[r] = None
            reducers[r].apply(chunk)
            reducers[r].on_step(chunk.rows, chunk.cost_s)  # virtual time: the cost is the step's time
            move_state(r)
            report(r)
            take_checkpoint()
            start(r)
            feed()
            if progress is not None and time.perf_counter() - last_progress >= DRIVER_PROGRESS_INTERVAL_S:
                last_progress = time.perf_counter()
                progress(sum(coord.processed))
        elif kind == "tick":
            if coord.mapping_done:
                balancer.on_input_done()
            instruction = balancer.tick(now)
            if instruction is not None and not isinstance(instruction, Publish):  # ScaleOut: slots start at once
                instruction = balancer.scaled_out(now, list(instruction.slots))
            if instruction is not None:
                publish(instruction.snapshot)
            if not coord.complete() and any(b is not None for b in busy):
                heapq.heappush(heap, (now + plan.lb_interval_s, next(seq), "tick", -1))
        elif kind == "fault":
            recover(faults[r][1])
            feed()
            for i in range(R):
                start(i)
            if not any(e[2] == "tick" for e in heap):
                heapq.heappush(heap, (now + plan.lb_interval_s, next(seq), "tick", -1))

    # Every state hand-over under the final routing is done before the merge (nothing is
    # queued any more: only states move).
    for r in range(R):
        reducers[r].on_snapshot(balancer.snapshot)
        move_state(r)
    # After a rollback a key's records may have been absorbed under several routings (with
    # migrate="state" its state follows it whatever happened).
    merged = ((recovered and plan.migrate != "state")
              or needs_final_merge(policy, snapshot, balancer.snapshot, plan.migrate,
                                   min((m.first_routed for m in mappers if m.first_routed is not None),
                                       default=None)))
    if merged:
        parts = [red.partition_state() for red in reducers]
        for src in range(R):
            for dest in range(R):
                reducers[dest].merge_partial(parts[src][dest])
    tables = [red.finalize() for red in reducers]
    # (an elastic job: the slots that took part; a replaced balancer knows only its own)
    width = max(balancer.width, max((i + 1 for i, red in enumerate(reducers) if red.processed or red.forwarded),
                                    default=0))
    return RunOutput(
        tables=tables[:width],
        processed=[red.processed for red in reducers[:width]],
        forwarded=[red.forwarded for red in reducers[:width]],
        emitted=coord.emitted,
        blocks_per_mapper=list(coord.blocks_per_mapper),
        events=list(balancer.events),
        timeline=list(balancer.timeline),
        final_snapshot=balancer.snapshot,
        merged=merged,
        wall_time_s=time.perf_counter() - started,
        virtual_time_s=now,
        peak_queue=[red.peak_queue for red in reducers[:width]],
        recoveries=recoveries,
        checkpoints=checkpoints,
        merged_keys=sum(red.merged_keys for red in reducers),
        state_moves=sum(red.keys_moved_out for red in reducers),
        scaling=list(balancer.scaling),
    )
