"""Tests for dpa.routing.ring: the paper's consistent-hash ring with halving and doubling."""

from __future__ import annotations

import pickle

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpa.errors import ConfigError
from dpa.keys.encoding import hash_key
from dpa.routing.hash_ring import HashRing
from dpa.routing.ring import DEFAULT_HALVING_TOKENS, RingSnapshot, token_position

HASHES = st.integers(min_value=0, max_value=2**32 - 1)
COUNTS = st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=6).filter(
    lambda c: sum(c) > 0
)


def brute_force_owner(counts: tuple[int, ...], h: int) -> int:
    """Walks clockwise from h over every token; ties by (position, reducer, j)."""
    tokens = sorted(
        (mmh3.hash(f"token-{i}-{j}", 0, signed=False), i, j)
        for i, t in enumerate(counts)
        for j in range(t)
    )
    for pos, i, _ in tokens:
        if pos >= h:
            return i
    return tokens[0][1]


def test_token_positions_are_the_papers() -> None:
    assert token_position(0, 0) == mmh3.hash("token-0-0", 0, signed=False)
    assert token_position(3, 15) == mmh3.hash(b"token-3-15", seed=0, signed=False)
    snap = RingSnapshot.build([1, 1])
    expected = sorted(mmh3.hash(f"token-{i}-0", 0, signed=False) for i in range(2))
    assert snap.positions.tolist() == expected
    assert snap.positions.dtype == np.uint32
    assert snap.owners.dtype == np.int32


@settings(max_examples=100, deadline=None)
@given(COUNTS, st.lists(HASHES, max_size=20))
def test_lookup_matches_brute_force(counts: list[int], hashes: list[int]) -> None:
    snap = RingSnapshot.build(counts)
    # Include exact token positions, their neighbours and the ring's ends.
    probes = list(hashes) + [0, 2**32 - 1]
    for p in snap.positions.tolist():
        probes += [p, max(p - 1, 0), min(p + 1, 2**32 - 1)]
    for h in probes:
        assert snap.lookup_hash(h) == brute_force_owner(tuple(counts), h)
    batch = snap.lookup_batch(np.array(probes, dtype=np.uint32))
    assert batch.dtype == np.int32
    assert batch.tolist() == [snap.lookup_hash(h) for h in probes]
    # int64 input works too.
    assert snap.lookup_batch(np.array(probes, dtype=np.int64)).tolist() == batch.tolist()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=300), min_size=1, max_size=5).filter(lambda c: sum(c) > 0),
       st.lists(HASHES, max_size=50), st.booleans())
def test_bucket_lookup_matches_binary_search(counts: list[int], hashes: list[int], even: bool) -> None:
    # Past 2**16 looked-up hashes a snapshot answers from its bucket table: the same owners,
    # at token positions, next to them, at bucket edges and at the ring's ends too.
    snap = RingSnapshot.build(counts, even=(len(counts), 4) if even else (0, 0))
    probes = list(hashes) + [0, 2**32 - 1] + [b << 16 for b in (0, 1, 2**15, 2**16 - 1)]
    probes += [(b << 16) - 1 for b in (1, 2**15, 2**16 - 1)]
    for p in snap.positions.tolist():
        probes += [p, max(p - 1, 0), min(p + 1, 2**32 - 1)]
    probes = np.array(probes, dtype=np.uint32)
    expected = np.array([snap.lookup_hash(int(h)) for h in probes], dtype=np.int32)
    assert snap.lookup_batch(probes).tolist() == expected.tolist()  # (by binary search)
    filler = np.random.default_rng(0).integers(0, 2**32, 2**16, dtype=np.uint64).astype(np.uint32)
    searched = snap._search(filler)
    assert snap.lookup_batch(filler).tolist() == searched.tolist()
    assert snap._buckets is not None
    got = snap.lookup_batch(probes)
    assert got.dtype == np.int32 and got.tolist() == expected.tolist()
    assert pickle.loads(pickle.dumps(snap))._buckets is None  # (not shipped: each process builds its own)


def test_wrap_around() -> None:
    snap = RingSnapshot.build([4, 4, 4])
    last = int(snap.positions[-1])
    first_owner = int(snap.owners[0])
    if last < 2**32 - 1:
        assert snap.lookup_hash(last + 1) == first_owner
    assert snap.lookup_hash(2**32 - 1) in (first_owner, int(snap.owners[-1]))
    assert snap.lookup_hash(last) == int(snap.owners[-1])
    assert snap.lookup_hash(0) == first_owner or int(snap.positions[0]) == 0


