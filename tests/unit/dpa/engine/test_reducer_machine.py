"""The reducer's protocol without Ray: events in, instructions out (as dask's worker state
machine tests do). Push back-pressure, steps, reports and progress, checkpoint phases,
fetching a newer snapshot, the loop's end and the final merge."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest

import dpa
from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.flow import PUSH_GROW, PUSH_KEEP, PUSH_SHRINK
from dpa.engine.mapper import MapperLogic
from dpa.engine.planning import build_plan
from dpa.engine.reducer_machine import PROGRESS_INTERVAL_S, REPORT_FRACTION, ReducerMachine
from dpa.input.sources import normalize_source


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def setup(reducer=None, **config):
    table = pa.table({"k": [i % 40 for i in range(4000)]})
    fields = dict(runtime="local", num_mappers=1, num_reducers=2, policy="hash", map_side_combine=False,
                  chunk_size=64)
    fields.update(config)
    plan, _ = build_plan(normalize_source(table, 4000), "k", reducer or dpa.Count(), None, dpa.JobConfig(**fields))
    snap = plan.policy.initial_snapshot(plan.num_reducers)
    mapper = MapperLogic(0, plan, snap)
    pushes = mapper.map_block(table)
    clock = Clock()
    return plan, snap, clock, ReducerMachine(0, plan, snap, clock), pushes


def kinds(instructions):
    return [type(i).__name__ for i in instructions]


def of(instructions, cls):
    return [i for i in instructions if isinstance(i, cls)]


def test_a_push_to_an_idle_reducer_is_answered_and_starts_a_step():
    plan, snap, clock, m, pushes = setup()
    batch = next(p.batch for p in pushes if p.dest == 0)
    out = m.handle(ev.PushArrived(7, batch, snap.version))
    answer = of(out, op.AnswerPush)
    assert answer == [op.AnswerPush(7, PUSH_KEEP, None)]  # no cost measured yet: keep the push size
    steps = of(out, op.PayStep)
    assert len(steps) == 1 and steps[0].mode == "sleep"
    assert m.busy is not None and m.busy.rows == 16  # the first step is small (its cost is unknown)
    assert kinds(m.handle(ev.PushArrived(8, batch, snap.version))) == []  # no room: the push waits


def test_a_waiting_push_is_answered_when_steps_free_room_and_learns_it_waited_for_work():
    plan, snap, clock, m, pushes = setup(reducer=dpa.WithCost(dpa.Count(), seconds_per_record=0.001),
                                         queue_time_s=0.05, step_time_s=0.01)
    batch = next(p.batch for p in pushes if p.dest == 0)
    m.handle(ev.PushArrived(1, batch.slice(0, 200), snap.version))
    for _ in range(3):  # measured steps: the queue is bounded in seconds of work now
        clock.t += m.busy.cost_s
        m.handle(ev.StepPaid())
    assert m.logic.calibrated and not m.logic.has_room()
    assert m.handle(ev.PushArrived(2, batch.slice(200, 200), snap.version)) == []  # waits for room
    answers = []
    while not answers:
        clock.t += m.busy.cost_s
        answers = of(m.handle(ev.StepPaid()), op.AnswerPush)
    assert answers == [op.AnswerPush(2, PUSH_SHRINK, m.logic.capacity_rows)]  # a full queue: shrink
    assert m.handle(ev.PushArrived(3, batch.slice(400, 1), snap.version)) == []  # full again: waits behind


def test_a_calibrated_reducer_with_room_tells_the_mapper_to_grow():
    plan, snap, clock, m, pushes = setup(reducer=dpa.WithCost(dpa.Count(), seconds_per_record=0.0001))
    batch = next(p.batch for p in pushes if p.dest == 0)
    m.handle(ev.PushArrived(1, batch.slice(0, 10), snap.version))
    clock.t += m.busy.cost_s
    m.handle(ev.StepPaid())
    out = m.handle(ev.PushArrived(2, batch.slice(10, 5), snap.version))
    assert of(out, op.AnswerPush)[0].outcome == PUSH_GROW


def test_forwards_are_queued_whatever_the_queue_holds():
    plan, snap, clock, m, pushes = setup()
    batch = next(p.batch for p in pushes if p.dest == 0)
    m.handle(ev.PushArrived(1, batch, snap.version))
    out = m.handle(ev.PushArrived(2, batch, snap.version, forwarded=True))
    assert of(out, op.AnswerPush) == [op.AnswerPush(2, PUSH_KEEP, None)]
    assert m.logic.received_forwards == batch.num_rows


def test_a_push_under_a_newer_snapshot_waits_for_it_to_be_fetched():
    plan, snap, clock, m, pushes = setup()
    batch = next(p.batch for p in pushes if p.dest == 0)
    assert m.handle(ev.PushArrived(1, batch, snap.version + 1)) == [op.FetchSnapshot()]
    assert m.handle(ev.PushArrived(2, batch, snap.version + 1)) == []  # (one fetch answers both)
    out = m.handle(ev.SnapshotFetched(None))
    assert [a.push_id for a in of(out, op.AnswerPush)] == [1]  # the second waits for room
    assert m.parked


def test_reports_go_at_the_ticks_the_reducer_asks_for_and_only_when_worth_it():
    plan, snap, clock, m, pushes = setup()
    batch = next(p.batch for p in pushes if p.dest == 0)
    assert m.handle(ev.ReducerStarted()) == []  # (empty under the first snapshot: what the balancer assumes)
    out = m.handle(ev.PushArrived(1, batch, snap.version))
    assert of(out, op.Report) == []
    wakes = of(out, op.ReportAt)
    # the push changed the queue: a tick of the report clock is asked for, on its grid
    assert len(wakes) == 1 and wakes[0].at > clock.t
    assert wakes[0].at / plan.report_interval_s == pytest.approx(round(wakes[0].at / plan.report_interval_s))
    clock.t += m.busy.cost_s if m.busy.cost_s else 0.001
    out = m.handle(ev.StepPaid())
    assert of(out, op.Report) == [] and of(out, op.ReportAt) == []  # (the asked tick covers it)
    clock.t = wakes[0].at
    out = m.handle(ev.ReportDue())
    reports = of(out, op.Report)
    assert len(reports) == 1 and reports[0].queue_length == m.logic.queued
    assert of(m.handle(ev.ReportDue()), op.Report) == []  # nothing changed: no report


def test_a_reducer_that_starts_with_news_reports_at_once():
    """A reducer restarted from a checkpoint, or started under a later snapshot, reports at
    its start: the balancer's figures for it are not the first run's empty queue."""
    plan, snap, clock, _, _ = setup(policy="doubling")
    restored = ReducerMachine(0, plan, snap, clock, checkpoint=(None, 0, 0, ()))
    assert len(of(restored.handle(ev.ReducerStarted()), op.Report)) == 1
    ring = plan.policy.ring(plan.num_reducers)
    ring.double_except(0)
    later = ring.snapshot()
    assert later.version > snap.version
    (report,) = of(ReducerMachine(0, plan, later, clock).handle(ev.ReducerStarted()), op.Report)
    assert report.version == later.version


def test_a_busy_reducer_whose_queue_moves_less_than_a_step_says_nothing():
    plan, snap, clock, m, pushes = setup(chunk_size=4)
    batch = next(p.batch for p in pushes if p.dest == 0)
    m.handle(ev.ReducerStarted(), ev.PushArrived(1, batch, snap.version))
    clock.t += 0.001  # (a cheap reducer: its steps take chunk_size rows)
    m.handle(ev.StepPaid(), ev.ReportDue())  # (reports the queue after the first step)
    assert m.logic.step_rows == 4
    m.busy = None
    m.logic.processed += 1  # (progress is not what this test watches)
    m.last_progress_value = m.logic.processed
    m.logic.queued -= 1  # less than a step's rows since the last report
    clock.t += 1.0
    assert of(m.handle(ev.ReportDue()), op.Report) == []
    reported = m.last_sent[0]
    assert reported * REPORT_FRACTION > 2 * m.logic.step_rows  # (a long queue)
    m.logic.queued -= m.logic.step_rows  # a step's rows, but a small part of a long queue
    clock.t += 1.0
    assert of(m.handle(ev.ReportDue()), op.Report) == []
    m.logic.queued = reported - math.ceil(reported * REPORT_FRACTION)  # that part of it: worth a report
    clock.t += 1.0
    assert [r.queue_length for r in of(m.handle(ev.ReportDue()), op.Report)] == [m.logic.queued]


def test_a_busy_reducer_wakes_for_progress_only_when_it_is_due():
    """Between reports a busy reducer's report clock wakes it for its progress once per
    PROGRESS_INTERVAL_S, not at every tick."""
    plan, snap, clock, m, pushes = setup(chunk_size=4)
    batch = next(p.batch for p in pushes if p.dest == 0)
    m.handle(ev.ReducerStarted(), ev.PushArrived(1, batch, snap.version))
    clock.t += 0.001
    m.handle(ev.StepPaid())
    clock.t = 1.0
    out = m.handle(ev.ReportDue())
    assert of(out, op.Progress) == [op.Progress(m.logic.processed)] and len(of(out, op.Report)) == 1
    assert of(out, op.ReportAt) == []  # (nothing left to say)
    clock.t += 0.001
    out = m.handle(ev.StepPaid())  # a step's progress, and a queue that moved by a small part of it
    assert of(out, op.Report) == [] and of(out, op.Progress) == []
    (wake,) = of(out, op.ReportAt)
    assert wake.at >= 1.0 + PROGRESS_INTERVAL_S - 1e-9  # when the progress is due, not the next tick
    clock.t += 0.001
    assert of(m.handle(ev.StepPaid()), op.ReportAt) == []  # (the wake asked for covers it)
    clock.t = wake.at
    assert of(m.handle(ev.ReportDue()), op.Progress) == [op.Progress(m.logic.processed)]


def test_progress_goes_at_once_only_when_the_queue_is_empty_after_input_mapped():
    plan, snap, clock, m, pushes = setup()
    batch = next(p.batch for p in pushes if p.dest == 0).slice(0, 10)
    out = m.handle(ev.PushArrived(1, batch, snap.version)) + m.handle(ev.StepPaid())
    assert of(out, op.Progress) == [] and len(of(out, op.ReportAt)) == 1  # mapping goes on: at the next tick
    assert of(m.handle(ev.ReportDue()), op.Progress) == [op.Progress(10)]  # the first: "never" is long ago
    m.handle(ev.PushArrived(2, batch, snap.version))
    clock.t += PROGRESS_INTERVAL_S / 2
    m.handle(ev.StepPaid())
    assert of(m.handle(ev.ReportDue()), op.Progress) == []  # paced
    assert m.handle(ev.InputMapped()) == [op.Progress(20)]  # the coordinator's word: at once
    m.handle(ev.PushArrived(3, batch, snap.version), ev.PushArrived(4, batch, snap.version, forwarded=True))
    m.busy = None  # (its step is dropped here: only progress is watched)
    m.logic.processed += 5
    assert of(m.handle(ev.InputMapped()), op.Progress) == []  # queue not empty: waits for the interval


def test_a_wide_job_s_count_at_its_end_goes_at_the_base_period_s_next_tick():
    """With a report clock slower than the base period, the count termination waits for
    goes at the next tick of the base period's clock (shared by a process's reducers, so
    a host's counts leave together), not at once; the report waits for the report clock."""
    plan, snap, clock, m, pushes = setup(report_interval_s=0.4)
    batch = next(p.batch for p in pushes if p.dest == 0).slice(0, 10)
    m.handle(ev.ReducerStarted(), ev.PushArrived(1, batch, snap.version))
    clock.t = 0.41
    m.handle(ev.ReportDue())
    m.handle(ev.InputMapped())
    clock.t = 0.43
    out = m.handle(ev.StepPaid())  # the queue is empty and every record is mapped
    assert of(out, op.Progress) == []
    ats = sorted(w.at for w in of(out, op.ReportAt))
    assert ats[0] == pytest.approx(0.45)  # the base period's next tick
    clock.t = ats[0]
    out = m.handle(ev.ReportDue())
    assert of(out, op.Progress) == [op.Progress(10)] and of(out, op.Report) == []


