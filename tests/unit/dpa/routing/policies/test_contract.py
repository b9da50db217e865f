"""Contract every registered policy must satisfy (Hypothesis), run against all of them."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpa
from dpa.routing.registry import make_policy, policies

#: Extra option sets exercised besides each policy's defaults (small DKG cycles, so
#: promotions, warm-up and scaling happen inside short test streams).
VARIANTS: dict[str, list[dict]] = {
    "pkg": [{"d": 1}, {"d": 3}],
    "potc": [{"d": 3}],
    "dkg": [{"expected_keys": 10, "promote_every": 8, "old_every": 16, "warmup": 8}],
    "mixed": [{"interval": 20, "table_limit": 5}],
    "mintable": [{"interval": 20}],
    "minmig": [{"interval": 20}],
    "hybrid": [{"theta": 0.05, "min_count": 1}],
}
CASES = [(name, {}) for name in sorted(policies())] + [
    (name, opts) for name, variants in sorted(VARIANTS.items()) for opts in variants
]
IDS = [f"{n}{opts or ''}" for n, opts in CASES]

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

hashes_st = st.lists(
    st.one_of(st.integers(0, 2**32 - 1), st.sampled_from([0, 1, 7, 2**31, 2**32 - 1])),
    min_size=0, max_size=200,
)
batches_st = st.lists(hashes_st, min_size=1, max_size=5)


def build(name, opts, num_mappers=2, num_reducers=4):
    return make_policy(dpa.JobConfig(runtime="local", policy=name, num_mappers=num_mappers,
                                     num_reducers=num_reducers, policy_options=dict(opts)))


def route_all(router, batches, snapshot):
    out = [np.asarray(router.route(np.array(b, dtype=np.uint32), snapshot)) for b in batches]
    return out


def test_every_policy_of_the_papers_is_registered():
    names = set(policies())
    assert {"shuffle", "potc", "on-greedy", "off-greedy", "pkg", "dkg", "hash"} <= names


@pytest.mark.parametrize("name,opts", CASES, ids=IDS)
@FAST
@given(batches=batches_st, R=st.integers(1, 9), M=st.integers(1, 3), mapper=st.integers(0, 2))
def test_routes_in_range_and_deterministic(name, opts, batches, R, M, mapper):
    spec = build(name, opts, M, R)
    snap = spec.initial_snapshot(R)
    a = route_all(spec.make_router(mapper, R), batches, snap)
    b = route_all(build(name, opts, M, R).make_router(mapper, R), batches, snap)
    for batch, ra, rb in zip(batches, a, b, strict=True):
        assert ra.shape == (len(batch),)
        assert np.issubdtype(ra.dtype, np.integer)
        assert ((ra >= 0) & (ra < R)).all()
        np.testing.assert_array_equal(ra, rb)


@pytest.mark.parametrize("name,opts", CASES, ids=IDS)
@FAST
@given(batches=batches_st, R=st.integers(1, 9), M=st.integers(1, 3))
def test_one_owner_per_key_unless_the_policy_splits(name, opts, batches, R, M):
    """Non-splitting policies (and binding ones, per mapper) send a key to one reducer."""
    spec = build(name, opts, M, R)
    one_per_mapper = (not spec.splits_keys) or getattr(spec, "binds_keys", False)
    if not one_per_mapper:
        return
    snap = spec.initial_snapshot(R)
    owner: dict[int, int] = {}
    for batch, routed in zip(batches, route_all(spec.make_router(0, R), batches, snap), strict=True):
        for h, r in zip(batch, routed.tolist(), strict=True):
            assert owner.setdefault(h, r) == r, f"key {h} routed to {owner[h]} and {r}"
        owners = spec.owners(snap, np.array(batch, dtype=np.uint32))
        if owners is not None:  # the ownership the reducers use agrees with the routing
            np.testing.assert_array_equal(np.asarray(owners), routed)


@pytest.mark.parametrize("name,opts", CASES, ids=IDS)
@FAST
@given(
    reports=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 1000)), min_size=1, max_size=60),
    hashes=hashes_st,
)
def test_every_key_keeps_an_owner_after_planner_decisions(name, opts, reports, hashes):
    R = 6
    spec = build(name, opts, 2, R)
    planner = spec.make_planner(R)
    snap = spec.initial_snapshot(R) if planner is None else planner.snapshot
    router = spec.make_router(0, R)
    hs = np.array(hashes, dtype=np.uint32)
    versions = [snap.version]
    for step, (reducer, queue) in enumerate(reports):
        if planner is not None:
            planner.observe(reducer, queue, snap.version)
            for other in range(R):  # every reducer reports under the current version
                if other != reducer:
                    planner.observe(other, queue // (other + 2), snap.version)
            for decision in planner.check(float(step)):
                assert 0 <= decision.event.reducer < R
                if decision.snapshot is not None:
                    assert decision.snapshot.version > snap.version
                    snap = decision.snapshot
                    versions.append(snap.version)
        routed = np.asarray(router.route(hs, snap))
        assert ((routed >= 0) & (routed < R)).all()
        owners = spec.owners(snap, hs)
        if owners is not None:
            owners = np.asarray(owners)
            assert owners.shape == hs.shape and ((owners >= 0) & (owners < R)).all()
    assert versions == sorted(set(versions))


vocab = [f"w{i}" for i in range(30)]
words_st = st.lists(st.one_of(st.just("hot"), st.just("hot"), st.sampled_from(vocab)),
                    min_size=1, max_size=400)


@pytest.mark.parametrize("name,opts", CASES, ids=IDS)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(words=words_st, M=st.integers(1, 3), R=st.integers(1, 5), batch=st.integers(1, 64))
def test_end_to_end_word_count_is_exact(name, opts, words, M, R, batch):
    cfg = dpa.JobConfig(runtime="local", policy=name, policy_options=dict(opts), num_mappers=M,
                        num_reducers=R, batch_size=batch, chunk_size=max(1, batch // 2),
                        max_rounds=2, tau=0.1)
    res = dpa.run(words, reducer=dpa.WithCost(dpa.Count(), 0.001), config=cfg)
    assert res.to_dict() == dict(collections.Counter(words))
    assert sum(res.stats.processed) == len(words)