def test_key_lookup_uses_hash_key() -> None:
    ring = HashRing.for_halving(4)
    snap = ring.snapshot()
    for key in ["a", "b", 7, ("x", 1), None, b"q"]:
        assert ring.key_lookup(key) == snap.key_lookup(key) == snap.lookup_hash(hash_key(key))


def test_zero_token_reducer_owns_nothing() -> None:
    snap = RingSnapshot.build([3, 0, 2])
    rng = np.random.default_rng(0)
    owners = snap.lookup_batch(rng.integers(0, 2**32, 10_000, dtype=np.uint64))
    assert 1 not in set(owners.tolist())
    assert snap.num_reducers == 3 and snap.total_tokens == 5


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=1, max_value=6),
    st.sampled_from([1, 2, 4, 8, 16]),
    st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=8),
)
def test_halving_only_moves_keys_away(reducers: int, tokens: int, victims: list[int]) -> None:
    ring = HashRing.for_halving(reducers, tokens)
    probes = np.random.default_rng(1).integers(0, 2**32, 3000, dtype=np.uint64)
    before = ring.lookup_batch(probes)
    for victim in victims:
        node = victim % reducers
        old_counts = ring.token_counts
        old_version = ring.version
        changed = ring.redistribute(node, "halving")
        assert changed == (old_counts[node] > 1)
        after = ring.lookup_batch(probes)
        moved = before != after
        assert np.all(before[moved] == node)
        assert np.all(after[moved] != node)
        assert ring.version == old_version + int(changed)
        before = after


def test_halving_counts_and_exhaustion() -> None:
    ring = HashRing.for_halving(4)
    assert ring.token_counts == (16, 16, 16, 16)
    assert DEFAULT_HALVING_TOKENS == 16
    for expected in (8, 4, 2, 1):
        assert ring.halve(1) is True
        assert ring.token_counts[1] == expected
    v = ring.version
    assert ring.halve(1) is False
    assert ring.redistribute(1, "halving") is False
    assert ring.token_counts == (16, 1, 16, 16)
    assert ring.version == v == 4


def test_doubling_counts() -> None:
    ring = HashRing.for_doubling(4)
    assert ring.token_counts == (1, 1, 1, 1)
    assert ring.version == 0
    assert ring.redistribute(2, "doubling") is True
    assert ring.token_counts == (2, 2, 1, 2)
    assert ring.version == 1
    ring.double_except(0)
    assert ring.token_counts == (2, 4, 2, 4)
    assert ring.version == 2
    single = HashRing.for_doubling(1)
    assert single.redistribute(0, "doubling") is False
    assert single.version == 0


def test_doubling_adds_higher_indices() -> None:
    ring = HashRing.for_doubling(3)
    ring.double_except(1)
    snap = ring.snapshot()
    expected = sorted(token_position(i, j) for i, t in enumerate((2, 1, 2)) for j in range(t))
    assert snap.positions.tolist() == expected


def test_snapshot_caching_and_versions() -> None:
    ring = HashRing.for_halving(2, 4)
    s0 = ring.snapshot()
    assert ring.snapshot() is s0
    ring.halve(0)
    s1 = ring.snapshot()
    assert s1.version == 1 and s1.token_counts == (2, 4)
    assert s0.version == 0 and s0.token_counts == (4, 4)


def test_add_reducer() -> None:
    ring = HashRing.for_halving(2, 4)
    assert ring.add_reducer(4) == 2
    assert ring.num_reducers == 3
    assert ring.token_counts == (4, 4, 4)
    assert ring.version == 1
    with pytest.raises(ConfigError):
        ring.add_reducer(-1)


def test_snapshot_pickle_round_trip() -> None:
    ring = HashRing.for_halving(4)
    ring.halve(3)
    snap = ring.snapshot()
    clone = pickle.loads(pickle.dumps(snap))
    assert clone == snap
    assert clone.version == snap.version and clone.token_counts == snap.token_counts
    assert np.array_equal(clone.positions, snap.positions)
    assert np.array_equal(clone.owners, snap.owners)
    probes = np.arange(0, 2**32, 2**20, dtype=np.uint64)
    assert np.array_equal(clone.lookup_batch(probes), snap.lookup_batch(probes))
    assert clone.key_lookup("hello") == snap.key_lookup("hello")
    assert len(pickle.dumps(snap)) < 2000


