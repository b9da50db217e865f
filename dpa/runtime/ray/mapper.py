"""The mapper actor: a thin shell over :class:`~dpa.engine.mapper.MapperLogic`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import ray

from dpa.engine.epochs import Rest
from dpa.engine.flow import PUSH_KEEP
from dpa.engine.mapper import MapperLogic
from dpa.engine.plan import JobPlan
from dpa.runtime.ray.member import ActorFailure, JobMember, as_table, describe, quiet_method, ready
from dpa.runtime.ray.telemetry import metric

logger = logging.getLogger(__name__)


@ray.remote(num_cpus=0)
class MapperActor(JobMember):
    """Thin shell over :class:`~dpa.engine.mapper.MapperLogic`."""

    def __init__(self, mapper_id: int, name: str) -> None:
        self.mapper_id = mapper_id
        self.name = name
        self.logic: MapperLogic | None = None
        self._start_warm_up()

    async def start_job(self, plan: JobPlan, snapshot: Any, peers: Any, job_id: str | None = None) -> None:
        """Starts serving ``job_id`` (default ``plan.job_id``; a recovered job's run id).

        ``peers`` is ``(coordinator, reducers, balancer)`` or :data:`PEERS_UNCHANGED`.
        """
        coordinator, reducers, balancer = self._peers(peers)
        self.job_id = job_id or plan.job_id
        self.logic = MapperLogic(self.mapper_id, plan, snapshot)
        self.tags = {"job_id": plan.job_id, "mapper": str(self.mapper_id)}
        self.coordinator = coordinator
        self.reducers = list(reducers)  # (add_peers changes this job's copy)
        self.balancer = balancer

    @quiet_method
    async def update_ring(self, job_id: str, snapshot: Any) -> None:
        if self._serving(job_id):  # drop a finished job's late news
            self.logic.on_snapshot(snapshot)

    async def add_peers(self, job_id: str, handles: dict[int, Any]) -> None:
        """An elastic job started reducers in these slots (before any routing names them)."""
        if self._serving(job_id):
            for slot, handle in handles.items():
                self.reducers[slot] = handle

    async def run(self, job_id: str) -> int:
        if not self._serving(job_id):
            return 0
        self.task = asyncio.current_task()
        logic = self.logic
        interval = logic.plan.checkpoint_interval_s
        pending = self.coordinator.next_block.remote(job_id, self.mapper_id)
        done = None  # (epoch, emitted) of the block finished last, not told yet
        while True:
            item = await pending
            if item is None:
                break
            # prefetch, telling the coordinator the last block's end on the way
            pending = self.coordinator.next_block.remote(job_id, self.mapper_id, done)
            done = None
            item, epoch, token = item
            try:
                before = logic.emitted
                if isinstance(item, Rest):
                    logic.start_block(await item.table, prepared=True)
                else:
                    ref, row_slice = item
                    block = as_table(await ref)
                    if row_slice is not None:
                        block = block.slice(row_slice[0], row_slice[1] - row_slice[0])
                    logic.start_block(block)
            except Exception as exc:
                raise ActorFailure(self.name, exc, getattr(exc, "key", None)) from exc
            forecast = logic.take_forecast()
            if forecast is not None and self.balancer is not None:
                # The first block's key counts: its first push goes out under what the
                # balancer makes of them (a key hot from the start is split already).
                try:
                    snapshot = await self.balancer.forecast.remote(job_id, self.mapper_id, *forecast)
                except Exception as exc:  # a lost balancer is the coordinator's to notice and recover
                    logger.debug("mapper %d: no forecast (%s)", self.mapper_id, describe(exc))
                    snapshot = None
                if snapshot is not None:
                    logic.on_snapshot(snapshot)
            since = time.monotonic()
            while logic.routing:  # push by push, each under the newest ring (update_ring runs between)
                if interval > 0 and time.monotonic() - since >= interval:
                    # The epoch's time is up: the rest of the block becomes an item of its
                    # own, so that what was pushed can be checkpointed (dpa.engine.epochs).
                    rest, records = logic.rest()
                    split = await self.coordinator.split_block.remote(
                        job_id, self.mapper_id, epoch, logic.emitted - before - records, rest, token)
                    if split is None:  # the run is over
                        break
                    (epoch, token), before, since = split, logic.emitted - records, time.monotonic()
                routed = logic.next_pushes()
                version = logic.snapshot.version
                answers = await asyncio.gather(*[self.reducers[r].push.remote(job_id, b, version, False, epoch)
                                                 for r, b in routed])
                logic.on_pushed(max((outcome for outcome, _ in answers), default=PUSH_KEEP),
                                {r: capacity for (r, _), (_, capacity) in zip(routed, answers)})
            # Every record of the block is in a reducer's queue now: the coordinator may
            # count the block's epoch as mapped (dpa.engine.epochs). If the next item is here,
            # the request for the one after tells it; else (a slow source) a call now.
            done = (epoch, logic.emitted - before)
            if not ready(pending):
                self.coordinator.block_done.remote(job_id, self.mapper_id, *done)
                done = None
            if logic.emitted > before:
                metric("dpa_records_emitted").inc(logic.emitted - before, tags=self.tags)
        await self.coordinator.mapper_done.remote(job_id, self.mapper_id, done, logic.first_routed)
        self.job_id, self.task = None, None  # the job is over for this mapper: later news is dropped
        return logic.emitted


