"""Ray shells over the state machines of :mod:`dpa.engine`.

The members (all async; their hosts take ``num_cpus=0`` so a laptop can run many):

* ``CoordinatorActor`` (in :mod:`dpa.runtime.ray.coordinator`, an actor of its own) owns the
  others and runs the job.
* ``MapperActor`` pulls blocks, maps and routes them with its local ring snapshot, and
  pushes per-reducer batches (waiting while the target queue is full: backpressure).
* ``ReducerActor`` owns its bounded queue, consumes it chunk by chunk, forwards records
  it no longer owns, pays the configured per-record cost, and reports its queue length.
* ``BalancerActor`` evaluates the policy when its machine asks (at most every
  ``lb_interval_s``) and publishes new ring snapshots to every mapper and reducer.

The balancer, mappers and reducers are plain objects that a few
:class:`~dpa.runtime.ray.host.HostActor` processes run (several each); the runtime calls
them through :class:`~dpa.runtime.ray.host.MemberRef`, as it would actor handles.

Every message carries the job id, and every actor drops messages of a job it is not
serving: an aborted job's late pushes, reports and ring updates cannot leak into the next
job of the same (warm) actors. ``abort(job_id)`` cancels an actor's loop for that job, so a
failed or timed-out job leaves the actors idle and reusable.

The small, frequent calls (pushes, reports, block hand-out) are declared with
``enable_task_events=False``: Ray's GCS otherwise keeps an event record for each of them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pyarrow as pa
import ray

from dpa.engine.runs import serves
from dpa.input.sources import ParquetPiece

logger = logging.getLogger(__name__)


NAMESPACE = "dpa"

#: What the coordinator sends a member instead of its peers' handles when they are the
#: ones it sent that member before (a handle costs Ray a registration at both ends, about
#: as much as the rest of a ``start_job`` call).
PEERS_UNCHANGED = "dpa:peers-unchanged"


def handles_key(*handles: Any) -> tuple:
    """Member refs (or actor handles) by id (lists of them as tuples; None for an empty
    slot): what tells whether two sets of handles name the same members."""
    return tuple(tuple(handles_key(*h)) if isinstance(h, (list, tuple)) else
                 None if h is None else member_id(h) for h in handles)


def member_id(handle: Any) -> str:
    """The id that names a member (a :class:`~dpa.runtime.ray.host.MemberRef`: its ``key``)
    or an actor (a Ray actor handle: its actor id)."""
    key = getattr(handle, "key", None)
    return key if isinstance(key, str) else handle._actor_id.hex()


#: The members this process hosts, by the key of the ref that names them (``host id/role``;
#: :class:`~dpa.runtime.ray.host.HostActor` fills it): see :func:`hosted_member`.
_HOSTED: dict[str, Any] = {}


def host_members(host_id: str, members: dict[str, Any]) -> None:
    """Records that this process (the actor ``host_id``) runs ``members`` (``{role: member}``)."""
    for role, member in members.items():
        _HOSTED[f"{host_id}/{role}"] = member


def hosted_member(ref: Any) -> Any | None:
    """The member ``ref`` names if it runs in this process, else None.

    A mapper pushes a batch to a reducer of its own host by calling it: the batch, an
    immutable Arrow table, is handed over as it is, where a Ray call would serialize it and
    copy it through the object store. Only pushes take this path: they carry no object
    refs for Ray to resolve, and nothing else a mapper sends a reducer must keep an order
    with them.
    """
    key = getattr(ref, "key", None)
    return _HOSTED.get(key) if isinstance(key, str) else None


#: Decorator for frequent small actor methods: Ray's GCS keeps no task event for their calls.
quiet_method = ray.method(enable_task_events=False)


def as_table(block: Any) -> pa.Table:
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


class JobMember:
    """What every member actor shares: the job it serves and the task running it."""

    job_id: str | None = None
    task: asyncio.Task | None = None

    def _serving(self, job_id: str) -> bool:
        """Whether a message of run ``job_id`` is for the run this member serves
        (:func:`~dpa.engine.runs.serves`)."""
        return serves(self.job_id, job_id)

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



def ready(ref: Any) -> bool:
    ready, _ = ray.wait([ref], timeout=0, fetch_local=False)
    return bool(ready)



async def await_ref(ref: Any) -> Any:
    return await ref


def retrieved(fut: asyncio.Future) -> None:
    """Marks a finished future's exception as seen (asyncio logs those never retrieved)."""
    if not fut.cancelled():
        fut.exception()
