"""The in-process runtime: the engine's machines, carried out without Ray.

It is a deterministic discrete-event simulation in *virtual* time over the same state
machines the Ray actors run (:class:`~dpa.engine.mapper_machine.MapperMachine`,
:class:`~dpa.engine.reducer_machine.ReducerMachine`, :class:`~dpa.engine.balancer.BalancerMachine`
and :class:`~dpa.engine.coordinator_machine.CoordinatorMachine`): it only delivers their
instructions.
Mappers are infinitely fast (blocks go to the mappers that wait for one, round-robin),
reducers pay their :class:`~dpa.aggregates.contract.WithCost` cost in virtual seconds,
a reducer reports when its machine asks (:class:`~dpa.engine.instructions.ReportAt`: a
tick of the shared report clock) and the balancer ticks when its machine asks
(:class:`~dpa.engine.instructions.TickAt`), as on Ray. Because nothing sleeps, a job that would take minutes on Ray with
expensive reducers runs here in seconds: it is the correctness oracle of the Ray runtime,
a simulator of the load balancer at scale and a fault injector.

Messages can cost their receiver CPU time (``costs``: a
:class:`~dpa.runtime.message_costs.MessageCosts`, e.g.
:data:`~dpa.runtime.message_costs.MEASURED`, the costs measured on Ray): the balancer and
the coordinator are then each one FIFO queue (:class:`~dpa.runtime.message_costs.ActorQueue`),
so a report or a block request waits while the actor handles earlier ones and takes effect
when it has been handled, and a reducer's next step starts later by the pushes, forwards
and snapshots it received. The reducers run in ``hosts`` processes (reducer ``r`` in host
``r % hosts``; default one each): as on Ray (:mod:`dpa.runtime.ray.outbox`), the reports
and progress counts a host's reducers send in one step leave it as one message per
destination, which costs the receiver one message plus a part per report it carries. By default messages are free (the protocol alone: every
message at once, for nothing), which is the oracle's and the papers' model. The
balancer's and the coordinator's busy fraction and message counts are in the output's
``extra["sim"]`` (``res.stats.extra["sim"]``).
"""

from __future__ import annotations

import copy
import heapq
import itertools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from dpa.aggregates.rows import unit_size
from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.balancer import BalancerMachine
from dpa.engine.coordinator_machine import CoordinatorMachine
from dpa.engine.epochs import Checkpoint, Rest
from dpa.engine.group_schedule import GroupScheduler, unit_target_rows
from dpa.engine.mapper_machine import MapperMachine
from dpa.engine.output import DRIVER_PROGRESS_INTERVAL_S, RunOutput, handover_by_slot
from dpa.engine.plan import JobPlan
from dpa.engine.reducer_machine import ReducerMachine
from dpa.input.records import unify
from dpa.runtime.message_costs import ActorQueue, MessageCosts

logger = logging.getLogger(__name__)


def run_local(plan: JobPlan, blocks: Iterator[pa.Table],
              progress: Callable[[int], None] | None = None,
              faults: Sequence[tuple[float, str]] = (), costs: MessageCosts | None = None,
              hosts: int | None = None) -> RunOutput:
    """Runs ``plan`` over ``blocks`` in-process and returns the per-reducer outputs.

    ``progress(records_processed)`` is called about every ``DRIVER_PROGRESS_INTERVAL_S``.
    ``faults`` injects failures: at each virtual time a member (``"reducer-2"``,
    ``"mapper-0"``, ``"balancer"``) dies, and the job recovers as on Ray: every member
    rolls back to the last checkpoint (:mod:`dpa.engine.epochs`; a dead balancer restarts
    from the checkpoint's snapshot, a live one keeps its own) and the blocks after it are
    handed out again; more failures than ``plan.max_recoveries`` fail the job.
    ``costs``: what each message costs its receiver (default none,
    ``MessageCosts.free()``; :data:`~dpa.runtime.message_costs.MEASURED` simulates the
    balancer's and the coordinator's load on Ray). ``hosts``: the processes the reducers
    run in (default one per reducer), whose reports and progress travel together.

    Raises:
        JobFailedError: More failures than ``plan.max_recoveries``.
    """
    return LocalRun(plan, blocks, progress, faults, costs, hosts).run()


