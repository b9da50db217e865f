"""The mappers' forecast: key counts of a first block, sent before routing it (no Ray)."""

from __future__ import annotations

import collections

import numpy as np
import pyarrow as pa

import dpa
from dpa.engine.balancer import BalancerMachine
from dpa.engine.mapper import MapperLogic, block_forecast
from dpa.engine.planning import build_plan
from dpa.input.sources import normalize_source
from dpa.keys.columns import hash_key_columns
from dpa.routing.policies.hybrid.policy import HybridPolicy
from dpa.routing.policy import JobShape


def test_block_forecast_counts_the_most_frequent_keys_and_scales_a_sample_up():
    hashes = np.array([5, 5, 5, 7, 7, 9], dtype=np.uint32)
    h, c, total = block_forecast(hashes)
    assert h.tolist() == [5, 7, 9] and c.tolist() == [3, 2, 1] and total == 6
    h, c, total = block_forecast(hashes, top=2)
    assert h.tolist() == [5, 7] and total == 6
    # combined rows: weights are records
    h, c, total = block_forecast(hashes, np.array([1, 1, 1, 10, 10, 1]))
    assert h.tolist() == [7, 5, 9] and c.tolist() == [20, 3, 1] and total == 24
    # a sample of the first rows, scaled up to the block; never more than the block
    many = np.concatenate([np.full(600, 1), np.full(400, 2)]).astype(np.uint32)
    h, c, total = block_forecast(np.tile(many, 10), sample=1000)
    assert h.tolist() == [1, 2] and c.tolist() == [6000, 4000] and total == 10_000
    assert c.sum() <= total


def _plan(table: pa.Table, policy: str = "hybrid", reducer=None, **config):
    cfg = dpa.JobConfig(num_reducers=8, runtime="local", policy=policy, **config)
    plan, _ = build_plan(normalize_source(table, 1 << 20), "key", reducer or dpa.WithCost(dpa.Count(), 1e-3), None,
                         cfg)
    return plan


def test_a_mapper_forecasts_its_first_block_only_and_only_if_the_policy_wants_it():
    table = pa.table({"key": np.zeros(1000, dtype=np.int64)})
    plan = _plan(table)
    mapper = MapperLogic(0, plan, plan.policy.initial_snapshot(8))
    mapper.start_block(table)
    h, c, total = mapper.take_forecast()
    assert h.tolist() == hash_key_columns(table.slice(0, 1), ["key"]).tolist() and c.tolist() == [1000]
    assert total == 1000
    assert mapper.take_forecast() is None  # taken
    mapper.start_block(table)
    assert mapper.take_forecast() is None  # not the first block
    paper = _plan(table, "doubling", policy_options={"lookahead": False})
    for other in (paper, _plan(table, reducer=dpa.Count())):  # no planner use / combined rows
        m = MapperLogic(0, other, other.policy.initial_snapshot(8))
        m.start_block(table)
        assert m.take_forecast() is None
    ring = _plan(table, "doubling")  # a ring policy plans its first ring on it
    m = MapperLogic(0, ring, ring.policy.initial_snapshot(8))
    m.start_block(table)
    assert m.take_forecast() is not None


def test_a_key_hot_in_the_forecast_is_split_over_every_reducer_before_any_report():
    policy = HybridPolicy(shape=JobShape(num_mappers=2))
    planner = policy.make_planner(8)
    planner.observe_forecast(0, np.array([42], np.uint32), np.array([10_000]), 10_000)
    (decision,) = planner.check(0.0)
    assert decision.event.action == "split"
    snap = decision.snapshot
    assert snap.hot.tolist() == [42] and sorted(snap.candidates(0).tolist()) == list(range(8))
    shares = np.diff(np.concatenate([[0.0], snap.cumw[0]]))
    assert np.allclose(shares, 1 / 8, atol=0.01)


def test_the_forecast_fades_as_the_reducers_count_what_it_announced():
    planner = HybridPolicy().make_planner(4)
    assert not planner._forecasting()
    planner.observe_forecast(0, np.array([42, 43], np.uint32), np.array([500, 10]), 1000)
    assert planner._forecast_weight() == 1.0 and planner._forecasting()
    planner.observe_keys(1, np.array([43], np.uint32), np.array([40]), 500)
    assert planner._forecast_weight() == 0.5
    planner.observe_keys(1, np.array([43], np.uint32), np.array([40]), 500)
    assert planner._forecast_weight() == 0.0 and not planner._forecasting()
    # what the reducers counted decides now: 42 was never seen, 43 is
    assert 42 not in planner._hot_set() and 43 in planner._hot_set()


def test_a_forecast_without_a_hot_key_changes_nothing():
    planner = HybridPolicy().make_planner(4)
    keys = np.arange(100, dtype=np.uint32)
    planner.observe_forecast(0, keys, np.full(100, 10), 1000)  # 1% each, theta is 1 / 32
    assert not planner._forecasting() and planner.check(0.0) == []


def test_the_balancer_answers_a_forecast_with_the_snapshot_to_route_under():
    table = pa.table({"key": np.zeros(1000, dtype=np.int64)})
    plan = _plan(table)
    balancer = BalancerMachine(plan, plan.policy.initial_snapshot(8))
    mapper = MapperLogic(0, plan, balancer.snapshot)
    mapper.start_block(table)
    published = balancer.forecast(0, *mapper.take_forecast(), 0.0)
    assert published is not None and published.snapshot.version == 1 and balancer.events[-1].action == "split"
    mapper.on_snapshot(published.snapshot)
    dests = {p.dest for p in mapper.next_pushes()}
    assert len(dests) == 8  # the first push is split already
    plain = _plan(table, "doubling")
    assert BalancerMachine(plain, plain.policy.initial_snapshot(8)).forecast(0, np.zeros(0, np.uint32),
                                                                          np.zeros(0, np.int64), 0, 0.0) is None


def test_a_one_key_job_with_defaults_is_split_from_the_first_push():
    keys = np.zeros(8000, dtype=np.int64)
    res = dpa.run(pa.table({"key": keys}), key="key", reducer=dpa.WithCost(dpa.Count(), 1e-3),
                  config=dpa.JobConfig(num_reducers=8, runtime="local"))
    assert res.to_dict() == {0: 8000}
    s = res.stats
    assert sum(s.forwarded) == 0  # nothing had to be handed over: no record went to one reducer first
    assert s.skew <= 0.01 and s.rebalances[0].time_s == 0.0
    assert s.virtual_time_s <= 1.02 * 8000 * 1e-3 / 8


def test_a_zipf_job_with_defaults_is_balanced_in_virtual_time():
    from workloads.generators import zipf

    table = zipf(1.1, 10_000, 40_000, seed=1)
    res = dpa.run(table, key="key", reducer=dpa.WithCost(dpa.Count(), 1e-3),
                  config=dpa.JobConfig(num_reducers=8, num_mappers=2, runtime="local"))
    counts = collections.Counter(table["key"].to_pylist())
    assert res.to_dict() == dict(counts)
    assert res.stats.virtual_time_s <= 1.05 * 40_000 * 1e-3 / 8
