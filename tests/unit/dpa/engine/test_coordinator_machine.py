"""The coordinator's protocol without Ray: events in, instructions out (block hand-out,
termination by conservation, checkpoints, recovery, scale-out)."""

from __future__ import annotations

import pyarrow as pa
import pytest

import dpa
from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.coordinator_machine import CoordinatorMachine
from dpa.engine.epochs import Checkpoint, Rest
from dpa.engine.planning import build_plan
from dpa.input.sources import normalize_source


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def machine(num_mappers=2, num_reducers=2, interval=0.0, slots=None, **options):
    """A started run's machine over a ``policy="hash"`` plan, and its clock."""
    kwargs = {k: options.pop(k) for k in ("reducer_num_cpus", "finalize_at_stop") if k in options}
    config = dpa.JobConfig(runtime="local", num_mappers=num_mappers, num_reducers=num_reducers, policy="hash",
                           checkpoint_interval_s=interval, **options)
    plan, _ = build_plan(normalize_source(pa.table({"k": [1, 2]}), None), "k", dpa.Count(), None, config)
    clock = Clock()
    m = CoordinatorMachine(plan, clock, slots, **kwargs)
    m.initial_snapshot = plan.policy.initial_snapshot(num_reducers)
    assert m.handle(ev.JobStarted(m.initial_snapshot), ev.RunStarted(0.0)) == []
    return m, clock


PENDING = pa.table({"k": [1, 2, 3, 4]})  # records queued at a reducer as its share is cut


def give(mapper, item, epoch, token):
    return op.GiveBlock(mapper, item, epoch, token)


# -- block hand-out and the end -------------------------------------------------------


def test_blocks_go_to_the_mappers_in_the_order_they_ask_and_the_job_ends_by_conservation():
    m, _ = machine()
    assert m.handle(ev.BlockWanted(1)) == [op.ReadInput()]  # (nothing offered yet: it waits)
    assert m.handle(ev.BlocksOffered(["b0", "b1", "b2"])) == [give(1, "b0", 0, 1)]
    assert m.handle(ev.BlockWanted(0)) == [give(0, "b1", 0, 2)]
    assert m.handle(ev.InputExhausted()) == []
    # Once the input is exhausted a hand-out says how much of it went out.
    assert m.handle(ev.BlockFinished(1, 0, 4), ev.BlockWanted(1)) == [give(1, "b2", 0, 3), op.InputProgress(1.0)]
    assert m.handle(ev.BlockFinished(0, 0, 3), ev.BlockWanted(0)) == [op.NoMoreBlocks(0)]
    assert m.handle(ev.MapperFinished(0, 0)) == []
    assert m.handle(ev.BlockFinished(1, 0, 2), ev.BlockWanted(1)) == [op.NoMoreBlocks(1)]
    # The last mapper's end: every record is in a queue (told once, balancer first).
    assert m.handle(ev.MapperFinished(1, 0)) == [op.TellBalancerMapped(), op.TellReducersMapped((0, 1))]
    assert m.handle(ev.ProgressReported(0, 5)) == []
    assert m.handle(ev.ProgressReported(0, 4)) == []  # (reports arrive out of order: the count only grows)
    assert m.handle(ev.ProgressReported(1, 3)) == []  # 8 of 9 records absorbed
    assert m.handle(ev.ProgressReported(1, 4)) == [op.StopBalancer()]
    assert m.handle(ev.ProgressReported(1, 4), ev.Tick()) == []  # (once)
    final = m.initial_snapshot  # (the routing never changed: no final merge)
    assert m.handle(ev.BalancingEnded(final)) == [
        op.StopReducers((0, 1), final, True), op.InputProgress(1.0), op.TakeFinalized(), op.EndJob(False)]
    assert m.emitted == [3, 6] and m.blocks_per_mapper == [1, 2] and m.processed == 9


