"""The group scheduler of the apply phase: event lists in, instruction lists out (no Ray)."""

from __future__ import annotations

import heapq

import pytest

from dpa.aggregates.rows import UnitSize
from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.group_schedule import STEAL_FACTOR, GroupScheduler, unit_target_rows


def _sizes(*rows: int) -> list[UnitSize]:
    return [UnitSize(r, 1, r) for r in rows]


def test_a_worker_runs_its_own_units_largest_first_then_is_done():
    s = GroupScheduler([0])
    assert s.handle(ev.UnitsListed(0, _sizes(5, 30, 10))) == []
    got = [s.handle(ev.WorkAsked(0)) for _ in range(4)]
    assert got == [[op.RunUnit(0, 0, 1)], [op.RunUnit(0, 0, 2)], [op.RunUnit(0, 0, 0)], [op.WorkerDone(0)]]
    assert s.stats()["moved_units"] == 0 and s.stats()["units"] == 3 and s.stats()["rows"] == 45


def test_a_worker_with_nothing_left_takes_the_largest_unit_waiting_elsewhere():
    s = GroupScheduler([0, 1])
    s.handle(ev.UnitsListed(0, _sizes(100, 10, 10, 10)), ev.UnitsListed(1, []))
    assert s.handle(ev.WorkAsked(0)) == [op.RunUnit(0, 0, 0)]
    # worker 1 holds nothing: it takes worker 0's largest waiting unit (ties: lowest index first)
    assert s.handle(ev.WorkAsked(1)) == [op.RunUnit(1, 0, 1)]
    assert s.handle(ev.WorkAsked(1, 10, 0.01)) == [op.RunUnit(1, 0, 2)]
    stats = s.stats()
    assert stats["moved_units"] == 2 and stats["moved_rows"] == 20
    assert stats["moves"] == [{"worker": 1, "owner": 0, "rows": 10, "groups": 1}] * 2


def test_a_much_larger_unit_elsewhere_starts_before_ones_own_small_units():
    s = GroupScheduler([0, 1])
    s.handle(ev.UnitsListed(0, _sizes(600, 300)), ev.UnitsListed(1, _sizes(20, 20)))
    assert s.handle(ev.WorkAsked(0)) == [op.RunUnit(0, 0, 0)]
    # 300 > STEAL_FACTOR * 20: worker 1 starts the large group at once
    assert 300 > STEAL_FACTOR * 20
    assert s.handle(ev.WorkAsked(1)) == [op.RunUnit(1, 0, 1)]
    assert s.handle(ev.WorkAsked(1, 300, 0.3)) == [op.RunUnit(1, 1, 0)]


def test_a_unit_elsewhere_at_most_steal_factor_larger_does_not_move():
    s = GroupScheduler([0, 1])
    s.handle(ev.UnitsListed(0, _sizes(40, 40)), ev.UnitsListed(1, _sizes(20)))
    assert s.handle(ev.WorkAsked(1)) == [op.RunUnit(1, 1, 0)]


def test_ties_between_owners_go_to_the_one_with_the_most_work_waiting():
    s = GroupScheduler([0, 1, 2])
    s.handle(ev.UnitsListed(0, _sizes(10)), ev.UnitsListed(1, _sizes(10, 10, 10)), ev.UnitsListed(2, []))
    assert s.handle(ev.WorkAsked(2)) == [op.RunUnit(2, 1, 0)]


def test_measured_seconds_per_row_and_busy_time_are_accounted():
    s = GroupScheduler([0, 1])
    s.handle(ev.UnitsListed(0, _sizes(10, 10)), ev.UnitsListed(1, []))
    assert s.seconds_per_row is None and s.estimated_left_s() is None
    s.handle(ev.WorkAsked(0), ev.WorkAsked(1))
    s.handle(ev.WorkAsked(0, 10, 0.5))
    assert s.seconds_per_row == pytest.approx(0.05)
    assert s.estimated_left_s() == pytest.approx(0.0)
    assert s.stats()["busy_s"] == [0.5, 0.0] and s.stats()["rows_run"] == [10, 0]


def test_an_unknown_event_is_refused():
    with pytest.raises(TypeError, match="group scheduler takes no ReducerStarted"):
        GroupScheduler([0]).handle(ev.ReducerStarted())


def _makespan(units_per_owner: dict[int, list[int]], workers: int) -> float:
    """Simulates workers that ask when free; a unit of r rows takes r seconds."""
    s = GroupScheduler(range(workers))
    for w in range(workers):
        s.handle(ev.UnitsListed(w, _sizes(*units_per_owner.get(w, []))))
    free = [(0.0, w) for w in range(workers)]
    last = {w: (0, 0.0) for w in range(workers)}
    end = 0.0
    while free:
        at, w = heapq.heappop(free)
        (ins,) = s.handle(ev.WorkAsked(w, *last[w]))
        if isinstance(ins, op.WorkerDone):
            end = max(end, at)
            continue
        rows = units_per_owner[ins.owner][ins.index]
        last[w] = (rows, float(rows))
        heapq.heappush(free, (at + rows, w))
    return end


def test_skewed_groups_finish_near_max_of_average_and_largest_group():
    # One reducer collected the hot key (600) and many small units; the others a few.
    units = {0: [600] + [25] * 40, 1: [25] * 8, 2: [25] * 8, 3: [25] * 8}
    total = sum(sum(u) for u in units.values())
    bound = max(total / 4, 600)
    assert _makespan(units, 4) <= bound + 25  # within one small unit of the bound


def test_unit_target_rows_splits_the_job_into_units_per_worker():
    assert unit_target_rows(40_000, 8) == 625
    assert unit_target_rows(3, 8) == 1 and unit_target_rows(0, 0) == 1
