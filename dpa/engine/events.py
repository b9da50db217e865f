"""What happens to a role (mapper, reducer, balancer, coordinator): the events its state
machine takes.

A runtime turns what reaches an actor (a call, a reply, a paid cost, a timer) into one of
these and hands it to the machine's ``handle``; it carries out the instructions
(:mod:`dpa.engine.instructions`) that come back. Request events carry an id that the
answering :class:`~dpa.engine.instructions.Reply` or
:class:`~dpa.engine.instructions.AnswerPush` names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from dpa.engine.instructions import StateMove


class Event:
    """Base of every event a machine takes (each a frozen dataclass): what reached its actor."""

    __slots__ = ()

# -- reducer --------------------------------------------------------------------------


@dataclass(frozen=True)
class ReducerStarted(Event):
    """The reducer's loop starts (its queue may hold a checkpoint's pending batches)."""


@dataclass(frozen=True)
class PushArrived(Event):
    """A batch for the reducer's queue: a mapper's push (it waits while the queue is full)
    or, ``forwarded``, a peer's forward (always accepted), routed under ``version``, of
    input ``epoch``."""

    push_id: int
    batch: pa.Table
    version: int
    epoch: int = 0
    forwarded: bool = False


@dataclass(frozen=True)
class SnapshotArrived(Event):
    """A routing snapshot (published by the balancer, or fetched for a newer push)."""

    snapshot: Any


@dataclass(frozen=True)
class SnapshotFetched(Event):
    """The answer to a :class:`~dpa.engine.instructions.FetchSnapshot`: the balancer's
    snapshot, or None if none came (the balancer is gone or serves another run)."""

    snapshot: Any


@dataclass(frozen=True)
class StepPaid(Event):
    """The runtime paid the cost of the step the machine asked for."""


@dataclass(frozen=True)
class ReportDue(Event):
    """A tick of the reducer's report clock (the :class:`~dpa.engine.instructions.ReportAt`
    it asked for, or a runtime's periodic tick): it sends what is due."""


@dataclass(frozen=True)
class InputMapped(Event):
    """Every input record is in a reducer's queue (termination waits for progress now)."""


@dataclass(frozen=True)
class StateArrived(Event):
    """A peer's state hand-over."""

    move: StateMove


@dataclass(frozen=True)
class PrepareCheckpoint(Event):
    """Checkpoint phase one for the epochs up to ``epoch``; answered with the records
    forwarded to each peer so far."""

    request_id: int
    epoch: int


@dataclass(frozen=True)
class CutCheckpoint(Event):
    """Checkpoint phase two: once the ``expected`` forwarded records of the epochs up to
    ``epoch`` have arrived, answered with this reducer's share."""

    request_id: int
    epoch: int
    expected: int


@dataclass(frozen=True)
class CheckpointTimedOut(Event):
    """The forwards a :class:`CutCheckpoint` waits for did not arrive in time."""

    request_id: int


@dataclass(frozen=True)
class ReleaseCheckpoint(Event):
    """Checkpoint phase three: every share is taken."""


@dataclass(frozen=True)
class Stop(Event):
    """Every record is absorbed: end the loop under the balancer's final ``snapshot`` (if
    any); ``finalize``: the loop's end finalizes too; ``handover``: the loop's end takes
    the keys of the state that the snapshot routes elsewhere out of it, for their owners
    (:class:`~dpa.engine.instructions.StopReducers`)."""

    snapshot: Any = None
    finalize: bool = False
    handover: bool = False


@dataclass(frozen=True)
class Exchange(Event):
    """The partitioned final merge over the job's reducer ``slots`` (None: all)."""

    request_id: int
    slots: list[int] | None = None


@dataclass(frozen=True)
class PartialArrived(Event):
    """A peer's partition of its state for the final merge."""

    partial: Any


@dataclass(frozen=True)
class Finalize(Event):
    """Finalize the reducer's share of the result, first merging ``handover`` (the partial
    states peers handed over at the end); answered with ``(table, merged_keys)``."""

    request_id: int
    handover: tuple[Any, ...] = ()


# -- mapper ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MapperStarted(Event):
    """The mapper's loop starts."""


@dataclass(frozen=True)
class BlockArrived(Event):
    """An input item: a block to map (``prepared``: the rest of a block, routed as it is),
    or a run of blocks mapped one by one and joined (a tuple), of ``epoch`` with ledger
    ``token``."""

    table: pa.Table | tuple[pa.Table, ...]
    epoch: int
    token: int
    prepared: bool = False


@dataclass(frozen=True)
class NoMoreBlocks(Event):
    """The coordinator has no item left for this mapper (or the run ended)."""


