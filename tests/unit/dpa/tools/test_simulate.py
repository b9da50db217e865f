"""The key-stream simulator: determinism, metrics on hand-made streams, PKG vs hashing."""

from __future__ import annotations

import numpy as np
import pytest

from dpa.errors import ConfigError
from dpa.keys.encoding import hash_key
from dpa.routing.policies import PKGPolicy, PKGSettings
from dpa.tools.simulate import _replication, simulate
from workloads.generators import zipf


def test_metrics_on_a_hand_made_shuffle_stream():
    r = simulate([1, 1, 1, 2], "shuffle", num_workers=2, num_samples=4)
    assert r.destinations.tolist() == [0, 1, 0, 1]
    assert r.loads.tolist() == [2, 2]
    assert r.sample_times.tolist() == [1, 2, 3, 4]
    # loads over time: [1,0] [1,1] [2,1] [2,2] -> I(t) = max - mean
    assert r.imbalance_series.tolist() == [0.5, 0.0, 0.5, 0.0]
    assert r.avg_imbalance == 0.25
    assert r.imbalance_fraction == pytest.approx(0.25 / np.mean([0.5, 1, 1.5, 2]))
    assert r.imbalance_per_message == 0.25 / 4
    assert r.final_imbalance == 0 and r.skew == 0 and r.max_over_avg == 1.0
    # key 1 on both workers, key 2 on one: 3 (key, worker) pairs / 2 keys
    assert r.num_keys == 2 and r.dist_cost == 1.5 and r.replication_max == 2


def test_metrics_on_a_hand_made_hash_stream():
    r = simulate(np.array([0, 0, 0, 1, 2, 3]), "hash", num_workers=2, keys_are_hashes=True)
    assert r.destinations.tolist() == [0, 0, 0, 1, 0, 1]
    assert r.loads.tolist() == [4, 2]
    assert r.skew == pytest.approx(1 / 3)  # (W - U) / (M - U) = (4 - 3) / (6 - 3)
    assert r.max_over_avg == pytest.approx(4 / 3)
    assert r.stddev == 1.0 and r.stddev_pct == pytest.approx(100 / 6)
    assert r.final_imbalance == 1.0
    assert r.dist_cost == 1.0 and r.replication_max == 1 and r.num_keys == 4


def test_keys_are_hashed_like_a_dpa_key_column():
    words = np.array(["a", "b", "hello", "a"])
    r = simulate(words, "hash", num_workers=7)
    assert r.destinations.tolist() == [hash_key(str(w)) % 7 for w in words]
    for ids in (np.array([5, -3, 2**40]), np.array([3, 1, 3, 7, -2])):  # sparse and dense ids
        r = simulate(ids, "hash", num_workers=5)
        assert r.destinations.tolist() == [hash_key(int(i)) % 5 for i in ids]
        assert r.num_keys == len(set(ids.tolist()))


def test_sources_take_the_stream_round_robin():
    # two shuffle routers starting at workers 0 and 1
    r = simulate(np.zeros(6, dtype=np.int64), "shuffle", num_sources=2, num_workers=2)
    assert r.destinations.tolist() == [0, 1, 1, 0, 0, 1]


def test_off_greedy_is_given_the_exact_frequencies():
    keys = np.array([1] * 5 + [2] * 3 + [3] * 2 + [4] * 2)
    order = np.random.default_rng(0).permutation(len(keys))
    r = simulate(keys[order], "off-greedy", num_sources=3, num_workers=2)
    assert sorted(r.loads.tolist()) == [5, 7]  # LPT: 5 | 3 + 2 -> then 2 on the 5s: 7 | 5
    assert r.replication_max == 1  # one shared table: no key is split across sources


def test_deterministic_for_a_seed():
    keys = zipf(1.1, 1000, 20_000, seed=4)["key"].to_numpy()
    for policy in ("pkg", "dkg", "shuffle", "potc"):
        a = simulate(keys, policy, num_sources=3, num_workers=6, seed=1, promote_every=500) if policy == "dkg" \
            else simulate(keys, policy, num_sources=3, num_workers=6, seed=1)
        b = simulate(keys, policy, num_sources=3, num_workers=6, seed=1, promote_every=500) if policy == "dkg" \
            else simulate(keys, policy, num_sources=3, num_workers=6, seed=1)
        np.testing.assert_array_equal(a.destinations, b.destinations)
        sa, sb = a.summary(), b.summary()
        sa.pop("messages_per_s"), sb.pop("messages_per_s")
        assert sa == sb


def test_pkg_imbalance_is_far_below_hashing_on_zipf_1_2():
    keys = zipf(1.2, 10_000, 100_000, seed=0)["key"].to_numpy()
    results = {p: simulate(keys, p, num_sources=5, num_workers=5) for p in ("hash", "pkg", "shuffle")}
    assert results["pkg"].imbalance_fraction < results["hash"].imbalance_fraction / 20
    assert results["shuffle"].imbalance_fraction <= results["pkg"].imbalance_fraction + 1e-3
    assert results["hash"].dist_cost == 1.0
    assert 1.0 < results["pkg"].dist_cost <= 2.0 and results["pkg"].replication_max == 2
    assert results["shuffle"].replication_max == 5


def test_dkg_reports_its_scaling_counters():
    keys = np.array([7] * 3000 + list(range(1000)))
    r = simulate(keys, "dkg", num_workers=10, expected_keys=10, promote_every=100)
    assert r.router_stats["scale_outs"] > 0 and "scale_downs" in r.router_stats
    assert r.replication_max > 2  # the hot key spread beyond PKG's two choices


