"""Hosts: Ray worker processes that each run several members of a pool.

A pool's balancer, reducers and mappers are logical members; a :class:`HostActor` (one Ray
actor, one process) runs several of them as plain objects on its event loop, as a Flink
task slot runs several subtasks. A pool starts one host per CPU of the cluster (at most
one per member), so the first job of a wide pool waits for a few processes to start
instead of one per member, and the pool holds a few interpreters' memory, not one per member.

A :class:`MemberRef` names one member: ``ref.method.remote(...)`` calls it through its host
(``ref.result.options(num_returns=2)`` too), as an actor handle would; refs pickle, so
members and the driver pass them around as they would handles. Every call is a Ray call,
also between members of one host (arguments are copied and top-level object refs
resolved exactly as for a call to an actor of its own), but for a mapper's push to a
reducer of its own host, which calls the reducer (:func:`~dpa.runtime.ray.member.hosted_member`).

Failures: a host's death (its process, its node) loses all its members; the coordinator's
repair finds each of them dead and replaces them together in a new host
(:class:`~dpa.runtime.ray.members.PoolMembers`). A member that blocks its host's event loop
makes its co-hosted members unresponsive too; the repair kills the host and replaces them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import threading
import uuid
from typing import Any

import ray

from dpa.runtime.ray.balancer import BalancerActor
from dpa.runtime.ray.heap import keep_freed_memory
from dpa.runtime.ray.mapper import MapperActor
from dpa.runtime.ray.member import NAMESPACE, host_members, quiet_method
from dpa.runtime.ray.outbox import flush, run_batch
from dpa.runtime.ray.reducer import ReducerActor

logger = logging.getLogger(__name__)

#: Member classes by role kind (``reducer-3`` is a ``reducer``).
KINDS: dict[str, type] = {"balancer": BalancerActor, "reducer": ReducerActor, "mapper": MapperActor}

#: Calls a host runs at once, per member it hosts (Ray's default for an async actor is 1000).
CONCURRENCY_PER_MEMBER = 1000

_QUIET: dict[tuple[str, str], bool] = {}


def kind_of(role: str) -> str:
    """``balancer``, ``reducer`` or ``mapper`` for a role like ``reducer-3``."""
    return role.split("-", 1)[0]


def _quiet(kind: str, method: str) -> bool:
    """Whether ``method`` of a member of ``kind`` is a frequent small call (no task events)."""
    key = (kind, method)
    if key not in _QUIET:
        func = getattr(KINDS[kind], method, None)
        _QUIET[key] = getattr(func, "__ray_enable_task_events__", True) is False
    return _QUIET[key]


def build_member(role: str, name: str) -> Any:
    """The member ``role`` (``reducer-3``) as a plain object named ``name``."""
    kind = kind_of(role)
    if kind == "balancer":
        return BalancerActor(name)
    return KINDS[kind](int(role.split("-", 1)[1]), name)


class MemberHost:
    """What runs members in a process: ``self.members`` (``{role: member}``) and the calls
    that reach them. :class:`HostActor` is one; the coordinator is one for the balancer
    (see :func:`~dpa.runtime.ray.members.start_members`)."""

    members: dict[str, Any]

    @quiet_method
    async def call(self, role: str, method: str, *args: Any) -> Any:
        """Calls ``method`` of the member ``role`` (a frequent small call: no task event)."""
        return await self._invoke(role, method, args)

    async def call_traced(self, role: str, method: str, *args: Any) -> Any:
        """Calls ``method`` of the member ``role`` (Ray keeps a task event for it)."""
        return await self._invoke(role, method, args)

    @quiet_method
    async def call_batch(self, calls: list[tuple[str | None, str, tuple]]) -> None:
        """Runs calls posted together (:func:`~dpa.runtime.ray.outbox.post`), in order:
        ``(role, method, args)``, a member's method, or this host's own for role None."""
        await run_batch(self, calls)

    @quiet_method
    async def call_all(self, calls: list[tuple[str | None, str, tuple]]) -> None:
        """Runs calls sent together (:func:`~dpa.runtime.ray.outbox.send_together`), in
        order; returns once all have run, raising the first error if any did."""
        await run_batch(self, calls, strict=True)

    @quiet_method
    async def call_gather(self, calls: list[tuple[str | None, str, tuple]]) -> list[Any]:
        """Runs calls sent together (:func:`~dpa.runtime.ray.outbox.call_per_process`) at
        once, as separate calls would run; returns their results in order (the first error
        raises once all are done)."""
        return list(await asyncio.gather(*[self._invoke(role, method, args) if role is not None
                                           else getattr(type(self), method)(self, *args)
                                           for role, method, args in calls]))

    @quiet_method
    async def call_sliced(self, roles: list[str], method: str, head: tuple, tail: tuple, rows: list[int],
                          table: Any) -> list[Any]:
        """Runs ``method(*head, part, *tail)`` of each member ``roles[i]`` at once, ``part``
        its ``rows[i]`` rows of ``table``, in order (:func:`~dpa.runtime.ray.outbox.send_tables`:
        the tables of several calls as one); returns their answers in order once all have
        run, raising the first error if any raised."""
        calls, start = [], 0
        for role, n in zip(roles, rows):
            calls.append(self._invoke(role, method, (*head, table.slice(start, n), *tail)))
            start += n
        answers = await asyncio.gather(*calls, return_exceptions=True)
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
        return list(answers)

    @quiet_method
    async def run_loops(self, run_id: str, roles: list[str]) -> dict[str, Any]:
        """Runs the loops of the members ``roles`` on run ``run_id`` at once (a mapper's
        ``run``, a reducer's or the balancer's ``serve``:
        :func:`~dpa.runtime.ray.outbox.loops_per_process`); returns ``{role: what its loop
        returned}`` once all have ended, or raises as soon as one of them raises."""
        results = await asyncio.gather(*[self._invoke(role, "run" if kind_of(role) == "mapper" else "serve", (run_id,))
                                         for role in roles])
        return dict(zip(roles, results))

    async def results(self, run_id: str, roles: list[str]) -> tuple:
        """The finalized tables of the reducers ``roles`` and their ``(rows, schema, bytes)``,
        called with ``num_returns=2 x len(roles)``: one Ray call per host where each
        reducer's :meth:`~dpa.runtime.ray.reducer.ReducerActor.result` would be one each;
        every table is an object of its own, owned by the caller."""
        out: list[Any] = []
        for role in roles:
            member = self.members[role]
            out += type(member).take_result(member, run_id)
        return tuple(out)

    async def _invoke(self, role: str, method: str, args: tuple) -> Any:
        member = self.members[role]
        # The class's method, as Ray would call it (a member's attribute may share its name:
        # a reducer's ``result`` table).
        return await getattr(type(member), method)(member, *args)

    async def serving(self) -> dict[str, str | None]:
        """The members this process runs: ``{role: the job (run) it serves, or None}``."""
        return {role: member.job_id for role, member in self.members.items()}


@ray.remote(num_cpus=0)
class HostActor(MemberHost):
    """One process running several members (``{role: member}``) on its event loop."""

    def __init__(self, name: str, members: list[tuple[str, str]], import_arrow_engine: bool = False,
                 warm_group_apply: bool = False) -> None:
        """Builds the members: ``(role, member name)`` pairs (the name is what errors say).

        With ``import_arrow_engine`` (the pool's first job groups with Arrow: a string or
        multi-column key) a thread imports Arrow's group-by engine while the pool starts, so
        that the first block does not wait for it. With ``warm_group_apply`` (the pool's first
        job runs a per-group function) the thread then warms the per-group path as well
        (:func:`_warm_group_apply`).
        """
        keep_freed_memory()  # a block's arrays reuse the last block's memory
        self.name = name
        self.members = {role: build_member(role, member) for role, member in members}
        host_members(ray.get_runtime_context().get_actor_id(), self.members)
        if import_arrow_engine or warm_group_apply:
            target = _warm_group_apply if warm_group_apply else _import_arrow_engine
            threading.Thread(target=target, name="dpa-import", daemon=True).start()


def _import_arrow_engine() -> None:
    """Imports ``pyarrow.acero``, which ``Table.group_by`` loads, and with it pandas (about
    0.25 s of CPU in a new process)."""
    try:
        import pyarrow.acero  # noqa: F401
    except Exception:  # an early import only: the job itself reports real errors
        logger.debug("importing pyarrow.acero failed", exc_info=True)


def _warm_group_apply() -> None:
    """Readies this process for a per-group function while the pool starts: Arrow's group-by
    engine, pandas and the Arrow/pandas conversions imported and run once on a tiny unit
    (:func:`dpa.aggregates.group_apply.warm_up`), then every object alive so far (modules,
    classes, their caches) moved out of the garbage collector's sight (``gc.freeze``). A
    unit's groups allocate many short-lived frames, which trigger collections; a full
    collection otherwise walks every imported module's objects (hundreds of thousands in a
    Ray worker) each time, on the thread that runs ``fn``.
    """
    _import_arrow_engine()
    try:
        from dpa.aggregates.group_apply import warm_up

        warm_up()
    except Exception:  # an early warm-up only: the job itself reports real errors
        logger.debug("warming the per-group path failed", exc_info=True)
    gc.collect()
    gc.freeze()


def own_handle() -> Any:
    """The handle of the actor this runs in (the coordinator names itself the balancer's host)."""
    return ray.get_runtime_context().current_actor


class _Method:
    """``ref.method`` of a :class:`MemberRef`: ``.remote(*args)`` and ``.options(**opts)``."""

    __slots__ = ("_call", "_role", "_method")

    def __init__(self, call: Any, role: str, method: str) -> None:
        self._call, self._role, self._method = call, role, method

    def remote(self, *args: Any) -> Any:
        flush()  # (calls posted earlier go first, in order)
        return self._call.remote(self._role, self._method, *args)

    def options(self, **options: Any) -> _Method:
        return _Method(self._call.options(**options), self._role, self._method)


class MemberRef:
    """A member of a pool as the runtime calls it: its host's handle and its role.

    ``ref.push.remote(...)`` is ``host.call.remote(role, "push", ...)``. ``key`` is stable
    across pickling and names the member (for :func:`~dpa.runtime.ray.member.handles_key`);
    ``host_key`` names its host.
    """

    __slots__ = ("host", "role", "key", "host_key")

    def __init__(self, host: Any, role: str) -> None:
        self.host = host
        self.role = role
        self.host_key = host._actor_id.hex()
        self.key = f"{self.host_key}/{role}"

    def __getattr__(self, method: str) -> _Method:
        if method.startswith("_"):
            raise AttributeError(method)
        quiet = _quiet(kind_of(self.role), method)
        return _Method(self.host.call if quiet else self.host.call_traced, self.role, method)

    def dpa_route(self) -> tuple[Any, str, str]:
        """``(host handle, role, host key)``: where :func:`~dpa.runtime.ray.outbox.post` sends a call."""
        return self.host, self.role, self.host_key

    def __reduce__(self) -> tuple:
        return (MemberRef, (self.host, self.role))

    def __repr__(self) -> str:
        return f"MemberRef({self.role} on {self.host_key[:8]})"


def host_id(handle: Any) -> str:
    """The id of the process ``handle`` runs in: its host's actor id, or its own."""
    if isinstance(handle, MemberRef):
        return handle.host_key
    return handle._actor_id.hex()


def kill_member(handle: Any) -> None:
    """Kills ``handle``'s process (for a hosted member: its host, with every member in it)."""
    if handle is None:
        return
    with contextlib.suppress(Exception):
        ray.kill(handle.host if isinstance(handle, MemberRef) else handle, no_restart=True)


def find_member(role: str) -> tuple[Any, dict[str, str | None]] | None:
    """The live process running a member ``role`` (``reducer-3``) of a pool of this Ray
    session, one whose member serves a job if any does (for diagnostics and fault drills):
    a host, or for the balancer its pool's coordinator.

    Returns:
        ``(host handle, {role: job or None} of every member it runs)``, or None.
    """
    found = None
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] != NAMESPACE or not (":host-" in entry["name"] or entry["name"].endswith(":coordinator")):
            continue
        try:
            host = ray.get_actor(entry["name"], namespace=NAMESPACE)
            members = ray.get(host.serving.remote(), timeout=30)
        except Exception:  # (died since it was listed)
            continue
        if role in members:
            if members[role] is not None:
                return host, members
            found = found or (host, members)
    return found


