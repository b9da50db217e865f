"""Tests for workloads.paper (WL1..WL5) and workloads.generators."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from dpa.errors import ConfigError
from dpa.metrics import skew
from dpa.ring import HashRing
from workloads import generators as gen
from workloads.experiment import instant_lb
from workloads.paper import (
    LB_MARGIN,
    METHODS,
    PAPER_NO_LB_TARGETS,
    PAPER_TABLE1,
    WL3_LETTER,
    WORKLOAD_NAMES,
    WORKLOADS,
    no_lb_counts,
    workload,
)
from workloads.paper_construct import build_all, construct_workload
from workloads.paper_lb import (
    check_lb_rule,
    lb_at_t0,
    lb_drain,
    lb_rule,
    more_rounds_never_hurt,
    moves_on_own_round,
    one_round_rings,
    single_letter,
)

# ---------------------------------------------------------------------------------------
# Paper workloads
# ---------------------------------------------------------------------------------------

IMPROVES = [k for k, (no, lb) in PAPER_TABLE1.items() if lb < no]


def _no_lb_skew(items: list[str], method: str) -> float:
    ring = HashRing.for_halving(4) if method == "halving" else HashRing.for_doubling(4)
    snap = ring.snapshot()
    counts = [0] * 4
    for item in items:
        counts[snap.key_lookup(item)] += 1
    return skew(counts)


@pytest.mark.parametrize("name", WORKLOAD_NAMES)
@pytest.mark.parametrize("method", METHODS)
def test_no_lb_skew_matches_paper(name: str, method: str) -> None:
    items = workload(name)
    assert len(items) == 100
    assert all(isinstance(x, str) and len(x) == 1 and x.isascii() and x.isalpha() for x in items)
    target = PAPER_TABLE1[(name, method)][0]
    assert PAPER_NO_LB_TARGETS[(name, method)] == target
    assert abs(_no_lb_skew(items, method) - target) <= 0.01


def test_improvement_rows() -> None:
    assert sorted(IMPROVES) == sorted([
        ("WL1", "doubling"), ("WL3", "doubling"), ("WL4", "halving"), ("WL4", "doubling"),
        ("WL5", "doubling"),
    ])
    assert [lb_rule(*PAPER_TABLE1[k]) for k in IMPROVES] == ["improves"] * 5
    assert lb_rule(*PAPER_TABLE1[("WL5", "halving")]) == "stable"
    assert lb_rule(*PAPER_TABLE1[("WL1", "halving")]) == "neutral"


@pytest.mark.parametrize("key", [k for k in IMPROVES if k[0] != "WL3"])
def test_one_round_moves_load_like_the_paper(key: tuple[str, str]) -> None:
    """t0: the real planner, acting with every record queued, reaches the paper's S."""
    name, method = key
    items = workload(name)
    no_lb, paper_lb = PAPER_TABLE1[key]
    t0 = lb_at_t0(items, method)
    assert t0["skew"] <= paper_lb + 1e-9, t0
    # ... starting with a round on the no-LB straggler that moves a comparable share of
    # its records (the paper's Δ, give or take LB_MARGIN and the later rounds).
    base = no_lb_counts(items, method)
    hot = base.index(max(base))
    assert t0["actions"][0] == (hot, "halve" if method == "halving" else "double")
    ring = HashRing.for_method(method, 4)
    ring.redistribute(hot, method)
    moved = sum(1 for x in items if ring.key_lookup(x) != hot and
                HashRing.for_method(method, 4).key_lookup(x) == hot)
    assert moved >= 75 * (no_lb - paper_lb) - 1
    # The same analysis as the Table 1 script's t0 column.
    assert instant_lb(name, method, 1)["loads"] == t0["loads"]
    # The drain model (later rounds as the queues run down) stays within the paper too,
    # and near the aimed paper - LB_MARGIN (a comparable Δ, not a much larger one).
    drain = lb_drain(items, method)
    assert paper_lb - 2 * LB_MARGIN - 0.02 <= drain["skew"] <= paper_lb + 1e-9, drain
    assert abs(sum(drain["processed"]) - 100) < 1e-6
    assert check_lb_rule(items, method, paper_lb, no_lb) == []


