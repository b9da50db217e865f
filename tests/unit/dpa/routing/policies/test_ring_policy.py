"""The DPA balancer rule and the policy registry."""

from __future__ import annotations

import numpy as np
import pytest

import dpa
from dpa.errors import ConfigError
from dpa.routing.hash_ring import HashRing
from dpa.routing.policies.hashing import HashPolicy
from dpa.routing.policies.ring.policy import DPAPlanner, DPAPolicy
from dpa.routing.registry import make_policy, policies


@pytest.mark.parametrize(
    "queues,tau,expected",
    [
        ([10, 5, 5, 5], 0.2, 0),
        ([6, 5, 5, 5], 0.2, None),  # 6 > 5 * 1.2 is false
        ([7, 5, 0, 0], 0.2, 0),
        ([0, 0, 0, 0], 0.0, None),
        ([3, 0, 0, 0], 0.0, 0),  # Q_s = 0: any queue is a straggler
        ([5, 5, 0, 0], 0.0, None),  # ties are not stragglers
        ([1, 9, 2, 8], 0.2, None),  # 9 > 9.6 false
        ([1, 12, 2, 8], 0.2, 1),
    ],
)
def test_straggler_predicate(queues, tau, expected):
    assert DPAPlanner.straggler(queues, tau) == expected


def planner(method="doubling", rounds=1, tau=0.2):
    ring = HashRing.for_halving(4) if method == "halving" else HashRing.for_doubling(4)
    return DPAPlanner(method, tau, rounds, ring)


def test_doubling_round_publishes_new_version_and_logs():
    p = planner("doubling")
    for r, q in enumerate([100, 10, 10, 10]):
        p.observe(r, q, 0)
    (d,) = p.check(1.5)
    assert d.snapshot.version == 1 and d.snapshot.token_counts == (1, 2, 2, 2)
    assert d.event.action == "double" and d.event.reducer == 0
    assert d.event.queue_lengths == (100, 10, 10, 10) and d.event.tokens_after == (1, 2, 2, 2)
    assert d.event.time_s == 1.5


def test_waits_for_fresh_reports_after_a_rebalance_and_respects_max_rounds():
    p = planner("doubling", rounds=2)
    for r, q in enumerate([100, 10, 10, 10]):
        p.observe(r, q, 0)
    assert len(p.check(0)) == 1
    assert p.check(0.1) == []  # reports are from version 0: stale
    for r, q in enumerate([100, 10, 10, 10]):
        p.observe(r, q, 1)
    assert len(p.check(0.2)) == 1  # second round for reducer 0
    for r, q in enumerate([100, 10, 10, 10]):
        p.observe(r, q, 2)
    assert p.check(0.3) == []  # rounds used up
    assert p.rounds == [2, 0, 0, 0]


def test_stale_report_does_not_overwrite_a_fresh_one():
    p = planner()
    p.observe(0, 5, 3)
    p.observe(0, 99, 2)
    assert p.queue_lengths[0] == 5


def test_halving_exhaustion_is_logged_once():
    ring = HashRing((1, 4, 4, 4))
    p = DPAPlanner("halving", 0.2, 3, ring)
    for r, q in enumerate([50, 1, 1, 1]):
        p.observe(r, q, 0)
    (d,) = p.check(0)
    assert d.snapshot is None and d.event.action == "exhausted"
    assert p.check(0.1) == []


def test_registry_lists_valid_policies_on_unknown_name():
    with pytest.raises(ConfigError, match="valid policies: .*doubling.*halving"):
        dpa.JobConfig(policy="nope")
    assert {"halving", "doubling", "hash"} <= set(policies())


def test_make_policy_and_moves_keys():
    assert isinstance(make_policy(dpa.JobConfig(policy="hash")), HashPolicy)
    p = make_policy(dpa.JobConfig(policy="halving", max_rounds=0))
    assert isinstance(p, DPAPolicy) and not p.moves_keys and p.make_planner(4) is None
    assert p.owners(p.initial_snapshot(4), np.zeros(3, np.uint32)) is None
    assert make_policy(dpa.JobConfig(policy="doubling", max_rounds=2)).moves_keys


def test_hash_policy_routes_mod_r():
    p = HashPolicy()
    snap = p.initial_snapshot(4)
    h = np.array([0, 1, 5, 2**32 - 1], dtype=np.uint32)
    assert p.make_router(0, 4).route(h, snap).tolist() == [0, 1, 1, 3]


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"tau": -0.1}, "tau"),
        ({"num_mappers": 0}, "num_mappers"),
        ({"num_reducers": 0}, "num_reducers"),
        ({"initial_tokens": 12}, "power of two"),
        ({"max_rounds": -1}, "max_rounds"),
        ({"runtime": "spark"}, "runtime"),
        ({"queue_capacity": 0}, "queue_capacity"),
    ],
)
def test_config_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        dpa.JobConfig(**kwargs)


def test_patience_needs_the_same_straggler_on_consecutive_checks():
    p = DPAPlanner("doubling", 0.2, 1, HashRing.for_doubling(4), patience=3)
    for r, q in enumerate([100, 10, 10, 10]):
        p.observe(r, q, 0)
    assert p.check(0.0) == [] and p.check(0.1) == []
    p.observe(0, 5, 0)  # the burst is gone: the streak restarts
    assert p.check(0.2) == []
    p.observe(0, 100, 0)
    assert p.check(0.3) == [] and p.check(0.4) == []
    (d,) = p.check(0.5)
    assert d.event.reducer == 0


def test_patience_option_is_validated():
    with pytest.raises(ConfigError, match="patience"):
        make_policy(dpa.JobConfig(policy="halving", policy_options={"patience": 0}))
    assert make_policy(dpa.JobConfig(policy="halving", policy_options={"patience": 4})).settings.patience == 4


