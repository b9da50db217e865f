"""Fault recovery on Ray: members killed mid-job, exact results (see dpa.engine.epochs)."""

from __future__ import annotations

import collections
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import ray

import dpa
from dpa.runtime.ray.host import find_member

pytestmark = pytest.mark.usefixtures("ray_session")

ROOT = Path(__file__).resolve().parents[3]
_RNG = np.random.default_rng(3)
KEYS = (_RNG.zipf(1.3, 6_000) % 200).astype(np.int64)
EXPECTED = collections.Counter(KEYS.tolist())
COST = dpa.WithCost(dpa.Count(), 1e-3)


def _config(**kw):
    base = dict(num_mappers=2, num_reducers=4, batch_size=300, checkpoint_interval_s=0.3, timeout_s=120)
    base.update(kw)
    return dpa.JobConfig(**base)


def _member(role: str):
    """The process running the running job's member ``role`` (``reducer-1``...,
    ``coordinator``) and the roles it runs (a host runs several members)."""
    if role == "coordinator":
        for entry in ray.util.list_named_actors(all_namespaces=True):
            if entry["name"].startswith("dpa:") and entry["name"].endswith(":coordinator"):
                return ray.get_actor(entry["name"], namespace=entry["namespace"]), [role]
        return None
    found = find_member(role)
    return None if found is None else (found[0], sorted(found[1]))


def _kill_later(role: str, delay: float, killed: list) -> threading.Thread:
    """Kills the process running ``role`` after ``delay`` seconds; ``killed`` gets the
    roles that process ran (every one of them is lost with it)."""
    def kill():
        time.sleep(delay)
        found = _member(role)
        if found is not None:
            ray.kill(found[0], no_restart=True)
            killed.append(found[1])

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


def _counts(result):
    table = result.to_arrow()
    return collections.Counter(dict(zip(table["k"].to_pylist(), table["count"].to_pylist())))


def test_members_killed_at_random_moments_across_many_jobs_never_change_the_result():
    dpa.shutdown()  # other tests' pools: the victims are found by name
    rnd = random.Random(11)
    dpa.run(pa.table({"k": KEYS[:100]}), key="k", reducer=dpa.Count(), config=_config())  # warm pool
    roles = ["reducer-0", "reducer-3", "mapper-0", "mapper-1", "reducer-1", "reducer-2"]
    recovered = 0
    for i, role in enumerate(roles):
        policy = "doubling" if i % 2 else "hybrid"
        killed: list = []
        thread = _kill_later(role, rnd.uniform(0.1, 1.2), killed)
        res = dpa.run(pa.table({"k": KEYS}), key="k", reducer=COST, config=_config(policy=policy))
        thread.join()
        assert _counts(res) == EXPECTED, (role, policy, res.stats.recoveries)
        assert sum(res.stats.processed) == len(KEYS)
        if killed and res.stats.recoveries:
            recovered += 1
            rec = res.stats.recoveries[0]
            # exactly the members of the killed process were lost (and replaced)
            assert role in killed[0] and rec.actors == killed[0] and rec.nodes and rec.recover_s < 10
    assert recovered >= 3  # most kills landed mid-job


def test_a_lost_host_never_takes_the_balancer_which_keeps_balancing_where_it_was():
    """The balancer runs in the coordinator's process: killing the host of a mapper and of
    reducers loses those members only, and the recovered run goes on with the balancer's
    own routing and planner (its log spans both runs)."""
    dpa.run(pa.table({"k": KEYS[:100]}), key="k", reducer=dpa.Count(), config=_config(policy="doubling"))
    (host, _), (coordinator, _) = find_member("mapper-0"), _member("coordinator")
    assert find_member("balancer")[0]._actor_id == coordinator._actor_id != host._actor_id
    killed: list = []
    thread = _kill_later("mapper-0", 0.6, killed)
    res = dpa.run(pa.table({"k": KEYS}), key="k", reducer=COST, config=_config(policy="doubling"))
    thread.join()
    assert _counts(res) == EXPECTED
    assert killed and res.stats.recoveries and all("balancer" not in rec.actors for rec in res.stats.recoveries)


def test_one_big_block_is_checkpointed_in_parts_and_a_late_kill_replays_only_its_tail():
    """Default batch size: the whole input is one block. Mappers hand its unrouted rest
    back every interval, checkpoints hold the queued records, so a kill late in the job
    rolls back to a recent checkpoint instead of the start."""
    table = pa.table({"k": KEYS})
    config = _config(batch_size=1 << 20, policy="doubling")
    dpa.run(pa.table({"k": KEYS[:100]}), key="k", reducer=dpa.Count(), config=config)  # warm pool
    killed: list = []
    thread = _kill_later("reducer-1", 1.0, killed)  # the job takes about 2 s
    res = dpa.run(table, key="k", reducer=COST, config=config)
    thread.join()
    assert _counts(res) == EXPECTED and sum(res.stats.processed) == len(KEYS)
    assert killed and len(res.stats.recoveries) == 1
    rec = res.stats.recoveries[0]
    assert rec.epoch >= 0 and rec.replayed_records < len(KEYS) / 2, rec


def test_a_one_shot_iterator_source_is_replayed_from_the_object_store():
    records = [{"k": int(k)} for k in KEYS]
    killed: list = []
    dpa.run(pa.table({"k": KEYS[:100]}), key="k", reducer=dpa.Count(), config=_config())  # warm pool
    thread = _kill_later("reducer-1", 0.8, killed)
    res = dpa.run(iter(records), key="k", reducer=COST, config=_config(policy="doubling"))
    thread.join()
    assert killed and res.stats.recoveries
    assert _counts(res) == EXPECTED