def test_a_reducer_restored_from_a_checkpoint_reports_no_progress_it_already_told():
    plan, snap, clock, m, _ = setup()
    restored = ReducerMachine(0, plan, snap, clock, (None, 40, -1, ()))
    assert restored.logic.processed == 40
    assert of(restored.handle(ev.ReducerStarted(), ev.InputMapped()), op.Progress) == []


def test_checkpoint_phases_hold_forwards_until_released():
    plan, snap, clock, m, pushes = setup(checkpoint_interval_s=1.0)
    batch = next(p.batch for p in pushes if p.dest == 0)
    m.handle(ev.PushArrived(1, batch.slice(0, 50), snap.version, epoch=0))
    sent = m.handle(ev.PrepareCheckpoint(10, 0))
    assert sent == [op.Reply(10, [0, 0])]
    # A forward counted by a peer has not arrived yet: the cut waits for it.
    assert m.handle(ev.CutCheckpoint(11, 0, 5)) == []
    out = m.handle(ev.PushArrived(2, batch.slice(50, 5), snap.version, epoch=0, forwarded=True))
    share = [r for r in of(out, op.Reply) if r.request_id == 11]
    assert len(share) == 1
    state, records, pending = share[0].value
    assert records + sum(b.num_rows for b, _ in pending) == 55  # everything of epoch 0 is in the cut
    assert m.handle(ev.ReleaseCheckpoint()) == []  # nothing was held


