"""The reducer's protocol: one entry point, :meth:`ReducerMachine.handle`, events in, instructions out.

Every decision a reducer takes about its messages lives here: whether a mapper's push is
queued now or waits for room (back-pressure) and what it tells the mapper about its push
size; when a push routed under a newer snapshot first fetches it; when a step starts and
what it costs; forwarding after a new snapshot; state hand-overs; when the balancer and the
coordinator hear from it; the three phases of a checkpoint; the end of the loop and the
final merge. The data operations (queue, state, epochs) are :class:`~dpa.engine.reducer.ReducerLogic`'s.

The runtimes only translate: the Ray actor (:mod:`dpa.runtime.ray.reducer`) turns calls
and timers into events and instructions into calls; the in-process runtime
(:mod:`dpa.runtime.local`) does the same in virtual time. Both run this code.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Any

from dpa.config.width import CONTROL_PERIOD_S
from dpa.engine import events as ev
from dpa.engine import handover
from dpa.engine import instructions as op
from dpa.engine.flow import PUSH_KEEP, PUSH_SHRINK, Chunk
from dpa.engine.machine import Machine, handles
from dpa.engine.plan import JobPlan, empty_input_table
from dpa.engine.reducer import ReducerLogic

#: A reducer tells the coordinator its processed count at most this often (or every two
#: periods of the report clock, if that is longer: a wide job's clock is slower) while its
#: queue holds work (for progress bars and metrics: the driver shows progress every
#: :data:`~dpa.engine.output.DRIVER_PROGRESS_INTERVAL_S`); once every record is in a queue
#: (:class:`~dpa.engine.events.InputMapped`), a reducer whose queue emptied tells it at
#: once: that is what termination waits for. A busy reducer's progress is two messages a
#: second, and two wake-ups of its report clock for it.
PROGRESS_INTERVAL_S = 0.5
#: A busy reducer reports its queue when it moved by a step's rows or by this fraction of
#: the queue last reported, whichever is more: a long queue is reported at a rate that
#: follows its relative change (the balancer compares reducers' backlogs), not at every step.
REPORT_FRACTION = 1 / 8
#: What a reducer that no longer serves the job answers a push (the job is being aborted).
IDLE_ANSWER = (PUSH_KEEP, None)


class ReducerMachine(Machine):
    role = "reducer"

    """A reducer's protocol over its :class:`~dpa.engine.reducer.ReducerLogic`.

    Args:
        reducer_id: The reducer's slot.
        plan: The job.
        snapshot: The routing snapshot it starts under.
        clock: Seconds, monotonic (wall time on Ray, virtual time in-process): it times
            steps, reports and progress.
        checkpoint: ``(state, records, epoch, pending)`` of the checkpoint it starts from
            (:meth:`~dpa.engine.reducer.ReducerLogic.restore`), or None.
    """

    def __init__(self, reducer_id: int, plan: JobPlan, snapshot: Any, clock: Callable[[], float],
                 checkpoint: tuple[Any, int, int, Any] | None = None) -> None:
        self.logic = ReducerLogic(reducer_id, plan, snapshot)
        self.restored = checkpoint is not None
        if checkpoint is not None:
            state, records, epoch, pending = checkpoint
            self.logic.restore(state, records, epoch, pending or ())
        self.plan = plan
        self.clock = clock
        self.parked: deque[list[Any]] = deque()  # [PushArrived, outcome]: mapper pushes waiting for room
        self.newer: list[ev.PushArrived] = []  # pushes routed under a snapshot being fetched
        self.busy: Chunk | None = None
        self.step_started = 0.0
        self.stopping = False
        self.finalize_at_end = False
        self.finished = False
        self.mapped = False
        self.cut: ev.CutCheckpoint | None = None
        self.last_report = -math.inf
        self.last_sent: tuple[int, int, bool] | None = None  # (queued, version, backlog known) last reported
        self.wakes: set[float] = set()  # the ReportAt times asked for and not yet come
        self.count_wakes: set[float] = set()  # those of them on the base period's clock
        self.last_progress = -math.inf
        self.last_progress_value = self.logic.processed  # what the coordinator knows already
        self.progress_interval = max(PROGRESS_INTERVAL_S, 2 * plan.report_interval_s)
        # A wide job's report clock runs slower than the base period (dpa.config.control_period):
        # its reducers report a new snapshot at the clock's next tick (see _report).
        self.slow_clock = plan.report_interval_s > CONTROL_PERIOD_S

    # -- the entry point ------------------------------------------------------------
    def handle(self, *events: ev.Event) -> list[op.Instruction]:
        """Takes events; returns the instructions for the runtime, in order. An error of
        user code raised on the way names, as its ``key``, the key it was working on (if
        known and the error names none), for the runtime's error message."""
        try:
            return super().handle(*events)
        except Exception as exc:
            key = self.logic.current_key
            if key is not None and getattr(exc, "key", None) is None:
                try:
                    exc.key = key  # type: ignore[attr-defined]
                except AttributeError:  # (an error type without attributes of its own)
                    pass
            raise

    def settle(self) -> list[Any]:
        """Parked pushes go in whenever the events made room (:meth:`_release_parked`)."""
        return self._release_parked()

    @handles(ev.ReducerStarted)
    def _on_started(self, event: ev.ReducerStarted) -> list[Any]:
        if self.restored or self.logic.queued or self.logic.snapshot.version:
            return self._next_step() + self._report(force=True)
        # A first run's reducer with an empty queue under the first snapshot is what the
        # balancer assumes of every reducer: it says nothing until it has news (at W
        # reducers, W reports at the start would queue the mappers' forecast behind them).
        self.last_sent = (0, self.logic.snapshot.version, self.logic.backlog_s is not None)
        return self._next_step()

    # -- pushes and back-pressure ---------------------------------------------------
    @handles(ev.PushArrived)
    def _on_push(self, event: ev.PushArrived) -> list[Any]:
        if event.version > self.logic.snapshot.version:
            # Routed under a snapshot this reducer has not seen: adopt it first, so that no
            # record is judged by the older one.
            self.newer.append(event)
            return [op.FetchSnapshot()] if len(self.newer) == 1 else []
        return self._accept(event)

    def _accept(self, event: ev.PushArrived) -> list[Any]:
        logic = self.logic
        outcome = PUSH_KEEP
        if not event.forwarded:
            outcome = logic.push_outcome()
            if self.parked or not logic.has_room():
                if logic.congested:
                    outcome = PUSH_SHRINK
                self.parked.append([event, outcome])
                return []
        return self._enqueue(event, outcome)

    def _enqueue(self, event: ev.PushArrived, outcome: int) -> list[Any]:
        logic = self.logic
        out = self._sends(logic.enqueue(event.batch, event.forwarded, event.version, event.epoch))
        out.append(op.AnswerPush(event.push_id, outcome, logic.capacity_rows))
        if event.forwarded:
            out += self._check_cut()
        out += self._next_step()
        out += self._report()
        return out

    def _release_parked(self) -> list[Any]:
        """Queues the waiting pushes, oldest first, while the queue has room; the others
        learn whether they now wait for work (a full queue: they shrink their pushes)."""
        out: list[Any] = []
        logic = self.logic
        while self.parked:
            if not logic.has_room():
                if logic.congested:
                    for waiting in self.parked:
                        waiting[1] = PUSH_SHRINK
                break
            waiting, outcome = self.parked.popleft()
            out += self._enqueue(waiting, outcome)
        return out

    # -- snapshots --------------------------------------------------------------------
    @handles(ev.SnapshotArrived)
    def _on_snapshot(self, event: ev.SnapshotArrived) -> list[Any]:
        out = self._adopt(event.snapshot)
        ready = [p for p in self.newer if p.version <= self.logic.snapshot.version]
        if ready:
            self.newer = [p for p in self.newer if p.version > self.logic.snapshot.version]
            for push in ready:
                out += self._accept(push)
        return out

    @handles(ev.SnapshotFetched)
    def _on_fetched(self, event: ev.SnapshotFetched) -> list[Any]:
        out = [] if event.snapshot is None else self._adopt(event.snapshot)
        newer, self.newer = self.newer, []
        for push in newer:  # (a fetch answers every push that waited for it)
            out += self._accept(push)
        return out

    def _adopt(self, snapshot: Any) -> list[Any]:
        out = self._sends(self.logic.on_snapshot(snapshot))
        out += self._moves()  # (none while a step is applying: it hands over after the step)
        out += self._report(force=not self.slow_clock)
        return out

    # -- steps ------------------------------------------------------------------------
    def _next_step(self) -> list[Any]:
        """Starts a step if none runs: the chunk's forwards go out, its cost is to be paid.
        An empty queue after :class:`~dpa.engine.events.Stop` ends the loop."""
        if self.busy is not None or self.finished:
            return []
        chunk = self.logic.take_chunk()
        if chunk is None:
            if self.stopping:
                self.finished = True
                moves = tuple(handover.take(self.logic))
                return [op.Finished(self.logic.counters(), self.finalize_at_end, moves)]
            return []
        self.busy, self.step_started = chunk, self.clock()
        return [*self._sends(chunk.forwards), op.PayStep(chunk.cost_s, self.logic.cost_mode)]

    @handles(ev.StepPaid)
    def _on_step_paid(self, event: ev.StepPaid) -> list[Any]:
        chunk, self.busy = self.busy, None
        if chunk is None:
            return []
        self.logic.apply(chunk)
        self.logic.on_step(chunk.rows, self.clock() - self.step_started)
        out = self._moves()
        # (the step may have revised what the queue's work is worth: parked pushes are
        # released at the end of handle)
        out += self._report()
        out += self._next_step()
        return out

    # -- reports ----------------------------------------------------------------------
    def _report(self, force: bool = False) -> list[Any]:
        """What the balancer and the coordinator hear now, or the wake that tells them later.

        ``force``d (the reducer started with news, adopted a snapshot or is stopping) the
        queue goes to the balancer at once unless it repeats the last report: the ring
        policies wait for every reducer's report under a new snapshot before they decide
        again. In a job whose report clock runs slower than the base period
        (:data:`~dpa.config.width.CONTROL_PERIOD_S`: a wide job's, sized by its width), a
        reducer that adopted a snapshot reports at the clock's next tick like any other
        news instead: a publication reaches all ``W`` reducers, and their reports of it
        then travel with the tick's others, one message per host, instead of a burst of
        ``H`` more messages that the balancer would pay on top of the tick's. Otherwise nothing is sent
        here: a report is worth sending only when something the balancer acts on changed
        (:meth:`_worth_reporting`), and progress only when the processed count did; then
        the reducer asks to be woken (:class:`~dpa.engine.instructions.ReportAt`) at the next
        tick of a clock of period ``report_interval_s`` (:meth:`_on_report_due` sends
        them). Every reducer of a process ticks on the same clock, so what they have to say
        leaves the process together, and a reducer with nothing new says nothing. The
        exception is progress once every record is in a queue and this one is empty: it
        goes at once (termination waits for it).
        """
        now = self.clock()
        out: list[Any] = []
        if force and self._changed():
            out.append(self._report_now(now))
        if self._termination_progress():
            if not self.slow_clock:
                return out + self._progress(now)
            # A wide job's reducers empty their queues within a short stretch at its end:
            # each count goes at the next tick of the base period's clock, which every
            # reducer of a process shares, so a host's counts leave as one message rather
            # than one per reducer (the coordinator pays per message).
            return out + self._wake_at(now, interval=CONTROL_PERIOD_S)
        if self._worth_reporting():
            out += self._wake_at(now)
        elif self.logic.processed != self.last_progress_value:
            out += self._wake_at(now, self.last_progress + self.progress_interval)
        return out

    def _report_now(self, now: float) -> op.Report:
        logic = self.logic
        self.last_sent, self.last_report = (logic.queued, logic.snapshot.version, logic.backlog_s is not None), now
        return op.Report(logic.queued, logic.snapshot.version, logic.take_key_stats(), logic.backlog_s,
                         logic.processed, logic.forwarded, self.plan.policy.tokens(logic.snapshot, logic.reducer_id))

    def _changed(self) -> bool:
        """Whether a report would differ from the last one sent."""
        logic = self.logic
        return (self.last_sent != (logic.queued, logic.snapshot.version, logic.backlog_s is not None)
                or logic.has_key_stats)

    def _worth_reporting(self) -> bool:
        """Whether the balancer should hear from this reducer: the first report, a new
        snapshot version, key arrivals to count, a backlog measured for the first time, an
        empty queue that filled or a queue that emptied, or a queue that moved by a step's
        rows or more (the granularity of the reducer's own progress, and below the gap the
        straggler rule acts on, ``min_gap_s`` being two steps) and by
        :data:`REPORT_FRACTION` of the queue last reported (a long queue's reports follow
        its relative change: a reducer draining a queue of ``n`` steps reports about
        ``log(n)`` times, not ``n``). A queue that stays within that of what was reported
        says nothing, however long the reducer is busy."""
        logic, last = self.logic, self.last_sent
        if last is None or logic.has_key_stats:
            return True
        queued, version, known = last
        if version != logic.snapshot.version or known != (logic.backlog_s is not None):
            return True
        if logic.queued == queued:
            return False
        if logic.queued == 0 or queued == 0:
            return True
        return abs(logic.queued - queued) >= max(1, logic.step_rows, queued * REPORT_FRACTION)

    def _wake_at(self, now: float, due: float | None = None, interval: float | None = None) -> list[Any]:
        """Asks for :class:`~dpa.engine.events.ReportDue` at the next tick of the report
        clock, or at the first tick at or after ``due`` if that is later (progress held by
        its interval wakes the reducer when it is due, not at every tick). Once: a wake
        asked for and not yet come, no later than that, covers every later change (a later
        one still comes: :meth:`_on_report_due` sends what is due then). ``interval``: a
        clock other than the report clock's (the base period's, for the count that
        termination waits for in a wide job)."""
        interval = self.plan.report_interval_s if interval is None else interval
        tick = math.floor(now / interval) + 1
        at = tick * interval
        if at <= now:  # (``now / interval`` rounded down past a tick that is ``now``)
            at = (tick + 1) * interval
        if due is not None and due > at:
            at = math.ceil(due / interval) * interval
        if any(now < wake <= at for wake in self.wakes):
            return []
        self.wakes.add(at)
        if interval != self.plan.report_interval_s:
            self.count_wakes.add(at)
        return [op.ReportAt(at)]

    def _termination_progress(self) -> bool:
        logic = self.logic
        return self.mapped and logic.queued == 0 and logic.processed != self.last_progress_value

    def _progress(self, now: float) -> list[Any]:
        """The processed count if it changed: at once when the queue is empty after every
        input record was mapped (what termination waits for), else at most every
        :data:`PROGRESS_INTERVAL_S` or two report periods (a message per emptied queue
        would cost a short job more than its records do)."""
        logic = self.logic
        if logic.processed == self.last_progress_value:
            return []
        if (self.mapped and logic.queued == 0) or now - self.last_progress >= self.progress_interval:
            self.last_progress, self.last_progress_value = now, logic.processed
            return [op.Progress(logic.processed)]
        return []

    @handles(ev.ReportDue)
    def _on_report_due(self, event: ev.ReportDue) -> list[Any]:
        """The report clock's tick: the report and the progress that are due go now;
        progress held by :data:`PROGRESS_INTERVAL_S` asks for the tick when it is due."""
        if self.finished:
            return []
        now = self.clock()
        near = CONTROL_PERIOD_S / 2
        answered = {wake for wake in self.count_wakes if wake <= now + near}
        if answered and not any(abs(wake - now) <= near for wake in self.wakes - self.count_wakes):
            # A tick asked for the count termination waits for (a wide job's end): the
            # count goes now, the report waits for the report clock's tick.
            self.wakes -= answered
            self.count_wakes -= answered
            return self._progress(now) + (self._wake_at(now) if self._worth_reporting() else [])
        # (this is a tick asked for, or a runtime's own: the wakes it answers are gone, on
        # the clock's grid within half a period of now; ask again if need be)
        half = self.plan.report_interval_s / 2
        self.wakes = {wake for wake in self.wakes if wake > now + half}
        self.count_wakes &= self.wakes
        out: list[Any] = [self._report_now(now)] if self._worth_reporting() and self._changed() else []
        out += self._progress(now)
        if self.logic.processed != self.last_progress_value:
            out += self._wake_at(now, self.last_progress + self.progress_interval)
        return out

    @handles(ev.InputMapped)
    def _on_input_mapped(self, event: ev.InputMapped) -> list[Any]:
        self.mapped = True
        return self._report()

    # -- forwards and state moves -----------------------------------------------------
    def _sends(self, forwards: list[op.Forward]) -> list[Any]:
        version = self.logic.snapshot.version
        return [op.SendForward(f.dest, f.batch, f.epoch, version) for f in forwards]

    def _moves(self) -> list[Any]:
        """Hands over the keys whose state this reducer no longer holds (``migrate="state"``,
        or a retired elastic slot)."""
        return [op.SendState(move) for move in self.logic.state_moves()]

    @handles(ev.StateArrived)
    def _on_state(self, event: ev.StateArrived) -> list[Any]:
        # Keys it no longer owns (a move made under an older ring) go on to their owners;
        # the move is answered once they have merged them, so no state is still travelling
        # when the sender's loop ends.
        out: list[Any] = [op.SendState(move, awaited=True) for move in self.logic.accept_state(event.move)]
        return out + self._check_cut()

    # -- checkpoints ------------------------------------------------------------------
    @handles(ev.PrepareCheckpoint)
    def _on_prepare(self, event: ev.PrepareCheckpoint) -> list[Any]:
        return [op.Reply(event.request_id, self.logic.prepare_checkpoint(event.epoch))]

    @handles(ev.CutCheckpoint)
    def _on_cut(self, event: ev.CutCheckpoint) -> list[Any]:
        self.cut = event
        return self._check_cut()

    def _check_cut(self) -> list[Any]:
        """Answers the waiting :class:`~dpa.engine.events.CutCheckpoint` once the forwards
        it counts have arrived (an error of user code while the share is cut is the answer)."""
        cut = self.cut
        if cut is None or self.logic.forwards_received(cut.epoch) < cut.expected:
            return []
        self.cut = None
        try:
            share: Any = self.logic.checkpoint(cut.epoch)
        except Exception as exc:  # a user merge() folding the epochs: the job fails
            share = exc
        return [op.Reply(cut.request_id, share)]

    @handles(ev.CheckpointTimedOut)
    def _on_cut_timeout(self, event: ev.CheckpointTimedOut) -> list[Any]:
        if self.cut is None or self.cut.request_id != event.request_id:
            return []
        self.cut = None
        return [*self._sends(self.logic.release_held()), op.Reply(event.request_id, None)]

    @handles(ev.ReleaseCheckpoint)
    def _on_release(self, event: ev.ReleaseCheckpoint) -> list[Any]:
        return self._sends(self.logic.release_held()) + self._moves()

    # -- the end ------------------------------------------------------------------------
    @handles(ev.Stop)
    def _on_stop(self, event: ev.Stop) -> list[Any]:
        self.logic.handover = event.handover  # (the loop's end hands the moved keys over: Finished)
        self.last_sent = None  # (the balancer hears the final queue once, whatever it heard last)
        out = [] if event.snapshot is None else self._adopt(event.snapshot)
        self.finalize_at_end = event.finalize
        self.stopping = True
        out += self._report(force=True)
        out += self._next_step()
        return out

    @handles(ev.Exchange)
    def _on_exchange(self, event: ev.Exchange) -> list[Any]:
        slots = list(range(self.plan.num_reducers)) if event.slots is None else list(event.slots)
        out: list[Any] = []
        for dest, part in zip(slots, self.logic.partition_state(len(slots))):
            if part is None or not len(part):  # (a peer gets only the keys it merges: none, no message)
                continue
            if dest == self.logic.reducer_id:
                self.logic.merge_partial(part)
            else:
                out.append(op.SendPartial(dest, part))
        return [*out, op.Reply(event.request_id, None)]

    @handles(ev.PartialArrived)
    def _on_partial(self, event: ev.PartialArrived) -> list[Any]:
        self.logic.merge_partial(event.partial)
        return []

    @handles(ev.Finalize)
    def _on_finalize(self, event: ev.Finalize) -> list[Any]:
        handover.merge(self.logic, event.handover)
        table = self.logic.finalize()
        if table is None:
            table = self.logic.state.empty_result(empty_input_table(self.plan).schema)
        return [op.Reply(event.request_id, (table, self.logic.merged_keys))]

    @handles(ev.ListGroups)
    def _on_list_groups(self, event: ev.ListGroups) -> list[Any]:
        units = self.logic.group_units(event.target_rows)
        return [op.Reply(event.request_id, (units, self.logic.merged_keys))]
