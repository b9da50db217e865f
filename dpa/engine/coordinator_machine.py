"""The coordinator's protocol: one entry point, :meth:`CoordinatorMachine.handle`, events in,
instructions out.

The coordinator takes the input items a runtime offers (holding an offer back while
``max_pending`` items wait: the driver feels back-pressure), hands them to the mappers that
ask (the items of a rolled-back run first, in the order they first went out), tells the
balancer and the reducers once that every input record is queued, starts a checkpoint when an epoch can close and decides what
each round's verdict means (stored, given up, or the job fails), recovers a run that lost a
member (or fails the job after ``plan.max_recoveries`` recoveries) as a new *run* of the
job (``<job id>.<n>``, whose members' messages it takes while it drops an earlier run's:
:class:`~dpa.engine.events.FromRun`), decides which
requested reducers of an elastic job start, and ends the job by conservation: balancer,
reducers, the final merge when keys may sit on several reducers, then finalize; and says
how many reducer slots the result covers (:meth:`CoordinatorMachine.result_width`). The
bookkeeping (epochs, conservation counts) is :class:`~dpa.engine.coordinator.CoordinatorLogic`'s;
one checkpoint is a :class:`~dpa.engine.checkpoint_round.CheckpointRound`.

Each runtime (the Ray coordinator actor, the in-process simulation) turns calls into the
events of :mod:`dpa.engine.events` and carries out the instructions that come back; waiting
(for a reducer's answer, for a lock, for a member to start) is the runtime's.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.checkpoint_round import CheckpointRound
from dpa.engine.coordinator import CoordinatorLogic
from dpa.engine.epochs import Checkpoint, Recovery
from dpa.engine.machine import Machine, handles
from dpa.engine.output import end_by_handover, finalize_at_stop, needs_final_merge
from dpa.engine.plan import JobPlan
from dpa.engine.runs import run_name, serves
from dpa.errors import JobFailedError

logger = logging.getLogger(__name__)

#: A checkpoint round costs calls and copies in proportion to the job's reducers (three
#: phases, each reducer's state copied): the next round starts no sooner than this many
#: times the last one's duration after it ended, so that rounds take at most a fifth of a
#: job's time however wide it is (and ``checkpoint_interval_s`` apart at least, as before).
CHECKPOINT_SPACING = 4.0

#: A round's verdicts (:mod:`dpa.engine.checkpoint_round`).
_VERDICTS = (op.CheckpointTaken, op.CheckpointGivenUp, op.CheckpointFailed)


class CoordinatorMachine(Machine):
    """One job's coordination (see the module docstring).

    Args:
        plan: The job.
        clock: Seconds, monotonic (wall time on Ray, virtual time in-process): it times
            the epochs (``plan.checkpoint_interval_s``).
        slots: The reducer slots serving the job at its start (default: the first
            ``plan.active_reducers``, or all).
        reducer_num_cpus: CPUs each reducer takes (a scale-out starts only the reducers
            the free CPUs fit; 0: no limit).
        finalize_at_stop: Whether the runtime's reducers can finalize as their loops end
            (:func:`~dpa.engine.output.finalize_at_stop` then decides when they do).
        max_pending: Items an offer with an id may find queued and still be taken at once
            (None: no bound); see :class:`~dpa.engine.events.BlocksOffered`.
    """

    role = "coordinator"

    def __init__(self, plan: JobPlan, clock: Callable[[], float], slots: Sequence[int] | None = None,
                 reducer_num_cpus: float = 0.0, finalize_at_stop: bool = True,
                 max_pending: int | None = None) -> None:
        self.plan = plan
        self.clock = clock
        R = plan.num_reducers
        self.max_pending = max_pending
        #: Reducer slots that served the job (the first ``plan.active_reducers`` and every one
        #: a scale-out started): with the slots that did any work, the result's width.
        self.served = set(range(plan.active_reducers or R))
        self.job_slots = list(range(plan.active_reducers or R)) if slots is None else sorted(slots)
        self.reducer_num_cpus = float(reducer_num_cpus)
        self.can_finalize_at_stop = finalize_at_stop
        self.logic = CoordinatorLogic(plan.num_mappers, R, plan.checkpoint_interval_s)
        self.initial: Any = None  # the job's first routing snapshot (JobStarted)
        self.checkpoint = Checkpoint(-1, [None] * R, [0] * R, None)
        self.checkpoints = 0
        self.recoveries: list[Recovery] = []
        self.failures: list[str] = []
        self.queue: deque[Any] = deque()  # items to hand out, in order
        self.held: deque[ev.BlocksOffered] = deque()  # offers waiting for room (max_pending)
        self.aborted = False  # the runtime stops the job: no run serves it, no offer is taken
        self.closed = False
        self.round_started = 0.0
        self.next_round = -math.inf  # no checkpoint round before (CHECKPOINT_SPACING)
        self._reset_run()
        self.live = False  # a run is serving the job (items go out)

    def _reset_run(self) -> None:
        """What a run starts without: nobody waits, nothing told, no checkpoint under way."""
        # mappers waiting for an item (with their requests), in the order they asked
        self.waiting: list[tuple[int, int | None]] = []
        self.reading = False  # a ReadInput is out
        self.told_mapped = False
        self.ending = False  # every record is absorbed: the job ends
        self.opening: int | None = None  # the epoch of a checkpoint started, its round not begun
        self.round: CheckpointRound | None = None
        self.verdict: Any = None
        self.first_routed: dict[int, int] = {}  # per mapper, this run: the version of its first push
        self.lost: ev.MemberLost | None = None

    # -- what the runtimes read -----------------------------------------------------
    @property
    def queued(self) -> int:
        """Items waiting to be handed out."""
        return len(self.queue)

    @property
    def serving(self) -> str | None:
        """The job this machine serves: its id, None once it is aborted or closed."""
        return None if self.aborted or self.closed else self.plan.job_id

    @property
    def run_id(self) -> str:
        """The run that serves the job (the last one started): ``<job id>``, then
        ``<job id>.<n>`` after ``n`` recoveries."""
        return run_name(self.plan.job_id, len(self.recoveries))

    def result_width(self, counters: Mapping[int, Mapping[str, int]]) -> int:
        """The reducer slots ``0 .. width - 1`` the job's result covers, given each slot's
        end-of-loop ``counters``: every slot that served the job (slots are taken lowest
        first) and every one that processed or forwarded records."""
        worked = [slot for slot, c in counters.items() if c["processed"] or c["forwarded"]]
        return max(max(self.served, default=-1), max(worked, default=-1)) + 1

    @property
    def processed(self) -> int:
        """Records the reducers absorbed so far (as reported)."""
        return sum(self.logic.processed)

    @property
    def emitted(self) -> list[int]:
        """Records emitted per mapper by the blocks the result holds."""
        return list(self.logic.emitted)

    @property
    def blocks_per_mapper(self) -> list[int]:
        return list(self.logic.blocks_per_mapper)

    # -- the run --------------------------------------------------------------------
    @handles(ev.JobStarted)
    def _on_job_started(self, event: ev.JobStarted) -> list[Any]:
        self.initial = event.snapshot
        self.checkpoint.snapshot = event.snapshot
        return []

    @handles(ev.RunStarted)
    def _on_run_started(self, event: ev.RunStarted) -> list[Any]:
        self.live = True
        if self.recoveries:
            self.recoveries[-1].recover_s = event.at_s - self.recoveries[-1].at_s
        return self._hand_out()

    @handles(ev.JobClosed)
    def _on_job_closed(self, event: ev.JobClosed) -> list[Any]:
        """Lets go of what was kept for a recovery: the items not handed out, those handed
        out since the last checkpoint and the checkpoint's states. On Ray these are refs
        that keep input blocks and states in the object store, which an idle pool would
        otherwise hold until its next job."""
        self.live, self.closed = False, True
        out = self._refuse_offers()
        self.queue.clear()
        self.logic.ledger.forget_items()
        self.checkpoint.states = [None] * len(self.checkpoint.states)
        self.checkpoint.pending = None
        self.round = self.verdict = None
        return out

    @handles(ev.RunJob)
    def _on_run_job(self, event: ev.RunJob) -> list[Any]:
        if event.job != self.plan.job_id or self.aborted or self.closed:
            return [op.FailJob(JobFailedError(f"job {event.job} was cancelled before it started"))]
        return []

    @handles(ev.CancelRequested)
    def _on_cancel(self, event: ev.CancelRequested) -> list[Any]:
        """Aborts the job if it is this one and still open."""
        if event.job != self.plan.job_id or self.aborted or self.closed:
            return []
        return [op.AbortJob(event.reason)]

    @handles(ev.JobAborted)
    def _on_aborted(self, event: ev.JobAborted) -> list[Any]:
        self.live, self.aborted = False, True
        return self._refuse_offers()

    @handles(ev.FromRun)
    def _on_from_run(self, event: ev.FromRun) -> list[Any]:
        """The events of a member of run ``event.run``: taken while that run serves the job."""
        current = serves(self.run_id if self.live else None, event.run)
        out: list[Any] = []
        for inner in event.events:
            if current:
                out += self.handlers[type(inner)](self, inner)
            elif isinstance(inner, ev.BlockWanted):
                out.append(op.NoMoreBlocks(inner.mapper, inner.request))
            elif isinstance(inner, ev.BlockCut):
                out.append(op.AnswerSplit(inner.mapper, None, inner.request))
            elif isinstance(inner, ev.ScaleOutRequested | ev.ScaleOutStarted):
                out.append(op.AnswerScaleOut((), "the run ended"))
            elif isinstance(inner, ev.ScaleOutFailed):  # (its reducers stop whatever the run)
                out += self._on_scale_out_failed(inner)
        return out

    def settle(self) -> list[Any]:
        """Ends the run when it is complete; tells the balancer and the reducers once that
        every record is pushed."""
        if self.ending or not self.live:
            return []
        if self.logic.complete():
            self.ending = True
            return [op.StopBalancer()]
        if self.logic.mapping_done and not self.told_mapped:
            self.told_mapped = True
            return [op.TellBalancerMapped(), op.TellReducersMapped(tuple(self.job_slots))]
        return []

    # -- block hand-out -------------------------------------------------------------
    @handles(ev.BlocksOffered)
    def _on_offered(self, event: ev.BlocksOffered) -> list[Any]:
        if event.offer is None:
            return self._take(event)
        if (event.job is not None and event.job != self.plan.job_id) or self.aborted or self.closed:
            return [op.AnswerOffer(event.offer, False)]
        if self.held or not self._room():
            self.held.append(event)
            return []
        return [op.AnswerOffer(event.offer, True), *self._take(event)]

    def _room(self) -> bool:
        """Whether an offer may add its items now (back-pressure on the driver)."""
        return self.max_pending is None or len(self.queue) < self.max_pending

    def _take(self, event: ev.BlocksOffered) -> list[Any]:
        self.queue.extend(event.items)
        self.logic.blocks_offered += len(event.items)
        self.reading = False
        return self._hand_out()

    def _admit(self) -> list[Any]:
        """Takes the held offers, in order, while there is room."""
        out: list[Any] = []
        while self.held and self._room():
            offer = self.held.popleft()
            out += [op.AnswerOffer(offer.offer, True), *self._take(offer)]
        return out

    def _refuse_offers(self) -> list[Any]:
        refused = [op.AnswerOffer(offer.offer, False) for offer in self.held]
        self.held.clear()
        return refused

    @handles(ev.InputExhausted)
    def _on_exhausted(self, event: ev.InputExhausted) -> list[Any]:
        if event.job is not None and event.job != self.plan.job_id:
            return []
        self.logic.input_done = True
        self.reading = False
        return self._hand_out()

    @handles(ev.BlockWanted)
    def _on_wanted(self, event: ev.BlockWanted) -> list[Any]:
        self.waiting.append((event.mapper, event.request))
        return self._hand_out()

    def _hand_out(self) -> list[Any]:
        """Items to the waiting mappers, in the order they asked; once the input is
        exhausted and nothing is queued, no more."""
        if not self.live:
            return []
        logic, out = self.logic, []
        while self.waiting and self.queue:
            (mapper, request), item = self.waiting.pop(0), self.queue.popleft()
            out.append(op.GiveBlock(mapper, item, *logic.on_block_taken(mapper, item, self.clock()), request))
            if logic.input_done:
                taken = sum(logic.blocks_per_mapper)
                out.append(op.InputProgress(taken / max(1, taken + len(self.queue))))
        if self.held and self._room():  # (the hand-out made room for an offer held back)
            return out + self._admit()
        if self.waiting and logic.input_done:
            out += [op.NoMoreBlocks(m, request) for m, request in self.waiting]
            self.waiting = []
        elif self.waiting and not self.reading:
            self.reading = True
            out.append(op.ReadInput())
        return out

    @handles(ev.BlockFinished)
    def _on_block_finished(self, event: ev.BlockFinished) -> list[Any]:
        self.logic.on_block_done(event.mapper, event.epoch, event.emitted)
        return []

    @handles(ev.BlockCut)
    def _on_block_cut(self, event: ev.BlockCut) -> list[Any]:
        split = self.logic.on_block_split(event.mapper, event.epoch, event.emitted, event.rest, event.parent,
                                          self.clock())
        return [op.AnswerSplit(event.mapper, split, event.request)]

    @handles(ev.MapperFinished)
    def _on_mapper_finished(self, event: ev.MapperFinished) -> list[Any]:
        if event.first_routed is not None:
            self.first_routed[event.mapper] = int(event.first_routed)
        self.logic.on_mapper_done(event.mapper)
        return []

    @handles(ev.ProgressReported)
    def _on_progress(self, event: ev.ProgressReported) -> list[Any]:
        self.logic.on_progress(event.reducer, event.processed)
        return []

    # -- checkpoints ----------------------------------------------------------------
    @handles(ev.Tick)
    def _on_tick(self, event: ev.Tick) -> list[Any]:
        """A checkpoint when an epoch can close (none once every record is absorbed)."""
        now = self.clock()
        if not self.live or self.ending or now < self.next_round or self.logic.complete():
            return []
        epoch = self.logic.checkpoint_due(now)
        if epoch is None:
            return []
        self.opening, self.round_started = epoch, now
        return [op.StartCheckpoint(epoch)]

    @handles(ev.CheckpointOpened)
    def _on_opened(self, event: ev.CheckpointOpened) -> list[Any]:
        if self.opening is None:  # (a recovery dropped it meanwhile)
            return []
        self.round, self.opening = CheckpointRound(self.opening, self.job_slots), None
        return self.round.start()

    @handles(ev.Prepared, ev.CutTaken)
    def _on_round_answer(self, event: Any) -> list[Any]:
        if self.round is None:  # (a late answer of an abandoned round)
            return []
        out = []
        for ins in self.round.handle(event):
            if isinstance(ins, _VERDICTS):
                self.verdict = ins
                out.append(op.FetchCheckpointSnapshot())
            else:
                out.append(ins)
        return out

    @handles(ev.CheckpointSnapshot)
    def _on_round_end(self, event: ev.CheckpointSnapshot) -> list[Any]:
        """The verdict: stored if it holds every record its epochs' blocks emitted; a user
        error fails the job; otherwise the job goes on from the previous checkpoint."""
        verdict, self.verdict, self.round = self.verdict, None, None
        now = self.clock()
        self.next_round = now + CHECKPOINT_SPACING * (now - self.round_started)
        if verdict is None:
            return []
        if isinstance(verdict, op.CheckpointFailed):
            # User code raised while a share was cut (a reducer's merge() folding the
            # epochs): that reducer's state is no longer whole, so the job fails.
            self.logic.ledger.abandon_close()
            return [verdict]
        if isinstance(verdict, op.CheckpointGivenUp):
            logger.warning("dpa checkpoint of epoch %d given up: %s", verdict.epoch, verdict.reason)
            self.logic.ledger.abandon_close()
            return []
        if not self.logic.on_checkpoint(verdict.epoch, verdict.absorbed, verdict.pending):
            return []
        R = self.plan.num_reducers
        states, processed, pending = [None] * R, [0] * R, [None] * R
        for slot, (state, records, held) in verdict.shares.items():
            states[slot], processed[slot], pending[slot] = state, records, held
        return [op.StoreCheckpoint(Checkpoint(verdict.epoch, states, processed, event.snapshot,
                                              self.logic.ledger.blocks_closed, pending))]

    @handles(ev.CheckpointStored)
    def _on_stored(self, event: ev.CheckpointStored) -> list[Any]:
        self.checkpoint = event.checkpoint
        self.checkpoints += 1
        return []

    @handles(ev.CheckpointLost)
    def _on_checkpoint_lost(self, event: ev.CheckpointLost) -> list[Any]:
        if self.round is not None or self.opening is not None:
            self.logic.ledger.abandon_close()
        self.round = self.verdict = self.opening = None
        return []

    # -- recovery -------------------------------------------------------------------
    @handles(ev.MemberLost)
    def _on_member_lost(self, event: ev.MemberLost) -> list[Any]:
        self.live = False
        self.lost = event
        return []

    @handles(ev.MembersReplaced)
    def _on_replaced(self, event: ev.MembersReplaced) -> list[Any]:
        """Fails the job after ``plan.max_recoveries`` recoveries; otherwise rolls back to the
        last checkpoint and hands its later items out again, first."""
        lost, plan, ck = self.lost, self.plan, self.checkpoint
        dead = list(event.roles) or [lost.suspect]
        self.failures.append(f"{', '.join(dead)} lost ({lost.error})")
        if len(self.recoveries) >= plan.max_recoveries:
            return [op.FailJob(JobFailedError(
                f"dpa job failed: {len(self.failures)} failure(s), more than max_recoveries="
                f"{plan.max_recoveries}: " + "; ".join(self.failures), actor=dead[0]))]
        logger.warning("dpa job %s lost %s (%s); recovering from checkpoint epoch %d",
                       plan.job_id, ", ".join(dead), lost.error, ck.epoch)
        replayed = max(0, sum(self.logic.processed) - sum(ck.processed))  # (reports lag)
        items = self.logic.rollback(ck.processed)
        self.queue.extendleft(reversed(items))
        self._reset_run()
        self.recoveries.append(Recovery(lost.at_s, list(event.roles), list(event.nodes), lost.error, ck.epoch,
                                        len(items), replayed, 0.0))
        # A new balancer continues from the checkpoint's routing; one that survived keeps its own.
        new_balancer = "balancer" in event.roles
        return [op.Restart(ck, ck.snapshot if new_balancer else self.initial, new_balancer, self.run_id)]

    # -- elastic reducers -----------------------------------------------------------
    @handles(ev.ScaleOutRequested)
    def _on_scale_out(self, event: ev.ScaleOutRequested) -> list[Any]:
        """Starts the requested slots the free CPUs fit (all when reducers take none)."""
        slots, why = list(event.slots), None
        if self.reducer_num_cpus > 0:
            fits = int(event.free_cpus // self.reducer_num_cpus)
            if fits < len(slots):
                why = (f"no free CPU: {event.free_cpus:g} free, each reducer takes reducer_num_cpus="
                       f"{self.reducer_num_cpus:g}")
                slots = slots[:fits]
        if not slots:
            return [op.AnswerScaleOut((), why)]
        return [op.StartReducers(tuple(slots), why)]

    @handles(ev.ScaleOutStarted)
    def _on_scaled_out(self, event: ev.ScaleOutStarted) -> list[Any]:
        new = tuple(s for s in event.slots if s not in self.job_slots)
        self.served |= set(event.slots)
        self.job_slots = sorted(set(self.job_slots) | set(event.slots))
        out: list[Any] = [op.ServeReducers(new, len(self.job_slots))]
        if self.told_mapped and new:  # (an idle one reports its progress at once from now on)
            out.append(op.TellReducersMapped(new))
        return [*out, op.AnswerScaleOut(tuple(event.slots), event.refused)]

    @handles(ev.ScaleOutFailed)
    def _on_scale_out_failed(self, event: ev.ScaleOutFailed) -> list[Any]:
        """The job goes on at its width."""
        return [op.DropReducers(tuple(s for s in event.slots if s not in self.job_slots)),
                op.AnswerScaleOut((), event.reason)]

    # -- the end --------------------------------------------------------------------
    @handles(ev.BalancingEnded)
    def _on_balancing_ended(self, event: ev.BalancingEnded) -> list[Any]:
        """The reducers stop on the final routing (and hand over the states it moves); the
        input blocks are conserved; then, unless every key stayed on one reducer (after a
        rollback: always, unless states followed their keys), the partial states of a key
        are brought together: by the hand-over at the end when the policy names one owner
        per key (:func:`~dpa.engine.output.end_by_handover`: the loops' ends take the keys
        owned elsewhere out, the finalize calls bring them to their owners), else by the
        partitioned final merge; then finalize."""
        plan, logic, slots = self.plan, self.logic, tuple(self.job_slots)
        merged = ((bool(self.recoveries) and plan.migrate != "state")
                  or needs_final_merge(plan.policy, self.initial, event.final, plan.migrate,
                                       min(self.first_routed.values(), default=None)))
        handover = merged and end_by_handover(plan, event.final)
        if handover and (self.round is not None or self.opening is not None):
            # (the loops' ends take keys out of the states, outside the forwards a round
            # counts: a round under way is dropped, the job is over anyway)
            self.logic.ledger.abandon_close()
            self.round = self.verdict = self.opening = None
        early = self.can_finalize_at_stop and finalize_at_stop(plan, merged)
        out: list[Any] = [op.StopReducers(slots, event.final, early, handover)]
        if logic.ledger.blocks_done != logic.blocks_offered:
            # conservation of input blocks: never lose one silently
            out.append(op.FailJob(RuntimeError(f"{logic.blocks_offered} input blocks offered but "
                                               f"{logic.ledger.blocks_done} mapped")))
        out.append(op.InputProgress(1.0))
        if merged and not handover:
            out.append(op.FinalMerge(slots))
        if plan.applies_groups:
            out.append(op.ApplyGroups())
        elif early:
            out.append(op.TakeFinalized())
        else:
            out.append(op.FinalizeReducers())
        return [*out, op.EndJob(merged)]
