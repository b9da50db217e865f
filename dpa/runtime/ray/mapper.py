"""The mapper actor: carries out :class:`~dpa.engine.mapper_machine.MapperMachine`'s instructions on Ray.

It fetches the items the machine asks for, sends its pushes (answered once queued) and its
forecast, and passes on what it tells the coordinator; a finished block's end rides on the
next item's request when that request has not been answered yet.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.epochs import Rest
from dpa.engine.mapper_machine import MapperMachine
from dpa.engine.plan import JobPlan
from dpa.runtime.ray.blocks import fetch_block
from dpa.runtime.ray.member import (
    ActorFailure,
    JobMember,
    describe,
    hosted_member,
    quiet_method,
    ready,
)
from dpa.runtime.ray.outbox import call_tables, post
from dpa.runtime.ray.telemetry import metric

logger = logging.getLogger(__name__)


class MapperActor(JobMember):
    """A mapper on Ray: a :class:`~dpa.engine.mapper_machine.MapperMachine` and the calls that feed it
    (run by a :class:`~dpa.runtime.ray.host.HostActor`, called through a
    :class:`~dpa.runtime.ray.host.MemberRef`)."""

    def __init__(self, mapper_id: int, name: str) -> None:
        self.mapper_id = mapper_id
        self.name = name
        self.machine: MapperMachine | None = None
        self.first: list[Any] | None = None

    async def start_job(self, plan: JobPlan, snapshot: Any, peers: Any, job_id: str | None = None,
                        first: list[Any] | None = None) -> None:
        """Starts serving ``job_id`` (default ``plan.job_id``; a recovered job's run id).

        ``peers`` is ``(coordinator, reducers, balancer)`` or :data:`PEERS_UNCHANGED`.
        ``first``: the mapper's first item (``[item, epoch, token]``, as
        :meth:`~dpa.runtime.ray.coordinator.Coordinator.next_block` answers) when the driver
        starts the job while the coordinator's process is still starting: the mapper routes
        it without waiting for the coordinator or for the balancer's answer to its forecast.
        """
        coordinator, reducers, balancer = self._peers(peers)
        self.job_id = job_id or plan.job_id
        self.machine = MapperMachine(self.mapper_id, plan, snapshot, time.monotonic, await_forecast=first is None)
        self.first = first
        self.tags = {"job_id": plan.job_id, "mapper": str(self.mapper_id)}
        self.coordinator = coordinator
        self.reducers = list(reducers)  # (add_peers changes this job's copy)
        self.balancer = balancer

    @quiet_method
    async def update_ring(self, job_id: str, snapshot: Any) -> None:
        if self._serving(job_id):  # drop a finished job's late news
            self.machine.handle(ev.SnapshotArrived(snapshot))

    async def add_peers(self, job_id: str, handles: dict[int, Any]) -> None:
        """An elastic job started reducers in these slots (before any routing names them)."""
        if self._serving(job_id):
            for slot, handle in handles.items():
                self.reducers[slot] = handle

    async def run(self, job_id: str) -> int:
        """Runs the machine's loop: fetches the items it asks for, sends its pushes and
        forecast, and tells the coordinator what it reports; returns the records emitted."""
        if not self._serving(job_id):
            return 0
        self.task = asyncio.current_task()
        machine = self.machine
        coordinator, me = self.coordinator, self.mapper_id
        pending = None  # the item asked for
        done = None  # (epoch, emitted) of the block finished last, not told yet
        instructions = machine.handle(ev.MapperStarted())
        while instructions:
            ins = instructions.pop(0)
            event: Any = None
            if isinstance(ins, op.SendPushes):
                event = ev.PushesAnswered(await self._pushes(job_id, ins))
            elif isinstance(ins, op.RequestBlock) and self.first is not None:  # (the driver's)
                pending = asyncio.get_running_loop().create_future()
                pending.set_result(self.first)
                self.first = None
            elif isinstance(ins, op.RequestBlock):  # (it carries the last block's end along)
                pending, done = coordinator.next_block.remote(job_id, me, done), None
            elif isinstance(ins, op.AwaitBlock):
                item = await pending
                event = ev.NoMoreBlocks() if item is None else await self._block(item)
            elif isinstance(ins, op.BlockDone):
                done = (ins.epoch, ins.emitted)
                if not ready(pending):  # the next item is not here yet (a slow source): tell it now
                    coordinator.block_done.remote(job_id, me, *done)
                    done = None
                if ins.emitted:
                    metric("dpa_records_emitted").inc(ins.emitted, tags=self.tags)
            elif isinstance(ins, op.SendForecast) and not ins.wait:
                post(self.balancer, "forecast", job_id, me, ins.hashes, ins.counts, ins.total)
            elif isinstance(ins, op.SendForecast):
                try:
                    snapshot = await self.balancer.forecast.remote(job_id, me, ins.hashes, ins.counts, ins.total)
                except Exception as exc:  # a lost balancer is the coordinator's to notice and recover
                    logger.debug("mapper %d: no forecast (%s)", me, describe(exc))
                    snapshot = None
                event = ev.ForecastAnswered(snapshot)
            elif isinstance(ins, op.SplitBlock):
                event = ev.BlockSplit(await coordinator.split_block.remote(job_id, me, ins.epoch, ins.emitted, ins.rest,
                                                                        ins.token))
            elif isinstance(ins, op.MapperDone):
                await coordinator.mapper_done.remote(job_id, me, done, ins.first_routed)
            else:
                raise TypeError(f"the Ray mapper cannot carry out {ins!r}")
            if event is not None:
                try:
                    instructions += machine.handle(event)
                except Exception as exc:
                    raise ActorFailure(self.name, exc, getattr(exc, "key", None)) from exc
        self.job_id, self.task = None, None  # the job is over for this mapper: later news is dropped
        return machine.emitted

    async def _pushes(self, job_id: str, ins: op.SendPushes) -> list[Any]:
        """Sends one round of pushes and returns their answers, in order: a reducer of this
        process is called directly (its batch handed over as it is); the pushes to the
        reducers of another host go as one Ray call to that host, whose reducers take them
        at once, their batches as one Arrow table (:func:`~dpa.runtime.ray.outbox.call_tables`).
        A round to ``W`` reducers on ``H`` hosts is ``H`` calls and ``H`` tables, not ``W``."""
        answers: list[Any] = [None] * len(ins.pushes)
        local: list[tuple[int, Any]] = []
        remote: list[tuple[int, tuple[Any, str, tuple, Any, tuple]]] = []
        for i, p in enumerate(ins.pushes):
            ref = self.reducers[p.dest]
            reducer = hosted_member(ref)
            if reducer is None:  # (a host's batches travel as one table: call_tables)
                remote.append((i, (ref, "push", (job_id,), p.batch, (ins.version, False, ins.epoch))))
            else:
                local.append((i, type(reducer).push(reducer, job_id, p.batch, ins.version, False, ins.epoch)))
        done = await asyncio.gather(call_tables([call for _, call in remote]),
                                    *[coro for _, coro in local])
        for (i, _), answer in zip(remote, done[0]):
            answers[i] = answer
        for (i, _), answer in zip(local, done[1:]):
            answers[i] = answer
        return answers

    async def _block(self, item: list[Any]) -> ev.BlockArrived:
        """The block of an item the coordinator handed out: ``[item, epoch, token]``."""
        item, epoch, token = item
        try:
            if isinstance(item, Rest):
                return ev.BlockArrived(await item.table, epoch, token, prepared=True)
            block = await fetch_block(item)
            return ev.BlockArrived(block, epoch, token)
        except Exception as exc:
            raise ActorFailure(self.name, exc, getattr(exc, "key", None)) from exc
