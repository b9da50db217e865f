"""Elastic reducers: the scaling rule and whole jobs in the in-process runtime."""

from __future__ import annotations

import collections

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpa
from dpa.engine.elastic import ScalingRule
from dpa.engine.planning import build_plan
from dpa.errors import ConfigError
from dpa.input.sources import normalize_source
from dpa.runtime.local import run_local

UNIFORM = pa.table({"key": np.arange(16_000) % 4000})


def _counts(result, column="count"):
    table = result.to_arrow()
    return dict(zip(table["key"].to_pylist(), table[column].to_pylist()))


def _expected(table):
    return dict(collections.Counter(table["key"].to_pylist()))


# -- the rule -------------------------------------------------------------------------
def test_rule_scales_out_to_the_width_the_backlog_asks_for_after_patience():
    rule = ScalingRule(8, 2, 0.25, patience=2)
    backlogs = {0: 1.0, 1: 0.9}
    assert rule.decide(0.0, [0, 1], backlogs, {0: 9, 1: 9}) is None  # patience
    action, slots, reason = rule.decide(0.1, [0, 1], backlogs, {0: 9, 1: 9})
    assert action == "scale_out" and slots == [2, 3, 4, 5, 6, 7]  # ceil(1.9 / 0.25) = 8
    assert "2 -> 8" in reason
    rule.changed(0.1)
    assert rule.decide(0.2, [0, 1], backlogs, {0: 9, 1: 9}) is None  # cooldown


def test_rule_adds_at_least_one_and_never_more_than_the_slots():
    rule = ScalingRule(3, 1, 0.25, patience=1)
    assert rule.decide(0.0, [0, 1], {0: 0.26, 1: 0.25}, {0: 1, 1: 1})[1] == [2]
    rule = ScalingRule(3, 1, 0.25, patience=1)
    assert rule.decide(0.0, [0, 2], {0: 5.0, 2: 5.0}, {0: 1, 2: 1})[1] == [1]  # lowest free slot


def test_rule_does_not_scale_out_on_unknown_or_small_backlogs_or_at_full_width():
    rule = ScalingRule(4, 1, 0.25, patience=1)
    assert rule.decide(0.0, [0, 1], {0: None, 1: 9.0}, {0: 1, 1: 1}) is None
    assert rule.decide(0.1, [0, 1], {0: 0.1, 1: 9.0}, {0: 1, 1: 1}) is None
    assert rule.decide(0.2, [0, 1, 2, 3], {i: 9.0 for i in range(4)}, {i: 1 for i in range(4)}) is None


def test_rule_retires_an_idle_reducer_after_idle_s_but_not_below_min_or_when_all_idle():
    queues = {0: 50, 1: 0, 2: 0}
    rule = ScalingRule(4, 2, 0.25, idle_s=1.0, cooldown_s=0.5)
    assert rule.decide(0.0, [0, 1, 2], {0: 0.6, 1: 0.0, 2: 0.0}, queues) is None
    assert rule.decide(1.5, [0, 1, 2], {0: 0.6, 1: 0.0, 2: 0.0}, queues) is None  # 0.6 s of work asks for 3
    rule = ScalingRule(4, 2, 0.25, idle_s=1.0, cooldown_s=0.5)
    assert rule.decide(0.0, [0, 1, 2], {0: 0.1, 1: 0.0, 2: 0.0}, queues) is None  # not idle long enough
    action, slots, _ = rule.decide(1.0, [0, 1, 2], {0: 0.1, 1: 0.0, 2: 0.0}, queues)
    assert (action, slots) == ("scale_in", [2])  # the newest idle slot
    rule.changed(1.0)
    assert rule.decide(5.0, [0, 1], {0: 0.1, 1: 0.0}, {0: 50, 1: 0}) is None  # min_reducers=2
    rule = ScalingRule(4, 1, 0.25, idle_s=1.0)
    assert rule.decide(0.0, [0, 1], {}, {0: 0, 1: 0}) is None
    assert rule.decide(9.0, [0, 1], {}, {0: 0, 1: 0}) is None  # everyone idle: the job is between inputs


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.data())
def test_rule_stays_within_min_and_max(slots, data):
    low = data.draw(st.integers(1, slots))
    rule = ScalingRule(slots, low, 0.25, idle_s=0.0, cooldown_s=0.0, patience=1)
    active = sorted(data.draw(st.sets(st.integers(0, slots - 1), min_size=low, max_size=slots)))
    backlogs = {r: data.draw(st.one_of(st.none(), st.floats(0, 5))) for r in active}
    queues = {r: data.draw(st.integers(0, 3)) for r in active}
    verdict = rule.decide(1.0, active, backlogs, queues)
    if verdict is None:
        return
    action, chosen, _ = verdict
    if action == "scale_out":
        assert chosen and not set(chosen) & set(active) and len(active) + len(chosen) <= slots
    else:
        assert chosen[0] in active and len(active) - 1 >= low and queues[chosen[0]] == 0
        assert sum(b or 0 for b in backlogs.values()) < 0.25 * (len(active) - 1) + 1e-9


