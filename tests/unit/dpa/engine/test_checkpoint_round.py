"""A checkpoint's three phases without Ray: answers in, asks and a verdict out; and the
same round over real reducer machines."""

from __future__ import annotations

import pyarrow as pa
import pytest

import dpa
from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.checkpoint_round import CheckpointRound
from dpa.engine.mapper import MapperLogic
from dpa.engine.planning import build_plan
from dpa.engine.reducer_machine import ReducerMachine
from dpa.input.sources import normalize_source


def share(records, pending=()):
    return (None, records, list(pending))


def test_the_three_phases_in_order_and_the_cut_waits_for_what_peers_forwarded():
    r = CheckpointRound(3, [0, 1])
    assert r.start() == [op.AskPrepare(0, 3), op.AskPrepare(1, 3)]
    assert r.handle(ev.Prepared(0, [0, 5])) == []  # (until every reducer answered)
    assert r.handle(ev.Prepared(1, [2, 0])) == [op.AskCut(0, 3, 2), op.AskCut(1, 3, 5)]
    assert r.handle(ev.CutTaken(1, share(7))) == []
    batch = pa.table({"x": [1, 2, 3]})
    out = r.handle(ev.CutTaken(0, share(10, [(batch, 3)])))
    assert out[:2] == [op.AskRelease(0), op.AskRelease(1)]
    assert out[2] == op.CheckpointTaken(3, {1: share(7), 0: share(10, [(batch, 3)])}, absorbed=17, pending=3)


def test_a_round_whose_run_ended_is_given_up_and_releases_what_it_held():
    r = CheckpointRound(0, [0, 1, 2])
    r.start()
    out = r.handle(ev.Prepared(0, [0, 0, 0]), ev.Prepared(1, None), ev.Prepared(2, [0, 0, 0]))
    assert out == [op.AskRelease(0), op.AskRelease(1), op.AskRelease(2), op.CheckpointGivenUp(0, "the run ended")]


def test_a_missing_share_gives_it_up_and_a_user_error_fails_it():
    r = CheckpointRound(1, [0, 1])
    r.start()
    r.handle(ev.Prepared(0, [0, 0]), ev.Prepared(1, [0, 0]))
    assert isinstance(r.handle(ev.CutTaken(0, share(1)), ev.CutTaken(1, None))[-1], op.CheckpointGivenUp)
    r = CheckpointRound(1, [0, 1])
    r.handle(ev.Prepared(0, [0, 0]), ev.Prepared(1, [0, 0]))
    error = ValueError("merge broke")
    assert r.handle(ev.CutTaken(0, share(1)), ev.CutTaken(1, error))[-1] == op.CheckpointFailed(1, error)


def test_an_unknown_answer_is_a_clear_error():
    with pytest.raises(TypeError, match="no int event"):
        CheckpointRound(0, [0]).handle(3)


def test_a_round_over_reducer_machines_holds_every_record_of_its_epochs():
    """Reducer 0 forwards records of epoch 0 to reducer 1 while the round runs: the cut of
    reducer 1 waits for them, and the two shares hold every record once."""
    table = pa.table({"k": list(range(40)) * 10})
    config = dpa.JobConfig(runtime="local", num_mappers=1, num_reducers=2, policy="hash", map_side_combine=False,
                           checkpoint_interval_s=1.0)
    plan, _ = build_plan(normalize_source(table, 400), "k", dpa.Count(), None, config)
    snap = plan.policy.initial_snapshot(2)
    pushes = MapperLogic(0, plan, snap).map_block(table)
    clock = lambda: 0.0  # noqa: E731
    reducers = [ReducerMachine(r, plan, snap, clock) for r in range(2)]
    for p in pushes:
        reducers[p.dest].handle(ev.PushArrived(p.dest, p.batch, snap.version, epoch=0))
    assert reducers[0].busy is not None  # (its first step holds 16 records: pending in the cut)
    # Reducer 0 passes some of its queue to reducer 1 as forwards (as after a new ring).
    moved = reducers[0].logic.queue.popleft()
    reducers[0].logic.queue_epochs.popleft()
    reducers[0].logic.routed.popleft()
    reducers[0].logic.queued -= moved.num_rows
    reducers[0].logic.queued_rows -= moved.num_rows
    forwards = [op.SendForward(1, moved, 0, snap.version)]
    reducers[0].logic.fwd_sent[(1, 0)] = moved.num_rows

    round_ = CheckpointRound(0, [0, 1])
    todo, verdict, ids = round_.start(), None, iter(range(100))
    while todo:
        ins = todo.pop(0)
        if isinstance(ins, op.AskPrepare):
            (reply,) = reducers[ins.slot].handle(ev.PrepareCheckpoint(next(ids), ins.epoch))
            todo += round_.handle(ev.Prepared(ins.slot, reply.value))
        elif isinstance(ins, op.AskCut):
            replies = [i for i in reducers[ins.slot].handle(ev.CutCheckpoint(next(ids), ins.epoch, ins.expected))
                       if isinstance(i, op.Reply)]
            if ins.slot == 1:
                assert replies == []  # the forward counted for it is still on its way
                for f in forwards:
                    replies = [i for i in reducers[1].handle(ev.PushArrived(99, f.batch, f.version, f.epoch, True))
                               if isinstance(i, op.Reply)]
            todo += round_.handle(ev.CutTaken(ins.slot, replies[0].value))
        elif not isinstance(ins, op.AskRelease):
            verdict = ins
    assert isinstance(verdict, op.CheckpointTaken)
    assert verdict.absorbed + verdict.pending == table.num_rows