def test_a_cut_whose_forwards_never_come_is_given_up():
    plan, snap, clock, m, pushes = setup(checkpoint_interval_s=1.0)
    m.handle(ev.PrepareCheckpoint(1, 0))
    assert m.handle(ev.CutCheckpoint(2, 0, 3)) == []
    assert m.handle(ev.CheckpointTimedOut(2)) == [op.Reply(2, None)]
    assert m.handle(ev.CheckpointTimedOut(2)) == []  # (answered once)


def test_a_user_merge_raising_in_a_cut_is_the_cut_s_answer():
    class Exploding(dpa.Reducer):
        def create(self):
            return 0

        def add(self, acc, value):
            return acc + 1

        def merge(self, a, b):
            raise ValueError("merge broke")

        def finalize(self, acc):
            return acc

    plan, snap, clock, m, pushes = setup(reducer=Exploding(), checkpoint_interval_s=1.0)
    batch = next(p.batch for p in pushes if p.dest == 0).slice(0, 5)
    for epoch in (0, 1):  # the same keys in two epochs: the second cut merges them into the base
        m.handle(ev.PushArrived(2 * epoch, batch, snap.version, epoch=epoch))
        m.handle(ev.StepPaid())
        m.handle(ev.PrepareCheckpoint(10 + epoch, epoch))
        (reply,) = m.handle(ev.CutCheckpoint(20 + epoch, epoch, 0))
        m.handle(ev.ReleaseCheckpoint())
    assert isinstance(reply.value, ValueError)


