"""What a message costs its receiver, for the in-process runtime's virtual time.

On Ray every call costs the receiving process CPU whatever it carries (Ray's task
machinery, unpickling, the handler), and each actor runs one call at a time: a balancer
that receives more reports per second than it can handle falls behind, and so does
everything that waits on it. :class:`MessageCosts` gives each message kind its
receiver's CPU seconds; :class:`ActorQueue` makes one actor a single FIFO server in
virtual time (a message that arrives while the actor is busy waits), and keeps its busy
time, so that the saturation of the balancer or the coordinator shows in the job's
virtual time and in ``res.stats.extra["sim"]``.

:data:`MEASURED` holds the costs measured on Ray with ``python -m benchmarks.scale_sim
--measure`` (``docs/scale.md``, section "Simulator", has the figures and the method); the
in-process runtime's default is :meth:`MessageCosts.free` (the protocol alone), and
``run_local(..., costs=MEASURED)`` is the scale simulator.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from dpa.errors import ConfigError


@dataclass(frozen=True)
class MessageCosts:
    """Receiver CPU seconds per message, by kind (all >= 0; :meth:`free` is all zero).

    Attributes:
        report_s: A message of queue reports (a host's reducers' reports of one step travel
            as one), at the balancer.
        report_member_s: Each report in such a message beyond the first (the balancer's
            handler), at the balancer.
        forecast_s: A mapper's forecast (its first block's key counts), at the balancer.
        tick_s: The balancer's own tick (the policy's check), fixed part.
        tick_per_reducer_s: The tick's part per reducer slot (the check reads every
            reducer's figures).
        publish_s: A new snapshot, at the balancer, per process it is sent to (one call
            carries it to every member of a process).
        block_request_s: A mapper's request for its next block, at the coordinator.
        mapper_report_s: A mapper's word that a block is done or cut, or that it is done,
            at the coordinator.
        progress_s: A message of processed counts (a host's, as for reports), at the coordinator.
        progress_member_s: Each count in such a message beyond the first, at the coordinator.
        push_s: A mapper's push or a peer's forward, at the reducer (its next step starts
            that much later).
        snapshot_s: A new snapshot, at each reducer (likewise).
    """

    report_s: float = 0.0
    report_member_s: float = 0.0
    forecast_s: float = 0.0
    tick_s: float = 0.0
    tick_per_reducer_s: float = 0.0
    publish_s: float = 0.0
    block_request_s: float = 0.0
    mapper_report_s: float = 0.0
    progress_s: float = 0.0
    progress_member_s: float = 0.0
    push_s: float = 0.0
    snapshot_s: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
                raise ConfigError(f"MessageCosts.{f.name} must be a finite number of seconds >= 0, got {value!r}")

    @classmethod
    def free(cls) -> MessageCosts:
        """Every message costs nothing and arrives at once (the runtime's model without
        a cost model: the protocol alone)."""
        return cls()

    @property
    def is_free(self) -> bool:
        return not any(asdict(self).values())

    def batch_cost(self, kind: str, items: int) -> float:
        """One message of ``kind`` (``"report"`` or ``"progress"``) carrying ``items``."""
        return getattr(self, f"{kind}_s") + getattr(self, f"{kind}_member_s") * max(0, items - 1)

    def tick_cost(self, num_reducers: int) -> float:
        """The balancer's tick at ``num_reducers`` slots."""
        return self.tick_s + self.tick_per_reducer_s * num_reducers

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


#: Costs measured on Ray 2.60 on a shared 2-core machine (``python -m benchmarks.scale_sim
#: --measure``; the median of three runs): the receiving process's CPU per call of one async
#: actor, which includes the handler (a real balancer's for a report); a mapper's word about
#: a block is taken as costly as a progress call (the same shape), a forecast as a report;
#: the parts per report and per progress count carried in a host's batch beyond the first
#: are the receiver's unpickling and handler per call of a batch of 8, timed in-process (a
#: real balancer's report with 32 key counts, a real coordinator machine's progress count:
#: ``--measure --batch-only``, the median of three runs);
#: ``publish_s`` is the caller's CPU per call carrying a snapshot; the tick is the balancer's
#: check timed in-process on simulated runs at 64 and 1,024 reducers (fixed and per-reducer
#: parts). ``docs/scale.md`` ("Simulator") has the figures.
MEASURED = MessageCosts(
    report_s=670e-6,
    report_member_s=56e-6,
    forecast_s=670e-6,
    tick_s=5.1e-3,
    tick_per_reducer_s=15e-6,
    publish_s=330e-6,
    block_request_s=600e-6,
    mapper_report_s=460e-6,
    progress_s=460e-6,
    progress_member_s=1.3e-6,
    push_s=700e-6,
    snapshot_s=650e-6,
)


class ActorQueue:
    """One actor as a single FIFO server in virtual time: a message that arrives at
    ``now`` starts when the actor is free and ends ``cost`` seconds later.

    Attributes:
        name: The actor ("balancer", "coordinator").
        free_at: When the actor has handled everything it was given.
        busy_s: Seconds it spent handling messages.
        messages: Messages it was given, by kind.
        waited_s: Seconds messages waited for the actor (before their own handling).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.free_at = 0.0
        self.busy_s = 0.0
        self.waited_s = 0.0
        self.messages: dict[str, int] = {}

    def admit(self, now: float, cost: float, kind: str) -> float:
        """A message of ``kind`` arrives at ``now``; returns when the actor has handled it."""
        self.messages[kind] = self.messages.get(kind, 0) + 1
        start = max(now, self.free_at)
        self.waited_s += start - now
        self.free_at = start + cost
        self.busy_s += cost
        return self.free_at

    def spend(self, now: float, cost: float, kind: str) -> None:
        """Work the actor does at ``now`` on its own (sending), after what it has queued."""
        self.admit(now, cost, kind)

    def stats(self, elapsed_s: float) -> dict[str, Any]:
        """Busy fraction over ``elapsed_s`` virtual seconds, busy and waiting seconds,
        and the messages by kind."""
        return {
            "busy_fraction": min(1.0, self.busy_s / elapsed_s) if elapsed_s > 0 else 0.0,
            "busy_s": self.busy_s,
            "waited_s": self.waited_s,
            "messages": dict(sorted(self.messages.items())),
        }
