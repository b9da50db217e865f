"""The reducer actor: a thin shell over :class:`~dpa.engine.reducer.ReducerLogic`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pyarrow as pa
import ray

from dpa.engine.flow import PUSH_KEEP, PUSH_SHRINK
from dpa.engine.instructions import Forward
from dpa.engine.plan import JobPlan, empty_input_table
from dpa.engine.reducer import ReducerLogic
from dpa.runtime.ray.member import ActorFailure, JobMember, quiet_method, ready
from dpa.runtime.ray.telemetry import ReducerTelemetry

#: A reducer tells the coordinator its processed count at most this often while the
#: mappers are at work (for progress bars and metrics); once the coordinator has said that
#: every record is in a queue (``ReducerActor.input_mapped``), an idle reducer tells it at
#: once: that is what termination waits for.
PROGRESS_INTERVAL_S = 0.1

@ray.remote(num_cpus=0)
class ReducerActor(JobMember):
    """Thin shell over :class:`~dpa.engine.reducer.ReducerLogic` (queue, forwarding, state)."""

    def __init__(self, reducer_id: int, name: str) -> None:
        self.reducer_id = reducer_id
        self.name = name
        self.logic: ReducerLogic | None = None
        self.result: pa.Table | None = None
        self._start_warm_up()

    async def start_job(self, plan: JobPlan, snapshot: Any, handles: Any, job_id: str | None = None,
                        state: Any = None, records: int = 0, epoch: int = -1, pending: Any = None) -> None:
        """Starts serving ``job_id`` (default ``plan.job_id``), from a checkpoint of the
        epochs up to ``epoch`` if given: its base ``state`` holding ``records`` records and
        its ``pending`` batches.

        ``handles`` is ``(peers, balancer, coordinator)`` (``peers``: every reducer slot's
        handle) or :data:`PEERS_UNCHANGED`.
        """
        peers, balancer, coordinator = self._peers(handles)
        peers = list(peers)
        self.job_id = job_id or plan.job_id
        self.logic = ReducerLogic(self.reducer_id, plan, snapshot)
        self.logic.restore(state, records, epoch, pending or ())
        self.plan = plan
        self.peers = peers
        self.balancer = balancer
        self.coordinator = coordinator
        self.wake = asyncio.Event()
        self.arrived = asyncio.Event()  # a forward arrived (a checkpoint may wait for it)
        self.room = asyncio.Event()
        self.room.set()
        self.stopping = False
        self.finalize_at_end = False  # stop(finalize=True): the loop's end finalizes too
        self.inflight: list[Any] = []
        self.last_sent: tuple[int, int, int] | None = None
        self.last_report = 0.0
        self.telemetry = ReducerTelemetry(plan.job_id, self.reducer_id)
        self.last_progress = 0.0
        self.last_progress_value = self.logic.processed  # (what the coordinator knows: none, or the checkpoint's)
        self.mapped = False  # the coordinator said every input record is in a reducer's queue
        self.result = None

    def _on_abort(self) -> None:
        self.stopping = True
        self.room.set()
        self.wake.set()
        self.arrived.set()
        self.inflight = []
        self.result = None

    # -- inputs ---------------------------------------------------------------------
    @quiet_method
    async def push(self, job_id: str, batch: pa.Table, version: int, forwarded: bool = False,
                   epoch: int = 0) -> tuple[int, int | None]:
        """Queues a batch; a mapper's push waits while the queue is full. Returns what the
        mapper should do with its push size (:meth:`~dpa.engine.reducer.ReducerLogic.push_outcome`)
        and the queue's bound in rows (:attr:`~dpa.engine.reducer.ReducerLogic.capacity_rows`)."""
        if not self._serving(job_id):
            return PUSH_KEEP, None
        logic = self.logic
        if version > logic.snapshot.version:
            snapshot = await self.balancer.snapshot.remote(job_id)
            if not self._serving(job_id):
                return PUSH_KEEP, None
            if snapshot is not None:
                self._adopt(snapshot)
        outcome = PUSH_KEEP
        if not forwarded:
            outcome = logic.push_outcome()
            while not logic.has_room():
                if logic.congested:
                    outcome = PUSH_SHRINK
                self.room.clear()
                await self.room.wait()
                if not self._serving(job_id):
                    return PUSH_KEEP, None
        self._send(logic.enqueue(batch, forwarded, version, epoch))
        if forwarded:
            self.arrived.set()
        self.wake.set()
        self._report()
        return outcome, logic.capacity_rows

    @quiet_method
    async def update_ring(self, job_id: str, snapshot: Any) -> None:
        if self._serving(job_id):  # drop a finished job's late news
            self._adopt(snapshot)

    def _adopt(self, snapshot: Any) -> None:
        self._send(self.logic.on_snapshot(snapshot))
        self._move_state()  # (none while a step is applying: it hands over after the step)
        self._report(force=True)

    def _move_state(self) -> None:
        """Hands over the keys whose state this reducer no longer holds (migrate="state",
        or a retired elastic slot): :meth:`~dpa.engine.reducer.ReducerLogic.state_moves`."""
        for move in self.logic.state_moves():
            self.inflight.append(self.peers[move.dest].accept_state.remote(self.job_id, move))

    @quiet_method
    async def accept_state(self, job_id: str, move: Any) -> None:
        """A peer's :class:`~dpa.engine.instructions.StateMove`: merged into this reducer's state.
        Keys it no longer owns (a move made under an older ring) go on to their owners,
        and the call returns once they have merged them: the sender's end of the job
        waits for its moves, so no state is still travelling when the results are taken."""
        if self._serving(job_id):
            onward = self.logic.accept_state(move)
            self.arrived.set()  # (a checkpoint may wait for it)
            if onward:
                await asyncio.gather(*[self.peers[m.dest].accept_state.remote(job_id, m) for m in onward])

    def _send(self, forwards: list[Forward]) -> None:
        version = self.logic.snapshot.version
        for dest, batch, epoch in forwards:
            self.inflight.append(self.peers[dest].push.remote(self.job_id, batch, version, True, epoch))
        if len(self.inflight) > 64:
            self.inflight = [r for r in self.inflight if not ready(r)]

    def _report(self, force: bool = False) -> None:
        """Reports the queue length to the balancer (at most every ``report_interval_s``
        unless ``force``d, skipping a report that would repeat the last one) and progress
        to the coordinator (:meth:`_progress`)."""
        logic = self.logic
        now = time.monotonic()
        if force or now - self.last_report >= self.plan.report_interval_s:
            sent = (logic.queued, logic.processed, logic.snapshot.version)
            if sent != self.last_sent or logic.has_key_stats:
                self.last_sent, self.last_report = sent, now
                self.balancer.report.remote(self.job_id, self.reducer_id, logic.queued, logic.snapshot.version,
                                            logic.take_key_stats(), logic.backlog_s)
                counts = getattr(logic.snapshot, "token_counts", None)
                self.telemetry.update(logic.queued, logic.processed, logic.forwarded,
                                      None if counts is None else counts[self.reducer_id])
        self._progress(now)

    def _progress(self, now: float) -> None:
        """Tells the coordinator the processed count if it changed: at once when the queue
        is empty after every input record was mapped (what termination waits for), else
        at most every ``PROGRESS_INTERVAL_S`` (a call per emptied queue would cost a
        short job more than its records do)."""
        logic = self.logic
        if logic.processed == self.last_progress_value:
            return
        if (self.mapped and logic.queued == 0) or now - self.last_progress >= PROGRESS_INTERVAL_S:
            self.last_progress, self.last_progress_value = now, logic.processed
            self.coordinator.progress.remote(self.job_id, self.reducer_id, logic.processed)

    @quiet_method
    async def input_mapped(self, job_id: str) -> None:
        """Every input record is in a reducer's queue: from now on an emptied queue's
        progress goes to the coordinator at once."""
        if self._serving(job_id):
            self.mapped = True
            self._progress(time.monotonic())

    async def _reporter(self, job_id: str) -> None:
        while not self.stopping and self._serving(job_id):
            await asyncio.sleep(self.plan.report_interval_s)
            if self._serving(job_id):
                self._report(force=True)

    # -- processing -----------------------------------------------------------------
    async def serve(self, job_id: str) -> dict[str, int]:
        if not self._serving(job_id):
            return {}
        self.task = asyncio.current_task()
        logic = self.logic
        reporter = asyncio.ensure_future(self._reporter(job_id))
        try:
            while True:
                step_started = time.perf_counter()
                chunk = logic.take_chunk()
                if chunk is None:
                    self.room.set()
                    self._report()
                    if self.stopping:
                        break
                    self.wake.clear()
                    await self.wake.wait()
                    continue
                if logic.has_room():
                    self.room.set()
                self._send(chunk.forwards)
                if chunk.cost_s > 0:
                    if logic.cost_mode == "sleep":
                        await asyncio.sleep(chunk.cost_s)
                    else:
                        end = time.perf_counter() + chunk.cost_s
                        while time.perf_counter() < end:
                            pass
                try:
                    logic.apply(chunk)
                except Exception as exc:
                    key = logic.current_key
                    raise ActorFailure(self.name, exc, key) from exc
                logic.on_step(chunk.rows, time.perf_counter() - step_started)
                self._move_state()
                if logic.has_room():  # the step may have revised what the queue's work is worth
                    self.room.set()
                self._report()
                await asyncio.sleep(0)
        finally:
            self.stopping = True
            reporter.cancel()
        if self.inflight:
            await asyncio.gather(*self.inflight)
        counters = logic.counters()
        if self.finalize_at_end:
            counters["merged_keys"] = await self.finalize(job_id)
        return counters

    async def stop(self, job_id: str, snapshot: Any = None, finalize: bool = False) -> None:
        """Ends the job's loop (every record is absorbed), first adopting the balancer's
        final ``snapshot`` and handing over the states it moves (the loop's end waits
        until every peer has merged them).

        With ``finalize`` the loop's end also does what :meth:`finalize` does (its merged
        keys go into the loop's counters as ``merged_keys``), saving the coordinator a
        round of calls: only for a job whose reducers neither merge partial states nor
        receive states from peers at the end (no final merge, ``migrate="records"``, not
        elastic), since the loop of one reducer may end before another's does."""
        if not self._serving(job_id):
            return
        if snapshot is not None:
            self._adopt(snapshot)
        self.finalize_at_end = finalize
        self.stopping = True
        self.wake.set()
        self.last_sent = None
        self._report(force=True)

    # -- checkpoints ------------------------------------------------------------------
    async def prepare_checkpoint(self, job_id: str, epoch: int) -> list[int] | None:
        """Phase one of a checkpoint (:meth:`~dpa.engine.reducer.ReducerLogic.prepare_checkpoint`):
        holds forwards of the epochs up to ``epoch``; per peer, the records of them
        forwarded so far. None if not serving."""
        if not self._serving(job_id):
            return None
        return self.logic.prepare_checkpoint(epoch)

    async def checkpoint(self, job_id: str, epoch: int, expected: int, timeout_s: float) -> Any:
        """Phase two: once the ``expected`` records forwarded here of the epochs up to
        ``epoch`` have arrived, this reducer's share of the checkpoint
        (:meth:`~dpa.engine.reducer.ReducerLogic.checkpoint`: state, records, pending batches).
        None if not serving or they did not arrive in time (the held forwards then go
        out)."""
        deadline = time.monotonic() + timeout_s
        while self._serving(job_id) and self.logic.forwards_received(epoch) < expected:
            if time.monotonic() > deadline:
                self._send(self.logic.release_held())
                return None
            self.arrived.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.arrived.wait(), max(0.0, deadline - time.monotonic()))
        if not self._serving(job_id):
            return None
        return self.logic.checkpoint(epoch)

    async def release_checkpoint(self, job_id: str) -> None:
        """Phase three: every share is taken; the forwards held for it go out."""
        if self._serving(job_id):
            self._send(self.logic.release_held())
            self._move_state()

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
        if not self._serving(job_id):
            return
        slots = list(range(len(self.peers))) if slots is None else list(slots)
        parts = self.logic.partition_state(len(slots))
        refs = []
        for j, part in enumerate(parts):
            dest = slots[j]
            if part is None:
                continue
            if dest == self.reducer_id:
                self.logic.merge_partial(part)
            else:
                refs.append(self.peers[dest].accept_partial.remote(job_id, part))
        await asyncio.gather(*refs)

    @quiet_method
    async def accept_partial(self, job_id: str, part: Any) -> None:
        if self._serving(job_id):
            self.logic.merge_partial(part)

    async def finalize(self, job_id: str) -> int:
        """Finalizes this reducer's share of the result (kept until :meth:`result`); returns
        the keys the final merge combined here."""
        if not self._serving(job_id):
            return 0
        try:
            table = self.logic.finalize()
            if table is None:
                table = self.logic.state.empty_result(empty_input_table(self.plan).schema)
        except Exception as exc:
            raise ActorFailure(self.name, exc, getattr(self.logic.state, "current_key", None)) from exc
        self.result = table
        return self.logic.merged_keys

    async def result(self, job_id: str) -> pa.Table:
        """Hands the finalized table over (into the caller's object store ref) and forgets it."""
        if not self._serving(job_id) or self.result is None:
            raise RuntimeError(f"reducer {self.name} holds no result for job {job_id}")
        table, self.result = self.result, None
        self.job_id, self.task = None, None  # the last call of a job: the reducer is idle now
        return table

