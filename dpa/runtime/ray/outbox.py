"""Fire-and-forget calls, sent per process in one Ray call.

Every Ray actor call costs its caller and its callee CPU, whatever it carries (submitting
it, scheduling it, running it on the callee's event loop). Some of the pool's messages need
no answer and go out in bursts: the balancer sends every mapper and reducer the ring it
published (a dozen calls per rebalance at 4 x 8, all in one step), the reducers of a
host report their queues and progress, and the coordinator tells the balancer and every
reducer when the input is all mapped. :func:`post` queues such a call; at the end of the
event loop's current step the calls queued for one process (a host or the coordinator) go
out as one :meth:`~dpa.runtime.ray.host.MemberHost.call_batch` call, which runs them in
the order they were posted, and an object posted to several members of one process (the
ring) is pickled once.

Order: the calls of a batch reach their process in the order they were posted, and a
member call sent directly through a :class:`~dpa.runtime.ray.host.MemberRef` (``.remote``)
first sends whatever is queued, so calls to members leave a process in the order it made
them, as with one Ray call each. A call on a plain actor handle (a mapper asking the
coordinator for its next block) does not wait for posts: no message the coordinator takes
depends on the order of a reducer's progress against a mapper's calls (the job ends when
the counts add up, whichever arrives first). A batch's call that raises is logged by the callee; the others
still run (as separate fire-and-forget calls would).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import pyarrow as pa

logger = logging.getLogger(__name__)


class _Outbox(threading.local):
    """The calls this thread's event loop has posted and not yet sent, by destination
    process (per thread: an actor's event loop runs in one thread)."""

    def __init__(self) -> None:
        self.pending: dict[str, tuple[Any, list[tuple[str | None, str, tuple]]]] = {}
        self.scheduled = False

    def add(self, target: Any, method: str, args: tuple) -> None:
        handle, role, key = route(target)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on an event loop (a sync caller): nothing batches with it
            self.flush()
            _submit(handle, [(role, method, args)])
            return
        entry = self.pending.get(key)
        if entry is None:
            entry = self.pending[key] = (handle, [])
        entry[1].append((role, method, args))
        if not self.scheduled:
            self.scheduled = True
            loop.call_soon(self.flush)

    def flush(self) -> None:
        """Sends every queued call: one Ray call per destination process."""
        self.scheduled = False
        if not self.pending:
            return
        pending, self.pending = self.pending, {}
        for handle, calls in pending.values():
            try:
                _submit(handle, calls)
            except Exception:  # (Ray shutting down): the other processes still get theirs
                logger.warning("could not send %d posted call(s)", len(calls), exc_info=True)


def route(target: Any) -> tuple[Any, str | None, str]:
    """``(process handle, member role or None, process key)`` of a member ref or actor handle."""
    if hasattr(type(target), "dpa_route"):
        return target.dpa_route()
    return target, None, target._actor_id.hex()


def _submit(handle: Any, calls: list[tuple[str | None, str, tuple]]) -> None:
    if len(calls) == 1 and calls[0][0] is not None:
        role, method, args = calls[0]
        handle.call.remote(role, method, *args)
    elif len(calls) == 1:
        _, method, args = calls[0]
        getattr(handle, method).remote(*args)
    else:
        handle.call_batch.remote(calls)


_OUTBOX = _Outbox()


def post(target: Any, method: str, *args: Any) -> None:
    """Calls ``method`` of ``target`` (a :class:`~dpa.runtime.ray.host.MemberRef`, or the
    handle of an actor that runs members: a host, the coordinator) without waiting for or
    keeping its answer; sent with the other calls posted to the same process in this step
    of the event loop."""
    _OUTBOX.add(target, method, args)


def send_together(calls: list[tuple[Any, str, tuple]]) -> list[Any]:
    """Sends ``(target, method, args)`` calls now, one Ray call per destination process
    (a host runs them in order, as :func:`post`'s batches); returns the refs to await, one
    per process, each done once every call to that process has run. For a burst whose
    answers the caller only waits for, like a reducer's share of the final merge sent to
    every peer: ``R`` reducers send ``R x hosts`` calls, not ``R x R``. A call that raises
    fails its ref (after the process's other calls ran), as its own Ray call would."""
    flush()  # (calls posted earlier go first, in order)
    by_process: dict[str, tuple[Any, list[tuple[str | None, str, tuple]]]] = {}
    for target, method, args in calls:
        handle, role, key = route(target)
        by_process.setdefault(key, (handle, []))[1].append((role, method, args))
    refs = []
    for handle, batch in by_process.values():
        if len(batch) == 1 and batch[0][0] is not None:
            role, method, args = batch[0]
            refs.append(handle.call.remote(role, method, *args))
        else:
            refs.append(handle.call_all.remote(batch))
    return refs


async def call_per_process(calls: list[tuple[Any, str, tuple]]) -> list[Any]:
    """Runs ``(target, method, args)`` calls, one Ray call per destination process whose
    calls run concurrently there (:meth:`~dpa.runtime.ray.host.MemberHost.call_gather`);
    returns their results in the order of ``calls`` (the first error raises, as
    ``asyncio.gather`` of one call each would). For the coordinator's fan-outs to every
    reducer (stop, the final merge, finalize): ``hosts`` calls instead of ``W``."""
    flush()
    by_process: dict[str, tuple[Any, list[int], list[tuple[str | None, str, tuple]]]] = {}
    for i, (target, method, args) in enumerate(calls):
        handle, role, key = route(target)
        entry = by_process.setdefault(key, (handle, [], []))
        entry[1].append(i)
        entry[2].append((role, method, args))
    groups = list(by_process.values())
    answers = await asyncio.gather(*[handle.call_gather.remote(batch) for handle, _, batch in groups])
    out: list[Any] = [None] * len(calls)
    for (_, places, _), results in zip(groups, answers):
        for i, result in zip(places, results):
            out[i] = result
    return out


def _one_table(tables: list[Any]) -> Any | None:
    """``tables`` as one Arrow table (their rows in order, in one chunk per column), or None
    if they are not all Arrow tables of one schema."""
    first = tables[0]
    if not isinstance(first, pa.Table) or not all(isinstance(t, pa.Table) and t.schema == first.schema
                                                   for t in tables[1:]):
        return None
    return pa.concat_tables(tables).combine_chunks()


def send_tables(calls: list[tuple[Any, str, tuple, Any, tuple]]) -> list[tuple[list[int], Any]]:
    """Sends ``(target, method, head, table, tail)`` calls, each ``method(*head, table,
    *tail)`` of a member, one Ray call per destination process; returns ``(indices of the
    calls, ref)`` per process, the ref's value being their answers in that order (it fails
    with the first error once all have run).

    The tables bound for one process travel as one Arrow table, which the process slices
    (:meth:`~dpa.runtime.ray.host.MemberHost.call_sliced`): Ray serializes every Arrow table
    of a call on its own, schema and all (about 70 us each for a small one), so a burst of
    small tables (a round of pushes, a reducer's parts of the final merge at ``W`` reducers)
    costs that per table; concatenated, once per process. Calls whose tables are not Arrow
    tables of one schema (a user reducer's partial states) go as they are.
    """
    flush()
    by_process: dict[str, tuple[Any, list[int], list[tuple[Any, ...]]]] = {}
    for i, (target, method, head, table, tail) in enumerate(calls):
        handle, role, key = route(target)
        entry = by_process.setdefault(key, (handle, [], []))
        entry[1].append(i)
        entry[2].append((role, method, head, table, tail))
    return [(places, _submit_tables(handle, batch)) for handle, places, batch in by_process.values()]


def _submit_tables(handle: Any, batch: list[tuple[str | None, str, tuple, Any, tuple]]) -> Any:
    """One Ray call to the process ``handle`` running ``batch``'s calls (see :func:`send_tables`)."""
    combined = _one_table([table for *_, table, _ in batch]) if len(batch) > 1 else None
    if combined is not None and len({(method, head, tail) for _, method, head, _, tail in batch}) == 1:
        _, method, head, _, tail = batch[0]
        return handle.call_sliced.remote([role for role, *_ in batch], method, head, tail,
                                         [table.num_rows for *_, table, _ in batch], combined)
    return handle.call_gather.remote([(role, method, (*head, table, *tail)) for role, method, head, table, tail in batch])


class _Tables(threading.local):
    """The table calls this thread's event loop has posted (:func:`post_table`) and not yet
    sent, by destination process, each process's with the future they all answer through."""

    def __init__(self) -> None:
        self.pending: dict[str, tuple[Any, list[tuple[Any, ...]], asyncio.Future]] = {}
        self.scheduled = False

    def add(self, target: Any, method: str, head: tuple, table: Any, tail: tuple) -> asyncio.Future:
        handle, role, key = route(target)
        loop = asyncio.get_running_loop()
        entry = self.pending.get(key)
        if entry is None:
            done = loop.create_future()
            done.add_done_callback(_seen)
            entry = self.pending[key] = (handle, [], done)
        entry[1].append((role, method, head, table, tail))
        if not self.scheduled:
            self.scheduled = True
            loop.call_soon(self.flush)
        return entry[2]

    def flush(self) -> None:
        self.scheduled = False
        pending, self.pending = self.pending, {}
        for handle, batch, done in pending.values():
            try:
                ref = _submit_tables(handle, batch)
            except Exception as exc:  # (Ray shutting down): the callers' waits fail with it
                done.set_exception(exc)
                continue
            asyncio.ensure_future(_settle(ref, done))


async def _settle(ref: Any, batch: asyncio.Future) -> None:
    """Answers the callers of a batch of table calls with its ref's outcome."""
    try:
        answers = await ref
    except Exception as exc:
        if not batch.done():
            batch.set_exception(exc)
        return
    if not batch.done():
        batch.set_result(answers)


def _seen(fut: asyncio.Future) -> None:
    """Marks a batch's error as retrieved (a caller aborted meanwhile never awaits it)."""
    if not fut.cancelled():
        fut.exception()


_TABLES = _Tables()


def post_table(target: Any, method: str, head: tuple, table: Any, tail: tuple = ()) -> asyncio.Future:
    """Calls ``method(*head, table, *tail)`` of the member ``target`` with the other table
    calls this thread's event loop posts in the same step: at the end of the step, one Ray
    call per destination process, its tables as one (see :func:`send_tables`). Returns a
    future done once every call of that process's batch has run (failed with the first
    error if one raised).

    For the final merge: the reducers of a host partition their states in one step (the
    coordinator's ``exchange`` reaches them in one call), so the parts every reducer of a
    host sends every reducer of another host travel as one call with one table: ``H x H``
    calls for the whole merge, not ``W x H`` calls of ``W x W`` tables.
    """
    return _TABLES.add(target, method, head, table, tail)


async def call_tables(calls: list[tuple[Any, str, tuple, Any, tuple]]) -> list[Any]:
    """:func:`send_tables`, awaited: the answers in the order of ``calls``."""
    out: list[Any] = [None] * len(calls)
    sent = send_tables(calls)
    for (places, _), answers in zip(sent, await asyncio.gather(*[ref for _, ref in sent])):
        for i, answer in zip(places, answers):
            out[i] = answer
    return out


def loops_per_process(run_id: str, members: list[tuple[str, Any]]) -> list[tuple[tuple[str, ...], Any]]:
    """Starts the loops of ``members`` (``(role, member ref)``: a mapper's ``run``, a reducer's
    or the balancer's ``serve``) on run ``run_id``, one Ray call per process
    (:meth:`~dpa.runtime.ray.host.MemberHost.run_loops`) instead of one per member: a job
    of ``W`` reducers and ``M`` mappers in ``H`` hosts starts ``H`` calls, not ``W + M``.

    Returns:
        ``(roles, ref)`` per process: the ref's value is ``{role: what its loop returned}``,
        once every loop there has ended; it fails as soon as one of them raises.
    """
    flush()
    return [(tuple(roles), handle.run_loops.remote(run_id, roles)) for handle, roles in per_process(members)]


def per_process(members: list[tuple[str, Any]]) -> list[tuple[Any, list[str]]]:
    """``(process handle, roles)`` for each process running some of ``members``
    (``(role, member ref or actor handle)``), in the order first named."""
    by_process: dict[str, tuple[Any, list[str]]] = {}
    for role, target in members:
        handle, _, key = route(target)
        by_process.setdefault(key, (handle, []))[1].append(role)
    return list(by_process.values())


def flush() -> None:
    """Sends the calls posted so far (before a direct call, to keep the process's order)."""
    if _OUTBOX.pending:
        _OUTBOX.flush()
    if _TABLES.pending:
        _TABLES.flush()


async def run_batch(host: Any, calls: list[tuple[str | None, str, tuple]], strict: bool = False) -> None:
    """Runs a batch in ``host`` (a member host), in order: a member's method for a role, the
    host's own method for None. A call that raises is logged and the rest still run; with
    ``strict`` the first error is raised once they have (:func:`send_together`'s calls)."""
    first: Exception | None = None
    for role, method, args in calls:
        try:
            if role is None:
                await getattr(type(host), method)(host, *args)
            else:
                await host._invoke(role, method, args)
        except Exception as exc:
            if strict:
                first = first or exc
            else:
                logger.warning("posted call %s.%s failed", role or type(host).__name__, method, exc_info=True)
    if first is not None:
        raise first
