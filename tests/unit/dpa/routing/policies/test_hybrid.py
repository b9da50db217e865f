"""The ``hybrid`` policy: shares, spreading, hot-key detection and WL1-WL5 in the local runtime."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpa
from dpa.errors import ConfigError
from dpa.routing.policies.hybrid.policy import HybridPolicy
from dpa.routing.policies.hybrid.settings import HybridSettings
from dpa.routing.policies.hybrid.shares import fill, fill_within
from dpa.routing.policies.hybrid.snapshot import HybridSnapshot
from workloads import paper


def _snapshot(policy: HybridPolicy, R: int, hot: dict[int, tuple[list[int], list[float]]], version: int = 1) -> HybridSnapshot:
    hs = np.array(sorted(hot), dtype=np.uint32)
    cands = np.full((len(hs), R), -1, dtype=np.int64)
    cumw = np.ones((len(hs), R))
    for i, h in enumerate(hs.tolist()):
        c, w = hot[h]
        cands[i, : len(c)] = c
        cumw[i, : len(c)] = np.cumsum(w)
    return HybridSnapshot(policy.initial_snapshot(R).ring, hs, cands, cumw, version)


@given(st.lists(st.integers(0, 50), min_size=1, max_size=8), st.integers(0, 200))
def test_fill_levels_the_lowest_bins(loads, amount):
    add = np.array(fill([float(x) for x in loads], float(amount)))
    assert add.sum() == pytest.approx(amount)
    assert (add >= -1e-9).all()
    after = np.array(loads) + add
    if amount:
        level = after[add > 1e-9].max()
        # every bin that got something ends at the same level, and no bin is below it
        assert np.allclose(after[add > 1e-9], level)
        assert (after >= level - 1e-9).all()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1000), min_size=1, max_size=12), st.floats(0, 5000), st.integers(0, 2**31))
def test_fill_within_levels_the_bins_with_room_and_keeps_every_cap(loads, amount, seed):
    loads = np.array(loads)
    caps = np.random.default_rng(seed).random(len(loads)) * 500
    parts, left = fill_within(loads, np.zeros(len(loads)), caps, amount)
    assert (parts >= -1e-9).all() and (parts <= caps + 1e-6).all()
    assert parts.sum() + left == pytest.approx(amount, rel=1e-9, abs=1e-6)
    assert left <= 1e-6 or parts == pytest.approx(caps)  # something is left only when every bin is full
    free = parts < caps - 1e-6
    if free.any() and parts[free].sum() > 1e-6:  # the bins below their cap are levelled
        got = (loads + parts)[free & (parts > 1e-6)]
        assert got.max() - got.min() <= 1e-6 * max(1.0, got.max())
        assert ((loads + parts)[free] >= got.min() - 1e-6).all()


def _fill_by_numpy(loads: np.ndarray, amount: float) -> np.ndarray:
    """Water filling as prefix sums over the sorted loads, in numpy (the reference)."""
    if amount <= 0 or not len(loads):
        return np.zeros(len(loads))
    s = np.sort(loads)
    levels = (np.cumsum(s) + amount) / np.arange(1, len(s) + 1)
    level = levels[np.flatnonzero(levels >= s)[-1]]
    return np.maximum(level - loads, 0.0)


@given(st.lists(st.one_of(st.floats(0, 1e6, allow_nan=False), st.sampled_from([0.0, 1.0, 2.5])), min_size=0,
                max_size=8),
       st.one_of(st.floats(0, 1e6, allow_nan=False), st.just(0.0)))
def test_fill_matches_the_numpy_formulation_bit_for_bit(loads, amount):
    got = fill(list(loads), amount)
    want = _fill_by_numpy(np.array(loads, dtype=np.float64), amount)
    assert np.array_equal(np.array(got, dtype=np.float64), want)
    assert all(isinstance(x, float) for x in got)


def test_assign_follows_the_shares_over_any_run():
    policy = HybridPolicy()
    snap = _snapshot(policy, 4, {7: ([2, 0, 3], [0.5, 0.3, 0.2])})
    out = snap.assign(0, np.arange(1000, 1400), 0.37)
    counts = collections.Counter(out.tolist())
    assert set(counts) == {0, 2, 3}
    assert abs(counts[2] - 200) <= 3 and abs(counts[0] - 120) <= 3 and abs(counts[3] - 80) <= 3


def test_router_spreads_hot_and_rings_tail():
    policy = HybridPolicy()
    snap = _snapshot(policy, 4, {7: ([1, 2], [0.5, 0.5])})
    router = policy.make_router(0, 4)
    hashes = np.array([7] * 100 + [9] * 10, dtype=np.uint32)
    dest = router.route(hashes, snap)
    counts = collections.Counter(dest[:100].tolist())
    assert set(counts) == {1, 2} and abs(counts[1] - 50) <= 1
    assert (dest[100:] == snap.ring.lookup_batch(np.array([9], np.uint32))[0]).all()


def test_destinations_keep_spread_and_return():
    policy = HybridPolicy()
    R = 4
    snap = _snapshot(policy, R, {7: ([1, 2, 3], [1 / 3, 1 / 3, 1 / 3])})
    hashes = np.array([7] * 30, dtype=np.uint32)
    # a candidate keeps its records of the hot key
    assert (policy.destinations(snap, hashes, 2, False) == 2).all()
    # the home spreads what it holds when the key has just become hot ...
    before = _snapshot(policy, R, {}, version=0)
    spread = collections.Counter(policy.destinations(snap, hashes, 1, True, before).tolist())
    assert set(spread) == {1, 2, 3} and all(abs(n - 10) <= 1 for n in spread.values())
    # ... but not on a later version where the key was hot already
    assert (policy.destinations(snap, hashes, 1, True, snap) == 1).all()
    # a reducer that is no candidate sends the records to the candidates
    assert set(policy.destinations(snap, hashes, 0, False).tolist()) <= {1, 2, 3}
    # a key that is not hot goes to its ring owner
    owner = int(snap.ring.lookup_batch(np.array([7], np.uint32))[0])
    assert (policy.destinations(_snapshot(policy, R, {}), hashes, 0, False) == owner).all()


def test_planner_splits_a_hot_key_and_levels_loads():
    policy = HybridPolicy(HybridSettings(max_rounds=0))
    planner = policy.make_planner(4)
    hot_key = 12345
    home = int(policy.initial_snapshot(4).lookup_batch(np.array([hot_key], np.uint32))[0])
    # the key's home saw 900 records of it and 100 of others; the others saw 100 each
    planner.observe_keys(home, np.array([hot_key], np.uint32), np.array([900]), 1000)
    for r in range(4):
        if r != home:
            planner.observe_keys(r, np.zeros(0, np.uint32), np.zeros(0, np.int64), 100)
        held = 1000 if r == home else 100
        planner.observe_held(r, held)
        planner.observe(r, 100, 0)  # the home has processed 900 of its 1000 already
    decisions = planner.check(1.0)
    assert len(decisions) == 1 and decisions[0].event.action == "split"
    snap = decisions[0].snapshot
    assert snap.version == 1 and snap.table_size == 1 and int(snap.hot[0]) == hot_key
    cands = snap.candidates(0)
    assert cands[0] == home and len(cands) == 4  # one key of 69% of the load needs every reducer
    shares = np.diff(np.concatenate(([0.0], snap.cumw[0])))
    assert shares[0] < shares[1:].min()  # what the home processed stays: it gets the least
    # no new snapshot before every reducer reported under the new version
    assert planner.check(1.5) == []
    # no new information (and nothing queued to hand over): no new snapshot
    for r in range(4):
        planner.observe(r, 0, 1)
    assert planner.check(2.0) == []


def test_the_hot_key_rule_keeps_a_forecasts_most_frequent_keys_only():
    from dpa.routing.policies.hybrid.planner import FORECAST_KEYS

    planner = HybridPolicy(HybridSettings(max_rounds=0)).make_planner(4)
    hashes = np.arange(1, 513, dtype=np.uint32)
    counts = np.arange(512, 0, -1, dtype=np.int64) * 10  # most frequent first, as mappers send them
    planner.observe_forecast(0, hashes, counts, int(counts.sum()) + 1000)
    assert sorted(planner.forecast) == hashes[:FORECAST_KEYS].tolist()
    assert planner.forecast_n == int(counts.sum()) + 1000  # the rest still counts as records announced


def test_at_width_the_forecast_keeps_every_key_that_may_pass_the_hot_threshold():
    from dpa.routing.policies.hybrid.planner import FORECAST_KEYS

    R = 1024
    planner = HybridPolicy(HybridSettings(max_rounds=0)).make_planner(R)
    hashes = np.arange(1, 513, dtype=np.uint32)
    counts = (1e5 / np.arange(1, 513) ** 1.2).astype(np.int64)  # Zipf 1.2, most frequent first
    total = int(counts.sum()) * 8  # the forecast names the most frequent keys of many
    planner.observe_forecast(0, hashes, counts, total)
    passing = int((counts >= total / (8 * R) / 2).sum())  # half of theta = 1 / (8 R)
    assert FORECAST_KEYS < passing < len(counts)
    assert sorted(planner.forecast) == hashes[:passing].tolist()


def test_hot_shares_give_no_candidate_more_than_it_can_take_until_the_next_look():
    # 16 reducers, 1 ms per record, 0.85 s of work queued each (the bound is 1 s); a hot
    # key gets 4,000 records and each reducer 100 of the tail in the 0.25 s after the last
    # publication. Until the next look a reducer can take 0.25 s of processing plus 0.15 s
    # of room, 400 records, less 100 of the tail: the key needs 14 candidates or more,
    # more than levelling the expected totals asks for (about 20,000 records each).
    R = 16
    policy = HybridPolicy(HybridSettings(max_rounds=0))
    planner = policy.make_planner(R)
    key = 4242
    home = int(policy.initial_snapshot(R).lookup_batch(np.array([key], np.uint32))[0])

    def report(key_records: int, tail: int, held: int, version: int) -> None:
        for r in range(R):
            mine = r == home
            planner.observe_keys(r, np.array([key], np.uint32) if mine else np.zeros(0, np.uint32),
                                 np.array([key_records]) if mine else np.zeros(0, np.int64),
                                 tail + (key_records if mine else 0))
            planner.observe_held(r, held)
            planner.observe(r, 850, version)
            planner.observe_work(r, 0.85, version)

    report(3000, 19_900, 20_000, 0)
    first = planner.check(1.0)
    assert first and key in planner.hot
    version = first[-1].snapshot.version
    report(4000, 100, 20_400, version)
    second = planner.check(1.25)
    assert second
    cands = planner.hot[key]
    parts = planner.shares[key] * 4000
    assert len(cands) >= 14
    assert parts.max() <= 300 + 1e-6  # none beyond what it can take until the next look
    assert planner.shares[key].sum() == pytest.approx(1.0)


def _hot_planner(R: int, cands: list[int], held: list[int], queues: list[int], arrived: int | None = None):
    """A planner with one hot key split over ``cands`` (published), then the given reports."""
    policy = HybridPolicy(HybridSettings(max_rounds=0, min_width=len(cands)))
    planner = policy.make_planner(R)
    key = 4242
    total = sum(held) if arrived is None else arrived
    planner.observe_keys(cands[0], np.array([key], np.uint32), np.array([total]), total)
    for r in range(R):
        planner.observe_held(r, total if r == cands[0] else 0)
        planner.observe(r, 0, 0)
    planner.hot = {key: list(cands)}  # published with exactly these candidates
    planner.shares = {key: np.full(len(cands), 1.0 / len(cands))}
    planner._snapshot = planner._ring_changed()
    for r in range(R):
        planner.observe_held(r, held[r])
        planner.observe(r, queues[r], planner._snapshot.version)
    return planner


def test_planner_hands_queued_hot_records_over_to_level_holdings():
    planner = _hot_planner(4, [0, 1, 2, 3], held=[40, 30, 20, 10], queues=[30, 20, 10, 0])
    moves = _moves(planner)
    assert moves is not None and moves.sum() == 20
    after = np.array([40, 30, 20, 10]) - moves.sum(axis=1) + moves.sum(axis=0)
    assert after.tolist() == [25, 25, 25, 25]
    planner = _hot_planner(4, [0, 1, 2, 3], held=[40, 30, 20, 10], queues=[30, 20, 10, 0])
    # An excess seen once may be a push that some reports miss yet: the first check
    # publishes the new shares only, the next (reports under them) hands over.
    first = planner.check(1.0)
    assert [d.snapshot.moves for d in first] in ([], [None])
    for r, queue in enumerate([30, 20, 10, 0]):
        planner.observe(r, queue, planner.snapshot.version)
    decisions = planner.check(1.05)
    assert decisions[0].event.action == "handover"
    assert np.array_equal(decisions[0].snapshot.moves, moves)


def _moves(planner, wanted=None):
    """The hand-overs of an excess seen at two checks in a row (the first sees it only)."""
    wanted = planner.hot if wanted is None else wanted
    first = planner._transfers(wanted)
    assert first is None
    return planner._transfers(wanted)


def test_an_excess_seen_at_one_check_only_moves_nothing():
    planner = _hot_planner(4, [0, 1, 2, 3], held=[40, 30, 20, 10], queues=[30, 20, 10, 0])
    assert planner._transfers(planner.hot) is None
    for r, held in enumerate([25, 25, 25, 25]):  # the next reports: the push reached everyone
        planner.observe_held(r, held)
    assert planner._transfers(planner.hot) is None
    # a smaller excess that persists moves what persisted (the smaller of the two)
    for r, held in enumerate([40, 30, 20, 10]):
        planner.observe_held(r, held)
    assert planner._transfers(planner.hot) is None
    for r, held in enumerate([32, 26, 22, 20]):
        planner.observe_held(r, held)
    moves = planner._transfers(planner.hot)
    assert moves is not None and moves[0].sum() == 7 and moves[1].sum() == 1 and moves.sum() == 8


def test_planner_hand_over_counts_records_in_flight_against_receivers_and_is_not_repeated():
    # 100 records arrived but the reports hold 90: 10 are being forwarded to someone, so
    # each receiver may get them: 2 (target 25, holds 20) gets nothing, 3 at most 15
    moves = _moves(_hot_planner(4, [0, 1, 2, 3], [40, 30, 20, 0], [30, 20, 10, 0], arrived=100))
    assert moves is not None and moves.sum() == 15 and moves[:, 3].sum() == 15
    planner = _hot_planner(4, [0, 1, 2, 3], held=[40, 30, 20, 10], queues=[30, 20, 10, 0])
    assert _moves(planner) is not None
    # the same holdings again (nothing was movable): no second hand-over
    assert _moves(planner) is None


def test_planner_hand_over_respects_queues_and_shared_keys():
    # reducer 0 holds 60 but only 5 are queued: at most 5 move
    moves = _moves(_hot_planner(4, [0, 1, 2, 3], held=[60, 20, 10, 10], queues=[5, 0, 0, 0]))
    assert moves is not None and moves[0].sum() == 5 and moves[1:].sum() == 0
    # only to reducers that share a hot key with the sender (3 is no candidate)
    moves = _moves(_hot_planner(4, [0, 1, 2], held=[40, 30, 20, 10], queues=[30, 20, 10, 0]))
    assert moves is not None and moves[:, 3].sum() == 0 and moves[3].sum() == 0
    # level within a record: nothing to do
    assert _moves(_hot_planner(4, [0, 1, 2, 3], held=[26, 25, 25, 24], queues=[9, 9, 9, 9])) is not None
    assert _moves(_hot_planner(4, [0, 1, 2, 3], held=[26, 25, 25, 25], queues=[9, 9, 9, 9])) is None


def test_handover_takes_hot_records_from_the_back_for_candidates_only():
    policy = HybridPolicy()
    R = 4
    snap = _snapshot(policy, R, {7: ([1, 2], [0.5, 0.5]), 8: ([1, 3], [0.5, 0.5])})
    moves = np.zeros((R, R), dtype=np.int64)
    moves[1, 2] = 3
    moves[1, 3] = 10  # only two records of key 8 are queued
    snap = HybridSnapshot(snap.ring, snap.hot, snap.cands, snap.cumw, snap.version, moves)
    hashes = np.array([7, 8, 7, 9, 7, 7, 8, 7], dtype=np.uint32)
    dest = np.array([1, 1, 1, 1, 1, 1, 1, 0])  # the last 7 goes elsewhere already
    out = policy.handover(snap, hashes, dest, 1)
    assert out.tolist() == [1, 3, 2, 1, 2, 2, 3, 0]  # tail key 9 stays; from the back
    assert policy.handover(snap, hashes, dest, 0) is dest  # no moves for reducer 0


def test_bad_options_are_config_errors():
    with pytest.raises(ConfigError, match="theta"):
        HybridSettings(theta=2.0)
    with pytest.raises(ConfigError, match="method"):
        HybridSettings(method="tripling")


@settings(deadline=None, max_examples=5)
@given(st.sampled_from(paper.WORKLOAD_NAMES))
def test_wl1_to_wl5_balanced_and_exact_in_the_local_runtime(name):
    letters = paper.workload(name)
    res = dpa.run([{"k": x} for x in letters], key="k",
                  reducer=dpa.WithCost(dpa.Count(), 0.01, mode="sleep"),
                  # the paper's granularity: one record (10 ms) per step, so "two steps of
                  # work" (what is worth balancing) is 20 ms, not two default 100 ms steps
                  config=dpa.JobConfig(policy="hybrid", runtime="local", batch_size=5, chunk_size=1,
                                       step_time_s=0.01, queue_capacity=10**9, max_rounds=0))
    assert res.to_dict() == dict(collections.Counter(letters))
    assert res.stats.skew <= 0.05, (name, res.stats.processed)


def test_home_spreads_in_flight_batches_of_a_key_that_became_hot_since_they_were_routed():
    import pyarrow as pa

    from dpa.engine.planning import build_plan
    from dpa.engine.reducer import ReducerLogic
    from dpa.input.records import HASH_COL
    from dpa.input.sources import normalize_source

    table = pa.table({"k": ["x"] * 40})
    cfg = dpa.JobConfig(policy="hybrid", runtime="local", max_rounds=0, map_side_combine=False)
    plan, _ = build_plan(normalize_source(table, 40), "k", dpa.Count(), None, cfg)
    policy = plan.policy
    from dpa.keys.columns import hash_key_columns

    h = int(hash_key_columns(table, ["k"])[0])
    v0 = policy.initial_snapshot(4)
    home = int(v0.lookup_batch(np.array([h], np.uint32))[0])
    others = [r for r in range(4) if r != home]
    v1 = _snapshot(policy, 4, {h: ([home, *others], [0.25] * 4)}, version=1)
    v2 = _snapshot(policy, 4, {h: ([home, *others], [0.25] * 4)}, version=2)
    red = ReducerLogic(home, plan, v0)
    assert red.on_snapshot(v1) == [] and red.on_snapshot(v2) == []  # nothing queued yet
    batch = table.append_column(HASH_COL, pa.array([h] * 40, pa.uint32()))
    # routed before the key was hot (v0): spread over the candidates by the shares
    moved = red.enqueue(batch, version=0)
    assert sum(f.batch.num_rows for f in moved) == pytest.approx(30, abs=2) and red.queued == 40 - sum(
        f.batch.num_rows for f in moved)
    # routed while it was hot already (v1): these are the home's share, kept
    before = red.queued
    assert red.enqueue(batch, version=1) == [] and red.queued == before + 40


def test_hand_over_with_a_hot_set_change_avoids_reducers_the_change_moves_records_of():
    # key 99 becomes hot at home 1 with candidate 2: 1 spreads its queue, 2 receives, so
    # neither takes part; the key that stays hot (candidates 0, 1, 3) lets 0 give to 3
    planner = _hot_planner(4, [0, 1, 3], held=[40, 30, 20, 10], queues=[30, 20, 10, 0])
    moves = _moves(planner, {**planner.hot, 99: [1, 2]})
    assert moves is not None and moves[0, 3] == 15 and moves.sum() == 15
    # a key that stops being hot: its candidates (here every reducer) send nothing
    planner = _hot_planner(4, [0, 1, 2, 3], held=[40, 30, 20, 10], queues=[30, 20, 10, 0])
    assert planner._transfers({}) is None and planner._transfers({}) is None
    planner.hot[5] = [0, 1, 2, 3]
    assert planner._transfers({5: [0, 1, 2, 3]}) is None and planner._transfers({5: [0, 1, 2, 3]}) is None


def test_a_restarted_planner_resumes_from_a_published_state():
    planner = _hot_planner(4, [1, 2, 3], held=[0, 600, 0, 0], queues=[0, 500, 0, 0])
    (decision,) = planner.check(1.0)
    published = decision.snapshot
    fresh = HybridPolicy(HybridSettings(max_rounds=0, min_width=3)).make_planner(4)
    assert fresh.resume(published)
    assert fresh.snapshot is published and fresh.hot == planner.hot
    for h, shares in planner.shares.items():
        assert np.allclose(fresh.shares[h], shares, atol=1e-9)
    assert not fresh.resume(published.ring)  # not a hybrid state: it keeps what it has
    assert fresh.snapshot is published
    for r in range(4):
        fresh.observe(r, 0, published.version)
    later = fresh.check(2.0)  # it goes on from there: versions keep growing
    assert all(d.snapshot.version > published.version for d in later)
