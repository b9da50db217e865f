"""Starting a pool's members, telling a lost member from a failing one, and the repair of
dead or hung members between jobs and runs.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import ray

from dpa.errors import JobFailedError
from dpa.runtime.ray.host import default_width, host_id, kill_member, start_hosts
from dpa.runtime.ray.member import (
    PEERS_UNCHANGED,
    ActorFailure,
    await_ref,
    describe,
    handles_key,
)
from dpa.runtime.ray.outbox import send_together

logger = logging.getLogger(__name__)


#: How long the coordinator waits for a member that answered before to answer a ping again
#: before it replaces it as hung.
PING_TIMEOUT_S = 10.0
#: Times in a row a member is replaced when its replacement dies before it answers (its
#: node was removed meanwhile, say) before the job gives up.
REPAIR_ATTEMPTS = 3

#: Errors that mean a member, its node or an object it needed is gone (the job recovers),
#: unlike an error raised by user code (the job fails).
_LOST = tuple(getattr(ray.exceptions, name) for name in (
    "RayActorError", "ObjectLostError", "WorkerCrashedError", "NodeDiedError", "ObjectFetchTimedOutError",
    "LocalRayletDiedError", "RaySystemError") if hasattr(ray.exceptions, name))


def member_lost(exc: BaseException) -> bool:
    """Whether ``exc`` (possibly wrapped by Ray) says that a member, a node or an object
    is gone, rather than that user code raised."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ActorFailure):
            return False
        if isinstance(exc, _LOST):
            return True
        exc = getattr(exc, "cause", None) or exc.__cause__
    return False


def loop_name(pool_id: str, roles: tuple[str, ...]) -> str:
    """What a failed call running the loops of ``roles`` (one process's) is named by when
    its error does not name the member itself."""
    more = f" (or one of the {len(roles) - 1} other members of its process)" if len(roles) > 1 else ""
    return f"dpa:{pool_id}:{roles[0]}{more}"


class RunLost(Exception):
    """A run of the job lost a member (recoverable)."""

    def __init__(self, actor: str, exc: BaseException) -> None:
        super().__init__(f"{actor}: {describe(exc).splitlines()[0]}")
        self.actor = actor


#: A pool's hosted members as the driver starts them: ``(reducer slots, mappers)``; a
#: reducer slot without an actor yet is None.
Members = tuple[list[Any], list[Any]]


def start_members(pool_id: str, num_mappers: int, num_reducers: int, initial_reducers: int | None = None,
                  reducer_num_cpus: float = 0.0, import_arrow_engine: bool = False,
                  warm_group_apply: bool = False) -> tuple[list[Any], list[Any]]:
    """Starts a pool's reducers and mappers in hosts (:func:`~dpa.runtime.ray.host.start_hosts`,
    one per CPU): the first ``initial_reducers`` (default all) of ``num_reducers`` reducer
    slots, and the mappers. The driver calls it together with the coordinator's start, so
    that all the pool's processes start at once.

    The balancer is not among them: the coordinator runs it in its own process
    (:class:`~dpa.runtime.ray.host.MemberHost`), so that losing a host never loses the
    balancer's routing and its planner's history, and a recovered run goes on balancing
    where the lost one stopped.

    ``import_arrow_engine`` and ``warm_group_apply`` are :func:`~dpa.runtime.ray.host.start_hosts`'s.

    An elastic pool whose reducers share hosts (``reducer_num_cpus`` 0) starts every slot's
    member at once: a member is an object in a host that is started anyway, so a scale-out
    only starts its run, in milliseconds, where a process of its own would take seconds of
    the job's CPU to start. With ``reducer_num_cpus`` > 0 each reducer is a process holding
    CPUs, so only the first ``initial_reducers`` start; a scale-out starts the others.

    Returns:
        ``(reducer slots, mappers)``: member refs (None for a slot not started).
    """
    first = num_reducers if initial_reducers is None or reducer_num_cpus <= 0 else initial_reducers
    roles = [*[f"reducer-{i}" for i in range(first)], *[f"mapper-{i}" for i in range(num_mappers)]]
    refs = start_hosts(pool_id, roles, default_width(len(roles)), 0, reducer_num_cpus, import_arrow_engine,
                       warm_group_apply)
    return [refs.get(f"reducer-{i}") for i in range(num_reducers)], [refs[f"mapper-{i}"] for i in range(num_mappers)]


