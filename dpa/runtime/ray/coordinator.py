"""The coordinator actor: owns one pool's members and runs its jobs, one at a time.

It runs the pool's balancer in its own process (so a lost host never takes the routing
and its planner's history with it), owns the reducers and mappers, replaces members that died
or hung between jobs, hands input blocks to mappers when they ask, decides termination by
conservation (:class:`~dpa.engine.coordinator.CoordinatorLogic`), drives the partitioned final merge
and the finalize step, and fails the job, aborting it on every member, if any of them
raises.

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
from collections import deque
from typing import Any

import ray

from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.checkpoint_round import CheckpointRound
from dpa.engine.coordinator import CoordinatorLogic
from dpa.engine.epochs import Checkpoint, Recovery, Rest
from dpa.engine.output import finalize_at_stop, needs_final_merge
from dpa.engine.plan import JobPlan
from dpa.errors import JobFailedError
from dpa.runtime.ray.group_apply import run_apply_phase
from dpa.runtime.ray.host import MemberHost, MemberRef, build_member, kill_member, own_handle
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
    start_members,
)
from dpa.runtime.ray.telemetry import metric

logger = logging.getLogger(__name__)


#: How long an abort waits for the members to acknowledge.
ABORT_TIMEOUT_S = 1.0
#: How long a reducer waits for the forwards a checkpoint counts before it gives it up.
CHECKPOINT_WAIT_S = 10.0
#: How long a scale-out waits for its new reducers to start before it gives up.
SCALE_OUT_WAIT_S = 30.0


@ray.remote(num_cpus=0)
class CoordinatorActor(PoolMembers, MemberHost):
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
        self.first_routed: dict[int, int] = {}  # per mapper, this run: the version of its first push
        if members is None:
            members = start_members(pool_id, num_mappers, num_reducers, initial_reducers, reducer_num_cpus)
        reducers, mappers = members
        # The balancer runs here (MemberHost): a lost host never takes its routing with it.
        self.members = {"balancer": build_member("balancer", f"dpa:{pool_id}:balancer")}
        self.balancer = MemberRef(own_handle(), "balancer")
        # Slots without an actor yet are None: an elastic job starts them when it scales out.
        self.reducers: list[Any] = list(reducers)
        self.job_slots: list[int] = []  # the reducer slots started for the current job
        self.told_done: str | None = None  # the run whose balancer heard that mapping is done
        self.scale_lock = asyncio.Lock()  # a scale-out and a checkpoint never overlap
        self.mappers: list[Any] = list(mappers)
        self.logic: CoordinatorLogic | None = None
        self.nodes: dict[str, str] = {}  # role -> Ray node id (as its last ping said)
        self.job_id: str | None = None
        self.run_id: str | None = None  # the run members serve now (None while recovering)
        self.member_run: str | None = None  # the run members were last started with
        self.failed: str | None = None
        self.job_task: asyncio.Task | None = None
        self.members_changed = asyncio.Event()  # (a run's own, from its start)
        self.checkpoint_error: BaseException | None = None  # user code raised in a checkpoint
        self.cond = asyncio.Condition()
        self.blocks: deque[Any] = deque()
        # Per member (by actor id), the peers' handles (by actor id) its last start_job
        # was sent: a member whose peers did not change is told so instead (PEERS_UNCHANGED).
        self.peers_sent: dict[tuple, tuple] = {}

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
    async def next_block(self, run_id: str, mapper: int, done: tuple[int, int] | None = None) -> list[Any] | None:
        """The next item for ``mapper``: ``[item, epoch, token]``, the item a ``(block ref,
        row slice or None)`` or a :class:`~dpa.engine.epochs.Rest` (wrapped so Ray does not resolve
        the ref); None when there is none (or the run ended).

        ``done`` is ``(epoch, emitted)`` of a block the mapper finished, as
        :meth:`block_done` takes it (which saves a call per block).
        """
        if run_id != self.run_id:
            return None
        if done is not None:
            self.logic.on_block_done(mapper, *done)
            self._check()
        async with self.cond:
            await self.cond.wait_for(lambda: self.blocks or self.logic.input_done or self.failed is not None
                                     or run_id != self.run_id)
            if self.failed is not None or run_id != self.run_id or not self.blocks:
                return None
            item = self.blocks.popleft()
            epoch, token = self.logic.on_block_taken(mapper, item, time.monotonic())
            if self.logic.input_done:
                taken = sum(self.logic.blocks_per_mapper)
                metric("dpa_job_progress").set(taken / max(1, taken + len(self.blocks)), tags=self.job_tags)
            self.cond.notify_all()
            return [item, epoch, token]

    @quiet_method
    async def block_done(self, run_id: str, mapper: int, epoch: int, emitted: int) -> None:
        """``mapper`` pushed every record of a block of ``epoch``."""
        if run_id == self.run_id:
            self.logic.on_block_done(mapper, epoch, emitted)
            self._check()

    @quiet_method
    async def split_block(self, run_id: str, mapper: int, epoch: int, emitted: int, rest: Any,
                          parent: int) -> tuple[int, int] | None:
        """``mapper`` pushed ``emitted`` records of item ``parent`` (of ``epoch``) and routes
        the ``rest`` (a table) in a new item, which this actor stores for replay; returns the
        rest's ``(epoch, token)``, or None if the run ended."""
        if run_id != self.run_id:
            return None
        item = Rest(ray.put(rest))  # owned here: it outlives the mapper
        split = self.logic.on_block_split(mapper, epoch, emitted, item, parent, time.monotonic())
        self._check()
        return split

    async def mapper_done(self, run_id: str, mapper: int, done: tuple[int, int] | None = None,
                          first_routed: int | None = None) -> None:
        """``mapper`` routed all its items; ``done`` as :meth:`next_block` takes it;
        ``first_routed``: the snapshot version of its first push (None: it pushed nothing)."""
        if run_id == self.run_id:
            if first_routed is not None:
                self.first_routed[mapper] = int(first_routed)
            if done is not None:
                self.logic.on_block_done(mapper, *done)
            self.logic.on_mapper_done(mapper)
            self._check()

    @quiet_method
    async def processed_total(self) -> int:
        """Records processed by all reducers so far (the driver's progress callback)."""
        return sum(self.logic.processed) if self.logic is not None else 0

    @quiet_method
    async def progress(self, run_id: str, reducer: int, processed: int) -> None:
        if self.logic is not None and run_id == self.run_id:
            self.logic.on_progress(reducer, processed)
            metric("dpa_job_records_processed").set(sum(self.logic.processed), tags=self.job_tags)
            self._check()

    def _check(self) -> None:
        """Ends the run when it is complete; starts a checkpoint when an epoch can close;
        tells the balancer once every record is pushed."""
        if self.logic.complete():
            self.done.set()
            return
        if self.run_id is not None and self.logic.mapping_done and self.told_done != self.run_id:
            self.told_done = self.run_id
            self.balancer.input_done.remote(self.run_id)
            for reducer in self.job_reducers:  # (an idle one reports its progress at once from now on)
                reducer.input_mapped.remote(self.run_id)
        epoch = None if self.run_id is None else self.logic.checkpoint_due(time.monotonic())
        if epoch is not None:
            asyncio.ensure_future(self._checkpoint(self.run_id, epoch))

    async def _checkpoint(self, run_id: str, epoch: int) -> None:
        """Carries out the :class:`~dpa.engine.checkpoint_round.CheckpointRound` of ``epoch``
        over the job's reducers. The shares are put in this actor's object store (it
        outlives the reducers). A member lost meanwhile abandons it (the run is recovered
        from the previous one)."""
        async with self.scale_lock:  # (the job's reducers do not change meanwhile)
            round_ = CheckpointRound(epoch, self.job_slots)
            instructions, verdict = round_.start(), None
            try:
                while instructions:
                    asks = [i for i in instructions if isinstance(i, (op.AskPrepare, op.AskCut, op.AskRelease))]
                    verdict = next((i for i in instructions if i not in asks), verdict)
                    instructions = []
                    if asks and isinstance(asks[0], op.AskPrepare):
                        sent = await asyncio.gather(*[self.reducers[a.slot].prepare_checkpoint.remote(run_id, a.epoch)
                                                      for a in asks])
                        instructions = round_.handle(*[ev.Prepared(a.slot, s) for a, s in zip(asks, sent)])
                    elif asks and isinstance(asks[0], op.AskCut):
                        shares = await asyncio.gather(*[self.reducers[a.slot].checkpoint.remote(
                            run_id, a.epoch, a.expected, CHECKPOINT_WAIT_S) for a in asks], return_exceptions=True)
                        lost = next((s for s in shares if isinstance(s, Exception) and member_lost(s)), None)
                        if lost is not None:
                            raise lost
                        instructions = round_.handle(*[ev.CutTaken(a.slot, s) for a, s in zip(asks, shares)])
                    elif asks:
                        await asyncio.gather(*[self.reducers[a.slot].release_checkpoint.remote(run_id) for a in asks])
                snapshot = await self.balancer.snapshot.remote(run_id)
            except Exception:  # a member died: the run is recovered from the previous checkpoint
                if run_id == self.run_id:
                    self.logic.ledger.abandon_close()
                return
        if run_id != self.run_id:
            return
        if isinstance(verdict, op.CheckpointFailed):
            # User code raised while a share was cut (a reducer's merge() folding the
            # epochs): that reducer's state is no longer whole, so the job fails.
            self.logic.ledger.abandon_close()
            self.checkpoint_error = verdict.error
            self.members_changed.set()
            return
        if not isinstance(verdict, op.CheckpointTaken):
            logger.warning("dpa checkpoint of epoch %d given up: %s", epoch, verdict.reason)
            self.logic.ledger.abandon_close()
            return
        if not self.logic.on_checkpoint(epoch, verdict.absorbed, verdict.pending):
            return
        R = self.num_reducers
        states, processed, batches = [None] * R, [0] * R, [None] * R
        for slot, (state, records, held) in verdict.shares.items():
            states[slot] = None if state is None else ray.put(state)
            processed[slot] = records
            batches[slot] = ray.put(held) if held else None
        self.checkpoint = Checkpoint(epoch, states, processed, snapshot, self.logic.ledger.blocks_closed, batches)
        self.checkpoints += 1
        metric("dpa_checkpoints").inc(1, tags=self.job_tags)
        self._check()

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
            self.job_slots = list(range(first))
            self.job_id = plan.job_id
            self.logic = CoordinatorLogic(plan.num_mappers, plan.num_reducers, plan.checkpoint_interval_s)
            self.run_id = self.member_run = None
            self.job_tags = {"job_id": plan.job_id}
            metric("dpa_job_progress").set(0.0, tags=self.job_tags)
            self.blocks = deque()
            self.done = asyncio.Event()
            self.failed = None
            self.max_pending = max_pending
            self.job_task = None
            self.cond.notify_all()
        return (*self._for_driver(known), replaced)

    async def run_job(self, plan: JobPlan, snapshot: Any, known: tuple | None = None) -> dict[str, Any]:
        """Runs the prepared job to its end; raises :class:`JobFailedError` if it fails.

        The summary's ``handles`` are the members' (None unless a recovery changed the
        driver's ``known`` ones, as :meth:`prepare_job`) and the replaced roles.

        A run that loses a member is recovered (up to ``plan.max_recoveries`` times): see
        the module docstring.
        """
        job_id = plan.job_id
        if job_id != self.job_id:
            raise JobFailedError(f"job {job_id} was cancelled before it started")
        self.job_task = asyncio.current_task()
        started = self.job_started = time.monotonic()
        R = plan.num_reducers
        initial = snapshot
        self.checkpoint = Checkpoint(-1, [None] * R, [0] * R, snapshot)
        self.checkpoints = 0
        recoveries: list[Recovery] = []
        failures: list[str] = []
        tasks: dict[asyncio.Future, str] = {}
        attempt, resume = 0, False
        try:
            while True:
                run_id = job_id if attempt == 0 else f"{job_id}.{attempt}"
                tasks = {}
                try:
                    summary = await self._run(plan, snapshot, run_id, tasks, resume, recoveries)
                    break
                except RunLost as lost:
                    detected = time.monotonic()
                    self.run_id = None  # the lost run's late messages are dropped from now on
                    # The member whose call failed first is often not the dead one (a mapper
                    # pushing to a dead reducer): the repair finds out who died.
                    snapshot, lost_nodes = await self._recover(plan, run_id, tasks, initial)
                    dead = sorted(lost_nodes) or [lost.actor]
                    failures.append(f"{', '.join(dead)} lost ({lost})")
                    if len(recoveries) >= plan.max_recoveries:
                        raise JobFailedError(
                            f"dpa job failed: {len(failures)} failure(s), more than max_recoveries="
                            f"{plan.max_recoveries}: " + "; ".join(failures), actor=dead[0]) from None
                    logger.warning("dpa job %s lost %s (%s); recovering from checkpoint epoch %d",
                                   job_id, ", ".join(dead), lost, self.checkpoint.epoch)
                    resume = True
                    replayed = max(0, sum(self.logic.processed) - sum(self.checkpoint.processed))  # (reports lag)
                    items = self.logic.rollback(self.checkpoint.processed)
                    async with self.cond:
                        self.blocks.extendleft(reversed(items))
                        self.done.clear()
                        self.cond.notify_all()
                    recoveries.append(Recovery(
                        detected - started, sorted(lost_nodes), sorted({n for n in lost_nodes.values() if n}),
                        str(lost), self.checkpoint.epoch, len(items), replayed, 0.0))
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
            async with self.cond:
                self.cond.notify_all()
        self.job_id = self.run_id = None  # done: late progress reports of this job are dropped
        return {**summary, "recoveries": recoveries, "checkpoints": self.checkpoints,
                "run_id": run_id, "handles": (*self._for_driver(known), []),
                "job_reducers": self.job_reducers}

    async def _run(self, plan: JobPlan, snapshot: Any, run_id: str, tasks: dict[asyncio.Future, str],
                   resume: bool, recoveries: list[Recovery]) -> dict[str, Any]:
        """One run of the job, from the last checkpoint to the end; raises :class:`RunLost`
        if a member, a node or an object is lost on the way."""
        me = ray.get_runtime_context().current_actor
        ck = self.checkpoint
        self.member_run = run_id
        self.first_routed = {}
        balancer_peers = self._peers_for(self.balancer, (self.mappers, self.job_reducers, me))
        try:
            if resume:  # a recovered run starts from the snapshot the balancer (kept or new) has
                snapshot = await self.balancer.start_job.remote(plan, snapshot, balancer_peers, run_id, True)
            await asyncio.gather(
                *([] if resume else [self.balancer.start_job.remote(plan, snapshot, balancer_peers, run_id, False)]),
                *[self.reducers[i].start_job.remote(
                    plan, snapshot, self._peers_for(self.reducers[i], (self.reducers, self.balancer, me)), run_id,
                    ck.states[i], ck.processed[i], ck.epoch, ck.pending[i] if ck.pending else None)
                  for i in self.job_slots],
                *[m.start_job.remote(plan, snapshot, self._peers_for(m, (me, self.reducers, self.balancer)), run_id)
                  for m in self.mappers],
            )
        except BaseException as exc:  # (cancelled meanwhile, too)
            self.peers_sent.clear()  # (some member may not have taken what it was sent)
            if isinstance(exc, Exception) and member_lost(exc):
                raise RunLost("coordinator", exc) from exc
            raise
        async with self.cond:
            self.run_id = run_id
            self.cond.notify_all()
        if recoveries:
            recoveries[-1].recover_s = time.monotonic() - recoveries[-1].at_s - self.job_started
        self.tasks = tasks  # (a scale-out adds its reducers' loops)
        self.members_changed = asyncio.Event()
        self.checkpoint_error = None
        for role, actor in self._job_members():
            method = actor.run if role.startswith("mapper") else actor.serve
            tasks[asyncio.ensure_future(await_ref(method.remote(run_id)))] = f"dpa:{self.pool_id}:{role}"
        self._check()  # (a restored run may have nothing left to do)
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
            # Merge unless every key stayed on one reducer (after a rollback: always, unless
            # states followed their keys).
            merged = ((run_id != plan.job_id and plan.migrate != "state")
                      or needs_final_merge(plan.policy, snapshot, final, plan.migrate,
                                           min(self.first_routed.values(), default=None)))
            early = finalize_at_stop(plan, merged)  # (ReducerActor.stop)
            await asyncio.gather(*[r.stop.remote(run_id, final, early) for r in self.job_reducers])
            counters = await asyncio.gather(*[t for t, name in tasks.items() if "reducer" in name])
            if self.logic.ledger.blocks_done != self.logic.blocks_offered:
                # conservation of input blocks: never lose one silently
                raise RuntimeError(f"{self.logic.blocks_offered} input blocks offered but "
                                   f"{self.logic.ledger.blocks_done} mapped")
            metric("dpa_job_progress").set(1.0, tags=self.job_tags)
            if merged:
                await asyncio.gather(*[r.exchange.remote(run_id, self.job_slots) for r in self.job_reducers])
            applied = None
            if plan.applies_groups:
                combined, applied = await run_apply_phase(self.job_reducers, run_id,
                                                          sum(c["processed"] for c in counters), self.job_tags)
                merged_keys = [combined]
            elif early:
                merged_keys = [c["merged_keys"] for c in counters]
            else:
                merged_keys = await asyncio.gather(*[r.finalize.remote(run_id) for r in self.job_reducers])
        except Exception as exc:
            if member_lost(exc):
                raise RunLost("coordinator", exc) from exc
            raise
        width = max(self.job_slots) + 1  # (slots are taken lowest first: every one that existed)
        per_slot = {c["reducer"]: c for c in counters}
        zero = {"processed": 0, "forwarded": 0, "peak_queue": 0}
        counters_by_slot = [per_slot.get(i, zero) for i in range(width)]
        return {
            "processed": [c["processed"] for c in counters_by_slot],
            "forwarded": [c["forwarded"] for c in counters_by_slot],
            "peak_queue": [c["peak_queue"] for c in counters_by_slot],
            "emitted": list(self.logic.emitted),
            "blocks_per_mapper": list(self.logic.blocks_per_mapper),
            "events": events,
            "timeline": timeline,
            "final_snapshot": final,
            "merged": merged,
            "merged_keys": sum(merged_keys),
            "state_moves": sum(c["keys_moved"] for c in counters),
            "scaling": scaling,
            "group_apply": applied,
        }

    async def scale_out(self, run_id: str, slots: list[int], plan: JobPlan,
                        snapshot: Any) -> tuple[list[int], list[Any], str | None]:
        """Starts reducers in the free ``slots`` for the running job (the balancer asks, see
        :class:`~dpa.engine.instructions.ScaleOut`): each starts empty, and every member learns
        its handle before the balancer routes keys to it.

        Returns:
            ``(started slots, their handles, why the others did not start or None)``.
        """
        if run_id != self.run_id:
            return [], [], "the run ended"
        why = None
        if self.reducer_num_cpus > 0:
            free = float(ray.available_resources().get("CPU", 0.0))
            fits = int(free // self.reducer_num_cpus)
            if fits < len(slots):
                why = (f"no free CPU: {free:g} free, each reducer takes reducer_num_cpus="
                       f"{self.reducer_num_cpus:g}")
                slots = slots[:fits]
        if not slots:
            return [], [], why
        me = ray.get_runtime_context().current_actor
        async with self.scale_lock:
            if run_id != self.run_id:
                return [], [], "the run ended"
            for i in slots:
                if self.reducers[i] is None:
                    self.reducers[i] = self._create(f"reducer-{i}")
            fresh = [self.reducers[i] for i in slots]
            try:
                await asyncio.wait_for(asyncio.gather(*[await_ref(r.ping.remote()) for r in fresh]), SCALE_OUT_WAIT_S)
                await asyncio.gather(*[
                    r.start_job.remote(plan, snapshot, self._peers_for(r, (self.reducers, self.balancer, me)), run_id,
                                       None, 0, self.checkpoint.epoch) for r in fresh])
                others = [m for _, m in self._job_members()[1:]]
                await asyncio.gather(*[m.add_peers.remote(run_id, dict(zip(slots, fresh))) for m in others])
            except Exception as exc:  # (e.g. no node can place it): the job goes on at its width
                for i in slots:
                    if self.reducers[i] is not None and i not in self.job_slots:
                        kill_member(self.reducers[i])  # (its host of its own: see PoolMembers._create)
                        self.reducers[i] = None
                return [], [], f"the new reducers did not start within {SCALE_OUT_WAIT_S:.0f} s ({describe(exc)})"
            if run_id != self.run_id:
                return [], [], "the run ended"
            self.job_slots = sorted(set(self.job_slots) | set(slots))
            for i, r in zip(slots, fresh):
                self.answered.add(f"reducer-{i}")
                self.tasks[asyncio.ensure_future(await_ref(r.serve.remote(run_id)))] = f"dpa:{self.pool_id}:reducer-{i}"
                if self.told_done == run_id:
                    r.input_mapped.remote(run_id)
            self.members_changed.set()
        metric("dpa_reducers").set(len(self.job_slots), tags=self.job_tags)
        return list(slots), fresh, why

    async def _recover(self, plan: JobPlan, run_id: str, tasks: dict[asyncio.Future, str],
                       initial: Any) -> tuple[Any, dict[str, str]]:
        """Stops the lost run on every member and replaces the dead ones.

        Returns:
            ``(snapshot, lost)``: the routing snapshot the balancer resumes from (one that
            survived keeps its own planner and snapshot; a new one continues from the
            checkpoint's), and the replaced members with the node each ran on ("" if
            unknown).
        """
        await self._stop_members(run_id, tasks)
        nodes = dict(self.nodes)
        _, _, _, replaced = await self.repair()
        lost = {role: nodes.get(role, "") for role in replaced}
        if "balancer" in replaced:  # a new one continues from the checkpoint's snapshot
            return self.checkpoint.snapshot, lost
        return initial, lost

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

