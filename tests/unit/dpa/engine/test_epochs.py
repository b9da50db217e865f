"""The epoch ledger and the reducer's per-epoch states: the checkpoint/replay protocol, no Ray."""

from __future__ import annotations

import pyarrow as pa
import pytest

import dpa
from dpa.engine.coordinator import CoordinatorLogic
from dpa.engine.epochs import EpochLedger, Rest
from dpa.engine.instructions import Forward
from dpa.engine.planning import build_plan
from dpa.engine.reducer import ReducerLogic
from dpa.input.records import HASH_COL
from dpa.input.sources import normalize_source


def test_a_checkpoint_is_due_every_interval_of_the_newest_epoch_whose_blocks_are_all_pushed():
    ledger = EpochLedger(interval_s=1.0)
    assert ledger.hand_out("b0", 0.0)[0] == 0
    assert ledger.hand_out("b1", 0.5)[0] == 0
    ledger.block_done(0, 10)
    assert ledger.closable(1.5) is None  # b1 is not pushed yet
    ledger.block_done(0, 5)
    assert ledger.closable(0.9) is None  # not an interval since the job started
    assert ledger.closable(1.0) == 0  # its records may still be queued: the checkpoint holds them
    ledger.begin_close(0, 1.0)
    assert ledger.hand_out("b2", 1.1)[0] == 1  # later blocks belong to a later epoch
    ledger.end_close(0)
    assert ledger.emitted_upto(0) == 15
    assert ledger.closable(1.9) is None  # one interval after the last one
    assert ledger.closable(2.0) == 0  # b2 is not pushed: epoch 0 again (more of it absorbed)
    ledger.block_done(1, 3)
    assert ledger.closable(2.0) == 1


def test_a_block_not_yet_done_keeps_its_epoch_and_every_later_one_open():
    ledger = EpochLedger(interval_s=1.0)
    ledger.hand_out("b0", 0.0)
    ledger.hand_out("b1", 1.0)
    ledger.hand_out("b2", 2.0)
    ledger.block_done(1, 4)
    assert ledger.closable(3.0) is None  # epoch 1 is complete, but epoch 0 is not
    ledger.block_done(0, 2)
    assert ledger.closable(3.0) == 1
    assert ledger.emitted_upto(1) == 6 and ledger.emitted_upto(0) == 2


def test_rollback_replays_exactly_the_blocks_after_the_checkpoint_in_their_order():
    ledger = EpochLedger(interval_s=1.0)
    for i, t in enumerate([0.0, 0.5, 1.0, 1.5, 2.0]):
        ledger.hand_out(f"b{i}", t)
    for epoch in (0, 0, 1, 1):
        ledger.block_done(epoch, 1)
    assert ledger.closable(2.5) == 1
    ledger.begin_close(0, 2.5)
    assert ledger.closable(9.0) is None  # one checkpoint at a time
    ledger.end_close(0)
    assert ledger.blocks_closed == 2 and ledger.emitted_upto(0) == 2 and ledger.emitted_upto(1) == 4
    assert ledger.rollback() == ["b2", "b3", "b4"]
    assert ledger.epoch == 3 and ledger.open_blocks == 0
    assert ledger.hand_out("b2", 9.0)[0] == 3


def test_no_checkpoints_when_the_interval_is_zero():
    ledger = EpochLedger(interval_s=0)
    assert {ledger.hand_out(i, float(i))[0] for i in range(5)} == {0}
    for _ in range(5):
        ledger.block_done(0, 1)
    assert ledger.all_done and ledger.closable(9.0) is None
    assert ledger.rollback() == [0, 1, 2, 3, 4]


def test_coordinator_counts_emitted_records_once_across_a_rollback():
    coord = CoordinatorLogic(num_mappers=2, num_reducers=1, checkpoint_interval_s=1.0)
    assert coord.on_block_taken(0, "b0", 0.0)[0] == 0
    coord.on_block_done(0, 0, 10)
    assert coord.on_block_taken(1, "b1", 1.5)[0] == 1
    assert coord.checkpoint_due(1.6) == 0
    assert coord.on_checkpoint(0, 6, 4)
    coord.on_block_done(1, 1, 7)
    coord.on_progress(0, 14)
    assert coord.rollback([6]) == ["b1"]  # the checkpoint: 6 absorbed, 4 pending
    assert coord.emitted == [10, 0] and coord.processed == [6]
    coord.on_block_taken(1, "b1", 5.0)
    coord.on_block_done(1, 2, 7)
    coord.input_done = True
    coord.on_mapper_done(0)
    coord.on_mapper_done(1)
    coord.on_progress(0, 16)
    assert not coord.complete()  # one record is still queued
    coord.on_progress(0, 17)
    assert coord.complete() and coord.emitted == [10, 7]


