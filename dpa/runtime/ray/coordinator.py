"""The coordinator actor: owns one pool's members and runs its jobs, one at a time.

It runs the pool's balancer in its own process (so a lost host never takes the routing
and its planner's history with it), owns the reducers and mappers, replaces members that
died or hung between jobs, and carries out what the job's
:class:`~dpa.engine.coordinator_machine.CoordinatorMachine` decides: it hands input blocks to
mappers when they ask, runs checkpoint rounds, starts an elastic job's new reducers, ends the
job (balancer, reducers, the partitioned final merge, finalize), and fails the job, aborting
it on every member, if any of them raises. Waiting (for members' answers, for a lock, for a
member to start) is its own; every protocol decision is the machine's. A new pool's first
job is started by the driver while this process starts (:func:`~dpa.runtime.ray.driver.open_job`):
:meth:`Coordinator.run_job` then takes over the machine and the members' loops, and the
members' calls that came first wait until it has (:meth:`Coordinator._until_opened`).

It is composed of objects: the pool's members and their repair
(:class:`~dpa.runtime.ray.members.PoolMembers`), the current job
(:class:`~dpa.runtime.ray.job.JobShell`: the machine, the answers callers wait for, the job's
checkpoint rounds and scale-outs), and the calls that reach the balancer it runs
(:class:`~dpa.runtime.ray.host.MemberHost`, its one base).

Fault recovery (:mod:`dpa.engine.epochs`): it hands blocks out in epochs, keeps the refs of the
blocks after the last checkpoint, and stores each checkpoint's reducer states in its own
object store. When a member dies (or its node, or an object it needed) the job is not
failed: the members' loops are stopped, the dead ones replaced, every reducer restarts
from the checkpoint and the blocks after it are handed out again, as a new *run* of the
job (``<job id>.<n>``, named by the machine: members drop the messages of an earlier run,
and so does the machine). Errors raised by user code still fail the job at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import ray

from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.coordinator_machine import CoordinatorMachine
from dpa.engine.epochs import Rest
from dpa.engine.output import handover_by_slot
from dpa.engine.plan import JobPlan
from dpa.errors import JobFailedError
from dpa.runtime.ray import host
from dpa.runtime.ray.group_apply import run_apply_phase
from dpa.runtime.ray.host import MemberHost, MemberRef, build_member
from dpa.runtime.ray.job import JobShell, raise_failure
from dpa.runtime.ray.member import (
    ActorFailure,
    await_ref,
    describe,
    quiet_method,
    retrieved,
)
from dpa.runtime.ray.members import (
    Members,
    PoolMembers,
    RunLost,
    loop_name,
    member_lost,
    member_starts,
    start_members,
)
from dpa.runtime.ray.outbox import call_per_process, loops_per_process
from dpa.runtime.ray.telemetry import metric

logger = logging.getLogger(__name__)


#: How long an abort waits for the members to acknowledge.
ABORT_TIMEOUT_S = 1.0


def _finished(mapper: int, done: tuple[int, int] | None) -> tuple[Any, ...]:
    """The block a mapper's call says it finished (``(epoch, emitted)``), as an event."""
    return () if done is None else (ev.BlockFinished(mapper, *done),)


