"""The ring lookahead: predicted loads, the best prefix of rounds, and the planner using it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpa.routing.hash_ring import HashRing
from dpa.routing.policies.ring.lookahead import KeyLoads, arc_shares, plan_rounds, predicted_loads
from dpa.routing.policies.ring.policy import DPAPlanner

RNG_HASHES = np.random.default_rng(7).integers(0, 2**32, 4000, dtype=np.uint64).astype(np.uint32)


def _hash_of(ring: HashRing, owner: int, then: HashRing, then_owner_differs: bool) -> int:
    """A key hash owned by ``owner`` on ``ring`` that moves (or stays) on ``then``."""
    now, later = ring.lookup_batch(RNG_HASHES), then.lookup_batch(RNG_HASHES)
    ok = (now == owner) & ((later != owner) if then_owner_differs else (later == owner))
    return int(RNG_HASHES[np.flatnonzero(ok)[0]])


def test_arc_shares_add_up_and_predicted_loads_place_named_keys_exactly():
    ring = HashRing([3, 1, 5])
    shares = arc_shares(ring.snapshot())
    assert shares.sum() == pytest.approx(1.0) and (shares > 0).all()
    inside = (ring.lookup_batch(RNG_HASHES) == 1).mean()
    assert inside == pytest.approx(shares[1], abs=0.03)  # the arcs are where lookups go
    h = RNG_HASHES[:3]
    loads = predicted_loads(ring.snapshot(), KeyLoads(h, np.array([5.0, 7.0, 11.0]), 100.0))
    named = np.bincount(ring.lookup_batch(h), weights=[5.0, 7.0, 11.0], minlength=3)
    assert loads == pytest.approx(named + 100.0 * shares)


def _one_key(move: bool) -> tuple[HashRing, KeyLoads]:
    ring = HashRing.for_method("halving", 4, 16, even=True)
    halved = ring.copy()
    halved.halve(0)
    h = _hash_of(ring, 0, halved, then_owner_differs=move)
    return ring, KeyLoads(np.array([h], np.uint32), np.array([40.0]), 60.0)  # the key: 1.6 fair shares


def test_a_round_that_would_hand_the_top_key_to_a_loaded_reducer_is_refused():
    ring, loads = _one_key(move=True)
    plan = plan_rounds(ring, "halving", 0, [1, 0, 0, 0], loads)
    assert plan.relieved == () and plan.after == plan.before == pytest.approx(2.2, abs=0.01)
    assert plan.token_counts == ring.token_counts == (16, 16, 16, 16)  # the ring was not touched


def test_a_round_that_sheds_the_stragglers_tail_is_taken():
    ring, loads = _one_key(move=False)
    plan = plan_rounds(ring, "halving", 0, [1, 0, 0, 0], loads)
    assert plan.relieved == (0,) and plan.token_counts == (8, 16, 16, 16)
    assert 1.6 < plan.after < plan.before - 0.05  # the key plus less of the tail than before


def test_no_key_loads_keep_the_ring():
    ring = HashRing([4, 4])
    assert plan_rounds(ring, "doubling", 0, [1, 1], KeyLoads(np.zeros(0, np.uint32), np.zeros(0), 0.0)).relieved == ()


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31), st.sampled_from(["halving", "doubling"]), st.integers(0, 3), st.integers(1, 2))
def test_a_plan_is_legal_and_better_than_the_ring_it_replaces(seed, method, straggler, rounds):
    rng = np.random.default_rng(seed)
    ring = HashRing.for_method(method, 4, 8, even=bool(seed % 2))
    h = rng.integers(0, 2**32, 12, dtype=np.uint64).astype(np.uint32)
    loads = KeyLoads(h, rng.pareto(1.2, 12) * 10 + 1, float(rng.uniform(0, 100)))
    left = [rounds] * 4
    plan = plan_rounds(ring, method, straggler, left, loads)
    assert ring.token_counts == plan.token_counts or plan.relieved
    replay = ring.copy()
    for r in plan.relieved:
        assert replay.redistribute(r, method)
    assert replay.token_counts == plan.token_counts
    assert all(plan.relieved.count(r) <= rounds for r in range(4))
    fair = loads.total / 4
    assert plan.before == pytest.approx(predicted_loads(ring.snapshot(), loads).max() / fair)
    assert plan.after == pytest.approx(predicted_loads(replay.snapshot(), loads).max() / fair)
    if plan.relieved:
        assert plan.after < plan.before - 0.05


# --------------------------------------------------------------------------- the planner


def _planner(method: str = "halving") -> DPAPlanner:
    ring = HashRing.for_method(method, 4, 16, even=True)
    return DPAPlanner(method, 0.2, 1, ring, balance_on="records", lookahead=True)


def _straggle(p: DPAPlanner) -> None:
    for r, q in enumerate((500, 100, 100, 100)):
        p.observe(r, q, p.snapshot.version)


def test_without_key_reports_the_planner_takes_the_papers_single_round():
    p = _planner()
    _straggle(p)
    (decision,) = p.check(0.0)
    assert decision.snapshot is not None and decision.event.reducer == 0 and p.rounds == [1, 0, 0, 0]


def test_a_refusal_uses_no_round_and_the_planner_looks_again_once_more_keys_were_counted():
    p = _planner()
    ring, loads = _one_key(move=True)
    p.max_rounds = 1
    p.rounds = [0, 1, 1, 1]  # only reducer 0 may be relieved: its round would move the key
    p.observe_keys(0, loads.hashes, np.array([40]), 100)
    _straggle(p)
    assert p.check(0.0) == [] and p.rounds == [0, 1, 1, 1]
    p.observe_keys(1, np.zeros(0, np.uint32), np.zeros(0, np.int64), 10)  # 110 < 125 counted
    assert p.check(1.0) == []
    other = _hash_of(ring, 0, _halved(ring), then_owner_differs=False)
    p.observe_keys(0, np.array([other], np.uint32), np.array([400]), 400)  # now a key that stays dominates
    decisions = p.check(2.0)
    assert [d.event.reducer for d in decisions] == [0] and decisions[-1].snapshot is not None
    assert p.rounds == [1, 1, 1, 1]


def _halved(ring: HashRing) -> HashRing:
    twin = ring.copy()
    twin.halve(0)
    return twin


def test_several_rounds_go_out_as_one_snapshot_with_one_event_each():
    p = _planner("doubling")
    p.max_rounds = 2
    p.rounds = [0, 0, 0, 0]
    rng = np.random.default_rng(3)
    h = rng.integers(0, 2**32, 40, dtype=np.uint64).astype(np.uint32)
    counts = (rng.pareto(1.0, 40) * 50 + 1).astype(np.int64)
    p.observe_keys(0, h, counts, int(counts.sum()))
    _straggle(p)
    decisions = p.check(0.0)
    plan = plan_rounds(_planner("doubling").ring, "doubling", 0, [2] * 4, p.key_loads())
    assert [d.event.reducer for d in decisions] == list(plan.relieved)
    assert len(decisions) >= 2  # this key set needs several rounds
    assert all(d.snapshot is None for d in decisions[:-1]) and decisions[-1].snapshot is not None
    assert decisions[-1].event.tokens_after == plan.token_counts == p.ring.token_counts
    versions = [d.event.version for d in decisions]
    assert versions == sorted(versions) and versions[-1] == decisions[-1].snapshot.version


def test_fixed_loads_count_but_never_move():
    ring = HashRing.for_method("halving", 4, 16, even=True)
    loads = KeyLoads(np.zeros(0, np.uint32), np.zeros(0), 40.0, np.array([0.0, 0.0, 0.0, 60.0]))
    assert loads.total == 100.0
    assert predicted_loads(ring.snapshot(), loads) == pytest.approx([10, 10, 10, 70])
    # relieving reducer 3 can only shed its tail, never the fixed load
    plan = plan_rounds(ring, "halving", 3, [0, 0, 0, 4], loads)
    assert plan.after >= 60 / 25


def test_hybrid_predicts_its_split_hot_keys_by_their_shares():
    import dpa
    from dpa.routing.registry import make_policy

    planner = make_policy(dpa.JobConfig(policy="hybrid", num_reducers=4)).make_planner(4)
    hot = int(RNG_HASHES[0])
    planner.observe_keys(0, np.array([hot, int(RNG_HASHES[1])], np.uint32), np.array([600, 100]), 1000)
    planner.hot = {hot: [2, 3]}
    planner.shares = {hot: np.array([0.25, 0.75])}
    loads = planner.key_loads()
    assert hot not in loads.hashes.tolist() and int(RNG_HASHES[1]) in loads.hashes.tolist()
    assert loads.fixed == pytest.approx([0, 0, 150, 450]) and loads.total == pytest.approx(1000)


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 24), st.sampled_from([1, 2, 4, 8, 16]), st.booleans(), st.integers(0, 2**31),
       st.integers(1, 4), st.booleans())
def test_the_halving_forward_run_matches_the_rounds_replayed_on_snapshots(reducers, tokens, even, seed, rounds,
                                                                          fixed):
    from dpa.routing.policies.ring.lookahead import _fair_share, _greedy

    rng = np.random.default_rng(seed)
    ring = HashRing.for_method("halving", reducers, tokens, even=even)
    hashes = rng.integers(0, 2**32, 30, dtype=np.uint64).astype(np.uint32)
    loads = KeyLoads(hashes, rng.pareto(1.2, 30) * 100, float(rng.integers(0, 5000)),
                     rng.random(reducers) * 50 if fixed else None)
    left = [int(r) for r in rng.integers(0, rounds + 1, reducers)]
    first = int(rng.integers(0, reducers))
    relieved, peaks = _greedy(ring, "halving", first, left, loads)
    # the same run, one snapshot per round
    replay = ring.copy()
    fair = _fair_share(ring, loads.total)
    x, want_relieved, want_peaks = first, [], []
    left = list(left)
    while left[x] > 0:
        left[x] -= 1
        if not replay.halve(x):
            break
        want_relieved.append(x)
        predicted = predicted_loads(replay.snapshot(), loads)
        want_peaks.append(float(predicted.max() / fair))
        x = int(np.argmax(predicted))
    assert relieved == want_relieved
    assert peaks == pytest.approx(want_peaks, rel=1e-9, abs=1e-9)
