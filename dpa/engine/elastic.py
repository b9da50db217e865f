"""Elastic reducers: when a job adds a reducer or retires one (pure logic, no Ray).

A job with ``ShapeConfig(max_reducers=..., min_reducers=...)`` runs on reducer *slots*
``0 .. max_reducers - 1``; the first ``num_reducers`` are active at the start, the others
own no tokens on the ring. The balancer feeds the reducers' backlogs (seconds of queued
work) to a :class:`ScalingRule`, which decides:

* **scale out** when every active reducer holds at least ``out_backlog_s`` of work on
  ``patience`` consecutive checks: the width becomes what would leave each reducer that
  much, ``ceil(total backlog / out_backlog_s)`` (the rule of Kubernetes' Horizontal Pod
  Autoscaler: ``desired = ceil(current * metric / target)``), at least one more and at
  most ``max_reducers``. New reducers take the lowest free slots; the policy's planner
  gives each tokens on the ring (:meth:`dpa.routing.policy.Planner.scale_out`).
* **scale in** when fewer reducers would do, by the same measure (``ceil(total backlog /
  out_backlog_s)`` below the width), and an active reducer has had an empty queue for
  ``idle_s`` while the others are not all idle, down to ``min_reducers``, one at a time:
  its tokens go to its ring successors and its state follows its keys (state migration).
  Using one measure both ways keeps the width from flapping: a backlog a new reducer
  cannot take (one hot key that a ring cannot split) makes reducers idle but does not
  retire them, and retiring them does not make the rest look short of reducers.

After any change the rule waits ``cooldown_s`` before the next, so the backlogs it reads
reflect the new width. Once every input record is in a queue (:meth:`ScalingRule.input_done`)
no reducer retires: the job ends when the queues drain, and a reducer retired then would
only hand its state over for nothing. A scale-out the runtime cannot carry out (no free CPU, an actor
that does not start) is logged as ``"refused"`` and the job carries on at its width.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["ScalingEvent", "ScalingRule"]


@dataclass
class ScalingEvent:
    """One entry of an elastic job's scaling log (``res.stats.scaling``).

    Attributes:
        time_s: Seconds since the balancer started.
        action: ``"scale_out"``, ``"scale_in"`` or ``"refused"`` (a scale-out that could
            not be carried out).
        reducers: The slots added, retired or refused.
        width: Active reducers after the event.
        backlog_s: The active reducers' backlogs (seconds of work) the rule saw.
        reason: Why (the rule's trigger, or why a scale-out was refused).
    """

    time_s: float
    action: str
    reducers: tuple[int, ...]
    width: int
    backlog_s: tuple[float, ...]
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        out = asdict(self)
        out["reducers"], out["backlog_s"] = list(self.reducers), list(self.backlog_s)
        return out


class ScalingRule:
    """Decides scale-outs and scale-ins from backlogs (see the module docstring).

    Args:
        slots: Reducer slots (``max_reducers``).
        min_reducers: Fewest active reducers.
        out_backlog_s: Seconds of work every active reducer must hold to scale out.
        idle_s: Seconds a reducer's queue must stay empty before it retires.
        cooldown_s: Seconds between two changes.
        patience: Consecutive checks the scale-out condition must hold.
    """

    def __init__(self, slots: int, min_reducers: int, out_backlog_s: float, idle_s: float = 1.0,
                 cooldown_s: float = 0.5, patience: int = 2) -> None:
        if slots < 1 or not 1 <= min_reducers <= slots:
            raise ValueError(f"need 1 <= min_reducers ({min_reducers}) <= slots ({slots})")
        if not out_backlog_s > 0 or idle_s < 0 or cooldown_s < 0 or patience < 1:
            raise ValueError("out_backlog_s must be > 0, idle_s and cooldown_s >= 0, patience >= 1")
        self.slots = int(slots)
        self.min_reducers = int(min_reducers)
        self.out_backlog_s = float(out_backlog_s)
        self.idle_s = float(idle_s)
        self.cooldown_s = float(cooldown_s)
        self.patience = int(patience)
        self._streak = 0
        self._last_change = -math.inf
        self._idle_since: dict[int, float] = {}
        self.mapping_done = False

    def input_done(self) -> None:
        """Every input record has been pushed to a reducer: no more scale-ins."""
        self.mapping_done = True

    def changed(self, now: float) -> None:
        """A change was carried out (or refused) at ``now``: the cooldown starts."""
        self._last_change = now
        self._streak = 0
        self._idle_since.clear()

    def decide(self, now: float, active: list[int], backlogs: dict[int, float | None],
               queues: dict[int, int]) -> tuple[str, list[int], str] | None:
        """What to do at ``now``.

        Args:
            now: Seconds (any clock, the same for every call).
            active: The active slots.
            backlogs: Each active slot's last reported backlog in seconds of work (None
                before it measured its cost).
            queues: Each active slot's last reported queue length in records.

        Returns:
            ``("scale_out", new slots, reason)``, ``("scale_in", [slot], reason)`` or None.
        """
        if now - self._last_change < self.cooldown_s:
            return None
        work = [backlogs.get(r) for r in active]
        known = [w for w in work if w is not None]
        total = sum(known)
        if len(active) < self.slots and len(known) == len(active) and min(known) >= self.out_backlog_s:
            self._streak += 1
            if self._streak >= self.patience:
                want = min(self.slots, max(len(active) + 1, math.ceil(total / self.out_backlog_s)))
                free = [s for s in range(self.slots) if s not in set(active)]
                new = free[: want - len(active)]
                return "scale_out", new, (f"every reducer holds >= {self.out_backlog_s:g} s of work "
                                          f"({total:.2f} s in all): width {len(active)} -> {want}")
        else:
            self._streak = 0
        idle = [r for r in active if queues.get(r, 0) == 0]
        for r in list(self._idle_since):
            if r not in idle:
                del self._idle_since[r]
        for r in idle:
            self._idle_since.setdefault(r, now)
        needed = math.ceil(total / self.out_backlog_s)
        if (not self.mapping_done and len(active) > self.min_reducers and 0 < len(idle) < len(active)
                and needed < len(active)):
            waited = [r for r in idle if now - self._idle_since[r] >= self.idle_s]
            if waited:
                victim = max(waited)  # the newest slot: the first ones stay
                return "scale_in", [victim], f"reducer {victim} idle for {now - self._idle_since[victim]:.2f} s"
        return None
