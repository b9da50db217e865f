"""The end of a job whose keys moved: the reducers hand the keys of their states that the
final routing sends elsewhere to their owners as they stop (instead of the partitioned
final merge), in the machines and the in-process runtime."""

from __future__ import annotations

import collections

import numpy as np
import pyarrow as pa
import pytest

import dpa
from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.coordinator_machine import CoordinatorMachine
from dpa.engine.mapper import MapperLogic
from dpa.engine.planning import build_plan
from dpa.engine.reducer_machine import ReducerMachine
from dpa.input.records import HASH_COL
from dpa.input.sources import normalize_source
from dpa.runtime.local import run_local


def _plan(policy, num_reducers=2, **config):
    table = pa.table({"k": [i % 40 for i in range(400)]})
    cfg = dpa.JobConfig(runtime="local", num_mappers=1, num_reducers=num_reducers, policy=policy,
                        map_side_combine=False, checkpoint_interval_s=1.0, **config)
    plan, _ = build_plan(normalize_source(table, 400), "k", dpa.Count(), None, cfg)
    return plan, table


def _ended(plan, final, first_routed=None):
    """The coordinator's end of a one-block job whose records were routed under
    ``first_routed`` (the initial snapshot's version if None), on the ``final`` routing."""
    m = CoordinatorMachine(plan, lambda: 0.0, None, finalize_at_stop=True)
    initial = plan.policy.initial_snapshot(plan.num_reducers)
    m.handle(ev.JobStarted(initial), ev.RunStarted(0.0))
    m.handle(ev.BlocksOffered(["b0"]), ev.InputExhausted(), ev.BlockWanted(0), ev.BlockFinished(0, 0, 4))
    m.handle(ev.BlockWanted(0), ev.MapperFinished(0, initial.version if first_routed is None else first_routed))
    assert m.handle(ev.ProgressReported(0, 4)) == [op.StopBalancer()]
    return m.handle(ev.BalancingEnded(final))


def test_keys_moved_on_a_ring_are_handed_over_at_the_stop_and_no_partitioned_merge_runs():
    plan, _ = _plan("halving", max_rounds=2)
    ring = plan.policy.ring(plan.num_reducers)
    ring.halve(0)  # the routing changed after the first record
    final = ring.snapshot()
    end = _ended(plan, final)
    assert end[0] == op.StopReducers((0, 1), final, False, True)
    assert not [i for i in end if isinstance(i, op.FinalMerge)]
    assert end[-2:] == [op.FinalizeReducers(), op.EndJob(True)]


def test_a_routing_that_never_changed_needs_neither_and_finalizes_at_the_stop():
    plan, _ = _plan("halving", max_rounds=2)
    final = plan.policy.initial_snapshot(plan.num_reducers)
    assert _ended(plan, final) == [op.StopReducers((0, 1), final, True, False), op.InputProgress(1.0),
                                   op.TakeFinalized(), op.EndJob(False)]


def test_a_routing_that_splits_keys_keeps_the_partitioned_merge():
    plan, _ = _plan("pkg")
    final = plan.policy.initial_snapshot(plan.num_reducers)
    end = _ended(plan, final)
    assert end[0] == op.StopReducers((0, 1), final, False, False) and op.FinalMerge((0, 1)) in end


def _reducer(plan, slot, snapshot):
    return ReducerMachine(slot, plan, snapshot, lambda: 0.0)


def _absorb(machine, batch, version):
    machine.handle(ev.PushArrived(1, batch, version))
    while machine.busy is not None:
        machine.handle(ev.StepPaid())


@pytest.mark.parametrize("held", [False, True], ids=["free", "checkpoint-under-way"])
def test_a_stopped_reducer_takes_its_foreign_keys_out_and_their_owner_merges_them_as_it_finalizes(held):
    """Reducer 0 absorbed every key, then reducer 1 took half of the ring: at the end of its
    loop 0 takes the states of the keys 1 owns out (one move, with its loop's end), and 1
    merges them as it finalizes, counting those it held too. A checkpoint under way does
    not delay it (the coordinator drops such a round)."""
    plan, table = _plan("doubling", max_rounds=2)
    initial = plan.policy.initial_snapshot(2)
    everything = pa.concat_tables([p.batch for p in MapperLogic(0, plan, initial).map_block(table)])
    ring = plan.policy.ring(2)
    ring.double_except(0)
    final = ring.snapshot()
    sender, receiver = _reducer(plan, 0, final), _reducer(plan, 1, final)
    sender.logic.snapshot = initial  # 0 owned every key when the records came
    _absorb(sender, everything, initial.version)
    owned_by_1 = final.lookup_batch(np.asarray(everything[HASH_COL])) == 1
    _absorb(receiver, everything.filter(pa.array(owned_by_1)), final.version)  # 1 has some of its keys too
    if held:
        sender.handle(ev.PrepareCheckpoint(3, 0))
    out = sender.handle(ev.Stop(final, False, True))
    assert not [i for i in out if isinstance(i, op.SendState)]  # (no peer call: the move rides the end)
    (done,) = [i for i in out if isinstance(i, op.Finished)]
    (move,) = done.handover
    assert move.dest == 1 and move.final and done.counters["keys_handed"] == move.keys > 0
    assert done.counters["keys_moved"] == 0
    (finished,) = [i for i in receiver.handle(ev.Stop(final, False, True)) if isinstance(i, op.Finished)]
    assert finished.handover == ()  # (1 holds only keys it owns)
    counts = collections.Counter()
    merged = 0
    for m, incoming in ((sender, ()), (receiver, (move.partial,))):
        ((reply),) = m.handle(ev.Finalize(9, incoming))
        table_out, keys = reply.value
        merged += keys
        counts.update(dict(zip(table_out["k"].to_pylist(), table_out["count"].to_pylist())))
        owners = final.lookup_batch(np.asarray(m.logic.state.export()[HASH_COL]))
        assert (owners == m.logic.reducer_id).all()
    expected = collections.Counter(everything["k"].to_pylist())
    for k, n in collections.Counter(everything.filter(pa.array(owned_by_1))["k"].to_pylist()).items():
        expected[k] += n
    assert counts == expected
    assert merged == move.keys  # every key handed over was held by the receiver too


