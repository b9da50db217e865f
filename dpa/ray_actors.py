"""Ray actor shells over the state machines of :mod:`dpa.logic`.

Actors (all async, ``num_cpus=0`` so a laptop can host many):

* ``CoordinatorActor`` (in :mod:`dpa.ray_coordinator`) creates and owns the others and
  runs the job.
* ``MapperActor`` pulls blocks, maps and routes them with its local ring snapshot, and
  pushes per-reducer batches (waiting while the target queue is full: backpressure).
* ``ReducerActor`` owns its bounded queue, consumes it chunk by chunk, forwards records
  it no longer owns, pays the configured per-record cost, and reports its queue length.
* ``BalancerActor`` evaluates the policy every ``lb_interval_s`` and publishes new ring
  snapshots to every mapper and reducer.

Every message carries the job id, and every actor drops messages of a job it is not
serving: an aborted job's late pushes, reports and ring updates cannot leak into the next
job of the same (warm) actors. ``abort(job_id)`` cancels an actor's loop for that job, so a
failed or timed-out job leaves the actors idle and reusable.

The small, frequent calls (pushes, reports, block hand-out) are declared with
``enable_task_events=False``: Ray's GCS otherwise keeps an event record for each of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from typing import Any

import pyarrow as pa
import ray

from dpa.epochs import Rest
from dpa.instructions import Forward, Publish, ScaleOut
from dpa.logic import PUSH_KEEP, PUSH_SHRINK, BalancerLogic, MapperLogic, ReducerLogic
from dpa.plan import JobPlan, empty_input_table
from dpa.sources import ParquetPiece
from dpa.telemetry import ReducerTelemetry, metric

logger = logging.getLogger(__name__)

NAMESPACE = "dpa"
#: A reducer tells the coordinator its processed count at most this often while the
#: mappers are at work (for progress bars and metrics); once the coordinator has said that
#: every record is in a queue (``ReducerActor.input_mapped``), an idle reducer tells it at
#: once: that is what termination waits for.
PROGRESS_INTERVAL_S = 0.1

#: What the coordinator sends a member instead of its peers' handles when they are the
#: ones it sent that member before (a handle costs Ray a registration at both ends, about
#: as much as the rest of a ``start_job`` call).
PEERS_UNCHANGED = "dpa:peers-unchanged"


def handles_key(*handles: Any) -> tuple:
    """Actor handles by actor id (lists of them as tuples; None for an empty slot): what
    tells whether two sets of handles name the same actors."""
    return tuple(tuple(handles_key(*h)) if isinstance(h, (list, tuple)) else
                 None if h is None else h._actor_id.hex() for h in handles)


#: Decorator for frequent small actor methods: Ray's GCS keeps no task event for their calls.
quiet_method = ray.method(enable_task_events=False)


def _as_table(block: Any) -> pa.Table:
    if isinstance(block, pa.Table):
        return block
    if isinstance(block, ParquetPiece):
        return block.read()
    import pandas as pd

    if isinstance(block, pd.DataFrame):
        return pa.Table.from_pandas(block, preserve_index=False)
    raise TypeError(f"unsupported block type {type(block).__name__}")


def describe(exc: BaseException) -> str:
    """The innermost useful message of a (possibly Ray-wrapped) exception."""
    cause = getattr(exc, "cause", None)
    if cause is not None and cause is not exc:
        return describe(cause)
    return f"{type(exc).__name__}: {exc}"


class ActorFailure(Exception):
    """A user-code or runtime error inside an actor, with the actor's name and the key."""

    def __init__(self, actor: str, exc: BaseException, key: Any = None):
        super().__init__(f"{actor}: {describe(exc)}")
        self.actor = actor
        self.key = key
        self.exc = exc

    def __reduce__(self):
        return (ActorFailure, (self.actor, self.exc, self.key))


def _warm_up() -> None:
    """Pays a new worker process's one-time costs: the first ``Table.group_by`` imports
    ``pyarrow.acero`` and pandas (about 0.5 s of CPU). Run in a thread while the actor
    starts, they do not delay the first block (or first push) it handles."""
    try:
        import pyarrow.acero  # noqa: F401  (imports pandas through pyarrow's shim)

        pa.table({"k": [0, 1, 0]}).group_by("k").aggregate([("k", "count")])
    except Exception:  # a warm-up only: the job itself reports real errors
        logger.debug("warm-up failed", exc_info=True)


