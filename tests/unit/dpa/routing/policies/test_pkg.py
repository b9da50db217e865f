"""Partial Key Grouping: hash choices, the greedy-d step, key splitting, local loads."""

from __future__ import annotations

import struct

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpa
from dpa.errors import ConfigError
from dpa.keys.encoding import hash_key
from dpa.keys.murmur3 import murmur3_32_batch
from dpa.routing.policies import PKGPolicy, PKGSettings, candidates, seeded_hash32
from dpa.routing.registry import make_policy


@given(st.lists(st.integers(0, 2**32 - 1), max_size=50), st.integers(0, 2**32 - 1))
@settings(max_examples=50, deadline=None)
def test_seeded_hash_is_murmur3_of_the_little_endian_hash(values, seed):
    out = seeded_hash32(np.array(values, dtype=np.uint32), seed)
    assert out.dtype == np.uint32
    assert out.tolist() == [mmh3.hash(struct.pack("<I", v), seed, signed=False) for v in values]


def test_seed_zero_agrees_with_the_runtime_murmur():
    hs = np.random.default_rng(3).integers(0, 2**32, 500, dtype=np.uint64).astype(np.uint32)
    ref = murmur3_32_batch(hs.astype("<u4").tobytes(), np.arange(len(hs) + 1) * 4)
    np.testing.assert_array_equal(seeded_hash32(hs, 0), ref)


def test_candidates_are_seeded_murmurs_modulo_r():
    hs = np.array([0, 1, 12345, 2**32 - 1], dtype=np.uint32)
    c = candidates(hs, 3, 7)
    assert c.shape == (3, 4)
    for i in range(3):
        np.testing.assert_array_equal(c[i], seeded_hash32(hs, i) % 7)


def key_with(R, same):
    """A key hash whose two PKG choices differ (or coincide with ``same``)."""
    for h in range(10_000):
        a, b = candidates(np.array([h], dtype=np.uint32), 2, R)[:, 0]
        if (a == b) == same:
            return h, int(a), int(b)
    raise AssertionError("no such key")


def router(R=5, d=2):
    return PKGPolicy(PKGSettings(d=d)).make_router(0, R)


def test_picks_the_less_loaded_of_its_two_choices_and_ties_go_to_the_first():
    h, a, b = key_with(5, same=False)
    r = router()
    one = np.array([h], dtype=np.uint32)
    assert r.route(one, None).tolist() == [a]  # tie 0/0 -> H_1
    assert r.route(one, None).tolist() == [b]  # a has 1, b has 0
    r.loads[b] = 10
    assert r.route(one, None).tolist() == [a]
    r.loads[a] = 50
    assert r.route(one, None).tolist() == [b]
    assert r.loads[b] == 11 and r.loads[a] == 50


def test_hot_key_is_split_over_exactly_its_two_choices_evenly():
    h, a, b = key_with(8, same=False)
    r = router(8)
    out = r.route(np.full(1001, h, dtype=np.uint32), None)
    counts = np.bincount(out, minlength=8)
    assert set(np.flatnonzero(counts)) == {a, b}
    assert counts[a] == 501 and counts[b] == 500


def test_key_whose_choices_coincide_stays_on_one_reducer():
    h, a, _ = key_with(8, same=True)
    out = router(8).route(np.full(50, h, dtype=np.uint32), None)
    assert set(out.tolist()) == {a}


def test_d_choices_bound_the_spread_of_a_key():
    r = router(16, d=4)
    hs = np.array([hash_key(k) for k in ("a", "b", "c")] * 400, dtype=np.uint32)
    out = r.route(hs, None)
    c = candidates(hs[:3], 4, 16)
    for j in range(3):
        assert set(out[j::3].tolist()) <= set(c[:, j].tolist())
    # alone, a hot key is spread evenly over all its distinct choices
    h = hs[0]
    alone = router(16, d=4).route(np.full(400, h, dtype=np.uint32), None)
    counts = np.bincount(alone, minlength=16)
    choices = set(c[:, 0].tolist())
    assert set(np.flatnonzero(counts).tolist()) == choices
    assert counts.max() - counts[list(choices)].min() <= 1


def reference_pkg(hashes, d, R, batches):
    """Plain per-record greedy-d with local loads, for comparison."""
    loads = [0] * R
    out = []
    for batch in batches:
        c = candidates(np.array(batch, dtype=np.uint32), d, R)
        for j in range(len(batch)):
            best = int(c[0, j])
            for i in range(1, d):
                if loads[int(c[i, j])] < loads[best]:
                    best = int(c[i, j])
            loads[best] += 1
            out.append(best)
    return out, loads


@given(
    batches=st.lists(st.lists(st.integers(0, 40), max_size=60), min_size=1, max_size=4),
    d=st.integers(1, 4),
    R=st.integers(1, 9),
)
@settings(max_examples=60, deadline=None)
def test_matches_a_plain_reference_implementation(batches, d, R):
    r = router(R, d)
    got = [x for b in batches for x in r.route(np.array(b, dtype=np.uint32), None).tolist()]
    want, loads = reference_pkg(None, d, R, batches)
    assert got == want
    assert r.loads == loads


def test_local_load_estimation_is_per_mapper():
    spec = PKGPolicy()
    r0, r1 = spec.make_router(0, 4), spec.make_router(1, 4)
    hs = np.arange(100, dtype=np.uint32)
    r0.route(hs, None)
    assert sum(r0.loads) == 100 and sum(r1.loads) == 0
    # identical history -> identical decisions, whatever the mapper id
    np.testing.assert_array_equal(spec.make_router(7, 4).route(hs, None), PKGPolicy().make_router(0, 4).route(hs, None))


def test_options_through_jobconfig():
    spec = make_policy(dpa.JobConfig(runtime="local", policy="pkg", policy_options={"d": 3}))
    assert isinstance(spec, PKGPolicy) and spec.settings.d == 3
    assert spec.splits_keys and spec.needs_merge and spec.owners(None, np.zeros(0)) is None
    with pytest.raises(ConfigError, match="d must be an integer >= 1"):
        make_policy(dpa.JobConfig(runtime="local", policy="pkg", policy_options={"d": 0}))
    with pytest.raises(ConfigError, match="bad policy_options"):
        make_policy(dpa.JobConfig(runtime="local", policy="pkg", policy_options={"choices": 2}))