def test_a_runtime_that_reads_its_input_on_demand_is_asked_for_one_block_at_a_time():
    m, _ = machine(finalize_at_stop=False)
    assert m.handle(ev.BlockWanted(0)) == [op.ReadInput()]
    assert m.handle(ev.BlockWanted(1)) == []  # (the read is under way)
    assert m.handle(ev.BlocksOffered(["b0"])) == [give(0, "b0", 0, 1), op.ReadInput()]
    assert m.handle(ev.InputExhausted()) == [op.NoMoreBlocks(1)]
    for mapper in (0, 1):
        m.handle(ev.BlockFinished(mapper, 0, 1) if mapper == 0 else ev.Tick(), ev.MapperFinished(mapper))
    m.handle(ev.ProgressReported(0, 1))
    end = m.handle(ev.BalancingEnded(m.initial_snapshot))
    # Reducers that cannot finalize as their loops end are asked to.
    assert end[0] == op.StopReducers((0, 1), m.initial_snapshot, False) and end[-2:] == [
        op.FinalizeReducers(), op.EndJob(False)]


def test_a_split_block_is_answered_with_its_rests_epoch_and_token():
    m, clock = machine(interval=1.0)
    m.handle(ev.BlocksOffered(["b0"]))
    (given,) = m.handle(ev.BlockWanted(0))
    clock.now = 1.5
    assert m.handle(ev.BlockCut(0, given.epoch, 6, Rest("b0/rest"), given.token)) == [op.AnswerSplit(0, (1, 2))]


def test_input_blocks_offered_but_not_mapped_fail_the_job_at_its_end():
    m, _ = machine(num_mappers=1)
    m.handle(ev.BlocksOffered(["b0", "b1"]), ev.InputExhausted())
    m.handle(ev.BlockWanted(0))
    m.logic.mappers_done.add(0)  # (a bug: the mapper ends without its second block)
    m.logic.ledger._open.clear()
    assert m.handle(ev.Tick()) == [op.StopBalancer()]
    end = m.handle(ev.BalancingEnded(m.initial_snapshot))
    (fail,) = [i for i in end if isinstance(i, op.FailJob)]
    assert end.index(fail) == 1  # (after the reducers stopped)
    assert isinstance(fail.error, RuntimeError) and str(fail.error) == "2 input blocks offered but 0 mapped"


def test_an_unknown_event_is_a_clear_error():
    m, _ = machine()
    with pytest.raises(TypeError, match="a coordinator takes no int event"):
        m.handle(3)


# -- checkpoints ----------------------------------------------------------------------


def mapped(m, clock, blocks=("b0",), emitted=10):
    """Hands ``blocks`` to mapper 0 at time 0 and finishes them; the clock at 1.5 s."""
    m.handle(ev.BlocksOffered(list(blocks)))
    for _ in blocks:
        (given,) = m.handle(ev.BlockWanted(0))
        m.handle(ev.BlockFinished(0, given.epoch, emitted))
    clock.now = 1.5


def round_to_verdict(m, shares, sent=([0, 0], [0, 0])):
    """Opens the round of a started checkpoint and answers it; the last instructions."""
    assert m.handle(ev.CheckpointOpened()) == [op.AskPrepare(0, 0), op.AskPrepare(1, 0)]
    assert m.handle(ev.Prepared(0, sent[0])) == []
    out = m.handle(ev.Prepared(1, sent[1]))
    if out[-1] != op.FetchCheckpointSnapshot():
        assert out == [op.AskCut(0, 0, sent[1][0]), op.AskCut(1, 0, sent[0][1])]
        out = m.handle(*[ev.CutTaken(slot, share) for slot, share in enumerate(shares)])
    assert out == [op.AskRelease(0), op.AskRelease(1), op.FetchCheckpointSnapshot()]
    return m.handle(ev.CheckpointSnapshot("routing"))