def test_queue_model_drives_the_dpa_planner_and_forwards():
    rng = np.random.default_rng(0)
    keys = np.where(rng.random(40_000) < 0.6, 0, rng.integers(1, 500, 40_000))
    static = simulate(keys, "halving", num_sources=2, num_workers=4, max_rounds=3)
    lb = simulate(keys, "halving", num_sources=2, num_workers=4, service_rate=0.3,
                  rebalance_interval=2048, max_rounds=3, batch_size=512)
    assert static.events == [] and static.makespan is None
    assert lb.events and all(e.action in ("halve", "exhausted") for e in lb.events)
    assert lb.loads.sum() == len(keys) and lb.forwarded > 0
    assert not np.array_equal(lb.destinations, static.destinations)
    assert lb.makespan >= len(keys) and len(lb.peak_queue) == 4 and max(lb.peak_queue) > 0


def test_queue_model_without_a_planner_only_measures_queues():
    keys = np.zeros(1000, dtype=np.int64)  # every message to one worker
    r = simulate(keys, "hash", num_workers=4, service_rate=0.5, batch_size=100)
    assert r.events == [] and r.forwarded == 0
    assert r.makespan == pytest.approx(1000 + 500 / 0.5)  # 1000 arrive, 500 served meanwhile
    assert sorted(r.peak_queue)[-1] > 0 and sorted(r.peak_queue)[:3] == [0, 0, 0]


def test_a_policy_spec_can_be_passed_directly():
    r = simulate(np.arange(100), PKGPolicy(PKGSettings(d=3)), num_workers=4)
    assert r.policy == "pkg" and r.loads.sum() == 100


def test_replication_fallback_for_large_key_spaces_agrees():
    codes = np.array([0, 0, 5, 2_999_999, 5])
    dest = np.array([1, 2, 1, 0, 1])
    big = _replication(codes, dest, 3_000_000, 10)  # 30M cells: sort-based path
    assert big[[0, 5, 2_999_999, 1]].tolist() == [2, 1, 1, 0]
    small = _replication(codes % 10, dest, 10, 10)
    assert small[[0, 5, 9]].tolist() == [2, 1, 1]


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"num_workers": 0}, "num_workers"),
        ({"num_sources": 1.5}, "num_sources"),
        ({"service_rate": -1}, "service_rate"),
        ({"rebalance_interval": 0}, "rebalance_interval"),
        ({"policy": "nope"}, "unknown policy"),
        ({"policy": PKGPolicy(), "d": 3}, "PolicySpec"),
        ({"keys": np.zeros((2, 2))}, "one-dimensional"),
        ({"keys": np.array([-1]), "keys_are_hashes": True}, "32-bit"),
        ({"keys": np.array([1.5])}, "integer ids, strings"),
    ],
)
def test_bad_arguments_are_config_errors(kwargs, match):
    args = {"keys": np.arange(10), "policy": "pkg", **kwargs}
    with pytest.raises(ConfigError, match=match):
        simulate(**args)


def test_empty_stream():
    r = simulate(np.zeros(0, dtype=np.int64), "pkg", num_workers=3)
    assert r.num_messages == 0 and r.loads.tolist() == [0, 0, 0] and r.imbalance_fraction == 0.0


def test_shared_router_gives_global_key_tables_and_loads():
    keys = np.array([7] * 50 + [8] * 50)
    keys = keys[np.random.default_rng(1).permutation(100)]
    per_source = simulate(keys, "on-greedy", num_sources=4, num_workers=4)
    shared = simulate(keys, "on-greedy", num_sources=4, num_workers=4, shared_router=True)
    assert per_source.replication_max > 1  # each source binds the key on its own
    assert shared.replication_max == 1 and sorted(shared.loads.tolist()) == [0, 0, 50, 50]
    # a shared PKG router equals one source routing the whole stream
    one = simulate(keys, "pkg", num_sources=1, num_workers=4, batch_size=400)
    glob = simulate(keys, "pkg", num_sources=4, num_workers=4, shared_router=True)
    np.testing.assert_array_equal(one.destinations, glob.destinations)


def test_probing_every_message_is_the_global_oracle():
    import numpy as np

    from dpa.tools.simulate import simulate

    rng = np.random.default_rng(1)
    keys = rng.zipf(1.3, 3000) % 500
    probed = simulate(keys, "pkg", num_sources=4, num_workers=7, probe_every=1, batch_size=1)
    oracle = simulate(keys, "pkg", num_sources=4, num_workers=7, shared_router=True, batch_size=1)
    local = simulate(keys, "pkg", num_sources=4, num_workers=7)
    assert (probed.destinations == oracle.destinations).all()
    assert not (local.destinations == oracle.destinations).all()


def test_the_policy_comparison_command_line_lives_in_workloads(capsys):
    import dpa.tools.simulate
    from workloads.simulate_policies import main

    assert not hasattr(dpa.tools.simulate, "main")  # dpa has no command line that needs workloads' generators
    assert main(["--policies", "hash,pkg", "--num-keys", "500", "--messages", "4000", "--workers", "4",
                 "--sources", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("zipf z=1.2 K=500 n=4000 W=4 S=2")
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert set(rows) == {"hash", "pkg"} and float(rows["pkg"][3]) < float(rows["hash"][3])  # skew S


def test_the_docstring_example_stream():
    keys = np.random.default_rng(0).zipf(1.2, 20_000) % 1_000
    assert simulate(keys, "pkg", num_sources=5, num_workers=10).summary()["messages"] == 20_000
