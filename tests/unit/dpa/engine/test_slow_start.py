"""Mappers' slow start and reducers' queues bounded in seconds of work (no Ray)."""

from __future__ import annotations

import collections

import numpy as np
import pyarrow as pa
import pytest

import dpa
from dpa.engine.flow import PUSH_GROW, PUSH_KEEP, PUSH_SHRINK
from dpa.engine.mapper import FIRST_PUSH_ROWS, MIN_PUSH_ROWS, PUSH_GROWTH, MapperLogic
from dpa.engine.planning import build_plan
from dpa.engine.reducer import ReducerLogic
from dpa.input.records import HASH_COL
from dpa.input.sources import normalize_source


def _plan(rows: int, **config):
    table = pa.table({"k": np.arange(rows, dtype=np.int64) % 997})
    cfg = dpa.JobConfig(policy="doubling", runtime="local", map_side_combine=False, **config)
    plan, _ = build_plan(normalize_source(table, rows), "k", dpa.Count(), None, cfg)
    return plan, table


def test_a_block_is_routed_in_pushes_that_grow_while_nothing_waits_and_halve_after_a_wait():
    plan, table = _plan(400_000)
    mapper = MapperLogic(0, plan, plan.policy.initial_snapshot(plan.num_reducers))
    mapper.start_block(table)
    sizes, seen = [], []
    outcomes = [PUSH_KEEP, PUSH_GROW, PUSH_GROW, PUSH_SHRINK]
    while mapper.routing:
        pushes = mapper.next_pushes()
        sizes.append(sum(p.batch.num_rows for p in pushes))
        seen.extend(h for p in pushes for h in p.batch[HASH_COL].to_pylist())
        mapper.on_pushed(outcomes[len(sizes) - 1] if len(sizes) <= len(outcomes) else PUSH_GROW)
    g = PUSH_GROWTH
    first = FIRST_PUSH_ROWS
    # kept while a reducer's cost was unknown, grown twice, halved after a wait
    assert sizes[:5] == [first, first, first * g, first * g * g, first * g * g // 2]
    assert sum(sizes) == table.num_rows and len(seen) == table.num_rows  # every row once
    assert mapper.pushes == len(sizes)
    # the window carries over to the next block of the job: no new slow start
    window = mapper.window
    mapper.start_block(table.slice(0, 10))
    assert mapper.window == window and sum(p.batch.num_rows for p in mapper.next_pushes()) == 10


def test_the_window_never_drops_below_the_first_push():
    plan, _ = _plan(10)
    mapper = MapperLogic(0, plan, plan.policy.initial_snapshot(plan.num_reducers))
    for _ in range(5):
        mapper.on_pushed(PUSH_SHRINK)
    assert mapper.window == FIRST_PUSH_ROWS


def test_each_push_is_routed_under_the_snapshot_the_mapper_has_then():
    plan, table = _plan(8_000)
    policy = plan.policy
    snap = policy.initial_snapshot(plan.num_reducers)
    mapper = MapperLogic(0, plan, snap)
    mapper.start_block(table)
    first = mapper.next_pushes()
    planner = policy.make_planner(plan.num_reducers)
    hot = max(first, key=lambda p: p.batch.num_rows).dest
    planner.ring.redistribute(hot, "doubling")
    newer = planner.ring.snapshot()
    mapper.on_snapshot(newer)
    mapper.on_pushed(PUSH_GROW)
    for push in mapper.next_pushes():
        hashes = push.batch[HASH_COL].to_numpy()
        assert (newer.lookup_batch(hashes) == push.dest).all()
    moved = [h for p in first for h in p.batch[HASH_COL].to_numpy() if newer.lookup_batch(np.array([h]))[0] != p.dest]
    assert moved  # the ring change did move keys the first push had routed the old way


def _reducer(**config) -> ReducerLogic:
    plan, table = _plan(5_000, **config)
    snap = plan.policy.initial_snapshot(plan.num_reducers)
    return ReducerLogic(0, plan, snap), MapperLogic(0, plan, snap), table


def test_a_queue_has_room_when_empty_and_not_again_before_a_cost_was_measured():
    red, mapper, table = _reducer()
    mine = next(p.batch for p in mapper.map_block(table) if p.dest == 0)
    assert red.has_room()
    red.enqueue(mine.slice(0, 10))
    assert not red.has_room()  # what a row costs is not known yet
    chunk = red.take_chunk()
    red.apply(chunk)
    red.on_step(chunk.rows, chunk.rows * 1e-3)  # 1 ms per row
    assert red.has_room()


def test_a_queue_is_bounded_in_seconds_of_work_at_the_measured_cost():
    red, mapper, table = _reducer(queue_time_s=0.2)
    mine = next(p.batch for p in mapper.map_block(table) if p.dest == 0)
    red.on_step(20, 20 * 1e-3)  # 1 ms per row, a full-size step: 0.2 s of work is 200 rows
    assert red.calibrated
    red.enqueue(mine.slice(0, 150))
    assert red.has_room()
    red.enqueue(mine.slice(150, 60))
    assert not red.has_room()
    cheap, _, _ = _reducer(queue_time_s=0.2)
    cheap.on_step(10, 10 * 1e-5)  # small first steps overstate a cheap reducer's cost: no bound yet
    cheap.enqueue(mine)
    assert cheap.has_room() and not cheap.calibrated
    cheap.on_step(65_536, 65_536 * 1e-8)  # a step of chunk_size rows calibrates it
    cheap.enqueue(mine)
    assert cheap.has_room()


def test_an_infinite_queue_time_bounds_queues_in_records_only():
    """``queue_time_s=math.inf`` (the paper's queues, used by the reproduction scripts): a
    queue takes pushes before any cost was measured and after, up to ``queue_capacity``."""
    import math

    red, mapper, table = _reducer(queue_time_s=math.inf, queue_capacity=300)
    mine = next(p.batch for p in mapper.map_block(table) if p.dest == 0)
    red.enqueue(mine.slice(0, 10))
    assert red.has_room() and red.capacity_rows is None  # no cost measured: no bound in time either
    red.on_step(20, 20 * 1e-3)  # 1 ms per row, calibrated
    red.enqueue(mine.slice(10, 280))
    assert red.calibrated and red.has_room() and red.capacity_rows is None
    red.enqueue(mine.slice(290, 20))
    assert not red.has_room()  # 310 records >= queue_capacity


def test_queue_capacity_in_records_still_applies():
    red, mapper, table = _reducer(queue_capacity=100)
    mine = next(p.batch for p in mapper.map_block(table) if p.dest == 0)
    red.on_step(65_536, 65_536 * 1e-9)
    red.enqueue(mine.slice(0, 120))
    assert not red.has_room()


def _uniform_job(queue_time_s: float, rows: int = 16_000):
    keys = np.arange(rows, dtype=np.int64) % 4000
    table = pa.table({"key": keys})
    cfg = dpa.JobConfig(num_reducers=8, runtime="local", queue_time_s=queue_time_s)
    res = dpa.run(table, key="key", reducer=dpa.WithCost(dpa.Count(), 1e-3), config=cfg)
    assert res.to_dict() == dict(collections.Counter(keys.tolist()))
    return res


def test_local_jobs_queue_no_more_than_queue_time_s_of_work_plus_one_push():
    bounded = _uniform_job(0.1)
    # 1 ms per record, 0.1 s: 100 records, plus one push's share on top: pushes do not grow
    # before the reducers have measured their cost, so at most a first push's rows
    assert max(bounded.stats.peak_queue) <= 100 + FIRST_PUSH_ROWS
    unbounded = _uniform_job(1e6)  # the bound is what keeps the queues short
    assert max(unbounded.stats.peak_queue) > 1000


def test_config_checks_queue_time_s():
    with pytest.raises(dpa.ConfigError, match="queue_time_s"):
        dpa.JobConfig(queue_time_s=0)


def test_a_push_routed_by_an_older_ring_is_still_exact_with_rebalances():
    rng = np.random.default_rng(3)
    keys = rng.zipf(1.3, 20_000) % 500
    table = pa.table({"key": keys.astype(np.int64)})
    for policy in ("doubling", "halving", "hybrid"):
        cfg = dpa.JobConfig(num_reducers=8, runtime="local", policy=policy, max_rounds=3)
        res = dpa.run(table, key="key", reducer=dpa.WithCost(dpa.Count(), 1e-3), config=cfg)
        assert res.to_dict() == dict(collections.Counter(keys.tolist())), policy
        assert res.stats.rebalances, policy



def test_a_push_never_brings_a_reducer_more_than_its_queue_holds():
    plan, table = _plan(400_000, queue_time_s=0.1)
    mapper = MapperLogic(0, plan, plan.policy.initial_snapshot(plan.num_reducers))
    mapper.start_block(table)
    pushes = mapper.next_pushes()
    parts = {p.dest: p.batch.num_rows for p in pushes}
    # every reducer measured 1 ms per row: its queue holds 100 rows (0.1 s)
    mapper.on_pushed(PUSH_GROW, {r: 100 for r in parts})
    largest = max(parts.values())
    assert mapper.window == max(MIN_PUSH_ROWS, int(FIRST_PUSH_ROWS * 100 / largest))
    assert mapper.window < FIRST_PUSH_ROWS * PUSH_GROWTH
    # a reducer that does not know its cost yet (None) or free rows bound nothing
    mapper.window = FIRST_PUSH_ROWS
    mapper.next_pushes()
    mapper.on_pushed(PUSH_GROW, {r: None for r in parts})
    assert mapper.window == FIRST_PUSH_ROWS * PUSH_GROWTH


def test_capacity_rows_is_the_queue_bound_at_the_measured_cost():
    red, _, _ = _reducer(queue_time_s=0.2)
    assert red.capacity_rows is None  # not measured yet
    red.on_step(16, 16 * 1e-3)  # 16 rows at 1 ms: long enough to measure (CALIBRATION_S)
    assert red.calibrated and red.capacity_rows == 200


def test_a_sixteen_record_first_step_of_a_1ms_reducer_calibrates_with_100ms_steps():
    red, _, _ = _reducer(step_time_s=0.1)
    red.on_step(16, 16 * 1e-3)
    assert red.calibrated and red.step_rows == 100
    cheap, _, _ = _reducer(step_time_s=0.1)
    cheap.on_step(16, 16 * 1e-6)  # 16 us: the fixed cost of a step, not a measurement
    assert not cheap.calibrated


def test_a_push_after_fast_ones_brings_one_key_no_more_than_its_queue_holds():
    # Many keys first: no queue makes a push wait, so pushes grow. Then one key: the push
    # that is routed next, split like the last one, must not bring its reducer far more
    # than a bound (1 s = 1000 records) - 16k records (16 s) without the cap.
    keys = np.concatenate([np.arange(8000, dtype=np.int64) % 4000, np.full(22000, 7, dtype=np.int64)])
    table = pa.table({"key": keys})
    cfg = dpa.JobConfig(num_reducers=4, num_mappers=1, runtime="local", policy="halving", max_rounds=0)
    res = dpa.run(table, key="key", reducer=dpa.WithCost(dpa.Count(), 1e-3), config=cfg)
    assert res.to_dict() == dict(collections.Counter(keys.tolist()))
    assert max(res.stats.peak_queue) <= 4000
