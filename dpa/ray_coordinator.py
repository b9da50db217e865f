"""The coordinator actor: owns one pool's members and runs its jobs, one at a time.

It creates the balancer, reducers and mappers (it owns them), replaces members that died
or hung between jobs, hands input blocks to mappers when they ask, decides termination by
conservation (:class:`~dpa.logic.CoordinatorLogic`), drives the partitioned final merge
and the finalize step, and fails the job, aborting it on every member, if any of them
raises or dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import Any

import ray

from dpa.errors import JobFailedError
from dpa.logic import CoordinatorLogic
from dpa.plan import JobPlan
from dpa.ray_actors import (
    NAMESPACE,
    ActorFailure,
    BalancerActor,
    MapperActor,
    ReducerActor,
    await_ref,
    describe,
    quiet_method,
)
from dpa.run_output import needs_final_merge
from dpa.telemetry import metric

logger = logging.getLogger(__name__)

#: How long the coordinator waits for a member that answered before to answer a ping again
#: before it replaces it as hung.
PING_TIMEOUT_S = 10.0
#: How long an abort waits for the members to acknowledge.
ABORT_TIMEOUT_S = 1.0


@ray.remote(num_cpus=0)
class CoordinatorActor:
    """Creates and owns one pool's actors; runs its jobs one at a time.

    Hands out input blocks, decides termination, fails the job (and aborts its members) if
    any of them raises or dies, and replaces members that died between jobs.
    """

    def __init__(self, pool_id: str, num_mappers: int, num_reducers: int) -> None:
        self.pool_id = pool_id
        self.num_mappers = num_mappers
        self.num_reducers = num_reducers
        self.generation = 0
        self.answered: set[str] = set()  # members that answered a ping at least once
        self.balancer = self._create("balancer")
        self.reducers = [self._create(f"reducer-{i}") for i in range(num_reducers)]
        self.mappers = [self._create(f"mapper-{i}") for i in range(num_mappers)]
        self.logic: CoordinatorLogic | None = None
        self.job_id: str | None = None
        self.failed: str | None = None
        self.job_task: asyncio.Task | None = None
        self.cond = asyncio.Condition()
        self.blocks: deque[Any] = deque()

    def _create(self, role: str) -> Any:
        """Starts the member ``role`` (``balancer``, ``reducer-3``, ``mapper-0``)."""
        name = f"dpa:{self.pool_id}:{role}"
        if self.generation:  # a replacement: the dead actor's name may not be released yet
            name = f"{name}.{self.generation}"
        opts = {"name": name, "namespace": NAMESPACE, "lifetime": None}
        if role == "balancer":
            return BalancerActor.options(**opts).remote(name)
        kind, index = role.split("-")
        cls = ReducerActor if kind == "reducer" else MapperActor
        return cls.options(**opts).remote(int(index), name)

    def _members(self) -> list[tuple[str, Any]]:
        return ([("balancer", self.balancer)] + [(f"reducer-{i}", r) for i, r in enumerate(self.reducers)]
                + [(f"mapper-{i}", m) for i, m in enumerate(self.mappers)])

    async def ping(self) -> bool:
        return True

    async def repair(self) -> tuple[Any, list[Any], list[Any], list[str]]:
        """Pings every member; replaces the dead or unresponsive ones (only those).

        Returns:
            ``(balancer, reducers, mappers, replaced roles)``.
        """
        members = self._members()
        # A member that never answered may still be starting (seconds on a busy machine):
        # wait for it (the driver's deadline bounds the wait). One that answered before and
        # is silent now is hung (e.g. in user code that never returns).
        results = await asyncio.gather(
            *[asyncio.wait_for(await_ref(actor.ping.remote()), PING_TIMEOUT_S if role in self.answered else None)
              for role, actor in members],
            return_exceptions=True)
        self.answered.update(role for (role, _), ok in zip(members, results) if ok is True)
        dead = [(role, actor, ok) for (role, actor), ok in zip(members, results) if ok is not True]
        if dead:
            self.generation += 1
            for role, actor, why in dead:
                hung = isinstance(why, asyncio.TimeoutError)
                state = f"unresponsive for {PING_TIMEOUT_S:.0f} s" if hung else f"dead ({type(why).__name__})"
                logger.warning("dpa pool %s: member %s is %s; replacing it", self.pool_id, role, state)
                with contextlib.suppress(Exception):
                    ray.kill(actor, no_restart=True)
                self.answered.discard(role)
                fresh = self._create(role)
                if role == "balancer":
                    self.balancer = fresh
                else:
                    kind, index = role.split("-")
                    (self.reducers if kind == "reducer" else self.mappers)[int(index)] = fresh
            fresh = dict(self._members())
            await asyncio.gather(*[await_ref(fresh[role].ping.remote()) for role, _, _ in dead])
            self.answered.update(role for role, _, _ in dead)
        return self.balancer, self.reducers, self.mappers, [role for role, _, _ in dead]

    # -- block hand-out (driver -> coordinator -> mappers) --------------------------
    @quiet_method
    async def offer(self, job_id: str, refs: list[Any]) -> bool:
        """Queues input block refs; waits while too many are pending. False once failed."""
        if job_id != self.job_id:
            return False
        async with self.cond:
            await self.cond.wait_for(lambda: len(self.blocks) < self.max_pending or self.failed is not None
                                     or job_id != self.job_id)
            if self.failed is not None or job_id != self.job_id:
                return False
            self.blocks.extend(refs)
            self.logic.blocks_offered += len(refs)
            self.cond.notify_all()
        return True

    async def input_done(self, job_id: str) -> None:
        if job_id != self.job_id:
            return
        async with self.cond:
            self.logic.input_done = True
            self.cond.notify_all()
        self._check()

    @quiet_method
    async def next_block(self, job_id: str, mapper: int) -> list[Any] | None:
        if job_id != self.job_id:
            return None
        async with self.cond:
            await self.cond.wait_for(lambda: self.blocks or self.logic.input_done or self.failed is not None
                                     or job_id != self.job_id)
            if self.failed is not None or job_id != self.job_id or not self.blocks:
                return None
            ref = self.blocks.popleft()
            self.logic.on_block_taken(mapper)
            if self.logic.input_done:
                taken = sum(self.logic.blocks_per_mapper)
                metric("dpa_job_progress").set(taken / max(1, taken + len(self.blocks)), tags=self.job_tags)
            self.cond.notify_all()
            return [ref]  # a (block ref, row slice or None) pair, wrapped so Ray does not resolve it

    async def mapper_done(self, job_id: str, mapper: int, emitted: int) -> None:
        if job_id == self.job_id:
            self.logic.on_mapper_done(mapper, emitted)
            self._check()

    @quiet_method
    async def processed_total(self) -> int:
        """Records processed by all reducers so far (the driver's progress callback)."""
        return sum(self.logic.processed) if self.logic is not None else 0

    @quiet_method
    async def progress(self, job_id: str, reducer: int, processed: int) -> None:
        if self.logic is not None and job_id == self.job_id:
            self.logic.on_progress(reducer, processed)
            metric("dpa_job_records_processed").set(sum(self.logic.processed), tags=self.job_tags)
            self._check()

    def _check(self) -> None:
        if self.logic.complete():
            self.done.set()

    # -- the job --------------------------------------------------------------------
    async def prepare_job(self, plan: JobPlan, max_pending: int) -> tuple[Any, list[Any], list[Any], list[str]]:
        """Repairs the pool and resets the per-job state; the driver waits for it before
        offering blocks (async actor calls do not run in submission order, so an ``offer``
        sent right after ``run_job`` could otherwise run first).

        Returns:
            What :meth:`repair` returns.
        """
        handles = await self.repair()
        async with self.cond:
            self.job_id = plan.job_id
            self.logic = CoordinatorLogic(plan.num_mappers, plan.num_reducers)
            self.job_tags = {"job_id": plan.job_id}
            metric("dpa_job_progress").set(0.0, tags=self.job_tags)
            self.blocks = deque()
            self.done = asyncio.Event()
            self.failed = None
            self.max_pending = max_pending
            self.job_task = None
            self.cond.notify_all()
        return handles

    async def run_job(self, plan: JobPlan, snapshot: Any) -> dict[str, Any]:
        """Runs the prepared job to its end; raises :class:`JobFailedError` if it fails."""
        job_id = plan.job_id
        if job_id != self.job_id:
            raise JobFailedError(f"job {job_id} was cancelled before it started")
        self.job_task = asyncio.current_task()
        me = ray.get_runtime_context().current_actor
        tasks: dict[asyncio.Future, str] = {}
        try:
            await asyncio.gather(
                self.balancer.start_job.remote(plan, snapshot, self.mappers, self.reducers),
                *[r.start_job.remote(plan, snapshot, self.reducers, self.balancer, me) for r in self.reducers],
                *[m.start_job.remote(plan, snapshot, me, self.reducers) for m in self.mappers],
            )
            for role, actor in self._members():
                method = actor.run if role.startswith("mapper") else actor.serve
                tasks[asyncio.ensure_future(await_ref(method.remote(job_id)))] = f"dpa:{self.pool_id}:{role}"
            done_waiter = asyncio.ensure_future(self.done.wait())
            pending = set(tasks) | {done_waiter}
            while not self.done.is_set():
                finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for fut in finished:
                    if fut is not done_waiter and fut.exception() is not None:
                        raise self._fail(tasks[fut], fut.exception())
            await asyncio.gather(*[r.stop.remote(job_id) for r in self.reducers])
            counters = await asyncio.gather(*[t for t, name in tasks.items() if "reducer" in name])
            taken = sum(self.logic.blocks_per_mapper)
            if taken != self.logic.blocks_offered:  # conservation of input blocks: never lose one silently
                raise RuntimeError(f"{self.logic.blocks_offered} input blocks offered but {taken} taken by mappers")
            metric("dpa_job_progress").set(1.0, tags=self.job_tags)
            events, final, timeline = await self.balancer.stop.remote(job_id)
            merged = needs_final_merge(plan.policy, snapshot, final)
            if merged:
                await asyncio.gather(*[r.exchange.remote(job_id) for r in self.reducers])
            await asyncio.gather(*[r.finalize.remote(job_id) for r in self.reducers])
        except asyncio.CancelledError:
            await self._abort_members(job_id, tasks)
            raise
        except JobFailedError:
            await self._abort_members(job_id, tasks)
            raise
        except Exception as exc:
            error = self._fail("coordinator", exc)
            await self._abort_members(job_id, tasks)
            raise error from None
        finally:
            async with self.cond:
                self.cond.notify_all()
        self.job_id = None  # done: late progress reports of this job are dropped
        return {
            "processed": [c["processed"] for c in counters],
            "forwarded": [c["forwarded"] for c in counters],
            "peak_queue": [c["peak_queue"] for c in counters],
            "emitted": list(self.logic.emitted),
            "blocks_per_mapper": list(self.logic.blocks_per_mapper),
            "events": events,
            "timeline": timeline,
            "final_snapshot": final,
            "merged": merged,
        }

    async def cancel_job(self, job_id: str, reason: str) -> None:
        """Fails ``job_id`` from outside (the driver's timeout, a broken source) and aborts it."""
        if job_id != self.job_id:
            return
        self.failed = self.failed or reason
        async with self.cond:
            self.cond.notify_all()
        task = self.job_task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(task), ABORT_TIMEOUT_S * 2)
        else:
            await self._abort_members(job_id, {})

    async def _abort_members(self, job_id: str, tasks: dict[asyncio.Future, str]) -> None:
        """Stops every member's work on ``job_id`` (bounded wait) and forgets the job."""
        self.failed = self.failed or "aborted"
        async with self.cond:
            self.cond.notify_all()
        for fut in tasks:
            fut.cancel()
        calls = [asyncio.ensure_future(await_ref(actor.abort.remote(job_id))) for _, actor in self._members()]
        if calls:
            await asyncio.wait(calls, timeout=ABORT_TIMEOUT_S)
        for call in calls:
            if not call.done():
                call.cancel()
            elif not call.cancelled():
                call.exception()  # retrieved: a dead member is repaired before the next job
        self.job_id = None

    def _fail(self, actor: str, exc: BaseException) -> JobFailedError:
        cause = getattr(exc, "cause", exc)
        if isinstance(cause, ActorFailure):
            actor, message, key = cause.actor, str(cause), cause.key
        else:
            message, key = f"{actor}: {describe(exc)}", None
        self.failed = message
        where = f" while processing key {key!r}" if key is not None else ""
        return JobFailedError(f"dpa job failed in {message}{where}", actor=actor, key=key)
