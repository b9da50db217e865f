"""An elastic job's new reducers, started by the Ray coordinator when the balancer asks for
them (:class:`~dpa.engine.instructions.ScaleOut`) and its machine says which may start."""

from __future__ import annotations

import asyncio
from typing import Any

import ray

from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.plan import JobPlan
from dpa.runtime.ray.host import host_id, kill_member
from dpa.runtime.ray.member import await_ref, describe
from dpa.runtime.ray.telemetry import metric

#: How long a scale-out waits for its new reducers to start before it gives up.
SCALE_OUT_WAIT_S = 30.0


class ElasticReducers:
    """The coordinator's part of a scale-out (a base of
    :class:`~dpa.runtime.ray.coordinator.CoordinatorActor`): it carries out what the job's
    :class:`~dpa.engine.coordinator_machine.CoordinatorMachine` decides."""

    async def scale_out(self, run_id: str, slots: list[int], plan: JobPlan,
                        snapshot: Any) -> tuple[list[int], list[Any], str | None]:
        """Starts reducers in the free ``slots`` for the running job (the balancer asks, see
        :class:`~dpa.engine.instructions.ScaleOut`) if the machine says so: each starts empty,
        and every member learns its handle before the balancer routes keys to it.

        Returns:
            ``(started slots, their handles, why the others did not start or None)``.
        """
        if run_id != self.run_id:
            return [], [], "the run ended"
        free = float(ray.available_resources().get("CPU", 0.0))
        decided, *others = self.machine.handle(ev.ScaleOutRequested(list(slots), free))
        for ins in others:
            self._do(ins)
        if isinstance(decided, op.AnswerScaleOut):  # (none fits)
            return [], [], decided.refused
        async with self.scale_lock:  # (op.StartReducers)
            if run_id != self.run_id:
                return [], [], "the run ended"
            event = await self._start_reducers(run_id, list(decided.slots), plan, snapshot, decided.refused)
            if event is None:
                return [], [], "the run ended"
            answer = None
            for ins in self.machine.handle(event):
                if isinstance(ins, op.ServeReducers):
                    for i in ins.slots:
                        self.answered.add(f"reducer-{i}")
                        self.tasks[asyncio.ensure_future(await_ref(self.reducers[i].serve.remote(run_id)))] = \
                            f"dpa:{self.pool_id}:reducer-{i}"
                    self.members_changed.set()
                    metric("dpa_reducers").set(ins.width, tags=self.job_tags)
                elif isinstance(ins, op.DropReducers):
                    for i in ins.slots:
                        if self.reducers[i] is not None and self._alone(f"reducer-{i}"):
                            kill_member(self.reducers[i])  # (its host of its own: see PoolMembers._create)
                            self.reducers[i] = None
                elif isinstance(ins, op.AnswerScaleOut):
                    answer = ins
                else:
                    self._do(ins)
        return list(answer.started), [self.reducers[i] for i in answer.started], answer.refused

    def _alone(self, role: str) -> bool:
        """Whether member ``role`` has its host to itself (a host shared with other members
        stays up when a scale-out that wanted this one fails)."""
        members = dict(self._members())
        mine = host_id(members[role])
        return not any(host_id(m) == mine for other, m in members.items() if other != role and m is not None)

    async def _start_reducers(self, run_id: str, slots: list[int], plan: JobPlan, snapshot: Any,
                              refused: str | None) -> Any:
        """Starts reducers in ``slots`` and gives every member their handles; the outcome as an
        event, or None if the run ended meanwhile."""
        me = ray.get_runtime_context().current_actor
        for i in slots:
            if self.reducers[i] is None:
                self.reducers[i] = self._create(f"reducer-{i}")
        fresh = [self.reducers[i] for i in slots]
        try:
            await asyncio.wait_for(asyncio.gather(*[await_ref(r.ping.remote()) for r in fresh]), SCALE_OUT_WAIT_S)
            await asyncio.gather(*[
                r.start_job.remote(plan, snapshot, self._peers_for(r, (self.reducers, self.balancer, me)), run_id,
                                   None, 0, self.machine.checkpoint.epoch) for r in fresh])
            others = [m for _, m in self._job_members()[1:]]
            await asyncio.gather(*[m.add_peers.remote(run_id, dict(zip(slots, fresh))) for m in others])
        except Exception as exc:  # (e.g. no node can place it): the job goes on at its width
            return ev.ScaleOutFailed(slots, f"the new reducers did not start within {SCALE_OUT_WAIT_S:.0f} s "
                                            f"({describe(exc)})")
        if run_id != self.run_id:
            return None
        return ev.ScaleOutStarted(slots, refused)
