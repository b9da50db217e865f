"""Lossy counting, Gedik's sliding emulation and Space-Saving: their guarantees on batches."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpa.errors import ConfigError
from dpa.routing.sketches import (
    LossyCounter,
    SlidingLossyCounter,
    SpaceSaving,
    aggregate,
    split_batch,
)


def zipf_stream(n: int, num_keys: int, z: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = np.arange(1, num_keys + 1, dtype=float) ** -z
    p /= p.sum()
    keys = rng.permutation(2**20)[:num_keys].astype(np.uint32) * np.uint32(4099)  # spread over 32 bits
    return keys[rng.choice(num_keys, size=n, p=p)]


def batches(stream: np.ndarray, sizes: list[int]):
    """Cuts the stream into batches of the given sizes (cycled), pre-aggregated as (hash, count)."""
    i, k = 0, 0
    while i < len(stream):
        b = stream[i: i + sizes[k % len(sizes)]]
        h, c = np.unique(b, return_counts=True)
        yield h, c.astype(np.int64)
        i += len(b)
        k += 1


def true_counts(stream: np.ndarray) -> dict[int, int]:
    h, c = np.unique(stream, return_counts=True)
    return dict(zip(h.tolist(), c.tolist()))


# ---------------------------------------------------------------------------- helpers
def test_aggregate_sums_repeats_and_drops_zeros():
    h, c = aggregate(np.array([5, 3, 5, 9], np.uint32), np.array([1, 2, 3, 0], np.int64))
    assert h.tolist() == [3, 5] and c.tolist() == [2, 4]


def test_split_batch_cuts_a_straddling_pair():
    h = np.array([7, 8, 9], np.uint32)
    c = np.array([2, 5, 1], np.int64)
    (hh, hc), (th, tc) = split_batch(h, c, 4)
    assert hh.tolist() == [7, 8] and hc.tolist() == [2, 2]
    assert th.tolist() == [8, 9] and tc.tolist() == [3, 1]
    (hh, hc), (th, tc) = split_batch(h, c, 2)  # exactly at a pair boundary
    assert hh.tolist() == [7] and hc.tolist() == [2] and th.tolist() == [8, 9]
    (hh, hc), (th, tc) = split_batch(h, c, 100)
    assert hc.sum() == 8 and len(th) == 0


# ---------------------------------------------------------------------------- lossy counting
@pytest.mark.parametrize("eps,support", [(0.01, 0.02), (0.002, 0.01), (0.001, 0.005)])
@pytest.mark.parametrize("sizes", [[1], [37, 1000], [5000]])
@pytest.mark.parametrize("z", [0.8, 1.2])
def test_lossy_counting_error_bounds_on_zipf(eps, support, sizes, z):
    n = 6_000 if sizes == [1] else 100_000
    stream = zipf_stream(n, 5000, z, seed=int(eps * 1e4) + len(sizes))
    lc = LossyCounter(eps)
    for h, c in batches(stream, sizes):
        lc.update(h, c)
    truth = true_counts(stream)
    assert lc.n == n
    keys, f, delta = lc.entries()
    tc = np.array([truth[k] for k in keys.tolist()])
    assert (f <= tc).all(), "lossy counting never overestimates"
    assert (tc - f <= eps * n).all(), "undercount is at most eps * n"
    assert (tc <= f + delta).all(), "f + delta bounds the true count"
    for k, t in truth.items():  # an untracked item has true count <= eps * n
        if lc.estimate(k) == 0:
            assert t <= eps * n
    reported, _ = lc.frequent(support)
    reported = set(reported.tolist())
    must = {k for k, t in truth.items() if t >= support * n}
    assert must <= reported, "every item with frequency >= s is reported"
    assert all(truth[k] >= (support - eps) * n for k in reported), "nothing below (s - eps) N is reported"


def test_lossy_counting_space_bound_record_by_record():
    eps = 0.01
    stream = zipf_stream(20_000, 3000, 1.0, seed=3)
    lc = LossyCounter(eps)
    worst = 0
    for x in stream.tolist():
        lc.update([x])
        worst = max(worst, len(lc))
    assert worst <= (1 / eps) * math.log(eps * len(stream)) + 1 / eps


@settings(max_examples=60, deadline=None)
@given(stream=st.lists(st.integers(0, 30), min_size=1, max_size=400),
       cuts=st.lists(st.integers(1, 50), min_size=1, max_size=6),
       eps=st.sampled_from([0.5, 0.2, 0.1, 0.05]))
def test_lossy_counting_invariant_any_batching(stream, cuts, eps):
    arr = np.array(stream, dtype=np.uint32)
    lc = LossyCounter(eps)
    for h, c in batches(arr, cuts):
        lc.update(h, c)
    truth = true_counts(arr)
    for k, t in truth.items():
        est = lc.estimate(k)
        assert est <= t <= est + eps * len(arr)


def test_unlisted_records_count_towards_n_only():
    lc = LossyCounter(0.1)
    lc.update([1, 2], [5, 5], total=30)
    assert lc.n == 30 and lc.estimate(1) == 5
    h, _ = lc.frequent(0.3)  # 5 >= (0.3 - 0.1) * 30 = 6? no
    assert h.tolist() == []


@pytest.mark.parametrize("bad", [0, 1, -0.1, 1.5, "x", True])
def test_lossy_counting_rejects_bad_epsilon(bad):
    with pytest.raises(ConfigError, match="epsilon"):
        LossyCounter(bad)


def test_batches_are_validated():
    lc = LossyCounter(0.1)
    with pytest.raises(ConfigError, match="align"):
        lc.update([1, 2], [1])
    with pytest.raises(ConfigError, match="non-negative"):
        lc.update([1], [-1])
    with pytest.raises(ConfigError, match="total"):
        lc.update([1], [3], total=2)
    with pytest.raises(ConfigError, match="2\\*\\*32"):
        lc.update([2**32])


# ---------------------------------------------------------------------------- sliding window
def test_sliding_window_span_stays_between_w_and_one_and_a_half_w():
    W = 1000
    sl = SlidingLossyCounter(W, 0.01, counters=3)
    rng = np.random.default_rng(0)
    for _ in range(400):
        size = int(rng.integers(1, 120))
        sl.update(rng.integers(0, 50, size).astype(np.uint32))
        assert len(sl._live) <= 3
        if sl.n >= W:
            assert W <= sl.active_span <= 1.5 * W
        else:
            assert sl.active_span == sl.n  # initialisation: the whole stream so far
        assert sl.active.n == sl.active_span


def test_sliding_window_with_more_counters_tightens_the_range():
    W = 900
    sl = SlidingLossyCounter(W, 0.01, counters=4)  # upper range (1 + 1/3) W
    for _ in range(300):
        sl.update(np.arange(17, dtype=np.uint32))
        if sl.n >= W:
            assert W <= sl.active_span <= (1 + 1 / 3) * W


def test_sliding_window_forgets_old_items():
    W = 2000
    sl = SlidingLossyCounter(W, 0.005, counters=3)
    rng = np.random.default_rng(1)
    background = lambda n: rng.integers(1000, 5000, n).astype(np.uint32)  # noqa: E731
    for _ in range(10):  # key 1 is hot (30%) in the first 5,000 records
        sl.update(np.concatenate([np.full(150, 1, np.uint32), background(350)]))
    hot, _ = sl.frequent(0.2)
    assert 1 in hot.tolist()
    for _ in range(8):  # then key 2 is hot and key 1 is gone
        sl.update(np.concatenate([np.full(150, 2, np.uint32), background(350)]))
    hot, _ = sl.frequent(0.2)
    assert 2 in hot.tolist() and 1 not in hot.tolist()
    assert sl.estimate(1) == 0
    h, f = sl.frequencies(0.2)
    assert h.tolist() == [2] and f[0] == pytest.approx(0.3, abs=0.01)
    # a full-history lossy counter still reports key 1 (1,500 of 9,000 records)
    lc = LossyCounter(0.005)
    lc.update(np.full(1500, 1, np.uint32))
    lc.update(np.full(1200, 2, np.uint32), total=9000)
    assert 1 in lc.frequent(0.1)[0].tolist()


def test_sliding_window_one_big_batch_equals_record_by_record():
    rng = np.random.default_rng(2)
    stream = rng.integers(0, 40, 3000).astype(np.uint32)
    a = SlidingLossyCounter(700, 0.02)
    b = SlidingLossyCounter(700, 0.02)
    a.update(stream)  # one batch of 3,000 (hash, 1) pairs, split at every period boundary
    for x in stream.tolist():
        b.update([x])
    assert a.n == b.n == 3000
    assert [s for s, _ in a._live] == [s for s, _ in b._live] == [2100, 2450, 2800]
    for (start, ca), (_, cb) in zip(a._live, b._live):
        truth = true_counts(stream[start:])  # each counter covers exactly the records since its start
        assert ca.n == cb.n == 3000 - start
        for c in (ca, cb):
            for k, t in truth.items():
                assert c.estimate(k) <= t <= c.estimate(k) + c.epsilon * c.n


@pytest.mark.parametrize("kw,match", [({"window": 0, "epsilon": 0.1}, "window"),
                                      ({"window": 10, "epsilon": 0.1, "counters": 1}, "counters")])
def test_sliding_window_validation(kw, match):
    with pytest.raises(ConfigError, match=match):
        SlidingLossyCounter(**kw)


# ---------------------------------------------------------------------------- space saving
@pytest.mark.parametrize("capacity", [10, 50, 200])
@pytest.mark.parametrize("sizes", [[1], [333], [4000]])
def test_space_saving_guarantees_on_zipf(capacity, sizes):
    n = 20_000 if sizes == [1] else 60_000
    stream = zipf_stream(n, 3000, 1.0, seed=capacity)
    ss = SpaceSaving(capacity)
    for h, c in batches(stream, sizes):
        ss.update(h, c)
    truth = true_counts(stream)
    h, c = ss.top()
    assert len(h) == capacity and ss.n == n
    assert int(c.sum()) == n, "monitored counts always sum to the stream length"
    assert ss.error == ss.min_count <= n / capacity
    for k, cnt in zip(h.tolist(), c.tolist()):
        t = truth[k]
        assert t <= cnt, "counts never underestimate"
        assert cnt - t <= ss.error_of(k) <= ss.error, "overestimate bounded by the min count"
    for k, t in truth.items():
        if t > n / capacity:
            assert k in ss, "every item with frequency > N / capacity is monitored"
    _, g = ss.guaranteed()
    assert all(gg <= truth[k] for k, gg in zip(h.tolist(), g.tolist()))


@settings(max_examples=80, deadline=None)
@given(stream=st.lists(st.integers(0, 25), min_size=1, max_size=300),
       cuts=st.lists(st.integers(1, 40), min_size=1, max_size=5),
       capacity=st.integers(1, 12))
def test_space_saving_guarantees_any_batching(stream, cuts, capacity):
    arr = np.array(stream, dtype=np.uint32)
    ss = SpaceSaving(capacity)
    for h, c in batches(arr, cuts):
        ss.update(h, c)
    truth = true_counts(arr)
    n = len(arr)
    for k, t in truth.items():
        est = ss.estimate(k)
        if k in ss:
            assert est - ss.error_of(k) <= t <= est
            assert ss.error_of(k) <= ss.min_count
        else:
            assert t <= ss.min_count
        if t > n / capacity:
            assert k in ss


def test_space_saving_top_order_estimate_and_total():
    ss = SpaceSaving(3)
    ss.update([10, 20, 30], [5, 9, 5], total=25)
    h, c = ss.top(2)
    assert h.tolist() == [20, 10] and c.tolist() == [9, 5]  # ties by hash
    assert ss.error == 5 and ss.n == 25 and ss.n_listed == 19
    ss.update([40], [1])  # evicts the smallest hash among min counts: 10
    assert 10 not in ss and ss.estimate(40) == 6 and ss.error_of(40) == 5
    assert ss.estimate(10) == 0


def test_space_saving_not_full_has_no_error():
    ss = SpaceSaving(10)
    ss.update([1, 2, 1])
    assert ss.error == 0 and ss.estimate(1) == 2


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_space_saving_rejects_bad_capacity(bad):
    with pytest.raises(ConfigError, match="capacity"):
        SpaceSaving(bad)
