"""The balancer's entry point without Ray: queue reports and ticks in, a published
snapshot (or a scale-out) out."""

from __future__ import annotations

import pyarrow as pa
import pytest

import dpa
from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.balancer import BalancerLogic
from dpa.engine.planning import build_plan
from dpa.input.sources import normalize_source


def plan_of(**fields):
    config = dpa.JobConfig(runtime="local", num_mappers=1, **fields)
    plan, _ = build_plan(normalize_source(pa.table({"k": list(range(100))}), 100), "k", dpa.Count(), None, config)
    return plan


def test_a_straggler_s_reports_then_a_tick_publish_a_newer_snapshot():
    plan = plan_of(num_reducers=4, policy="doubling", max_rounds=1, policy_options={"min_gap": 0})
    snap = plan.policy.initial_snapshot(4)
    balancer = BalancerLogic(plan, snap)
    assert balancer.handle(ev.BalancerTick(0.0)) == []  # nothing reported: nothing to publish
    out: list = []
    for step in range(1, 20):
        reports = [ev.QueueReported(r, 5000 if r == 0 else 10, snap.version) for r in range(4)]
        assert balancer.handle(*reports) == []
        out = balancer.handle(ev.BalancerTick(step * plan.lb_interval_s))
        if out:
            break
    (published,) = out
    assert isinstance(published, op.Publish) and published.snapshot.version > snap.version
    assert balancer.events[-1].reducer == 0
    assert balancer.handle(ev.BalancerStopped(1.0)) == []


def test_an_elastic_balancer_scales_out_and_publishes_the_new_reducers_tokens():
    plan = plan_of(num_reducers=2, max_reducers=4)
    balancer = BalancerLogic(plan, plan.policy.initial_snapshot(4))
    assert balancer.active_slots == [0, 1]
    out: list = []
    for step in range(1, 40):
        balancer.handle(*[ev.QueueReported(r, 100_000, balancer.snapshot.version, None, 30.0) for r in (0, 1)])
        out = balancer.handle(ev.BalancerTick(step * 0.1))
        if any(isinstance(i, op.ScaleOut) for i in out):
            break
    (scale,) = [i for i in out if isinstance(i, op.ScaleOut)]
    assert set(scale.slots) <= {2, 3} and scale.slots
    (published,) = balancer.handle(ev.ScaledOut(5.0, list(scale.slots)))
    assert isinstance(published, op.Publish)
    assert set(balancer.active_slots) == {0, 1, *scale.slots}


def test_an_unknown_event_is_a_clear_error():
    plan = plan_of(num_reducers=2)
    with pytest.raises(TypeError, match="a balancer takes no int event"):
        BalancerLogic(plan, plan.policy.initial_snapshot(2)).handle(3)
