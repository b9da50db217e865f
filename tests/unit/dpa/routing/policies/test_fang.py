"""Fang et al.'s mixed routing: LLFD with Adjust, MinTable / MinMig / Mixed, snapshot, planner."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpa
import dpa.routing.policies.fang.policy as fang
from dpa.errors import ConfigError
from dpa.routing.policies.fang.plan import (
    compact_vectors,
    discretize,
    hlhe_representatives,
    llfd,
    migration_cost,
    plan_table,
    priority_index,
    workload_skewness,
)
from dpa.routing.policies.fang.policy import FangPlanner, FangPolicy, FangSettings, TableSnapshot
from dpa.routing.registry import make_policy

FAST = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------------------- Figure 4
# Two instances; d1 holds k1, k2, k3 (costs 7, 4, 5: L = 16), d2 holds k4, k5, k6 (2, 1, 1: L = 4);
# theta = 0, so both must end at the average 10. Key hashes are chosen so that hash % 2 gives a
# hash layout consistent with every number the text states: the initial table has two entries
# (k3 -> d1, k4 -> d2), LLFD without cleaning ends with four, MinTable with two.
K1, K2, K3, K4, K5, K6 = 0, 2, 1, 4, 3, 5
FIG4_COST = {K1: 7.0, K2: 4.0, K3: 5.0, K4: 2.0, K5: 1.0, K6: 1.0}
FIG4_OLD_TABLE = {K3: 0, K4: 1}


def test_figure4_llfd_with_adjust_step_by_step():
    # indices 0..5 = k1..k6; after Phase II k1 (the heaviest of overloaded d1) is in C
    cost = [7.0, 4.0, 5.0, 2.0, 1.0, 1.0]
    dest = [-1, 0, 0, 1, 1, 1]
    loads = [9.0, 4.0]  # "Although L(d1) decreases to 9 ..."
    trace: list = []
    counters = llfd([0], dest, cost, prio=cost, hashes=[0, 1, 2, 3, 4, 5], loads=loads, bound=10.0,
                    trace=trace)
    assert trace == [
        (0, 1, True, (3,)),   # k1 -> d2 would give 11 > 10: Adjust disassociates k4 (cost 2), L(d2) = 9
        (3, 0, False, ()),    # k4 -> d1 (9 + 2 = 11): d1's keys k2, k3 are not lighter than k4: FALSE
        (3, 1, True, (4,)),   # k4 back to d2 (9 + 2 = 11): k5 (cost 1) is exchanged, L(d2) = 10
        (4, 0, True, ()),     # k5 -> d1: 9 + 1 = 10, perfect balance
    ]
    assert dest == [1, 0, 0, 1, 0, 1]
    assert loads == [10.0, 10.0]
    assert counters == {"exchanges": 2, "evicted": 2, "fallbacks": 0}


def test_figure4_llfd_alone_gives_four_entries_mintable_two():
    llfd_table, s1 = plan_table(FIG4_COST, None, FIG4_OLD_TABLE, 2, "minmig", theta=0.0)
    min_table, s2 = plan_table(FIG4_COST, None, FIG4_OLD_TABLE, 2, "mintable", theta=0.0)
    assert s1["loads_before"] == [16.0, 4.0]
    for s in (s1, s2):
        assert s["loads_after"] == [10.0, 10.0] and s["skewness_after"] == 1.0
    assert llfd_table == {K1: 1, K3: 0, K5: 0, K4: 1} and s1["table_size"] == 4
    assert min_table == {K2: 1, K5: 0} and s2["table_size"] == 2
    # MinTable paid for its small table with more migration
    assert s2["migration_cost"] > s1["migration_cost"]


def test_priority_index_example_of_section_3_2():
    # window 1: S(k) = c(k); beta = 1 gives every key gamma = 1; beta < 1 favours the light key
    assert priority_index(7, 7, 1.0) == priority_index(2, 2, 1.0) == 1.0
    assert priority_index(2, 2, 0.5) > priority_index(7, 7, 0.5)
    assert priority_index(7, 7, 1.5) > priority_index(2, 2, 1.5)
    assert priority_index(0, 3, 1.5) == 0.0 and priority_index(3, 0, 1.5) == float("inf")


# ---------------------------------------------------------------------------- Adjust details
def test_adjust_never_evicts_keys_as_heavy_as_the_incoming_one():
    # d1 holds two keys of cost 3; a key of cost 3 cannot exchange them (condition ii is strict)
    trace: list = []
    dest = [-1, 0, 0, 1]
    loads = [6.0, 6.0]
    llfd([0], dest, [3.0, 3.0, 3.0, 6.0], prio=[3.0, 3.0, 3.0, 6.0], hashes=[0, 1, 2, 3], loads=loads,
         bound=7.0, trace=trace)
    assert all(not ok and not e for (_, _, ok, e) in trace)
    assert dest[0] == 0  # fallback: least loaded (tie -> lower id)


def test_key_heavier_than_the_bound_goes_to_the_least_loaded_instance():
    table, stats = plan_table({10: 100.0, 11: 1.0, 13: 2.0}, None, {}, 2, "mixed", theta=0.1, table_limit=5)
    assert stats["fallbacks"] >= 1
    loads = stats["loads_after"]
    assert max(loads) == 100.0 and stats["skewness_after"] == pytest.approx(100 / 51.5)


def test_keys_placed_by_llfd_are_never_evicted_again():
    rng = np.random.default_rng(3)
    for _ in range(20):
        n, W = 40, 4
        cost = rng.integers(1, 50, n).astype(float).tolist()
        dest = rng.integers(0, W, n).tolist()
        cand = [i for i in range(n) if rng.random() < 0.3]
        for i in cand:
            dest[i] = -1
        loads = [0.0] * W
        for i, d in enumerate(dest):
            if d >= 0:
                loads[d] += cost[i]
        trace: list = []
        llfd(cand, dest, cost, cost, list(range(n)), loads, bound=1.05 * sum(cost) / W, trace=trace)
        evicted = [j for (_, _, _, e) in trace for j in e]
        assert len(evicted) == len(set(evicted))  # each original key leaves at most once
        assert not set(evicted) & set(cand)  # candidates of Phase II are never exchanged
        assert all(0 <= d < W for d in dest)
        assert loads == pytest.approx(np.bincount(dest, weights=cost, minlength=W).tolist())


# ---------------------------------------------------------------------------- the three modes
def _zipf_case(seed: int, K: int = 2000, W: int = 8, rounds: int = 4):
    """A Zipf interval after ``rounds`` fluctuations, each answered by a MinMig plan (the old table)."""
    rng = np.random.default_rng(seed)
    probs = 1.0 / np.arange(1, K + 1) ** 0.9
    hashes = rng.choice(2**32, size=K, replace=False)
    c = rng.multinomial(100_000, probs / probs.sum())[rng.permutation(K)]
    old: dict[int, int] = {}
    prev: dict[int, float] = {}
    for r in range(rounds + 1):
        if r:  # the distribution fluctuates: hot keys swap with random keys
            hot = np.argsort(-c)[:30]
            other = rng.choice(K, size=30, replace=False)
            c = c.copy()
            c[hot], c[other] = c[other], c[hot]
        cur = {int(h): float(x) for h, x in zip(hashes, c, strict=True) if x}
        if r < rounds:
            old, _ = plan_table(cur, None, old, W, "minmig", theta=0.05)
            prev = cur
    window = {h: cur.get(h, 0.0) + prev.get(h, 0.0) for h in set(cur) | set(prev)}  # w = 2
    return cur, window, old, W


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_mintable_smallest_table_minmig_least_migration_mixed_between(seed):
    loads, sizes, old, W = _zipf_case(seed)
    t_tab, s_tab = plan_table(loads, sizes, old, W, "mintable", theta=0.05)
    t_mig, s_mig = plan_table(loads, sizes, old, W, "minmig", theta=0.05)
    limit = (s_tab["table_size"] + s_mig["table_size"]) // 2
    assert s_tab["table_size"] < limit < s_mig["table_size"]
    t_mix, s_mix = plan_table(loads, sizes, old, W, "mixed", theta=0.05, table_limit=limit)
    assert s_tab["table_size"] <= s_mix["table_size"] <= limit
    assert s_mig["migration_cost"] <= s_mix["migration_cost"] <= s_tab["migration_cost"]
    assert s_mig["migration_cost"] < s_tab["migration_cost"]
    for s in (s_tab, s_mig, s_mix):
        assert s["skewness_before"] > 1.05 and s["skewness_after"] <= 1.05 + 1e-9
        assert s["truncated"] == 0
    assert s_mix["trials"][0] == 0 and len(s_mix["trials"]) >= 2  # starts as MinMig, then cleans


def test_mixed_without_limit_is_minmig_and_trials_grow_by_the_overuse():
    loads, sizes, old, W = _zipf_case(5)
    assert plan_table(loads, sizes, old, W, "mixed", 0.05)[0] == plan_table(loads, sizes, old, W, "minmig", 0.05)[0]
    _, s = plan_table(loads, sizes, old, W, "mixed", 0.05, table_limit=len(old) // 2)
    assert s["trials"] == sorted(s["trials"]) and len(set(s["trials"])) == len(s["trials"])


@pytest.mark.parametrize("mode", fang.MODES)
@pytest.mark.parametrize("limit", [0, 3, 10])
def test_table_limit_is_respected(mode, limit):
    loads, sizes, old, W = _zipf_case(7)
    table, s = plan_table(loads, sizes, old, W, mode, theta=0.0, table_limit=limit)
    assert len(table) == s["table_size"] <= limit
    assert all(d != h % W for h, d in table.items())


def test_infeasible_limit_makes_mixed_fall_back_to_mintable():
    loads, sizes, old, W = _zipf_case(8)
    _, s_tab = plan_table(loads, sizes, old, W, "mintable", theta=0.02)
    _, s = plan_table(loads, sizes, old, W, "mixed", theta=0.02, table_limit=max(0, s_tab["table_size"] - 2))
    assert s["mintable_fallback"] and s["truncated"] >= 1


def test_plan_is_deterministic_and_balanced_loads_plan_nothing():
    loads, sizes, old, W = _zipf_case(4)
    assert plan_table(loads, sizes, old, W, "mixed", 0.05, 50)[0] == plan_table(loads, sizes, old, W, "mixed",
                                                                                0.05, 50)[0]
    even = {h: 10.0 for h in range(40)}  # h % 4 spreads them evenly
    table, s = plan_table(even, None, {}, 4, "minmig", 0.0)
    assert table == {} and s["migrated_keys"] == 0 and s["candidates"] == 0


def test_bad_arguments_raise_config_error():
    with pytest.raises(ConfigError, match="mode"):
        plan_table({1: 1.0}, None, {}, 2, "best")
    with pytest.raises(ConfigError, match="theta"):
        plan_table({1: 1.0}, None, {}, 2, "mixed", theta=-1)
    with pytest.raises(ConfigError, match="outside"):
        plan_table({1: 1.0}, None, {1: 5}, 2, "mixed")
    with pytest.raises(ConfigError, match="table_limit"):
        plan_table({1: 1.0}, None, {}, 2, "mixed", table_limit=-1)


# ---------------------------------------------------------------------------- metrics
def test_metrics():
    assert workload_skewness([10, 10]) == 1.0 and workload_skewness([16, 4]) == 1.6
    old = {1: 0, 2: 0, 3: 1}
    assert migration_cost(old, {1: 1, 2: 0, 3: 1}, {1: 3.0, 2: 5.0, 3: 2.0}) == pytest.approx(0.3)
    assert migration_cost(old, {4: 1}, {1: 1.0}) == 0.0  # a new key has no state to move
    assert migration_cost(old, {1: 1}, {}) == 0.0


# ---------------------------------------------------------------------------- compact form
def test_hlhe_representatives_are_strictly_decreasing_and_linear_then_exponential():
    r = hlhe_representatives(37, 8)
    assert list(r) == [40, 32, 24, 16, 8, 4, 2, 1]
    assert list(hlhe_representatives(5, 1)) == [5, 4, 3, 2, 1]


def test_discretize_degree_one_is_exact_on_integers_and_sums_stay_accurate():
    rng = np.random.default_rng(0)
    v = rng.integers(1, 500, 300).astype(float)
    np.testing.assert_array_equal(discretize(v, 1), v)
    for m in (4, 16, 64):
        d = discretize(v, m)
        reps = set(hlhe_representatives(v.max(), m).tolist())
        assert set(d.tolist()) <= reps
        # each value is replaced by a neighbouring representative
        assert np.all(np.abs(d - v) <= np.maximum(m, v))
        # the greedy choice keeps the accumulated deviation within one step
        assert abs(d.sum() - v.sum()) <= m
    assert discretize([0.0, 2.0, 4.0], 1).tolist() == [0.0, 2.0, 4.0]


def test_compact_vectors_merge_equal_keys_and_preserve_loads():
    nxt = [0, 0, 1, 1, 1]
    cur = [0, 0, 1, 0, 0]
    home = [0, 0, 1, 1, 1]
    c = [4, 4, 2, 4, 4]
    s = [4, 4, 2, 1, 1]
    v = compact_vectors(nxt, cur, home, c, s)
    assert v[:, 5].sum() == 5 and len(v) == 3
    assert [0, 0, 0, 4, 4, 2] in v.tolist() and [1, 0, 1, 4, 1, 2] in v.tolist()
    loads = np.bincount(v[:, 1].astype(int), weights=v[:, 3] * v[:, 5])
    assert loads.tolist() == [16.0, 2.0]


def test_plan_on_discretized_values_reports_the_estimation_error():
    loads, sizes, old, W = _zipf_case(6)
    _, s = plan_table(loads, sizes, old, W, "mixed", 0.05, 100, discretize_degree=8)
    assert s["estimation_error"] < 0.01 and 0 < s["compact_vectors"] < len(loads)
    assert s["skewness_after"] <= 1.08


# ---------------------------------------------------------------------------- snapshot and policy
tables_st = st.dictionaries(st.integers(0, 2**32 - 1), st.integers(0, 6), max_size=30)


@FAST
@given(table=tables_st, R=st.integers(1, 7), extra=st.lists(st.integers(0, 2**32 - 1), max_size=50))
def test_snapshot_lookup_is_table_then_hash(table, R, extra):
    table = {k: d % R for k, d in table.items()}
    snap = TableSnapshot.from_table(table, R, version=3)
    hs = np.array(list(table) + extra + [0, 2**32 - 1], dtype=np.uint32)
    got = snap.lookup_batch(hs)
    assert got.dtype == np.int64 and ((got >= 0) & (got < R)).all()
    assert got.tolist() == [table.get(int(h), int(h) % R) for h in hs]
    assert snap.table_size == sum(1 for k, d in table.items() if d != k % R)
    assert np.all(np.diff(snap.keys.astype(np.int64)) > 0)
    spec = FangPolicy(FangSettings("mixed", table_limit=None))
    np.testing.assert_array_equal(spec.owners(snap, hs), got)
    np.testing.assert_array_equal(spec.make_router(0, R).route(hs, snap), got)  # deterministic, same owner
    assert snap.lookup_batch(np.zeros(0, np.uint32)).shape == (0,)


def build(name, **opts):
    return make_policy(dpa.JobConfig(runtime="local", policy=name, num_mappers=2, num_reducers=4,
                                     policy_options=opts))


def test_registered_policies_and_options():
    for mode in fang.MODES:
        spec = build(mode)
        assert isinstance(spec, FangPolicy) and spec.name == mode
        assert spec.routes_by_key and spec.moves_keys and spec.wants_key_stats and spec.needs_merge
    assert build("mixed").settings.table_limit == fang.MIXED_DEFAULT_TABLE_LIMIT
    assert build("mixed", table_limit=None).settings.table_limit is None
    assert build("minmig").settings.table_limit is None
    assert build("mintable", theta=0.2, interval=10, window=3, beta=2.0).settings.window == 3
    for bad in ({"theta": -0.1}, {"interval": 0}, {"window": 0}, {"state": "lots"}, {"table_limit": -1},
                {"beta": float("nan")}, {"discretize": 0}):
        with pytest.raises(ConfigError):
            build("mixed", **bad)
    with pytest.raises(ConfigError):
        build("mixed", no_such_option=1)


# ---------------------------------------------------------------------------- planner
def report(planner, counts_by_reducer):
    """Feeds one report per reducer: {reducer: {hash: count}} (every key listed)."""
    for r, counts in counts_by_reducer.items():
        hs = np.array(list(counts), dtype=np.uint32)
        cs = np.array(list(counts.values()), dtype=np.int64)
        planner.observe_keys(r, hs, cs, int(cs.sum()))


def owner_reports(planner, counts):
    """Reports {hash: count} at the reducers that own the keys under the planner's snapshot."""
    by: dict[int, dict[int, int]] = {}
    owners = planner.snapshot.lookup_batch(np.array(list(counts), dtype=np.uint32)).tolist()
    for (h, c), r in zip(counts.items(), owners, strict=True):
        by.setdefault(r, {})[h] = c
    report(planner, by)