@pytest.mark.parametrize(
    "tokens, suggestion", [(3, "4"), (12, "16"), (0, "1"), (6, "8"), (5, "4"), (20, "16")]
)
def test_halving_tokens_must_be_power_of_two(tokens: int, suggestion: str) -> None:
    with pytest.raises(ConfigError, match="power of two") as info:
        HashRing.for_halving(4, tokens)
    assert suggestion in str(info.value).split("use e.g.")[1]


@pytest.mark.parametrize(
    "make",
    [
        lambda: HashRing.for_halving(0),
        lambda: HashRing.for_doubling(0),
        lambda: HashRing([]),
        lambda: HashRing([0, 0]),
        lambda: HashRing([1, -1]),
        lambda: HashRing([1.5]),
        lambda: RingSnapshot.build([]),
        lambda: HashRing.for_doubling(2).redistribute(0, "tripling"),
        lambda: HashRing.for_doubling(2).halve(2),
        lambda: HashRing.for_method("doubling", 2, initial_tokens=0),
        lambda: HashRing.for_doubling(2, initial_tokens=True),
    ],
)
def test_config_errors(make) -> None:  # noqa: ANN001
    with pytest.raises(ConfigError):
        make()


def test_doubling_starts_from_the_tokens_asked_for() -> None:
    assert HashRing.for_method("doubling", 3).token_counts == (1, 1, 1)  # the paper
    ring = HashRing.for_method("doubling", 3, initial_tokens=4)
    assert ring.token_counts == (4, 4, 4)
    assert ring.redistribute(0, "doubling") and ring.token_counts == (4, 8, 8)


def test_for_method() -> None:
    assert HashRing.for_method("halving", 3).token_counts == (16, 16, 16)
    assert HashRing.for_method("halving", 2, 8).token_counts == (8, 8)
    assert HashRing.for_method("doubling", 2).token_counts == (1, 1)


# --------------------------------------------------------------------------- even token spacing


@pytest.mark.parametrize("reducers,tokens", [(4, 16), (8, 16), (8, 1), (16, 4)])
def test_even_spacing_gives_every_reducer_exactly_its_share(reducers, tokens):
    from dpa.routing.policies.ring.lookahead import arc_shares

    even = arc_shares(HashRing([tokens] * reducers, even_tokens=tokens).snapshot())
    hashed = arc_shares(HashRing([tokens] * reducers).snapshot())
    assert even == pytest.approx(np.full(reducers, 1 / reducers), abs=1e-6)
    assert hashed.max() > 1.1 / reducers  # the paper's ring is far from even


def test_even_spacing_keeps_the_hashed_order_of_the_tokens():
    even = HashRing([16] * 8, even_tokens=16).snapshot()
    hashed = HashRing([16] * 8).snapshot()
    assert even.owners.tolist() == hashed.owners.tolist()
    assert np.all(np.diff(even.positions.astype(np.int64)) > 0)


def test_even_spacing_survives_halving_and_doubling():
    ring = HashRing.for_method("halving", 4, 16, even=True)
    before = ring.snapshot()
    assert ring.halve(0)
    after = ring.snapshot()
    kept = np.isin(after.positions, before.positions)
    assert kept.all() and after.token_counts == (8, 16, 16, 16)  # halving only removes tokens
    doubled = HashRing.for_method("doubling", 4, 16, even=True)
    doubled.redistribute(0, "doubling")
    snap = doubled.snapshot()
    new = snap.positions[~np.isin(snap.positions, before.positions)]
    assert len(new) == 3 * 16
    assert set(new.tolist()) == {token_position(i, j) for i in (1, 2, 3) for j in range(16, 32)}  # hashed


def test_copy_is_independent_and_keeps_the_spacing():
    ring = HashRing([4, 4, 4], even_tokens=4)
    twin = ring.copy()
    twin.halve(1)
    assert ring.token_counts == (4, 4, 4) and twin.token_counts == (4, 2, 4)
    assert twin.version == ring.version + 1
    assert np.isin(twin.snapshot().positions, ring.snapshot().positions).all()


@pytest.mark.parametrize("bad", [-1, 1.5, True, "4"])
def test_even_tokens_must_be_a_count(bad):
    with pytest.raises(ConfigError, match="even_tokens"):
        HashRing([4, 4], even_tokens=bad)


