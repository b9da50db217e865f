"""Ray actor shells over the state machines of :mod:`dpa.logic`.

Actors (all async, ``num_cpus=0`` so a laptop can host many):

* ``CoordinatorActor`` creates the balancer, reducers and mappers (it owns them), hands
  input blocks to mappers when they ask, decides termination by conservation, drives the
  partitioned final merge, and fails the job if any actor raises or dies.
* ``MapperActor`` pulls blocks, maps and routes them with its local ring snapshot, and
  pushes per-reducer batches (waiting while the target queue is full: backpressure).
* ``ReducerActor`` owns its bounded queue, consumes it chunk by chunk, forwards records
  it no longer owns, pays the configured per-record cost, and reports its queue length.
* ``BalancerActor`` evaluates the policy every ``lb_interval_s`` and publishes new ring
  snapshots to every mapper and reducer.

The actors are kept warm between jobs of one driver (starting ten Python processes costs
seconds on a small machine); :func:`shutdown_pool` releases them, and any failure tears
all of them down.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import ray

from dpa.errors import JobFailedError
from dpa.logic import BalancerLogic, CoordinatorLogic, MapperLogic, ReducerLogic
from dpa.plan import ArrowRefs, JobPlan, ParquetPiece, empty_input_table
from dpa.records import compact
from dpa.runtime_local import DRIVER_PROGRESS_INTERVAL_S, RunOutput
from dpa.telemetry import ReducerTelemetry, metric

logger = logging.getLogger(__name__)

NAMESPACE = "dpa"
#: A busy reducer tells the coordinator its processed count at most this often (an idle
#: one at once: that is what termination waits for).
PROGRESS_INTERVAL_S = 0.1


def _as_table(block: Any) -> pa.Table:
    if isinstance(block, pa.Table):
        return block
    if isinstance(block, ParquetPiece):
        return block.read()
    import pandas as pd

    if isinstance(block, pd.DataFrame):
        return pa.Table.from_pandas(block, preserve_index=False)
    raise TypeError(f"unsupported block type {type(block).__name__}")


def _describe(exc: BaseException) -> str:
    """The innermost useful message of a (possibly Ray-wrapped) exception."""
    cause = getattr(exc, "cause", None)
    if cause is not None and cause is not exc:
        return _describe(cause)
    return f"{type(exc).__name__}: {exc}"


class _Failure(Exception):
    def __init__(self, actor: str, exc: BaseException, key: Any = None):
        super().__init__(f"{actor}: {_describe(exc)}")
        self.actor = actor
        self.key = key
        self.exc = exc

    def __reduce__(self):
        return (_Failure, (self.actor, self.exc, self.key))


@ray.remote(num_cpus=0)
class MapperActor:
    """Thin shell over :class:`~dpa.logic.MapperLogic`."""

    def __init__(self, mapper_id: int, name: str) -> None:
        self.mapper_id = mapper_id
        self.name = name
        self.logic: MapperLogic | None = None

    async def start_job(self, plan: JobPlan, snapshot: Any, coordinator: Any, reducers: list[Any]) -> None:
        self.logic = MapperLogic(self.mapper_id, plan, snapshot)
        self.tags = {"job_id": plan.job_id, "mapper": str(self.mapper_id)}
        self.coordinator = coordinator
        self.reducers = reducers

    async def ping(self) -> bool:
        return True

    async def update_ring(self, job_id: str, snapshot: Any) -> None:
        if self.logic is not None and job_id == self.logic.plan.job_id:  # drop a finished job's late news
            self.logic.on_snapshot(snapshot)

    async def run(self) -> int:
        logic = self.logic
        pending = self.coordinator.next_block.remote(self.mapper_id)
        while True:
            item = await pending
            if item is None:
                break
            pending = self.coordinator.next_block.remote(self.mapper_id)  # prefetch
            ref, row_slice = item[0]
            block = _as_table(await ref)
            if row_slice is not None:
                block = block.slice(row_slice[0], row_slice[1] - row_slice[0])
            try:
                routed = logic.map_block(block)
            except Exception as exc:
                raise _Failure(self.name, exc, getattr(exc, "key", None)) from exc
            version = logic.snapshot.version
            await asyncio.gather(*[self.reducers[r].push.remote(b, version) for r, b in routed])
            emitted = sum(b.num_rows for _, b in routed)
            if emitted:
                metric("dpa_records_emitted").inc(emitted, tags=self.tags)
        await self.coordinator.mapper_done.remote(self.mapper_id, logic.emitted)
        return logic.emitted


@ray.remote(num_cpus=0)
class ReducerActor:
    """Thin shell over :class:`~dpa.logic.ReducerLogic` (queue, forwarding, state)."""

    def __init__(self, reducer_id: int, name: str) -> None:
        self.reducer_id = reducer_id
        self.name = name
        self.logic: ReducerLogic | None = None

    async def start_job(self, plan: JobPlan, snapshot: Any, peers: list[Any], balancer: Any, coordinator: Any) -> None:
        self.logic = ReducerLogic(self.reducer_id, plan, snapshot)
        self.plan = plan
        self.peers = peers
        self.balancer = balancer
        self.coordinator = coordinator
        self.wake = asyncio.Event()
        self.room = asyncio.Event()
        self.room.set()
        self.stopping = False
        self.inflight: list[Any] = []
        self.last_sent: tuple[int, int, int] | None = None
        self.last_report = 0.0
        self.telemetry = ReducerTelemetry(plan.job_id, self.reducer_id)
        self.last_progress = 0.0
        self.last_progress_value = -1

    # -- inputs ---------------------------------------------------------------------
    async def push(self, batch: pa.Table, version: int, forwarded: bool = False) -> None:
        logic = self.logic
        if version > logic.snapshot.version:
            self._adopt(await self.balancer.snapshot.remote())
        if not forwarded:
            while not logic.has_room():
                self.room.clear()
                await self.room.wait()
        self._send(logic.enqueue(batch, forwarded, version))
        self.wake.set()
        self._report()

    async def ping(self) -> bool:
        return True

    async def update_ring(self, job_id: str, snapshot: Any) -> None:
        if self.logic is not None and job_id == self.plan.job_id:  # drop a finished job's late news
            self._adopt(snapshot)

    def _adopt(self, snapshot: Any) -> None:
        self._send(self.logic.on_snapshot(snapshot))
        self._report(force=True)

    def _send(self, forwards: list[tuple[int, pa.Table]]) -> None:
        version = self.logic.snapshot.version
        for dest, batch in forwards:
            self.inflight.append(self.peers[dest].push.remote(batch, version, True))
        if len(self.inflight) > 64:
            self.inflight = [r for r in self.inflight if not _ready(r)]

    def _report(self, force: bool = False) -> None:
        """Reports the queue length to the balancer (every ``report_interval_s``) and progress
        to the coordinator (when the queue is empty — what termination needs — or every
        ``PROGRESS_INTERVAL_S``), skipping reports that would repeat the last one."""
        logic = self.logic
        now = time.monotonic()
        if not force and now - self.last_report < self.plan.report_interval_s:
            return
        sent = (logic.queued, logic.processed, logic.snapshot.version)
        if sent == self.last_sent and not logic.has_key_stats:
            return
        self.last_sent, self.last_report = sent, now
        self.balancer.report.remote(self.plan.job_id, self.reducer_id, logic.queued, logic.snapshot.version,
                                    logic.take_key_stats())
        if logic.queued == 0 or now - self.last_progress >= PROGRESS_INTERVAL_S:
            if logic.processed != self.last_progress_value:
                self.last_progress, self.last_progress_value = now, logic.processed
                self.coordinator.progress.remote(self.plan.job_id, self.reducer_id, logic.processed)
        counts = getattr(logic.snapshot, "token_counts", None)
        self.telemetry.update(logic.queued, logic.processed, logic.forwarded,
                              None if counts is None else counts[self.reducer_id])

    async def _reporter(self) -> None:
        while not self.stopping:
            await asyncio.sleep(self.plan.report_interval_s)
            self._report(force=True)

    # -- processing -----------------------------------------------------------------
    async def serve(self) -> dict[str, int]:
        logic = self.logic
        reporter = asyncio.ensure_future(self._reporter())
        try:
            while True:
                chunk = logic.take_chunk()
                if chunk is None:
                    self.room.set()
                    self._report(force=True)
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
                    key = getattr(logic.state, "current_key", None)
                    raise _Failure(self.name, exc, key) from exc
                self._report()
                await asyncio.sleep(0)
        finally:
            self.stopping = True
            reporter.cancel()
        if self.inflight:
            await asyncio.gather(*self.inflight)
        return logic.counters()

    async def stop(self) -> None:
        self.stopping = True
        self.wake.set()
        self.last_sent = None
        self._report(force=True)

    # -- final merge ----------------------------------------------------------------
    async def exchange(self) -> None:
        parts = self.logic.partition_state()
        refs = []
        for dest, part in enumerate(parts):
            if part is None:
                continue
            if dest == self.reducer_id:
                self.logic.merge_partial(part)
            else:
                refs.append(self.peers[dest].accept_partial.remote(part))
        await asyncio.gather(*refs)

    async def accept_partial(self, part: Any) -> None:
        self.logic.merge_partial(part)

    async def finalize(self) -> pa.Table:
        try:
            table = self.logic.finalize()
            if table is None:
                table = self.logic.state.empty_result(empty_input_table(self.plan).schema)
            return table
        except Exception as exc:
            raise _Failure(self.name, exc, getattr(self.logic.state, "current_key", None)) from exc


def _ready(ref: Any) -> bool:
    ready, _ = ray.wait([ref], timeout=0, fetch_local=False)
    return bool(ready)


@ray.remote(num_cpus=0)
class BalancerActor:
    """Thin shell over :class:`~dpa.logic.BalancerLogic`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.logic: BalancerLogic | None = None

    async def start_job(self, plan: JobPlan, snapshot: Any, mappers: list[Any], reducers: list[Any]) -> None:
        self.logic = BalancerLogic(plan, snapshot)
        self.plan = plan
        self.targets = list(mappers) + list(reducers)
        self.running = True
        self.exported = 0
        self.t0 = time.monotonic()
        self.fresh = asyncio.Event()

    async def ping(self) -> bool:
        return True

    async def report(self, job_id: str, reducer: int, queue_length: int, version: int, keys: Any = None) -> None:
        if self.logic is not None and job_id == self.plan.job_id:
            self.logic.report(reducer, queue_length, version, keys)
            self.fresh.set()

    async def snapshot(self) -> Any:
        return self.logic.snapshot

    def _export_events(self) -> None:
        job = {"job_id": self.plan.job_id}
        for event in self.logic.events[self.exported:]:
            metric("dpa_rebalances").inc(1, tags={**job, "policy": self.plan.policy.name, "action": event.action})
        self.exported = len(self.logic.events)
        metric("dpa_ring_version").set(self.logic.snapshot.version, tags=job)

    async def serve(self) -> None:
        self.exported = 0
        self._export_events()
        while self.running:
            await asyncio.sleep(self.plan.lb_interval_s)
            await self.fresh.wait()  # no new report: nothing to sample or decide on
            self.fresh.clear()
            new = self.logic.tick(time.monotonic() - self.t0)
            self._export_events()
            if new is not None:
                for target in self.targets:
                    target.update_ring.remote(self.plan.job_id, new)

    async def stop(self) -> tuple[list[Any], Any, list[Any]]:
        self.running = False
        self.fresh.set()
        self._export_events()
        self.logic.sample(time.monotonic() - self.t0)
        return self.logic.events, self.logic.snapshot, self.logic.timeline


