"""Tests for dpa.metrics."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpa.metrics import imbalance, max_over_avg, skew


@pytest.mark.parametrize(
    "counts, expected",
    [
        ([100, 0, 0, 0], 1.0),
        ([25, 25, 25, 25], 0.0),
        ([85, 5, 5, 5], 0.8),
        ([62, 13, 13, 12], 37 / 75),  # 0.4933..., the paper's WL4 doubling "0.49"
        ([66, 12, 11, 11], 41 / 75),  # 0.5466..., the paper's WL5 doubling "0.55"
        ([40, 20, 20, 20], 0.2),
        ([26, 25, 25, 24], 1 / 75),
        ([3, 0, 0], 1.0),  # M=3, U=1
        ([2, 1, 1], 0.0),  # M=4, U=ceil(4/3)=2, W=2
        ([3, 1, 0], 0.5),  # M=4, U=2, W=3
    ],
)
def test_skew_hand_computed(counts: list[int], expected: float) -> None:
    assert skew(counts) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("counts", [[], [7], [0, 0, 0], [1, 0, 0, 0], [0, 1]])
def test_skew_edge_cases_are_zero(counts: list[int]) -> None:
    assert skew(counts) == 0.0


def test_skew_exact_ceil_on_huge_counts() -> None:
    big = 10**20
    # Float division would lose the +1 here; integer ceil must not.
    assert skew([big + 1, big, big]) == pytest.approx(0.0, abs=1e-15)
    assert skew([3 * big + 1, 0, 0]) == 1.0


def test_skew_rejects_negative() -> None:
    with pytest.raises(ValueError):
        skew([5, -1])


@given(st.lists(st.integers(min_value=0, max_value=10**6), min_size=0, max_size=10))
def test_skew_is_in_unit_interval(counts: list[int]) -> None:
    s = skew(counts)
    assert 0.0 <= s <= 1.0
    if len(counts) > 1 and sum(counts) > 1 and max(counts) == sum(counts):
        assert s == 1.0


def test_imbalance_and_max_over_avg() -> None:
    assert imbalance([10, 0, 0, 10]) == 5.0
    assert imbalance([3, 3, 3]) == 0.0
    assert imbalance([]) == 0.0
    assert max_over_avg([10, 0, 0, 10]) == 2.0
    assert max_over_avg([100, 0, 0, 0]) == 4.0
    assert max_over_avg([5, 5]) == 1.0
    assert max_over_avg([]) == 1.0
    assert max_over_avg([0, 0]) == 1.0