@pytest.mark.parametrize("key", [k for k in PAPER_TABLE1 if k not in IMPROVES])
def test_lb_is_neutral_where_the_paper_shows_no_improvement(key: tuple[str, str]) -> None:
    name, method = key
    items = workload(name)
    no_lb, paper_lb = PAPER_TABLE1[key]
    assert lb_at_t0(items, method)["skew"] == pytest.approx(_no_lb_skew(items, method))
    assert check_lb_rule(items, method, paper_lb, no_lb) == []
    if lb_rule(no_lb, paper_lb) == "stable":  # WL2, WL3, WL5 halving: no ring raises S
        base = max(no_lb_counts(items, method))
        for snap in one_round_rings(method):
            loads = [0] * 4
            for x in items:
                loads[snap.key_lookup(x)] += 1
            assert max(loads) <= base


@pytest.mark.parametrize("name", WORKLOAD_NAMES)
def test_more_halving_rounds_never_hurt(name: str) -> None:
    """Figure 3 of the paper: additional rounds never hurt the halving method (t0)."""
    items = workload(name)
    assert more_rounds_never_hurt(items) == []
    skews = [lb_at_t0(items, "halving", r)["skew"] for r in range(1, 5)]
    assert skews == sorted(skews, reverse=True)


def test_wl3_is_one_letter_that_doubling_moves_and_halving_keeps() -> None:
    items = workload("WL3")
    assert len(items) == 100 and set(items) == {WL3_LETTER}
    assert single_letter(["doubling"]) == WL3_LETTER == "b"
    assert moves_on_own_round(WL3_LETTER, "doubling")
    assert not moves_on_own_round(WL3_LETTER, "halving")
    assert len({snap.key_lookup(WL3_LETTER) for snap in one_round_rings("halving")}) == 1
    # The paper's example letter 'a' does the opposite on our ring.
    assert not moves_on_own_round("a", "doubling") and moves_on_own_round("a", "halving")
    # Doubling: the first round moves all 100 to another reducer (S stays 1 at t0).
    t0 = lb_at_t0(items, "doubling")
    assert t0["actions"][0][1] == "double" and t0["skew"] == 1.0
    assert lb_at_t0(items, "halving")["loads"] == no_lb_counts(items, "halving")


def test_workloads_are_mixed_and_copied() -> None:
    assert set(WORKLOADS) == set(WORKLOAD_NAMES)
    for name in ("WL1", "WL2", "WL4", "WL5"):
        items = workload(name)
        assert len(set(items)) >= 4
        # Shuffled: not grouped into runs of equal letters.
        runs = sum(1 for a, b in zip(items, items[1:], strict=False) if a != b)
        assert runs > 30
    # Only WL1 needs uppercase letters.
    assert all(x.islower() for name in ("WL2", "WL3", "WL4", "WL5") for x in workload(name))
    copy = workload("WL1")
    copy.append("zzz")
    assert len(workload("WL1")) == 100
    with pytest.raises(ConfigError, match="WL1"):
        workload("WL9")


def test_search_reproduces_literals() -> None:
    assert build_all() == WORKLOADS


def test_construct_workload_other_targets() -> None:
    items = construct_workload({"halving": 0.5, "doubling": 0.3}, seed=7)
    assert len(items) == 100
    assert abs(_no_lb_skew(items, "halving") - 0.5) <= 0.01
    assert abs(_no_lb_skew(items, "doubling") - 0.3) <= 0.01
    only = construct_workload({"doubling": 1.0})
    assert _no_lb_skew(only, "doubling") == 1.0
    with pytest.raises(ConfigError):
        construct_workload({"tripling": 0.5})
    with pytest.raises(ConfigError, match="needs a no-LB target"):
        construct_workload({"halving": 0.5}, with_lb={"doubling": 0.1})