def test_a_checkpoint_when_an_epoch_can_close_is_stored_with_every_share():
    m, clock = machine(interval=1.0)
    mapped(m, clock)
    assert m.handle(ev.Tick()) == [op.StartCheckpoint(0)]
    assert m.handle(ev.Tick()) == []  # (never two at a time)
    (store,) = round_to_verdict(m, [("s0", 4, [(PENDING, 0)]), ("s1", 2, [])], sent=([0, 2], [0, 0]))
    assert store == op.StoreCheckpoint(Checkpoint(0, ["s0", "s1"], [4, 2], "routing", 1, [[(PENDING, 0)], []]))
    assert m.checkpoints == 0
    assert m.handle(ev.CheckpointStored(store.checkpoint)) == []  # (the runtime's stored form)
    assert m.checkpoint is store.checkpoint and m.checkpoints == 1


def test_a_checkpoint_given_up_leaves_the_previous_one_and_is_tried_again():
    m, clock = machine(interval=1.0)
    mapped(m, clock)
    m.handle(ev.Tick())
    assert round_to_verdict(m, [], sent=([0, 0], None)) == []  # (a reducer no longer serves the run)
    assert m.checkpoints == 0 and m.checkpoint.epoch == -1
    clock.now = 2.6
    assert m.handle(ev.Tick()) == [op.StartCheckpoint(0)]


def test_a_slow_checkpoint_round_spaces_out_the_next_one():
    from dpa.engine.coordinator_machine import CHECKPOINT_SPACING

    m, clock = machine(interval=1.0)
    mapped(m, clock)
    assert m.handle(ev.Tick()) == [op.StartCheckpoint(0)]
    clock.now += 2.0  # the round takes 2 s (a wide job)
    round_to_verdict(m, [], sent=([0, 0], None))
    ended = clock.now
    clock.now = ended + 1.5  # past checkpoint_interval_s, within CHECKPOINT_SPACING rounds
    assert CHECKPOINT_SPACING * 2.0 > 1.5
    assert m.handle(ev.Tick()) == []  # an epoch could close, but the last round was costly
    clock.now = ended + CHECKPOINT_SPACING * 2.0
    assert [type(i) for i in m.handle(ev.Tick())] == [op.StartCheckpoint]


def test_a_checkpoint_whose_shares_miss_records_is_dropped():
    m, clock = machine(interval=1.0)
    mapped(m, clock)
    m.handle(ev.Tick())
    assert round_to_verdict(m, [("s0", 6, []), ("s1", 3, [])]) == []  # 9 of 10 records
    assert m.checkpoint.epoch == -1


def test_user_code_raising_in_a_checkpoint_fails_the_job():
    m, clock = machine(interval=1.0)
    mapped(m, clock)
    m.handle(ev.Tick())
    error = ValueError("merge broke")
    assert round_to_verdict(m, [("s0", 10, []), error]) == [op.CheckpointFailed(0, error)]


def test_a_checkpoint_lost_with_a_member_is_abandoned_and_late_answers_dropped():
    m, clock = machine(interval=1.0)
    mapped(m, clock)
    m.handle(ev.Tick(), ev.CheckpointOpened())
    assert m.handle(ev.CheckpointLost()) == []
    assert m.handle(ev.Prepared(0, [0, 0]), ev.Prepared(1, [0, 0])) == []
    clock.now = 2.6
    assert m.handle(ev.Tick()) == [op.StartCheckpoint(0)]


def test_no_checkpoint_once_every_record_is_absorbed():
    m, clock = machine(num_mappers=1, interval=1.0)
    mapped(m, clock)
    m.handle(ev.InputExhausted(), ev.BlockWanted(0), ev.MapperFinished(0))
    assert m.handle(ev.ProgressReported(0, 10), ev.Tick()) == [op.StopBalancer()]


# -- recovery -------------------------------------------------------------------------