# --------------------------------------------------------------------------- the rule on work


def test_the_rule_compares_seconds_of_work_when_reported():
    p = DPAPlanner("doubling", 0.2, 1, HashRing.for_doubling(3), balance_on="work", min_gap_s=0.05)
    for r, q in enumerate((100, 100, 100)):
        p.observe(r, q, 0)
    assert p.check(0.0) == []  # equal queues in records, no work reported: nothing to do
    p.observe_work(0, 0.1, 0)  # the same 100 records cost 1 ms each on reducer 0
    p.observe_work(1, 0.01, 0)
    p.observe_work(2, 0.01, 0)
    (decision,) = p.check(1.0)
    assert decision.event.reducer == 0 and decision.event.action == "double"


def test_the_work_rule_needs_the_gap_in_seconds_and_values_unmeasured_reducers_at_the_mean_rate():
    p = DPAPlanner("doubling", 0.2, 1, HashRing.for_doubling(3), balance_on="work", min_gap_s=0.5)
    for r, q in enumerate((1000, 100, 100)):
        p.observe(r, q, 0)
    p.observe_work(0, 0.3, 0)  # 0.3 s against 0.03 s: 10x, but the gap is below 0.5 s
    assert p.loads()[0] == pytest.approx([0.3, 0.03, 0.03])  # 1 and 2 at the rate of reducer 0
    assert p.check(0.0) == []
    p.observe_work(0, 3.0, 0)
    assert [d.event.reducer for d in p.check(1.0)] == [0]


def test_records_rule_without_work_reports_and_on_request():
    p = DPAPlanner("doubling", 0.2, 1, HashRing.for_doubling(3), balance_on="work", min_gap_s=100.0)
    for r, q in enumerate((1000, 100, 100)):
        p.observe(r, q, 0)
    assert [d.event.reducer for d in p.check(0.0)] == [0]  # no work known yet: records decide
    paper = DPAPlanner("doubling", 0.2, 1, HashRing.for_doubling(3), balance_on="records")
    for r, q in enumerate((100, 100, 100)):
        paper.observe(r, q, 0)
        paper.observe_work(r, [10.0, 0.1, 0.1][r], 0)
    assert paper.check(0.0) == []  # the paper's rule ignores work


def test_settings_resolve_min_gap_s_from_the_step_time():
    policy = make_policy(dpa.JobConfig(policy="halving", step_time_s=0.04))
    assert policy.settings.balance_on == "work" and policy.min_gap_s == pytest.approx(0.08)
    paper = make_policy(dpa.JobConfig(policy="halving", policy_options={"balance_on": "records", "min_gap": 0}))
    assert paper.settings.balance_on == "records" and paper.min_gap == 0
    with pytest.raises(ConfigError, match="balance_on"):
        make_policy(dpa.JobConfig(policy="halving", policy_options={"balance_on": "seconds"}))
    with pytest.raises(ConfigError, match="min_gap_s"):
        make_policy(dpa.JobConfig(policy="doubling", policy_options={"min_gap_s": -1}))


def test_doubling_stops_at_the_ring_bound():
    from dpa.routing.ring import MAX_RING_TOKENS

    ring = HashRing.for_doubling(4)
    rounds = 0
    while ring.redistribute(0, "doubling"):
        rounds += 1
        assert sum(ring.token_counts) <= MAX_RING_TOKENS
    assert rounds >= 10 and not ring.redistribute(0, "doubling")


def test_ring_settings_default_to_an_even_ring_with_lookahead_and_keep_the_papers_on_request():
    from dpa.routing.policies.ring.lookahead import arc_shares

    policy = make_policy(dpa.JobConfig(policy="doubling", num_reducers=8))
    assert policy.settings.token_spacing == "even" and policy.settings.lookahead and policy.wants_key_stats
    assert arc_shares(policy.initial_snapshot(8)) == pytest.approx(np.full(8, 1 / 8), abs=1e-6)
    paper = make_policy(dpa.JobConfig(policy="doubling", initial_tokens=1,
                                      policy_options={"token_spacing": "hashed", "lookahead": False}))
    assert paper.initial_snapshot(4).positions.tolist() == HashRing.for_doubling(4).snapshot().positions.tolist()
    assert not paper.wants_key_stats and not paper.make_planner(4).lookahead
    assert not make_policy(dpa.JobConfig(policy="halving", max_rounds=0)).wants_key_stats


@pytest.mark.parametrize("options,needle", [({"token_spacing": "random"}, "token_spacing"),
                                            ({"lookahead": 1}, "lookahead")])
def test_ring_settings_reject_bad_spacing_and_lookahead(options, needle):
    with pytest.raises(ConfigError, match=needle):
        make_policy(dpa.JobConfig(policy="halving", policy_options=options))


@pytest.mark.parametrize("method", ["doubling", "halving"])
def test_a_restarted_planner_resumes_from_a_published_ring(method):
    p = planner(method, rounds=3)
    for r, q in enumerate([100, 10, 10, 10]):
        p.observe(r, q, 0)
    (d,) = p.check(1.5)
    fresh = planner(method, rounds=3)
    assert fresh.resume(d.snapshot)
    assert fresh.snapshot.token_counts == d.snapshot.token_counts
    assert fresh.snapshot.version == d.snapshot.version
    assert np.array_equal(fresh.snapshot.positions, d.snapshot.positions)
    for r, q in enumerate([10, 100, 10, 10]):
        fresh.observe(r, q, d.snapshot.version)
    (later,) = fresh.check(2.0)
    assert later.snapshot.version == d.snapshot.version + 1
    assert not planner(method).resume(object())  # not a ring: it keeps its first one