@pytest.mark.parametrize("method", ["halving", "doubling"])
@pytest.mark.parametrize("even", [True, False])
def test_an_elastic_first_ring_places_its_active_reducers_like_a_ring_of_that_many(method, even):
    ring = HashRing.for_method(method, 8, 16, even=even, active=3)
    assert ring.num_reducers == 8 and ring.token_counts == (16, 16, 16, 0, 0, 0, 0, 0)
    three = HashRing.for_method(method, 3, 16, even=even).snapshot()
    snap = ring.snapshot()
    assert np.array_equal(snap.positions, three.positions) and np.array_equal(snap.owners, three.owners)
    # active=None, 0 or all of them: the fixed ring
    for active in (None, 0, 8):
        fixed = HashRing.for_method(method, 8, 16, even=even, active=active).snapshot()
        assert fixed.token_counts == (16,) * 8
        assert np.array_equal(fixed.positions, HashRing.for_method(method, 8, 16, even=even).snapshot().positions)


@pytest.mark.parametrize("bad", [9, -1, 1.5, True])
def test_active_must_be_within_the_slots(bad):
    with pytest.raises(ConfigError, match="active"):
        HashRing.for_method("halving", 8, 16, active=bad)
    with pytest.raises(ConfigError, match="even_reducers"):
        HashRing([4, 4], even_tokens=4, even_reducers=bad if bad != -1 else 0)


def test_set_tokens_activates_and_retires_a_reducer_moving_only_its_keys():
    hashes = np.random.default_rng(5).integers(0, 2**32, 5000, dtype=np.uint64).astype(np.uint32)
    ring = HashRing.for_method("halving", 4, 8, even=True, active=2)
    before = ring.lookup_batch(hashes)
    assert ring.set_tokens(3, 8) and ring.version == 1 and ring.token_counts == (8, 8, 0, 8)
    after = ring.lookup_batch(hashes)
    assert (after[before != after] == 3).all() and (after == 3).any()
    # its tokens sit at their hashed positions
    assert set(ring.snapshot().positions[ring.snapshot().owners == 3].tolist()) == {
        token_position(3, j) for j in range(8)}
    assert not ring.set_tokens(3, 8) and ring.version == 1  # no change, same version
    assert ring.set_tokens(0, 0) and ring.version == 2
    last = ring.lookup_batch(hashes)
    assert (after[after != last] == 0).all() and not (last == 0).any()
    ring.set_tokens(1, 0)
    with pytest.raises(ConfigError, match="every token"):
        ring.set_tokens(3, 0)
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError, match="token count"):
            ring.set_tokens(1, bad)
    with pytest.raises(ConfigError, match="reducer id"):
        ring.set_tokens(4, 1)


@pytest.mark.parametrize("even", [True, False])
def test_respace_deals_the_first_ring_of_another_size(even):
    ring = HashRing.for_method("doubling", 6, 16, even=even, active=4)
    ring.double_except(0)
    assert ring.respace(4) and ring.version == 2
    assert ring.token_counts == (4, 4, 4, 4, 0, 0)  # inactive slots stay empty
    fresh = HashRing.for_method("doubling", 6, 4, even=even, active=4).snapshot()
    snap = ring.snapshot()
    assert np.array_equal(snap.positions, fresh.positions) and np.array_equal(snap.owners, fresh.owners)
    assert ring.spacing == snap.spacing == ((4, 4) if even else (0, 0))
    assert not ring.respace(4) and ring.version == 2  # the same ring: nothing changes
    ring.double_except(1)  # rounds go on from the new first ring (its later tokens hashed)
    assert ring.token_counts == (8, 4, 8, 8, 0, 0)
    with pytest.raises(ConfigError, match="tokens per reducer"):
        ring.respace(0)


def test_a_snapshot_carries_its_spacing_to_restore_and_pickle():
    ring = HashRing([16] * 4, even_tokens=16)
    ring.respace(2)
    ring.double_except(3)
    snap = ring.snapshot()
    clone = pickle.loads(pickle.dumps(snap))
    assert clone == snap and clone.spacing == (4, 2)
    other = HashRing([16] * 4, even_tokens=16)  # a new balancer's ring, restored from a checkpoint
    other.restore(clone)
    assert other.spacing == (4, 2) and other.version == snap.version
    assert np.array_equal(other.snapshot().positions, snap.positions)
    assert HashRing([4, 2], 0).snapshot() != HashRing([4, 2], 2).snapshot()  # same counts, other positions