def test_construct_workload_with_lb_constraints() -> None:
    items = construct_workload({"halving": 0.6, "doubling": 0.4},
                               with_lb={"halving": 0.6, "doubling": 0.2}, seed=3)
    assert len(items) == 100
    assert abs(_no_lb_skew(items, "halving") - 0.6) <= 0.01
    assert abs(_no_lb_skew(items, "doubling") - 0.4) <= 0.01
    assert lb_at_t0(items, "doubling")["skew"] <= 0.2 + 1e-9
    assert lb_drain(items, "doubling")["skew"] <= 0.2 + 1e-9
    assert check_lb_rule(items, "halving", 0.6, 0.6) == []  # stable
    assert construct_workload({"halving": 0.6, "doubling": 0.4},
                              with_lb={"halving": 0.6, "doubling": 0.2}, seed=3) == items


def test_lb_drain_and_rule_checks() -> None:
    # Balanced: nothing happens; all on one reducer that one round cannot split: S stays 1.
    assert lb_drain(workload("WL2"), "doubling") == {
        "processed": [25.0, 25.0, 25.0, 25.0], "skew": 0.0, "rounds": []}
    d = lb_drain(workload("WL3"), "halving")
    assert d["rounds"] == [1] and d["skew"] == 1.0
    # The rule checks report what is wrong.
    assert check_lb_rule(workload("WL3"), "doubling", 0.75, 1.0)  # t0 and drain stay at 1
    assert check_lb_rule(["b"] * 100, "halving", 1.0, 1.0) == []
    assert check_lb_rule(workload("WL4"), "halving", 0.8, 0.8)  # one round does improve it
    assert check_lb_rule(workload("WL1"), "doubling", 0.05, 1.0)  # not that much
    assert len(one_round_rings("doubling")) == 16
    assert one_round_rings("doubling")[0b0010].token_counts == (2, 1, 2, 2)
    assert one_round_rings("halving")[0b0011].token_counts == (8, 8, 16, 16)


def test_table1_complete() -> None:
    assert len(PAPER_TABLE1) == 10
    assert PAPER_TABLE1[("WL4", "doubling")] == (0.49, 0.11)


# ---------------------------------------------------------------------------------------
# Generators
# ---------------------------------------------------------------------------------------

ALL = {
    "zipf": lambda seed, **kw: gen.zipf(1.2, 1000, 5000, seed, **kw),
    "uniform": lambda seed, **kw: gen.uniform(1000, 5000, seed, **kw),
    "lognormal": lambda seed, **kw: gen.lognormal(1.789, 2.366, 1000, 5000, seed, **kw),
    "lognormal_unbounded": lambda seed, **kw: gen.lognormal(2.245, 1.133, None, 5000, seed, **kw),
    "drifting": lambda seed, **kw: gen.drifting(1000, 5000, 0.5, 700, seed, **kw),
}


@pytest.mark.parametrize("name", ALL)
def test_generators_deterministic_and_sized(name: str) -> None:
    make = ALL[name]
    a = make(1)
    b = make(1)
    c = make(2)
    assert isinstance(a, pa.Table)
    assert a.schema == pa.schema([("key", pa.int64())])
    assert a.num_rows == 5000
    assert a.equals(b)
    assert not a.equals(c)
    keys = a.column("key").to_numpy()
    assert keys.min() >= 0
    if name != "lognormal_unbounded":
        assert keys.max() < 1000
    s = make(1, as_str=True)
    assert s.schema == pa.schema([("key", pa.string())])
    assert s.column("key").to_pylist() == [str(k) for k in keys]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("batch_size", [1, 999, 5000, 10_000])
def test_batches_concatenate_to_table(name: str, batch_size: int) -> None:
    make = ALL[name]
    table = make(3)
    batches = list(make(3, batches=True, batch_size=batch_size))
    assert all(isinstance(x, pa.RecordBatch) for x in batches)
    assert all(x.num_rows <= batch_size for x in batches)
    assert pa.Table.from_batches(batches).equals(table)