def checkpointed(**options):
    """b0 checkpointed (6 records absorbed, 4 pending); b1, b2 handed out after it."""
    m, clock = machine(interval=1.0, **options)
    mapped(m, clock)
    m.handle(ev.Tick())
    (store,) = round_to_verdict(m, [("s0", 6, [(PENDING, 0)]), (None, 0, [])])
    m.handle(ev.CheckpointStored(store.checkpoint))
    m.handle(ev.BlocksOffered(["b1", "b2", "b3"]), ev.BlockWanted(0), ev.BlockWanted(1))
    m.handle(ev.ProgressReported(0, 12))
    return m, clock


def test_a_lost_member_rolls_back_and_the_items_after_the_checkpoint_go_out_again_first():
    m, clock = checkpointed()
    assert m.handle(ev.MemberLost(3.0, "reducer-1: died", "mapper-0")) == []
    assert m.handle(ev.BlockWanted(0)) == []  # (no hand-out until the members are replaced)
    (restart,) = m.handle(ev.MembersReplaced(["reducer-1"], ["node-a"]))
    assert restart == op.Restart(m.checkpoint, m.initial_snapshot, False, f"{m.plan.job_id}.1")  # the balancer keeps its own routing
    (rec,) = m.recoveries
    assert (rec.at_s, rec.actors, rec.nodes, rec.error, rec.epoch) == (3.0, ["reducer-1"], ["node-a"],
                                                                       "reducer-1: died", 0)
    assert (rec.replayed_blocks, rec.replayed_records) == (2, 6)  # b1, b2; 12 - 6 records
    assert m.processed == 6  # the checkpoint's
    m.handle(ev.BlocksOffered(["b4"]))
    assert m.handle(ev.RunStarted(4.5)) == [] and rec.recover_s == 1.5
    clock.now = 5.0
    # replay order: the rolled-back items in their first order, then what was queued
    assert [i.item for i in m.handle(*[ev.BlockWanted(k % 2) for k in range(4)])] == ["b1", "b2", "b3", "b4"]


def test_a_closed_job_keeps_no_item_or_state_for_a_replay_and_its_counts():
    m, _ = checkpointed()  # b1, b2 handed out after the checkpoint, b3 queued
    counts = (m.processed, m.emitted, m.blocks_per_mapper, m.logic.ledger.blocks_done)
    assert m.handle(ev.JobClosed()) == []
    assert m.queued == 0 and m.checkpoint.states == [None, None] and m.checkpoint.pending is None
    held = [item for slot in m.logic.ledger._open.values() for item in slot.items]
    assert held == [] and m.logic.ledger.rollback() == []
    assert (m.processed, m.emitted, m.blocks_per_mapper, m.logic.ledger.blocks_done) == counts
    assert m.handle(ev.BlockWanted(0), ev.Tick()) == []  # (nothing more goes out)


def test_a_replaced_balancer_resumes_from_the_checkpoints_routing():
    m, _ = checkpointed()
    m.handle(ev.MemberLost(3.0, "balancer: died", "balancer"))
    assert m.handle(ev.MembersReplaced(["balancer", "mapper-1"], [])) == [op.Restart(m.checkpoint, "routing", True, f"{m.plan.job_id}.1")]


def test_more_failures_than_max_recoveries_fail_the_job_naming_every_one():
    m, _ = checkpointed(max_recoveries=1)
    m.handle(ev.MemberLost(3.0, "boom", "mapper-0"), ev.MembersReplaced(["reducer-1"], []))
    m.handle(ev.RunStarted(4.0))
    m.handle(ev.MemberLost(5.0, "bang", "mapper-1"))
    (fail,) = m.handle(ev.MembersReplaced([], []))  # (no member died: the one whose call failed is named)
    assert isinstance(fail, op.FailJob) and isinstance(fail.error, dpa.JobFailedError)
    assert str(fail.error) == ("dpa job failed: 2 failure(s), more than max_recoveries=1: "
                               "reducer-1 lost (boom); mapper-1 lost (bang)")
    assert fail.error.actor == "mapper-1"


