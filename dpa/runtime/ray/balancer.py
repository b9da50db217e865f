"""The balancer actor: carries out :class:`~dpa.engine.balancer.BalancerMachine`'s instructions on Ray.

Each call becomes an event for the machine; each instruction becomes a call (a published
snapshot to every member, a scale-out to the coordinator), a timer (the machine's
:class:`~dpa.engine.instructions.TickAt`), a metric or the answer to the call. Which
balancer a recovered run uses, when the balancer ticks and what it publishes are the
machine's decisions.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.balancer import BalancerMachine
from dpa.engine.plan import JobPlan
from dpa.runtime.ray.member import JobMember, describe, quiet_method
from dpa.runtime.ray.outbox import post
from dpa.runtime.ray.telemetry import metric


class BalancerActor(JobMember):
    """Thin shell over :class:`~dpa.engine.balancer.BalancerMachine` (run by a
    :class:`~dpa.runtime.ray.host.HostActor`, called through a :class:`~dpa.runtime.ray.host.MemberRef`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.machine: BalancerMachine | None = None
        self.t0 = time.monotonic()

    async def start_job(self, plan: JobPlan, snapshot: Any, handles: Any, job_id: str | None = None,
                        restart: op.Restart | None = None) -> Any:
        """Starts serving ``job_id`` (default ``plan.job_id``). ``restart``: the coordinator
        machine's :class:`~dpa.engine.instructions.Restart` of a job recovering from a
        failure, which says whether this balancer keeps its planner, event log and
        published snapshot or a new one resumes from the checkpoint's
        (:meth:`~dpa.engine.balancer.BalancerMachine.for_run`). Returns the snapshot the
        job's members start from.

        ``handles`` is ``(mappers, the job's reducers, coordinator)`` or :data:`PEERS_UNCHANGED`.
        """
        mappers, reducers, coordinator = self._peers(handles)
        machine = BalancerMachine.for_run(plan, snapshot, restart, self.machine)
        if machine is not self.machine:
            self.t0 = time.monotonic()  # (the machine's clock starts with it)
        self.machine = machine
        self.job_id = job_id or plan.job_id
        self.plan = plan
        self.targets = list(mappers) + list(reducers)
        self.coordinator_actor = coordinator
        self.due: asyncio.Queue[float | None] = asyncio.Queue()  # this run's ticks, for serve()
        self._execute(self.job_id, machine.handle())  # (the metrics of a new or kept balancer)
        return self._ask_snapshot()

    def _now(self) -> float:
        return time.monotonic() - self.t0

    def _ask_snapshot(self) -> Any:
        out = self.machine.handle(ev.SnapshotAsked())
        self._execute(self.job_id, out)
        return next(ins.value for ins in out if isinstance(ins, op.Reply))

    def _on_abort(self) -> None:
        self.due.put_nowait(None)

    # -- events in, instructions out ------------------------------------------------
    def _execute(self, job_id: str, instructions: list[Any]) -> list[op.ScaleOut]:
        """Carries out the machine's instructions; returns the scale-outs (carried out by
        :meth:`serve`, which awaits the coordinator)."""
        later: list[op.ScaleOut] = []
        for ins in instructions:
            if isinstance(ins, op.Publish):
                for target in self.targets:  # (one Ray call per process: see dpa.runtime.ray.outbox)
                    post(target, "update_ring", job_id, ins.snapshot)
            elif isinstance(ins, op.TickAt):
                asyncio.get_running_loop().call_later(max(0.0, ins.at - self._now()), self._tick_due,
                                                      self.due, ins.at)
            elif isinstance(ins, op.LogRebalances):
                self._log(ins)
            elif isinstance(ins, op.ScaleOut):
                later.append(ins)
            elif not isinstance(ins, op.AnswerForecast | op.BalancingResult | op.Reply):  # (the callers read them)
                raise TypeError(f"the Ray balancer cannot carry out {ins!r}")
        return later

    @staticmethod
    def _tick_due(due: asyncio.Queue, at: float) -> None:
        due.put_nowait(at)

    def _log(self, ins: op.LogRebalances) -> None:
        job = {"job_id": self.plan.job_id}
        for event in ins.events:
            metric("dpa_rebalances").inc(1, tags={**job, "policy": self.plan.policy.name, "action": event.action})
        metric("dpa_ring_version").set(ins.version, tags=job)
        if ins.active_reducers is not None:
            metric("dpa_reducers").set(ins.active_reducers, tags=job)

    @quiet_method
    async def report(self, job_id: str, reducer: int, queue_length: int, version: int, keys: Any = None,
                     backlog_s: float | None = None) -> None:
        if self._serving(job_id):
            self._execute(job_id, self.machine.handle(ev.QueueReported(reducer, queue_length, version, keys,
                                                                       backlog_s)))

    @quiet_method
    async def forecast(self, job_id: str, mapper: int, hashes: Any, counts: Any, total: int) -> Any:
        """A mapper's key counts of its first block (:meth:`~dpa.engine.balancer.BalancerMachine.forecast`):
        publishes what the policy makes of them; returns the snapshot to route under."""
        if not self._serving(job_id):
            return None
        out = self.machine.handle(ev.ForecastArrived(mapper, hashes, counts, total, self._now()))
        self._execute(job_id, out)
        return next(ins.snapshot for ins in out if isinstance(ins, op.AnswerForecast))

    async def snapshot(self, job_id: str) -> Any:
        return self._ask_snapshot() if self._serving(job_id) else None

    async def input_done(self, job_id: str) -> None:
        """Every input record is in a reducer's queue (:meth:`~dpa.engine.balancer.BalancerMachine.on_input_done`)."""
        if self._serving(job_id):
            self._execute(job_id, self.machine.handle(ev.InputDone()))

    async def serve(self, job_id: str) -> None:
        """Ticks the machine when its :class:`~dpa.engine.instructions.TickAt` comes, until
        the run stops; carries out the scale-outs a tick asks for in order."""
        if not self._serving(job_id):
            return
        self.task = asyncio.current_task()
        due = self.due  # this run's: the next start_job makes a new one
        while self._serving(job_id):
            if await due.get() is None or not self._serving(job_id):
                break
            todo = self._execute(job_id, self.machine.handle(ev.BalancerTick(self._now())))
            while todo:
                todo += await self._scale_out(job_id, todo.pop(0))

    async def _scale_out(self, job_id: str, instruction: op.ScaleOut) -> list[op.ScaleOut]:
        """Has the coordinator start the reducers, then gives them tokens (or logs why not)."""
        try:
            started, handles, why = await self.coordinator_actor.scale_out.remote(
                job_id, list(instruction.slots), self.plan, instruction.snapshot)
        except Exception as exc:  # (the coordinator is on the driver's node: a run ending)
            started, handles, why = [], [], describe(exc)
        self.targets.extend(handles)
        if not self._serving(job_id):
            return []
        return self._execute(job_id, self.machine.handle(ev.ScaledOut(self._now(), started, why)))

    async def stop(self, job_id: str) -> tuple[list[Any], Any, list[Any], list[Any]]:
        """Stops balancing; returns the event log, the final snapshot, the timeline and
        the scaling log."""
        self.due.put_nowait(None)
        out = self.machine.handle(ev.BalancerStopped(self._now()))
        self._execute(job_id, out)
        if self._serving(job_id):
            self.job_id, self.task = None, None  # reports that arrive later are dropped
        result = next(ins for ins in out if isinstance(ins, op.BalancingResult))
        return list(result.events), result.snapshot, list(result.timeline), list(result.scaling)
