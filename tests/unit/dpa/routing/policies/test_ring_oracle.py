"""``dpa.routing.policies.ring.oracle``: the best ring token doubling can reach, and doubling
started on a given ring."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest

import dpa
from dpa.keys.columns import hash_key_columns
from dpa.routing.hash_ring import HashRing
from dpa.routing.policies.ring.lookahead import KeyLoads, predicted_loads
from dpa.routing.policies.ring.oracle import doubling_bound, fixed_ring_factory


def _brute_force(table: pa.Table, reducers: int, rounds: int, base: int, even: bool) -> float:
    """Every combination of rounds, each ring built and scored as the planner would."""
    counts = table.group_by("key").aggregate([([], "count_all")])
    loads = KeyLoads(hash_key_columns(counts, ["key"]), counts["count_all"].to_numpy().astype(np.float64), 0.0)
    best = float("inf")
    for relieved in itertools.product(range(rounds + 1), repeat=reducers):
        tokens = [base << (sum(relieved) - r) for r in relieved]
        ring = HashRing(tokens, base if even else 0)
        best = min(best, float(predicted_loads(ring.snapshot(), loads).max()) * reducers / loads.total)
    return best


@pytest.mark.parametrize("base,spacing", [(1, "even"), (2, "hashed"), (4, "even")])
def test_the_bound_is_the_best_ring_of_every_combination_of_rounds(base, spacing):
    rng = np.random.default_rng(3)
    table = pa.table({"key": rng.zipf(1.3, 3000) % 400})
    for rounds in (1, 2):
        share, relieved, tokens, first = doubling_bound(table, 3, rounds, base, spacing)
        assert first == base
        assert share == pytest.approx(_brute_force(table, 3, rounds, base, spacing == "even"))
        assert max(relieved) <= rounds
        assert tokens == tuple(base << (sum(relieved) - r) for r in relieved)
        counts = table.group_by("key").aggregate([([], "count_all")])
        loads = KeyLoads(hash_key_columns(counts, ["key"]), counts["count_all"].to_numpy().astype(np.float64), 0.0)
        ring = HashRing(list(tokens), base if spacing == "even" else 0)
        assert float(predicted_loads(ring.snapshot(), loads).max()) * 3 / len(table) == pytest.approx(share)


def test_more_rounds_never_give_a_worse_bound():
    table = pa.table({"key": np.random.default_rng(5).zipf(1.2, 4000) % 500})
    shares = [doubling_bound(table, 4, rounds)[0] for rounds in (1, 2)]
    assert shares[1] <= shares[0] + 1e-12
    assert shares[0] >= 1.0


def test_the_bound_over_first_rings_is_the_best_of_each():
    table = pa.table({"key": np.random.default_rng(6).zipf(1.2, 3000) % 300})
    best = doubling_bound(table, 3, 1)
    each = [doubling_bound(table, 3, 1, base) for base in (2, 4, 8, 16, 32)]
    assert best.share == pytest.approx(min(b.share for b in each))
    assert best.first_tokens in (2, 4, 8, 16, 32)
    assert best == min(each, key=lambda b: b.share)


def test_the_fixed_ring_policy_starts_on_its_ring_and_never_rebalances():
    import dpa.routing.registry as registry

    name = "test-fixed-ring"
    dpa.register_policy(name, fixed_ring_factory((4, 8, 2)))
    try:
        spec = registry.make_policy(dpa.JobConfig(runtime="local", policy=name, num_reducers=3))
        assert spec.initial_snapshot(3).token_counts == (4, 8, 2)
        assert spec.make_planner(3) is None
        keys = list(np.random.default_rng(0).integers(0, 50, 500))
        res = dpa.run(keys, config=dpa.JobConfig(runtime="local", policy=name, num_reducers=3))
        from collections import Counter

        assert res.to_dict() == dict(Counter(int(k) for k in keys))
        assert res.stats.rebalances == []
    finally:
        registry._REGISTRY.pop(name, None)
    name = "test-fixed-ring-2"
    dpa.register_policy(name, fixed_ring_factory((2, 4, 8), first_tokens=2))
    try:
        spec = registry.make_policy(dpa.JobConfig(runtime="local", policy=name, num_reducers=3))
        got, expect = spec.initial_snapshot(3), HashRing([2, 4, 8], 2).snapshot()  # first 2 tokens evenly spaced
        assert got.token_counts == (2, 4, 8) and got.spacing == (3, 2)
        assert np.array_equal(got.positions, expect.positions) and np.array_equal(got.owners, expect.owners)
    finally:
        registry._REGISTRY.pop(name, None)