def test_stop_ends_the_loop_once_the_queue_is_empty_and_the_final_merge_answers():
    plan, snap, clock, m, pushes = setup()
    batch = next(p.batch for p in pushes if p.dest == 0).slice(0, 10)
    m.handle(ev.PushArrived(1, batch, snap.version))
    out = m.handle(ev.Stop(None, finalize=True))
    assert of(out, op.Finished) == []  # a step runs still
    out = m.handle(ev.StepPaid())
    (finished,) = of(out, op.Finished)
    assert finished.finalize and finished.counters["processed"] == 10
    out = m.handle(ev.Exchange(5, [0, 1]))
    assert kinds(out) == ["Reply"]  # (its part for reducer 1 is empty: no message)
    ((reply),) = m.handle(ev.Finalize(6))
    table, merged_keys = reply.value
    assert table.num_rows == 10 and merged_keys == 0


def test_a_forwarded_record_goes_out_under_the_new_snapshot_version():
    plan, snap, clock, m, pushes = setup(policy="doubling", max_rounds=1)
    batch = next(p.batch for p in pushes if p.dest == 0)
    m.handle(ev.PushArrived(1, batch, snap.version))
    ring = plan.policy.ring(plan.num_reducers)
    ring.double_except(0)  # reducer 1 takes keys from reducer 0
    newer = ring.snapshot()
    out = m.handle(ev.SnapshotArrived(newer))
    forwards = of(out, op.SendForward)
    assert forwards and all(f.version == newer.version and f.dest == 1 for f in forwards)
    assert of(out, op.Report)  # the new queue length at once


def test_a_wide_job_s_reducer_reports_a_new_snapshot_at_the_next_tick():
    """With a report clock slower than the base period (a wide job's), the report of a new
    snapshot travels with the clock's next tick (one message per host), not at once."""
    plan, snap, clock, m, pushes = setup(policy="doubling", max_rounds=1, report_interval_s=0.4)
    batch = next(p.batch for p in pushes if p.dest == 0)
    first = m.handle(ev.PushArrived(1, batch, snap.version))
    ring = plan.policy.ring(plan.num_reducers)
    ring.double_except(0)
    newer = ring.snapshot()
    out = m.handle(ev.SnapshotArrived(newer))
    assert of(out, op.SendForward) and not of(out, op.Report)
    (wake,) = of(first + out, op.ReportAt)  # (asked once: it covers every later change)
    clock.t = wake.at
    (report,) = of(m.handle(ev.ReportDue()), op.Report)
    assert report.version == newer.version


def test_an_unknown_event_is_a_clear_error():
    plan, snap, clock, m, _ = setup()
    with pytest.raises(TypeError, match="no int event"):
        m.handle(3)


def test_a_reducer_s_error_names_the_key_it_was_working_on():
    class Fragile(dpa.Reducer):
        def create(self):
            return 0

        def add(self, acc, value):
            if value == "poison":
                raise RuntimeError("cannot digest")
            return acc + 1

        def merge(self, a, b):
            return a + b

    with pytest.raises(dpa.JobFailedError, match="cannot digest") as info:
        dpa.run(["a", "poison", "b"], reducer=Fragile(), config=dpa.JobConfig(runtime="local"))
    assert info.value.key == "poison"


def test_the_report_clock_s_next_tick_is_always_later_than_now():
    # 2.15 / 0.05 rounds down to 42.99..., and 43 * 0.05 == 2.15: the tick asked for must
    # still be a later one (a runtime in virtual time would wake the reducer at once, forever).
    plan, snap, clock, machine, pushes = setup(report_interval_s=0.05)
    clock.t = 2.15
    machine.handle(ev.ReducerStarted())
    out = machine.handle(ev.PushArrived(1, pushes[0].batch, snap.version))
    (wake,) = [i for i in out if isinstance(i, op.ReportAt)]
    assert wake.at > clock.t
