"""The in-process runtime's message cost model: each message costs its receiver time, the
balancer and the coordinator are each one queue, and their saturation shows in virtual time."""

from __future__ import annotations

import collections

import numpy as np
import pyarrow as pa
import pytest

import dpa
from dpa.engine.planning import build_plan
from dpa.errors import ConfigError
from dpa.input.sources import normalize_source
from dpa.runtime.local import run_local
from dpa.runtime.message_costs import MEASURED, ActorQueue, MessageCosts
from tests.unit.dpa.runtime.outputs import key_counts

KEYS = (np.random.default_rng(3).zipf(1.3, 8000) % 500).astype(np.int64)
EXPECTED = collections.Counter(KEYS.tolist())
COST_S = 1e-3  # per record


def _run(costs, reducers=8, batch_size=500, hosts=None, **fields):
    table = pa.table({"k": KEYS})
    config = dpa.JobConfig(num_reducers=reducers, batch_size=batch_size, runtime="local", **fields)
    plan, blocks = build_plan(normalize_source(table, batch_size), "k", dpa.WithCost(dpa.Count(), COST_S),
                              None, config)
    return run_local(plan, blocks, costs=costs, hosts=hosts)


def test_actor_queue_is_one_fifo_server():
    q = ActorQueue("balancer")
    assert q.admit(0.0, 0.5, "report") == 0.5
    assert q.admit(0.1, 0.5, "report") == 1.0  # waits for the first: starts at 0.5
    assert q.admit(2.0, 0.25, "tick") == 2.25  # idle meanwhile
    stats = q.stats(4.0)
    assert stats["busy_s"] == pytest.approx(1.25)
    assert stats["busy_fraction"] == pytest.approx(1.25 / 4.0)
    assert stats["waited_s"] == pytest.approx(0.4)
    assert stats["messages"] == {"report": 2, "tick": 1}


def test_costs_are_validated():
    with pytest.raises(ConfigError, match="report_s"):
        MessageCosts(report_s=-1.0)
    with pytest.raises(ConfigError, match="tick_s"):
        MessageCosts(tick_s=float("nan"))
    assert MessageCosts.free().is_free and not MEASURED.is_free
    assert MessageCosts(tick_s=1.0, tick_per_reducer_s=0.5).tick_cost(4) == 3.0


def test_free_messages_cost_no_time():
    out = _run(MessageCosts.free())
    assert key_counts(out) == EXPECTED
    sim = out.extra["sim"]
    for actor in ("balancer", "coordinator"):
        assert sim[actor]["busy_s"] == 0.0 and sim[actor]["waited_s"] == 0.0
    assert sim["reducers"]["message_s"] == 0.0


def test_messages_are_free_by_default():
    out = _run(None)
    assert out.extra["sim"]["costs"] == MessageCosts.free().as_dict()
    assert out.extra["sim"]["balancer"]["busy_s"] == 0.0


def test_the_measured_costs_run_deterministically_and_exactly():
    a, b = _run(MEASURED), _run(MEASURED)
    assert a.extra["sim"]["costs"] == MEASURED.as_dict()
    assert a.virtual_time_s == b.virtual_time_s and a.processed == b.processed
    assert a.extra["sim"]["balancer"] == b.extra["sim"]["balancer"]
    assert key_counts(a) == EXPECTED
    assert 0.0 < a.extra["sim"]["balancer"]["busy_fraction"] <= 1.0


def test_busy_time_is_the_messages_times_their_costs():
    costs = MessageCosts(report_s=1e-4, forecast_s=2e-4, tick_s=3e-4, tick_per_reducer_s=1e-5, publish_s=1e-5,
                         block_request_s=4e-4, mapper_report_s=5e-4, progress_s=6e-4, push_s=1e-4, snapshot_s=1e-4)
    out = _run(costs)
    assert key_counts(out) == EXPECTED
    sim, R, M = out.extra["sim"], len(out.processed), len(out.emitted)
    bal, coord = sim["balancer"]["messages"], sim["coordinator"]["messages"]
    assert sim["balancer"]["busy_s"] == pytest.approx(
        bal["report"] * costs.report_s + bal.get("forecast", 0) * costs.forecast_s
        + bal["tick"] * costs.tick_cost(R) + bal.get("publish", 0) * costs.publish_s * (R + M))
    assert sim["coordinator"]["busy_s"] == pytest.approx(
        coord["block_request"] * costs.block_request_s + coord["progress"] * costs.progress_s
        + (coord.get("block_done", 0) + coord.get("block_cut", 0) + coord.get("mapper_done", 0))
        * costs.mapper_report_s)


def test_message_counts_follow_the_protocol():
    """Every mapper asks for a block until it is told there is none (one request per block
    taken, plus its last); it reports each block done and itself done once; each reducer's
    report goes to the balancer; the balancer ticks at most once per ``lb_interval_s``, and
    only after news (a tick without news since the last asks for no other)."""
    out = _run(MessageCosts.free())
    sim = out.extra["sim"]
    coord, bal = sim["coordinator"]["messages"], sim["balancer"]["messages"]
    M = len(out.emitted)
    blocks = sum(out.blocks_per_mapper)
    assert coord["block_request"] == blocks + M
    assert coord["block_done"] + coord.get("block_cut", 0) == blocks
    assert coord["mapper_done"] == M
    ticks = bal["tick"]
    assert 1 <= ticks <= out.virtual_time_s / 0.05 + 2  # (lb_interval_s: one tick per interval at most)
    assert bal["report"] + bal.get("forecast", 0) >= ticks  # (news before every tick)