@ray.remote(num_cpus=0)
class CoordinatorActor:
    """Creates and owns the job's actors; hands out blocks; decides termination."""

    def __init__(self, pool_id: str, num_mappers: int, num_reducers: int) -> None:
        self.pool_id = pool_id
        opts = {"namespace": NAMESPACE, "lifetime": None}
        self.balancer = BalancerActor.options(name=f"dpa:{pool_id}:balancer", **opts).remote(f"dpa:{pool_id}:balancer")
        self.reducers = [
            ReducerActor.options(name=f"dpa:{pool_id}:reducer-{i}", **opts).remote(i, f"dpa:{pool_id}:reducer-{i}")
            for i in range(num_reducers)
        ]
        self.mappers = [
            MapperActor.options(name=f"dpa:{pool_id}:mapper-{i}", **opts).remote(i, f"dpa:{pool_id}:mapper-{i}")
            for i in range(num_mappers)
        ]
        self.logic: CoordinatorLogic | None = None
        self.job_id = ""

    async def handles(self) -> tuple[Any, list[Any], list[Any]]:
        # Round-trip every actor so callers know the pool is up.
        await asyncio.gather(*[a.ping.remote() for a in [self.balancer, *self.reducers, *self.mappers]])
        return self.balancer, self.reducers, self.mappers

    # -- block hand-out (driver -> coordinator -> mappers) --------------------------
    async def offer(self, refs: list[Any]) -> bool:
        """Queues input block refs; waits while too many are pending. False once failed."""
        async with self.cond:
            await self.cond.wait_for(lambda: len(self.blocks) < self.max_pending or self.failed is not None)
            if self.failed is not None:
                return False
            self.blocks.extend(refs)
            self.logic.blocks_offered += len(refs)
            self.cond.notify_all()
        return True

    async def input_done(self) -> None:
        async with self.cond:
            self.logic.input_done = True
            self.cond.notify_all()
        self._check()

    async def next_block(self, mapper: int) -> list[Any] | None:
        async with self.cond:
            await self.cond.wait_for(lambda: self.blocks or self.logic.input_done or self.failed is not None)
            if self.failed is not None or not self.blocks:
                return None
            ref = self.blocks.popleft()
            self.logic.on_block_taken(mapper)
            if self.logic.input_done:
                taken = sum(self.logic.blocks_per_mapper)
                metric("dpa_job_progress").set(taken / max(1, taken + len(self.blocks)), tags=self.job_tags)
            self.cond.notify_all()
            return [ref]  # a (block ref, row slice or None) pair, wrapped so Ray does not resolve it

    async def mapper_done(self, mapper: int, emitted: int) -> None:
        self.logic.on_mapper_done(mapper, emitted)
        self._check()

    async def processed_total(self) -> int:
        """Records processed by all reducers so far (the driver's progress callback)."""
        return sum(self.logic.processed) if self.logic is not None else 0

    async def progress(self, job_id: str, reducer: int, processed: int) -> None:
        if self.logic is not None and job_id == self.job_id:
            self.logic.on_progress(reducer, processed)
            metric("dpa_job_records_processed").set(sum(self.logic.processed), tags=self.job_tags)
            self._check()

    def _check(self) -> None:
        if self.logic.complete():
            self.done.set()

    # -- the job --------------------------------------------------------------------
    async def prepare_job(self, plan: JobPlan, max_pending: int) -> None:
        """Resets the per-job state; the driver waits for it before offering blocks.

        Async actor methods do not run in submission order, so an ``offer`` sent right
        after ``run_job`` could otherwise run first and land in the previous job's deque.
        """
        self.job_id = plan.job_id
        self.logic = CoordinatorLogic(plan.num_mappers, plan.num_reducers)
        self.job_tags = {"job_id": plan.job_id}
        metric("dpa_job_progress").set(0.0, tags=self.job_tags)
        self.blocks: deque[Any] = deque()
        self.cond = asyncio.Condition()
        self.done = asyncio.Event()
        self.failed: str | None = None
        self.max_pending = max_pending

    async def run_job(self, plan: JobPlan, snapshot: Any) -> dict[str, Any]:
        me = ray.get_runtime_context().current_actor
        await asyncio.gather(
            self.balancer.start_job.remote(plan, snapshot, self.mappers, self.reducers),
            *[r.start_job.remote(plan, snapshot, self.reducers, self.balancer, me) for r in self.reducers],
            *[m.start_job.remote(plan, snapshot, me, self.reducers) for m in self.mappers],
        )
        self.started = True
        tasks = {}
        for i, r in enumerate(self.reducers):
            tasks[asyncio.ensure_future(_await(r.serve.remote()))] = f"dpa:{self.pool_id}:reducer-{i}"
        for i, m in enumerate(self.mappers):
            tasks[asyncio.ensure_future(_await(m.run.remote()))] = f"dpa:{self.pool_id}:mapper-{i}"
        tasks[asyncio.ensure_future(_await(self.balancer.serve.remote()))] = f"dpa:{self.pool_id}:balancer"
        done_waiter = asyncio.ensure_future(self.done.wait())
        pending = set(tasks) | {done_waiter}
        try:
            while not self.done.is_set():
                finished, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for fut in finished:
                    if fut is not done_waiter and fut.exception() is not None:
                        raise self._fail(tasks[fut], fut.exception())
            await asyncio.gather(*[r.stop.remote() for r in self.reducers])
            counters = await asyncio.gather(*[t for t, name in tasks.items() if "reducer" in name])
            taken = sum(self.logic.blocks_per_mapper)
            if taken != self.logic.blocks_offered:  # conservation of input blocks: never lose one silently
                raise RuntimeError(f"{self.logic.blocks_offered} input blocks offered but {taken} taken by mappers")
            metric("dpa_job_progress").set(1.0, tags=self.job_tags)
            events, final, timeline = await self.balancer.stop.remote()
            merged = plan.policy.splits_keys or final.version != snapshot.version
            if merged:
                await asyncio.gather(*[r.exchange.remote() for r in self.reducers])
        except (_Failure, JobFailedError):
            raise
        except Exception as exc:
            raise self._fail("coordinator", exc) from exc
        finally:
            async with self.cond:
                self.cond.notify_all()
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

    def _fail(self, actor: str, exc: BaseException) -> JobFailedError:
        cause = getattr(exc, "cause", exc)
        if isinstance(cause, _Failure):
            actor, message, key = cause.actor, str(cause), cause.key
        else:
            message, key = f"{actor}: {_describe(exc)}", None
        self.failed = message
        where = f" while processing key {key!r}" if key is not None else ""
        return JobFailedError(f"dpa job failed in {message}{where}", actor=actor, key=key)