class _JobMember:
    """What every member actor shares: the job it serves and the task running it."""

    job_id: str | None = None
    task: asyncio.Task | None = None

    @staticmethod
    def _start_warm_up() -> None:
        threading.Thread(target=_warm_up, name="dpa-warm-up", daemon=True).start()

    def _serving(self, job_id: str) -> bool:
        return job_id is not None and job_id == self.job_id

    def _peers(self, peers: Any) -> tuple:
        """The handles a ``start_job`` call names: ``peers`` itself, or the ones this member
        got before when the coordinator sends :data:`PEERS_UNCHANGED`."""
        if isinstance(peers, str):
            known = getattr(self, "_known_peers", None)
            if known is None:  # (the coordinator only says so to a member it sent them to)
                raise RuntimeError(f"{type(self).__name__}: told its peers are unchanged, but it has none")
            return known
        self._known_peers = peers = tuple(list(p) if isinstance(p, list) else p for p in peers)
        return peers

    async def ping(self) -> str:
        """The id of the Ray node this member runs on (a live member answers)."""
        return ray.get_runtime_context().get_node_id()

    async def abort(self, job_id: str) -> None:
        """Stops serving ``job_id``: its loop is cancelled and its late messages dropped."""
        if not self._serving(job_id):
            return
        self.job_id = None
        self._on_abort()
        if self.task is not None and not self.task.done():
            self.task.cancel()
        self.task = None

    def _on_abort(self) -> None:
        """Releases anything a pending call of the aborted job waits on."""


@ray.remote(num_cpus=0)
class MapperActor(_JobMember):
    """Thin shell over :class:`~dpa.logic.MapperLogic`."""

    def __init__(self, mapper_id: int, name: str) -> None:
        self.mapper_id = mapper_id
        self.name = name
        self.logic: MapperLogic | None = None
        self._start_warm_up()

    async def start_job(self, plan: JobPlan, snapshot: Any, peers: Any, job_id: str | None = None) -> None:
        """Starts serving ``job_id`` (default ``plan.job_id``; a recovered job's run id).

        ``peers`` is ``(coordinator, reducers, balancer)`` or :data:`PEERS_UNCHANGED`.
        """
        coordinator, reducers, balancer = self._peers(peers)
        self.job_id = job_id or plan.job_id
        self.logic = MapperLogic(self.mapper_id, plan, snapshot)
        self.tags = {"job_id": plan.job_id, "mapper": str(self.mapper_id)}
        self.coordinator = coordinator
        self.reducers = list(reducers)  # (add_peers changes this job's copy)
        self.balancer = balancer

    @quiet_method
    async def update_ring(self, job_id: str, snapshot: Any) -> None:
        if self._serving(job_id):  # drop a finished job's late news
            self.logic.on_snapshot(snapshot)

    async def add_peers(self, job_id: str, handles: dict[int, Any]) -> None:
        """An elastic job started reducers in these slots (before any routing names them)."""
        if self._serving(job_id):
            for slot, handle in handles.items():
                self.reducers[slot] = handle

    async def run(self, job_id: str) -> int:
        if not self._serving(job_id):
            return 0
        self.task = asyncio.current_task()
        logic = self.logic
        interval = logic.plan.checkpoint_interval_s
        pending = self.coordinator.next_block.remote(job_id, self.mapper_id)
        done = None  # (epoch, emitted) of the block finished last, not told yet
        while True:
            item = await pending
            if item is None:
                break
            # prefetch, telling the coordinator the last block's end on the way
            pending = self.coordinator.next_block.remote(job_id, self.mapper_id, done)
            done = None
            item, epoch, token = item
            try:
                before = logic.emitted
                if isinstance(item, Rest):
                    logic.start_block(await item.table, prepared=True)
                else:
                    ref, row_slice = item
                    block = _as_table(await ref)
                    if row_slice is not None:
                        block = block.slice(row_slice[0], row_slice[1] - row_slice[0])
                    logic.start_block(block)
            except Exception as exc:
                raise ActorFailure(self.name, exc, getattr(exc, "key", None)) from exc
            forecast = logic.take_forecast()
            if forecast is not None and self.balancer is not None:
                # The first block's key counts: its first push goes out under what the
                # balancer makes of them (a key hot from the start is split already).
                try:
                    snapshot = await self.balancer.forecast.remote(job_id, self.mapper_id, *forecast)
                except Exception as exc:  # a lost balancer is the coordinator's to notice and recover
                    logger.debug("mapper %d: no forecast (%s)", self.mapper_id, describe(exc))
                    snapshot = None
                if snapshot is not None:
                    logic.on_snapshot(snapshot)
            since = time.monotonic()
            while logic.routing:  # push by push, each under the newest ring (update_ring runs between)
                if interval > 0 and time.monotonic() - since >= interval:
                    # The epoch's time is up: the rest of the block becomes an item of its
                    # own, so that what was pushed can be checkpointed (dpa.epochs).
                    rest, records = logic.rest()
                    split = await self.coordinator.split_block.remote(
                        job_id, self.mapper_id, epoch, logic.emitted - before - records, rest, token)
                    if split is None:  # the run is over
                        break
                    (epoch, token), before, since = split, logic.emitted - records, time.monotonic()
                routed = logic.next_pushes()
                version = logic.snapshot.version
                answers = await asyncio.gather(*[self.reducers[r].push.remote(job_id, b, version, False, epoch)
                                                 for r, b in routed])
                logic.on_pushed(max((outcome for outcome, _ in answers), default=PUSH_KEEP),
                                {r: capacity for (r, _), (_, capacity) in zip(routed, answers)})
            # Every record of the block is in a reducer's queue now: the coordinator may
            # count the block's epoch as mapped (dpa.epochs). If the next item is here,
            # the request for the one after tells it; else (a slow source) a call now.
            done = (epoch, logic.emitted - before)
            if not _ready(pending):
                self.coordinator.block_done.remote(job_id, self.mapper_id, *done)
                done = None
            if logic.emitted > before:
                metric("dpa_records_emitted").inc(logic.emitted - before, tags=self.tags)
        await self.coordinator.mapper_done.remote(job_id, self.mapper_id, done, logic.first_routed)
        self.job_id, self.task = None, None  # the job is over for this mapper: later news is dropped
        return logic.emitted


