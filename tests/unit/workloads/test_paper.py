"""Tests for workloads.paper (WL1..WL5), its construction and its LB rules."""

from __future__ import annotations

import pytest

from dpa.errors import ConfigError
from dpa.metrics import skew
from dpa.routing.hash_ring import HashRing
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