async def _await(ref: Any) -> Any:
    return await ref


# ------------------------------------------------------------------------------ pool
@dataclass
class _Pool:
    pool_id: str
    session: str
    num_mappers: int
    num_reducers: int
    coordinator: Any
    balancer: Any
    reducers: list[Any]
    mappers: list[Any]

    def all_actors(self) -> list[Any]:
        return [self.coordinator, self.balancer, *self.reducers, *self.mappers]


_POOL: _Pool | None = None


#: Ray's default metrics report interval is 10 s; dpa asks for 1 s (Ray's minimum is 1 s)
#: when it starts Ray itself. For a Ray you start: ``ray start --head
#: --system-config='{"metrics_report_interval_ms": 1000}'`` or
#: ``ray.init(_system_config={"metrics_report_interval_ms": 1000})``.
METRICS_REPORT_INTERVAL_MS = 1000


def ensure_ray(**init_kwargs: Any) -> Any:
    """Starts a local Ray if none is running in this process (reuses one that is).

    Returns ``ray.init``'s ``RayContext`` (``.dashboard_url``) when it started Ray, else None.
    """
    if not ray.is_initialized():
        options: dict[str, Any] = {
            "include_dashboard": False,
            "logging_level": logging.WARNING,
            "_system_config": {"metrics_report_interval_ms": METRICS_REPORT_INTERVAL_MS},
        }
        options.update(init_kwargs)
        return ray.init(**options)
    return None


