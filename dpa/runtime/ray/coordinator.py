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

Fault recovery (:mod:`dpa.engine.epochs`): it hands blocks out in epochs, keeps the refs of the
blocks after the last checkpoint, and stores each checkpoint's reducer states in its own
object store. When a member dies (or its node, or an object it needed) the job is not
failed: the members' loops are stopped, the dead ones replaced, every reducer restarts
from the checkpoint and the blocks after it are handed out again, as a new *run* of the
job (``<job id>.<n>``: members drop the messages of an earlier run). Errors raised by user
code still fail the job at once.
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
from dpa.engine.plan import JobPlan
from dpa.errors import JobFailedError
from dpa.runtime.ray import host
from dpa.runtime.ray.checkpoints import CheckpointRounds
from dpa.runtime.ray.group_apply import run_apply_phase
from dpa.runtime.ray.host import MemberHost, MemberRef, build_member
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
    member_lost,
    member_starts,
    start_members,
)
from dpa.runtime.ray.outbox import call_per_process, post
from dpa.runtime.ray.scale_out import ElasticReducers
from dpa.runtime.ray.telemetry import metric

logger = logging.getLogger(__name__)


#: How long an abort waits for the members to acknowledge.
ABORT_TIMEOUT_S = 1.0


def _finished(mapper: int, done: tuple[int, int] | None) -> list[Any]:
    """The block a mapper's call says it finished (``(epoch, emitted)``), as an event."""
    return [] if done is None else [ev.BlockFinished(mapper, *done)]


