"""Fault recovery in the in-process runtime: failures injected in virtual time, exact results."""

from __future__ import annotations

import collections

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpa
from dpa.engine.planning import build_plan
from dpa.input.sources import normalize_source
from dpa.runtime.local import run_local
from tests.unit.dpa.runtime.outputs import key_counts

_RNG = np.random.default_rng(7)
KEYS = (_RNG.zipf(1.3, 30_000) % 300).astype(np.int64)
EXPECTED = collections.Counter(KEYS.tolist())


def _run(policy, faults, interval=0.5, reducer=None, batch_size=400, max_recoveries=4):
    table = pa.table({"k": KEYS})
    config = dpa.JobConfig(num_reducers=6, policy=policy, batch_size=batch_size, runtime="local",
                           checkpoint_interval_s=interval, max_recoveries=max_recoveries)
    plan, blocks = build_plan(normalize_source(table, batch_size), "k",
                              reducer or dpa.WithCost(dpa.Count(), 1e-3), None, config)
    return run_local(plan, blocks, faults=faults)


@pytest.mark.parametrize("policy", sorted(dpa.policies()))
def test_every_policy_is_exact_after_failures_of_each_kind_of_member(policy):
    out = _run(policy, [(1.5, "reducer-2"), (2.5, "balancer"), (3.5, "mapper-1")])
    assert key_counts(out) == EXPECTED
    assert sum(out.processed) == sum(out.emitted) == len(KEYS)
    assert out.recoveries and out.merged


def test_a_rollback_replays_only_what_came_after_the_last_checkpoint():
    out = _run("doubling", [(6.0, "reducer-0")])  # a 9 s job (virtual time)
    assert key_counts(out) == EXPECTED
    (rec,) = out.recoveries
    assert rec.epoch >= 0 and out.checkpoints >= 1
    assert 0 < rec.replayed_records < len(KEYS) / 2
    whole = _run("doubling", [(6.0, "reducer-0")], interval=0)
    assert key_counts(whole) == EXPECTED and whole.checkpoints == 0
    assert whole.recoveries[0].epoch == -1 and whole.recoveries[0].replayed_records > rec.replayed_records


@pytest.mark.parametrize("policy", ["doubling", "hybrid"])
def test_one_big_block_is_checkpointed_in_parts_so_a_late_failure_replays_only_its_tail(policy):
    # The whole input is one block: mappers hand the unrouted rest back every interval,
    # and the parts already absorbed are checkpointed.
    one = _run(policy, [], batch_size=len(KEYS))
    assert one.checkpoints >= 3 and sum(one.blocks_per_mapper) == 1
    assert key_counts(one) == EXPECTED
    late = 0.7 * one.virtual_time_s
    out = _run(policy, [(late, "reducer-1")], batch_size=len(KEYS))
    assert key_counts(out) == EXPECTED and sum(out.processed) == sum(out.emitted) == len(KEYS)
    (rec,) = out.recoveries
    assert rec.epoch >= 1 and rec.replayed_blocks == 1  # the rest of the block, not the block
    assert rec.replayed_records < len(KEYS) / 3
    twice = _run(policy, [(late, "mapper-0"), (late + 1.0, "reducer-1")], batch_size=len(KEYS))
    assert key_counts(twice) == EXPECTED and len(twice.recoveries) == 2


def test_checkpoints_change_nothing_without_a_failure():
    with_ckpt, without = _run("halving", []), _run("halving", [], interval=0)
    assert with_ckpt.checkpoints > 3 and without.checkpoints == 0
    assert key_counts(with_ckpt) == key_counts(without) == EXPECTED
    assert with_ckpt.virtual_time_s == pytest.approx(without.virtual_time_s, rel=0.05)
    assert not with_ckpt.recoveries


class SumOfKeys(dpa.Reducer):
    """A user-defined reducer (dict state, accumulator mutated in place)."""

    def create(self):
        return [0]

    def add(self, acc, value):
        acc[0] += 1
        return acc

    def merge(self, a, b):
        a[0] += b[0]
        return a

    def finalize(self, acc):
        return acc[0]


def test_a_user_reducer_restored_twice_from_one_checkpoint_stays_exact():
    out = _run("halving", [(5.0, "reducer-1"), (5.3, "reducer-4")], reducer=dpa.WithCost(SumOfKeys("k", name="count"), 1e-3))
    assert key_counts(out) == EXPECTED
    assert len(out.recoveries) == 2 and out.recoveries[0].epoch == out.recoveries[1].epoch >= 0


@settings(max_examples=15, deadline=None)
@given(faults=st.lists(st.tuples(st.floats(0.0, 12.0), st.sampled_from(["reducer-3", "mapper-0", "balancer"])),
                       max_size=4),
       policy=st.sampled_from(["doubling", "halving", "hybrid", "pkg", "gedik-scan"]),
       interval=st.sampled_from([0, 0.2, 0.5, 2.0]))
def test_any_failures_at_any_moments_leave_the_result_exact(faults, policy, interval):
    out = _run(policy, faults, interval)
    assert key_counts(out) == EXPECTED
    assert sum(out.processed) == sum(out.emitted) == len(KEYS)


@pytest.mark.parametrize("policy", ["doubling", "hybrid"])
def test_a_restarted_balancer_continues_from_the_checkpoints_routing(policy):
    first = _run(policy, [])
    assert first.rebalances  # it rebalanced
    late = 0.8 * first.virtual_time_s
    out = _run(policy, [(late, "balancer")])
    assert key_counts(out) == EXPECTED
    (rec,) = out.recoveries
    assert rec.epoch >= 0
    # the new balancer's versions go on from the checkpoint's snapshot, not from 0
    before = [e.version for e in first.rebalances if e.time_s <= rec.at_s - 1.0]
    assert before and out.final_snapshot.version >= max(before)


class CountNoMerge(dpa.Reducer):
    """A user reducer without ``merge``: valid where each key stays on one reducer."""

    def create(self):
        return 0

    def add(self, acc, value):
        return acc + 1

    def finalize(self, acc):
        return acc


@pytest.mark.parametrize("faults", [[], [(5.0, "reducer-1")], [(2.0, "mapper-0"), (6.0, "reducer-4")]],
                         ids=["no-failure", "reducer", "mapper-and-reducer"])
def test_a_reducer_without_merge_takes_no_checkpoints_and_a_failure_replays_the_whole_input(faults):
    out = _run("hash", faults, reducer=dpa.WithCost(CountNoMerge("k", name="count"), 1e-3))
    assert out.virtual_time_s > 5 * 0.5  # outlived several checkpoint intervals
    assert key_counts(out) == EXPECTED and sum(out.processed) == len(KEYS)
    assert out.checkpoints == 0
    assert len(out.recoveries) == len(faults)
    assert all(rec.epoch == -1 for rec in out.recoveries)


def test_more_failures_than_max_recoveries_fail_the_job_as_on_ray():
    with pytest.raises(dpa.JobFailedError) as err:
        _run("doubling", [(0.5, "reducer-3"), (1.0, "mapper-0")], max_recoveries=1)
    message = str(err.value)
    assert message.startswith("dpa job failed: 2 failure(s), more than max_recoveries=1: ")
    assert "reducer-3 lost (injected); mapper-0 lost (injected)" in message
