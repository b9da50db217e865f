"""The state machines answer events with typed instructions (Push, Forward, Publish)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

import dpa
from dpa.engine.balancer import BalancerMachine
from dpa.engine.instructions import Forward, Publish, Push
from dpa.engine.mapper import MapperLogic
from dpa.engine.planning import build_plan
from dpa.engine.reducer import ReducerLogic
from dpa.input.records import HASH_COL
from dpa.input.sources import normalize_source


def _plan(policy="doubling"):
    table = pa.table({"k": [f"w{i % 50}" for i in range(1000)]})
    config = dpa.JobConfig(policy=policy, max_rounds=1, runtime="local", chunk_size=64, map_side_combine=False,
                           policy_options={"min_gap": 0})
    plan, _ = build_plan(normalize_source(table, 1000), "k", dpa.Count(), None, config)
    return plan, table


def _publish_after_a_straggler(plan, snap, straggler=0):
    balancer = BalancerMachine(plan, snap)
    assert balancer.tick(0.0) is None  # nothing reported: nothing to publish
    for step in range(1, 20):
        for r in range(plan.num_reducers):
            balancer.report(r, 5000 if r == straggler else 10, snap.version)
        instruction = balancer.tick(step * plan.lb_interval_s)
        if instruction is not None:
            return balancer, instruction
    raise AssertionError("the balancer never acted on a straggler")


def test_a_mapper_answers_a_block_with_one_push_per_reducer():
    plan, table = _plan()
    snap = plan.policy.initial_snapshot(plan.num_reducers)
    pushes = MapperLogic(0, plan, snap).map_block(table)
    assert pushes and all(isinstance(p, Push) for p in pushes)
    assert len({p.dest for p in pushes}) == len(pushes)
    assert sum(p.batch.num_rows for p in pushes) == table.num_rows
    for p in pushes:  # each batch holds only keys its reducer owns
        owners = plan.policy.destinations(snap, p.batch[HASH_COL].to_numpy(), p.dest, False)
        assert owners is None or (np.asarray(owners) == p.dest).all()


def test_a_straggler_report_makes_the_balancer_publish_a_newer_ring():
    plan, _ = _plan()
    snap = plan.policy.initial_snapshot(plan.num_reducers)
    balancer, instruction = _publish_after_a_straggler(plan, snap)
    assert isinstance(instruction, Publish)
    assert instruction.snapshot.version > snap.version
    assert balancer.snapshot is instruction.snapshot
    assert balancer.events and balancer.events[-1].reducer == 0


def test_adopting_a_ring_answers_with_forwards_of_exactly_the_lost_keys():
    plan, table = _plan()
    snap = plan.policy.initial_snapshot(plan.num_reducers)
    reducer = ReducerLogic(0, plan, snap)
    for push in MapperLogic(0, plan, snap).map_block(table):
        if push.dest == 0:
            assert reducer.enqueue(push.batch, version=snap.version) == []  # routed under its ring
    before = reducer.queued
    _, publish = _publish_after_a_straggler(plan, snap, straggler=0)
    forwards = reducer.on_snapshot(publish.snapshot)
    assert forwards and all(isinstance(f, Forward) and f.dest != 0 for f in forwards)
    moved = sum(f.batch.num_rows for f in forwards)
    assert reducer.queued + moved == before and reducer.forwarded == moved  # nothing lost or doubled
    for f in forwards:  # every forwarded record goes to its owner under the new ring
        owners = plan.policy.destinations(publish.snapshot, f.batch[HASH_COL].to_numpy(), 0, False)
        assert (np.asarray(owners) == f.dest).all()
    assert reducer.on_snapshot(publish.snapshot) == []  # the same ring again: nothing to do