def test_more_failures_than_max_recoveries_fail_the_job_naming_every_one():
    dpa.run(pa.table({"k": KEYS[:100]}), key="k", reducer=dpa.Count(), config=_config(max_recoveries=1))
    killed: list = []
    threads = [_kill_later("reducer-0", 0.5, killed), _kill_later("mapper-1", 2.5, killed)]
    with pytest.raises(dpa.JobFailedError) as err:
        dpa.run(pa.table({"k": np.concatenate([KEYS, KEYS])}), key="k", reducer=COST,
                config=_config(max_recoveries=1))
    for thread in threads:
        thread.join()
    message = str(err.value)
    assert "max_recoveries=1" in message and "reducer-0" in message and "mapper-1" in message


def test_max_recoveries_zero_fails_at_the_first_failure_and_the_next_job_runs():
    dpa.run(pa.table({"k": KEYS[:100]}), key="k", reducer=dpa.Count(), config=_config(max_recoveries=0))
    killed: list = []
    thread = _kill_later("reducer-2", 0.5, killed)
    with pytest.raises(dpa.JobFailedError, match="reducer-2"):
        dpa.run(pa.table({"k": KEYS}), key="k", reducer=COST, config=_config(max_recoveries=0))
    thread.join()
    res = dpa.run(pa.table({"k": KEYS}), key="k", reducer=dpa.Count(), config=_config(max_recoveries=0))
    assert _counts(res) == EXPECTED


def test_a_dead_coordinator_fails_the_job_loudly():
    dpa.run(pa.table({"k": KEYS[:100]}), key="k", reducer=dpa.Count(), config=_config())
    killed: list = []
    thread = _kill_later("coordinator", 0.6, killed)
    started = time.monotonic()
    with pytest.raises(dpa.JobFailedError, match="coordinator"):
        dpa.run(pa.table({"k": KEYS}), key="k", reducer=COST, config=_config())
    thread.join()
    assert time.monotonic() - started < 30


def test_user_code_errors_are_not_retried():
    class Boom(dpa.Reducer):
        def create(self):
            return 0

        def add(self, acc, value):
            if value == 7:
                raise ValueError("seven")
            return acc + 1

        def merge(self, a, b):
            return a + b

        def finalize(self, acc):
            return acc

    with pytest.raises(dpa.JobFailedError, match="seven") as err:
        dpa.run(pa.table({"k": KEYS}), key="k", reducer=Boom("k", name="n"), config=_config())
    assert "max_recoveries" not in str(err.value)


def test_kills_and_a_node_removed_mid_job_on_a_three_node_cluster(tmp_path):
    """Runs ``benchmarks.recovery --cluster`` in its own process (its own 3-node Ray): per
    policy a reducer kill, a mapper kill and a node removal, then six short jobs with a
    member killed at a seeded random moment; every result exact."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.recovery", "--cluster", "--quick"], cwd=ROOT,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert sum("node-removal makespan" in line for line in lines) == 2
    assert sum("random-kill" in line for line in lines) == 6
    assert sum("'recoveries': 1" in line for line in lines) >= 6  # most kills landed mid-job
    assert "exact=False" not in out.stdout


def test_a_reducer_without_merge_outlives_many_intervals_and_a_kill_replays_the_whole_input():
    class CountNoMerge(dpa.Reducer):  # (local: shipped to the actors by value)
        """A user reducer without ``merge`` (valid with policy="hash")."""

        def create(self):
            return 0

        def add(self, acc, value):
            return acc + 1

        def finalize(self, acc):
            return acc

    reducer = dpa.WithCost(CountNoMerge("k", name="count"), 1e-3)
    table = pa.table({"k": KEYS})
    calm = dpa.run(table, key="k", reducer=reducer, config=_config(policy="hash"))
    assert _counts(calm) == EXPECTED and calm.stats.checkpoints == 0
    killed: list = []
    thread = _kill_later("reducer-1", 0.8, killed)
    res = dpa.run(table, key="k", reducer=reducer, config=_config(policy="hash"))
    thread.join()
    assert _counts(res) == EXPECTED
    assert sum(res.stats.processed) == len(KEYS) and res.stats.checkpoints == 0
    if killed and res.stats.recoveries:
        assert res.stats.recoveries[0].epoch == -1  # back to the start: nothing to merge


def _merge_raising_once():
    """A counting reducer whose merge raises the first time it is called in a process:
    with keys kept in place (hash), that is in a checkpoint folding the epochs' states."""
    raised = {"once": False}

    class MergeRaisesOnce(dpa.Reducer):  # (local: shipped to the actors by value)
        def create(self):
            return 0

        def add(self, acc, value):
            return acc + 1

        def merge(self, a, b):
            if not raised["once"]:
                raised["once"] = True
                raise ValueError("merge refuses to combine")
            return a + b

        def finalize(self, acc):
            return acc

    return dpa.WithCost(MergeRaisesOnce("k", name="count"), 1e-3)


@pytest.mark.parametrize("runtime", ["ray", "local"])
def test_a_merge_that_raises_while_a_checkpoint_folds_the_epochs_fails_the_job(runtime):
    # The checkpoint's share is not whole once merge() raised: the job must fail, never go
    # on without the records of the epoch being folded.
    with pytest.raises(dpa.JobFailedError, match="merge refuses to combine"):
        dpa.run(pa.table({"k": KEYS}), key="k", reducer=_merge_raising_once(),
                config=_config(policy="hash", runtime=runtime))