def test_a_balancer_slower_than_its_tick_is_saturated_and_the_job_slower():
    """A balancer whose tick and reports cost more than the tick interval (0.05 s) is busy all
    the time: the mappers' forecast waits behind the reducers' reports, reports and ticks
    wait, and the skewed job takes longer than ideal and than with free messages; its
    answer is still exact."""
    free = _run(MessageCosts.free())
    slow = _run(MessageCosts(tick_s=0.2, report_s=0.03))
    assert key_counts(slow) == EXPECTED
    ideal = len(KEYS) * COST_S / 8
    assert free.virtual_time_s <= 1.2 * ideal
    assert slow.extra["sim"]["balancer"]["busy_fraction"] >= 0.9
    assert slow.extra["sim"]["balancer"]["waited_s"] > slow.virtual_time_s  # messages queue up
    assert slow.virtual_time_s > 1.1 * free.virtual_time_s
    assert slow.virtual_time_s > 1.1 * ideal
    assert free.extra["sim"]["balancer"]["busy_fraction"] == 0.0


def test_a_slow_coordinator_delays_the_end():
    """Block requests and progress wait at a busy coordinator: the mappers get their blocks
    later and the job ends later; the coordinator shows busy."""
    free = _run(MessageCosts.free())
    slow = _run(MessageCosts(block_request_s=0.05, progress_s=0.01))
    assert key_counts(slow) == EXPECTED
    assert slow.virtual_time_s > free.virtual_time_s
    assert slow.extra["sim"]["coordinator"]["busy_fraction"] > 0.3


def test_costs_show_in_stats_extra():
    res = dpa.run(pa.table({"k": KEYS}), key="k", reducer=dpa.WithCost(dpa.Count(), COST_S),
                  config=dpa.JobConfig(num_reducers=4, runtime="local"))
    sim = res.stats.extra["sim"]
    assert set(sim) >= {"costs", "balancer", "coordinator", "reducers", "virtual_time_s"}
    assert sim["balancer"]["messages"]["report"] > 0 and sim["coordinator"]["messages"]["progress"] > 0
    assert res.stats.to_dict()["sim"] is sim


def test_a_host_s_reports_of_one_tick_reach_the_balancer_as_one_message():
    """With the reducers in 2 hosts, the balancer gets at most one report message per host
    per tick of the report clock (plus the ones that follow a start or a new snapshot at
    once), each carrying several reports; it pays each message once and each report in it
    beyond the first a part; a published snapshot costs one call per host."""
    costs = MessageCosts(report_s=1e-4, report_member_s=1e-5, tick_s=3e-4, tick_per_reducer_s=1e-5,
                         publish_s=1e-5, progress_s=6e-4, progress_member_s=1e-5, forecast_s=2e-4)
    hosts, interval = 2, 0.05  # (FlowConfig.report_interval_s)
    out = _run(costs, hosts=hosts)
    assert key_counts(out) == EXPECTED
    sim = out.extra["sim"]
    bal, carried = sim["balancer"]["messages"], sim["carried"]
    assert sim["hosts"] == hosts
    assert carried["report"] > bal["report"]  # (messages carry several reports)
    publications = bal.get("publish", 0)
    assert bal["report"] <= hosts * (out.virtual_time_s / interval + 2 + publications)
    assert sim["balancer"]["busy_s"] == pytest.approx(
        bal["report"] * costs.report_s + (carried["report"] - bal["report"]) * costs.report_member_s
        + bal.get("forecast", 0) * costs.forecast_s + bal["tick"] * costs.tick_cost(8)
        + publications * costs.publish_s * hosts)
    one_each = _run(costs).extra["sim"]  # (default: one host per reducer, one report per message)
    assert one_each["carried"]["report"] == one_each["balancer"]["messages"]["report"]


def test_a_slower_control_period_brings_a_saturated_balancer_below_half_busy():
    """The law (docs/scale.md): the balancer's busy fraction is what reaches it per second,
    reports and ticks divided by their periods. Costs that saturate it at a 0.05 s report
    clock and tick leave it under half busy at 0.4 s; the answer is exact either way."""
    costs = MessageCosts(report_s=0.02, report_member_s=0.004, tick_s=0.02, progress_s=1e-4)
    fast = _run(costs, hosts=2, report_interval_s=0.05, lb_interval_s=0.05)
    slow = _run(costs, hosts=2, report_interval_s=0.4, lb_interval_s=0.4)
    assert key_counts(fast) == EXPECTED and key_counts(slow) == EXPECTED
    assert fast.extra["sim"]["balancer"]["busy_fraction"] >= 0.9
    assert slow.extra["sim"]["balancer"]["busy_fraction"] <= 0.5
    bal = slow.extra["sim"]["balancer"]["messages"]
    assert bal["report"] <= 2 * (slow.virtual_time_s / 0.4 + 2) + 2 * bal.get("publish", 0)