class Coordinator(PoolMembers, ElasticReducers, CheckpointRounds, MemberHost):
    """Holds one pool's members (the reducers' and mappers' hosts started by the driver with
    it, or by itself when ``members`` is not given; replacements and an elastic job's new
    reducers it starts itself) and runs the balancer itself; runs the pool's jobs one at a time.

    Hands out input blocks, decides termination, fails the job (and aborts its members) if
    any of them raises or dies, and replaces members that died between jobs.
    """

    def __init__(self, pool_id: str, num_mappers: int, num_reducers: int, initial_reducers: int | None = None,
                 reducer_num_cpus: float = 0.0, members: Members | None = None) -> None:
        self.pool_id = pool_id
        self.num_mappers = num_mappers
        self.num_reducers = num_reducers  # reducer slots (an elastic job's max_reducers)
        self.reducer_num_cpus = float(reducer_num_cpus)
        self.generation = 0
        self.answered: set[str] = set()  # members that answered a ping at least once
        if members is None:
            members = start_members(pool_id, num_mappers, num_reducers, initial_reducers, reducer_num_cpus)
        reducers, mappers = members
        # The balancer runs here (MemberHost): a lost host never takes its routing with it.
        self.members = {"balancer": build_member("balancer", f"dpa:{pool_id}:balancer")}
        self.balancer = MemberRef(host.own_handle(), "balancer")
        # Slots without an actor yet are None: an elastic job starts them when it scales out.
        self.reducers: list[Any] = list(reducers)
        self.scale_lock = asyncio.Lock()  # a scale-out and a checkpoint never overlap
        self.mappers: list[Any] = list(mappers)
        self.machine: CoordinatorMachine | None = None  # the current job's protocol
        self.nodes: dict[str, str] = {}  # role -> Ray node id (as its last ping said)
        self.job_id: str | None = None
        self.run_id: str | None = None  # the run members serve now (None while recovering)
        self.member_run: str | None = None  # the run members were last started with
        self.failed: str | None = None
        self.job_task: asyncio.Task | None = None
        self.members_changed = asyncio.Event()  # (a run's own, from its start)
        # Set once the pool's first job is known here: until then the calls of members the
        # driver started early (see run_job's ``opening``) wait for it.
        self.opened = asyncio.Event()
        self.checkpoint_error: BaseException | None = None  # user code raised in a checkpoint
        self.cond = asyncio.Condition()
        self.waiters: dict[int, asyncio.Future] = {}  # per mapper, its next_block's answer
        self.splits: dict[int, asyncio.Future] = {}  # per mapper, its split_block's answer
        # Per member (by actor id), the peers' handles (by actor id) its last start_job
        # was sent: a member whose peers did not change is told so instead (PEERS_UNCHANGED).
        self.peers_sent: dict[tuple, tuple] = {}

    async def _until_opened(self) -> None:
        """Waits until the pool's first job is known here (at once from then on)."""
        if not self.opened.is_set():
            await self.opened.wait()

    async def _invoke(self, role: str, method: str, args: tuple) -> Any:
        """A call to the balancer this process runs: a forecast sent while the pool starts
        waits for the job, as the coordinator's own methods do."""
        await self._until_opened()
        return await super()._invoke(role, method, args)

    @property
    def job_slots(self) -> list[int]:
        """The reducer slots serving the current job."""
        return self.machine.job_slots if self.machine is not None else []

    # -- the machine ----------------------------------------------------------------
    def _handle(self, *events: Any) -> None:
        """Hands the machine ``events`` and carries out what it says at once. A
        :class:`~dpa.engine.events.Tick` goes with every event that ends some work (a
        checkpoint may be due then), before the next block goes out."""
        for ins in self.machine.handle(*events):
            self._do(ins)

    def _do(self, ins: Any) -> None:
        """Carries out an instruction that needs no waiting."""
        if isinstance(ins, op.GiveBlock):
            self._answer(self.waiters, ins.mapper, [ins.item, ins.epoch, ins.token])
        elif isinstance(ins, op.NoMoreBlocks):
            self._answer(self.waiters, ins.mapper, None)
        elif isinstance(ins, op.AnswerSplit):
            self._answer(self.splits, ins.mapper, ins.split)
        elif isinstance(ins, op.InputProgress):
            metric("dpa_job_progress").set(ins.fraction, tags=self.job_tags)
        elif isinstance(ins, op.TellBalancerMapped):
            post(self.balancer, "input_done", self.run_id)
        elif isinstance(ins, op.TellReducersMapped):
            for slot in ins.slots:  # (an idle one reports its progress at once from now on)
                post(self.reducers[slot], "input_mapped", self.run_id)
        elif isinstance(ins, op.StartCheckpoint):
            asyncio.ensure_future(self._checkpoint(self.run_id))
        elif isinstance(ins, op.StoreCheckpoint):
            ck = ins.checkpoint  # (its states go into this actor's object store: it outlives the reducers)
            ck.states = [None if state is None else ray.put(state) for state in ck.states]
            ck.pending = [ray.put(held) if held else None for held in ck.pending]
            metric("dpa_checkpoints").inc(1, tags=self.job_tags)
            self._handle(ev.CheckpointStored(ck), ev.Tick())
        elif isinstance(ins, op.CheckpointFailed):
            self.checkpoint_error = ins.error
            self.members_changed.set()
        elif isinstance(ins, op.StopBalancer):
            self.done.set()
        elif not isinstance(ins, op.ReadInput):  # (the driver offers its blocks ahead)
            raise TypeError(f"the Ray coordinator cannot carry out {ins!r} here")

    @staticmethod
    def _answer(futures: dict[int, asyncio.Future], mapper: int, value: Any) -> None:
        fut = futures.pop(mapper, None)
        if fut is not None and not fut.done():
            fut.set_result(value)

    def _release_waiters(self) -> None:
        """The mappers waiting for an item get none (the run ended)."""
        for futures in (self.waiters, self.splits):
            for mapper in list(futures):
                self._answer(futures, mapper, None)

    # -- block hand-out (driver -> coordinator -> mappers) --------------------------
    @quiet_method
    async def offer(self, job_id: str, refs: list[Any]) -> bool:
        """Queues input block refs; waits while too many are pending. False once failed."""
        await self._until_opened()
        if job_id != self.job_id:
            return False
        async with self.cond:
            await self.cond.wait_for(lambda: self.machine.queued < self.max_pending or self.failed is not None
                                     or job_id != self.job_id)
            if self.failed is not None or job_id != self.job_id:
                return False
            self._handle(ev.BlocksOffered(list(refs)))
        return True

    async def input_done(self, job_id: str) -> None:
        await self._until_opened()
        if job_id != self.job_id:
            return
        self._handle(ev.InputExhausted(), ev.Tick())

    @quiet_method
    async def next_block(self, run_id: str, mapper: int, done: tuple[int, int] | None = None) -> list[Any] | None:
        """The next item for ``mapper``: ``[item, epoch, token]``, the item a ``(block ref,
        row slice or None)`` or a :class:`~dpa.engine.epochs.Rest` (wrapped so Ray does not resolve
        the ref); None when there is none (or the run ended).

        ``done`` is ``(epoch, emitted)`` of a block the mapper finished, as
        :meth:`block_done` takes it (which saves a call per block).
        """
        await self._until_opened()
        if run_id != self.run_id:
            return None
        answer = self.waiters[mapper] = asyncio.get_running_loop().create_future()
        self._handle(*_finished(mapper, done), ev.Tick(), ev.BlockWanted(mapper))
        async with self.cond:  # (an offer may wait for the room this made)
            self.cond.notify_all()
        return await answer

    @quiet_method
    async def block_done(self, run_id: str, mapper: int, epoch: int, emitted: int) -> None:
        """``mapper`` pushed every record of a block of ``epoch``."""
        await self._until_opened()
        if run_id == self.run_id:
            self._handle(ev.BlockFinished(mapper, epoch, emitted), ev.Tick())

    @quiet_method
    async def split_block(self, run_id: str, mapper: int, epoch: int, emitted: int, rest: Any,
                          parent: int) -> tuple[int, int] | None:
        """``mapper`` pushed ``emitted`` records of item ``parent`` (of ``epoch``) and routes
        the ``rest`` (a table) in a new item, which this actor stores for replay; returns the
        rest's ``(epoch, token)``, or None if the run ended."""
        await self._until_opened()
        if run_id != self.run_id:
            return None
        answer = self.splits[mapper] = asyncio.get_running_loop().create_future()
        rest = Rest(ray.put(rest))  # (owned here: it outlives the mapper)
        self._handle(ev.BlockCut(mapper, epoch, emitted, rest, parent), ev.Tick())
        return await answer

    async def mapper_done(self, run_id: str, mapper: int, done: tuple[int, int] | None = None,
                          first_routed: int | None = None) -> None:
        """``mapper`` routed all its items; ``done`` as :meth:`next_block` takes it;
        ``first_routed``: the snapshot version of its first push (None: it pushed nothing)."""
        await self._until_opened()
        if run_id == self.run_id:
            self._handle(*_finished(mapper, done), ev.MapperFinished(mapper, first_routed), ev.Tick())

    @quiet_method
    async def processed_total(self) -> int:
        """Records processed by all reducers so far (the driver's progress callback)."""
        return self.machine.processed if self.machine is not None else 0

    @quiet_method
    async def progress(self, run_id: str, reducer: int, processed: int) -> None:
        await self._until_opened()
        if self.machine is not None and run_id == self.run_id:
            self._handle(ev.ProgressReported(reducer, processed), ev.Tick())
            metric("dpa_job_records_processed").set(self.machine.processed, tags=self.job_tags)

    # -- the job --------------------------------------------------------------------
    async def prepare_job(self, plan: JobPlan, max_pending: int,
                          known: tuple | None = None) -> tuple[Any, list[Any], list[Any], list[str]]:
        """Repairs the pool and resets the per-job state; the driver waits for it before
        offering blocks (async actor calls do not run in submission order, so an ``offer``
        sent right after ``run_job`` could otherwise run first).

        Returns:
            What :meth:`repair` returns; the handles are None if they are the driver's
            ``known`` ones (:meth:`~dpa.runtime.ray.pool.Pool.members_key`).
        """
        first = plan.active_reducers or plan.num_reducers
        for i in range(first):
            if self.reducers[i] is None:
                self.reducers[i] = self._create(f"reducer-{i}")
        *_, replaced = await self.repair()
        async with self.cond:
            self._take_job(plan.job_id, CoordinatorMachine(plan, time.monotonic, range(first), self.reducer_num_cpus),
                           max_pending)
            self.opened.set()
            self.cond.notify_all()
        return (*self._for_driver(known), replaced)

    def _take_job(self, job_id: str, machine: CoordinatorMachine, max_pending: int, run_id: str | None = None) -> None:
        """Makes ``job_id``, run by ``machine``, the current job (``run_id``: the run its
        members serve already, if the driver started them)."""
        self.job_id = job_id
        self.machine = machine
        self.run_id = self.member_run = run_id
        self.job_tags = {"job_id": self.job_id}
        metric("dpa_job_progress").set(0.0, tags=self.job_tags)
        self.done = asyncio.Event()
        self.failed = None
        self.max_pending = max_pending
        self.job_task = None

    async def run_job(self, plan: JobPlan, snapshot: Any, known: tuple | None = None,
                      opening: tuple[CoordinatorMachine, int, list[tuple[str, Any]]] | None = None) -> dict[str, Any]:
        """Runs the prepared job to its end; raises :class:`JobFailedError` if it fails.

        The summary's ``handles`` are the members' (None unless a recovery changed the
        driver's ``known`` ones, as :meth:`prepare_job`) and the replaced roles.

        A run that loses a member is recovered (up to ``plan.max_recoveries`` times): see
        the module docstring.

        ``opening``: a new pool's first job, which the driver started while this process
        started (:func:`~dpa.runtime.ray.driver.open_job`), instead of :meth:`prepare_job`:
        ``(machine, max_pending, loops)``, the job's machine after its first hand-out, the
        bound of the driver's offers, and ``(role, ref)`` of each reducer's and mapper's loop
        (in a list, so that Ray passes the refs on unresolved).
        """
        if opening is not None:
            self._take_job(plan.job_id, opening[0], opening[1], plan.job_id)
        job_id = plan.job_id
        if job_id != self.job_id:
            raise JobFailedError(f"job {job_id} was cancelled before it started")
        self.job_task = asyncio.current_task()
        started = self.job_started = time.monotonic()
        machine = self.machine
        if opening is None:
            machine.handle(ev.JobStarted(snapshot))
        tasks: dict[asyncio.Future, str] = {}
        attempt, resume = 0, None
        try:
            while True:
                run_id = job_id if attempt == 0 else f"{job_id}.{attempt}"
                tasks = {}
                try:
                    loops = opening[2] if opening is not None and attempt == 0 else None
                    summary = await self._run(plan, snapshot, run_id, tasks, resume, loops)
                    break
                except RunLost as exc:
                    lost = exc
                self.run_id = None  # the lost run's late messages are dropped from now on
                machine.handle(ev.MemberLost(time.monotonic() - started, str(lost), lost.actor))
                # The member whose call failed first is often not the dead one (a mapper
                # pushing to a dead reducer): the repair finds out who died.
                lost_nodes = await self._recover(run_id, tasks)
                (ins,) = machine.handle(ev.MembersReplaced(sorted(lost_nodes),
                                                           sorted({n for n in lost_nodes.values() if n})))
                if isinstance(ins, op.FailJob):
                    raise ins.error
                snapshot, resume = ins.balancer_snapshot, ins  # (op.Restart: the balancer obeys it)
                self.done.clear()
                metric("dpa_recoveries").inc(1, tags=self.job_tags)
                attempt += 1
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
            machine.handle(ev.JobClosed())  # (the input blocks and checkpoints it kept can go)
            async with self.cond:
                self.cond.notify_all()
        self.job_id = self.run_id = None  # done: late progress reports of this job are dropped
        return {**summary, "recoveries": machine.recoveries, "checkpoints": machine.checkpoints,
                "run_id": run_id, "handles": (*self._for_driver(known), []),
                "job_reducers": self.job_reducers}

    async def _run(self, plan: JobPlan, snapshot: Any, run_id: str, tasks: dict[asyncio.Future, str],
                   resume: op.Restart | None, loops: list[tuple[str, Any]] | None = None) -> dict[str, Any]:
        """One run of the job, from the last checkpoint to the end; raises :class:`RunLost`
        if a member, a node or an object is lost on the way. ``loops``: the reducers' and
        mappers' loops the driver started (see :meth:`run_job`); only the balancer is
        started here then."""
        me = ray.get_runtime_context().current_actor
        self.member_run = run_id
        balancer_peers = self._peers_for(self.balancer, (self.mappers, self.job_reducers, me))
        if loops is not None:  # (the balancer runs here: started before any call reaches it)
            await MemberHost._invoke(self, "balancer", "start_job", (plan, snapshot, balancer_peers, run_id, None))
            self.peers_sent.clear()  # (the driver sent the others theirs)
            self.opened.set()  # (the calls of the members the driver started come in now)
            asyncio.ensure_future(self.note_members()).add_done_callback(retrieved)
        else:
            await self._start_run(plan, snapshot, run_id, resume, balancer_peers, me)
        self.tasks = tasks  # (a scale-out adds its reducers' loops)
        self.members_changed = asyncio.Event()
        self.checkpoint_error = None
        started = dict(loops or ())
        for role, actor in self._job_members():
            if role in started:
                ref = started[role]
            else:
                ref = (actor.run if role.startswith("mapper") else actor.serve).remote(run_id)
            tasks[asyncio.ensure_future(await_ref(ref))] = f"dpa:{self.pool_id}:{role}"
        done_waiter = asyncio.ensure_future(self.done.wait())
        seen: set[asyncio.Future] = set()  # member loops that ended well
        while not self.done.is_set():
            changed = asyncio.ensure_future(self.members_changed.wait())
            finished, _ = await asyncio.wait((set(tasks) - seen) | {done_waiter, changed},
                                             return_when=asyncio.FIRST_COMPLETED)
            changed.cancel()
            self.members_changed.clear()
            seen |= finished
            for fut in finished:
                if fut in tasks and fut.exception() is not None:
                    if member_lost(fut.exception()):
                        raise RunLost(tasks[fut], fut.exception())
                    raise self._fail(tasks[fut], fut.exception())
            if self.checkpoint_error is not None:
                raise self._fail(f"dpa:{self.pool_id}:checkpoint", self.checkpoint_error)
        if self.checkpoint_error is not None:
            raise self._fail(f"dpa:{self.pool_id}:checkpoint", self.checkpoint_error)
        for fut in set(tasks) - seen:  # (a loop still returning when its host is killed: not an error)
            fut.add_done_callback(retrieved)
        try:
            # The balancer stops first: the reducers end on its final routing (and hand
            # over the states it moves) with no newer one on the way.
            events, final, timeline, scaling = await self.balancer.stop.remote(run_id)
            end = await self._end(run_id, tasks, self.machine.handle(ev.BalancingEnded(final)))
        except Exception as exc:
            if member_lost(exc):
                raise RunLost("coordinator", exc) from exc
            raise
        counters = end["counters"]
        width = max(self.job_slots) + 1  # (slots are taken lowest first: every one that existed)
        per_slot = {c["reducer"]: c for c in counters}
        zero = {"processed": 0, "forwarded": 0, "peak_queue": 0}
        counters_by_slot = [per_slot.get(i, zero) for i in range(width)]
        return {
            "processed": [c["processed"] for c in counters_by_slot],
            "forwarded": [c["forwarded"] for c in counters_by_slot],
            "peak_queue": [c["peak_queue"] for c in counters_by_slot],
            "emitted": self.machine.emitted,
            "blocks_per_mapper": self.machine.blocks_per_mapper,
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
        try:
            if resume:  # a recovered run starts from the snapshot the balancer (kept or new) has
                snapshot = await self.balancer.start_job.remote(plan, snapshot, balancer_peers, run_id, resume)
            await asyncio.gather(
                *([] if resume else [self.balancer.start_job.remote(plan, snapshot, balancer_peers, run_id, None)]),
                *member_starts(plan, snapshot, run_id, self.machine.checkpoint, self.job_slots, self.reducers,
                               self.mappers, self.balancer, me, self._peers_for))
        except BaseException as exc:  # (cancelled meanwhile, too)
            self.peers_sent.clear()  # (some member may not have taken what it was sent)
            if isinstance(exc, Exception) and member_lost(exc):
                raise RunLost("coordinator", exc) from exc
            raise
        async with self.cond:
            self.run_id = run_id
            self.cond.notify_all()
        self._handle(ev.RunStarted(time.monotonic() - self.job_started), ev.Tick())  # (a restored run may have nothing left to do)

    async def _end(self, run_id: str, tasks: dict[asyncio.Future, str], todo: list[Any]) -> dict[str, Any]:
        """Carries out the job's end as the machine lays it out (stop the reducers, the final
        merge, finalize); returns the reducers' counters, the merged keys, the apply phase's
        stats and whether the final merge ran."""
        end: dict[str, Any] = {"applied": None}
        for ins in todo:
            if isinstance(ins, op.StopReducers):
                await call_per_process([(self.reducers[i], "stop", (run_id, ins.snapshot, ins.finalize))
                                        for i in ins.slots])
                end["counters"] = await asyncio.gather(*[t for t, name in tasks.items() if "reducer" in name])
            elif isinstance(ins, op.FailJob):
                raise ins.error
            elif isinstance(ins, op.InputProgress):
                metric("dpa_job_progress").set(ins.fraction, tags=self.job_tags)
            elif isinstance(ins, op.FinalMerge):
                await call_per_process([(self.reducers[i], "exchange", (run_id, list(ins.slots))) for i in ins.slots])
            elif isinstance(ins, op.ApplyGroups):
                combined, end["applied"] = await run_apply_phase(
                    self.job_reducers, run_id, sum(c["processed"] for c in end["counters"]), self.job_tags)
                end["merged_keys"] = [combined]
            elif isinstance(ins, op.TakeFinalized):
                end["merged_keys"] = [c["merged_keys"] for c in end["counters"]]
            elif isinstance(ins, op.FinalizeReducers):
                end["merged_keys"] = await call_per_process([(r, "finalize", (run_id,)) for r in self.job_reducers])
            elif isinstance(ins, op.EndJob):
                end["merged"] = ins.merged
            else:
                raise TypeError(f"the Ray coordinator cannot carry out {ins!r} at the job's end")
        return end

    async def _recover(self, run_id: str, tasks: dict[asyncio.Future, str]) -> dict[str, str]:
        """Stops the lost run on every member and replaces the dead ones; returns the
        replaced members with the node each ran on ("" if unknown)."""
        await self._stop_members(run_id, tasks)
        nodes = dict(self.nodes)
        _, _, _, replaced = await self.repair()
        return {role: nodes.get(role, "") for role in replaced}

    async def cancel_job(self, job_id: str, reason: str) -> None:
        """Fails ``job_id`` from outside (the driver's timeout, a broken source) and aborts it."""
        await self._until_opened()
        if job_id != self.job_id:
            return
        self.failed = self.failed or reason
        self._release_waiters()
        async with self.cond:
            self.cond.notify_all()
        task = self.job_task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(task), ABORT_TIMEOUT_S * 2)
        else:
            await self._abort_members({})

    async def _abort_members(self, tasks: dict[asyncio.Future, str]) -> None:
        """Stops every member's work on the job (bounded wait) and forgets the job."""
        self.failed = self.failed or "aborted"
        self.run_id = None
        async with self.cond:
            self.cond.notify_all()
        await self._stop_members(self.member_run or self.job_id, tasks)
        self.job_id = None

    async def _stop_members(self, run_id: str | None, tasks: dict[asyncio.Future, str]) -> None:
        """Stops every member's work on ``run_id`` (bounded wait)."""
        self._release_waiters()
        async with self.cond:
            self.cond.notify_all()
        for fut in tasks:
            fut.cancel()
        if run_id is None:
            return
        calls = [asyncio.ensure_future(await_ref(actor.abort.remote(run_id))) for _, actor in self._members()]
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
        self.failed = message
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
