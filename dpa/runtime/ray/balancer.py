"""The balancer actor: a thin shell over :class:`~dpa.engine.balancer.BalancerLogic`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from dpa.engine import events as ev
from dpa.engine.balancer import BalancerLogic
from dpa.engine.instructions import Publish, ScaleOut
from dpa.engine.plan import JobPlan
from dpa.runtime.ray.member import JobMember, describe, quiet_method
from dpa.runtime.ray.outbox import post
from dpa.runtime.ray.telemetry import metric


class BalancerActor(JobMember):
    """Thin shell over :class:`~dpa.engine.balancer.BalancerLogic` (run by a
    :class:`~dpa.runtime.ray.host.HostActor`, called through a :class:`~dpa.runtime.ray.host.MemberRef`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.logic: BalancerLogic | None = None

    async def start_job(self, plan: JobPlan, snapshot: Any, handles: Any, job_id: str | None = None,
                        resume: bool = False) -> Any:
        """Starts serving ``job_id`` (default ``plan.job_id``). With ``resume`` (a job
        recovering from a failure) a balancer that survived keeps its planner, event log
        and published snapshot; a new one continues from ``snapshot`` (the checkpoint's)
        if the policy's planner can. Returns the snapshot the job's members start from.

        ``handles`` is ``(mappers, the job's reducers, coordinator)`` or :data:`PEERS_UNCHANGED`.
        """
        mappers, reducers, coordinator = self._peers(handles)
        keep = resume and self.logic is not None and self.logic.plan.job_id == plan.job_id
        self.job_id = job_id or plan.job_id
        if not keep:
            self.logic = BalancerLogic(plan, snapshot, resume=resume)
            self.t0 = time.monotonic()
            self.exported = 0
        self.plan = plan
        self.targets = list(mappers) + list(reducers)
        self.coordinator = coordinator
        self.running = True
        self.fresh = asyncio.Event()
        if self.logic.rule is not None:
            metric("dpa_reducers").set(len(self.logic.active_slots), tags={"job_id": plan.job_id})
        return self.logic.snapshot

    def _on_abort(self) -> None:
        self.running = False
        self.fresh.set()

    @quiet_method
    async def report(self, job_id: str, reducer: int, queue_length: int, version: int, keys: Any = None,
                     backlog_s: float | None = None) -> None:
        if self._serving(job_id):
            self.logic.handle(ev.QueueReported(reducer, queue_length, version, keys, backlog_s))
            self.fresh.set()

    @quiet_method
    async def forecast(self, job_id: str, mapper: int, hashes: Any, counts: Any, total: int) -> Any:
        """A mapper's key counts of its first block (:meth:`~dpa.engine.balancer.BalancerLogic.forecast`):
        publishes what the policy makes of them; returns the snapshot to route under."""
        if not self._serving(job_id) or not self.running:
            return None
        for published in self.logic.handle(ev.ForecastArrived(mapper, hashes, counts, total,
                                                              time.monotonic() - self.t0)):
            self._publish(job_id, published)
        self._export_events()
        return self.logic.snapshot

    async def snapshot(self, job_id: str) -> Any:
        return self.logic.snapshot if self._serving(job_id) else None

    async def input_done(self, job_id: str) -> None:
        """Every input record is in a reducer's queue (:meth:`~dpa.engine.balancer.BalancerLogic.on_input_done`)."""
        if self._serving(job_id):
            self.logic.handle(ev.InputDone())

    def _export_events(self) -> None:
        job = {"job_id": self.plan.job_id}
        for event in self.logic.events[self.exported:]:
            metric("dpa_rebalances").inc(1, tags={**job, "policy": self.plan.policy.name, "action": event.action})
        self.exported = len(self.logic.events)
        metric("dpa_ring_version").set(self.logic.snapshot.version, tags=job)

    async def serve(self, job_id: str) -> None:
        if not self._serving(job_id):
            return
        self.task = asyncio.current_task()
        self._export_events()
        fresh = self.fresh  # this job's: the next job's start_job makes a new one
        while self.running and self._serving(job_id):
            await asyncio.sleep(self.plan.lb_interval_s)
            await fresh.wait()  # no new report: nothing to sample or decide on
            fresh.clear()
            # Stopped, or already serving the next job: this loop must not tick (and publish
            # under its own, stale job id) on the next job's logic.
            if not self.running or not self._serving(job_id):
                break
            todo = self.logic.handle(ev.BalancerTick(time.monotonic() - self.t0))
            self._export_events()
            while todo:
                instruction = todo.pop(0)
                if isinstance(instruction, ScaleOut):
                    todo += await self._scale_out(job_id, instruction)
                else:
                    self._publish(job_id, instruction)

    def _publish(self, job_id: str, published: Publish | None) -> None:
        """Exports new events; sends a published snapshot to every mapper and reducer."""
        self._export_events()
        if published is not None and self._serving(job_id):
            for target in self.targets:  # (one Ray call per process: see dpa.runtime.ray.outbox)
                post(target, "update_ring", job_id, published.snapshot)

    async def _scale_out(self, job_id: str, instruction: ScaleOut) -> Any:
        """Has the coordinator start the reducers, then gives them tokens (or logs why not)."""
        try:
            started, handles, why = await self.coordinator.scale_out.remote(
                job_id, list(instruction.slots), self.plan, self.logic.snapshot)
        except Exception as exc:  # (the coordinator is on the driver's node: a run ending)
            started, handles, why = [], [], describe(exc)
        self.targets.extend(handles)
        published = self.logic.handle(ev.ScaledOut(time.monotonic() - self.t0, started, why))
        metric("dpa_reducers").set(len(self.logic.active_slots), tags={"job_id": self.plan.job_id})
        return published

    async def stop(self, job_id: str) -> tuple[list[Any], Any, list[Any], list[Any]]:
        """Stops balancing; returns the event log, the final snapshot, the timeline and
        the scaling log."""
        self.running = False
        self.fresh.set()
        self._export_events()
        self.logic.handle(ev.BalancerStopped(time.monotonic() - self.t0))
        if self._serving(job_id):
            self.job_id, self.task = None, None  # reports that arrive later are dropped
        return self.logic.events, self.logic.snapshot, self.logic.timeline, self.logic.scaling

