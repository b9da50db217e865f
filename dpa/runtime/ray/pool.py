"""Warm actor pools: one pool per running job, idle pools kept for the next job.

Starting a pool (a coordinator, which also runs the balancer, and the reducers and mappers,
run by one host process per CPU: :mod:`dpa.runtime.ray.host`) costs a second or more on a small machine,
so a finished job hands its pool back and the next job of the same shape takes it. Jobs
running at the same time, e.g. from two threads of one driver, each check out a pool of
their own, so their actors and data never mix. A pool is checked for dead members when a job takes it (the coordinator
replaces only those); a pool whose coordinator died is dropped and a new one started.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from dpa.runtime.ray.coordinator import CoordinatorActor
from dpa.runtime.ray.host import MemberRef, host_id, kill_member
from dpa.runtime.ray.member import NAMESPACE, handles_key
from dpa.runtime.ray.members import start_members

logger = logging.getLogger(__name__)

#: Idle pools kept warm at most (the least recently used beyond this are killed).
MAX_IDLE_POOLS = 2


@dataclass
class Pool:
    """One coordinator and its members (the driver's handles, as the coordinator last said)."""

    pool_id: str
    session: str
    num_mappers: int
    num_reducers: int  # reducer slots
    coordinator: Any
    balancer: Any = None
    reducers: list[Any] = field(default_factory=list)
    mappers: list[Any] = field(default_factory=list)
    shutdowns: int = 0  # dpa.shutdown() calls before the pool was created
    reducer_num_cpus: float = 0.0
    fresh: bool = False  # no job has started on it: the driver starts the first (driver.open_job)

    def all_actors(self) -> list[Any]:
        """The coordinator and the members (member refs; None for an empty reducer slot)."""
        return [self.coordinator, self.balancer, *self.reducers, *self.mappers]

    def processes(self) -> list[Any]:
        """The pool's Ray actors, one per process: the coordinator and its members' hosts."""
        seen: dict[str, Any] = {}
        for actor in self.all_actors():
            if actor is not None:
                seen.setdefault(host_id(actor), actor.host if isinstance(actor, MemberRef) else actor)
        return list(seen.values())

    def members_key(self) -> tuple:
        """The members' handles as :func:`~dpa.runtime.ray.member.handles_key` gives them: the
        coordinator returns handles only when its own differ."""
        return handles_key(self.balancer, self.reducers, self.mappers)

    def adopt(self, handles: tuple[Any, list[Any] | None, list[Any] | None, list[str]]) -> list[str]:
        """Takes the member handles the coordinator returned (None: unchanged); returns the
        replaced roles."""
        balancer, reducers, mappers, replaced = handles
        if reducers is not None:
            self.balancer, self.reducers, self.mappers = balancer, reducers, mappers
        return list(replaced)


_LOCK = threading.Lock()
_IDLE: list[Pool] = []  # least recently used first
_BUSY: set[str] = set()
_SHUTDOWNS = 0


def _session() -> str:
    return ray.get_runtime_context().get_job_id()


def acquire(num_mappers: int, num_reducers: int, reuse: bool, initial_reducers: int | None = None,
            reducer_num_cpus: float = 0.0, import_arrow_engine: bool = False, warm_group_apply: bool = False) -> Pool:
    """An idle pool of this shape from this Ray session, or a new one (not yet pinged).

    ``num_reducers`` is the number of reducer slots; a new pool starts actors for the first
    ``initial_reducers`` (default all): an elastic job starts the others when it grows.
    ``import_arrow_engine``: a new pool's hosts import Arrow's group-by engine as they start
    (:func:`~dpa.runtime.ray.host.start_hosts`); ``warm_group_apply``: they warm the path of a
    per-group function too (its first job runs one).
    """
    session = _session()
    with _LOCK:
        _IDLE[:] = [p for p in _IDLE if p.session == session]  # pools of an earlier Ray are gone
        if reuse:
            for pool in reversed(_IDLE):
                if (pool.num_mappers, pool.num_reducers, pool.reducer_num_cpus) == (
                        num_mappers, num_reducers, reducer_num_cpus):
                    _IDLE.remove(pool)
                    _BUSY.add(pool.pool_id)
                    return pool
        shutdowns = _SHUTDOWNS
    pool_id = uuid.uuid4().hex[:8]
    # On the driver's node (alive while the driver is): losing another node loses members the
    # coordinator recovers, never the coordinator and the checkpoints it holds.
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    # The hosts start here, with the coordinator, not from its constructor: every process of
    # the pool starts at once, none waits for another to start. The driver owns them;
    # kill() ends them with the pool.
    reducers, mappers = start_members(pool_id, num_mappers, num_reducers, initial_reducers, reducer_num_cpus,
                                      import_arrow_engine, warm_group_apply)
    coordinator = CoordinatorActor.options(name=f"dpa:{pool_id}:coordinator", namespace=NAMESPACE,
                                           scheduling_strategy=here).remote(
        pool_id, num_mappers, num_reducers, initial_reducers, reducer_num_cpus, (reducers, mappers))
    balancer = MemberRef(coordinator, "balancer")  # (run by the coordinator: see start_members)
    pool = Pool(pool_id, session, num_mappers, num_reducers, coordinator, balancer=balancer, reducers=reducers,
                mappers=mappers, shutdowns=shutdowns, reducer_num_cpus=reducer_num_cpus, fresh=True)
    with _LOCK:
        _BUSY.add(pool_id)
    return pool


def release(pool: Pool, keep: bool) -> None:
    """Hands a pool back after a job: kept warm if ``keep`` (and not shut down since), else killed."""
    evicted: list[Pool] = []
    with _LOCK:
        _BUSY.discard(pool.pool_id)
        if keep and pool.shutdowns == _SHUTDOWNS:
            _IDLE.append(pool)
            while len(_IDLE) > MAX_IDLE_POOLS:
                evicted.append(_IDLE.pop(0))
        else:
            evicted.append(pool)
    for p in evicted:
        kill(p)


def kill(pool: Pool) -> None:
    """Kills every process of ``pool``: its coordinator and its members' hosts (those
    already dead are skipped)."""
    if not ray.is_initialized():
        return
    for actor in pool.processes():
        kill_member(actor)


def shutdown_pools() -> None:
    """Kills the idle pools; pools running a job are killed when the job ends."""
    global _SHUTDOWNS
    with _LOCK:
        idle, _IDLE[:] = list(_IDLE), []
        _SHUTDOWNS += 1
    for pool in idle:
        kill(pool)


def idle_pools() -> list[Pool]:
    """The idle pools (for tests and diagnostics)."""
    with _LOCK:
        return list(_IDLE)
