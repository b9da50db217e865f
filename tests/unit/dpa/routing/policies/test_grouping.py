"""Shuffle grouping, static PoTC and the greedy baselines of the PKG paper."""

from __future__ import annotations

import numpy as np
import pytest

import dpa
from dpa.errors import ConfigError
from dpa.routing.policies import (
    OffGreedyPolicy,
    OffGreedySettings,
    OnGreedyPolicy,
    PoTCPolicy,
    ShufflePolicy,
    ShuffleSettings,
    candidates,
    lpt_assignment,
)
from dpa.routing.policy import JobShape
from dpa.routing.registry import make_policy


def spec(name, **kw):
    return make_policy(dpa.JobConfig(runtime="local", policy=name, **kw))


def test_shuffle_is_round_robin_across_batches_with_per_mapper_offsets():
    r0 = ShufflePolicy().make_router(0, 3)
    r1 = ShufflePolicy().make_router(1, 3)
    hs = np.zeros(4, dtype=np.uint32)
    assert r0.route(hs, None).tolist() == [0, 1, 2, 0]
    assert r0.route(hs[:2], None).tolist() == [1, 2]
    assert r1.route(hs, None).tolist() == [1, 2, 0, 1]
    assert ShufflePolicy(ShuffleSettings(seed=2)).make_router(0, 3).route(hs, None).tolist() == [2, 0, 1, 2]
    s = spec("shuffle", seed=5)
    assert s.seed == 5 and s.splits_keys and s.owners(None, hs) is None


def two_choice_key(R):
    for h in range(10_000):
        a, b = candidates(np.array([h], dtype=np.uint32), 2, R)[:, 0]
        if a != b:
            return h, int(a), int(b)
    raise AssertionError


def test_potc_binds_a_new_key_to_its_less_loaded_choice_forever():
    h, a, b = two_choice_key(6)
    r = PoTCPolicy().make_router(0, 6)
    r.loads[a] = 5  # a busier than b when the key first shows up
    out = r.route(np.full(20, h, dtype=np.uint32), None)
    assert set(out.tolist()) == {b}
    assert r.table[h] == b and r.loads[b] == 20
    # it stays bound even once b is far busier
    assert set(r.route(np.full(5, h, dtype=np.uint32), None).tolist()) == {b}


def test_on_greedy_binds_new_keys_to_the_least_loaded_reducer():
    r = OnGreedyPolicy().make_router(0, 3)
    out = r.route(np.array([10, 10, 10, 20, 30, 30, 40, 10], dtype=np.uint32), None)
    # 10 -> 0 (all empty, lowest id); 20 -> 1; 30 -> 2; 40 -> 1 (loads 3, 1, 2)
    assert out.tolist() == [0, 0, 0, 1, 2, 2, 1, 0]
    assert r.table == {10: 0, 20: 1, 30: 2, 40: 1}


def test_lpt_assigns_by_decreasing_frequency_to_the_least_loaded():
    hashes = np.array([5, 6, 7, 8, 9])
    counts = np.array([1, 10, 7, 3, 3])
    # order: 6 (10) -> r0; 7 (7) -> r1; 8 (3, lower hash first) -> r1 (7 < 10); 9 (3) -> r0
    # (10 vs 10: lowest id); 5 (1) -> r1 (10 vs 13)
    assert lpt_assignment(hashes, counts, 2).tolist() == [1, 0, 1, 1, 0]


def test_off_greedy_shares_one_table_across_mappers_when_frequencies_are_known():
    freqs = {100: 50, 200: 30, 300: 20, 400: 1}
    s = OffGreedyPolicy(OffGreedySettings(frequencies=freqs), JobShape(num_mappers=3))
    routers = [s.make_router(m, 3) for m in range(3)]
    hs = np.array([100, 200, 300, 400, 100], dtype=np.uint32)
    outs = [r.route(hs, None).tolist() for r in routers]
    assert outs[0] == outs[1] == outs[2] == [0, 1, 2, 2, 0]
    # an unknown key falls back to online greedy on the mapper's local loads
    r = routers[0]  # local loads now [2, 1, 2]
    assert r.route(np.array([999], dtype=np.uint32), None).tolist() == [1]


def test_off_greedy_without_frequencies_samples_the_first_batch():
    r = spec("off-greedy").make_router(0, 2)
    first = np.array([1, 1, 1, 2, 3, 3], dtype=np.uint32)
    assert r.route(first, None).tolist() == [0, 0, 0, 1, 1, 1]
    assert r.route(np.array([3, 1, 4], dtype=np.uint32), None).tolist() == [1, 0, 0]


def test_off_greedy_frequency_pairs_and_validation():
    s = OffGreedyPolicy(OffGreedySettings(frequencies=(np.array([1, 2, 1]), np.array([1, 5, 1]))))
    assert s.make_router(0, 2).route(np.array([2, 1], dtype=np.uint32), None).tolist() == [0, 1]
    with pytest.raises(ConfigError, match="32-bit key hashes"):
        OffGreedySettings(frequencies={-1: 3})
    with pytest.raises(ConfigError, match="mapping"):
        OffGreedySettings(frequencies=5)


@pytest.mark.parametrize("name", ["potc", "on-greedy", "off-greedy"])
def test_binding_policies_split_only_across_mappers(name):
    one = spec(name, num_mappers=1)
    many = spec(name, num_mappers=3)
    assert not one.splits_keys and not one.needs_merge
    assert many.splits_keys and many.needs_merge
    assert one.binds_keys and one.owners(one.initial_snapshot(4), np.zeros(3, np.uint32)) is None


def test_potc_d_option_and_validation():
    assert spec("potc", policy_options={"d": 3}).settings.d == 3
    with pytest.raises(ConfigError):
        spec("potc", policy_options={"d": -1})
