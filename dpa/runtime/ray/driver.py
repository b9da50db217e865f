"""Running a job on Ray actors: the driver's side.

:func:`run_ray` checks out a warm actor pool (:mod:`dpa.runtime.ray.pool`), has its coordinator
repair dead members and prepare the job, starts the job, feeds it the input blocks
(bounded: the coordinator holds a few pending blocks, so the driver feels backpressure),
waits for the end, and hands back the reducers' result refs. The actors themselves are in
:mod:`dpa.runtime.ray`.

A new pool's coordinator needs a process of its own, which Ray starts after the hosts'
(it prestarts one worker process per CPU): the first job would wait for it. So the driver
starts that job itself (:func:`open_job`): it runs the coordinator's machine up to the
first items handed out, starts the reducers and mappers with them, and sends the machine
on to the coordinator, which takes over when its process is up. The mappers route their
first items meanwhile.

Every wait has the job's deadline (``JobConfig.timeout_s``), in every phase: starting the
actors, feeding, running, collecting. When a job fails or times out its actors are told to
abort it; a pool that acknowledges goes back to the warm set for the next job, one that
does not is killed.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import pyarrow as pa
import ray

from dpa.aggregates.dense import groups_by_value
from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.coordinator_machine import CoordinatorMachine
from dpa.engine.output import DRIVER_PROGRESS_INTERVAL_S, RunOutput
from dpa.engine.plan import JobPlan
from dpa.errors import DPAError, JobFailedError
from dpa.input.records import compact
from dpa.input.sources import ArrowRefs
from dpa.runtime.ray.blocks import dataset_items
from dpa.runtime.ray.member import describe
from dpa.runtime.ray.members import member_starts
from dpa.runtime.ray.outbox import loops_per_process, per_process
from dpa.runtime.ray.pool import Pool, acquire, release, shutdown_pools
from dpa.runtime.ray.session import METRICS_REPORT_INTERVAL_MS, ensure_ray

logger = logging.getLogger(__name__)

__all__ = ["run_ray", "ensure_ray", "shutdown_pool", "METRICS_REPORT_INTERVAL_MS"]

#: How long the driver waits for a failed job's actors to acknowledge the abort before it
#: kills the pool instead of keeping it warm.
CANCEL_WAIT_S = 1.0
#: Input blocks the coordinator takes ahead per mapper; it holds back the driver's next
#: offer until its machine hands some out (back-pressure on the driver).
MAX_PENDING = 2
#: Longest single wait, so that deadlines and progress are checked regularly.
_POLL_S = 0.25


def shutdown_pool() -> None:
    """Kills the warm actors, if any (``dpa.shutdown()``)."""
    if ray.is_initialized():
        shutdown_pools()


class _Deadline:
    """The job's time limit (``timeout_s``; None = no limit)."""

    def __init__(self, timeout_s: float | None) -> None:
        self.timeout_s = timeout_s
        self.end = None if timeout_s is None else time.perf_counter() + timeout_s

    def remaining(self, cap: float | None = None) -> float | None:
        if self.end is None:
            return cap
        left = max(0.0, self.end - time.perf_counter())
        return left if cap is None else min(cap, left)

    def expired(self) -> bool:
        return self.end is not None and time.perf_counter() >= self.end

    def error(self, phase: str) -> JobFailedError:
        return JobFailedError(f"dpa job did not finish within timeout_s={self.timeout_s} (it was {phase}); "
                              "its actors were stopped")


def _get(ref: Any, deadline: _Deadline, phase: str) -> Any:
    """``ray.get`` bounded by the deadline; Ray's errors become :class:`JobFailedError`."""
    try:
        return ray.get(ref, timeout=deadline.remaining())
    except ray.exceptions.GetTimeoutError:
        raise deadline.error(phase) from None
    except ray.exceptions.RayTaskError as exc:
        raise _task_error(exc) from exc