def test_planner_publishes_a_higher_version_when_skewed_and_none_when_balanced():
    spec = FangPolicy(FangSettings("mixed", theta=0.2, table_limit=10, interval=1000))
    p = spec.make_planner(4)
    assert isinstance(p, FangPlanner) and p.snapshot.version == 0
    # reducers 0, 2, 3 get 260 records of light keys, reducer 1 gets 200; key 0 (hash % 4 = 0) is hot
    per_reducer = {0: 52, 1: 40, 2: 52, 3: 52}
    skewed = {0: 100}
    for r, n in per_reducer.items():
        skewed.update({h: 5 for h in range(4 + r, 4 + r + 4 * n, 4)})
    owner_reports(p, {h: c // 2 for h, c in skewed.items()})
    assert p.check(1e9) == []  # the interval (1000 records) is not complete yet, whatever `now` says
    owner_reports(p, {h: c - c // 2 for h, c in skewed.items()})
    [decision] = p.check(0.0)  # loads 360, 200, 260, 260: 360 > 1.2 * 270
    assert decision.snapshot.version == 1 and decision.event.version == 1
    assert decision.event.action == "mixed" and decision.event.reducer == 0
    assert decision.snapshot.as_dict() == {0: 1}  # the hot key moves to the least loaded reducer
    assert p.last_stats["loads_after"] == [260.0, 300.0, 260.0, 260.0]
    # the same distribution again is balanced under the new table -> no new version
    owner_reports(p, skewed)
    assert p.check(1.0) == []
    assert p.snapshot.version == 1
    # a new hot key on reducer 2 -> version 2
    skewed[2 + 4 * 1000] = 150
    owner_reports(p, skewed)
    [decision] = p.check(2.0)
    assert decision.snapshot.version == 2 and decision.event.reducer == 2


def test_planner_balanced_stream_never_rebalances():
    p = FangPolicy(FangSettings("minmig", theta=0.1, interval=500)).make_planner(4)
    for _ in range(5):
        owner_reports(p, {h: 10 for h in range(400)})
        assert p.check(0.0) == []
    assert p.snapshot.version == 0 and p.intervals == 5


def test_planner_counts_unlisted_records_at_the_reporting_reducer():
    p = FangPolicy(FangSettings("mintable", theta=0.1, interval=100)).make_planner(2)
    # reducer 0 reports 30 listed records of key 0 and 70 unlisted ones; reducer 1 reports 20
    p.observe_keys(0, np.array([0], np.uint32), np.array([30], np.int64), 100)
    p.observe_keys(1, np.array([1], np.uint32), np.array([20], np.int64), 20)
    assert p.interval_loads() == [100.0, 20.0]
    [d] = p.check(0.0)
    assert d.snapshot.lookup_batch(np.array([0], np.uint32)).tolist() == [1]  # the hot key moves
    assert p.last_stats["loads_after"] == [70.0, 50.0]


def test_planner_unit_state_and_window():
    p = FangPolicy(FangSettings("minmig", theta=0.0, interval=10, state="unit", window=2)).make_planner(2)
    owner_reports(p, {0: 8, 2: 4, 1: 2})
    [d] = p.check(0.0)
    assert p.last_stats["migration_cost"] == pytest.approx(1 / 3)  # one key of three moves
    assert d.snapshot.table_size == 1


def test_simulated_job_rebalances_a_skewed_stream():
    from dpa.tools.simulate import simulate
    from workloads.generators import zipf

    keys = zipf(1.0, 5_000, 120_000, seed=1)["key"].to_numpy()
    base = simulate(keys, "hash", num_sources=2, num_workers=8)
    for mode in fang.MODES:
        res = simulate(keys, FangPolicy(FangSettings(mode, table_limit=100, interval=15_000)), num_sources=2, num_workers=8,
                       service_rate=1.0, rebalance_interval=4096)
        assert res.events and all(e.action == mode for e in res.events)
        assert res.max_over_avg < base.max_over_avg - 0.1
        assert res.table_size <= 100 or mode != "mixed"


@pytest.mark.parametrize("mode", fang.MODES)
def test_local_job_is_exact_and_rebalances_with_key_stats(mode):
    import collections

    rng = np.random.default_rng(0)
    words = [f"warm{i}" for i in range(8) for _ in range(400)] + [f"w{i}" for i in rng.integers(0, 300, 4000)]
    rng.shuffle(words)
    cfg = dpa.JobConfig(runtime="local", policy=mode, policy_options={"interval": 500, "theta": 0.1},
                        num_mappers=2, num_reducers=4, batch_size=200, chunk_size=50)
    res = dpa.run(words, reducer=dpa.WithCost(dpa.Count(), 0.001), config=cfg)
    assert res.to_dict() == dict(collections.Counter(words))
    assert res.stats.rebalances and all(e.action == mode for e in res.stats.rebalances)
    versions = [e.version for e in res.stats.rebalances]
    assert versions == sorted(set(versions)) and versions[0] == 1