def test_a_checkpoint_that_does_not_hold_every_record_is_dropped():
    coord = CoordinatorLogic(num_mappers=1, num_reducers=1, checkpoint_interval_s=1.0)
    coord.on_block_taken(0, "b0", 0.0)
    coord.on_block_done(0, 0, 10)
    coord.on_block_taken(0, "b1", 1.5)
    assert coord.checkpoint_due(1.6) == 0
    assert not coord.on_checkpoint(0, 9, 2)  # a record counted twice
    assert coord.ledger.closed == -1 and coord.ledger.closable(2.6) == 0  # it may be taken again


def test_a_checkpoint_of_the_last_epoch_again_only_when_it_had_records_pending():
    coord = CoordinatorLogic(num_mappers=1, num_reducers=1, checkpoint_interval_s=1.0)
    coord.on_block_taken(0, "b0", 0.0)
    coord.on_block_done(0, 0, 10)
    assert coord.checkpoint_due(1.0) == 0 and coord.on_checkpoint(0, 2, 8)
    assert coord.checkpoint_due(2.5) == 0  # records were pending: more of them are absorbed now
    assert coord.on_checkpoint(0, 10, 0)
    assert coord.checkpoint_due(3.0) is None  # nothing was pending: the same checkpoint


def test_a_split_block_is_done_with_what_it_pushed_and_its_rest_opens_in_the_current_epoch():
    ledger = EpochLedger(interval_s=1.0)
    epoch, block = ledger.hand_out("b0", 0.0)
    assert epoch == 0
    epoch, rest = ledger.split(0, 6, 0, Rest("r0"), block, 1.0)  # the epoch's time is up
    assert epoch == 1 and rest != block
    assert ledger.closable(1.0) == 0  # the pushed part closes without waiting for the rest
    assert not ledger.all_done
    ledger.block_done(1, 4)
    assert ledger.all_done and ledger.blocks_done == 1  # a rest is not an input block
    assert ledger.emitted_by_mapper(1) == [10]


def test_rollback_replays_a_split_block_whole_and_drops_its_rests():
    ledger = EpochLedger(interval_s=1.0)
    _, b0 = ledger.hand_out("b0", 0.0)
    _, r1 = ledger.split(0, 3, 0, Rest("b0/1"), b0, 1.0)
    ledger.split(1, 3, 0, Rest("b0/2"), r1, 2.0)
    ledger.hand_out("b1", 2.5)
    assert ledger.rollback() == ["b0", "b1"]  # b0 yields its rests again


def test_rollback_replays_the_rest_of_a_checkpointed_block():
    ledger = EpochLedger(interval_s=1.0)
    _, b0 = ledger.hand_out("b0", 0.0)
    _, r1 = ledger.split(0, 3, 0, Rest("b0/1"), b0, 1.0)
    ledger.end_close(ledger.closable(1.5))
    ledger.split(1, 2, 0, Rest("b0/2"), r1, 2.0)
    assert ledger.blocks_closed == 1
    assert ledger.rollback() == [Rest("b0/1")]  # its own rest b0/2 comes back from it
    ledger.hand_out(Rest("b0/1"), 3.0)  # replayed: still a rest, not an input block
    ledger.block_done(ledger.epoch, 2)
    assert ledger.blocks_done == 1


def test_the_coordinator_counts_input_blocks_not_rests():
    coord = CoordinatorLogic(num_mappers=1, num_reducers=1, checkpoint_interval_s=1.0)
    _, token = coord.on_block_taken(0, "b0", 0.0)
    coord.on_block_split(0, 0, 5, Rest("b0/1"), token, 1.5)
    coord.on_block_taken(0, Rest("b0/1"), 3.0)  # (replayed)
    assert coord.blocks_per_mapper == [1]


class Listing(dpa.Reducer):
    """A user-defined reducer whose accumulator is mutated in place."""

    def create(self):
        return []

    def add(self, acc, value):
        acc.append(value)
        return acc

    def merge(self, a, b):
        a.extend(b)
        return a

    def finalize(self, acc):
        return sorted(acc)


