"""What the coordinator machine decides for its runtimes beyond the hand-out: the
back-pressure on the driver's offers, the runs of a job (their names, which run's messages
count), a job cancelled from outside, and the result's width."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

import dpa
from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.coordinator_machine import CoordinatorMachine
from dpa.engine.planning import build_plan
from dpa.errors import JobFailedError
from dpa.input.sources import normalize_source


def machine(max_pending=None, num_mappers=2, num_reducers=2, slots=None, **options) -> CoordinatorMachine:
    """A started first run of job ``"job"`` (``policy="hash"`` unless said)."""
    options.setdefault("policy", "hash")
    config = dpa.JobConfig(runtime="local", num_mappers=num_mappers, num_reducers=num_reducers, **options)
    plan, _ = build_plan(normalize_source(pa.table({"k": [1, 2]}), None), "k", dpa.Count(), None, config)
    m = CoordinatorMachine(dataclasses.replace(plan, job_id="job"), lambda: 0.0, slots, max_pending=max_pending)
    m.handle(ev.JobStarted("routing"), ev.RunStarted(0.0))
    return m


# -- back-pressure ------------------------------------------------------------------


def test_an_offer_waits_while_max_pending_items_are_queued_and_is_taken_when_one_goes_out():
    m = machine(max_pending=2)
    assert m.handle(ev.BlocksOffered(["b0", "b1"], 0, "job")) == [op.AnswerOffer(0, True)]
    assert m.handle(ev.BlocksOffered(["b2"], 1, "job")) == []  # (two queued: held back)
    assert m.handle(ev.BlocksOffered(["b3"], 2, "job")) == []  # (behind the one held)
    given = m.handle(ev.BlockWanted(0, 10))
    # One went out: the first held offer is taken; the second still waits (two queued again).
    assert given[0] == op.GiveBlock(0, "b0", 0, 1, 10) and given[1:] == [op.AnswerOffer(1, True)]
    assert m.queued == 2
    assert m.handle(ev.BlockWanted(1, 11))[1:] == [op.AnswerOffer(2, True)]


def test_a_held_offer_goes_straight_to_a_waiting_mapper():
    m = machine(max_pending=1)
    m.handle(ev.BlocksOffered(["b0"], 0, "job"))
    assert m.handle(ev.BlocksOffered(["b1"], 1, "job")) == []
    out = m.handle(ev.BlockWanted(0, 5), ev.BlockWanted(1, 6))
    assert [type(i) for i in out] == [op.GiveBlock, op.AnswerOffer, op.GiveBlock]
    assert out[2].item == "b1" and out[2].request == 6 and m.queued == 0


def test_offers_are_refused_once_the_job_is_aborted_or_closed_or_of_another_job():
    m = machine(max_pending=1)
    m.handle(ev.BlocksOffered(["b0"], 0, "job"))
    assert m.handle(ev.BlocksOffered(["b1"], 1, "job")) == []
    assert m.handle(ev.BlocksOffered(["x"], 2, "an earlier job")) == [op.AnswerOffer(2, False)]
    assert m.handle(ev.JobAborted()) == [op.AnswerOffer(1, False)]  # (the one held)
    assert m.handle(ev.BlocksOffered(["b2"], 3, "job")) == [op.AnswerOffer(3, False)]
    closed = machine(max_pending=1)
    closed.handle(ev.BlocksOffered(["b0"], 0, "job"), ev.BlocksOffered(["b1"], 1, "job"))
    assert closed.handle(ev.JobClosed()) == [op.AnswerOffer(1, False)]


def test_an_offer_without_an_id_is_taken_at_once_whatever_is_queued():
    m = machine(max_pending=1)
    assert m.handle(ev.BlocksOffered(["b0", "b1", "b2"])) == [] and m.queued == 3


def test_input_exhausted_of_another_job_is_ignored():
    m = machine()
    m.handle(ev.InputExhausted("an earlier job"), ev.BlockWanted(0, 1))
    assert m.handle(ev.InputExhausted("job")) == [op.NoMoreBlocks(0, 1)]


# -- runs -----------------------------------------------------------------------------


def lose_and_restart(m: CoordinatorMachine) -> op.Restart:
    m.handle(ev.MemberLost(1.0, "reducer-1: died", "reducer-1"))
    (restart,) = m.handle(ev.MembersReplaced(["reducer-1"], []))
    return restart


def test_each_recovery_is_a_new_run_and_only_the_current_runs_messages_count():
    m = machine(max_recoveries=2)
    assert m.run_id == "job"
    m.handle(ev.BlocksOffered(["b0", "b1", "b2"]))
    assert m.handle(ev.FromRun("job", (ev.BlockWanted(0, 1),)))[0].item == "b0"
    restart = lose_and_restart(m)
    assert restart.run_id == m.run_id == "job.1"
    # While the new run is not started nothing of either run counts.
    assert m.handle(ev.FromRun("job.1", (ev.BlockWanted(0, 2),))) == [op.NoMoreBlocks(0, 2)]
    m.handle(ev.RunStarted(2.0))
    stale = (ev.BlockFinished(0, 0, 5), ev.ProgressReported(0, 5), ev.BlockWanted(1, 3),
             ev.BlockCut(0, 0, 2, "rest", 1, 4), ev.ScaleOutRequested([2], 4.0), ev.ScaleOutStarted([2]))
    assert m.handle(ev.FromRun("job", stale)) == [
        op.NoMoreBlocks(1, 3), op.AnswerSplit(0, None, 4), op.AnswerScaleOut((), "the run ended"),
        op.AnswerScaleOut((), "the run ended")]
    assert m.processed == 0 and m.logic.ledger.blocks_done == 0
    replayed = m.handle(ev.FromRun("job.1", (ev.BlockWanted(1, 5),)))[0]
    assert (replayed.mapper, replayed.item, replayed.request) == (1, "b0", 5)  # (replayed first)
    m.handle(ev.FromRun("job.1", (ev.ProgressReported(0, 7),)))
    assert m.processed == 7
    assert lose_and_restart(m).run_id == "job.2"


def test_a_failed_scale_out_of_an_ended_run_still_stops_its_reducers():
    m = machine(slots=[0])
    lose_and_restart(m)
    assert m.handle(ev.FromRun("job", (ev.ScaleOutFailed([1], "no node"),))) == [
        op.DropReducers((1,)), op.AnswerScaleOut((), "no node")]


def test_an_aborted_job_takes_no_message_and_cannot_start():
    m = machine()
    assert m.handle(ev.CancelRequested("another job", "timeout")) == []
    assert m.handle(ev.CancelRequested("job", "timeout")) == [op.AbortJob("timeout")]
    assert m.serving == "job"
    m.handle(ev.JobAborted())
    assert m.serving is None
    assert m.handle(ev.CancelRequested("job", "again")) == []  # (once)
    assert m.handle(ev.FromRun("job", (ev.BlockWanted(0, 1),))) == [op.NoMoreBlocks(0, 1)]
    (fail,) = m.handle(ev.RunJob("job"))
    assert isinstance(fail, op.FailJob) and isinstance(fail.error, JobFailedError)
    assert "cancelled before it started" in str(fail.error)
    assert machine().handle(ev.RunJob("job")) == []


# -- the result's width ---------------------------------------------------------------


@pytest.mark.parametrize("counters, width", [
    ({0: {"processed": 3, "forwarded": 0}, 1: {"processed": 0, "forwarded": 0}}, 2),  # every slot that served
    ({0: {"processed": 3, "forwarded": 0}}, 2),
    ({0: {"processed": 3, "forwarded": 0}, 3: {"processed": 0, "forwarded": 2}}, 4),  # and every one that worked
])
def test_the_result_covers_every_slot_that_served_the_job_or_worked(counters, width):
    assert machine().result_width(counters) == width


def test_an_elastic_jobs_result_covers_its_first_reducers_and_those_it_started():
    m = machine(num_reducers=2, max_reducers=6, min_reducers=2, policy="halving")
    assert m.result_width({}) == 2
    m.handle(ev.ScaleOutStarted([2, 3]))
    assert m.result_width({0: {"processed": 1, "forwarded": 0}}) == 4
