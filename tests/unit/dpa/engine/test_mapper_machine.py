"""The mapper's protocol without Ray: events in, instructions out. Items asked ahead, the
forecast's answer routed under, pushes sized by the reducers' answers, a block cut at an
epoch boundary, and the mapper's end."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

import dpa
from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.flow import PUSH_GROW, PUSH_SHRINK
from dpa.engine.mapper import FIRST_PUSH_ROWS, PUSH_GROWTH
from dpa.engine.mapper_machine import MapperMachine
from dpa.engine.planning import build_plan
from dpa.input.sources import normalize_source


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def machine(rows=40_000, **config):
    table = pa.table({"k": [i % 97 for i in range(rows)]})
    fields = dict(runtime="local", num_mappers=1, num_reducers=4, map_side_combine=False)
    fields.update(config)
    plan, _ = build_plan(normalize_source(table, rows), "k", dpa.Count(), None, dpa.JobConfig(**fields))
    clock = Clock()
    return MapperMachine(0, plan, plan.policy.initial_snapshot(plan.num_reducers), clock), table, clock


def answer_all(m, out, outcome=PUSH_GROW):
    """Answers every push with ``outcome`` until the block is done; the pushes' sizes."""
    sizes = []
    while True:
        pushes = [i for i in out if isinstance(i, op.SendPushes)]
        if not pushes:
            return sizes, out
        sizes.append(sum(p.batch.num_rows for p in pushes[0].pushes))
        out = m.handle(ev.PushesAnswered([(outcome, None)] * len(pushes[0].pushes)))


def test_a_mapper_asks_ahead_and_ends_each_block_with_its_count():
    m, table, _ = machine(policy="hash")
    assert m.handle(ev.MapperStarted()) == [op.RequestBlock(), op.AwaitBlock()]
    out = m.handle(ev.BlockArrived(table, 0, 1))
    assert out[0] == op.RequestBlock()  # the next item travels while this one is routed
    sizes, out = answer_all(m, out)
    assert sum(sizes) == table.num_rows
    assert sizes[:3] == [FIRST_PUSH_ROWS, FIRST_PUSH_ROWS * PUSH_GROWTH, table.num_rows - FIRST_PUSH_ROWS * 9]
    assert out == [op.BlockDone(0, table.num_rows), op.AwaitBlock()]
    assert m.handle(ev.NoMoreBlocks()) == [op.MapperDone(m.logic.first_routed, table.num_rows)]


def test_pushes_shrink_after_a_reducer_made_one_wait():
    m, table, _ = machine(policy="hash")
    m.handle(ev.MapperStarted())
    sizes, _ = answer_all(m, m.handle(ev.BlockArrived(table, 0, 1)), outcome=PUSH_SHRINK)
    assert set(sizes[:-1]) == {FIRST_PUSH_ROWS}


def test_the_first_block_s_forecast_is_routed_under_the_balancer_s_answer():
    m, table, _ = machine()  # (the default policy wants a forecast)
    m.handle(ev.MapperStarted())
    out = m.handle(ev.BlockArrived(table, 0, 1))
    assert isinstance(out[-1], op.SendForecast) and out[-1].total == table.num_rows
    newer = m.logic.snapshot
    out = m.handle(ev.ForecastAnswered(newer))
    assert isinstance(out[0], op.SendPushes) and out[0].version == newer.version


def test_a_mapper_started_while_the_balancer_starts_routes_without_waiting_for_the_forecast():
    m, table, _ = machine()
    m = MapperMachine(0, m.logic.plan, m.logic.snapshot, Clock(), await_forecast=False)
    m.handle(ev.MapperStarted())
    out = m.handle(ev.BlockArrived(table, 0, 1))
    assert [type(i) for i in out] == [op.RequestBlock, op.SendForecast, op.SendPushes]
    assert out[1].wait is False and out[1].total == table.num_rows
    assert out[2].version == m.logic.plan.policy.initial_snapshot(4).version
    # What the balancer makes of the forecast arrives as any published snapshot does.
    ring = dataclasses.replace(m.logic.plan.policy.initial_snapshot(4), version=1)
    assert m.handle(ev.SnapshotArrived(ring)) == []
    out = m.handle(ev.PushesAnswered([(PUSH_GROW, None)] * len(out[2].pushes)))
    assert out[0].version == ring.version
    sizes, out = answer_all(m, out)
    assert out == [op.BlockDone(0, table.num_rows), op.AwaitBlock()]