# -- jobs in the in-process runtime ---------------------------------------------------
def _run(table, reducer=None, **config):
    cfg = dpa.JobConfig(runtime="local", **config)
    return dpa.run(table, key="key", reducer=reducer or dpa.WithCost(dpa.Count(), 1e-3), config=cfg)


@pytest.mark.parametrize("policy", ["hybrid", "halving", "doubling"])
def test_scale_out_is_exact_and_faster(policy):
    fixed = _run(UNIFORM, num_reducers=2, policy=policy)
    grown = _run(UNIFORM, num_reducers=2, max_reducers=8, policy=policy)
    assert _counts(grown) == _counts(fixed) == _expected(UNIFORM)
    s = grown.stats
    assert [e.action for e in s.scaling][:1] == ["scale_out"] and s.scaling[0].width > 2
    assert len(s.processed) == 8 and all(p > 0 for p in s.processed)  # every slot that existed
    assert sum(s.processed) == sum(s.emitted) == UNIFORM.num_rows  # conservation
    assert s.virtual_time_s < 0.45 * fixed.stats.virtual_time_s
    assert {e.action for e in s.rebalances} >= {"scale_out"}


def test_a_fixed_width_job_is_unchanged_by_the_new_options():
    a = _run(UNIFORM, num_reducers=2)
    b = _run(UNIFORM, num_reducers=2, max_reducers=2, min_reducers=2)
    assert not b.stats.scaling and a.stats.processed == b.stats.processed
    assert a.stats.virtual_time_s == b.stats.virtual_time_s


@pytest.mark.parametrize("migrate", ["records", "state"])
def test_scale_in_hands_the_retired_reducers_state_over(migrate):
    # Many keys first (every reducer gets work and state), then one key: the others go idle,
    # and fewer reducers would do (at this scale_out_backlog_s: the knob is the subject).
    keys = np.concatenate([np.arange(4000) % 2000, np.full(6000, 7)])
    table = pa.table({"key": keys})
    res = _run(table, num_reducers=4, min_reducers=1, policy="halving", migrate=migrate, scale_out_backlog_s=5.0)
    s = res.stats
    assert _counts(res) == _expected(table)
    retired = [e for e in s.scaling if e.action == "scale_in"]
    assert retired and retired[-1].width >= 1 and all(e.width >= 1 for e in s.scaling)
    assert not [e for e in s.scaling if e.action == "scale_out"]  # no flapping
    assert s.state_moves > 0  # the retired reducers' keys went with their state
    assert sum(s.processed) == table.num_rows
    tokens = s.final_tokens
    for e in retired:
        assert tokens[e.reducers[0]] == 0


def test_elastic_with_checkpoints_and_failures_stays_exact():
    config = dpa.JobConfig(num_reducers=2, max_reducers=6, min_reducers=1, runtime="local", batch_size=500,
                           checkpoint_interval_s=0.5)
    plan, blocks = build_plan(normalize_source(UNIFORM, 500), "key", dpa.WithCost(dpa.Count(), 1e-3), None, config)
    out = run_local(plan, blocks, faults=[(0.8, "reducer-1"), (1.6, "balancer"), (2.2, "reducer-4")])
    got = collections.Counter()
    for table in out.tables:
        if table is not None:
            got.update(dict(zip(table["key"].to_pylist(), table["count"].to_pylist())))
    assert got == collections.Counter(UNIFORM["key"].to_pylist())
    assert out.recoveries and out.scaling


def test_a_user_defined_reducer_scales_out(tally):
    res = _run(UNIFORM, reducer=dpa.WithCost(tally(name="n"), 1e-3), num_reducers=2, max_reducers=4)
    assert _counts(res, "n") == _expected(UNIFORM)
    assert res.stats.scaling


def test_bad_elastic_configs_fail_before_anything_runs():
    with pytest.raises(ConfigError, match="max_reducers=1 is below num_reducers=2"):
        dpa.JobConfig(num_reducers=2, max_reducers=1)
    with pytest.raises(ConfigError, match="min_reducers=3 is above"):
        dpa.JobConfig(num_reducers=2, min_reducers=3)
    with pytest.raises(ConfigError, match="migrate must be one of"):
        dpa.JobConfig(migrate="keys")
    with pytest.raises(ConfigError, match="use a ring policy"):
        _run(UNIFORM, num_reducers=2, max_reducers=4, policy="pkg")

    class NoMerge(dpa.Reducer):
        def create(self):
            return 0

        def add(self, acc, record):
            return acc + 1

        def finalize(self, acc):
            return acc

    with pytest.raises(ConfigError, match="elastic reducers"):
        _run(UNIFORM, reducer=NoMerge(), num_reducers=2, max_reducers=4)


def test_no_reducer_retires_once_every_record_is_queued():
    rule = ScalingRule(4, 1, 0.25, idle_s=1.0, cooldown_s=0.0)
    queues = {0: 50, 1: 0, 2: 0}
    assert rule.decide(0.0, [0, 1, 2], {0: 0.1}, queues) is None
    rule.input_done()
    assert rule.decide(5.0, [0, 1, 2], {0: 0.1}, queues) is None
    uniform = _run(UNIFORM, num_reducers=2, max_reducers=8)
    assert [e.action for e in uniform.stats.scaling] == ["scale_out"]  # no retirement at the job's tail
