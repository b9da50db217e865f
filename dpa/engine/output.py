"""What a runtime hands back to :func:`dpa.run`, and the decisions both runtimes share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

#: Seconds between two calls of a job's ``progress`` callback on the driver (wall clock).
DRIVER_PROGRESS_INTERVAL_S = 0.5


@dataclass
class RunOutput:
    """What a runtime returns to :func:`dpa.run`.

    Attributes:
        tables: Per-reducer result tables (in-process runtime), else empty.
        processed: Records processed per reducer.
        forwarded: Records forwarded per reducer.
        emitted: Records emitted per mapper.
        blocks_per_mapper: Input blocks each mapper took.
        events: The balancer's :class:`~dpa.routing.policy.RebalanceEvent` log.
        final_snapshot: The routing snapshot at the end.
        merged: Whether the partitioned final merge ran (:func:`needs_final_merge`).
        wall_time_s: Seconds the runtime took.
        virtual_time_s: Simulated seconds (in-process runtime only).
        peak_queue: Largest queue length per reducer, in records.
        arrow_refs: Per-reducer result refs in Ray's object store (Ray runtime).
        timeline: ``(time, queue lengths, version)`` samples.
        recoveries: The failures the job recovered from (:class:`~dpa.engine.epochs.Recovery`).
        checkpoints: Checkpoints taken.
        merged_keys: Keys whose partial states were merged by the final merge.
        state_moves: Keys whose state was handed to another reducer during the job
            (``JobConfig.migrate="state"``, and elastic scale-in).
        scaling: Elastic reducers' event log (:class:`~dpa.engine.elastic.ScalingEvent`).
        result_meta: ``(rows, schema, bytes)`` of each table behind :attr:`arrow_refs` (Ray runtime).
        group_apply: The apply phase of a per-group function
            (:meth:`~dpa.engine.group_schedule.GroupScheduler.stats`), else None.
        extra: A runtime's own figures, by name (the in-process runtime's ``"sim"``: its
            message cost model), carried into ``Stats.extra``.
    """

    tables: list[pa.Table | None]
    processed: list[int]
    forwarded: list[int]
    emitted: list[int]
    blocks_per_mapper: list[int]
    events: list[Any]
    final_snapshot: Any
    merged: bool
    wall_time_s: float
    virtual_time_s: float | None = None
    peak_queue: list[int] = field(default_factory=list)
    arrow_refs: list[Any] | None = None
    timeline: list[tuple[float, tuple[int, ...], int]] = field(default_factory=list)
    recoveries: list[Any] = field(default_factory=list)
    checkpoints: int = 0
    merged_keys: int = 0
    state_moves: int = 0
    scaling: list[Any] = field(default_factory=list)
    group_apply: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    result_meta: list[tuple[int, pa.Schema, int]] | None = None


def needs_final_merge(policy: Any, initial_snapshot: Any, final_snapshot: Any, migrate: str = "records",
                      routed_from: int | None = None) -> bool:
    """Whether partial states of one key may sit on several reducers at the end.

    True when the policy splits keys by design (unless it splits them only under snapshots
    its planner publishes, :attr:`~dpa.routing.policy.PolicySpec.splits_by_plan`, and the final
    one splits none), or when the routing changed after the first record was routed (a
    moved key was processed by its old and its new owner). Otherwise every key stayed on
    one reducer, and the partitioned final merge is skipped.

    ``routed_from`` is the oldest snapshot version any mapper routed a record under (None:
    not known, taken as the initial snapshot's): a ring planned on the mappers' forecast
    goes out before the first push, so a job that ends on it moved no key.

    With ``migrate="state"`` a moved key's state follows it, so at the end every key sits
    where the final snapshot routes it: only keys that snapshot splits (a hot key of
    ``hybrid``: :meth:`~dpa.routing.policy.PolicySpec.keys_split_under`) need the merge.
    """
    split_now = policy.keys_split_under(final_snapshot)
    if migrate == "state":
        return split_now
    first = initial_snapshot.version if routed_from is None else routed_from
    return split_now or final_snapshot.version != first


def finalize_at_stop(plan: Any, merged: bool) -> bool:
    """Whether the reducers may finalize as their loops end (one round of calls fewer).

    Only when nothing reaches a reducer after its own loop ended, which may be before a
    peer's loop ends: no final merge (``merged``), no state following its key at the end
    (``migrate="state"``), no elastic slot handing its state over as it retires, and no
    apply phase of a per-group function to schedule.
    """
    return not merged and plan.migrate != "state" and not plan.active_reducers and not plan.applies_groups