def _get_pool(num_mappers: int, num_reducers: int, reuse: bool) -> _Pool:
    global _POOL
    session = ray.get_runtime_context().get_job_id()
    pool = _POOL
    if reuse and pool is not None and pool.session == session and (pool.num_mappers, pool.num_reducers) == (num_mappers, num_reducers):
        return pool
    shutdown_pool()
    pool_id = uuid.uuid4().hex[:8]
    coord = CoordinatorActor.options(name=f"dpa:{pool_id}:coordinator", namespace=NAMESPACE).remote(
        pool_id, num_mappers, num_reducers)
    balancer, reducers, mappers = ray.get(coord.handles.remote())
    _POOL = _Pool(pool_id, session, num_mappers, num_reducers, coord, balancer, reducers, mappers)
    return _POOL


def shutdown_pool() -> None:
    """Kills the warm actors, if any."""
    global _POOL
    pool, _POOL = _POOL, None
    if pool is None or not ray.is_initialized():
        return
    for actor in pool.all_actors():
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # already dead
            pass


def _report_progress(coord: Any, progress: Any) -> None:
    try:
        done = ray.get(coord.processed_total.remote(), timeout=10)
    except ray.exceptions.RayError:  # the job's own error is raised by run_ray
        return
    progress(done)


def _wait_with_progress(job: Any, coord: Any, progress: Any, started: float, timeout_s: float | None) -> None:
    """Waits until the job ends (or its timeout), reporting progress in between."""
    while True:
        wait = DRIVER_PROGRESS_INTERVAL_S
        if timeout_s is not None:
            wait = min(wait, timeout_s - (time.perf_counter() - started))
            if wait <= 0:
                return
        ready, _ = ray.wait([job], timeout=wait, fetch_local=False)
        if ready:
            return
        _report_progress(coord, progress)