def member_starts(plan: Any, snapshot: Any, run_id: str, checkpoint: Any, slots: Any, reducers: list[Any],
                  mappers: list[Any], balancer: Any, coordinator: Any, peers_for: Any = None,
                  firsts: dict[int, list[Any]] | None = None) -> list[Any]:
    """The ``start_job`` calls of a run's reducers and mappers, sent one Ray call per host
    (:func:`~dpa.runtime.ray.outbox.send_together`; the refs to await, one per host): each reducer in
    ``slots`` from its share of ``checkpoint``, each mapper with its first item in
    ``firsts`` (a new pool's first job, :func:`~dpa.runtime.ray.driver.open_job`), or none.

    ``peers_for(member, peers)`` is what a member is sent of its peers (default: ``peers``;
    the coordinator sends :data:`~dpa.runtime.ray.member.PEERS_UNCHANGED` when it can).
    """
    peers_for = peers_for or (lambda member, peers: peers)
    firsts = firsts or {}
    ck = checkpoint
    calls = [(reducers[i], "start_job", (plan, snapshot, peers_for(reducers[i], (reducers, balancer, coordinator)),
                                         run_id, ck.states[i], ck.processed[i], ck.epoch,
                                         ck.pending[i] if ck.pending else None)) for i in slots]
    calls += [(m, "start_job", (plan, snapshot, peers_for(m, (coordinator, reducers, balancer)), run_id,
                                firsts.get(i))) for i, m in enumerate(mappers)]
    # One call per host, each object pickled once for it (the plan, the snapshot, the peers).
    return send_together(calls)