@ray.remote(num_cpus=0)
class ReducerActor(_JobMember):
    """Thin shell over :class:`~dpa.logic.ReducerLogic` (queue, forwarding, state)."""

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
        mapper should do with its push size (:meth:`~dpa.logic.ReducerLogic.push_outcome`)
        and the queue's bound in rows (:attr:`~dpa.logic.ReducerLogic.capacity_rows`)."""
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
        or a retired elastic slot): :meth:`~dpa.logic.ReducerLogic.state_moves`."""
        for move in self.logic.state_moves():
            self.inflight.append(self.peers[move.dest].accept_state.remote(self.job_id, move))

    @quiet_method
    async def accept_state(self, job_id: str, move: Any) -> None:
        """A peer's :class:`~dpa.instructions.StateMove`: merged into this reducer's state.
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
            self.inflight = [r for r in self.inflight if not _ready(r)]

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
        """Phase one of a checkpoint (:meth:`~dpa.logic.ReducerLogic.prepare_checkpoint`):
        holds forwards of the epochs up to ``epoch``; per peer, the records of them
        forwarded so far. None if not serving."""
        if not self._serving(job_id):
            return None
        return self.logic.prepare_checkpoint(epoch)

    async def checkpoint(self, job_id: str, epoch: int, expected: int, timeout_s: float) -> Any:
        """Phase two: once the ``expected`` records forwarded here of the epochs up to
        ``epoch`` have arrived, this reducer's share of the checkpoint
        (:meth:`~dpa.logic.ReducerLogic.checkpoint`: state, records, pending batches).
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


def _ready(ref: Any) -> bool:
    ready, _ = ray.wait([ref], timeout=0, fetch_local=False)
    return bool(ready)


@ray.remote(num_cpus=0)
class BalancerActor(_JobMember):
    """Thin shell over :class:`~dpa.logic.BalancerLogic`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.logic: BalancerLogic | None = None

    async def start_job(self, plan: JobPlan, snapshot: Any, handles: Any, job_id: str | None = None,
                        resume: bool = False) -> Any:
        """Starts serving ``job_id`` (default ``plan.job_id``). With ``resume`` (a job
        recovering from a failure) a balancer that survived keeps its planner, event log
        and published snapshot; a new one continues from ``snapshot`` (the checkpoint's)
        if the policy's planner can. Returns the snapshot the job's members start from.

        ``handles`` is ``(mappers, the job's reducers, coordinator)`` or :data:`PEERS_UNCHANGED`.
        """
        mappers, reducers, coordinator = self._peers(handles)
        keep = resume and self.logic is not None and self.logic.plan.job_id == plan.job_id
        self.job_id = job_id or plan.job_id
        if not keep:
            self.logic = BalancerLogic(plan, snapshot, resume=resume)
            self.t0 = time.monotonic()
            self.exported = 0
        self.plan = plan
        self.targets = list(mappers) + list(reducers)
        self.coordinator = coordinator
        self.running = True
        self.fresh = asyncio.Event()
        if self.logic.rule is not None:
            metric("dpa_reducers").set(len(self.logic.active_slots), tags={"job_id": plan.job_id})
        return self.logic.snapshot

    def _on_abort(self) -> None:
        self.running = False
        self.fresh.set()

    @quiet_method
    async def report(self, job_id: str, reducer: int, queue_length: int, version: int, keys: Any = None,
                     backlog_s: float | None = None) -> None:
        if self._serving(job_id):
            self.logic.report(reducer, queue_length, version, keys, backlog_s)
            self.fresh.set()

    @quiet_method
    async def forecast(self, job_id: str, mapper: int, hashes: Any, counts: Any, total: int) -> Any:
        """A mapper's key counts of its first block (:meth:`~dpa.logic.BalancerLogic.forecast`):
        publishes what the policy makes of them; returns the snapshot to route under."""
        if not self._serving(job_id) or not self.running:
            return None
        published = self.logic.forecast(mapper, hashes, counts, total, time.monotonic() - self.t0)
        self._publish(job_id, published)
        return self.logic.snapshot

    async def snapshot(self, job_id: str) -> Any:
        return self.logic.snapshot if self._serving(job_id) else None

    async def input_done(self, job_id: str) -> None:
        """Every input record is in a reducer's queue (:meth:`~dpa.logic.BalancerLogic.on_input_done`)."""
        if self._serving(job_id):
            self.logic.on_input_done()

    def _export_events(self) -> None:
        job = {"job_id": self.plan.job_id}
        for event in self.logic.events[self.exported:]:
            metric("dpa_rebalances").inc(1, tags={**job, "policy": self.plan.policy.name, "action": event.action})
        self.exported = len(self.logic.events)
        metric("dpa_ring_version").set(self.logic.snapshot.version, tags=job)

    async def serve(self, job_id: str) -> None:
        if not self._serving(job_id):
            return
        self.task = asyncio.current_task()
        self._export_events()
        fresh = self.fresh  # this job's: the next job's start_job makes a new one
        while self.running and self._serving(job_id):
            await asyncio.sleep(self.plan.lb_interval_s)
            await fresh.wait()  # no new report: nothing to sample or decide on
            fresh.clear()
            # Stopped, or already serving the next job: this loop must not tick (and publish
            # under its own, stale job id) on the next job's logic.
            if not self.running or not self._serving(job_id):
                break
            instruction = self.logic.tick(time.monotonic() - self.t0)
            if isinstance(instruction, ScaleOut):
                instruction = await self._scale_out(job_id, instruction)
            self._publish(job_id, instruction)

    def _publish(self, job_id: str, published: Publish | None) -> None:
        """Exports new events; sends a published snapshot to every mapper and reducer."""
        self._export_events()
        if published is not None and self._serving(job_id):
            for target in self.targets:
                target.update_ring.remote(job_id, published.snapshot)

    async def _scale_out(self, job_id: str, instruction: ScaleOut) -> Any:
        """Has the coordinator start the reducers, then gives them tokens (or logs why not)."""
        try:
            started, handles, why = await self.coordinator.scale_out.remote(
                job_id, list(instruction.slots), self.plan, self.logic.snapshot)
        except Exception as exc:  # (the coordinator is on the driver's node: a run ending)
            started, handles, why = [], [], describe(exc)
        self.targets.extend(handles)
        published = self.logic.scaled_out(time.monotonic() - self.t0, started, why)
        metric("dpa_reducers").set(len(self.logic.active_slots), tags={"job_id": self.plan.job_id})
        return published

    async def stop(self, job_id: str) -> tuple[list[Any], Any, list[Any], list[Any]]:
        """Stops balancing; returns the event log, the final snapshot, the timeline and
        the scaling log."""
        self.running = False
        self.fresh.set()
        self._export_events()
        self.logic.sample(time.monotonic() - self.t0)
        if self._serving(job_id):
            self.job_id, self.task = None, None  # reports that arrive later are dropped
        return self.logic.events, self.logic.snapshot, self.logic.timeline, self.logic.scaling


async def await_ref(ref: Any) -> Any:
    return await ref
