"""The balancer's state machine: a policy's planner with the event log, the published
snapshot, the queue-length timeline, elastic scaling and the tick rule, plain Python.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpa.engine import events as ev
from dpa.engine.elastic import ScalingEvent, ScalingRule
from dpa.engine.instructions import (
    AnswerForecast,
    BalancingResult,
    Instruction,
    LogRebalances,
    Publish,
    Reply,
    Restart,
    ScaleOut,
    TickAt,
)
from dpa.engine.machine import Machine, handles
from dpa.engine.plan import JobPlan
from dpa.routing.policy import Decision, RebalanceEvent

logger = logging.getLogger(__name__)


@dataclass
class BalancerMachine(Machine):
    """The balancer's protocol: a policy's planner with the event log, the published
    snapshot and a timeline; events in, instructions out (:meth:`handle`).

    **The tick rule.** The balancer evaluates the policy at a tick
    (:class:`~dpa.engine.events.BalancerTick`), which it asks its runtime for with a
    :class:`~dpa.engine.instructions.TickAt`: at the first report after a tick, for
    ``lb_interval_s`` after that tick, and after a tick for ``lb_interval_s`` later while
    some reducer's last reported queue is not empty and the next check could decide
    otherwise: news came since the last tick (a report, a forecast), the last tick acted,
    or the rule depends on time or on how many checks saw the same (an elastic job's
    scaling rule, a ``patience`` above 1). A job whose queues are all empty and silent
    costs the balancer nothing; a busy one is looked at every ``lb_interval_s`` while its
    reducers have news, and again at their next report once they fall silent.
    Both runtimes obey the same instruction.

    The timeline samples the latest reported queue lengths at every tick (only when they
    changed), so run reports can plot queue length per reducer over time; it keeps at
    most ``max_samples`` points, thinning evenly when full.

    Elastic jobs (``plan.active_reducers > 0``) also run a :class:`~dpa.engine.elastic.ScalingRule`
    when the planner has nothing to publish: a scale-in is applied at once (the planner
    takes the slot's tokens away); a scale-out is returned as a
    :class:`~dpa.engine.instructions.ScaleOut` for the runtime to start the reducers, which then
    hands back :class:`~dpa.engine.events.ScaledOut`. Both are logged in :attr:`scaling`.
    After every batch of events, new log entries go to the runtime's metrics as a
    :class:`~dpa.engine.instructions.LogRebalances`.
    """

    plan: JobPlan
    snapshot: Any
    planner: Any = None
    events: list[RebalanceEvent] = field(default_factory=list)
    timeline: list[tuple[float, tuple[int, ...], int]] = field(default_factory=list)
    max_samples: int = 4000
    resume: bool = False

    role = "balancer"

    @classmethod
    def for_run(cls, plan: JobPlan, snapshot: Any, restart: Restart | None,
                current: BalancerMachine | None) -> BalancerMachine:
        """The balancer machine a run of ``plan`` uses: a new one from ``snapshot`` for a
        first run; for a recovered run what ``restart`` says: a balancer that was replaced
        (``new_balancer``) resumes from the checkpoint's snapshot, one that survived
        (``current``) keeps its planner, log and published snapshot.

        Raises:
            RuntimeError: ``restart`` keeps a balancer that does not serve ``plan``'s job.
        """
        if restart is None:
            return cls(plan, snapshot)
        if restart.new_balancer:
            return cls(plan, restart.balancer_snapshot, resume=True)
        if current is None or current.plan.job_id != plan.job_id:
            raise RuntimeError(f"dpa: the recovery of job {plan.job_id} keeps its balancer, but this "
                               f"balancer does not serve it (bug)")
        current.handle(ev.BalancerResumed())
        return current

    @handles(ev.QueueReported)
    def _on_report(self, event: ev.QueueReported) -> list[Any]:
        self.report(event.reducer, event.queue_length, event.version, event.keys, event.backlog_s)
        self._news = True
        return self._ask_tick(self.last_tick)

    @handles(ev.ForecastArrived)
    def _on_forecast(self, event: ev.ForecastArrived) -> list[Any]:
        published = self.forecast(event.mapper, event.hashes, event.counts, event.total, event.now)
        self._news = True
        return [*([] if published is None else [published]), AnswerForecast(self.snapshot)]

    @handles(ev.BalancerTick)
    def _on_tick(self, event: ev.BalancerTick) -> list[Any]:
        self.tick_asked = False
        self.last_tick = event.now
        news, self._news = self._news, False
        decided = len(self.events)
        instruction = self.tick(event.now)
        out: list[Any] = [] if instruction is None else [instruction]
        acted = instruction is not None or len(self.events) != decided
        if self._busy_queues() and (news or acted or self._checks_count()):
            out += self._ask_tick(event.now)
        return out

    @handles(ev.InputDone)
    def _on_input_done(self, event: ev.InputDone) -> list[Any]:
        self.on_input_done()
        return []

    @handles(ev.ScaledOut)
    def _on_scaled_out(self, event: ev.ScaledOut) -> list[Any]:
        published = self.scaled_out(event.now, event.started, event.refused)
        return [] if published is None else [published]

    @handles(ev.BalancerStopped)
    def _on_stopped(self, event: ev.BalancerStopped) -> list[Any]:
        self.sample(event.now)
        self.stopped = True
        return [BalancingResult(tuple(self.events), self.snapshot, tuple(self.timeline), tuple(self.scaling),
                                self.width)]

    @handles(ev.SnapshotAsked)
    def _on_snapshot_asked(self, event: ev.SnapshotAsked) -> list[Any]:
        return [Reply(event.request_id, self.snapshot)]

    @handles(ev.BalancerResumed)
    def _on_resumed(self, event: ev.BalancerResumed) -> list[Any]:
        self.tick_asked = False
        self.stopped = False
        self._news = True
        return []

    def settle(self) -> list[Instruction]:
        """New log entries, a new snapshot version or a new width go to the metrics."""
        active = len(self.active_slots) if self.rule is not None else None
        seen = (len(self.events), self.snapshot.version, active)
        if seen == self._logged:
            return []
        new = tuple(self.events[self._logged[0]:])
        self._logged = seen
        return [LogRebalances(new, self.snapshot.version, active)]

    def _ask_tick(self, after: float) -> list[Any]:
        """A :class:`~dpa.engine.instructions.TickAt` ``lb_interval_s`` after ``after``,
        unless one is asked for already (or the job is over)."""
        if self.tick_asked or self.stopped:
            return []
        self.tick_asked = True
        return [TickAt(after + self.plan.lb_interval_s)]

    def _checks_count(self) -> bool:
        """Whether a check without news can decide what the last one did not: the elastic
        scaling rule (it waits for a backlog to last) or a planner that counts the checks
        that saw the same straggler (``patience`` above 1)."""
        return self.rule is not None or getattr(self.planner, "patience", 1) > 1

    def _busy_queues(self) -> bool:
        """Whether some reducer's last reported queue is not empty."""
        return self._queued > 0

    def __post_init__(self) -> None:
        # ``resume``: a balancer restarted after a failure continues from ``snapshot`` (the
        # last checkpoint's) if the policy's planner can (Planner.resume).
        self.planner = self.plan.policy.make_planner(self.plan.num_reducers)
        if self.planner is not None and not (self.resume and self.planner.resume(self.snapshot)):
            self.snapshot = self.planner.snapshot
        self.queue_lengths = [0] * self.plan.num_reducers
        self.backlogs: list[float | None] = [None] * self.plan.num_reducers
        self._stride = 1
        self._ticks = 0
        self.scaling: list[ScalingEvent] = []
        self.rule: ScalingRule | None = None
        self.scaling_out: tuple[tuple[int, ...], str, tuple[float, ...]] | None = None  # started, not yet done
        if self.plan.active_reducers and self.planner is not None:
            self.rule = ScalingRule(self.plan.num_reducers, max(1, self.plan.min_reducers),
                                    self.plan.scale_out_backlog_s)
        #: Reducer slots ``0 .. width - 1`` took part in the job (slots are taken lowest first).
        self.width = max(self.active_slots) + 1
        self.tick_asked = False  # a TickAt is out and its tick has not come
        self.last_tick = 0.0
        self.stopped = False
        self._queued = 0  # reducers whose last reported queue is not empty
        self._news = False  # a report or forecast came since the last tick
        self._logged: tuple[int, int, int | None] = (0, -1, None)  # (events, version, active) last logged

    @property
    def active_slots(self) -> list[int]:
        """The reducer slots that take part (own keys) now."""
        if self.planner is None or not self.rule:
            return list(range(self.plan.num_reducers))
        return [int(r) for r in np.flatnonzero(self.planner.active)]

    @property
    def active(self) -> bool:
        """Whether there is anything to balance."""
        return self.planner is not None

    def forecast(self, mapper: int, hashes: np.ndarray, counts: np.ndarray, total: int,
                 now: float) -> Publish | None:
        """A mapper's key counts of its first block, before it routes any of it
        (:meth:`~dpa.routing.policy.Planner.observe_forecast`): the policy's rule is evaluated at
        once; returns the snapshot to publish, if any (the mapper routes under it)."""
        if self.planner is None:
            return None
        self.planner.observe_forecast(mapper, hashes, counts, total)
        published = self._decide(now)
        return None if published is None else Publish(published)

    def report(self, reducer: int, queue_length: int, version: int,
               keys: tuple[np.ndarray, np.ndarray, int, int] | None = None,
               backlog_s: float | None = None) -> None:
        """A reducer's queue length under ``version``, with its key arrivals if collected
        and its backlog in estimated seconds of work if measured."""
        self._queued += (queue_length > 0) - (self.queue_lengths[reducer] > 0)
        self.queue_lengths[reducer] = int(queue_length)
        if backlog_s is not None:
            self.backlogs[reducer] = float(backlog_s)
        if self.planner is not None:
            if keys is not None:
                hashes, counts, total, held = keys
                self.planner.observe_keys(reducer, hashes, counts, total)
                self.planner.observe_held(reducer, held)
            if backlog_s is not None:
                self.planner.observe_work(reducer, float(backlog_s), version)
            self.planner.observe(reducer, queue_length, version)

    def sample(self, now: float) -> None:
        """Appends the current queue lengths to the timeline if they changed."""
        point = tuple(self.queue_lengths)
        if self.timeline and self.timeline[-1][1] == point:
            return
        self._ticks += 1
        if self._ticks % self._stride:
            return
        self.timeline.append((now, point, self.snapshot.version))
        if len(self.timeline) > self.max_samples:
            self.timeline = self.timeline[::2]
            self._stride *= 2

    def tick(self, now: float) -> Publish | ScaleOut | None:
        """Samples the timeline and evaluates the policy (then, for an elastic job, the
        scaling rule); returns the snapshot to publish or the reducers to start, if any."""
        self.sample(now)
        if self.planner is None:
            return None
        published = self._decide(now)
        if published is None and self.rule is not None and self.scaling_out is None:
            return self._scale(now)
        if published is None:
            return None
        self.sample(now)
        return Publish(published)

    def _decide(self, now: float) -> Any:
        """Runs the planner's rule; returns the snapshot it publishes, if any."""
        published = None
        decisions: list[Decision] = self.planner.check(now)
        for decision in decisions:
            self._apply(decision)
            if decision.snapshot is not None:
                published = decision.snapshot
        return published

    def _apply(self, decision: Decision) -> None:
        self.events.append(decision.event)
        if decision.snapshot is not None:
            self.snapshot = decision.snapshot

    def _scale(self, now: float) -> Publish | ScaleOut | None:
        active = self.active_slots
        verdict = self.rule.decide(now, active, {r: self.backlogs[r] for r in active},
                                   {r: self.queue_lengths[r] for r in active})
        if verdict is None:
            return None
        action, slots, reason = verdict
        seen = tuple(round(self.backlogs[r] or 0.0, 4) for r in active)
        if action == "scale_out":
            self.scaling_out = (tuple(slots), reason, seen)
            return ScaleOut(tuple(slots), self.snapshot)
        for slot in slots:
            self._apply(self.planner.scale_in(slot, now))
        self.rule.changed(now)
        self.scaling.append(ScalingEvent(now, "scale_in", tuple(slots), len(self.active_slots), seen, reason))
        self.sample(now)
        return Publish(self.snapshot)

    def on_input_done(self) -> None:
        """Every input record is in a reducer's queue: an elastic job retires no reducer
        any more (:meth:`dpa.engine.elastic.ScalingRule.input_done`)."""
        if self.rule is not None:
            self.rule.input_done()

    def scaled_out(self, now: float, started: list[int], refused: str | None = None) -> Publish | None:
        """The runtime carried out the last :class:`~dpa.engine.instructions.ScaleOut`: the
        reducers of ``started`` run (and every member knows them); ``refused`` says why
        the others did not start. Returns the routing that gives the new ones tokens."""
        if self.scaling_out is None:
            return None
        slots, reason, seen = self.scaling_out
        self.scaling_out = None
        self.rule.changed(now)
        for slot in started:
            self._apply(self.planner.scale_out(slot, now))
            self.width = max(self.width, slot + 1)
        if started:
            self.scaling.append(ScalingEvent(now, "scale_out", tuple(started), len(self.active_slots), seen, reason))
        missing = tuple(s for s in slots if s not in started)
        if missing:
            why = refused or "the reducers did not start"
            logger.warning("dpa: scale-out to reducer(s) %s refused: %s; the job carries on with %d reducers",
                           list(missing), why, len(self.active_slots))
            self.scaling.append(ScalingEvent(now, "refused", missing, len(self.active_slots), seen, why))
        if not started:
            return None
        self.sample(now)
        return Publish(self.snapshot)