@dataclass(frozen=True)
class ForecastAnswered(Event):
    """The snapshot the balancer made of the forecast (None: none came)."""

    snapshot: Any


@dataclass(frozen=True)
class PushesAnswered(Event):
    """Every batch of the last push is queued: per batch, ``(outcome, capacity)``."""

    answers: list[tuple[int, int | None]]


@dataclass(frozen=True)
class BlockSplit(Event):
    """The coordinator took the rest of the block as an item: its ``(epoch, token)``;
    None if the run is over."""

    split: tuple[int, int] | None


# -- a checkpoint round -------------------------------------------------------------


@dataclass(frozen=True)
class Prepared(Event):
    """Reducer ``slot``'s answer to phase one: per reducer, the records of the epochs it
    forwarded there so far (None: it no longer serves the run)."""

    slot: int
    sent: list[int] | None


@dataclass(frozen=True)
class CutTaken(Event):
    """Reducer ``slot``'s share (None: given up; an exception: user code raised)."""

    slot: int
    share: Any


# -- balancer -------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueReported(Event):
    """A reducer's queue length under snapshot ``version``, its key arrivals (if collected)
    and its backlog in seconds of work (if measured)."""

    reducer: int
    queue_length: int
    version: int
    keys: Any = None
    backlog_s: float | None = None


@dataclass(frozen=True)
class ForecastArrived(Event):
    """A mapper's key counts of its first block, at ``now``."""

    mapper: int
    hashes: Any
    counts: Any
    total: int
    now: float


@dataclass(frozen=True)
class BalancerTick(Event):
    """The balancer's timer at ``now``: sample the queues and apply the policy's rule."""

    now: float


@dataclass(frozen=True)
class InputDone(Event):
    """Every input record is in a reducer's queue (an elastic job retires no reducer any more)."""


@dataclass(frozen=True)
class ScaledOut(Event):
    """The runtime carried out a :class:`~dpa.engine.instructions.ScaleOut`: the reducers of
    ``started`` run; ``refused`` says why the others did not."""

    now: float
    started: list[int]
    refused: str | None = None


@dataclass(frozen=True)
class BalancerStopped(Event):
    """The job's end, at ``now``: the timeline takes its last sample; the answer is the
    :class:`~dpa.engine.instructions.BalancingResult`."""

    now: float


@dataclass(frozen=True)
class SnapshotAsked(Event):
    """A member (or the runtime) asks for the balancer's current snapshot; answered by a
    :class:`~dpa.engine.instructions.Reply` to ``request_id``."""

    request_id: int = 0


@dataclass(frozen=True)
class BalancerResumed(Event):
    """A recovered run keeps this balancer (:attr:`~dpa.engine.instructions.Restart.new_balancer`
    False): the lost run's tick timer is gone with it."""


# -- the apply phase of a per-group function (GroupApply) -------------------------------


@dataclass(frozen=True)
class ListGroups(Event):
    """Request to a reducer: pack the groups it holds into units of about ``target_rows``
    rows for the apply phase (answered with the units, largest first)."""

    request_id: int
    target_rows: int


@dataclass(frozen=True)
class UnitsListed(Event):
    """To the group scheduler: the sizes (:class:`~dpa.aggregates.rows.UnitSize`) of the units
    ``worker`` holds, in its order."""

    worker: int
    sizes: list[Any]


@dataclass(frozen=True)
class WorkAsked(Event):
    """To the group scheduler: ``worker`` is free; it ran ``rows`` rows in ``seconds`` since
    it last asked (0, 0 the first time)."""

    worker: int
    rows: int = 0
    seconds: float = 0.0


# -- coordinator ----------------------------------------------------------------------


@dataclass(frozen=True)
class JobStarted(Event):
    """The job starts from routing ``snapshot`` (the checkpoint before any block)."""

    snapshot: Any


@dataclass(frozen=True)
class RunStarted(Event):
    """A run of the job (the first, or one after a recovery) has every member serving it,
    ``at_s`` seconds after the job started."""

    at_s: float


@dataclass(frozen=True)
class BlocksOffered(Event):
    """Input items to hand out, in order (on Ray block refs the driver sends ahead).

    An offer with an ``offer`` id waits while the machine holds ``max_pending`` items or
    more (back-pressure on the driver); the machine answers it with
    :class:`~dpa.engine.instructions.AnswerOffer` once it takes the items, or refuses it
    (the job was aborted, closed, or is not ``job``). Without an id the items are taken at
    once (a runtime that reads its input on demand)."""

    items: list[Any]
    offer: int | None = None
    job: str | None = None


@dataclass(frozen=True)
class InputExhausted(Event):
    """The input has no block left to offer (``job``: the job it is about; None: this one)."""

    job: str | None = None


