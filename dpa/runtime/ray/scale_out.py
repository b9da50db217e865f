"""An elastic job's new reducers, started by the Ray coordinator when the balancer asks for
them (:class:`~dpa.engine.instructions.ScaleOut`) and its machine says which may start."""

from __future__ import annotations

import asyncio
from typing import Any

import ray

from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.plan import JobPlan
from dpa.runtime.ray.host import kill_member
from dpa.runtime.ray.member import await_ref, describe
from dpa.runtime.ray.members import loop_name
from dpa.runtime.ray.outbox import loops_per_process
from dpa.runtime.ray.telemetry import metric

#: How long a scale-out waits for its new reducers to start before it gives up.
SCALE_OUT_WAIT_S = 30.0


class ElasticReducers:
    """A job's scale-outs on the Ray coordinator: it carries out what the job's
    :class:`~dpa.engine.coordinator_machine.CoordinatorMachine` decides."""

    def __init__(self, job: Any) -> None:
        self.job = job  # the JobShell (dpa.runtime.ray.job)

    async def scale_out(self, run_id: str, slots: list[int], plan: JobPlan,
                        snapshot: Any) -> tuple[list[int], list[Any], str | None]:
        """Starts reducers in the free ``slots`` for run ``run_id`` (the balancer asks, see
        :class:`~dpa.engine.instructions.ScaleOut`) if the machine says so: each starts empty,
        and every member learns its handle before the balancer routes keys to it.

        Returns:
            ``(started slots, their handles, why the others did not start or None)``.
        """
        job, team = self.job, self.job.team
        answer = None
        async with job.scale_lock:  # (no checkpoint round meanwhile)
            free = float(ray.available_resources().get("CPU", 0.0))
            todo = job.machine.handle(ev.FromRun(run_id, (ev.ScaleOutRequested(list(slots), free),)))
            while todo:
                ins, *todo = todo
                if isinstance(ins, op.StartReducers):
                    event = await self._start_reducers(run_id, list(ins.slots), plan, snapshot, ins.refused)
                    todo += job.machine.handle(ev.FromRun(run_id, (event,)))
                elif isinstance(ins, op.ServeReducers):
                    for i in ins.slots:
                        team.answered.add(f"reducer-{i}")
                    for roles, ref in loops_per_process(run_id, [(f"reducer-{i}", team.reducers[i]) for i in ins.slots]):
                        job.tasks[asyncio.ensure_future(await_ref(ref))] = loop_name(team.pool_id, roles)
                    job.members_changed.set()
                    metric("dpa_reducers").set(ins.width, tags=job.tags)
                elif isinstance(ins, op.DropReducers):
                    for i in ins.slots:
                        if team.reducers[i] is not None and team.alone(f"reducer-{i}"):
                            kill_member(team.reducers[i])  # (its host of its own: see PoolMembers.create)
                            team.reducers[i] = None
                elif isinstance(ins, op.AnswerScaleOut):
                    answer = ins
                else:
                    job.do(ins)
        return list(answer.started), [team.reducers[i] for i in answer.started], answer.refused

    async def _start_reducers(self, run_id: str, slots: list[int], plan: JobPlan, snapshot: Any,
                              refused: str | None) -> Any:
        """Starts reducers in ``slots`` and gives every member their handles; the outcome as an
        event."""
        job, team = self.job, self.job.team
        me = ray.get_runtime_context().current_actor
        for i in slots:
            if team.reducers[i] is None:
                team.reducers[i] = team.create(f"reducer-{i}")
        fresh = [team.reducers[i] for i in slots]
        try:
            await asyncio.wait_for(asyncio.gather(*[await_ref(r.ping.remote()) for r in fresh]), SCALE_OUT_WAIT_S)
            await asyncio.gather(*[
                r.start_job.remote(plan, snapshot, team.peers_for(r, (team.reducers, team.balancer, me)), run_id,
                                   None, 0, job.machine.checkpoint.epoch) for r in fresh])
            others = [m for _, m in team.serving(job.job_slots)[1:]]
            await asyncio.gather(*[m.add_peers.remote(run_id, dict(zip(slots, fresh))) for m in others])
        except Exception as exc:  # (e.g. no node can place it): the job goes on at its width
            return ev.ScaleOutFailed(slots, f"the new reducers did not start within {SCALE_OUT_WAIT_S:.0f} s "
                                            f"({describe(exc)})")
        return ev.ScaleOutStarted(slots, refused)
