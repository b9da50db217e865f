"""The apply phase of a per-group function: which worker runs which unit of groups, and when.

After the rows are collected, every reducer packs its groups into units
(:meth:`dpa.aggregates.rows.RowsState.units`) and tells :class:`GroupScheduler` their sizes.
Each worker (a reducer slot) then asks for work whenever it is free; the scheduler answers
with one :class:`~dpa.engine.instructions.RunUnit` or
:class:`~dpa.engine.instructions.WorkerDone`. The rule is list scheduling by estimated cost
(rows times the seconds per row measured so far), largest first:

* a worker runs its own largest waiting unit, unless a unit waiting elsewhere is more than
  :data:`STEAL_FACTOR` times larger (a large group should start early, wherever it is);
* a worker with nothing of its own takes the largest unit waiting elsewhere (ties: from
  the reducer with the most work waiting); that unit's rows move to it.

Greedy largest-first list scheduling ends within one unit of the average load, and never
before the largest group: the makespan tends to ``max(total / workers, largest group)``.
Units of small groups are about ``total / (workers * UNITS_PER_WORKER)`` rows, so the tail
is short and the scheduler is asked a few dozen times per worker, not once per group.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.machine import Machine, handles

logger = logging.getLogger(__name__)

#: A unit waiting at another reducer is taken before one's own when it is this many times larger.
STEAL_FACTOR = 2.0
#: Units of small groups per worker (their size: total rows / (workers * this)).
UNITS_PER_WORKER = 8
#: Moves kept in the stats (the first ones).
MOVES_KEPT = 200


def unit_target_rows(total_rows: int, workers: int) -> int:
    """Rows per unit of small groups for a job of ``total_rows`` rows over ``workers`` workers."""
    return max(1, total_rows // max(1, workers * UNITS_PER_WORKER))


class GroupScheduler(Machine):
    """Hands units of groups to free workers (see the module docstring).

    Args:
        workers: The workers' ids (reducer slots).
    """

    role = "group scheduler"

    def __init__(self, workers: Iterable[int]) -> None:
        self.workers = list(workers)
        self.waiting: dict[int, list[tuple[int, Any]]] = {}  # owner -> [(unit index, size)], largest last
        self.busy_s = {w: 0.0 for w in self.workers}
        self.ran_rows = {w: 0 for w in self.workers}
        self.units = self.groups = self.rows = self.largest = 0
        self.moved_units = self.moved_groups = self.moved_rows = 0
        self.moves: list[dict[str, int]] = []

    @handles(ev.UnitsListed)
    def _on_listed(self, event: ev.UnitsListed) -> list[Any]:
        units = sorted(enumerate(event.sizes), key=lambda unit: (unit[1].rows, -unit[0]))
        self.waiting[event.worker] = units
        for _, size in units:
            self.units += 1
            self.groups += size.groups
            self.rows += size.rows
            self.largest = max(self.largest, size.largest)
        return []

    @handles(ev.WorkAsked)
    def _on_asked(self, event: ev.WorkAsked) -> list[Any]:
        w = event.worker
        self.busy_s[w] = self.busy_s.get(w, 0.0) + event.seconds
        self.ran_rows[w] = self.ran_rows.get(w, 0) + event.rows
        owner = self._pick(w)
        if owner is None:
            return [op.WorkerDone(w)]
        index, size = self.waiting[owner].pop()
        if owner != w:
            self.moved_units += 1
            self.moved_groups += size.groups
            self.moved_rows += size.rows
            if len(self.moves) < MOVES_KEPT:
                self.moves.append({"worker": w, "owner": owner, "rows": size.rows, "groups": size.groups})
        return [op.RunUnit(w, owner, index)]

    def _pick(self, w: int) -> int | None:
        """Whose unit worker ``w`` runs next (None: no unit is left)."""
        own = self.waiting.get(w)
        heads = [(units[-1][1].rows, self._backlog(o), o) for o, units in self.waiting.items() if units and o != w]
        other = max(heads)[2] if heads else None
        if own:
            if other is None or self.waiting[other][-1][1].rows <= STEAL_FACTOR * own[-1][1].rows:
                return w
        return other

    def _backlog(self, owner: int) -> int:
        return sum(size.rows for _, size in self.waiting[owner])

    @property
    def seconds_per_row(self) -> float | None:
        """Measured seconds of ``fn`` per row so far (None before any unit ran)."""
        rows = sum(self.ran_rows.values())
        return sum(self.busy_s.values()) / rows if rows else None

    def estimated_left_s(self) -> float | None:
        """Estimated seconds of work still waiting (rows waiting times :attr:`seconds_per_row`)."""
        rate = self.seconds_per_row
        if rate is None:
            return None
        return rate * sum(self._backlog(o) for o in self.waiting)

    def stats(self) -> dict[str, Any]:
        """What the apply phase did, for :class:`dpa.Stats` (``group_apply``)."""
        return {
            "units": self.units,
            "groups": self.groups,
            "rows": self.rows,
            "largest_group_rows": self.largest,
            "moved_units": self.moved_units,
            "moved_groups": self.moved_groups,
            "moved_rows": self.moved_rows,
            "seconds_per_row": self.seconds_per_row,
            "busy_s": [round(self.busy_s.get(w, 0.0), 6) for w in self.workers],
            "rows_run": [self.ran_rows.get(w, 0) for w in self.workers],
            "moves": list(self.moves),
        }
