"""Elastic reducer slots in the ring policies: first rings, scale out and in, the rule over active slots."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpa
from dpa.routing.hash_ring import HashRing
from dpa.routing.policies.hybrid.planner import HybridPlanner
from dpa.routing.policies.hybrid.policy import HybridPolicy
from dpa.routing.policies.hybrid.settings import HybridSettings
from dpa.routing.policies.hybrid.snapshot import HybridSnapshot
from dpa.routing.policies.ring.lookahead import KeyLoads, plan_rounds, predicted_loads
from dpa.routing.policies.ring.policy import DPAPlanner, DPAPolicy
from dpa.routing.policy import JobShape, Planner, PolicySpec
from dpa.routing.registry import job_shape, make_policy
from dpa.routing.ring import RingSnapshot

HASHES = np.random.default_rng(3).integers(0, 2**32, 20_000, dtype=np.uint64).astype(np.uint32)
POLICIES = ["halving", "doubling", "hybrid"]


def _config(name: str, active: int = 2, slots: int = 8, **kw) -> dpa.JobConfig:
    return dpa.JobConfig(runtime="local", policy=name, num_reducers=active, max_reducers=slots, **kw)


def _policy(name: str, active: int = 2, slots: int = 8, **kw) -> DPAPolicy | HybridPolicy:
    policy = make_policy(_config(name, active, slots, **kw))
    assert isinstance(policy, (DPAPolicy, HybridPolicy))
    return policy


def _planner(name: str, active: int = 2, slots: int = 8, **kw) -> DPAPlanner:
    planner = _policy(name, active, slots, **kw).make_planner(slots)
    assert isinstance(planner, DPAPlanner)
    return planner


def _ring(snapshot: RingSnapshot | HybridSnapshot) -> RingSnapshot:
    return snapshot.ring if isinstance(snapshot, HybridSnapshot) else snapshot


def _owners(snapshot: RingSnapshot | HybridSnapshot) -> np.ndarray:
    return _ring(snapshot).lookup_batch(HASHES)


def _report_all(planner: DPAPlanner, queues: dict[int, int]) -> None:
    for r, q in queues.items():
        planner.observe(r, q, planner.snapshot.version)


# --- the job's shape and the policies' fields -------------------------------------------


def test_the_shape_of_an_elastic_job_has_slots_and_active_reducers():
    shape = job_shape(_config("hybrid", active=2, slots=8, num_mappers=2, batch_size=100))
    assert (shape.num_reducers, shape.active_reducers, shape.elastic) == (8, 2, True)
    assert shape.block_share == 100  # a block is spread over the reducers the job starts with
    fixed = job_shape(dpa.JobConfig(runtime="local", num_reducers=4))
    assert (fixed.num_reducers, fixed.active_reducers, fixed.elastic) == (4, 0, False)
    # min_reducers alone makes a job elastic with every slot active at first
    shrink = job_shape(dpa.JobConfig(runtime="local", num_reducers=4, min_reducers=2))
    assert (shrink.num_reducers, shrink.active_reducers, shrink.elastic) == (4, 4, True)
    assert _policy("doubling", 4, 4, min_reducers=2).active_reducers == 0  # all of them


@pytest.mark.parametrize("name", POLICIES)
def test_ring_policies_take_the_elastic_shape_and_support_it(name):
    policy = _policy(name)
    assert policy.supports_elastic and policy.active_reducers == 2 and policy.elastic
    fixed = make_policy(dpa.JobConfig(runtime="local", policy=name, num_reducers=4))
    assert fixed.supports_elastic and fixed.active_reducers == 0 and not fixed.elastic
    assert not PolicySpec.supports_elastic
    assert not make_policy(dpa.JobConfig(runtime="local", policy="hash")).supports_elastic


@pytest.mark.parametrize("name", ["halving", "doubling"])
def test_an_elastic_ring_policy_always_has_a_planner_and_moves_keys(name):
    policy = _policy(name, max_rounds=0)
    assert policy.moves_keys and isinstance(policy.make_planner(8), DPAPlanner)
    snap = policy.initial_snapshot(8)
    assert np.array_equal(policy.owners(snap, HASHES), _owners(snap))
    fixed = make_policy(dpa.JobConfig(runtime="local", policy=name, max_rounds=0))
    assert not fixed.moves_keys and fixed.make_planner(4) is None


def test_planners_without_elastic_support_say_so():
    planner = Planner()
    with pytest.raises(NotImplementedError):
        _ = planner.active
    with pytest.raises(NotImplementedError):
        planner.scale_out(1, 0.0)
    with pytest.raises(NotImplementedError):
        planner.scale_in(1, 0.0)


# --- the first ring ---------------------------------------------------------------------


@pytest.mark.parametrize("name", POLICIES)
@pytest.mark.parametrize("spacing", ["even", "hashed"])
def test_the_first_ring_gives_keys_to_the_active_slots_only(name, spacing):
    policy = _policy(name, policy_options={"token_spacing": spacing})
    snap = policy.initial_snapshot(8)
    planner = policy.make_planner(8)
    assert _ring(snap).token_counts[2:] == (0,) * 6 and min(_ring(snap).token_counts[:2]) > 0
    assert set(np.unique(_owners(snap)).tolist()) == {0, 1}
    assert planner.active.tolist() == [True, True] + [False] * 6
    # the snapshot, the planner and the policy's ring agree
    for ring in (_ring(planner.snapshot), policy.ring(8).snapshot()):
        assert ring.version == 0 and ring.token_counts == _ring(snap).token_counts
        assert np.array_equal(ring.positions, _ring(snap).positions)
        assert np.array_equal(ring.owners, _ring(snap).owners)
    # the active reducers sit where a fixed ring of 2 reducers puts them (even spacing too)
    two = make_policy(dpa.JobConfig(runtime="local", policy=name, num_reducers=2,
                                    policy_options={"token_spacing": spacing})).initial_snapshot(2)
    assert np.array_equal(_ring(two).positions, _ring(snap).positions)
    assert np.array_equal(_owners(two), _owners(snap))
    if isinstance(snap, HybridSnapshot):
        assert snap.cands.shape == (0, 8) and snap.cumw.shape == (0, 8)


# --- scale out / scale in ---------------------------------------------------------------


@pytest.mark.parametrize("name", POLICIES)
def test_scale_out_gives_the_new_slot_a_share_and_moves_keys_only_to_it(name):
    planner = _planner(name)
    before = planner.snapshot
    d = planner.scale_out(5, 2.5)
    assert d.snapshot is planner.snapshot and d.snapshot.version == before.version + 1
    assert (d.event.time_s, d.event.reducer, d.event.action) == (2.5, 5, "scale_out")
    assert d.event.version == d.snapshot.version and d.event.tokens_after == _ring(d.snapshot).token_counts
    assert len(d.event.queue_lengths) == 8
    assert _ring(d.snapshot).token_counts[5] == 16  # the median of (16, 16)
    assert planner.active.tolist() == [True, True, False, False, False, True, False, False]
    old, new = _owners(before), _owners(d.snapshot)
    moved = old != new
    assert (new[moved] == 5).all() and set(np.unique(new).tolist()) == {0, 1, 5}
    assert 0.15 < (new == 5).mean() < 0.55  # about a third of the keys


@pytest.mark.parametrize("name", POLICIES)
def test_scale_in_moves_only_the_retired_slots_keys(name):
    planner = _planner(name, active=3)
    before = planner.snapshot
    d = planner.scale_in(1, 3.0)
    assert (d.event.reducer, d.event.action) == (1, "scale_in")
    assert d.snapshot.version == before.version + 1 and _ring(d.snapshot).token_counts[1] == 0
    assert planner.active.tolist() == [True, False, True] + [False] * 5
    old, new = _owners(before), _owners(d.snapshot)
    moved = old != new
    assert moved.any() and (old[moved] == 1).all() and (new != 1).all()


def test_the_scale_out_token_rule_is_the_lower_median_a_power_of_two_for_halving():
    for method, expected in (("halving", 8), ("doubling", 8)):
        p = DPAPlanner(method, 0.2, 1, HashRing([8, 16, 0, 0]))
        assert p.scale_out_tokens() == expected  # lower median of (8, 16)
    for method, expected in (("halving", 2), ("doubling", 3)):
        p = DPAPlanner(method, 0.2, 1, HashRing([3, 16, 3, 0]))
        assert p.scale_out_tokens() == expected  # 3, rounded down to a power of two for halving
    p = DPAPlanner("halving", 0.2, 1, HashRing([1, 4, 16, 0]))
    assert p.scale_out_tokens() == 4
    d = p.scale_out(3, 0.0)
    assert d.snapshot.token_counts == (1, 4, 16, 4) and p.rounds[3] == 0


@pytest.mark.parametrize("name", POLICIES)
def test_bad_slots_are_value_errors(name):
    planner = _planner(name, active=2, slots=4)
    version = planner.snapshot.version
    for bad in (4, -1, 1.5, True):
        with pytest.raises(ValueError, match="slot"):
            planner.scale_out(bad, 0.0)
        with pytest.raises(ValueError, match="slot"):
            planner.scale_in(bad, 0.0)
    with pytest.raises(ValueError, match="active already"):
        planner.scale_out(1, 0.0)
    with pytest.raises(ValueError, match="not active"):
        planner.scale_in(3, 0.0)
    planner.scale_in(0, 0.0)
    with pytest.raises(ValueError, match="last active"):
        planner.scale_in(1, 0.0)
    assert planner.snapshot.version == version + 1 and planner.active.tolist() == [False, True, False, False]


@pytest.mark.parametrize("name", POLICIES)
def test_resume_restores_the_active_slots(name):
    policy = _policy(name)
    planner = policy.make_planner(8)
    planner.scale_out(4, 0.0)
    d = planner.scale_in(0, 1.0)
    fresh = policy.make_planner(8)
    assert fresh.active.tolist() == [True, True] + [False] * 6
    assert fresh.resume(d.snapshot)
    assert fresh.active.tolist() == planner.active.tolist() == [False, True, False, False, True] + [False] * 3
    assert fresh.snapshot.version == d.snapshot.version
    # it goes on from there: a new slot, a higher version, only keys to it move
    e = fresh.scale_out(0, 2.0)
    assert e.snapshot.version == d.snapshot.version + 1
    moved = _owners(d.snapshot) != _owners(e.snapshot)
    assert (_owners(e.snapshot)[moved] == 0).all()


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(POLICIES), st.lists(st.integers(0, 5), min_size=1, max_size=12))
def test_any_sequence_of_scalings_keeps_owners_active_and_moves_only_the_changed_slots_keys(name, slots):
    planner = _planner(name, active=2, slots=6)
    for slot in slots:
        before = planner.snapshot
        active = planner.active
        if active[slot] and active.sum() == 1:
            with pytest.raises(ValueError):
                planner.scale_in(slot, 0.0)
            continue
        d = planner.scale_in(slot, 0.0) if active[slot] else planner.scale_out(slot, 0.0)
        assert d.snapshot.version == before.version + 1 and d.event.reducer == slot
        assert planner.active[slot] != active[slot]
        old, new = _owners(before), _owners(d.snapshot)
        assert planner.active[new].all()  # every key belongs to an active reducer
        assert (np.asarray(_ring(d.snapshot).token_counts) > 0).tolist() == planner.active.tolist()
        moved = old != new
        if planner.active[slot]:
            assert (new[moved] == slot).all()
        else:
            assert (old[moved] == slot).all() and not (new == slot).any()


# --- the rule over active slots ---------------------------------------------------------


@pytest.mark.parametrize("method", ["halving", "doubling"])
def test_check_ignores_inactive_slots(method):
    planner = _planner(method, max_rounds=2,
                       policy_options={"lookahead": False, "balance_on": "records", "min_gap": 0})
    planner.observe(6, 5000, 0)  # a stale report of an inactive slot: not compared
    _report_all(planner, {0: 10, 1: 100})  # the inactive slots never report: no gate on them
    (d,) = planner.check(1.0)
    assert d.event.reducer == 1 and d.snapshot.version == 1
    counts = d.snapshot.token_counts
    assert counts[2:] == (0,) * 6  # no round gives tokens to an inactive slot
    assert counts[:2] == ((16, 8) if method == "halving" else (32, 16))
    assert planner.check(1.1) == []  # slot 0 has not reported under version 1
    _report_all(planner, {0: 10, 1: 10})
    assert planner.check(1.2) == []  # balanced: slot 6's 5000 records do not count


def test_a_single_active_reducer_is_never_a_straggler():
    planner = _planner("doubling", max_rounds=2, policy_options={"lookahead": False, "balance_on": "records",
                                                                  "min_gap": 0})
    planner.scale_in(0, 0.0)
    _report_all(planner, {1: 1000})
    assert planner.check(1.0) == []


def test_the_gate_waits_for_a_new_slot_to_report():
    planner = _planner("halving", max_rounds=2,
                       policy_options={"lookahead": False, "balance_on": "records", "min_gap": 0})
    planner.scale_out(3, 0.5)
    _report_all(planner, {0: 10, 1: 100})
    assert planner.check(1.0) == []  # slot 3 has not reported under the new version
    _report_all(planner, {3: 0})
    (d,) = planner.check(1.1)
    assert (d.event.reducer, d.event.action) == (1, "halve")


def test_the_work_rule_rates_unmeasured_reducers_among_active_slots_only():
    planner = _planner("doubling", active=3, slots=5, policy_options={"lookahead": False})
    v = planner.snapshot.version
    for r, q in enumerate([100, 10, 10]):
        planner.observe(r, q, v)
    planner.observe_work(0, 0.3, v)  # 0.003 s per record
    planner.observe(4, 10, v)
    planner.observe_work(4, 100.0, v)  # an inactive slot's (stale) rate: ignored
    loads, _ = planner.loads()
    assert loads == pytest.approx([0.3, 0.03, 0.03, 0.0, 0.0])


@pytest.mark.parametrize("method", ["halving", "doubling"])
def test_the_lookahead_gives_no_round_to_an_inactive_slot(method):
    planner = _planner(method, active=3, slots=6, max_rounds=3,
                       policy_options={"balance_on": "records", "min_gap": 0})
    snap = planner.snapshot
    # reducer 0 owns two heavy keys; the rest is a uniform tail
    mine = HASHES[_owners(snap) == 0][:2]
    planner.observe_keys(0, mine, np.array([300, 300]), 1000)
    planner.observe_keys(1, np.zeros(0, np.uint32), np.zeros(0, np.int64), 200)
    planner.observe_keys(2, np.zeros(0, np.uint32), np.zeros(0, np.int64), 200)
    _report_all(planner, {0: 1000, 1: 200, 2: 200})
    for decision in planner.check(1.0):
        assert decision.event.reducer in (0, 1, 2)
    assert planner.ring.token_counts[3:] == (0, 0, 0)
    # plan_rounds itself never activates a slot, even with rounds to spare, and a fair share
    # is the active reducers' one
    ring = HashRing.for_method(method, 6, 8, even=True, active=3)
    loads = KeyLoads(mine, np.array([300.0, 300.0]), 800.0)
    plan = plan_rounds(ring, method, 0, [3] * 6, loads)
    assert plan.token_counts[3:] == (0, 0, 0) and all(r < 3 for r in plan.relieved)
    assert plan.before == pytest.approx(predicted_loads(ring.snapshot(), loads).max() / (1400.0 / 3))


# --- hybrid: hot keys over active slots -------------------------------------------------


def _hybrid(active: int = 3, slots: int = 8, **options) -> tuple[HybridPolicy, HybridPlanner]:
    policy = _policy("hybrid", active, slots, max_rounds=0, policy_options={"min_gap": 0, **options})
    assert isinstance(policy, HybridPolicy)
    planner = policy.make_planner(slots)
    return policy, planner


def _split_hot_key(planner: HybridPlanner, key: int = 12345) -> HybridSnapshot:
    """Reports a key of 90% of the records at its home; returns the published split."""
    active = np.flatnonzero(planner.active).tolist()
    home = int(planner.snapshot.lookup_batch(np.array([key], np.uint32))[0])
    planner.observe_keys(home, np.array([key], np.uint32), np.array([900]), 1000)
    for r in active:
        if r != home:
            planner.observe_keys(r, np.zeros(0, np.uint32), np.zeros(0, np.int64), 100)
        planner.observe_held(r, 1000 if r == home else 100)
        planner.observe(r, 100, planner.snapshot.version)
    (d,) = planner.check(1.0)
    assert d.event.action == "split" and d.event.reducer in active
    return d.snapshot


def test_hybrid_splits_hot_keys_over_active_slots_only():
    policy, planner = _hybrid(active=3, slots=8)
    assert planner.theta == pytest.approx(1 / 24)  # 1 / (8 R), R the active reducers
    snap = _split_hot_key(planner)
    cands = snap.candidates(0).tolist()
    assert sorted(cands) == [0, 1, 2]  # every active reducer, none of the inactive ones
    assert snap.cands.shape == (1, 8)


def test_hybrid_scale_in_removes_a_candidate_everywhere_and_renormalises():
    policy, planner = _hybrid(active=4, slots=8, min_width=3)
    snap = _split_hot_key(planner)
    key = int(snap.hot[0])
    cands = planner.hot[key]
    gone = cands[1]
    d = planner.scale_in(gone, 2.0)
    assert d.event.action == "scale_in" and d.snapshot.moves is None
    assert gone not in planner.hot[key] and planner.hot[key][0] == cands[0]
    assert planner.shares[key].sum() == pytest.approx(1.0) and len(planner.shares[key]) == len(cands) - 1
    new = d.snapshot
    assert gone not in new.candidates(0).tolist() and new.cumw[0, len(cands) - 2] == pytest.approx(1.0)
    # the home goes too: the next candidate becomes the home
    second = planner.hot[key][1]
    d = planner.scale_in(cands[0], 3.0)
    assert planner.hot[key][0] == second and d.snapshot.candidates(0)[0] == second
    # a key left without candidates goes whole to its new ring owner
    planner.hot[key] = [second]
    planner.shares[key] = np.ones(1)
    d = planner.scale_in(second, 4.0)
    owner = int(d.snapshot.lookup_batch(np.array([key], np.uint32))[0])
    assert planner.hot[key] == [owner] and d.snapshot.candidates(0).tolist() == [owner]
    assert planner.active[owner] and np.allclose(planner.shares[key], [1.0])
    assert planner.theta == pytest.approx(1 / (8 * planner.num_active))


def test_hybrid_scale_out_keeps_the_hot_keys_and_moves_the_tail_with_the_arcs():
    policy, planner = _hybrid(active=2, slots=4)
    snap = _split_hot_key(planner)
    tail = planner.tail.copy()
    d = planner.scale_out(3, 2.0)
    assert d.event.action == "scale_out" and d.snapshot.moves is None
    assert np.array_equal(d.snapshot.hot, snap.hot) and np.array_equal(d.snapshot.cands, snap.cands)
    assert planner.tail.sum() == pytest.approx(tail.sum()) and planner.tail[3] > 0
    assert planner.theta == pytest.approx(1 / 24)


def test_hybrid_hand_overs_level_active_slots_only():
    policy = HybridPolicy(HybridSettings(max_rounds=0, min_width=3), JobShape(num_reducers=6, active_reducers=3, elastic=True))
    planner = policy.make_planner(6)
    key = 4242
    planner.observe_keys(0, np.array([key], np.uint32), np.array([90]), 90)
    for r in range(6):
        planner.observe(r, 0, 0)
    planner.hot = {key: [0, 1, 2]}
    planner.shares = {key: np.full(3, 1 / 3)}
    planner._snapshot = planner._ring_changed()
    v = planner.snapshot.version
    for r, (held, queued) in enumerate([(60, 50), (30, 20), (0, 0), (500, 500), (0, 0), (0, 0)]):
        planner.observe_held(r, held)  # slot 3 is inactive: its figures count for nothing
        planner.observe(r, queued, v)
    assert planner._transfers(planner.hot) is None  # an excess moves once seen at two checks in a row
    moves = planner._transfers(planner.hot)
    assert moves is not None and moves.shape == (6, 6)
    assert moves[3:].sum() == 0 and moves[:, 3:].sum() == 0
    assert moves[0, 2] == 30 and moves.sum() == 30  # targets of 90 // 3 records