def test_after_a_rollback_the_final_merge_runs_and_input_mapped_is_told_again():
    m, clock = machine(num_mappers=1)
    m.handle(ev.BlocksOffered(["b0"]), ev.InputExhausted(), ev.BlockWanted(0), ev.BlockFinished(0, 0, 4))
    assert m.handle(ev.BlockWanted(0), ev.MapperFinished(0)) == [
        op.NoMoreBlocks(0), op.TellBalancerMapped(), op.TellReducersMapped((0, 1))]
    m.handle(ev.MemberLost(1.0, "lost", "reducer-0"), ev.MembersReplaced(["reducer-0"], []), ev.RunStarted(1.0))
    assert m.handle(ev.BlockWanted(0)) == [give(0, "b0", 1, 2), op.InputProgress(1.0)]
    m.handle(ev.BlockFinished(0, 1, 4), ev.BlockWanted(0))
    assert m.handle(ev.MapperFinished(0)) == [op.TellBalancerMapped(), op.TellReducersMapped((0, 1))]
    assert m.handle(ev.ProgressReported(1, 4)) == [op.StopBalancer()]
    end = m.handle(ev.BalancingEnded(m.initial_snapshot))
    # a key's records may have been absorbed under several routings: the final merge runs
    assert end[2:] == [op.FinalMerge((0, 1)), op.FinalizeReducers(), op.EndJob(True)]
    assert m.emitted == [4] and m.blocks_per_mapper == [2]


# -- scale-out ------------------------------------------------------------------------


def test_a_scale_out_starts_the_slots_the_free_cpus_fit():
    m, _ = machine(num_reducers=4, slots=[0, 1], reducer_num_cpus=2.0)
    why = "no free CPU: 3 free, each reducer takes reducer_num_cpus=2"
    assert m.handle(ev.ScaleOutRequested([2, 3], 3.0)) == [op.StartReducers((2,), why)]
    assert m.handle(ev.ScaleOutRequested([2, 3], 1.5)) == [op.AnswerScaleOut((), why.replace("3 free", "1.5 free"))]
    assert m.handle(ev.ScaleOutRequested([2, 3], 4.0)) == [op.StartReducers((2, 3), None)]
    m, _ = machine(num_reducers=4, slots=[0, 1])
    assert m.handle(ev.ScaleOutRequested([2, 3], 0.0)) == [op.StartReducers((2, 3), None)]  # (reducers take no CPU)


def test_started_reducers_serve_the_job_and_take_part_in_its_checkpoints():
    m, clock = machine(num_reducers=4, slots=[0, 1], interval=1.0)
    assert m.handle(ev.ScaleOutStarted([2], "why")) == [op.ServeReducers((2,), 3), op.AnswerScaleOut((2,), "why")]
    assert m.job_slots == [0, 1, 2]
    mapped(m, clock)
    m.handle(ev.Tick())
    assert m.handle(ev.CheckpointOpened()) == [op.AskPrepare(0, 0), op.AskPrepare(1, 0), op.AskPrepare(2, 0)]


def test_reducers_started_after_the_input_is_mapped_are_told_so():
    m, _ = machine(num_mappers=1, num_reducers=4, slots=[0])
    m.handle(ev.BlocksOffered(["b0"]), ev.InputExhausted(), ev.BlockWanted(0), ev.BlockFinished(0, 0, 3))
    assert m.handle(ev.BlockWanted(0), ev.MapperFinished(0)) == [
        op.NoMoreBlocks(0), op.TellBalancerMapped(), op.TellReducersMapped((0,))]
    assert m.handle(ev.ScaleOutStarted([1, 2])) == [
        op.ServeReducers((1, 2), 3), op.TellReducersMapped((1, 2)), op.AnswerScaleOut((1, 2), None)]


def test_a_scale_out_that_fails_to_start_leaves_the_job_at_its_width():
    m, _ = machine(num_reducers=4, slots=[0, 1])
    assert m.handle(ev.ScaleOutFailed([2, 3], "no node")) == [op.DropReducers((2, 3)), op.AnswerScaleOut((), "no node")]
    assert m.job_slots == [0, 1]