def default_width(members: int) -> int:
    """Hosts a pool of ``members`` members starts: one per CPU of the cluster (:func:`host_cpus`),
    at most one per member."""
    return max(1, min(host_cpus(), members))


def host_cpus(nodes: list[dict[str, Any]] | None = None, here: str | None = None,
              cores_here: int | None = None) -> int:
    """The CPUs hosts are counted by: every alive node's CPUs, but for a node on this
    machine at most this machine's cores. Ray's CPUs are logical: a Ray started with
    ``num_cpus=8`` on 2 cores would otherwise run 8 hosts there, processes that add
    context switches and messages but no CPU (and past a few times the cores Ray warns on
    the console that too many worker processes started). A node elsewhere counts its
    logical CPUs, as its cores are not known here.

    Args:
        nodes: ``ray.nodes()`` (read if None).
        here: This machine's node IP address (read if None).
        cores_here: This machine's cores (``os.cpu_count()`` if None).
    """
    import os

    nodes = ray.nodes() if nodes is None else nodes
    here = ray.util.get_node_ip_address() if here is None else here
    cores = max(1, (os.cpu_count() or 1) if cores_here is None else cores_here)
    total = 0
    for node in nodes:
        if not node.get("Alive", True):
            continue
        cpus = int(node.get("Resources", {}).get("CPU", 0) or 0)
        total += min(cpus, cores) if node.get("NodeManagerAddress") == here else cpus
    return max(1, total)