def _task_error(exc: BaseException) -> JobFailedError:
    """A failed actor call as :class:`JobFailedError` (the job's own error when it has one)."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, JobFailedError):
        return JobFailedError(str(cause), actor=cause.actor, key=cause.key)
    message = describe(exc)
    if "ModuleNotFoundError" in message or "No module named" in message:
        message += (" — the actors could not load your code: define map_fn, key and reducer classes in a module "
                    "the Ray workers can import (or in the script itself), or ship it with ray.init(runtime_env=...)")
    return JobFailedError(f"dpa job failed: {message}")


def _start(plan: JobPlan, reuse: bool, deadline: _Deadline) -> Pool:
    """Checks out a pool, repairs it and prepares the job; a pool whose coordinator died is
    replaced by a new one (once)."""
    for attempt in range(2):
        pool = acquire(plan.num_mappers, plan.num_reducers, reuse and attempt == 0,
                       plan.active_reducers or None, plan.reducer_num_cpus,
                       import_arrow_engine=not groups_by_value(plan.key_types),
                       warm_group_apply=plan.applies_groups)
        if pool.fresh:  # (started with the job: open_job)
            return pool
        try:
            replaced = pool.adopt(_get(pool.coordinator.prepare_job.remote(plan, MAX_PENDING * plan.num_mappers,
                                                                       pool.members_key()),
                                       deadline, "starting its actors"))
        except ray.exceptions.RayActorError:
            logger.warning("dpa pool %s lost its coordinator; starting a new pool", pool.pool_id)
            release(pool, keep=False)
            continue
        except BaseException:
            release(pool, keep=False)
            raise
        if replaced:
            logger.warning("dpa pool %s: replaced dead members %s", pool.pool_id, replaced)
        return pool
    raise JobFailedError("could not start dpa's actors: the coordinator died twice while starting")


def open_job(pool: Pool, plan: JobPlan, snapshot: Any, items: Any, deadline: _Deadline) -> Any:
    """Starts a new pool's first job before its coordinator's process is up; returns the
    ref of the coordinator's :meth:`~dpa.runtime.ray.coordinator.Coordinator.run_job`.

    The job's :class:`~dpa.engine.coordinator_machine.CoordinatorMachine` hands one of the
    first input ``items`` (an iterator, read as far as there are mappers) to each mapper
    here. Every reducer and mapper is started (each mapper with its item), and once all
    have started (a push must not reach a reducer before its start), their loops; the
    coordinator takes the machine and the loops over. The members' calls to the
    coordinator wait there until it has.

    Raises:
        JobFailedError: A member could not start (it could not load the job's code, or
            died), or the deadline passed first.
    """
    first = [item for _, item in zip(range(plan.num_mappers), items)]
    slots = range(plan.active_reducers or plan.num_reducers)
    machine = CoordinatorMachine(plan, time.monotonic, slots, pool.reducer_num_cpus,
                                 max_pending=MAX_PENDING * plan.num_mappers)
    machine.handle(ev.JobStarted(snapshot), ev.RunStarted(0.0))
    given: dict[int, list[Any]] = {}
    for ins in machine.handle(ev.BlocksOffered(first), *[ev.BlockWanted(m) for m in range(len(first))]):
        if not isinstance(ins, op.GiveBlock):
            raise TypeError(f"the driver cannot carry out {ins!r} while it opens a job")
        given[ins.mapper] = [ins.item, ins.epoch, ins.token]
    coord, balancer, reducers, mappers = pool.coordinator, pool.balancer, pool.reducers, pool.mappers
    job_id = plan.job_id
    pool.fresh = False
    starts = member_starts(plan, snapshot, job_id, machine.checkpoint, machine.job_slots, reducers, mappers, balancer,
                           coord, firsts=given)
    try:
        _get(starts, deadline, "starting its actors")
    except ray.exceptions.RayActorError as exc:
        raise JobFailedError(f"dpa actors died while starting: {describe(exc).splitlines()[0]}") from exc
    loops = loops_per_process(job_id, [*[(f"reducer-{i}", reducers[i]) for i in machine.job_slots],
                                       *[(f"mapper-{i}", m) for i, m in enumerate(mappers)]])
    return coord.run_job.remote(plan, snapshot, pool.members_key(), (machine, loops))


def _input_items(blocks: Any, dataset: Any, columns: set[str] | None = None, num_mappers: int = 1,
                 batch_size: int | None = None) -> Any:
    """``(block ref, row slice or None)`` for every input block; a block read on the driver
    goes to the object store with only ``columns`` (None: all); a Ray Dataset's blocks may
    go in runs (:func:`~dpa.runtime.ray.blocks.dataset_items`)."""
    if isinstance(dataset, ArrowRefs):
        return ((ref, None) for ref in dataset.refs)
    if isinstance(dataset, tuple):  # ParquetPiece descriptions: each mapper reads its own
        return ((ray.put(piece), None) for piece in dataset)
    if dataset is not None:
        return dataset_items(dataset, num_mappers, batch_size)
    return ((ray.put(_for_put(_project(block, columns))), None) for block in blocks)


def _project(block: Any, columns: set[str] | None) -> Any:
    """``block`` with only ``columns`` (unread columns need not be copied to the object store)."""
    if columns is None or not isinstance(block, pa.Table) or set(block.column_names) <= columns:
        return block
    return block.select([c for c in block.column_names if c in columns])


def _for_put(block: Any) -> Any:
    """``block`` as it should go to the object store.

    Ray pickles an Arrow table through its own reducer, which writes only the rows of a
    slice, so a slice of a large table (a block of the user's table) goes as it is, without
    a copy first; only columns in several chunks are joined (mappers take one chunk per
    column). With that reducer switched off (``RAY_DISABLE_CUSTOM_ARROW_DATA_SERIALIZATION=1``)
    a slice would carry its parent's whole buffers, so it is copied first.
    """
    if os.environ.get("RAY_DISABLE_CUSTOM_ARROW_DATA_SERIALIZATION", "0") == "1":
        return compact(block)
    if isinstance(block, pa.Table) and all(col.num_chunks == 1 for col in block.columns):
        return block
    return compact(block)


def _until(ref: Any, job: Any, deadline: _Deadline, phase: str, on_wait: Any = None) -> bool:
    """Waits until ``ref`` is ready (True) or the job ended first (False), within the deadline."""
    while True:
        ready, _ = ray.wait([ref, job], num_returns=1, timeout=deadline.remaining(_POLL_S), fetch_local=False)
        if ref in ready:
            return True
        if job in ready:
            return False
        if deadline.expired():
            raise deadline.error(phase)
        if on_wait is not None:
            on_wait()


def _feed(pool: Pool, job_id: str, items: Any, job: Any, deadline: _Deadline, on_wait: Any) -> None:
    """Hands input blocks to the coordinator, bounded by its pending limit."""
    coord = pool.coordinator
    for item in items:
        if deadline.expired():
            raise deadline.error("reading its input")
        offer = coord.offer.remote(job_id, [item])
        if not _until(offer, job, deadline, "feeding its input", on_wait):
            return  # the job ended (failed): its own error says why
        try:
            accepted = ray.get(offer)
        except ray.exceptions.RayActorError:
            return  # the coordinator died with the offer: the job's error names it
        if not accepted:
            return
    done = coord.input_done.remote(job_id)
    _until(done, job, deadline, "feeding its input", on_wait)


def _progress_poller(coord: Any, progress: Any) -> Any:
    """A callable that reports progress at most every ``DRIVER_PROGRESS_INTERVAL_S``."""
    if progress is None:
        return None
    last = [time.monotonic()]

    def poll() -> None:
        if time.monotonic() - last[0] < DRIVER_PROGRESS_INTERVAL_S:
            return
        last[0] = time.monotonic()
        ref = coord.processed_total.remote()
        ready, _ = ray.wait([ref], timeout=1.0, fetch_local=True)
        if ready:
            try:
                progress(ray.get(ref))
            except ray.exceptions.RayError:  # the job's own error is raised by run_ray
                pass

    return poll


def _job_summary(job: Any, deadline: _Deadline, on_wait: Any) -> dict[str, Any]:
    """Waits for the job; its failure becomes :class:`JobFailedError`."""
    while True:
        ready, _ = ray.wait([job], timeout=deadline.remaining(_POLL_S), fetch_local=False)
        if ready:
            break
        if deadline.expired():
            raise deadline.error("running")
        if on_wait is not None:
            on_wait()
    try:
        return ray.get(job)
    except ray.exceptions.RayTaskError as exc:
        raise _task_error(exc) from None
    except ray.exceptions.RayActorError as exc:
        raise JobFailedError(f"dpa coordinator died: {exc}") from exc


def _result_refs(reducers: list[Any], run_id: str) -> list[tuple[Any, Any]]:
    """Per reducer, the refs of its finalized table and of its ``(rows, schema, bytes)``: one
    call per host (:meth:`~dpa.runtime.ray.host.MemberHost.results`, each table an object of
    its own, owned here), not one per reducer."""
    refs: dict[str, tuple[Any, Any]] = {}
    for handle, roles in per_process([(r.role, r) for r in reducers]):
        got = handle.results.options(num_returns=2 * len(roles)).remote(run_id, roles)
        for i, role in enumerate(roles):
            refs[role] = (got[2 * i], got[2 * i + 1])
    return [refs[r.role] for r in reducers]


def _abort(pool: Pool, job_id: str, reason: str) -> bool:
    """Cancels the job on its actors; True if the pool acknowledged (and may be reused)."""
    try:
        ref = pool.coordinator.cancel_job.remote(job_id, reason)
        ready, _ = ray.wait([ref], timeout=CANCEL_WAIT_S, fetch_local=False)
        if not ready:
            return False
        ray.get(ref)
        return True
    except ray.exceptions.RayError:
        return False


def run_ray(plan: JobPlan, blocks: Any, dataset: Any, config: Any, progress: Any = None) -> RunOutput:
    """Runs ``plan`` on Ray actors; returns per-reducer result refs (owned by the driver).

    ``progress(records_processed)`` is called about every ``DRIVER_PROGRESS_INTERVAL_S``.

    Raises:
        JobFailedError: the job failed or timed out; its actors were stopped.
        SchemaError, KeyEncodingError: the input turned out bad while it was read.
    """
    started = time.perf_counter()
    deadline = _Deadline(config.timeout_s)
    ensure_ray()
    pool = _start(plan, config.reuse_actors, deadline)
    job = None
    keep = False
    try:
        snapshot = plan.policy.initial_snapshot(plan.num_reducers)
        items = iter(_input_items(blocks if blocks is not None else (), dataset, plan.source_columns, plan.num_mappers,
                                  config.batch_size))
        try:
            if pool.fresh:
                job = open_job(pool, plan, snapshot, items, deadline)
            else:
                job = pool.coordinator.run_job.remote(plan, snapshot, pool.members_key())
            poll = _progress_poller(pool.coordinator, progress)
            _feed(pool, plan.job_id, items, job, deadline, poll)
        except (DPAError, ray.exceptions.RayError):
            raise  # the job's own failure, or bad input found while reading it
        except Exception as exc:  # the source itself raised
            raise JobFailedError(f"reading the input failed: {type(exc).__name__}: {exc}") from exc
        summary = _job_summary(job, deadline, poll)
        pool.adopt(summary["handles"])  # members replaced by a recovery
        pairs = _result_refs(summary["job_reducers"], summary["run_id"])
        refs, meta_refs = [p[0] for p in pairs], [p[1] for p in pairs]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=deadline.remaining(), fetch_local=False)
        if len(ready) < len(refs):
            raise deadline.error("collecting its result")
        result_meta = _get(meta_refs, deadline, "collecting its result")
        keep = config.reuse_actors
    except BaseException as exc:
        if job is not None:
            ok = _abort(pool, plan.job_id, f"{type(exc).__name__}: {exc}")
            keep = ok and config.reuse_actors
        if not keep:
            logger.warning("dpa job failed; stopping its actors")
        raise
    finally:
        release(pool, keep)
    return RunOutput(
        tables=[], processed=summary["processed"], forwarded=summary["forwarded"], emitted=summary["emitted"],
        blocks_per_mapper=summary["blocks_per_mapper"], rebalances=summary["events"],
        final_snapshot=summary["final_snapshot"], merged=summary["merged"], timeline=summary["timeline"],
        wall_time_s=time.perf_counter() - started, peak_queue=summary["peak_queue"], arrow_refs=refs,
        recoveries=summary["recoveries"], checkpoints=summary["checkpoints"],
        merged_keys=summary["merged_keys"], state_moves=summary["state_moves"], scaling=summary["scaling"],
        group_apply=summary.get("group_apply"), result_meta=result_meta,
    )
