"""The balancer's entry point without Ray: queue reports and ticks in, a published
snapshot (or a scale-out) out."""

from __future__ import annotations

import pyarrow as pa
import pytest

import dpa
from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.balancer import BalancerMachine
from dpa.engine.planning import build_plan
from dpa.input.sources import normalize_source


def plan_of(**fields):
    config = dpa.JobConfig(runtime="local", num_mappers=1, **fields)
    plan, _ = build_plan(normalize_source(pa.table({"k": list(range(100))}), 100), "k", dpa.Count(), None, config)
    return plan


def test_a_straggler_s_reports_then_a_tick_publish_a_newer_snapshot():
    plan = plan_of(num_reducers=4, policy="doubling", max_rounds=1, policy_options={"min_gap": 0})
    snap = plan.policy.initial_snapshot(4)
    balancer = BalancerMachine(plan, snap)
    assert balancer.handle() == [op.LogRebalances((), snap.version, None)]  # (the metrics start)
    assert balancer.handle(ev.BalancerTick(0.0)) == []  # nothing reported: nothing to publish, no tick asked
    out: list = []
    for step in range(1, 20):
        reports = [ev.QueueReported(r, 5000 if r == 0 else 10, snap.version) for r in range(4)]
        assert balancer.handle(*reports) in ([], [op.TickAt(step * plan.lb_interval_s)])
        out = [i for i in balancer.handle(ev.BalancerTick(step * plan.lb_interval_s)) if not isinstance(i, op.TickAt)]
        if out:
            break
    published, logged = out
    assert isinstance(published, op.Publish) and published.snapshot.version > snap.version
    assert balancer.events[-1].reducer == 0
    assert logged == op.LogRebalances(tuple(balancer.events), published.snapshot.version, None)
    (result,) = balancer.handle(ev.BalancerStopped(1.0))
    assert result == op.BalancingResult(tuple(balancer.events), published.snapshot, tuple(balancer.timeline), (), 4)
    assert balancer.handle(ev.SnapshotAsked(7)) == [op.Reply(7, published.snapshot)]


def test_the_balancer_asks_for_a_tick_after_a_report_and_while_a_queue_is_not_empty():
    plan = plan_of(num_reducers=2, policy="hash")  # (no rebalancing: the ticks alone)
    interval = plan.lb_interval_s
    balancer = BalancerMachine(plan, plan.policy.initial_snapshot(2))
    balancer.handle()
    # The first report asks for the tick lb_interval_s after the last one (the start);
    # later reports before it comes ask for nothing more.
    assert balancer.handle(ev.QueueReported(0, 100, 0)) == [op.TickAt(interval)]
    assert balancer.handle(ev.QueueReported(1, 0, 0)) == []
    # A queue is not empty: the tick asks for the next one.
    assert balancer.handle(ev.BalancerTick(0.3)) == [op.TickAt(0.3 + interval)]
    assert balancer.handle(ev.QueueReported(0, 0, 0)) == []  # (one is asked for already)
    # Every queue reported empty: no more ticks until a report comes.
    assert balancer.handle(ev.BalancerTick(0.3 + interval)) == []
    assert balancer.handle(ev.QueueReported(1, 5, 0)) == [op.TickAt(0.3 + interval + interval)]
    balancer.handle(ev.BalancerStopped(1.0))
    assert balancer.handle(ev.QueueReported(1, 5, 0)) == []  # (stopped: no tick)


def test_a_busy_balancer_without_news_asks_for_no_more_ticks_until_the_next_report():
    plan = plan_of(num_reducers=2, policy="hash")
    interval = plan.lb_interval_s
    balancer = BalancerMachine(plan, plan.policy.initial_snapshot(2))
    balancer.handle(ev.QueueReported(0, 100, 0))
    # News since the last tick: the next is asked for while a queue is not empty.
    assert balancer.handle(ev.BalancerTick(interval)) == [op.TickAt(2 * interval)]
    # No report since: the check would see what the last one saw, no tick asked for.
    assert balancer.handle(ev.BalancerTick(2 * interval)) == []
    # The next report asks for one, a period after the last tick (due at once if that passed).
    assert balancer.handle(ev.QueueReported(0, 90, 0)) == [op.TickAt(3 * interval)]


def test_an_elastic_balancer_keeps_ticking_without_news_while_a_queue_is_not_empty():
    """The scaling rule waits for a backlog to last: its checks count without news."""
    plan = plan_of(num_reducers=2, max_reducers=4)
    interval = plan.lb_interval_s
    balancer = BalancerMachine(plan, plan.policy.initial_snapshot(plan.num_reducers))
    assert balancer.rule is not None
    balancer.handle(ev.QueueReported(0, 100, 0))
    balancer.handle(ev.BalancerTick(interval))
    assert op.TickAt(3 * interval) in balancer.handle(ev.BalancerTick(2 * interval))


def test_a_recovered_run_keeps_or_rebuilds_the_balancer_as_the_restart_says():
    plan = plan_of(num_reducers=2, policy="doubling")
    first = plan.policy.initial_snapshot(2)
    balancer = BalancerMachine.for_run(plan, first, None, None)
    balancer.handle(ev.QueueReported(0, 100, 0))  # (a TickAt is out)
    kept = BalancerMachine.for_run(plan, first, op.Restart(None, first, False), balancer)
    assert kept is balancer
    # The lost run's tick went with it: the next report asks for one again.
    assert kept.handle(ev.QueueReported(0, 100, 0)) == [op.TickAt(plan.lb_interval_s)]
    checkpointed = plan.policy.initial_snapshot(2)
    new = BalancerMachine.for_run(plan, first, op.Restart(None, checkpointed, True), balancer)
    assert new is not balancer and new.resume
    with pytest.raises(RuntimeError, match="keeps its balancer"):
        BalancerMachine.for_run(plan, first, op.Restart(None, first, False), None)


def test_an_elastic_balancer_scales_out_and_publishes_the_new_reducers_tokens():
    plan = plan_of(num_reducers=2, max_reducers=4)
    balancer = BalancerMachine(plan, plan.policy.initial_snapshot(4))
    assert balancer.active_slots == [0, 1]
    out: list = []
    for step in range(1, 40):
        balancer.handle(*[ev.QueueReported(r, 100_000, balancer.snapshot.version, None, 30.0) for r in (0, 1)])
        out = balancer.handle(ev.BalancerTick(step * 0.1))
        if any(isinstance(i, op.ScaleOut) for i in out):
            break
    (scale,) = [i for i in out if isinstance(i, op.ScaleOut)]
    assert set(scale.slots) <= {2, 3} and scale.slots
    assert scale.snapshot == balancer.snapshot  # (the new reducers start under it)
    published, logged = balancer.handle(ev.ScaledOut(5.0, list(scale.slots)))
    assert isinstance(published, op.Publish)
    assert set(balancer.active_slots) == {0, 1, *scale.slots}
    assert logged.active_reducers == len(balancer.active_slots)  # (the metrics' width)


def test_an_unknown_event_is_a_clear_error():
    plan = plan_of(num_reducers=2)
    with pytest.raises(TypeError, match="a balancer takes no int event"):
        BalancerMachine(plan, plan.policy.initial_snapshot(2)).handle(3)
