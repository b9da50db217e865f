"""What a ``reducer`` argument asks a job to do, taken apart once at the API edge.

``dpa.run(..., reducer=...)`` (and the Spark bridge's ``run_with_result``) accepts a reducer
that may be wrapped in :class:`~dpa.aggregates.contract.WithCost`, or be a per-group
function (:class:`~dpa.aggregates.group_apply.GroupApply`). :func:`requested` reads the
argument once and answers with a :class:`Requested`: the bare aggregate, the per-record
:class:`~dpa.aggregates.contract.Cost` and the per-group function, if any. The job plan
(:class:`dpa.engine.plan.JobPlan`) carries the aggregate and the cost as fields, so the
engine, the runtimes and the bridge never look inside a wrapper.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dpa.aggregates.contract import Cost, Reducer, WithCost
from dpa.aggregates.group_apply import GroupApply


@dataclass(frozen=True)
class Requested:
    """A reducer argument, taken apart.

    Attributes:
        aggregate: The reducer that does the work per key (no cost wrapper): an aggregate,
            a composite of several, or a per-group function.
        cost: What the reducers pay per record they process (zero when not wrapped).
        wrapped: Whether the argument was wrapped in :class:`WithCost` (even at no cost); a
            per-group function cannot be.
    """

    aggregate: Reducer
    cost: Cost = field(default_factory=Cost)
    wrapped: bool = False

    @property
    def group_apply(self) -> GroupApply | None:
        """The per-group function the job runs, or None for an aggregation."""
        return self.aggregate if isinstance(self.aggregate, GroupApply) else None


def requested(reducer: Any) -> Requested:
    """``reducer`` taken apart: the aggregate inside any :class:`WithCost` wrappers, their
    costs added up (the outermost wrapper's mode), and whether there was a wrapper.

    Anything that is not a :class:`WithCost` is returned as the aggregate as it is; callers
    check that it is a :class:`~dpa.aggregates.contract.Reducer`.
    """
    seconds, mode, wrapped = 0.0, None, False
    while isinstance(reducer, WithCost):
        seconds += reducer.seconds_per_record
        mode = mode or reducer.mode
        reducer, wrapped = reducer.inner, True
    return Requested(reducer, Cost(seconds, mode or "sleep"), wrapped)