def _reducer(reducer, interval=1.0):
    table = pa.table({"k": ["a", "b", "c"]})
    config = dpa.JobConfig(policy="hash", runtime="local", checkpoint_interval_s=interval, map_side_combine=False)
    plan, _ = build_plan(normalize_source(table, 10), "k", reducer, None, config)
    return ReducerLogic(0, plan, plan.policy.initial_snapshot(plan.num_reducers))


def _batch(keys):
    return pa.table({"k": keys, HASH_COL: pa.array([dpa.hash_key(k) for k in keys], pa.uint32())})


def _drain(red):
    while (chunk := red.take_chunk()) is not None:
        red.apply(chunk)


@pytest.mark.parametrize("reducer", [dpa.Count(), Listing("k", name="all")], ids=["columnar", "user"])
def test_a_reducer_keeps_epochs_apart_and_a_checkpoint_holds_the_closed_ones_only(reducer):
    red = _reducer(reducer)
    red.enqueue(_batch(["a", "b"]), epoch=0)
    red.enqueue(_batch(["a", "c", "c"]), epoch=1)
    chunk = red.take_chunk()
    assert chunk.epoch == 0 and chunk.rows == 2  # a chunk stops where the next epoch starts
    red.apply(chunk)
    _drain(red)
    assert red.by_epoch == {0: 2, 1: 3}
    state, records, pending = red.checkpoint(0)
    assert records == 2 and pending == [] and red.by_epoch == {1: 3} and red.closed == 0

    fresh = _reducer(reducer)
    fresh.restore(state, records, 0)
    assert fresh.processed == 2
    full = red.finalize().sort_by("k").to_pylist()
    restored = fresh.finalize().sort_by("k").to_pylist()
    assert len(full) == 3 and len(restored) == 2
    assert restored[0]["k"] == "a" and {r["k"] for r in restored} == {"a", "b"}
    if isinstance(reducer, dpa.Count):
        assert full == [{"k": "a", "count": 2}, {"k": "b", "count": 1}, {"k": "c", "count": 2}]
        assert restored == [{"k": "a", "count": 1}, {"k": "b", "count": 1}]


def test_a_checkpoint_holds_the_pending_records_of_its_epochs_queued_being_applied_and_held_back():
    red = _reducer(dpa.Count(), interval=1.0)
    red.plan.chunk_size = 1  # (one row per step)
    for keys, epoch in ((["a"], 0), (["b"], 0), (["c"], 1), (["a"], 0)):
        red.enqueue(_batch(keys), epoch=epoch)
    red.apply(red.take_chunk())  # "a" of epoch 0 absorbed
    taken = red.take_chunk()  # "b" of epoch 0 being applied
    assert red.prepare_checkpoint(0) == [0, 0, 0, 0]  # nothing forwarded yet
    held = Forward(1, _batch(["z"]), 0)
    assert red._release([held, Forward(1, _batch(["y"]), 1)]) == [Forward(1, _batch(["y"]), 1)]
    state, records, pending = red.checkpoint(0)
    assert records == 1
    assert sorted((b["k"].to_pylist()[0], e) for b, e in pending) == [("a", 0), ("b", 0), ("z", 0)]
    red.apply(taken)  # after the cut: the share does not change
    assert [f.batch["k"].to_pylist() for f in red.release_held()] == [["z"]]
    assert red.prepare_checkpoint(0) == [0, 1, 0, 0]  # the released forward counts as sent

    fresh = _reducer(dpa.Count(), interval=1.0)
    fresh.restore(state, records, 0, pending)
    assert fresh.queued == 3 and fresh.processed == 1
    _drain(fresh)
    assert sorted(fresh.finalize().to_pylist(), key=lambda r: r["k"]) == [
        {"k": "a", "count": 2}, {"k": "b", "count": 1}, {"k": "z", "count": 1}]


def test_a_checkpoint_of_a_user_reducer_is_a_copy_that_later_adds_do_not_change():
    red = _reducer(Listing("k", name="all"))
    red.enqueue(_batch(["a"]), epoch=0)
    _drain(red)
    state, _, _ = red.checkpoint(0)
    red.enqueue(_batch(["a"]), epoch=1)
    _drain(red)
    red.checkpoint(1)
    assert [acc for _, _, acc in state[0]] == [["a"]]


def test_without_checkpoints_everything_goes_into_one_state():
    red = _reducer(dpa.Count(), interval=0)
    red.enqueue(_batch(["a"]))
    red.enqueue(_batch(["a"]))
    _drain(red)
    assert red.open_states == {} and red.by_epoch == {0: 2}