def test_iter_functions_match() -> None:
    t = gen.zipf(0.8, 50, 1000, 4)
    assert pa.Table.from_batches(list(gen.iter_zipf(0.8, 50, 1000, 4, batch_size=64))).equals(t)
    t = gen.uniform(50, 1000, 4, as_str=True)
    it = gen.iter_uniform(50, 1000, 4, as_str=True, batch_size=64)
    assert pa.Table.from_batches(list(it)).equals(t)
    t = gen.lognormal(1.0, 1.0, None, 1000, 4)
    assert pa.Table.from_batches(list(gen.iter_lognormal(1.0, 1.0, None, 1000, 4))).equals(t)
    t = gen.drifting(50, 1000, 0.3, 100, 4)
    assert pa.Table.from_batches(list(gen.iter_drifting(50, 1000, 0.3, 100, 4))).equals(t)


def test_empty() -> None:
    assert gen.zipf(1.0, 10, 0).num_rows == 0
    assert list(gen.iter_uniform(10, 0)) == []


def test_zipf_frequencies_match_theory() -> None:
    n, k, z = 200_000, 100, 1.0
    keys = gen.zipf(z, k, n, seed=5).column("key").to_numpy()
    counts = Counter(keys.tolist())
    probs = gen.zipf_probabilities(z, k)
    top = counts.most_common(3)
    for (_, c), p in zip(top, probs[:3], strict=True):
        sd = np.sqrt(n * p * (1 - p))
        assert abs(c - n * p) < 5 * sd
    # Permutation: ranks map to different ids for different seeds; permute=False -> rank-1.
    hot_ids = {
        Counter(gen.zipf(z, k, 5000, seed=s).column("key").to_pylist()).most_common(1)[0][0]
        for s in range(6)
    }
    assert len(hot_ids) > 1
    plain = gen.zipf(z, k, 20_000, seed=5, permute=False).column("key").to_numpy()
    assert Counter(plain.tolist()).most_common(1)[0][0] == 0


def test_zipf_z0_is_uniform_and_bad_params() -> None:
    p = gen.zipf_probabilities(0.0, 4)
    assert np.allclose(p, 0.25)
    assert np.isclose(gen.zipf_probabilities(2.0, 1000).sum(), 1.0)
    with pytest.raises(ConfigError):
        gen.zipf(-1.0, 10, 10)
    with pytest.raises(ConfigError):
        gen.zipf(1.0, 0, 10)
    with pytest.raises(ConfigError):
        gen.uniform(10, -1)
    with pytest.raises(ConfigError):
        gen.uniform(10, 10, batches=True, batch_size=0)
    with pytest.raises(ConfigError):
        gen.drifting(10, 10, 1.5, 5)
    with pytest.raises(ConfigError):
        gen.drifting(10, 10, 0.5, 0)
    with pytest.raises(ConfigError):
        gen.lognormal_preset("LN3")


def test_lognormal_presets_match_pkg_table() -> None:
    assert (gen.LN1.mu, gen.LN1.sigma) == (1.789, 2.366)
    assert (gen.LN2.mu, gen.LN2.sigma) == (2.245, 1.133)
    n = 300_000
    for preset in (gen.LN1, gen.LN2):
        keys = gen.lognormal_preset(preset.name, n, seed=11).column("key").to_numpy()
        _, counts = np.unique(keys, return_counts=True)
        p1 = counts.max() / n
        assert abs(p1 - preset.p1) < 0.005, (preset.name, p1)


def test_drifting_hot_key_changes() -> None:
    n, period = 10_000, 1000
    keys = gen.drifting(500, n, 0.6, period, seed=9).column("key").to_numpy()
    hot = gen.drifting_hot_keys(500, n, period, seed=9)
    assert len(hot) == 10
    assert np.all(hot[1:] != hot[:-1])
    for s in range(10):
        seg = keys[s * period : (s + 1) * period]
        top, count = Counter(seg.tolist()).most_common(1)[0]
        assert top == hot[s]
        assert 0.5 < count / period < 0.7
