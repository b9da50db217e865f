"""The first ring planned on the mappers' forecast: rounds as counts, the beam search, the planner."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import dpa
from dpa.routing.hash_ring import HashRing
from dpa.routing.policies.ring.forecast import (
    FORECAST_ROUNDS,
    RingScorer,
    first_ring_sizes,
    plan_first_ring,
    round_tokens,
)
from dpa.routing.policies.ring.lookahead import KeyLoads, predicted_loads
from dpa.routing.policies.ring.policy import DPAPlanner
from dpa.routing.registry import make_policy
from dpa.routing.ring import MAX_RING_TOKENS


def _hot(ring: HashRing, share: float, rng_seed: int = 0) -> KeyLoads:
    """One key of ``share`` of the records, owned by reducer 0, the rest a uniform tail."""
    hashes = np.random.default_rng(rng_seed).integers(0, 2**32, 2000, dtype=np.uint64).astype(np.uint32)
    h = hashes[ring.lookup_batch(hashes) == 0][0]
    return KeyLoads(np.array([h], np.uint32), np.array([share * 1000.0]), (1 - share) * 1000.0)


def test_rounds_are_counts_that_commute():
    assert round_tokens((16, 16, 16), "doubling", (1, 0, 0)) == (16, 32, 32)
    assert round_tokens((16, 16, 16), "doubling", (1, 2, 0)) == (64, 32, 128)
    ring = HashRing([16, 16, 16])
    for order in ((0, 1, 1), (1, 0, 1), (1, 1, 0)):
        r = ring.copy()
        for x in order:
            r.redistribute(x, "doubling")
        assert r.token_counts == round_tokens((16, 16, 16), "doubling", (1, 2, 0))
    assert round_tokens((16, 8, 16), "halving", (2, 1, 0)) == (4, 4, 16)
    assert round_tokens((1, 8), "halving", (1, 0)) is None  # below one token
    assert round_tokens((16, 0, 16), "doubling", (0, 1, 0)) is None  # an inactive slot takes no round
    assert round_tokens((16, 0, 16), "doubling", (1, 0, 0)) == (16, 0, 32)  # nor does doubling wake it
    big = MAX_RING_TOKENS // 2
    assert round_tokens((big, big), "doubling", (1, 0)) is None  # past the ring's bound


def test_token_positions_are_where_the_ring_puts_them():
    for counts, even, spaced in (([16, 4, 9], 16, None), ([3, 5], 0, None), ([4, 4, 0], 4, 2)):
        ring = HashRing(counts, even, spaced)
        full = HashRing([40] * len(counts), even, spaced).snapshot()  # same spacing, 40 tokens each
        for i in range(len(counts)):
            mine = np.sort(full.positions[full.owners == i].astype(np.int64))
            assert np.array_equal(np.sort(ring.token_positions(i, 40)), mine)
            assert np.array_equal(ring.token_positions(i, 40, start=7), ring.token_positions(i, 40)[7:])


def test_the_scorer_agrees_with_the_rings_predicted_loads():
    ring = HashRing.for_method("doubling", 5, 16, even=True)
    loads = _hot(ring, 0.3)
    scorer = RingScorer(ring, loads, 1 << 14)
    for counts in ((16,) * 5, (16, 32, 32, 32, 32), (64, 32, 128, 128, 128)):
        exact = predicted_loads(HashRing(list(counts), 16).snapshot(), loads).max() * 5 / loads.total
        assert scorer.peak(counts) == pytest.approx(exact, abs=0.02)


@pytest.mark.parametrize("method,reducers", [("doubling", 4), ("halving", 4), ("doubling", 3)])
def test_a_wide_beam_is_the_exhaustive_search(method, reducers):
    ring = HashRing.for_method(method, reducers, 16, even=True)
    loads = _hot(ring, 0.35, rng_seed=reducers)
    plan = plan_first_ring(ring, method, loads, [2] * reducers, width=10**6, margin=0.0, points=2048)
    scorer = RingScorer(ring, loads, 2048)
    best = min(scorer.peak(t) for rounds in itertools.product(range(3), repeat=reducers)
               if (t := round_tokens(ring.token_counts, method, rounds)) is not None)
    assert plan.after == pytest.approx(best)
    assert plan.after < plan.before
    counts = [plan.relieved.count(i) for i in range(reducers)]
    assert plan.token_counts == round_tokens(ring.token_counts, method, counts)


def test_first_rings_of_other_sizes_are_searched_too():
    ring = HashRing.for_method("doubling", 3, 16, even=True)
    loads = _hot(ring, 0.35, rng_seed=7)
    plan = plan_first_ring(ring, "doubling", loads, [2] * 3, respace=(4, 8), width=10**6, margin=0.0, points=2048)
    best = []
    for size in (16, 4, 8):
        start = ring.copy()
        start.respace(size)
        scorer = RingScorer(start, loads, 2048)
        best += [scorer.peak(t) for rounds in itertools.product(range(3), repeat=3)
                 if (t := round_tokens(start.token_counts, "doubling", rounds)) is not None]
    assert plan.after == pytest.approx(min(best))
    alone = plan_first_ring(ring, "doubling", loads, [2] * 3, width=10**6, margin=0.0, points=2048)
    assert plan.after <= alone.after and alone.respace == 0
    # the plan is the ring it names: that first ring, then its rounds
    got = ring.copy()
    if plan.respace:
        got.respace(plan.respace)
    for x in plan.relieved:
        got.redistribute(x, "doubling")
    assert got.token_counts == plan.token_counts
    assert RingScorer(got, loads, 2048).peak(got.token_counts) == pytest.approx(plan.after)


def test_first_ring_sizes_are_powers_of_two_around_the_policys():
    assert first_ring_sizes("doubling", 16) == (2, 4, 8, 32)
    assert first_ring_sizes("halving", 16) == (8, 32, 64, 128)
    assert first_ring_sizes("doubling", 1) == (2,)


def test_a_forecast_with_nothing_to_gain_keeps_the_ring():
    ring = HashRing.for_method("doubling", 8, 16, even=True)
    uniform = KeyLoads(np.zeros(0, np.uint32), np.zeros(0), 10_000.0)
    plan = plan_first_ring(ring, "doubling", uniform, [FORECAST_ROUNDS] * 8)
    assert plan.relieved == () and plan.token_counts == ring.token_counts
    assert plan_first_ring(ring, "doubling", KeyLoads(np.zeros(0, np.uint32), np.zeros(0), 0.0), [3] * 8).relieved == ()


def test_a_key_no_ring_can_beat_spares_the_search(monkeypatch):
    import dpa.routing.policies.ring.forecast as ring_forecast

    ring = HashRing.for_method("doubling", 8, 16, even=True)
    searched = []
    monkeypatch.setattr(ring_forecast, "_beam", lambda *args: searched.append(args) or (9.0, (0,) * 8, (16,) * 8))
    one_key = _hot(ring, 0.98)  # 7.84 fair shares in one key: every ring holds at least that
    plan = plan_first_ring(ring, "doubling", one_key, [FORECAST_ROUNDS] * 8, respace=(2, 4))
    assert plan.relieved == () and plan.respace == 0 and plan.after == plan.before and not searched
    plan_first_ring(ring, "doubling", _hot(ring, 0.3), [FORECAST_ROUNDS] * 8, respace=(2, 4))
    assert len(searched) == 3  # (a key of 2.4 fair shares leaves a ring something to gain)


def test_inactive_slots_take_no_round_and_stay_empty():
    ring = HashRing.for_method("doubling", 6, 16, even=True, active=4)
    plan = plan_first_ring(ring, "doubling", _hot(ring, 0.4), [3, 3, 3, 3, 0, 0])
    assert plan.relieved and set(plan.relieved) <= {0, 1, 2, 3}
    assert plan.token_counts[4:] == (0, 0)


def _planner(policy: str = "doubling", **options) -> DPAPlanner:
    spec = make_policy(dpa.JobConfig(policy=policy, num_reducers=8, runtime="local", policy_options=options or None))
    return spec.make_planner(8)


def test_the_planner_publishes_the_first_ring_once_without_using_rounds():
    planner = _planner()
    loads = _hot(planner.ring, 0.3)
    hashes, counts, total = loads.hashes, loads.counts.astype(np.int64), int(loads.total)
    planner.observe_forecast(0, hashes, counts, total)
    decisions = planner.check(0.0)
    assert decisions and decisions[-1].snapshot is not None and all(d.snapshot is None for d in decisions[:-1])
    actions = [d.event.action for d in decisions]
    assert set(actions[1:]) <= {"double"} and actions[0] in ("double", "first_ring")
    assert all(d.event.time_s == 0.0 for d in decisions)
    assert decisions[-1].snapshot.token_counts != (16,) * 8 or planner.ring.spacing != (8, 16)
    assert planner.rounds == [0] * 8  # max_rounds stays for the running job
    planner.observe_forecast(1, hashes, counts, total)  # the next mapper's forecast: not planned on
    for r in range(8):
        planner.observe(r, 0, decisions[-1].snapshot.version)
    assert planner.check(0.1) == []


@pytest.mark.parametrize("policy", ["doubling", "halving"])
def test_the_planner_publishes_a_first_ring_of_another_size_as_one_event_and_its_rounds(policy):
    respaced = 0
    for seed in range(10):
        planner = _planner(policy)
        loads = _hot(planner.ring, 0.25, rng_seed=seed)
        planner.observe_forecast(0, loads.hashes, loads.counts.astype(np.int64), int(loads.total))
        plan = planner._first_ring
        decisions = planner.check(0.0)
        if plan is None or not plan.respace:
            continue
        respaced += 1
        first = decisions[0].event
        assert (first.action, first.reducer, first.tokens_after) == ("first_ring", -1, (plan.respace,) * 8)
        assert [d.event.reducer for d in decisions[1:]] == list(plan.relieved)
        expect = HashRing.for_method(policy, 8, plan.respace, even=True)
        for x in plan.relieved:
            expect.redistribute(x, policy)
        final = decisions[-1].snapshot
        assert final is not None and final.token_counts == expect.token_counts == plan.token_counts
        assert np.array_equal(final.positions, expect.snapshot().positions)
        assert {d.event.version for d in decisions} == {final.version}  # one ring change, published once
        assert planner.rounds == [0] * 8
    assert respaced  # (some of these forecasts are best served by another first ring)


def test_the_lookahead_predicts_on_the_forecast_until_the_reports_outnumber_it():
    planner = _planner()
    loads = _hot(planner.ring, 0.3)
    planner.observe_forecast(0, loads.hashes, loads.counts.astype(np.int64), int(loads.total))
    forecast = planner.key_loads()
    assert np.array_equal(forecast.hashes, loads.hashes) and forecast.tail == pytest.approx(loads.tail)
    other = np.array([7], np.uint32)
    planner.observe_keys(0, other, np.array([500]), 500)  # fewer records than the forecast counted
    assert planner.key_loads() is forecast
    planner.observe_keys(1, other, np.array([600]), 600)
    assert planner.key_loads().hashes.tolist() == [7]  # the reports' sketch from here on


def test_no_first_ring_without_the_lookahead_or_without_rounds():
    paper = _planner(lookahead=False)
    loads = _hot(paper.ring, 0.3)
    paper.observe_forecast(0, loads.hashes, loads.counts.astype(np.int64), int(loads.total))
    assert paper.check(0.0) == []
    for options in ({"lookahead": False}, {}):
        spec = make_policy(dpa.JobConfig(policy="doubling", runtime="local", policy_options=options or None))
        assert spec.wants_block_stats == (not options)
    assert not make_policy(dpa.JobConfig(policy="doubling", runtime="local", max_rounds=0)).wants_block_stats


def test_a_hot_key_job_runs_on_its_forecast_ring_and_counts_exactly():
    keys = np.concatenate([np.zeros(3000, np.int64), np.arange(7000, dtype=np.int64) % 900 + 1])
    np.random.default_rng(3).shuffle(keys)
    import collections

    import pyarrow as pa

    res = dpa.run(pa.table({"key": keys}), key="key", reducer=dpa.WithCost(dpa.Count(), 1e-3),
                  config=dpa.JobConfig(num_reducers=8, runtime="local", policy="doubling"))
    assert res.to_dict() == dict(collections.Counter(keys.tolist()))
    first = [e for e in res.stats.rebalances if e.time_s == 0.0]
    assert first and all(not any(e.queue_lengths) for e in first)
    no_lb = dpa.run(pa.table({"key": keys}), key="key", reducer=dpa.WithCost(dpa.Count(), 1e-3),
                    config=dpa.JobConfig(num_reducers=8, runtime="local", policy="doubling", max_rounds=0))
    assert res.stats.virtual_time_s < no_lb.stats.virtual_time_s


def test_a_ring_changed_only_before_the_first_push_needs_no_final_merge():
    from dpa.engine.output import needs_final_merge
    from dpa.routing.policies.hybrid.policy import HybridPolicy

    ring = make_policy(dpa.JobConfig(policy="doubling", num_reducers=4, runtime="local"))
    v0 = HashRing([16] * 4).snapshot()
    later = HashRing([16, 32, 32, 32])
    later._version = 2
    v2 = later.snapshot()
    assert needs_final_merge(ring, v0, v2)  # routing changed during the job (nothing known of the first push)
    assert needs_final_merge(ring, v0, v2, routed_from=0)
    assert needs_final_merge(ring, v0, v2, routed_from=1)
    assert not needs_final_merge(ring, v0, v2, routed_from=2)  # every record was routed under the final ring
    assert not needs_final_merge(ring, v0, v0, routed_from=0)
    hybrid = HybridPolicy()

    class Split:  # a hybrid snapshot with one hot key
        version, hot = 2, [7]

    assert needs_final_merge(hybrid, v0, Split(), routed_from=2)  # split keys sit on several reducers
    Split.hot = []
    assert not needs_final_merge(hybrid, v0, Split(), routed_from=2)


def test_a_job_whose_only_rounds_came_from_the_forecast_skips_the_merge_and_stays_exact():
    import collections

    import pyarrow as pa

    keys = np.concatenate([np.zeros(3000, np.int64), np.arange(7000, dtype=np.int64) % 900 + 1])
    np.random.default_rng(4).shuffle(keys)
    for tau in (0.2, 100.0):  # tau 100: no round after the forecast's
        cfg = dpa.JobConfig(num_reducers=8, runtime="local", policy="doubling", tau=tau)
        res = dpa.run(pa.table({"key": keys}), key="key", reducer=dpa.WithCost(dpa.Count(), 1e-3), config=cfg)
        assert res.to_dict() == dict(collections.Counter(keys.tolist()))
        later = [e for e in res.stats.rebalances if e.time_s > 0]
        assert res.stats.rebalances and res.stats.merged == bool(later)
        if tau > 1:
            assert not later and not res.stats.merged
