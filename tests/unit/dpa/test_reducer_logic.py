"""ReducerLogic: ownership checks only where routing may be stale."""

from __future__ import annotations

import dataclasses

import pyarrow as pa

import dpa
from dpa.logic import MapperLogic, ReducerLogic
from dpa.partitioners.ring_policy import DPAPolicy
from dpa.plan import build_plan
from dpa.sources import normalize_source


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
    policy = CountingPolicy("doubling", 0.2, 1)
    plan, table = _plan(policy)
    snap = policy.initial_snapshot(plan.num_reducers)
    mapper = MapperLogic(0, plan, snap)
    reducers = [ReducerLogic(r, plan, snap) for r in range(plan.num_reducers)]
    for r, batch in mapper.map_block(table):
        reducers[r].enqueue(batch, version=snap.version)
    for red in reducers:
        while (chunk := red.take_chunk()) is not None:
            assert not chunk.forwards
            red.apply(chunk)
    assert policy.calls == []  # nothing was stale: no lookups
    assert sum(r.processed for r in reducers) == table.num_rows


def test_unknown_or_stale_routing_is_checked_and_forwarded():
    policy = CountingPolicy("doubling", 0.2, 1)
    plan, table = _plan(policy)
    snap = policy.initial_snapshot(plan.num_reducers)
    red = ReducerLogic(0, plan, snap)
    parts = MapperLogic(0, plan, snap).map_block(table)
    other = next(b for r, b in parts if r != 0)
    red.enqueue(other)  # version unknown: checked when taken
    step = red.step_rows
    chunk = red.take_chunk()
    assert policy.calls and chunk.owned is None
    assert sum(p.num_rows for _, p in chunk.forwards) == min(other.num_rows, step)
    # a ring change makes the routing of what is queued stale: adoption re-checks it
    while red.take_chunk() is not None:
        pass
    policy.calls.clear()
    mine = next(b for r, b in parts if r == 0)
    red.enqueue(mine, version=snap.version)
    planner = policy.make_planner(plan.num_reducers)
    planner.ring.redistribute(1, "doubling")
    before = red.queued
    moved = red.on_snapshot(planner.ring.snapshot())
    assert policy.calls and policy.calls[0][1] is True
    assert red.queued + sum(t.num_rows for _, t in moved) == before


@dataclasses.dataclass(frozen=True)
class HandingPolicy(DPAPolicy):
    """Hands the last two queued records to reducer 1 on every adoption."""

    def handover(self, snapshot, hashes, dest, reducer):
        dest = dest.copy()
        dest[-2:] = 1
        return dest


def test_held_counts_the_chunk_being_processed_and_adoption_applies_the_handover():
    policy = HandingPolicy("doubling", 0.2, 1)
    plan, table = _plan(policy)
    snap = policy.initial_snapshot(plan.num_reducers)
    red = ReducerLogic(0, plan, snap)
    mine = next(b for r, b in MapperLogic(0, plan, snap).map_block(table) if r == 0)
    red.enqueue(mine, version=snap.version)
    chunk = red.take_chunk()
    assert red.held == mine.num_rows  # the chunk taken off the queue still counts
    red.apply(chunk)
    assert red.held == mine.num_rows and red.processed == chunk.num_owned
    queued = red.queued
    moved = red.on_snapshot(dataclasses.replace(snap, version=snap.version + 1))  # same owners
    assert [(r, t.num_rows) for r, t in moved] == [(1, 2)]
    assert red.queued == queued - 2 and red.held == mine.num_rows - 2