@dataclass(frozen=True)
class BlockWanted(Event):
    """``mapper`` waits for its next item; ``request`` names the wait (the answer's, where a
    runtime keeps several)."""

    mapper: int
    request: int | None = None


@dataclass(frozen=True)
class BlockFinished(Event):
    """``mapper`` pushed every record of a block of ``epoch``: ``emitted`` records."""

    mapper: int
    epoch: int
    emitted: int


@dataclass(frozen=True)
class BlockCut(Event):
    """``mapper`` pushed ``emitted`` records of item ``parent`` (of ``epoch``) and hands the
    ``rest`` (a :class:`~dpa.engine.epochs.Rest`, kept for replay) back as an item of its own."""

    mapper: int
    epoch: int
    emitted: int
    rest: Any
    parent: int
    request: int | None = None


@dataclass(frozen=True)
class MapperFinished(Event):
    """``mapper`` routed all its items; ``first_routed`` is the snapshot version of its
    first push (None: it pushed nothing)."""

    mapper: int
    first_routed: int | None = None


@dataclass(frozen=True)
class ProgressReported(Event):
    """Reducer ``reducer`` has absorbed ``processed`` records (its checkpoint's included)."""

    reducer: int
    processed: int


@dataclass(frozen=True)
class Tick(Event):
    """Time passed: a checkpoint may be due (the coordinator's clock says how long it was).
    A runtime sends it where work ends (a block done, a reducer's progress, a step paid),
    before the next block goes out."""


@dataclass(frozen=True)
class CheckpointOpened(Event):
    """The runtime can run the checkpoint it was told to start (no scale-out is under way):
    the round begins over the job's reducers now."""


@dataclass(frozen=True)
class CheckpointSnapshot(Event):
    """The balancer's routing snapshot as the checkpoint round ended."""

    snapshot: Any


@dataclass(frozen=True)
class CheckpointStored(Event):
    """The runtime stored the checkpoint (on Ray: its states in the coordinator's object
    store), in the form it restores it from."""

    checkpoint: Any


@dataclass(frozen=True)
class CheckpointLost(Event):
    """A member was lost while the checkpoint was taken: it is abandoned."""


@dataclass(frozen=True)
class MemberLost(Event):
    """The run lost a member (or its node, or an object it needed), detected ``at_s`` seconds
    after the job started; ``error`` says how it looked, ``suspect`` is the member whose
    call failed first (often not the dead one: a mapper pushing to a dead reducer). No item
    is handed out until :class:`MembersReplaced` says who died."""

    at_s: float
    error: str
    suspect: str


@dataclass(frozen=True)
class MembersReplaced(Event):
    """The runtime stopped the lost run and replaced the dead members: their ``roles``
    (``"balancer"``, ``"reducer-2"``, ...) and the node ids they ran on (where known)."""

    roles: list[str]
    nodes: list[str]


@dataclass(frozen=True)
class ScaleOutRequested(Event):
    """The balancer asks for reducers in the free ``slots``; ``free_cpus`` is what the
    cluster has free now."""

    slots: list[int]
    free_cpus: float


@dataclass(frozen=True)
class ScaleOutStarted(Event):
    """The reducers of ``slots`` run and every member has their handles; ``refused`` says why
    other requested slots did not start (None: all did)."""

    slots: list[int]
    refused: str | None = None


@dataclass(frozen=True)
class ScaleOutFailed(Event):
    """The reducers of ``slots`` did not start: ``reason``."""

    slots: list[int]
    reason: str


@dataclass(frozen=True)
class FromRun(Event):
    """``events`` a member of run ``run`` sent (``<job id>`` or ``<job id>.<n>`` after ``n``
    recoveries): the machine takes them if that run is the one serving the job; otherwise
    it drops them, answering the ones that wait for an answer (a block asked for: none; a
    split: none; a scale-out: the run ended; a scale-out that failed still stops its reducers)."""

    run: str
    events: tuple[Event, ...]


@dataclass(frozen=True)
class RunJob(Event):
    """The runtime is asked to run job ``job`` (it fails if that job was aborted meanwhile)."""

    job: str


@dataclass(frozen=True)
class CancelRequested(Event):
    """Job ``job`` is to fail from outside (the driver's timeout, a broken source): ``reason``."""

    job: str
    reason: str


@dataclass(frozen=True)
class JobAborted(Event):
    """The runtime stops the job on its members (it failed, or was cancelled): no run serves
    it from now on and no offer is taken."""


@dataclass(frozen=True)
class JobClosed(Event):
    """The runtime is done with the job (it ended, or failed): nothing will be replayed."""


@dataclass(frozen=True)
class BalancingEnded(Event):
    """The balancer stopped; ``final`` is the routing snapshot the job ends on."""

    final: Any
