"""The reducer actor: carries out :class:`~dpa.engine.reducer_machine.ReducerMachine`'s instructions on Ray.

Each call becomes an event for the machine; each instruction becomes a call to a peer, the
balancer or the coordinator, a paid cost, or the answer to a waiting call. Every protocol
decision (back-pressure, steps, reports, checkpoints, the loop's end) is the machine's.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import pyarrow as pa
import ray

from dpa.aggregates.rows import unit_size
from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.plan import JobPlan
from dpa.engine.reducer_machine import IDLE_ANSWER, ReducerMachine
from dpa.input.records import unify
from dpa.runtime.ray.member import ActorFailure, JobMember, quiet_method, ready
from dpa.runtime.ray.outbox import post, post_table
from dpa.runtime.ray.pacing import SleepPacer
from dpa.runtime.ray.telemetry import ReducerTelemetry
from dpa.runtime.ray.wakes import wake_at


class ReducerActor(JobMember):
    """A reducer on Ray: a :class:`~dpa.engine.reducer_machine.ReducerMachine` and the calls
    that feed it (run by a :class:`~dpa.runtime.ray.host.HostActor`, called through a
    :class:`~dpa.runtime.ray.host.MemberRef`)."""

    def __init__(self, reducer_id: int, name: str) -> None:
        self.reducer_id = reducer_id
        self.name = name
        self.machine: ReducerMachine | None = None
        self.result: pa.Table | None = None

    async def start_job(self, plan: JobPlan, snapshot: Any, handles: Any, job_id: str | None = None,
                        state: Any = None, records: int = 0, epoch: int = -1, pending: Any = None) -> None:
        """Starts serving ``job_id`` (default ``plan.job_id``), from a checkpoint of the
        epochs up to ``epoch`` if given: its base ``state`` holding ``records`` records and
        its ``pending`` batches.

        ``handles`` is ``(peers, balancer, coordinator)`` (``peers``: every reducer slot's
        handle) or :data:`~dpa.runtime.ray.member.PEERS_UNCHANGED`.
        """
        peers, balancer, coordinator = self._peers(handles)
        # A checkpoint's share comes as object refs when the call travels in its host's batch
        # (nested arguments are not resolved by Ray): fetched here.
        if isinstance(state, ray.ObjectRef):
            state = await state
        if isinstance(pending, ray.ObjectRef):
            pending = await pending
        self.job_id = job_id or plan.job_id
        self.machine = ReducerMachine(self.reducer_id, plan, snapshot, time.perf_counter,
                                      (state, records, epoch, pending or ()))
        self.plan = plan
        self.peers = list(peers)
        self.balancer = balancer
        self.coordinator = coordinator
        self.steps: asyncio.Queue[Any] = asyncio.Queue()  # PayStep / Finished, for the loop
        self.waiting: dict[int, asyncio.Future] = {}  # push or request id -> the call that waits
        self.ids = itertools.count()
        self.inflight: list[Any] = []
        self.awaited: list[Any] = []  # calls the event being handled answers only once they are done
        self.telemetry = ReducerTelemetry(plan.job_id, self.reducer_id)
        self.result = None
        self.applied: list[pa.Table] = []  # what a per-group function returned here

    def _on_abort(self) -> None:
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_result(None)
        self.waiting = {}
        self.steps.put_nowait(None)
        self.inflight = []
        self.result = None
        self.applied = []

    # -- events in, instructions out ------------------------------------------------
    def _feed(self, *events: Any) -> None:
        """Hands events to the machine and carries out what it answers."""
        self._execute(self.machine.handle(*events))

    def _execute(self, instructions: list[Any]) -> None:
        partials: list[tuple[Any, str, tuple, Any, tuple]] = []
        for ins in instructions:
            if isinstance(ins, op.SendForward):
                self.inflight.append(self.peers[ins.dest].push.remote(self.job_id, ins.batch, ins.version, True,
                                                                      ins.epoch))
            elif isinstance(ins, op.AnswerPush):
                self._answer(ins.push_id, (ins.outcome, ins.capacity))
            elif isinstance(ins, op.PayStep | op.Finished):
                self.steps.put_nowait(ins)
            elif isinstance(ins, op.Report):
                post(self.balancer, "report", self.job_id, self.reducer_id, ins.queue_length, ins.version, ins.keys,
                     ins.backlog_s)
                self.telemetry.update(ins.queue_length, ins.processed, ins.forwarded, ins.tokens)
            elif isinstance(ins, op.Progress):
                post(self.coordinator, "progress", self.job_id, self.reducer_id, ins.processed)
            elif isinstance(ins, op.SendState):
                ref = self.peers[ins.move.dest].accept_state.remote(self.job_id, ins.move)
                (self.awaited if ins.awaited else self.inflight).append(ref)
            elif isinstance(ins, op.SendPartial):  # (sent together below: one call per host)
                partials.append((self.peers[ins.dest], "accept_partial", (self.job_id,), ins.partial, ()))
            elif isinstance(ins, op.Reply):
                self._answer(ins.request_id, ins.value)
            elif isinstance(ins, op.FetchSnapshot):
                asyncio.ensure_future(self._fetch_snapshot(self.job_id))
            elif isinstance(ins, op.ReportAt):
                wake_at(ins.at, self._waker(self.job_id))
            else:
                raise TypeError(f"the Ray reducer cannot carry out {ins!r}")
        for target, method, head, table, tail in partials:  # (one call per host, with its peers': post_table)
            done = post_table(target, method, head, table, tail)
            if done not in self.awaited:
                self.awaited.append(done)
        if len(self.inflight) > 64:
            self.inflight = [r for r in self.inflight if not ready(r)]

    def _answer(self, request_id: int, value: Any) -> None:
        fut = self.waiting.pop(request_id, None)
        if fut is not None and not fut.done():
            fut.set_result(value)

    async def _request(self, event_type: type, *args: Any) -> Any:
        """Feeds a request event and waits for the machine's answer to it."""
        rid = next(self.ids)
        fut = self.waiting[rid] = asyncio.get_running_loop().create_future()
        try:
            self._feed(event_type(rid, *args))
        except BaseException:
            self.waiting.pop(rid, None)
            raise
        return await fut

    async def _fetch_snapshot(self, job_id: str) -> None:
        try:
            snapshot = await self.balancer.snapshot.remote(job_id)
        except Exception:  # a lost balancer is the coordinator's to notice and recover
            snapshot = None
        if self._serving(job_id):
            self._feed(ev.SnapshotFetched(snapshot))

    async def _settle(self) -> None:
        """Waits for the calls the event just handled must see done."""
        awaited, self.awaited = self.awaited, []
        if awaited:
            await asyncio.gather(*awaited)

    # -- inputs ---------------------------------------------------------------------
    @quiet_method
    async def push(self, job_id: str, batch: pa.Table, version: int, forwarded: bool = False,
                   epoch: int = 0) -> tuple[int, int | None]:
        """Queues a batch; a mapper's push is answered once it is queued (it waits while the
        queue is full): what the mapper should do with its push size and the queue's bound
        in rows."""
        if not self._serving(job_id):
            return IDLE_ANSWER
        answer = await self._request(ev.PushArrived, batch, version, epoch, forwarded)
        return IDLE_ANSWER if answer is None else answer

    @quiet_method
    async def update_ring(self, job_id: str, snapshot: Any) -> None:
        if self._serving(job_id):  # drop a finished job's late news
            self._feed(ev.SnapshotArrived(snapshot))

    @quiet_method
    async def accept_state(self, job_id: str, move: Any) -> None:
        """A peer's :class:`~dpa.engine.instructions.StateMove`; returns once the keys it
        passes on have merged at their owners."""
        if self._serving(job_id):
            self._feed(ev.StateArrived(move))
            await self._settle()

    @quiet_method
    async def input_mapped(self, job_id: str) -> None:
        """Every input record is in a reducer's queue."""
        if self._serving(job_id):
            self._feed(ev.InputMapped())

    def _waker(self, job_id: str) -> Any:
        """The callback of a :class:`~dpa.engine.instructions.ReportAt`: the tick, if this
        reducer still serves the job (the machine decides what the tick sends)."""
        machine = self.machine

        def wake() -> None:
            if self._serving(job_id) and self.machine is machine:
                self._feed(ev.ReportDue())
        return wake

    # -- the loop: steps ------------------------------------------------------------
    async def serve(self, job_id: str) -> dict[str, int]:
        if not self._serving(job_id):
            return {}
        self.task = asyncio.current_task()
        pacer = SleepPacer()  # (the job's sleeps add up to its costs: see dpa.runtime.ray.pacing)
        self._feed(ev.ReducerStarted())
        while True:
            step = await self.steps.get()
            if step is None or isinstance(step, op.Finished):
                break
            if step.cost_s > 0:
                if step.mode == "sleep":
                    await pacer.pay(step.cost_s)
                else:
                    end = time.perf_counter() + step.cost_s
                    while time.perf_counter() < end:
                        pass
            try:
                self._feed(ev.StepPaid())
            except Exception as exc:
                raise ActorFailure(self.name, exc, getattr(exc, "key", None)) from exc
            await asyncio.sleep(0)
        if step is None:  # aborted
            return {}
        if self.inflight:
            await asyncio.gather(*self.inflight)
        counters = dict(step.counters)
        if step.handover:  # (the coordinator hands them to their owners with its finalize calls)
            counters["handover"] = step.handover
        if step.finalize:
            counters["merged_keys"] = await self.finalize(job_id)
        return counters

    async def stop(self, job_id: str, snapshot: Any = None, finalize: bool = False, handover: bool = False) -> None:
        """Ends the job's loop (every record is absorbed), first adopting the balancer's
        final ``snapshot`` and handing over the states it moves (the loop's end waits
        until every peer has merged them); with ``handover``, the loop's counters also carry
        the keys of the state that ``snapshot`` routes elsewhere, for their owners
        (:class:`~dpa.engine.instructions.StopReducers`).

        With ``finalize`` the loop's end also does what :meth:`finalize` does (its merged
        keys go into the loop's counters as ``merged_keys``), saving the coordinator a
        round of calls: only for a job whose reducers neither merge partial states nor
        receive states from peers at the end (:func:`~dpa.engine.output.finalize_at_stop`)."""
        if self._serving(job_id):
            self._feed(ev.Stop(snapshot, finalize, handover))

    # -- checkpoints ------------------------------------------------------------------
    async def prepare_checkpoint(self, job_id: str, epoch: int) -> list[int] | None:
        """Phase one of a checkpoint: per peer, the records of the epochs up to ``epoch``
        forwarded so far. None if not serving."""
        if not self._serving(job_id):
            return None
        return await self._request(ev.PrepareCheckpoint, epoch)

    async def checkpoint(self, job_id: str, epoch: int, expected: int, timeout_s: float) -> Any:
        """Phase two: this reducer's share once the ``expected`` forwarded records have
        arrived; None if not serving or they did not arrive within ``timeout_s``."""
        if not self._serving(job_id):
            return None
        rid = next(self.ids)
        fut = self.waiting[rid] = asyncio.get_running_loop().create_future()
        self._feed(ev.CutCheckpoint(rid, epoch, expected))
        try:
            share = await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except asyncio.TimeoutError:  # (the machine answers None and lets the held forwards go)
            if self._serving(job_id):
                self._feed(ev.CheckpointTimedOut(rid))
            self.waiting.pop(rid, None)
            share = fut.result() if fut.done() else None
        if isinstance(share, BaseException):
            raise share
        return share

    async def release_checkpoint(self, job_id: str) -> None:
        """Phase three: every share is taken; the forwards held for it go out."""
        if self._serving(job_id):
            self._feed(ev.ReleaseCheckpoint())

    # -- final merge and result -----------------------------------------------------
    async def add_peers(self, job_id: str, handles: dict[int, Any]) -> None:
        """An elastic job started reducers in these slots."""
        if self._serving(job_id):
            self.peers = list(self.peers)
            for slot, handle in handles.items():
                self.peers[slot] = handle

    async def exchange(self, job_id: str, slots: list[int] | None = None) -> None:
        """The partitioned final merge over the job's reducer ``slots`` (default all):
        partition ``j`` of this reducer's state goes to ``slots[j]``."""
        if self._serving(job_id):
            await self._request(ev.Exchange, slots)
            await self._settle()

    @quiet_method
    async def accept_partial(self, job_id: str, part: Any) -> None:
        if self._serving(job_id):
            self._feed(ev.PartialArrived(part))

    async def finalize(self, job_id: str, handover: tuple = ()) -> int:
        """Finalizes this reducer's share of the result (kept until :meth:`result`), first
        merging the partial states peers handed over at the end (``handover``); returns the keys
        the final merge combined here."""
        if not self._serving(job_id):
            return 0
        try:
            table, merged_keys = await self._request(ev.Finalize, tuple(handover))
        except Exception as exc:
            raise ActorFailure(self.name, exc, getattr(exc, "key", None)) from exc
        self.result = table
        return merged_keys

    # -- the apply phase of a per-group function -----------------------------------------
    async def list_groups(self, job_id: str, target_rows: int) -> tuple[list[tuple[Any, Any]], int]:
        """Packs the groups held here into units (in the object store, owned by this actor,
        so any worker can run them); returns ``([(unit ref, UnitSize)], merged keys)``."""
        if not self._serving(job_id):
            return [], 0
        try:
            units, merged_keys = await self._request(ev.ListGroups, target_rows)
        except Exception as exc:
            raise ActorFailure(self.name, exc, getattr(exc, "key", None)) from exc
        return [(ray.put(unit), unit_size(unit)) for unit in units], merged_keys

    async def apply_unit(self, job_id: str, unit: Any) -> tuple[int, float]:
        """Runs the job's per-group function on ``unit`` (in a thread, so that this actor
        keeps answering); returns ``(rows, seconds)``."""
        if not self._serving(job_id):
            return 0, 0.0
        try:
            done = await asyncio.to_thread(self.plan.aggregate.apply, unit, self.plan.key_cols)
        except Exception as exc:
            raise ActorFailure(self.name, exc, getattr(exc, "key", None)) from exc
        if done.table is not None and self._serving(job_id):  # (not a run given up meanwhile)
            self.applied.append(done.table)
        return done.rows, done.seconds

    async def finish_apply(self, job_id: str) -> None:
        """The rows the per-group function returned here become this reducer's result."""
        if self._serving(job_id):
            applied, self.applied = self.applied, []
            self.result = unify(applied) if applied else self.plan.aggregate.empty_output()

    async def result(self, job_id: str) -> tuple[pa.Table, tuple[int, pa.Schema, int]]:
        """Hands the finalized table over and forgets it; called with ``num_returns=2``:
        the table (into the caller's object store ref) and its ``(rows, schema, bytes)``, which
        :meth:`dpa.Result.to_ray_dataset` reads instead of fetching every table's schema."""
        return self.take_result(job_id)

    def take_result(self, job_id: str) -> tuple[pa.Table, tuple[int, pa.Schema, int]]:
        """What :meth:`result` answers (the host's :meth:`~dpa.runtime.ray.host.MemberHost.results`
        answers it for each of its reducers in one call)."""
        if not self._serving(job_id) or self.result is None:
            raise RuntimeError(f"reducer {self.name} holds no result for job {job_id}")
        table, self.result = self.result, None
        self.job_id, self.task = None, None  # the last call of a job: the reducer is idle now
        return table, (table.num_rows, table.schema, table.nbytes)