class LocalRun:
    """One job in virtual time: the machines, their mail and the clock."""

    def __init__(self, plan: JobPlan, blocks: Iterator[pa.Table], progress: Callable[[int], None] | None,
                 faults: Sequence[tuple[float, str]], costs: MessageCosts | None = None,
                 hosts: int | None = None) -> None:
        self.plan = plan
        self.costs = MessageCosts.free() if costs is None else costs
        self.actors = {"balancer": ActorQueue("balancer"), "coordinator": ActorQueue("coordinator")}
        self.waiting: dict[int, Callable[[], Any]] = {}  # heap seq -> a message an actor handles then
        self.pending = {"balancer": 0, "coordinator": 0}  # its messages in the heap
        self.reducer_message_s = 0.0  # what messages cost the reducers, in all
        self.R, self.M = plan.num_reducers, plan.num_mappers
        self.hosts = self.R if hosts is None else max(1, min(int(hosts), self.R))
        # The processes a published snapshot goes to (one call each, as on Ray): one per
        # member, or the hosts given (the mappers run in them too).
        self.processes = self.R + self.M if hosts is None else self.hosts
        self.carried = {"report": 0, "progress": 0}  # reports and progress counts inside those messages
        self.wakes: dict[float, list[int]] = {}  # report clock time -> the reducers that asked for it
        # (actor, host) -> the reports or progress counts the host sends it at the end of this step
        self.outbox: dict[tuple[str, int], list[Any]] = {}
        self.progress_cb = progress
        self.faults = list(faults)
        self.now = 0.0
        self.initial = plan.policy.initial_snapshot(self.R)
        self.balancer = BalancerMachine.for_run(plan, self.initial, None, None)
        # Every reducer slot has a machine from the start (an elastic job's new ones start
        # at once); reducers are asked to finalize (messages cost nothing here).
        self.coordinator = CoordinatorMachine(plan, self.clock, range(self.R), finalize_at_stop=False)
        self.block_iter = iter(blocks)
        self.seq = itertools.count()
        self.ids = itertools.count()
        self.heap: list[tuple[float, int, str, int]] = []
        for i, (at, _role) in enumerate(self.faults):
            heapq.heappush(self.heap, (float(at), next(self.seq), "fault", i))
        self.mail: deque[tuple[str, int, Any]] = deque()  # instructions to carry out, in order
        self.replies: dict[int, Any] = {}
        self.counters: dict[int, dict[str, int]] = {}  # per reducer, its loop's counters at the end
        self.handover: list[Any] = []  # the end's hand-over (StateMoves the loops' ends took out)
        self.ended = False  # every record is absorbed (the coordinator stops the balancer)
        self.results: list[tuple[pa.Table | None, int]] = []
        self.applied: dict[str, Any] | None = None
        self.merged = False
        self._coordinate(ev.JobStarted(self.initial))
        self._start_members(self.initial, None)

    def clock(self) -> float:
        return self.now

    # -- members --------------------------------------------------------------------
    def _start_members(self, snapshot: Any, checkpoint: Checkpoint | None) -> None:
        plan, ck = self.plan, checkpoint
        self.reducers = [ReducerMachine(i, plan, snapshot, self.clock, None if ck is None else (
            copy.deepcopy(ck.states[i]), ck.processed[i], ck.epoch, ck.pending[i] if ck.pending else ()))
            for i in range(self.R)]  # (copies: a checkpoint may be restored again)
        self.mappers = [MapperMachine(i, plan, snapshot, self.clock) for i in range(self.M)]
        self.awaiting = [False] * self.M  # mapper m waits for an item
        self.answers: list[dict[int, tuple[int, int | None]]] = [{} for _ in range(self.M)]
        self.push_owner: dict[int, tuple[int, int]] = {}  # push id -> (mapper, batch index)
        self.push_size = [0] * self.M
        self.owed = [0.0] * self.R  # message costs each reducer pays with its next step
        for r in range(self.R):
            self._to_reducer(r, ev.ReducerStarted())
        for m in range(self.M):
            self._to_mapper(m, ev.MapperStarted())
        self._deliver()
        self._coordinate(ev.RunStarted(self.now))

    def _to_reducer(self, r: int, event: Any) -> None:
        for ins in self.reducers[r].handle(event):
            self.mail.append(("reducer", r, ins))

    def _to_mapper(self, m: int, event: Any) -> None:
        for ins in self.mappers[m].handle(event):
            self.mail.append(("mapper", m, ins))

    def _coordinate(self, *events: Any) -> None:
        """Hands the coordinator's machine events; carries out its instructions at once."""
        for ins in self.coordinator.handle(*events):
            self._coordinator_does(ins)

    def _deliver(self) -> None:
        """Carries out the instructions in the mail, in order, until none is left; then
        what the hosts sent the balancer and the coordinator leaves, one message per host."""
        while self.mail:
            role, i, ins = self.mail.popleft()
            if role == "reducer":
                self._reducer_does(i, ins)
            else:
                self._mapper_does(i, ins)
        if self.outbox:
            self._send_outbox()

    def _send_outbox(self) -> None:
        """Each host's reports go to the balancer, and its progress counts to the
        coordinator, as one message each (:mod:`dpa.runtime.ray.outbox` on Ray)."""
        sent, self.outbox = self.outbox, {}
        for (actor, _host), items in sent.items():
            self.carried["report" if actor == "balancer" else "progress"] += len(items)
            if actor == "balancer":
                cost = self.costs.batch_cost("report", len(items))
                self._at("balancer", cost, "report", lambda items=items: self._balancer_handles(*items))
            else:
                cost = self.costs.batch_cost("progress", len(items))
                self._at("coordinator", cost, "progress", lambda items=items: self._coordinate(*items))

    def _reducer_does(self, r: int, ins: Any) -> None:
        if isinstance(ins, op.SendForward):
            self.owed[ins.dest] += self.costs.push_s
            self._to_reducer(ins.dest, ev.PushArrived(next(self.ids), ins.batch, ins.version, ins.epoch, True))
        elif isinstance(ins, op.AnswerPush):
            owner = self.push_owner.pop(ins.push_id, None)
            if owner is not None:  # (a forward's answer goes nowhere)
                m, index = owner
                self.answers[m][index] = (ins.outcome, ins.capacity)
                if len(self.answers[m]) == self.push_size[m]:
                    got, self.answers[m] = self.answers[m], {}
                    self._to_mapper(m, ev.PushesAnswered([got[k] for k in range(len(got))]))
        elif isinstance(ins, op.PayStep):
            owed, self.owed[r] = self.owed[r], 0.0
            self.reducer_message_s += owed
            heapq.heappush(self.heap, (self.now + ins.cost_s + owed, next(self.seq), "paid", r))
        elif isinstance(ins, op.Report):
            report = ev.QueueReported(r, ins.queue_length, ins.version, ins.keys, ins.backlog_s)
            self.outbox.setdefault(("balancer", r % self.hosts), []).append(report)
        elif isinstance(ins, op.Progress):
            progress = ev.ProgressReported(r, ins.processed)
            self.outbox.setdefault(("coordinator", r % self.hosts), []).append(progress)
        elif isinstance(ins, op.ReportAt):
            self._wake_at(r, ins.at)
        elif isinstance(ins, op.SendState):
            self._to_reducer(ins.move.dest, ev.StateArrived(ins.move))
        elif isinstance(ins, op.FetchSnapshot):
            self._to_reducer(r, ev.SnapshotFetched(self._balancer_snapshot()))
        elif isinstance(ins, op.Reply):
            self.replies[ins.request_id] = ins.value
        elif isinstance(ins, op.SendPartial):
            self._to_reducer(ins.dest, ev.PartialArrived(ins.partial))
        elif isinstance(ins, op.Finished):
            self.counters[r] = ins.counters
            self.handover.extend(ins.handover)
        else:
            raise TypeError(f"the local runtime cannot carry out {ins!r}")

    def _mapper_does(self, m: int, ins: Any) -> None:
        if isinstance(ins, op.SendPushes):
            self.push_size[m] = len(ins.pushes)
            for index, push in enumerate(ins.pushes):
                pid = next(self.ids)
                self.push_owner[pid] = (m, index)
                self.owed[push.dest] += self.costs.push_s
                self._to_reducer(push.dest, ev.PushArrived(pid, push.batch, ins.version, ins.epoch))
        elif isinstance(ins, op.AwaitBlock):
            self.awaiting[m] = True
        elif isinstance(ins, op.SendForecast):
            self._at("balancer", self.costs.forecast_s, "forecast", lambda: self._forecast(m, ins))
        elif isinstance(ins, op.SplitBlock):
            cut = ev.BlockCut(m, ins.epoch, ins.emitted, Rest(ins.rest), ins.token)
            self._at("coordinator", self.costs.mapper_report_s, "block_cut", lambda: self._coordinate(cut))
        elif isinstance(ins, op.BlockDone):
            done = ev.BlockFinished(m, ins.epoch, ins.emitted)
            self._at("coordinator", self.costs.mapper_report_s, "block_done", lambda: self._coordinate(done))
        elif isinstance(ins, op.MapperDone):
            over = ev.MapperFinished(m, ins.first_routed)
            self._at("coordinator", self.costs.mapper_report_s, "mapper_done", lambda: self._coordinate(over))
        elif not isinstance(ins, op.RequestBlock):  # (items are handed out when a mapper waits)
            raise TypeError(f"the local runtime cannot carry out {ins!r}")

    def _forecast(self, m: int, ins: op.SendForecast) -> None:
        """The balancer takes mapper ``m``'s forecast; a waiting mapper gets the snapshot."""
        for done in self.balancer.handle(ev.ForecastArrived(m, ins.hashes, ins.counts, ins.total, self.now)):
            if isinstance(done, op.AnswerForecast):
                if ins.wait:
                    self._to_mapper(m, ev.ForecastAnswered(done.snapshot))
            else:
                self._balancer_does(done)

    # -- message costs ----------------------------------------------------------------
    def _at(self, actor: str, cost: float, kind: str, handle: Callable[[], Any]) -> None:
        """A message of ``kind`` reaches ``actor`` (the balancer or the coordinator) now:
        ``handle`` runs when the actor has handled it, after the messages before it
        (at once when it is free and the message costs nothing)."""
        done = self.actors[actor].admit(self.now, cost, kind)
        if done <= self.now and not self.pending[actor]:
            handle()
            return
        seq = next(self.seq)
        self.waiting[seq] = handle
        self.pending[actor] += 1
        heapq.heappush(self.heap, (done, seq, actor, seq))

    def _handled(self, actor: str, seq: int) -> None:
        """A queued message's time has come: the actor handles it."""
        self.pending[actor] -= 1
        self.waiting.pop(seq)()
        self._deliver()
        self._feed()

    def _ask(self, r: int, event: Any) -> Any:
        """Hands reducer ``r`` a request event; its answer (it arrives at once here)."""
        self._to_reducer(r, event)
        self._deliver()
        if event.request_id not in self.replies:
            raise RuntimeError(f"reducer {r} did not answer {type(event).__name__} at once (bug)")
        return self.replies.pop(event.request_id)

    def _publish(self, snapshot: Any) -> None:
        cost = self.costs.publish_s * self.processes
        if cost:  # (sending to every process keeps the balancer busy)
            self.actors["balancer"].spend(self.now, cost, "publish")
        for r in range(self.R):
            self.owed[r] += self.costs.snapshot_s
        for mapper in self.mappers:
            mapper.handle(ev.SnapshotArrived(snapshot))
        # Every reducer adopts before any forward is delivered (on Ray a push carrying a
        # newer version makes the receiver adopt first), so no record is judged by a
        # reducer still on the old snapshot.
        for r in range(self.R):
            self.mail.extend(("reducer", r, ins) for ins in self.reducers[r].handle(ev.SnapshotArrived(snapshot)))
        self._deliver()

    def _balancer_handles(self, *events: Any) -> None:
        for ins in self.balancer.handle(*events):
            self._balancer_does(ins)

    def _balancer_does(self, ins: Any) -> None:
        if isinstance(ins, op.ScaleOut):  # (the coordinator decides which slots start)
            self._coordinate(ev.ScaleOutRequested(list(ins.slots), 0.0))
        elif isinstance(ins, op.Publish):
            self._publish(ins.snapshot)
        elif isinstance(ins, op.TickAt):
            heapq.heappush(self.heap, (max(self.now, ins.at), next(self.seq), "tick", -1))
        elif not isinstance(ins, op.LogRebalances):  # (no metrics here)
            raise TypeError(f"the local runtime cannot carry out {ins!r}")

    def _balancer_snapshot(self) -> Any:
        snapshot = None
        for ins in self.balancer.handle(ev.SnapshotAsked()):
            if isinstance(ins, op.Reply):
                snapshot = ins.value
            else:
                self._balancer_does(ins)
        return snapshot

    # -- the coordinator's instructions -----------------------------------------------
    def _coordinator_does(self, ins: Any) -> None:
        """Carries out one instruction of the coordinator machine (every answer comes at
        once here: forwards arrive at once, new reducers start at once)."""
        if isinstance(ins, op.GiveBlock):
            prepared = isinstance(ins.item, Rest)
            self._to_mapper(ins.mapper, ev.BlockArrived(ins.item.table if prepared else ins.item, ins.epoch,
                                                        ins.token, prepared))
        elif isinstance(ins, op.NoMoreBlocks):
            self._to_mapper(ins.mapper, ev.NoMoreBlocks())
        elif isinstance(ins, op.ReadInput):
            block = next(self.block_iter, None)
            self._coordinate(ev.InputExhausted() if block is None else ev.BlocksOffered([block]))
        elif isinstance(ins, op.AnswerSplit):
            self._to_mapper(ins.mapper, ev.BlockSplit(ins.split))
        elif isinstance(ins, op.TellReducersMapped):
            for r in ins.slots:
                self._to_reducer(r, ev.InputMapped())
        elif isinstance(ins, op.TellBalancerMapped):
            self._at("balancer", 0.0, "input_done", lambda: self._balancer_handles(ev.InputDone()))
        elif isinstance(ins, op.StartCheckpoint):
            self._coordinate(ev.CheckpointOpened())
        elif isinstance(ins, op.AskPrepare):
            self._coordinate(ev.Prepared(ins.slot, self._ask(ins.slot, ev.PrepareCheckpoint(next(self.ids),
                                                                                             ins.epoch))))
        elif isinstance(ins, op.AskCut):
            share = self._ask(ins.slot, ev.CutCheckpoint(next(self.ids), ins.epoch, ins.expected))
            self._coordinate(ev.CutTaken(ins.slot, share))
        elif isinstance(ins, op.AskRelease):
            self._to_reducer(ins.slot, ev.ReleaseCheckpoint())
            self._deliver()
        elif isinstance(ins, op.FetchCheckpointSnapshot):
            self._coordinate(ev.CheckpointSnapshot(self._balancer_snapshot()))
        elif isinstance(ins, op.StoreCheckpoint):
            self._coordinate(ev.CheckpointStored(ins.checkpoint))
        elif isinstance(ins, op.CheckpointFailed):
            raise ins.error
        elif isinstance(ins, op.FailJob):
            raise ins.error
        elif isinstance(ins, op.Restart):
            self._restart(ins)
        elif isinstance(ins, op.StartReducers):
            self._coordinate(ev.ScaleOutStarted(list(ins.slots), ins.refused))
        elif isinstance(ins, op.AnswerScaleOut):
            self._at("balancer", 0.0, "scaled_out", lambda: self._balancer_handles(
                ev.ScaledOut(self.now, list(ins.started), ins.refused)))
        elif isinstance(ins, op.StopBalancer):
            self.ended = True  # (the run loop ends; _finish goes on)
        elif isinstance(ins, op.StopReducers):
            # Every state hand-over under the final routing is done before the merge
            # (nothing is queued any more: only states move).
            self.handover = []
            for r in ins.slots:
                self._to_reducer(r, ev.Stop(ins.snapshot, ins.finalize, ins.handover))
            self._deliver()
        elif isinstance(ins, op.FinalMerge):
            for r in ins.slots:
                self._ask(r, ev.Exchange(next(self.ids), list(ins.slots)))
        elif isinstance(ins, op.ApplyGroups):
            self.results, self.applied = self._apply_groups(sum(c["processed"] for c in self.counters.values()))
        elif isinstance(ins, op.FinalizeReducers):
            incoming = handover_by_slot(self.handover)
            self.results = [self._ask(r, ev.Finalize(next(self.ids), incoming.get(r, ()))) for r in range(self.R)]
        elif isinstance(ins, op.EndJob):
            self.merged = ins.merged
        elif not isinstance(ins, op.InputProgress | op.ServeReducers):  # (nothing to do here)
            raise TypeError(f"the local runtime cannot carry out {ins!r}")

    def _restart(self, ins: op.Restart) -> None:
        """Every member rolls back to the checkpoint (a lost balancer restarts from its
        snapshot); the coordinator hands its later items out again."""
        self.balancer = BalancerMachine.for_run(self.plan, ins.balancer_snapshot, ins, self.balancer)
        # (what the old members sent and nobody handled yet is lost with them, and so are
        # their report clocks and the balancer's tick timer)
        self.heap = [e for e in self.heap if e[2] not in ("paid", "balancer", "coordinator", "wake", "tick")]
        heapq.heapify(self.heap)
        self.waiting.clear()
        self.pending = {"balancer": 0, "coordinator": 0}
        self.wakes.clear()
        self.outbox.clear()
        self.mail.clear()
        self._start_members(self._balancer_snapshot(), ins.checkpoint)

    # -- time -----------------------------------------------------------------------
    def _feed(self) -> None:
        """The mappers that wait for an item ask for it, round-robin."""
        while any(self.awaiting):
            for m in range(self.M):
                if not self.awaiting[m]:
                    continue
                self.awaiting[m] = False
                self._at("coordinator", self.costs.block_request_s, "block_request", self._wants_block(m))

    def _wants_block(self, m: int) -> Callable[[], None]:
        """The coordinator's handling of mapper ``m``'s block request."""
        def handle() -> None:
            self._coordinate(ev.BlockWanted(m))
            self._deliver()
        return handle

    def _wake_at(self, r: int, at: float) -> None:
        """Reducer ``r`` is fed :class:`~dpa.engine.events.ReportDue` at ``at``, with every
        reducer that asked for the same tick of the report clock."""
        due = self.wakes.get(at)
        if due is None:
            due = self.wakes[at] = []
            heapq.heappush(self.heap, (at, next(self.seq), "wake", -1))
        due.append(r)

    def _wake(self) -> None:
        """A tick of the report clock: the reducers that asked for it report together."""
        for r in self.wakes.pop(self.now, ()):
            self._to_reducer(r, ev.ReportDue())
        self._deliver()

    def _balancer_tick(self) -> None:
        self._balancer_handles(ev.BalancerTick(self.now))

    # -- the loop -------------------------------------------------------------------
    def run(self) -> RunOutput:
        started = last_progress = time.perf_counter()
        self._feed()
        while not self.ended:
            if not self.heap:
                self._feed()
                if not self.heap and not self.ended:
                    raise RuntimeError("local runtime stalled: queues full and no reducer running (bug)")
                continue
            self.now, _, kind, arg = heapq.heappop(self.heap)
            if kind == "paid":
                self._to_reducer(arg, ev.StepPaid())
                self._deliver()
                self._coordinate(ev.Tick())
                self._feed()
                if self.progress_cb is not None and time.perf_counter() - last_progress >= DRIVER_PROGRESS_INTERVAL_S:
                    last_progress = time.perf_counter()
                    self.progress_cb(self.coordinator.processed)
            elif kind in self.pending:  # ("balancer", "coordinator")
                self._handled(kind, arg)
            elif kind == "wake":
                self._wake()
            elif kind == "tick" and self.now in self.wakes:  # (the reports due now go first: the
                heapq.heappush(self.heap, (self.now, next(self.seq), "tick", -1))  # tick sees them)
            elif kind == "tick":  # (the balancer's TickAt: it ticks once it has handled what came before)
                self._at("balancer", self.costs.tick_cost(self.R), "tick", self._balancer_tick)
            elif kind == "fault":
                role = self.faults[arg][1]
                self._coordinate(ev.MemberLost(self.now, "injected", role), ev.MembersReplaced([role], []))
                self._feed()
        return self._finish(started)

    def _finish(self, started: float) -> RunOutput:
        coordinator = self.coordinator
        balancer = next(ins for ins in self.balancer.handle(ev.BalancerStopped(self.now))
                        if isinstance(ins, op.BalancingResult))
        self._coordinate(ev.BalancingEnded(balancer.snapshot))
        counters = [self.counters[r] for r in range(self.R)]
        results = self.results
        width = coordinator.result_width(self.counters)  # (an elastic job: the slots that took part)
        output = RunOutput(
            tables=[table for table, _ in results[:width]],
            processed=[c["processed"] for c in counters[:width]],
            forwarded=[c["forwarded"] for c in counters[:width]],
            emitted=coordinator.emitted,
            blocks_per_mapper=coordinator.blocks_per_mapper,
            rebalances=list(balancer.events),
            timeline=list(balancer.timeline),
            final_snapshot=balancer.snapshot,
            merged=self.merged,
            wall_time_s=time.perf_counter() - started,
            virtual_time_s=self.now,
            peak_queue=[c["peak_queue"] for c in counters[:width]],
            recoveries=coordinator.recoveries,
            checkpoints=coordinator.checkpoints,
            merged_keys=sum(merged_keys for _, merged_keys in results),
            state_moves=sum(c["keys_moved"] for c in counters),
            scaling=list(balancer.scaling),
            group_apply=self.applied,
            extra={"sim": self._sim_stats()},
        )
        self._coordinate(ev.JobClosed())  # (as the Ray coordinator does when its job ends)
        return output

    def _sim_stats(self) -> dict[str, Any]:
        """The message cost model's figures: the costs, and per actor its busy fraction
        over the job's virtual time, the seconds it was busy and messages waited, and its
        messages by kind; the reducers' message seconds in all."""
        elapsed = self.now
        return {
            "costs": self.costs.as_dict(),
            "virtual_time_s": elapsed,
            "hosts": self.hosts,
            "carried": dict(self.carried),
            **{name: q.stats(elapsed) for name, q in self.actors.items()},
            "reducers": {"message_s": self.reducer_message_s,
                         "busy_fraction": self.reducer_message_s / (self.R * elapsed) if elapsed > 0 else 0.0},
        }

    def _apply_groups(self, total_rows: int) -> tuple[list[tuple[pa.Table | None, int]], dict[str, Any]]:
        """The apply phase of a per-group function, in virtual time: every worker's clock
        advances by the seconds ``fn`` took on its units (measured), and a worker that is
        free (the earliest clock) asks the :class:`~dpa.engine.group_schedule.GroupScheduler`
        for its next unit. Returns ``[(table, merged keys)]`` per reducer and the stats."""
        target = unit_target_rows(total_rows, self.R)
        listed = [self._ask(r, ev.ListGroups(next(self.ids), target)) for r in range(self.R)]
        units: list[list[Any]] = [list(u) for u, _ in listed]
        scheduler = GroupScheduler(range(self.R))
        for r in range(self.R):
            scheduler.handle(ev.UnitsListed(r, [unit_size(u) for u in units[r]]))
        group_fn = self.plan.aggregate
        outputs: list[list[pa.Table]] = [[] for _ in range(self.R)]
        ran: dict[int, tuple[int, float]] = {r: (0, 0.0) for r in range(self.R)}
        free = [(self.now, r) for r in range(self.R)]
        end = self.now
        while free:
            at, w = heapq.heappop(free)
            (ins,) = scheduler.handle(ev.WorkAsked(w, *ran[w]))
            if isinstance(ins, op.WorkerDone):
                end = max(end, at)
                continue
            unit, units[ins.owner][ins.index] = units[ins.owner][ins.index], None
            done = group_fn.apply(unit, self.plan.key_cols)
            if done.table is not None:
                outputs[w].append(done.table)
            ran[w] = (done.rows, done.seconds)
            heapq.heappush(free, (at + done.seconds, w))
        self.now = end
        tables = [unify(out) if out else None for out in outputs]
        return [(t, merged) for t, (_, merged) in zip(tables, listed)], scheduler.stats()