def pack(roles: list[str], width: int, reducer_num_cpus: float = 0.0) -> list[list[str]]:
    """The roles each host runs: ``roles`` dealt round-robin over ``width`` hosts (each gets
    a share of the reducers and of the mappers). With ``reducer_num_cpus`` > 0 each reducer
    gets a host of its own, which holds those CPUs (a reservation is per process)."""
    alone: list[list[str]] = []
    shared = roles
    if reducer_num_cpus > 0:
        alone = [[r] for r in roles if kind_of(r) == "reducer"]
        shared = [r for r in roles if kind_of(r) != "reducer"]
    width = max(1, min(width, len(shared)))
    return [shared[i::width] for i in range(width) if shared[i::width]] + alone


def start_hosts(pool_id: str, roles: list[str], width: int, generation: int = 0,
                reducer_num_cpus: float = 0.0, import_arrow_engine: bool = False,
                warm_group_apply: bool = False) -> dict[str, MemberRef]:
    """Starts ``roles`` in ``width`` hosts (see :func:`pack`); returns each role's ref.

    ``generation`` > 0 names replacements (a dead member's name may not be released yet).
    ``import_arrow_engine``: each host imports Arrow's group-by engine while it starts (see
    :class:`HostActor`); ``warm_group_apply``: each host warms the per-group path too.
    """
    suffix = f".{generation}" if generation else ""
    refs: dict[str, MemberRef] = {}
    for group in pack(roles, width, reducer_num_cpus):
        cpus = reducer_num_cpus if reducer_num_cpus > 0 and kind_of(group[0]) == "reducer" else 0
        name = f"dpa:{pool_id}:host-{uuid.uuid4().hex[:6]}"
        # Spread over the cluster's nodes (on one machine this changes nothing): a job uses
        # every node, and losing one loses a few members, which recovery replaces.
        host = HostActor.options(name=name, namespace=NAMESPACE, lifetime=None, scheduling_strategy="SPREAD",
                                 num_cpus=cpus, max_concurrency=CONCURRENCY_PER_MEMBER * len(group)).remote(
            name, [(role, f"dpa:{pool_id}:{role}{suffix}") for role in group], import_arrow_engine, warm_group_apply)
        refs.update({role: MemberRef(host, role) for role in group})
    return refs
