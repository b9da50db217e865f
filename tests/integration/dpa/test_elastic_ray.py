"""Elastic reducers and state migration on Ray (one session-scoped Ray, 2 CPUs)."""

from __future__ import annotations

import collections
import time

import numpy as np
import pyarrow as pa
import pytest

import dpa

pytestmark = pytest.mark.usefixtures("ray_session")

_RNG = np.random.default_rng(5)
ZIPF = pa.table({"key": (_RNG.zipf(1.1, 12_000) % 2000).astype(np.int64)})


def _counts(result):
    table = result.to_arrow()
    assert len(set(table["key"].to_pylist())) == table.num_rows  # no key twice
    return dict(zip(table["key"].to_pylist(), table["count"].to_pylist()))


def _expected(table):
    return dict(collections.Counter(table["key"].to_pylist()))


@pytest.mark.parametrize("policy", ["doubling", "halving", "hybrid"])
def test_state_migration_is_exact_for_every_ring_policy(policy):
    # The ring policies without their forecast, whose first ring would leave nothing to move.
    options = None if policy == "hybrid" else {"lookahead": False}
    res = dpa.run(ZIPF, key="key", reducer=dpa.WithCost(dpa.Count(), 5e-4),
                  config=dpa.JobConfig(num_reducers=6, policy=policy, migrate="state", policy_options=options))
    assert _counts(res) == _expected(ZIPF)
    s = res.stats
    assert sum(s.processed) == ZIPF.num_rows
    if policy != "hybrid":
        assert s.merged_keys == 0 and not s.merged
        assert (s.state_moves > 0) == (s.ring_version > 0)
    else:  # only split hot keys merge: a key is hot at 1 / (8 R) of the records, so at most 8 R of them
        assert s.merged_keys <= 8 * 6


def test_records_mode_counts_the_keys_its_final_merge_combined():
    res = dpa.run(ZIPF, key="key", reducer=dpa.WithCost(dpa.Count(), 5e-4),
                  config=dpa.JobConfig(num_reducers=6, policy="doubling", max_rounds=3,
                                       policy_options={"lookahead": False}))
    assert _counts(res) == _expected(ZIPF)
    assert res.stats.state_moves == 0
    assert (res.stats.merged_keys > 0) == (res.stats.ring_version > 0)


def test_scale_out_starts_reducers_and_stays_exact():
    table = pa.table({"key": np.arange(6000) % 1500})
    res = dpa.run(table, key="key", reducer=dpa.WithCost(dpa.Count(), 1e-3),
                  config=dpa.JobConfig(num_reducers=2, max_reducers=6))
    assert _counts(res) == _expected(table)
    s = res.stats
    outs = [e for e in s.scaling if e.action == "scale_out"]
    assert outs and outs[0].width > 2
    assert len(s.processed) == max(max(e.reducers) for e in outs) + 1
    assert sum(s.processed) == table.num_rows and sum(s.processed[2:]) > 0


def test_scale_in_retires_idle_reducers_and_stays_exact():
    keys = np.concatenate([np.arange(2000) % 1000, np.full(4000, 7)])
    table = pa.table({"key": keys})

    def blocks():  # the input stays open (no retirement once it is all queued) while the
        yield table.slice(0, 2000)  # reducers idle after the first 0.5 s of work
        time.sleep(2.5)
        yield table.slice(2000)

    res = dpa.run(blocks(), key="key", reducer=dpa.WithCost(dpa.Count(), 1e-3),
                  config=dpa.JobConfig(num_reducers=4, min_reducers=1, policy="halving", migrate="state",
                                       scale_out_backlog_s=5.0))
    assert _counts(res) == _expected(table)
    s = res.stats
    ins = [e for e in s.scaling if e.action == "scale_in"]
    assert ins, s.scaling
    assert s.state_moves > 0 and s.merged_keys == 0
    assert all(s.final_tokens[e.reducers[0]] == 0 for e in ins)


def test_a_scale_out_without_free_cpu_is_refused_and_the_job_carries_on():
    table = pa.table({"key": np.arange(3000) % 500})
    try:
        res = dpa.run(table, key="key", reducer=dpa.WithCost(dpa.Count(), 1e-3),
                      config=dpa.JobConfig(num_reducers=2, max_reducers=4, reducer_num_cpus=1))
        assert _counts(res) == _expected(table)
        refused = [e for e in res.stats.scaling if e.action == "refused"]
        assert refused and "no free CPU" in refused[0].reason
        assert all(e.width == 2 for e in res.stats.scaling)
        assert len(res.stats.processed) == 2
    finally:
        dpa.shutdown()  # (its reducers hold the session's CPUs)