def _feed(pool: _Pool, blocks: Any, dataset: Any, job: Any, progress: Any = None) -> None:
    """Hands input blocks to the coordinator (bounded by its pending limit)."""
    coord = pool.coordinator
    last = time.monotonic()
    if isinstance(dataset, ArrowRefs):
        items = ((ref, None) for ref in dataset.refs)
    elif isinstance(dataset, tuple):  # ParquetPiece descriptions: each mapper reads its own
        items = ((ray.put(piece), None) for piece in dataset)
    elif dataset is not None:
        # A bundle's blocks may come with row slices that must be honoured.
        items = (
            (ref, None if sl is None else (sl.start_offset, sl.end_offset))
            for bundle in dataset.iter_internal_ref_bundles()
            for ref, sl in zip(bundle.block_refs, bundle.slices)
        )
    else:
        items = ((ray.put(compact(block)), None) for block in blocks)
    for ref, row_slice in items:
        if not ray.get(coord.offer.remote([(ref, row_slice)])):
            return
        if progress is not None and time.monotonic() - last >= DRIVER_PROGRESS_INTERVAL_S:
            last = time.monotonic()
            _report_progress(coord, progress)
    ray.get(coord.input_done.remote())


def run_ray(plan: JobPlan, blocks: Any, dataset: Any, config: Any, progress: Any = None) -> RunOutput:
    """Runs ``plan`` on Ray actors; returns per-reducer result refs (owned by the driver).

    ``progress(records_processed)`` is called about every ``DRIVER_PROGRESS_INTERVAL_S``.
    """
    started = time.perf_counter()
    ensure_ray()
    pool = _get_pool(plan.num_mappers, plan.num_reducers, config.reuse_actors)
    snapshot = plan.policy.initial_snapshot(plan.num_reducers)
    ray.get(pool.coordinator.prepare_job.remote(plan, 2 * plan.num_mappers))
    job = pool.coordinator.run_job.remote(plan, snapshot)
    ok = False
    try:
        try:
            _feed(pool, blocks if blocks is not None else (), dataset, job, progress)
        except ray.exceptions.RayError:
            pass  # the job's own error (below) says what went wrong
        except Exception as exc:  # the source itself raised
            raise JobFailedError(f"reading the input failed: {type(exc).__name__}: {exc}") from exc
        if progress is not None:
            _wait_with_progress(job, pool.coordinator, progress, started, config.timeout_s)
        remaining = None if config.timeout_s is None else max(0.0, config.timeout_s - (time.perf_counter() - started))
        try:
            summary = ray.get(job, timeout=remaining)
        except ray.exceptions.GetTimeoutError as exc:
            raise JobFailedError(f"dpa job did not finish within timeout_s={config.timeout_s}; its actors were stopped") from exc
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if isinstance(getattr(exc, "cause", None), JobFailedError) else None
            if cause is not None:
                raise JobFailedError(str(cause), actor=cause.actor, key=cause.key) from None
            raise JobFailedError(f"dpa job failed: {_describe(exc)}") from exc
        except ray.exceptions.RayActorError as exc:
            raise JobFailedError(f"dpa coordinator died: {exc}") from exc
        refs = [r.finalize.remote() for r in pool.reducers]
        ray.wait(refs, num_returns=len(refs), fetch_local=False)
        ok = True
    finally:
        if not ok or not config.reuse_actors:
            if not ok:
                logger.warning("dpa job failed; tearing down its actors")
            shutdown_pool()
    return RunOutput(
        tables=[], processed=summary["processed"], forwarded=summary["forwarded"], emitted=summary["emitted"],
        blocks_per_mapper=summary["blocks_per_mapper"], events=summary["events"],
        final_snapshot=summary["final_snapshot"], merged=summary["merged"], timeline=summary["timeline"],
        wall_time_s=time.perf_counter() - started, peak_queue=summary["peak_queue"], arrow_refs=refs,
    )