class PoolMembers:
    """The members of one pool as its coordinator holds them: the reducer slots and mappers
    (member refs) and the balancer's ref, which actors serve a job, the handles each member
    was sent, and the repair of dead or hung ones.

    Args:
        pool_id: The pool's id (in the members' names).
        reducers: A member ref per reducer slot (None: not started yet).
        mappers: A member ref per mapper.
        balancer: The ref of the balancer (the coordinator's process runs it).
        reducer_num_cpus: CPUs a reducer takes (> 0: each in a host of its own).
        own: The roles the coordinator's process runs itself (never pinged nor replaced).
    """

    def __init__(self, pool_id: str, reducers: list[Any], mappers: list[Any], balancer: Any,
                 reducer_num_cpus: float = 0.0, own: frozenset[str] = frozenset({"balancer"})) -> None:
        self.pool_id = pool_id
        # Slots without an actor yet are None: an elastic job starts them when it scales out.
        self.reducers = list(reducers)
        self.mappers = list(mappers)
        self.balancer = balancer
        self.reducer_num_cpus = float(reducer_num_cpus)
        self.own = own
        self.generation = 0
        self.answered: set[str] = set()  # members that answered a ping at least once
        self.nodes: dict[str, str] = {}  # role -> Ray node id (as its last ping said)
        # Per member (by actor id), the peers' handles (by actor id) its last start_job
        # was sent: a member whose peers did not change is told so instead (PEERS_UNCHANGED).
        self.peers_sent: dict[tuple, tuple] = {}

    def create(self, role: str) -> Any:
        """Starts the member ``role`` in a host of its own (an elastic job's new reducer)."""
        return self.create_together([role])[role]

    def create_together(self, roles: list[str]) -> dict[str, Any]:
        """Starts ``roles`` in one new host (a lost host's members; with
        ``reducer_num_cpus`` > 0 each reducer in a host of its own)."""
        return start_hosts(self.pool_id, roles, 1, self.generation, self.reducer_num_cpus)

    def all(self) -> list[tuple[str, Any]]:
        """Every member started: ``(role, ref)``."""
        return ([("balancer", self.balancer)]
                + [(f"reducer-{i}", r) for i, r in enumerate(self.reducers) if r is not None]
                + [(f"mapper-{i}", m) for i, m in enumerate(self.mappers)])

    def serving(self, slots: list[int]) -> list[tuple[str, Any]]:
        """The members serving a job on reducer ``slots``: the balancer, those reducers, the mappers."""
        return ([("balancer", self.balancer)] + [(f"reducer-{i}", self.reducers[i]) for i in slots]
                + [(f"mapper-{i}", m) for i, m in enumerate(self.mappers)])

    def reducers_of(self, slots: list[int]) -> list[Any]:
        return [self.reducers[i] for i in slots]

    def peers_for(self, member: Any, peers: tuple) -> Any:
        """``peers`` for ``member``'s ``start_job``, or :data:`PEERS_UNCHANGED` when they are
        the ones it was sent last (a failed start forgets every member's)."""
        sent, to = handles_key(*peers), handles_key(member)
        if self.peers_sent.get(to) == sent:
            return PEERS_UNCHANGED
        self.peers_sent[to] = sent
        return peers

    def for_driver(self, known: tuple | None) -> tuple[Any, list[Any], list[Any]]:
        """The members' handles for the driver; ``(None, None, None)`` if the driver's
        ``known`` handles (:func:`~dpa.runtime.ray.member.handles_key`) are these already."""
        if known is not None and tuple(known) == handles_key(self.balancer, self.reducers, self.mappers):
            return None, None, None
        return self.balancer, self.reducers, self.mappers

    def alone(self, role: str) -> bool:
        """Whether member ``role`` has its host to itself (a host shared with other members
        stays up when a scale-out that wanted this one fails)."""
        members = dict(self.all())
        mine = host_id(members[role])
        return not any(host_id(m) == mine for other, m in members.items() if other != role and m is not None)

    def _note_answers(self, members: list[tuple[str, Any]], results: list[Any]) -> None:
        """Notes the members whose ping answered (with their node)."""
        for (role, _), ok in zip(members, results):
            if isinstance(ok, str):
                self.answered.add(role)
                self.nodes[role] = ok

    def _hosted(self) -> list[tuple[str, Any]]:
        """The members in hosts (not those the coordinator's process runs itself)."""
        return [(role, actor) for role, actor in self.all() if role not in self.own]

    async def _ping(self, members: list[tuple[str, Any]], timeouts: bool = False) -> list[Any]:
        """Pings ``members`` (``(role, ref)``), one member per process: its answer (the node
        id, or the error) is every co-hosted member's, as they live and hang with their
        process. With ``timeouts`` a process whose members all answered before is given
        ``PING_TIMEOUT_S``; one that never answered may still be starting and is waited for.

        Returns:
            Per member, in order, the node id or the exception.
        """
        groups: dict[str, list[int]] = {}
        for i, (_, actor) in enumerate(members):
            groups.setdefault(host_id(actor), []).append(i)
        waits = []
        for places in groups.values():
            answered = timeouts and all(members[i][0] in self.answered for i in places)
            waits.append(asyncio.wait_for(await_ref(members[places[0]][1].ping.remote()),
                                          PING_TIMEOUT_S if answered else None))
        results: list[Any] = [None] * len(members)
        for places, answer in zip(groups.values(), await asyncio.gather(*waits, return_exceptions=True)):
            for i in places:
                results[i] = answer
        return results

    async def note_members(self) -> None:
        """Pings the hosted members without repairing any: the members the driver started
        for a new pool's first job (which no repair pinged) are then known to have answered,
        and their nodes."""
        members = self._hosted()
        self._note_answers(members, await self._ping(members))

    async def repair(self) -> tuple[Any, list[Any], list[Any], list[str]]:
        """Pings every member; replaces the dead or unresponsive ones (only those).

        A replacement that dies before it answers (its node went away too) is replaced
        again, up to ``REPAIR_ATTEMPTS`` times in a row.

        Returns:
            ``(balancer, reducers, mappers, replaced roles)``.

        Raises:
            JobFailedError: A member's replacements kept dying.
        """
        # (Members the coordinator's process runs itself, the balancer, live as long as it does.)
        members = self._hosted()
        replaced: list[str] = []
        for attempt in range(REPAIR_ATTEMPTS + 1):
            # A member that never answered may still be starting (seconds on a busy machine):
            # wait for it (the driver's deadline bounds the wait). One that answered before
            # and is silent now is hung (e.g. in user code that never returns).
            results = await self._ping(members, timeouts=True)
            self._note_answers(members, results)
            dead = [(role, actor, why) for (role, actor), why in zip(members, results) if not isinstance(why, str)]
            if not dead:
                break
            if attempt == REPAIR_ATTEMPTS:
                roles = ", ".join(role for role, _, _ in dead)
                raise JobFailedError(
                    f"dpa pool {self.pool_id}: {roles} died {REPAIR_ATTEMPTS + 1} times in a row while starting "
                    f"(last: {describe(dead[0][2]).splitlines()[0]}); check the cluster's nodes and the actors' logs")
            self.generation += 1
            # A host runs several members: it is killed (if alive: one of them hung it) and
            # each of its members is replaced, in one new host per lost one.
            lost_hosts: dict[str, list[str]] = {}
            for role, actor, why in dead:
                hung = isinstance(why, asyncio.TimeoutError)
                state = f"unresponsive for {PING_TIMEOUT_S:.0f} s" if hung else f"dead ({type(why).__name__})"
                logger.warning("dpa pool %s: member %s is %s; replacing it", self.pool_id, role, state)
                lost_hosts.setdefault(host_id(actor), [])
            for role, actor in self.all():
                if host_id(actor) in lost_hosts:
                    if not lost_hosts[host_id(actor)]:
                        kill_member(actor)  # (the host, once)
                    lost_hosts[host_id(actor)].append(role)
            for roles in lost_hosts.values():
                for role, fresh in self.create_together(roles).items():
                    self.answered.discard(role)
                    kind, index = role.split("-")
                    (self.reducers if kind == "reducer" else self.mappers)[int(index)] = fresh
                    if role not in replaced:
                        replaced.append(role)
            dead = [(role, None, None) for roles in lost_hosts.values() for role in roles]
            current = dict(self.all())
            members = [(role, current[role]) for role, _, _ in dead]
        return self.balancer, self.reducers, self.mappers, replaced
