"""The control traffic of a process's reducers, counted: what the reducer machines say and
when, carried out as a host carries them out (each wake time's reports and progress leave
the process as one message: :mod:`dpa.runtime.ray.wakes` and :mod:`dpa.runtime.ray.outbox`).

The law (docs/scale.md): while its reducers are busy, a host sends the coordinator's
process at most one message per tick of the report clock (``1 / report_interval_s`` per
second), however many reducers it runs; a reducer with nothing new sends nothing. The
clock's period is sized by the job's width (:func:`dpa.config.control_period`: 0.05 s up
to 128 reducers, in proportion beyond), so a host of a wide job sends less often.
"""

from __future__ import annotations

import heapq
import math

import numpy as np
import pyarrow as pa
import pytest

import dpa
from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.mapper import MapperLogic
from dpa.engine.planning import build_plan
from dpa.engine.reducer_machine import PROGRESS_INTERVAL_S, ReducerMachine
from dpa.input.sources import normalize_source

COST_S = 2e-3


def run_host(reducers: int, records: int, seed: int = 0, width: int | None = None) -> dict[str, float]:
    """``reducers`` reducer machines of one host, ``records`` records each queued (on average), in
    virtual time until every queue is empty; returns the messages the host sent the
    coordinator's process (reports and progress), the ticks and the time taken. ``width``:
    the job's reducers (default ``reducers``), of which the host runs the first ``reducers``."""
    rng = np.random.default_rng(seed)
    width = width or reducers
    n = width * records
    table = pa.table({"k": rng.integers(0, n // 10, n)})
    cfg = dpa.JobConfig(shape=dpa.ShapeConfig(num_mappers=1, num_reducers=width),
                        balance=dpa.BalanceConfig(policy="hash"), runtime="local")
    plan, _ = build_plan(normalize_source(table, n), "k", dpa.WithCost(dpa.Count(), COST_S), None, cfg)
    snap = plan.policy.initial_snapshot(width)
    now = [0.0]
    machines = [ReducerMachine(r, plan, snap, lambda: now[0]) for r in range(reducers)]
    heap: list[tuple[float, int, str, int]] = []
    seq = 0
    counts = {"messages": 0, "reports": 0, "ticks": 0}
    wakes: dict[float, list[int]] = {}

    def carry_out(r: int, instructions: list) -> bool:
        """Schedules steps and wakes; whether a report or progress left (in this step)."""
        nonlocal seq
        said = False
        for ins in instructions:
            if isinstance(ins, op.PayStep):
                heapq.heappush(heap, (now[0] + ins.cost_s, seq, "paid", r))
                seq += 1
            elif isinstance(ins, op.ReportAt):
                if ins.at not in wakes:
                    heapq.heappush(heap, (ins.at, seq, "wake", -1))
                    seq += 1
                wakes.setdefault(ins.at, []).append(r)
            elif isinstance(ins, op.Report | op.Progress):
                said = True
                counts["reports"] += isinstance(ins, op.Report)
        return said

    pushes = MapperLogic(0, plan, snap).map_block(table)
    for i, push in enumerate(pushes):  # (queued as forwards: no back-pressure in the way)
        if push.dest >= reducers:  # (another host's)
            continue
        carry_out(push.dest, machines[push.dest].handle(ev.PushArrived(i, push.batch, snap.version, 0, True)))
    started = sum(carry_out(r, m.handle(ev.ReducerStarted())) for r, m in enumerate(machines))
    while heap:
        now[0], _, kind, r = heapq.heappop(heap)
        if kind == "paid":
            counts["messages"] += carry_out(r, machines[r].handle(ev.StepPaid()))
        else:  # every reducer woken at this time, in one step of the loop: one message
            counts["ticks"] += 1
            said = [carry_out(w, machines[w].handle(ev.ReportDue())) for w in wakes.pop(now[0])]
            counts["messages"] += any(said)
    assert all(m.logic.queued == 0 for m in machines)
    assert sum(m.logic.processed for m in machines) == (n if width == reducers else
                                                       sum(p.batch.num_rows for p in pushes if p.dest < reducers))
    return {**counts, "started": started, "seconds": now[0], "interval": plan.report_interval_s}


@pytest.mark.parametrize("reducers", [4, 64])
def test_a_host_sends_at_most_one_message_per_tick_however_many_reducers_it_runs(reducers):
    got = run_host(reducers, 500)
    ticks_bound = math.ceil(got["seconds"] / got["interval"]) + 1
    assert got["ticks"] <= ticks_bound
    assert got["messages"] <= ticks_bound  # (the first reports, at start, are the start's)
    assert got["started"] == reducers


def test_the_message_rate_does_not_grow_with_the_reducers_but_the_reports_do():
    few, many = run_host(4, 500), run_host(64, 500)
    rate = lambda got: got["messages"] / got["seconds"]  # noqa: E731
    # one message per tick at most, whatever the reducers (fewer reducers have news at fewer ticks)
    assert rate(many) <= 1 / many["interval"] + 1 and rate(few) <= 1 / few["interval"] + 1
    # what the balancer handles does grow with the reducers, at most one report per step each
    steps = 500 * COST_S / 0.1
    assert many["reports"] <= 64 * (steps + 2)


def test_a_host_of_a_wide_job_sends_at_the_slower_clock_the_width_sets():
    """A host of 8 reducers of a 1,024-reducer job: the report clock's period is 0.4 s (eight
    times 0.05 s), so the host sends at most one message per 0.4 s while its reducers are
    busy, half or less of what the same host sends in a 64-reducer job (whose reducers,
    stepping every 0.1 s, have news at every other 0.05 s tick); each reducer reports at
    most once a tick, so the reports it carries are no more than the narrow job's."""
    wide, narrow = run_host(8, 500, width=1024), run_host(8, 500, width=64)
    assert wide["interval"] == pytest.approx(0.4) and narrow["interval"] == pytest.approx(0.05)
    assert wide["messages"] <= math.ceil(wide["seconds"] / wide["interval"]) + 1
    rate = lambda got: got["messages"] / got["seconds"]  # noqa: E731
    assert rate(wide) <= 1 / wide["interval"] + 1
    assert rate(wide) <= 0.5 * rate(narrow)
    assert 8 <= wide["reports"] <= 8 * (wide["seconds"] / wide["interval"] + 2)
    assert wide["reports"] <= narrow["reports"]


def test_a_busy_reducer_reports_a_long_queue_by_its_relative_change_not_every_step():
    """One reducer draining 100 steps of work reports its queue as it moves by
    REPORT_FRACTION of what it last reported (about log(100) / log(8 / 7) ~ 35 times), not
    at each of the 100 steps; its progress goes every PROGRESS_INTERVAL_S."""
    got = run_host(1, 5000)
    steps = 5000 * COST_S / 0.1
    assert 10 <= got["reports"] <= 0.5 * steps
    assert got["ticks"] <= got["reports"] + got["seconds"] / PROGRESS_INTERVAL_S + 2