def test_the_end_drops_a_checkpoint_round_under_way_when_it_hands_keys_over():
    plan, _ = _plan("halving", max_rounds=2)
    ring = plan.policy.ring(plan.num_reducers)
    ring.halve(0)
    clock = [0.0]
    m = CoordinatorMachine(plan, lambda: clock[0], None, finalize_at_stop=True)
    initial = plan.policy.initial_snapshot(plan.num_reducers)
    m.handle(ev.JobStarted(initial), ev.RunStarted(0.0))
    m.handle(ev.BlocksOffered(["b0"]), ev.BlockWanted(0), ev.BlockFinished(0, 0, 4))
    clock[0] = 1.5
    assert m.handle(ev.Tick()) == [op.StartCheckpoint(0)]
    m.handle(ev.CheckpointOpened())
    assert m.round is not None
    m.handle(ev.InputExhausted(), ev.BlockWanted(0), ev.MapperFinished(0, initial.version))
    assert m.handle(ev.ProgressReported(0, 4)) == [op.StopBalancer()]
    end = m.handle(ev.BalancingEnded(ring.snapshot()))
    assert end[0].handover and m.round is None
    assert m.handle(ev.Prepared(0, [0, 0]), ev.Prepared(1, [0, 0])) == []  # (late answers: dropped)
    assert m.checkpoints == 0


@pytest.mark.parametrize("faults", [(), ((1.2, "reducer-1"),)], ids=["plain", "recovered"])
def test_a_levelled_job_ends_by_the_hand_over_exact(faults):
    """The default policy levels the ring (trims, no hot key); the end hands the moved keys
    over: exact, merged keys counted, and after a reducer lost mid-job and a rollback."""
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 800, 16_000)
    cfg = dpa.JobConfig(runtime="local", num_reducers=8, checkpoint_interval_s=0.5)
    plan, blocks = build_plan(normalize_source(pa.table({"k": keys}), 1000), "k", dpa.WithCost(dpa.Count(), 1e-3),
                              None, cfg)
    out = run_local(plan, blocks, faults=faults)
    got = collections.Counter()
    for t in out.tables:
        if t is not None:
            got.update(dict(zip(t["k"].to_pylist(), t["count"].to_pylist())))
    assert got == collections.Counter(keys.tolist())
    assert out.merged and out.merged_keys > 0 and out.state_moves == 0
    assert any(e.action == "trim" for e in out.rebalances) or faults
    if faults:
        assert out.recoveries


def test_a_job_that_ends_with_split_hot_keys_gathers_them_at_their_ring_owner_exact():
    """The default policy splits the hot keys of a Zipf job over several reducers; the end
    is still the hand-over (each hot key's partial states meet at its ring owner), not the
    partitioned merge, and the counts are exact."""
    keys = (np.random.default_rng(5).zipf(1.3, 20_000) % 2000).astype(np.int64)
    cfg = dpa.JobConfig(runtime="local", num_reducers=8, num_mappers=1)
    plan, blocks = build_plan(normalize_source(pa.table({"k": keys}), 1000), "k", dpa.WithCost(dpa.Count(), 1e-3),
                              None, cfg)
    out = run_local(plan, blocks)
    assert plan.policy.keys_split_under(out.final_snapshot), "the workload must split a hot key"
    got = collections.Counter()
    for t in out.tables:
        if t is not None:
            got.update(dict(zip(t["k"].to_pylist(), t["count"].to_pylist())))
    assert got == collections.Counter(keys.tolist())
    assert sum(t.num_rows for t in out.tables if t is not None) == len(got)  # no key twice
    assert out.merged and out.merged_keys > 0
    end = _ended(plan, out.final_snapshot)
    assert end[0].handover and not [i for i in end if isinstance(i, op.FinalMerge)]
