"""Taking a reducer argument apart at the API edge (:func:`dpa.aggregates.requested.requested`)."""

from __future__ import annotations

import pytest

import dpa
from dpa.aggregates.contract import Cost
from dpa.aggregates.requested import Requested, requested
from dpa.errors import ConfigError


def _count(pdf):
    return pdf.head(1)


def test_a_bare_reducer_is_its_own_aggregate_at_no_cost():
    count = dpa.Count()
    asked = requested(count)
    assert asked == Requested(count, Cost(0.0, "sleep"), wrapped=False)
    assert asked.group_apply is None


def test_wrappers_come_off_their_costs_add_up_and_the_outermost_mode_counts():
    total = dpa.Sum("v")
    asked = requested(dpa.WithCost(dpa.WithCost(total, 0.002, mode="sleep"), 0.001, mode="spin"))
    assert asked.aggregate is total and asked.wrapped
    assert asked.cost.seconds_per_record == pytest.approx(0.003) and asked.cost.mode == "spin"


def test_a_wrapper_at_no_cost_is_still_a_wrapper():
    asked = requested(dpa.WithCost(dpa.Count(), 0.0))
    assert asked.wrapped and asked.cost == Cost()


def test_a_per_group_function_is_named_as_such():
    fn = dpa.GroupApply(_count)
    assert requested(fn).group_apply is fn
    assert requested(dpa.WithCost(fn, 0.001)).group_apply is fn  # (refused at plan time: wrapped)


@pytest.mark.parametrize("seconds, mode, match", [(-1.0, "sleep", "seconds_per_record >= 0"),
                                                   ("1", "sleep", "seconds_per_record >= 0"),
                                                   (0.1, "nap", "'sleep' or 'spin'")])
def test_a_cost_is_validated(seconds, mode, match):
    with pytest.raises(ConfigError, match=match):
        Cost(seconds, mode)
