"""The Ray runtime under concurrency, dead actors, time limits and failing user code."""

from __future__ import annotations

import collections
import contextlib
import subprocess
import sys
import textwrap
import threading
import time

import pyarrow as pa
import pytest
import ray

import dpa
import dpa.runtime.ray.pool as ray_pool
from dpa.runtime.ray.balancer import BalancerActor
from dpa.runtime.ray.coordinator import CoordinatorActor
from dpa.runtime.ray.host import HostActor
from dpa.runtime.ray.reducer import ReducerActor

pytestmark = pytest.mark.usefixtures("ray_session")


def live_dpa_actors() -> list[str]:
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("dpa:")]


def kill(name: str) -> None:
    ray.kill(ray.get_actor(name, namespace="dpa"), no_restart=True)
    deadline = time.time() + 20
    while name in live_dpa_actors() and time.time() < deadline:
        time.sleep(0.1)


def test_two_threads_run_isolated_exact_jobs_with_different_shapes():
    a = [i % 100 for i in range(60_000)]
    b = [1000 + i % 7 for i in range(40_000)]
    results: dict[str, dict] = {}
    errors: list[BaseException] = []

    def go(name, data, reducers):
        try:
            cfg = dpa.JobConfig(num_reducers=reducers, batch_size=1000, timeout_s=120)
            results[name] = dpa.run(data, config=cfg).to_dict()
        except BaseException as exc:  # reported below
            errors.append(exc)

    for shape_b in (4, 3):  # same shape (one pool each), then different shapes
        threads = [threading.Thread(target=go, args=("a", a, 4)), threading.Thread(target=go, args=("b", b, shape_b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        assert not any(t.is_alive() for t in threads), "a concurrent job hung"
        assert not errors, errors
        assert results["a"] == dict(collections.Counter(a))
        assert results["b"] == dict(collections.Counter(b))


def hosts_of(pool_id: str) -> dict[str, list[str]]:
    """The live hosts of a pool: ``{name: the roles it runs}``."""
    out = {}
    for name in live_dpa_actors():
        if name.startswith(f"dpa:{pool_id}:host-"):
            with contextlib.suppress(Exception):
                out[name] = sorted(ray.get(ray.get_actor(name, namespace="dpa").serving.remote()))
    return out


def test_a_pooled_member_killed_between_jobs_is_replaced():
    words = [f"w{i % 50}" for i in range(5000)]
    dpa.shutdown()  # one warm pool: the one the next job takes
    dpa.run(words[:10])
    pool_id = ray_pool.idle_pools()[-1].pool_id
    before = hosts_of(pool_id)
    shape = dpa.JobConfig().resolved()  # the pool of the default shape: one host per CPU
    members = shape.num_mappers + shape.num_reducers
    assert len(before) == min(int(ray.cluster_resources()["CPU"]), members)
    # The hosts run the reducers and mappers; the balancer runs in the coordinator's process.
    assert sorted(r for roles in before.values() for r in roles) == sorted(
        [*[f"reducer-{i}" for i in range(shape.num_reducers)], *[f"mapper-{i}" for i in range(shape.num_mappers)]])
    (victim,) = [n for n, roles in before.items() if "reducer-1" in roles]
    kill(victim)
    res = dpa.run(words, config=dpa.JobConfig(timeout_s=60))
    assert res.to_dict() == dict(collections.Counter(words))
    after = hosts_of(pool_id)
    # only the dead host was rebuilt: one new host runs exactly the members it ran
    assert victim not in after and len(after) == len(before)
    assert {n: r for n, r in after.items() if n in before} == {n: r for n, r in before.items() if n != victim}
    assert [r for n, r in after.items() if n not in before] == [before[victim]]


def test_a_pool_whose_coordinator_died_is_replaced():
    words = [f"w{i % 50}" for i in range(5000)]
    dpa.run(words[:10])
    coordinators = [n for n in live_dpa_actors() if n.endswith(":coordinator")]
    for name in coordinators:
        kill(name)
    res = dpa.run(words, config=dpa.JobConfig(timeout_s=60))
    assert res.to_dict() == dict(collections.Counter(words))
    # The members (started by the driver with their coordinator) went with their pool.
    dead_pools = {name.split(":")[1] for name in coordinators}
    deadline = time.time() + 20
    while (left := [n for n in live_dpa_actors() if n.split(":")[1] in dead_pools]) and time.time() < deadline:
        time.sleep(0.1)
    assert not left


def test_timeout_holds_while_mappers_wait_on_full_queues():
    dpa.run(["warm"])
    started = time.perf_counter()
    with pytest.raises(dpa.JobFailedError, match="timeout_s=2"):
        dpa.run([i % 10 for i in range(200_000)], reducer=dpa.WithCost(dpa.Count(), 1e-3),
                config=dpa.JobConfig(timeout_s=2, batch_size=1000, queue_capacity=2000))
    elapsed = time.perf_counter() - started
    assert elapsed < 2 + 5, f"timeout_s=2 took {elapsed:.1f} s to fail"
    assert dpa.run([1, 2, 2]).to_dict() == {1: 1, 2: 2}


def test_timeout_holds_while_the_source_is_slow():
    def slow():
        for i in range(100):
            time.sleep(0.2)
            yield i

    started = time.perf_counter()
    with pytest.raises(dpa.JobFailedError, match="timeout_s"):
        dpa.run(slow(), config=dpa.JobConfig(timeout_s=1.0, batch_size=1))
    assert time.perf_counter() - started < 1.0 + 5


def test_finalize_error_is_a_job_failure_from_run():
    class FailingFinalize(dpa.Reducer):  # defined here: cloudpickle ships it by value
        def create(self):
            return 0

        def add(self, acc, value):
            return acc + 1

        def merge(self, a, b):
            return a + b

        def finalize(self, acc):
            raise ValueError("cannot finalize")

    with pytest.raises(dpa.JobFailedError, match="cannot finalize") as info:
        dpa.run([1, 2, 3], reducer=FailingFinalize())
    assert "reducer-" in info.value.actor
    assert dpa.run([1, 1]).to_dict() == {1: 2}


def test_user_code_failure_keeps_the_warm_pool():
    def bad(x):
        if x == "boom":
            raise ValueError("bad record")
        return [x]

    dpa.run(["warm"])
    before = set(live_dpa_actors())
    with pytest.raises(dpa.JobFailedError, match="boom"):
        dpa.run(["a"] * 100 + ["boom"], map_fn=bad, config=dpa.JobConfig(batch_size=10))
    assert set(live_dpa_actors()) == before  # same actors, no cold start for the next job
    assert dpa.run(["x", "x"]).to_dict() == {"x": 2}


def test_a_datasets_blocks_read_in_one_run_are_typed_one_by_one():
    import pandas as pd

    # Object columns: the bundles' schemas agree, the blocks' Arrow types do not. The blocks
    # go to one mapper as one run (a small dataset), and are typed as blocks of their own:
    # ints then floats promote exactly, ints then strings fail as between any two blocks.
    ints = pd.DataFrame({"k": [1, 2], "v": pd.Series([1, 2], dtype=object)})
    floats = pd.DataFrame({"k": [1, 3], "v": pd.Series([0.5, 1.5], dtype=object)})
    words = pd.DataFrame({"k": [1, 3], "v": pd.Series(["x", "y"], dtype=object)})
    result = dpa.run(ray.data.from_pandas([ints, floats]), key="k", reducer=dpa.Sum("v"))
    assert result.to_dict() == {1: 1.5, 2: 2.0, 3: 1.5} and sum(result.stats.blocks_per_mapper) == 1
    with pytest.raises(dpa.JobFailedError, match="mapper.*SchemaError: column 'v' changes type from int64 to string"):
        dpa.run(ray.data.from_pandas([ints, words]), key="k", reducer=dpa.Max("v"))
    assert dpa.run([{"k": 1}], key="k", reducer=dpa.Count()).to_dict() == {1: 1}


def test_a_late_message_of_an_aborted_job_is_dropped():
    dpa.run(["warm"])
    pool = ray_pool.idle_pools()[-1]
    reducer = pool.reducers[0]
    table = pa.table({"value": ["stale"], "__dpa_h": pa.array([1], pa.uint32())})
    ray.get(reducer.push.remote("not-this-job", table, 0))  # must be ignored, not queued
    queued = reducer.host.__ray_call__.remote(lambda self, role: self.members[role].machine.logic.queued, reducer.role)
    assert ray.get(queued) == 0
    assert dpa.run(["y"]).to_dict() == {"y": 1}


def test_config_as_a_dict():
    assert dpa.run([1, 1, 2], config={"num_reducers": 2}).to_dict() == {1: 2, 2: 1}
    with pytest.raises(dpa.ConfigError, match="unknown JobConfig field"):
        dpa.run([1], config={"reducers": 2})
    with pytest.raises(dpa.ConfigError, match="JobConfig"):
        dpa.run([1], config=42)


def test_frequent_calls_do_not_fill_rays_task_event_buffer():
    quiet = [HostActor.call, ReducerActor.push, ReducerActor.update_ring, BalancerActor.report,
             CoordinatorActor.next_block, CoordinatorActor.offer,
             CoordinatorActor.progress]
    for method in quiet:
        assert getattr(method, "__ray_enable_task_events__", True) is False, method


def test_first_run_from_a_worker_thread_keeps_ray_alive():
    """Ray started by dpa from a thread that then exits must survive (a fresh process)."""
    script = textwrap.dedent("""
        import threading, dpa
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("a", dpa.run([1, 2, 2]).to_dict()))
        t.start(); t.join()
        assert out["a"] == {1: 1, 2: 2}, out
        assert dpa.run([3, 3]).to_dict() == {3: 2}
        t = threading.Thread(target=lambda: out.setdefault("b", dpa.run([4]).to_dict()))
        t.start(); t.join()
        assert out["b"] == {4: 1}, out
        dpa.shutdown()
        print("OK")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]


class UnimportableReducer(dpa.Reducer):
    """Defined at module level of a test module the actors cannot import."""

    def create(self):
        return []

    def add(self, acc, value):
        return [*acc, value]

    def merge(self, a, b):
        return a + b


def test_code_the_actors_cannot_load_is_a_clear_job_failure():
    with pytest.raises(dpa.JobFailedError, match="could not load your code"):
        dpa.run([1, 2], reducer=UnimportableReducer())
    assert dpa.run([1]).to_dict() == {1: 1}
