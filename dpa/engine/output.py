"""What a runtime hands back to :func:`dpa.run`, and the decisions both runtimes share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

#: Seconds between two calls of a job's ``progress`` callback on the driver (wall clock).
DRIVER_PROGRESS_INTERVAL_S = 0.5


@dataclass(kw_only=True)
class JobFigures:
    """What happened in a job, as its runtime counted it: the figures a runtime hands back
    in its :class:`RunOutput` and :class:`dpa.Stats` shows (both are these, and more).

    Attributes:
        processed: Records processed by each reducer (``M_i``; forwarded ones not counted).
        forwarded: Records each reducer forwarded to the key's new owner.
        emitted: Records each mapper emitted (after ``map_fn``).
        blocks_per_mapper: Input blocks each mapper pulled.
        rebalances: The balancer's event log (:class:`dpa.routing.policy.RebalanceEvent`).
        merged: Whether a final state merge across reducers was needed
            (:func:`needs_final_merge`).
        wall_time_s: Seconds the job took.
        virtual_time_s: Simulated seconds (in-process runtime only).
        peak_queue: Largest queue length seen per reducer, in records.
        timeline: ``(time, queue lengths, version)`` samples.
        recoveries: The failures the job recovered from, oldest first
            (:class:`dpa.Recovery`: time, dead actors, their nodes, the checkpoint epoch
            rolled back to, blocks and records replayed, seconds to recover).
        checkpoints: Checkpoints taken (``JobConfig.checkpoint_interval_s``).
        merged_keys: Keys whose partial states the final merge combined (0 when every
            key ended on one reducer, e.g. ``migrate="state"`` with a ring policy).
        state_moves: Keys whose accumulated state was handed to another reducer during
            the job (``JobConfig.migrate="state"``; elastic scale-in).
        scaling: Elastic reducers' event log (:class:`dpa.ScalingEvent`: scale-outs,
            scale-ins and refused scale-outs, with the width after each); empty for a
            fixed width. :attr:`processed` lists every reducer slot that existed.
        group_apply: The apply phase of a per-group function (:class:`dpa.GroupApply`;
            :meth:`~dpa.engine.group_schedule.GroupScheduler.stats`): units and groups run,
            the largest group's rows, the units, groups and rows that ran away from the
            reducer that collected them (``moved_*``, and the first ``moves``), measured
            seconds per row and each worker's busy seconds; None for other jobs.
        extra: A runtime's own figures, by name (the in-process runtime's ``"sim"``: its
            message cost model; the Spark bridge's ``"spark_path"``).
    """

    processed: list[int]
    forwarded: list[int]
    emitted: list[int]
    blocks_per_mapper: list[int]
    rebalances: list[Any]
    merged: bool
    wall_time_s: float
    virtual_time_s: float | None = None
    peak_queue: list[int] = field(default_factory=list)
    timeline: list[tuple[float, tuple[int, ...], int]] = field(default_factory=list)
    recoveries: list[Any] = field(default_factory=list)
    checkpoints: int = 0
    merged_keys: int = 0
    state_moves: int = 0
    scaling: list[Any] = field(default_factory=list)
    group_apply: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True)
class RunOutput(JobFigures):
    """What a runtime returns to :func:`dpa.run`: the job's figures (:class:`JobFigures`),
    its result and the routing it ended on.

    Attributes:
        tables: Per-reducer result tables (in-process runtime), else empty.
        final_snapshot: The routing snapshot at the end.
        arrow_refs: Per-reducer result refs in Ray's object store (Ray runtime).
        result_meta: ``(rows, schema, bytes)`` of each table behind :attr:`arrow_refs` (Ray runtime).
    """

    tables: list[pa.Table | None]
    final_snapshot: Any
    arrow_refs: list[Any] | None = None
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


def end_by_handover(plan: Any, final_snapshot: Any) -> bool:
    """Whether a job whose keys may hold partial states on several reducers
    (:func:`needs_final_merge`) brings them together by a hand-over at the end instead of
    the partitioned final merge: as its loop ends, each reducer takes the keys of its state
    that the final snapshot routes elsewhere out of it (a reducer that holds only keys it
    owns takes none), and the runtime hands them to their owners with the finalize calls
    it makes anyway (:class:`~dpa.engine.instructions.FinalizeReducers`). No call more than
    a job without a merge but that finalize round; the partitioned merge splits every
    reducer's state ``W`` ways and sends up to ``W - 1`` parts from each (a ring levelled by
    trims moves the keys of a few reducers to their ring successors).

    That needs a policy that names one owner per key under the final snapshot (one that
    moves keys: :attr:`~dpa.routing.policy.PolicySpec.moves_keys`, with
    :meth:`~dpa.routing.policy.PolicySpec.owners`; the partial states of a hot key that
    ``hybrid`` split over several reducers meet at its ring owner), and a job that
    finalizes (a per-group function's apply phase lists the groups instead: it keeps the
    merge).
    """
    policy = plan.policy
    if not policy.moves_keys or plan.applies_groups:
        return False
    return policy.owners(final_snapshot, np.empty(0, np.uint32)) is not None


def handover_by_slot(moves: Any) -> dict[int, tuple[Any, ...]]:
    """The end's hand-over (:class:`~dpa.engine.instructions.Finished` ``handover`` of
    every loop, in any order) by receiving slot: what each reducer's ``Finalize`` merges."""
    by_slot: dict[int, list[Any]] = {}
    for move in moves:
        by_slot.setdefault(move.dest, []).append(move.partial)
    return {slot: tuple(parts) for slot, parts in by_slot.items()}


def finalize_at_stop(plan: Any, merged: bool) -> bool:
    """Whether the reducers may finalize as their loops end (one round of calls fewer).

    Only when nothing reaches a reducer after its own loop ended, which may be before a
    peer's loop ends: no final merge (``merged``), no state following its key at the end
    (``migrate="state"``), no elastic slot handing its state over as it retires, and no
    apply phase of a per-group function to schedule.
    """
    return not merged and plan.migrate != "state" and not plan.active_reducers and not plan.applies_groups