def test_a_block_is_cut_when_its_epoch_s_time_is_up():
    m, table, clock = machine(policy="hash", checkpoint_interval_s=1.0)
    m.handle(ev.MapperStarted())
    out = m.handle(ev.BlockArrived(table, 0, 1))
    first = sum(p.batch.num_rows for p in out[-1].pushes)
    clock.t = 1.5
    out = m.handle(ev.PushesAnswered([(PUSH_GROW, None)] * len(out[-1].pushes)))
    (split,) = out
    assert isinstance(split, op.SplitBlock) and split.emitted == first and split.token == 1
    assert split.rest.num_rows == table.num_rows - first
    out = m.handle(ev.BlockSplit((1, 2)))  # the rest is item 2 of epoch 1
    assert isinstance(out[0], op.SendPushes) and out[0].epoch == 1
    _, out = answer_all(m, out)
    assert out == [op.BlockDone(1, table.num_rows - first), op.AwaitBlock()]


def test_a_split_after_the_run_ended_ends_the_block():
    m, table, clock = machine(policy="hash", checkpoint_interval_s=1.0)
    m.handle(ev.MapperStarted())
    out = m.handle(ev.BlockArrived(table, 0, 1))
    clock.t = 2.0
    m.handle(ev.PushesAnswered([(PUSH_GROW, None)] * len(out[-1].pushes)))
    assert [type(i) for i in m.handle(ev.BlockSplit(None))] == [op.BlockDone, op.AwaitBlock]


def test_a_published_snapshot_is_adopted_for_the_next_push():
    m, table, _ = machine(policy="doubling")
    m.handle(ev.MapperStarted())
    out = m.handle(ev.BlockArrived(table, 0, 1))
    if isinstance(out[-1], op.SendForecast):  # (the ring policies plan their first ring on it)
        out = m.handle(ev.ForecastAnswered(None))
    ring = m.logic.plan.policy.ring(4)
    ring.double_except(0)
    assert m.handle(ev.SnapshotArrived(ring.snapshot())) == []
    out = m.handle(ev.PushesAnswered([(PUSH_GROW, None)] * len(out[-1].pushes)))
    assert out[0].version == ring.version


def _run_machine(reducer):
    first = pa.table({"k": [1, 2, 2], "v": [1, 2, 3]})
    fields = dict(runtime="local", num_mappers=1, num_reducers=2, policy="hash")
    plan, _ = build_plan(normalize_source(first, 3), "k", reducer, None, dpa.JobConfig(**fields))
    m = MapperMachine(0, plan, plan.policy.initial_snapshot(plan.num_reducers), Clock())
    m.handle(ev.MapperStarted())
    return m


def _routed(m, out):
    _, out = answer_all(m, out)
    return out


def test_a_run_of_blocks_is_mapped_block_by_block_and_combined_as_one():
    m = _run_machine(dpa.Sum("v"))
    ints = pa.table({"k": [1, 2, 2], "v": [1, 2, 3]})
    floats = pa.table({"k": [2, 3], "v": [0.5, 1.5]})  # (v promotes exactly: int -> double)
    empty = pa.table({"k": pa.array([], pa.int64())})  # (no value column: map_fn emitted nothing)
    out = m.handle(ev.BlockArrived((ints, empty, floats), 0, 1))
    pushed = [p.batch for i in out if isinstance(i, op.SendPushes) for p in i.pushes]
    out = _routed(m, out)
    assert out[0] == op.BlockDone(0, 5) and m.logic.blocks == 1  # one item, five records
    rows = pa.concat_tables(pushed, promote_options="permissive").to_pydict()
    assert sorted(zip(rows["k"], rows[next(c for c in rows if c.endswith("sum"))])) == [(1, 1.0), (2, 5.5), (3, 1.5)]


def test_a_run_whose_key_changes_class_fails_as_blocks_do():
    m = _run_machine(dpa.Count())
    ints = pa.table({"k": [1, 2], "v": [1, 2]})
    floats = pa.table({"k": [1.0, 2.5], "v": [3, 4]})
    with pytest.raises(dpa.SchemaError, match="'k'"):
        m.handle(ev.BlockArrived((ints, floats), 0, 1))
