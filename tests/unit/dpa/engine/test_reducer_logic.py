"""ReducerLogic: ownership checks only where routing may be stale."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

import dpa
from dpa.engine.mapper import MapperLogic
from dpa.engine.planning import build_plan
from dpa.engine.reducer import LONG_QUEUE_STEPS, ReducerLogic
from dpa.input.sources import normalize_source
from dpa.routing.policies.ring.policy import DPAPolicy, RingSettings


@dataclasses.dataclass(frozen=True)
class CountingPolicy(DPAPolicy):
    calls: list = dataclasses.field(default_factory=list)

    def destinations(self, snapshot, hashes, reducer, adopting, previous=None):
        self.calls.append((len(hashes), adopting))
        return super().destinations(snapshot, hashes, reducer, adopting, previous)


def _plan(policy):
    table = pa.table({"k": [f"w{i % 50}" for i in range(1000)]})
    config = dpa.JobConfig(policy="doubling", max_rounds=1, runtime="local", chunk_size=64, map_side_combine=False)
    plan, _ = build_plan(normalize_source(table, 1000), "k", dpa.Count(), None, config)
    return dataclasses.replace(plan, policy=policy), table


def test_batches_routed_under_the_current_ring_skip_the_ownership_check():
    policy = CountingPolicy(RingSettings("doubling", 0.2, 1))
    plan, table = _plan(policy)
    snap = policy.initial_snapshot(plan.num_reducers)
    mapper = MapperLogic(0, plan, snap)
    reducers = [ReducerLogic(r, plan, snap) for r in range(plan.num_reducers)]
    for push in mapper.map_block(table):
        reducers[push.dest].enqueue(push.batch, version=snap.version)
    for red in reducers:
        while (chunk := red.take_chunk()) is not None:
            assert not chunk.forwards
            red.apply(chunk)
    assert policy.calls == []  # nothing was stale: no lookups
    assert sum(r.processed for r in reducers) == table.num_rows


def test_unknown_or_stale_routing_is_checked_and_forwarded():
    policy = CountingPolicy(RingSettings("doubling", 0.2, 1))
    plan, table = _plan(policy)
    snap = policy.initial_snapshot(plan.num_reducers)
    red = ReducerLogic(0, plan, snap)
    parts = MapperLogic(0, plan, snap).map_block(table)
    other = next(p.batch for p in parts if p.dest != 0)
    red.enqueue(other)  # version unknown: checked when taken
    step = red.step_rows
    chunk = red.take_chunk()
    assert policy.calls and chunk.owned is None
    assert sum(f.batch.num_rows for f in chunk.forwards) == min(other.num_rows, step)
    # a ring change makes the routing of what is queued stale: adoption re-checks it
    while red.take_chunk() is not None:
        pass
    policy.calls.clear()
    mine = next(p.batch for p in parts if p.dest == 0)
    red.enqueue(mine, version=snap.version)
    planner = policy.make_planner(plan.num_reducers)
    planner.ring.redistribute(1, "doubling")
    before = red.queued
    moved = red.on_snapshot(planner.ring.snapshot())
    assert policy.calls and policy.calls[0][1] is True
    assert red.queued + sum(f.batch.num_rows for f in moved) == before


@dataclasses.dataclass(frozen=True)
class HandingPolicy(DPAPolicy):
    """Hands the last two queued records to reducer 1 on every adoption."""

    def handover(self, snapshot, hashes, dest, reducer):
        dest = dest.copy()
        dest[-2:] = 1
        return dest


def test_held_counts_the_chunk_being_processed_and_adoption_applies_the_handover():
    policy = HandingPolicy(RingSettings("doubling", 0.2, 1))
    plan, table = _plan(policy)
    snap = policy.initial_snapshot(plan.num_reducers)
    red = ReducerLogic(0, plan, snap)
    mine = next(p.batch for p in MapperLogic(0, plan, snap).map_block(table) if p.dest == 0)
    red.enqueue(mine, version=snap.version)
    chunk = red.take_chunk()
    assert red.held == mine.num_rows  # the chunk taken off the queue still counts
    red.apply(chunk)
    assert red.held == mine.num_rows and red.processed == chunk.num_owned
    queued = red.queued
    moved = red.on_snapshot(dataclasses.replace(snap, version=snap.version + 1))  # same owners
    assert [(f.dest, f.batch.num_rows) for f in moved] == [(1, 2)]
    assert red.queued == queued - 2 and red.held == mine.num_rows - 2


# --------------------------------------------------------------------------- time-based steps


def _queued_reducer(step_time_s=0.03, chunk_size=65_536):
    policy = DPAPolicy(RingSettings("doubling", 0.2, 1))
    plan, table = _plan(policy)
    plan = dataclasses.replace(plan, step_time_s=step_time_s, chunk_size=chunk_size)
    snap = policy.initial_snapshot(plan.num_reducers)
    red = ReducerLogic(0, plan, snap)
    red.enqueue(table.append_column("__dpa_h", pa.array([0] * table.num_rows, pa.uint32())), version=snap.version)
    return red


def test_step_size_follows_the_measured_cost_per_row():
    red = _queued_reducer()
    assert red.backlog_s is None and red.step_rows == 16  # nothing measured: a small first step
    chunk = red.take_chunk()
    assert chunk.rows == 16
    red.apply(chunk)
    red.on_step(chunk.rows, 16 * 1e-3)  # 1 ms a row
    assert red.cost_per_row == 1e-3 and red.backlog_s == (1000 - 16) * 1e-3
    # a long queue (0.98 s, 33 steps of 30 ms): steps of a LONG_QUEUE_STEPS-th of it
    assert red.step_rows == int((1000 - 16) / LONG_QUEUE_STEPS)
    while red.backlog_s > LONG_QUEUE_STEPS * 0.03:  # drained to a few steps: 30 ms steps take 30 rows
        red.apply(red.take_chunk())
    assert red.step_rows == 30
    red.on_step(30, 30 * 2e-3)  # a dearer step moves the estimate part of the way
    assert 1e-3 < red.cost_per_row < 2e-3 and 15 < red.step_rows < 30
    for _ in range(50):
        red.on_step(100, 100 * 1e-7)  # cheap work: steps grow to chunk_size
    assert red.step_rows == 65_536  # 0.03 s / ~1e-7 s a row is past the cap
    red.on_step(10, 0.0)
    assert red.step_rows >= 1


def test_chunk_size_caps_the_step_and_expensive_rows_still_take_one():
    red = _queued_reducer(chunk_size=8)
    red.on_step(1, 1e-9)
    assert red.step_rows == 8
    red = _queued_reducer()
    red.on_step(1, 10.0)  # one row costs more than a step: one row at a time
    assert red.step_rows == 1
    assert red.take_chunk().rows == 1


def test_queued_rows_follow_takes_and_forwards():
    red = _queued_reducer()
    total = red.queued_rows
    chunk = red.take_chunk()
    assert red.queued_rows == total - chunk.rows == red.queued


def test_backlog_waits_for_a_full_size_step_of_a_cheap_reducer():
    red = _queued_reducer(chunk_size=256)
    red.on_step(16, 0.001)  # 16 rows in 1 ms: mostly the step's fixed cost
    assert red.backlog_s is None and red.step_rows > 16  # not reported, but the steps grow
    red.on_step(256, 0.0005)  # a full-size step (chunk_size) replaces the warm-up guess
    assert red.calibrated and red.cost_per_row == pytest.approx(0.0005 / 256)
    assert red.backlog_s == pytest.approx(red.queued_rows * 0.0005 / 256)
