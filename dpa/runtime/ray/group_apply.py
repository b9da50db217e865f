"""The apply phase of a per-group function on Ray: the coordinator carries out the
:class:`~dpa.engine.group_schedule.GroupScheduler`'s instructions.

Every reducer packs its groups into units and puts them in the object store
(``ReducerActor.list_groups``); then one loop per worker asks the scheduler for work and
calls that worker's ``apply_unit`` with the unit's ref. A unit owned by another reducer is
fetched from the object store by Ray (its owner keeps working meanwhile).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.group_schedule import GroupScheduler, unit_target_rows
from dpa.runtime.ray.telemetry import metric

logger = logging.getLogger(__name__)


async def run_apply_phase(reducers: list[Any], run_id: str, total_rows: int,
                          tags: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """Runs the per-group function over every group the ``reducers`` hold.

    Returns:
        ``(keys the final merge combined, the scheduler's stats)``.
    """
    target = unit_target_rows(total_rows, len(reducers))
    listed = await asyncio.gather(*[r.list_groups.remote(run_id, target) for r in reducers])
    scheduler = GroupScheduler(range(len(reducers)))
    for w, (units, _) in enumerate(listed):
        scheduler.handle(ev.UnitsListed(w, [size for _, size in units]))

    async def work(w: int) -> None:
        rows, seconds = 0, 0.0
        while True:
            (ins,) = scheduler.handle(ev.WorkAsked(w, rows, seconds))
            if isinstance(ins, op.WorkerDone):
                return
            ref = listed[ins.owner][0][ins.index][0]
            if ins.owner != w:
                metric("dpa_group_units_moved").inc(1, tags=tags)
            rows, seconds = await reducers[w].apply_unit.remote(run_id, ref)

    loops = [asyncio.ensure_future(work(w)) for w in range(len(reducers))]
    try:
        await asyncio.gather(*loops)
    finally:  # a failed worker stops the others' loops (the run is recovered or failed)
        for loop in loops:
            loop.cancel()
    await asyncio.gather(*[r.finish_apply.remote(run_id) for r in reducers])
    return sum(merged for _, merged in listed), scheduler.stats()
