"""The plan carries a reducer's cost and its per-group function as fields
(:attr:`JobPlan.aggregate`, :attr:`JobPlan.cost`, :attr:`JobPlan.group_apply`): the engine and
the runtimes read them, never a wrapper."""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import pyarrow as pa
import pytest

import dpa
from dpa.aggregates.composite import Aggregates, combine
from dpa.aggregates.contract import Cost, WithCost
from dpa.engine.planning import build_plan
from dpa.input.sources import normalize_source
from dpa.runtime.local import run_local

KEYS = (np.random.default_rng(5).zipf(1.3, 4000) % 200).astype(np.int64)


def _plan(reducer, **fields):
    table = pa.table({"k": KEYS, "v": np.ones(len(KEYS), dtype=np.int64)})
    config = dpa.JobConfig(num_reducers=4, batch_size=500, runtime="local", **fields)
    return build_plan(normalize_source(table, 500), "k", reducer, None, config)


def _counts(out) -> dict[int, int]:
    found: dict[int, int] = {}
    for t in out.tables:
        if t is not None:
            found.update(zip(t["k"].to_pylist(), t["count"].to_pylist()))
    return found


def test_a_costly_reducer_is_planned_as_its_aggregate_and_a_cost():
    total = dpa.Sum("v")
    plan, _ = _plan(dpa.WithCost(total, 1e-3, mode="spin"))
    assert plan.aggregate is total and not isinstance(plan.aggregate, WithCost)
    assert plan.cost == Cost(1e-3, "spin")
    assert not plan.combine  # records that cost time are not combined on the map side
    assert plan.group_apply is None and not plan.applies_groups


def test_a_reducer_without_cost_is_planned_at_no_cost_and_combined():
    plan, _ = _plan(dpa.Sum("v"))
    assert plan.cost == Cost() and plan.combine


def test_a_list_with_a_costly_member_is_one_composite_at_their_summed_cost():
    plan, _ = _plan(combine([dpa.WithCost(dpa.Count(), 1e-3), dpa.WithCost(dpa.Sum("v"), 2e-3)]))
    assert isinstance(plan.aggregate, Aggregates)
    assert plan.cost.seconds_per_record == pytest.approx(3e-3)


def test_a_per_group_function_is_the_plans_group_apply():
    fn = dpa.GroupApply(lambda pdf: pdf.head(1))
    plan, _ = _plan(fn)
    assert plan.group_apply is fn and plan.aggregate is fn and plan.applies_groups and plan.cost == Cost()


def test_the_runtime_pays_the_plans_cost():
    """The same plan with and without a cost field: the reducers charge what the field says
    (in virtual time) and the counts stay exact."""
    plan, blocks = _plan(dpa.Count())
    plan = dataclasses.replace(plan, combine=False)  # one record, one charge
    free = run_local(plan, blocks)
    plan, blocks = _plan(dpa.Count())
    costly = run_local(dataclasses.replace(plan, combine=False, cost=Cost(1e-3)), blocks)
    expected = collections.Counter(KEYS.tolist())
    assert _counts(free) == _counts(costly) == expected
    # 4,000 records at 1 ms over 4 reducers: at least a second of virtual time.
    assert costly.virtual_time_s >= 0.999 * len(KEYS) * 1e-3 / 4
    assert free.virtual_time_s < 0.5 * costly.virtual_time_s


@pytest.mark.parametrize("finalize_at_stop", [True, False])
def test_a_group_apply_job_ends_in_its_apply_phase_and_never_asks_reducers_to_finalize(finalize_at_stop):
    """Why the row store (:class:`~dpa.aggregates.rows.RowsState`) has no ``finalize``: the
    coordinator's machine ends a per-group function's job with the apply phase, and its
    reducers' loops never finalize as they end."""
    from dpa.engine import events as ev
    from dpa.engine import instructions as op
    from dpa.engine.coordinator_machine import CoordinatorMachine

    plan, _ = _plan(dpa.GroupApply(lambda pdf: pdf.head(1)), num_mappers=2, policy="hash")
    m = CoordinatorMachine(plan, lambda: 0.0, None, finalize_at_stop=finalize_at_stop)
    m.initial_snapshot = snapshot = plan.policy.initial_snapshot(plan.num_reducers)
    m.handle(ev.JobStarted(snapshot), ev.RunStarted(0.0))
    m.handle(ev.BlockWanted(0), ev.BlockWanted(1), ev.BlocksOffered(["b0"]), ev.InputExhausted())
    m.handle(ev.BlockFinished(0, 0, 1), ev.MapperFinished(0), ev.MapperFinished(1))
    m.handle(ev.ProgressReported(0, 1))
    end = m.handle(ev.BalancingEnded(snapshot))
    assert end[0] == op.StopReducers(tuple(range(plan.num_reducers)), snapshot, False)
    assert op.ApplyGroups() in end
    assert not [i for i in end if isinstance(i, (op.FinalizeReducers, op.TakeFinalized))]
