"""Dynamic Key Grouping: thresholds, Key Space promotions, candidates, scale out / down."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpa
from dpa.errors import ConfigError
from dpa.routing.policies import DKGPolicy, DKGSettings, dkg_max_machines, dkg_threshold
from dpa.routing.policies.dkg import DKGRouter, KeySpace, dkg_ideal_load
from dpa.routing.registry import make_policy


@pytest.mark.parametrize(
    "machines,ideal,threshold,max_machines",
    [(5, 20.00, 24.47, 5), (10, 10.00, 13.16, 8), (20, 5.00, 7.24, 14), (50, 2.00, 3.41, 30),
     (100, 1.00, 2.00, 51)],
)
def test_thresholds_of_table_1(machines, ideal, threshold, max_machines):
    assert round(dkg_ideal_load(machines), 2) == ideal
    assert round(dkg_threshold(machines), 2) == threshold
    assert dkg_max_machines(machines) == max_machines


def test_small_clusters_cap_the_width_at_r():
    assert [dkg_max_machines(m) for m in (1, 2, 3, 4)] == [1, 2, 3, 4]


def test_key_space_sizes_are_10_40_50_percent():
    ks = KeySpace(100)
    assert (ks.old_capacity, ks.teenage_capacity, ks.baby_capacity) == (10, 40, 50)


def space(counts):
    return {h: [c, 0] for h, c in counts.items()}


def test_promote_to_next_space_swaps_until_the_destination_tail_is_more_frequent():
    source = space({1: 9, 2: 7, 3: 4, 4: 1})
    dest = space({10: 8, 11: 5, 12: 3})
    new_source, new_dest = KeySpace.promote(source, dest, capacity=3)
    # 9 vs tail 3 -> swap; 7 vs tail 5 -> swap; 4 vs tail 8 -> stop
    assert set(new_dest) == {1, 2, 10}
    assert list(new_source) == [3, 4, 12, 11]  # demoted items go to the source's tail
    assert new_dest[1] == [9, 0]


def test_promotion_fills_free_room_and_ties_swap():
    new_source, new_dest = KeySpace.promote(space({1: 2, 2: 2, 3: 1}), space({}), capacity=2)
    assert set(new_dest) == {1, 2} and set(new_source) == {3}
    # equal counts: the source item is promoted (the loop only stops on a strictly larger tail)
    new_source, new_dest = KeySpace.promote(space({1: 5}), space({2: 5}), capacity=1)
    assert set(new_dest) == {1} and set(new_source) == {2}
    # a strictly more frequent tail stops the transition at once
    new_source, new_dest = KeySpace.promote(space({1: 4}), space({2: 5}), capacity=1)
    assert set(new_dest) == {2} and set(new_source) == {1}


def test_baby_space_is_truncated_to_its_most_frequent_items_before_promotion():
    ks = KeySpace(10)  # old 1, teenage 4, baby 5
    hs = np.arange(20, dtype=np.uint32)
    ks.observe(hs, np.arange(1, 21), np.zeros(20, dtype=np.int64))
    ks.promote_to_teenage()
    assert set(ks.teenage) == {19, 18, 17, 16}
    assert set(ks.baby) == {15}  # the 5 most frequent survived truncation, 4 moved up
    ks.promote_to_old()
    assert set(ks.old) == {19} and set(ks.teenage) == {18, 17, 16}


def test_lookup_order_and_counts():
    ks = KeySpace(10)
    ks.observe(np.array([7, 8], dtype=np.uint32), np.array([3, 1]), np.array([5, 6]))
    ks.observe(np.array([7], dtype=np.uint32), np.array([2]), np.array([9]))
    assert ks.item(7) == [5, 9] and ks.space_of(7) == "baby" and ks.item(99) is None


def router(R=10, **kw):
    opts = {"expected_keys": 10, "promote_every": 100, "old_every": 200, "warmup": 100, **kw}
    return DKGPolicy(DKGSettings(**opts)).make_router(0, R)


def test_default_candidates_are_two_consecutive_reducers():
    r = router(R=10)
    h = 37  # index 7: candidates 7 and 8
    out = r.route(np.full(99, h, dtype=np.uint32), None)
    assert np.bincount(out, minlength=10)[[7, 8]].tolist() == [50, 49]
    h = 9  # index 9 wraps around: 9 and 0
    assert set(router(R=10).route(np.full(10, h, dtype=np.uint32), None).tolist()) == {9, 0}


def test_hot_key_reaches_old_space_through_the_cycles():
    r = router(R=10)
    hot = np.uint32(5)
    stream = np.where(np.arange(400) % 2 == 0, hot, np.arange(400) % 50 + 100).astype(np.uint32)
    r.route(stream[:100], None)
    assert r.key_space.space_of(5) == "teenage"  # first cycle: Baby -> Teenage
    r.route(stream[100:200], None)
    assert r.key_space.space_of(5) == "old"  # old_every = 200: Teenage -> Old


def test_hot_key_scales_out_beyond_two_reducers_after_warm_up_only():
    R = 10
    r = router(R=R)
    hot = 5
    stream = np.full(3000, hot, dtype=np.uint32)
    out = r.route(stream, None)
    # before warm-up + old-space promotion (200 records) only reducers 5 and 6
    assert set(out[:200].tolist()) == {5, 6}
    # afterwards the key (100% of the load, far above 13.16%) scales out: 7, 8, ... in order
    used = set(out.tolist())
    assert used == {(hot + j) % R for j in range(dkg_max_machines(R))}  # capped at Table 1's 8
    assert r.scale_outs >= dkg_max_machines(R) - 2


def test_choose_scales_out_only_to_a_less_loaded_candidate():
    r = router(R=10)
    r.key_space.old[3] = [1, 0]
    r.loads[:] = [0, 0, 0, 30, 30, 40, 0, 0, 0, 0]  # total 100: 3 and 4 are above 13.16%
    # candidate 5 (40%) is not less loaded than the minimum (30%): no scale out
    assert r.choose(3, 3, total=100, warm=True) == 3
    assert 3 not in r.widths and r.scale_outs == 0
    r.loads[5] = 10
    assert r.choose(3, 3, total=100, warm=True) == 5
    assert r.widths[3] == 3 and r.scale_outs == 1


def test_choose_needs_old_space_and_warm_up_to_scale_out():
    r = router(R=10)
    r.loads[:] = [0, 0, 0, 30, 30, 0, 0, 0, 0, 0]
    assert r.choose(3, 3, total=60, warm=True) == 3  # not in the Old Space
    r.key_space.old[3] = [1, 0]
    assert r.choose(3, 3, total=60, warm=False) == 3  # still warming up
    assert r.choose(3, 3, total=60, warm=True) == 5
    assert r.scale_outs == 1


def test_choose_scales_down_when_two_candidates_are_below_the_threshold():
    r = router(R=10)
    r.widths[3] = 4  # candidates 3, 4, 5, 6
    r.loads[:] = [0, 0, 0, 20, 20, 5, 5, 50, 0, 0]  # total 100: 5 and 6 are below 13.16%
    # 4 -> 3 (two below), then 3 candidates {3, 4, 5}: only 5 below -> stop; pick 5
    assert r.choose(3, 3, total=100, warm=True) == 5
    assert r.widths[3] == 3 and r.scale_downs == 1
    r.loads[:] = [0, 0, 0, 1, 1, 1, 0, 97, 0, 0]
    assert r.choose(3, 3, total=100, warm=True) == 3  # back to the default two
    assert 3 not in r.widths and r.scale_downs == 2


def test_options_through_jobconfig_and_validation():
    s = make_policy(dpa.JobConfig(runtime="local", policy="dkg", policy_options={"expected_keys": 1000}))
    assert isinstance(s, DKGPolicy) and s.settings.expected_keys == 1000 and s.splits_keys
    assert s.make_router(0, 4).old_every == 4 * s.settings.promote_every
    with pytest.raises(ConfigError):
        DKGSettings(promote_every=0)
    with pytest.raises(ConfigError, match="max_machines"):
        DKGSettings(max_machines=1)


class PerRecordRouter(DKGRouter):
    """Runs the full chooseBestTask for every record (no fast path), as a reference."""

    def _route_chunk(self, hs, warm):
        out = []
        total = self.seen
        for h in hs.tolist():
            w = self.choose(h, h % self.num_reducers, total, warm)
            self.loads[w] += 1
            out.append(w)
            total += 1
        return np.array(out, dtype=np.int64)


@given(
    batches=st.lists(
        st.lists(st.one_of(st.just(3), st.just(3), st.just(8), st.integers(0, 60)), max_size=120),
        min_size=1, max_size=6,
    ),
    R=st.integers(1, 8),
)
@settings(max_examples=40, deadline=None)
def test_fast_path_agrees_with_the_per_record_algorithm(batches, R):
    policy = DKGPolicy(DKGSettings(expected_keys=10, promote_every=16, old_every=32, warmup=16))
    fast, slow = policy.make_router(0, R), PerRecordRouter(policy.settings, R)
    for b in batches:
        hs = np.array(b, dtype=np.uint32)
        np.testing.assert_array_equal(fast.route(hs, None), slow.route(hs, None))
    assert fast.loads == slow.loads and fast.widths == slow.widths
    assert (fast.scale_outs, fast.scale_downs) == (slow.scale_outs, slow.scale_downs)