class Coordinator(MemberHost):
    """Holds one pool's members (the reducers' and mappers' hosts started by the driver with
    it, or by itself when ``members`` is not given; replacements and an elastic job's new
    reducers it starts itself) and runs the balancer itself; runs the pool's jobs one at a time.

    Hands out input blocks, ends the job, fails it (and aborts its members) if any of them
    raises or dies, and replaces members that died between jobs, as the job's machine says.
    """

    def __init__(self, pool_id: str, num_mappers: int, num_reducers: int, initial_reducers: int | None = None,
                 reducer_num_cpus: float = 0.0, members: Members | None = None) -> None:
        self.pool_id = pool_id
        self.reducer_num_cpus = float(reducer_num_cpus)
        if members is None:
            members = start_members(pool_id, num_mappers, num_reducers, initial_reducers, reducer_num_cpus)
        reducers, mappers = members
        # The balancer runs here (MemberHost): a lost host never takes its routing with it.
        self.members = {"balancer": build_member("balancer", f"dpa:{pool_id}:balancer")}
        self.team = PoolMembers(pool_id, reducers, mappers, MemberRef(host.own_handle(), "balancer"),
                                reducer_num_cpus, frozenset(self.members))
        self.job: JobShell | None = None  # the current (or last) job
        self.job_task: asyncio.Task | None = None
        # Set once the pool's first job is known here: until then the calls of members the
        # driver started early (see run_job's ``opening``) wait for it.
        self.opened = asyncio.Event()

    @property
    def job_id(self) -> str | None:
        """The job this coordinator serves (None between jobs)."""
        return None if self.job is None else self.job.machine.serving

    async def _until_opened(self) -> None:
        """Waits until the pool's first job is known here (at once from then on)."""
        if not self.opened.is_set():
            await self.opened.wait()

    async def _invoke(self, role: str, method: str, args: tuple) -> Any:
        """A call to the balancer this process runs: a forecast sent while the pool starts
        waits for the job, as the coordinator's own methods do."""
        await self._until_opened()
        return await super()._invoke(role, method, args)

    async def ping(self) -> bool:
        return True

    # -- block hand-out (driver -> coordinator -> mappers) --------------------------
    @quiet_method
    async def offer(self, job_id: str, refs: list[Any]) -> bool:
        """Queues input block refs; waits while the machine holds the offer back
        (back-pressure). False once the job failed (or is not ``job_id``)."""
        await self._until_opened()
        job = self.job
        offer, answer = job.expect(job.offers)
        job.handle(ev.BlocksOffered(list(refs), offer, job_id))
        return await answer

    async def input_done(self, job_id: str) -> None:
        await self._until_opened()
        self.job.handle(ev.InputExhausted(job_id), ev.Tick())

    @quiet_method
    async def next_block(self, run_id: str, mapper: int, done: tuple[int, int] | None = None) -> list[Any] | None:
        """The next item for ``mapper``: ``[item, epoch, token]``, the item a ``(block ref,
        row slice or None)`` or a :class:`~dpa.engine.epochs.Rest` (wrapped so Ray does not resolve
        the ref); None when there is none (or the run ended).

        ``done`` is ``(epoch, emitted)`` of a block the mapper finished, as
        :meth:`block_done` takes it (which saves a call per block).
        """
        await self._until_opened()
        job = self.job
        request, answer = job.expect(job.waiters)
        job.handle(ev.FromRun(run_id, (*_finished(mapper, done), ev.Tick(), ev.BlockWanted(mapper, request))))
        return await answer

    @quiet_method
    async def block_done(self, run_id: str, mapper: int, epoch: int, emitted: int) -> None:
        """``mapper`` pushed every record of a block of ``epoch``."""
        await self._until_opened()
        self.job.handle(ev.FromRun(run_id, (ev.BlockFinished(mapper, epoch, emitted), ev.Tick())))

    @quiet_method
    async def split_block(self, run_id: str, mapper: int, epoch: int, emitted: int, rest: Any,
                          parent: int) -> tuple[int, int] | None:
        """``mapper`` pushed ``emitted`` records of item ``parent`` (of ``epoch``) and routes
        the ``rest`` (a table) in a new item, which this actor stores for replay; returns the
        rest's ``(epoch, token)``, or None if the run ended."""
        await self._until_opened()
        job = self.job
        request, answer = job.expect(job.waiters)
        rest = Rest(ray.put(rest))  # (owned here: it outlives the mapper)
        job.handle(ev.FromRun(run_id, (ev.BlockCut(mapper, epoch, emitted, rest, parent, request), ev.Tick())))
        return await answer

    async def mapper_done(self, run_id: str, mapper: int, done: tuple[int, int] | None = None,
                          first_routed: int | None = None) -> None:
        """``mapper`` routed all its items; ``done`` as :meth:`next_block` takes it;
        ``first_routed``: the snapshot version of its first push (None: it pushed nothing)."""
        await self._until_opened()
        self.job.handle(ev.FromRun(run_id, (*_finished(mapper, done), ev.MapperFinished(mapper, first_routed),
                                            ev.Tick())))

    @quiet_method
    async def processed_total(self) -> int:
        """Records processed by all reducers so far (the driver's progress callback)."""
        return 0 if self.job is None else self.job.machine.processed

    @quiet_method
    async def progress(self, run_id: str, reducer: int, processed: int) -> None:
        await self._until_opened()
        job = self.job
        job.handle(ev.FromRun(run_id, (ev.ProgressReported(reducer, processed), ev.Tick())))
        metric("dpa_job_records_processed").set(job.machine.processed, tags=job.tags)

    async def scale_out(self, run_id: str, slots: list[int], plan: JobPlan,
                        snapshot: Any) -> tuple[list[int], list[Any], str | None]:
        """Starts reducers in the free ``slots`` for the running job (the balancer asks):
        :meth:`~dpa.runtime.ray.scale_out.ElasticReducers.scale_out`."""
        return await self.job.elastic.scale_out(run_id, slots, plan, snapshot)

    # -- the job --------------------------------------------------------------------
    async def prepare_job(self, plan: JobPlan, max_pending: int,
                          known: tuple | None = None) -> tuple[Any, list[Any], list[Any], list[str]]:
        """Repairs the pool and resets the per-job state; the driver waits for it before
        offering blocks (async actor calls do not run in submission order, so an ``offer``
        sent right after ``run_job`` could otherwise run first).

        ``max_pending``: the offers the machine takes at once (it holds back later ones).

        Returns:
            What :meth:`~dpa.runtime.ray.members.PoolMembers.repair` returns; the handles are
            None if they are the driver's ``known`` ones (:meth:`~dpa.runtime.ray.pool.Pool.members_key`).
        """
        team = self.team
        first = plan.active_reducers or plan.num_reducers
        for i in range(first):
            if team.reducers[i] is None:
                team.reducers[i] = team.create(f"reducer-{i}")
        *_, replaced = await team.repair()
        self._take_job(CoordinatorMachine(plan, time.monotonic, range(first), self.reducer_num_cpus,
                                          max_pending=max_pending))
        self.opened.set()
        return (*team.for_driver(known), replaced)

    def _take_job(self, machine: CoordinatorMachine) -> None:
        """Makes the job ``machine`` runs the current job."""
        self.job = JobShell(machine, self.team)
        self.job_task = None

    async def run_job(self, plan: JobPlan, snapshot: Any, known: tuple | None = None,
                      opening: tuple[CoordinatorMachine, list[tuple[str, Any]]] | None = None) -> dict[str, Any]:
        """Runs the prepared job to its end; raises :class:`JobFailedError` if it fails.

        The summary's ``handles`` are the members' (None unless a recovery changed the
        driver's ``known`` ones, as :meth:`prepare_job`) and the replaced roles.

        A run that loses a member is recovered (up to ``plan.max_recoveries`` times): see
        the module docstring.

        ``opening``: a new pool's first job, which the driver started while this process
        started (:func:`~dpa.runtime.ray.driver.open_job`), instead of :meth:`prepare_job`:
        ``(machine, loops)``, the job's machine after its first hand-out and ``(roles, ref)``
        of the call running the reducers' and mappers' loops in each host
        (:func:`~dpa.runtime.ray.outbox.loops_per_process`; in a list, so that Ray passes the
        refs on unresolved).
        """
        loops = None
        if opening is not None:
            self._take_job(opening[0])
            loops = opening[1]
        job = self.job
        machine = job.machine
        raise_failure(machine.handle(ev.RunJob(plan.job_id)))  # (cancelled before it started)
        self.job_task = asyncio.current_task()
        started = self.job_started = time.monotonic()
        if opening is None:
            machine.handle(ev.JobStarted(snapshot))
        tasks: dict[asyncio.Future, str] = {}
        run_id, resume = machine.run_id, None
        try:
            while True:
                tasks = {}
                try:
                    summary = await self._run(plan, snapshot, run_id, tasks, resume, loops)
                    break
                except RunLost as exc:
                    lost = exc
                loops = None  # (a recovered run starts its members' loops itself)
                job.handle(ev.MemberLost(time.monotonic() - started, str(lost), lost.actor))
                # The member whose call failed first is often not the dead one (a mapper
                # pushing to a dead reducer): the repair finds out who died.
                lost_nodes = await self._recover(run_id, tasks)
                for ins in raise_failure(machine.handle(ev.MembersReplaced(
                        sorted(lost_nodes), sorted({n for n in lost_nodes.values() if n})))):
                    snapshot, run_id, resume = ins.balancer_snapshot, ins.run_id, ins  # (op.Restart: the balancer obeys it)
                job.done.clear()
                metric("dpa_recoveries").inc(1, tags=job.tags)
        except asyncio.CancelledError:
            await self._abort_members(tasks)
            raise
        except JobFailedError:
            await self._abort_members(tasks)
            raise
        except Exception as exc:
            error = self._fail("coordinator", exc)
            await self._abort_members(tasks)
            raise error from None
        finally:
            job.handle(ev.JobClosed())  # (the input blocks and checkpoints it kept can go)
        return {**summary, "recoveries": machine.recoveries, "checkpoints": machine.checkpoints,
                "run_id": run_id, "handles": (*self.team.for_driver(known), []),
                "job_reducers": job.reducers}

    async def _run(self, plan: JobPlan, snapshot: Any, run_id: str, tasks: dict[asyncio.Future, str],
                   resume: op.Restart | None, loops: list[tuple[str, Any]] | None = None) -> dict[str, Any]:
        """One run of the job, from the last checkpoint to the end; raises :class:`RunLost`
        if a member, a node or an object is lost on the way. ``loops``: the reducers' and
        mappers' loops the driver started (see :meth:`run_job`); only the balancer is
        started here then."""
        job, team = self.job, self.team
        me = ray.get_runtime_context().current_actor
        job.member_run = run_id
        balancer_peers = team.peers_for(team.balancer, (team.mappers, job.reducers, me))
        if loops is not None:  # (the balancer runs here: started before any call reaches it)
            await MemberHost._invoke(self, "balancer", "start_job", (plan, snapshot, balancer_peers, run_id, None))
            team.peers_sent.clear()  # (the driver sent the others theirs)
            self.opened.set()  # (the calls of the members the driver started come in now)
            asyncio.ensure_future(team.note_members()).add_done_callback(retrieved)
        else:
            await self._start_run(plan, snapshot, run_id, resume, balancer_peers, me)
        job.tasks = tasks  # (a scale-out adds its reducers' loops)
        job.members_changed = asyncio.Event()
        job.checkpoint_error = None
        started = {role for roles, _ in loops or () for role in roles}
        # One call per process runs its members' loops (the balancer's: this process's).
        for roles, ref in [*(loops or ()), *loops_per_process(run_id, [
                (role, actor) for role, actor in team.serving(job.job_slots) if role not in started])]:
            tasks[asyncio.ensure_future(await_ref(ref))] = loop_name(self.pool_id, roles)
        done_waiter = asyncio.ensure_future(job.done.wait())
        seen: set[asyncio.Future] = set()  # member loops that ended well
        while not job.done.is_set():
            changed = asyncio.ensure_future(job.members_changed.wait())
            finished, _ = await asyncio.wait((set(tasks) - seen) | {done_waiter, changed},
                                             return_when=asyncio.FIRST_COMPLETED)
            changed.cancel()
            job.members_changed.clear()
            seen |= finished
            for fut in finished:
                if fut in tasks and fut.exception() is not None:
                    if member_lost(fut.exception()):
                        raise RunLost(tasks[fut], fut.exception())
                    raise self._fail(tasks[fut], fut.exception())
            if job.checkpoint_error is not None:
                raise self._fail(f"dpa:{self.pool_id}:checkpoint", job.checkpoint_error)
        if job.checkpoint_error is not None:
            raise self._fail(f"dpa:{self.pool_id}:checkpoint", job.checkpoint_error)
        for fut in set(tasks) - seen:  # (a loop still returning when its host is killed: not an error)
            fut.add_done_callback(retrieved)
        try:
            # The balancer stops first: the reducers end on its final routing (and hand
            # over the states it moves) with no newer one on the way.
            events, final, timeline, scaling = await team.balancer.stop.remote(run_id)
            end = await self._end(run_id, tasks, job.machine.handle(ev.BalancingEnded(final)))
        except Exception as exc:
            if member_lost(exc):
                raise RunLost("coordinator", exc) from exc
            raise
        counters = end["counters"]
        per_slot = {c["reducer"]: c for c in counters}
        width = job.machine.result_width(per_slot)
        zero = {"processed": 0, "forwarded": 0, "peak_queue": 0}
        counters_by_slot = [per_slot.get(i, zero) for i in range(width)]
        return {
            "processed": [c["processed"] for c in counters_by_slot],
            "forwarded": [c["forwarded"] for c in counters_by_slot],
            "peak_queue": [c["peak_queue"] for c in counters_by_slot],
            "emitted": job.machine.emitted,
            "blocks_per_mapper": job.machine.blocks_per_mapper,
            "events": events,
            "timeline": timeline,
            "final_snapshot": final,
            "merged": end["merged"],
            "merged_keys": sum(end["merged_keys"]),
            "state_moves": sum(c["keys_moved"] for c in counters),
            "scaling": scaling,
            "group_apply": end["applied"],
        }

    async def _start_run(self, plan: JobPlan, snapshot: Any, run_id: str, resume: op.Restart | None, balancer_peers: Any,
                         me: Any) -> None:
        """Starts the balancer (first, with the checkpoint's snapshot, for a recovered run),
        the job's reducers and the mappers on run ``run_id``, and the run itself."""
        job, team = self.job, self.team
        try:
            if resume:  # a recovered run starts from the snapshot the balancer (kept or new) has
                snapshot = await team.balancer.start_job.remote(plan, snapshot, balancer_peers, run_id, resume)
            await asyncio.gather(
                *([] if resume else [team.balancer.start_job.remote(plan, snapshot, balancer_peers, run_id, None)]),
                *member_starts(plan, snapshot, run_id, job.machine.checkpoint, job.job_slots, team.reducers,
                               team.mappers, team.balancer, me, team.peers_for))
        except BaseException as exc:  # (cancelled meanwhile, too)
            team.peers_sent.clear()  # (some member may not have taken what it was sent)
            if isinstance(exc, Exception) and member_lost(exc):
                raise RunLost("coordinator", exc) from exc
            raise
        job.handle(ev.RunStarted(time.monotonic() - self.job_started), ev.Tick())  # (a restored run may have nothing left to do)

    async def _end(self, run_id: str, tasks: dict[asyncio.Future, str], todo: list[Any]) -> dict[str, Any]:
        """Carries out the job's end as the machine lays it out (stop the reducers, the final
        merge, finalize); returns the reducers' counters, the merged keys, the apply phase's
        stats and whether the final merge ran."""
        job, reducers = self.job, self.team.reducers
        end: dict[str, Any] = {"applied": None}
        for ins in todo:
            if isinstance(ins, op.StopReducers):
                await call_per_process([(reducers[i], "stop", (run_id, ins.snapshot, ins.finalize, ins.handover)) for i in ins.slots])
                end["counters"] = [counters for loops in await asyncio.gather(*tasks)
                                   for role, counters in loops.items() if role.startswith("reducer")]
            elif isinstance(ins, op.FailJob):
                raise ins.error
            elif isinstance(ins, op.InputProgress):
                metric("dpa_job_progress").set(ins.fraction, tags=job.tags)
            elif isinstance(ins, op.FinalMerge):
                await call_per_process([(reducers[i], "exchange", (run_id, list(ins.slots))) for i in ins.slots])
            elif isinstance(ins, op.ApplyGroups):
                combined, end["applied"] = await run_apply_phase(
                    job.reducers, run_id, sum(c["processed"] for c in end["counters"]), job.tags)
                end["merged_keys"] = [combined]
            elif isinstance(ins, op.TakeFinalized):
                end["merged_keys"] = [c["merged_keys"] for c in end["counters"]]
            elif isinstance(ins, op.FinalizeReducers):  # (with the hand-over each reducer merges first)
                incoming = handover_by_slot(m for c in end["counters"] for m in c.pop("handover", ()))
                end["merged_keys"] = await call_per_process([(r, "finalize", (run_id, incoming.get(slot, ())))
                                                             for slot, r in zip(job.job_slots, job.reducers)])
            elif isinstance(ins, op.EndJob):
                end["merged"] = ins.merged
            else:
                raise TypeError(f"the Ray coordinator cannot carry out {ins!r} at the job's end")
        return end

    async def _recover(self, run_id: str, tasks: dict[asyncio.Future, str]) -> dict[str, str]:
        """Stops the lost run on every member and replaces the dead ones; returns the
        replaced members with the node each ran on ("" if unknown)."""
        await self._stop_members(run_id, tasks)
        nodes = dict(self.team.nodes)
        _, _, _, replaced = await self.team.repair()
        return {role: nodes.get(role, "") for role in replaced}

    async def cancel_job(self, job_id: str, reason: str) -> None:
        """Fails ``job_id`` from outside (the driver's timeout, a broken source) and aborts it."""
        await self._until_opened()
        job = self.job
        for ins in job.machine.handle(ev.CancelRequested(job_id, reason)):
            if isinstance(ins, op.AbortJob):
                await self._cancel(job)

    async def _cancel(self, job: JobShell) -> None:
        """Carries out :class:`~dpa.engine.instructions.AbortJob`: no offer is taken and no
        mapper waits from now on; the job's task is cancelled (it aborts its members)."""
        job.handle(ev.JobAborted())
        job.release_waiters()
        task = self.job_task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(task), ABORT_TIMEOUT_S * 2)
        else:
            await self._abort_members({})

    async def _abort_members(self, tasks: dict[asyncio.Future, str]) -> None:
        """Stops every member's work on the job (bounded wait); the job is over."""
        job = self.job
        job.handle(ev.JobAborted())
        await self._stop_members(job.member_run, tasks)

    async def _stop_members(self, run_id: str, tasks: dict[asyncio.Future, str]) -> None:
        """Stops every member's work on ``run_id`` (bounded wait)."""
        self.job.release_waiters()
        for fut in tasks:
            fut.cancel()
        calls = [asyncio.ensure_future(await_ref(actor.abort.remote(run_id))) for _, actor in self.team.all()]
        if calls:
            await asyncio.wait(calls, timeout=ABORT_TIMEOUT_S)
        for call in calls:
            if not call.done():
                call.cancel()
            elif not call.cancelled():
                call.exception()  # retrieved: a dead member is repaired before the next job

    def _fail(self, actor: str, exc: BaseException) -> JobFailedError:
        cause = getattr(exc, "cause", exc)
        if isinstance(cause, ActorFailure):
            actor, message, key = cause.actor, str(cause), cause.key
        else:
            message, key = f"{actor}: {describe(exc)}", None
        where = f" while processing key {key!r}" if key is not None else ""
        return JobFailedError(f"dpa job failed in {message}{where}", actor=actor, key=key)


@ray.remote(num_cpus=0)
class CoordinatorActor(Coordinator):
    """:class:`Coordinator` as a Ray actor.

    Its methods stay in the importable base class: when a driver first creates an actor
    class, Ray pickles it by value and disassembles each of its own methods (a check for
    duplicate exports); a base class that Python imports by name crosses as a reference,
    which takes about 30 ms off a driver's first job.
    """
