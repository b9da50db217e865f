"""What the state machines of :mod:`dpa.engine` tell their runtime to do.

The mapper, reducer, balancer and coordinator machines never send anything themselves: they
return these instructions, and each runtime (Ray actors, or the in-process simulation)
carries them out its own way. Tests feed events to the machines and check the instructions
that come back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa


class Instruction:
    """Base of every instruction a machine returns (each a frozen dataclass): what its
    runtime is to do."""

    __slots__ = ()


@dataclass(frozen=True)
class Push(Instruction):
    """Mapper -> reducer ``dest``: a batch routed there (counts against its queue bound)."""

    dest: int
    batch: pa.Table


@dataclass(frozen=True)
class Forward(Instruction):
    """Reducer -> reducer ``dest``: queued records whose key the sender no longer owns
    (always accepted: they are already inside the bounded system), of input ``epoch``
    (:mod:`dpa.engine.epochs`)."""

    dest: int
    batch: pa.Table
    epoch: int = 0


@dataclass(frozen=True)
class StateMove(Instruction):
    """Reducer -> reducer ``dest`` (``JobConfig.migrate="state"``, or the job's end): the
    partial states of ``keys`` keys the sender no longer owns, accumulated from records of
    input epochs up to ``epoch`` (:mod:`dpa.engine.epochs`), under the sender's snapshot
    ``version``; the receiver merges them into its state, and passes on those it no longer
    owns if its own snapshot is newer. ``final``: the end's hand-over under the final
    routing (:class:`StopReducers` ``handover``), which reaches the receiver with its
    :class:`~dpa.engine.events.Finalize`."""

    dest: int
    partial: Any
    epoch: int
    keys: int
    version: int = -1
    final: bool = False


@dataclass(frozen=True)
class Publish(Instruction):
    """Balancer -> every mapper and reducer: adopt this routing snapshot."""

    snapshot: Any


@dataclass(frozen=True)
class ScaleOut(Instruction):
    """Balancer -> runtime (elastic reducers): start reducers in these free ``slots`` under
    ``snapshot`` (the balancer's), give them the peers' handles, then report back
    (:class:`~dpa.engine.events.ScaledOut`) so the balancer gives them tokens and publishes
    the new routing."""

    slots: tuple[int, ...]
    snapshot: Any = None


@dataclass(frozen=True)
class TickAt(Instruction):
    """Balancer -> its runtime: feed it :class:`~dpa.engine.events.BalancerTick` at clock time
    ``at`` (the balancer's clock; at once if that time has passed). Asked once per tick, at
    the first report after the last tick (:class:`~dpa.engine.balancer.BalancerMachine`)."""

    at: float


@dataclass(frozen=True)
class AnswerForecast(Instruction):
    """Balancer -> the mapper whose forecast it took: route under ``snapshot``."""

    snapshot: Any


@dataclass(frozen=True)
class LogRebalances(Instruction):
    """Balancer -> its runtime's metrics: the rebalancing ``events`` logged since the last
    such instruction, the published snapshot's ``version`` and, for an elastic job, the
    reducers that take part (None otherwise)."""

    events: tuple[Any, ...]
    version: int
    active_reducers: int | None


@dataclass(frozen=True)
class BalancingResult(Instruction):
    """Balancer -> runtime, at the job's end: the event log, the final snapshot, the
    queue-length timeline, the scaling log and the reducer slots that took part
    (``0 .. width - 1``)."""

    events: tuple[Any, ...]
    snapshot: Any
    timeline: tuple[Any, ...]
    scaling: tuple[Any, ...]
    width: int


# -- what the mapper and reducer machines (dpa.engine.mapper_machine, reducer_machine) ask for


@dataclass(frozen=True)
class SendForward(Instruction):
    """Reducer -> reducer ``dest``: forwarded records (a :class:`Forward`) sent under the
    sender's snapshot ``version``; the receiver accepts them whatever its queue holds."""

    dest: int
    batch: pa.Table
    epoch: int
    version: int


@dataclass(frozen=True)
class SendState(Instruction):
    """Reducer -> reducer: a :class:`StateMove`. ``awaited``: the event that produced it
    is answered only once the receiver has merged it (a state passed on by a receiver:
    the original sender's end of the job waits for every move it started)."""

    move: StateMove
    awaited: bool = False


@dataclass(frozen=True)
class AnswerPush(Instruction):
    """Reducer -> the mapper whose push ``push_id`` is now queued: what it tells the mapper
    about its push size (:data:`~dpa.engine.flow.PUSH_GROW`, ``PUSH_KEEP`` or
    ``PUSH_SHRINK``) and the queue's bound in rows (None: unknown or unbounded)."""

    push_id: int
    outcome: int
    capacity: int | None


@dataclass(frozen=True)
class FetchSnapshot(Instruction):
    """Reducer -> balancer: a push was routed under a newer snapshot than the reducer has;
    fetch the balancer's and hand it back as :class:`~dpa.engine.events.SnapshotFetched`."""


@dataclass(frozen=True)
class PayStep(Instruction):
    """Reducer -> its runtime: pay a step's cost (``mode`` ``"sleep"`` or ``"spin"``, in
    seconds; 0 for no cost), then hand back :class:`~dpa.engine.events.StepPaid`."""

    cost_s: float
    mode: str


@dataclass(frozen=True)
class Report(Instruction):
    """Reducer -> balancer: its queue length under snapshot ``version``, the key arrivals
    (if the policy wants them) and the backlog in seconds of work (None: not measured)."""

    queue_length: int
    version: int
    keys: Any
    backlog_s: float | None
    processed: int
    forwarded: int
    tokens: int | None


@dataclass(frozen=True)
class ReportAt(Instruction):
    """Reducer -> its runtime: feed it :class:`~dpa.engine.events.ReportDue` at clock time
    ``at`` (the reducer's clock; a tick of its report clock, shared by every reducer of
    the process, so that what they report at one tick can leave the process as one
    message). Asked once per tick and only when the reducer has something to say."""

    at: float


@dataclass(frozen=True)
class Progress(Instruction):
    """Reducer -> coordinator: the records it has absorbed (its checkpoint's included)."""

    processed: int


@dataclass(frozen=True)
class Reply(Instruction):
    """The answer to a request event (``request_id``): a checkpoint phase, a final merge step."""

    request_id: int
    value: Any


@dataclass(frozen=True)
class SendPartial(Instruction):
    """Reducer -> reducer ``dest``: a partition of the state for the final merge."""

    dest: int
    partial: Any


@dataclass(frozen=True)
class Finished(Instruction):
    """Reducer -> its runtime: the job's loop is over (stopped, queue empty); ``counters``
    as :meth:`~dpa.engine.reducer.ReducerLogic.counters`; ``finalize``: the runtime also
    finalizes now (:meth:`~dpa.engine.reducer_machine.ReducerMachine` on a ``Stop`` that asked so);
    ``handover``: the end's hand-over (:class:`StateMove` ``final``, one per owner that gets
    keys), for the runtime to give each owner with its ``Finalize``."""

    counters: dict[str, int]
    finalize: bool
    handover: tuple[StateMove, ...] = ()


@dataclass(frozen=True)
class RequestBlock(Instruction):
    """Mapper -> coordinator: the next input item, asked ahead (the answer is awaited by
    :class:`AwaitBlock`)."""


@dataclass(frozen=True)
class AwaitBlock(Instruction):
    """Mapper -> its runtime: the mapper is idle until the item it asked for arrives
    (:class:`~dpa.engine.events.BlockArrived` or :class:`~dpa.engine.events.NoMoreBlocks`)."""


@dataclass(frozen=True)
class SendForecast(Instruction):
    """Mapper -> balancer: the key counts of its first block; the answer is the snapshot to
    route under (:class:`~dpa.engine.events.ForecastAnswered`). With ``wait`` False the
    mapper routes on without an answer (the balancer is still starting) and takes what the
    balancer makes of the counts when it publishes it."""

    hashes: Any
    counts: Any
    total: int
    wait: bool = True


@dataclass(frozen=True)
class SendPushes(Instruction):
    """Mapper -> reducers: one push, one batch per reducer, routed under ``version``, of
    input ``epoch``; the answers come back together (:class:`~dpa.engine.events.PushesAnswered`)."""

    pushes: list[Push]
    version: int
    epoch: int


@dataclass(frozen=True)
class SplitBlock(Instruction):
    """Mapper -> coordinator: ``emitted`` records of item ``token`` (of ``epoch``) are pushed
    and the ``rest`` (a table) becomes an item of its own; the answer is the rest's
    ``(epoch, token)`` (:class:`~dpa.engine.events.BlockSplit`)."""

    epoch: int
    emitted: int
    rest: pa.Table
    token: int


@dataclass(frozen=True)
class BlockDone(Instruction):
    """Mapper -> coordinator: every record of a block of ``epoch`` is queued at a reducer:
    ``emitted`` records."""

    epoch: int
    emitted: int


@dataclass(frozen=True)
class MapperDone(Instruction):
    """Mapper -> coordinator: no item is left; ``first_routed`` is the snapshot version of
    its first push (None: it pushed nothing)."""

    first_routed: int | None
    emitted: int


# -- what a checkpoint round (dpa.engine.checkpoint_round) asks for


@dataclass(frozen=True)
class AskPrepare(Instruction):
    """Coordinator -> reducer ``slot``: checkpoint phase one for the epochs up to ``epoch``
    (:class:`~dpa.engine.events.PrepareCheckpoint`)."""

    slot: int
    epoch: int


@dataclass(frozen=True)
class AskCut(Instruction):
    """Coordinator -> reducer ``slot``: phase two, its share once ``expected`` forwarded
    records have arrived (:class:`~dpa.engine.events.CutCheckpoint`)."""

    slot: int
    epoch: int
    expected: int


@dataclass(frozen=True)
class AskRelease(Instruction):
    """Coordinator -> reducer ``slot``: phase three, the held forwards go out."""

    slot: int


@dataclass(frozen=True)
class CheckpointTaken(Instruction):
    """Every share of the checkpoint of ``epoch`` is in: per slot ``(state, records,
    pending batches)``; ``absorbed`` and ``pending`` records in all, for the conservation
    check (:meth:`~dpa.engine.coordinator.CoordinatorLogic.on_checkpoint`). The coordinator
    machine takes the verdicts; only :class:`CheckpointFailed` reaches a runtime (the job fails)."""

    epoch: int
    shares: dict[int, Any]
    absorbed: int
    pending: int


@dataclass(frozen=True)
class CheckpointGivenUp(Instruction):
    """The checkpoint of ``epoch`` is not taken (the run ended, or forwards did not arrive):
    the job goes on from the previous one."""

    epoch: int
    reason: str


@dataclass(frozen=True)
class CheckpointFailed(Instruction):
    """User code raised while a share was cut (a reducer's ``merge`` folding the epochs):
    that reducer's state is no longer whole, so the job fails with ``error``."""

    epoch: int
    error: BaseException


# -- the group scheduler (the apply phase of GroupApply) --------------------------------


@dataclass(frozen=True)
class RunUnit(Instruction):
    """Worker ``worker`` runs unit ``index`` of reducer ``owner`` (its rows move first when
    ``owner != worker``)."""

    worker: int
    owner: int
    index: int


@dataclass(frozen=True)
class WorkerDone(Instruction):
    """No unit is left for ``worker``."""

    worker: int


# -- what the coordinator machine (dpa.engine.coordinator_machine) tells its runtime


@dataclass(frozen=True)
class GiveBlock(Instruction):
    """Coordinator -> ``mapper``: its next item (a block, or a
    :class:`~dpa.engine.epochs.Rest` to route as it is), of ``epoch`` with ledger ``token``."""

    mapper: int
    item: Any
    epoch: int
    token: int
    request: int | None = None


@dataclass(frozen=True)
class NoMoreBlocks(Instruction):
    """Coordinator -> ``mapper``: no item is left for it (or its run ended)."""

    mapper: int
    request: int | None = None


@dataclass(frozen=True)
class ReadInput(Instruction):
    """Coordinator -> runtime: a mapper waits and no item is queued: offer the next input
    block (:class:`~dpa.engine.events.BlocksOffered`) or say there is none
    (:class:`~dpa.engine.events.InputExhausted`). A runtime whose input is offered ahead
    (Ray's driver) has nothing to do."""


@dataclass(frozen=True)
class InputProgress(Instruction):
    """The share of the input handed out so far (known once the input is exhausted)."""

    fraction: float


@dataclass(frozen=True)
class AnswerSplit(Instruction):
    """Coordinator -> ``mapper``: the ``(epoch, token)`` of the rest it handed back (None:
    its run ended)."""

    mapper: int
    split: tuple[int, int] | None
    request: int | None = None


@dataclass(frozen=True)
class AnswerOffer(Instruction):
    """Coordinator -> the driver: its offer ``offer`` was taken (``accepted``) or refused."""

    offer: int
    accepted: bool


@dataclass(frozen=True)
class AbortJob(Instruction):
    """Coordinator -> runtime: stop the job on every member; it fails with ``reason``."""

    reason: str


@dataclass(frozen=True)
class TellBalancerMapped(Instruction):
    """Coordinator -> balancer: every input record is in a reducer's queue."""


@dataclass(frozen=True)
class TellReducersMapped(Instruction):
    """Coordinator -> the reducers of ``slots``: every input record is in a reducer's queue."""

    slots: tuple[int, ...]


@dataclass(frozen=True)
class StartCheckpoint(Instruction):
    """Coordinator -> runtime: take a checkpoint of the epochs up to ``epoch``; hand back
    :class:`~dpa.engine.events.CheckpointOpened` once no scale-out is under way."""

    epoch: int


@dataclass(frozen=True)
class FetchCheckpointSnapshot(Instruction):
    """Coordinator -> runtime: the round is over; hand back the balancer's snapshot
    (:class:`~dpa.engine.events.CheckpointSnapshot`)."""


@dataclass(frozen=True)
class StoreCheckpoint(Instruction):
    """Coordinator -> runtime: keep this :class:`~dpa.engine.epochs.Checkpoint` (its states
    and pending batches as the reducers handed them over) and hand back the stored form
    (:class:`~dpa.engine.events.CheckpointStored`)."""

    checkpoint: Any


@dataclass(frozen=True)
class FailJob(Instruction):
    """Coordinator -> runtime: the job fails with ``error``."""

    error: BaseException


@dataclass(frozen=True)
class Restart(Instruction):
    """Coordinator -> runtime: run the job again from ``checkpoint``: every reducer restarts
    from it, the balancer from ``balancer_snapshot`` (``new_balancer``: the balancer was
    replaced and resumes from the checkpoint's snapshot; otherwise it keeps its own), as
    run ``run_id`` (members drop the messages of an earlier run; the coordinator machine
    always names it, a balancer told to restart needs no name)."""

    checkpoint: Any
    balancer_snapshot: Any
    new_balancer: bool
    run_id: str | None = None


@dataclass(frozen=True)
class StartReducers(Instruction):
    """Coordinator -> runtime: start reducers in ``slots`` for the running job and give every
    member their handles (:class:`~dpa.engine.events.ScaleOutStarted` or ``ScaleOutFailed``);
    ``refused`` says why other requested slots are not started."""

    slots: tuple[int, ...]
    refused: str | None


@dataclass(frozen=True)
class ServeReducers(Instruction):
    """Coordinator -> runtime: the new reducers of ``slots`` serve the job; it has ``width``
    reducers now."""

    slots: tuple[int, ...]
    width: int


@dataclass(frozen=True)
class DropReducers(Instruction):
    """Coordinator -> runtime: the reducers started in ``slots`` do not serve the job: stop them."""

    slots: tuple[int, ...]


@dataclass(frozen=True)
class AnswerScaleOut(Instruction):
    """Coordinator -> balancer: the reducers of ``started`` run; ``refused`` says why the
    others did not."""

    started: tuple[int, ...]
    refused: str | None


@dataclass(frozen=True)
class StopBalancer(Instruction):
    """Coordinator -> runtime: every record is absorbed: stop the balancer and hand back its
    final snapshot (:class:`~dpa.engine.events.BalancingEnded`)."""


@dataclass(frozen=True)
class StopReducers(Instruction):
    """Coordinator -> the reducers of ``slots``: end the loop under ``snapshot`` (the final
    routing); ``finalize``: each finalizes as its loop ends; ``handover``: each loop's end
    takes the keys of its state that ``snapshot`` routes elsewhere out of it
    (:class:`Finished` ``handover``), and :class:`FinalizeReducers` hands them to their
    owners. The runtime waits for the loops."""

    slots: tuple[int, ...]
    snapshot: Any
    finalize: bool
    handover: bool = False


@dataclass(frozen=True)
class FinalMerge(Instruction):
    """Coordinator -> the reducers of ``slots``: the partitioned final merge."""

    slots: tuple[int, ...]


@dataclass(frozen=True)
class ApplyGroups(Instruction):
    """Coordinator -> runtime: run the per-group function's apply phase over the reducers."""


@dataclass(frozen=True)
class FinalizeReducers(Instruction):
    """Coordinator -> every reducer of the job: finalize your share of the result, after
    merging the hand-over addressed to you by the loops' ends (:class:`Finished` ``handover``:
    :func:`~dpa.engine.output.handover_by_slot`), with the call."""


@dataclass(frozen=True)
class TakeFinalized(Instruction):
    """Coordinator -> runtime: the reducers finalized as their loops ended (their counters
    hold the merged keys)."""


@dataclass(frozen=True)
class EndJob(Instruction):
    """Coordinator -> runtime: the job is over; ``merged``: the final merge ran."""

    merged: bool
