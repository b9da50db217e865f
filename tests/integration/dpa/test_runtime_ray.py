"""The Ray runtime: exact results, rebalancing with forwarding, failures and teardown."""

from __future__ import annotations

import collections
import os
import random
import signal
import threading
import time

import numpy as np
import pyarrow as pa
import pytest
import ray

import dpa
from dpa.runtime.ray.host import find_member
from dpa.runtime.ray.member import NAMESPACE
from workloads.paper import workload

pytestmark = pytest.mark.usefixtures("ray_session")


def dpa_actors_alive():
    """Live named dpa actors as {"name", "namespace"} dicts."""
    return [a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("dpa:")]


def wait_no_dpa_actors(timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not dpa_actors_alive():
            return True
        time.sleep(0.3)
    return False


#: (Lambdas, shipped to the actors by value: they cannot import test modules.)
#: The job each member of an actor serves, ``{role: job}`` (a host runs several; the
#: coordinator serves one and runs the balancer).
_jobs = lambda actor: {  # noqa: E731
    **{role: m.job_id for role, m in getattr(actor, "members", {}).items()},
    **({"coordinator": actor.job_id} if hasattr(actor, "pool_id") else {})}
#: ``{role: member name}`` of a host (a replacement's name ends in its generation).
_member_names = lambda actor: {role: m.name for role, m in actor.members.items()}  # noqa: E731


def hosted_members() -> dict:
    """Every live member, run by a host or (the balancer) by its coordinator: ``{member
    name: role}``."""
    out = {}
    for a in dpa_actors_alive():
        if ":host-" in a["name"] or a["name"].endswith(":coordinator"):
            try:
                handle = ray.get_actor(a["name"], namespace=a["namespace"])
                names = ray.get(handle.__ray_call__.remote(_member_names), timeout=30)
            except (ray.exceptions.RayActorError, ValueError):
                continue
            out.update({name: role for role, name in names.items()})
    return out


def assert_pool_idle_and_reusable():
    """After a failed job: every live dpa actor answers and none of its members serves a
    job; the next job is exact."""
    for a in dpa_actors_alive():
        try:
            handle = ray.get_actor(a["name"], namespace=a["namespace"])
            jobs = ray.get(handle.__ray_call__.remote(_jobs), timeout=30)
        except (ray.exceptions.RayActorError, ValueError):
            continue  # died since it was listed (a killed pool) or dead: the next job replaces it
        assert all(job is None for job in jobs.values()), f"{a['name']} still serves {jobs}"
    words = skewed_words(500)
    assert dpa.run(words).to_dict() == dict(collections.Counter(words))


def skewed_words(n=4000, seed=3):
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(50)]
    return [vocab[0] if rng.random() < 0.4 else rng.choice(vocab) for _ in range(n)]


@pytest.mark.parametrize("policy,rounds", [("halving", 0), ("halving", 2), ("doubling", 0), ("doubling", 2), ("hash", 0)])
def test_word_count_equals_counter(policy, rounds):
    words = skewed_words()
    res = dpa.run(words, config=dpa.JobConfig(policy=policy, max_rounds=rounds, batch_size=500))
    assert res.to_dict() == dict(collections.Counter(words))
    assert sum(res.stats.processed) == len(words) == sum(res.stats.emitted)


@pytest.mark.parametrize("policy", sorted(dpa.policies()))
def test_every_policy_word_count_equals_counter_on_ray(policy):
    words = skewed_words(3000, seed=5)
    res = dpa.run(words, reducer=dpa.WithCost(dpa.Count(), 0.0002),
                  config=dpa.JobConfig(policy=policy, max_rounds=2, batch_size=200, chunk_size=50))
    assert res.to_dict() == dict(collections.Counter(words))
    assert sum(res.stats.processed) == len(words)


def test_hybrid_splits_the_single_hot_letter_of_wl3():
    letters = workload("WL3")
    res = dpa.run([{"k": x} for x in letters], key="k", reducer=dpa.WithCost(dpa.Count(), 0.01, mode="sleep"),
                  config=dpa.JobConfig(policy="hybrid", batch_size=5, chunk_size=1, queue_capacity=10**9,
                                       max_rounds=0))
    assert res.to_dict() == {letters[0]: 100}
    assert any(e.action == "split" for e in res.stats.rebalances)
    # the DPA ring alone cannot go below 0.75 here (the paper's doubling); splitting does
    assert res.stats.skew <= 0.25, res.stats.processed


@pytest.mark.parametrize("policy", ["halving", "doubling"])
def test_forced_rebalance_forwards_and_stays_exact(policy):
    words = workload("WL4") * 3  # a straggler under both initial rings
    res = dpa.run(words, reducer=dpa.WithCost(dpa.Count(), 0.004),
                  config=dpa.JobConfig(policy=policy, max_rounds=2, batch_size=10, chunk_size=2, tau=0.2,
                                       policy_options={"token_spacing": "hashed", "lookahead": False}))  # the paper's
    assert res.to_dict() == dict(collections.Counter(words))
    assert len(res.stats.rebalances) >= 1
    assert sum(res.stats.forwarded) > 0 and res.stats.merged
    assert res.stats.ring_version >= 1


def test_arrow_pandas_and_ray_dataset_sources():
    t = pa.table({"k": ["x", "y", "x", None], "v": [1, 2, 3, 4]})
    assert dpa.run(t, key="k", reducer=dpa.Sum("v")).to_dict() == {"x": 4, "y": 2, None: 4}
    assert dpa.run(t.to_pandas(), key="k", reducer=dpa.Sum("v")).to_dict() == {"x": 4, "y": 2, None: 4}
    ds = ray.data.from_arrow(t)
    assert dpa.run(ds, key="k", reducer=dpa.Max("v")).to_dict() == {"x": 3, "y": 2, None: 4}
    out = dpa.run(ds, key="k", reducer=dpa.Mean("v")).to_pandas()
    assert set(out.columns) == {"k", "mean"}


def test_bounded_queues_backpressure_with_forwarding_does_not_deadlock():
    words = skewed_words(3000)
    res = dpa.run(words, reducer=dpa.WithCost(dpa.Count(), 0.0005),
                  config=dpa.JobConfig(policy="doubling", max_rounds=3, batch_size=100, chunk_size=20,
                                       queue_capacity=150, timeout_s=120))
    assert res.to_dict() == dict(collections.Counter(words))


def test_map_fn_error_fails_job_names_actor_and_record_and_stops_it():
    def bad(x):
        if x == "boom":
            raise ValueError("bad record")
        return [x]

    with pytest.raises(dpa.JobFailedError) as info:
        dpa.run(["a", "b", "boom", "c"], map_fn=bad, config=dpa.JobConfig(batch_size=1))
    msg = str(info.value)
    assert "mapper-" in msg and "ValueError" in msg and "'boom'" in msg
    assert "mapper-" in info.value.actor
    assert_pool_idle_and_reusable()


def test_reducer_error_fails_job_names_actor_and_key():
    class Fragile(dpa.Reducer):
        def create(self):
            return 0

        def add(self, acc, value):
            if value == "poison":
                raise RuntimeError("cannot digest")
            return acc + 1

        def merge(self, a, b):
            return a + b

    with pytest.raises(dpa.JobFailedError) as info:
        dpa.run(["a", "poison", "b"], reducer=Fragile())
    msg = str(info.value)
    assert "reducer-" in msg and "cannot digest" in msg and "'poison'" in msg
    assert info.value.key == "poison"
    assert_pool_idle_and_reusable()


def test_actor_death_mid_job_without_recoveries_fails_fast_and_the_next_job_repairs_the_pool():
    words = [f"k{i % 7}" for i in range(400)]
    cfg = dpa.JobConfig(policy="hash", max_rounds=0, batch_size=10, chunk_size=5, max_recoveries=0)
    dpa.run(words[:10], config=cfg)  # warm the pool so we can find a reducer's pid

    def kill_a_reducer():
        # Idle pools of earlier tests may be alive too: kill a reducer of the running job only.
        time.sleep(1.0)
        for a in dpa_actors_alive():
            if ":host-" in a["name"]:
                handle = ray.get_actor(a["name"], namespace=a["namespace"])
                jobs, pid = ray.get(handle.__ray_call__.remote(
                    lambda self: ({r: m.job_id for r, m in self.members.items()}, os.getpid())))
                if any(job is not None for role, job in jobs.items() if role.startswith("reducer-")):
                    os.kill(pid, signal.SIGKILL)
                    return

    killer = threading.Thread(target=kill_a_reducer)
    killer.start()
    started = time.time()
    with pytest.raises(dpa.JobFailedError, match="reducer|died|ActorDied"):
        dpa.run(words, reducer=dpa.WithCost(dpa.Count(), 0.05), config=cfg)
    killer.join()
    assert time.time() - started < 30
    assert_pool_idle_and_reusable()
    assert any(role.startswith("reducer-") and "." in name.rsplit(":", 1)[1] for name, role in hosted_members().items())


def test_failure_with_reuse_actors_false_leaves_no_actor():
    dpa.shutdown()  # the warm pools of earlier tests
    assert wait_no_dpa_actors()
    def bad(x):
        if x == "boom":
            raise ValueError("no")
        return [x]

    with pytest.raises(dpa.JobFailedError, match="boom"):
        dpa.run(["a"] * 100 + ["boom"], map_fn=bad, config=dpa.JobConfig(batch_size=10, reuse_actors=False))
    assert wait_no_dpa_actors()


def test_timeout_fails_loudly_and_stops_the_job():
    dpa.run(["warm"])  # a warm pool: the limit hits the running job, not the actors' start
    with pytest.raises(dpa.JobFailedError, match="timeout_s"):
        dpa.run(["a"] * 50, reducer=dpa.WithCost(dpa.Count(), 0.2),
                config=dpa.JobConfig(timeout_s=1.0, batch_size=5, chunk_size=1))
    assert_pool_idle_and_reusable()


def test_bad_input_raises_before_any_actor_starts():
    dpa.shutdown()
    assert wait_no_dpa_actors()
    with pytest.raises(dpa.SchemaError, match="available columns"):
        dpa.run(pa.table({"a": [1]}), key="b")
    with pytest.raises(dpa.ConfigError, match="valid policies"):
        dpa.run(["a"], config=dpa.JobConfig(policy="bogus") if False else None, policy="bogus")
    assert not dpa_actors_alive()


def test_actors_are_named_in_the_dpa_namespace():
    dpa.run(["a", "b"])
    names = {a["name"] for a in dpa_actors_alive()}
    roles = list(hosted_members().values())
    assert any(n.endswith(":coordinator") for n in names) and roles.count("balancer") == 1
    shape = dpa.JobConfig().resolved()  # the default: one mapper and one reducer per CPU of the session
    cpus = int(ray.cluster_resources()["CPU"])
    assert shape.num_mappers == cpus
    assert sum(r.startswith("reducer-") for r in roles) == shape.num_reducers
    assert sum(r.startswith("mapper-") for r in roles) == shape.num_mappers
    # the reducers and mappers run in one host per CPU (at most one per member); the
    # coordinator runs the balancer
    assert sum(":host-" in n for n in names) == min(cpus, len(roles) - 1)
    (coordinator,) = [n for n in names if n.endswith(":coordinator")]
    assert find_member("balancer")[0]._actor_id == ray.get_actor(coordinator, namespace=NAMESPACE)._actor_id
    dpa.shutdown()
    assert wait_no_dpa_actors()


def test_arrow_refs_source_reads_blocks_straight_from_the_object_store():
    tables = [pa.table({"k": ["a", "b", "a"][: i + 1], "v": list(range(i + 1))}) for i in range(3)]
    refs = dpa.ArrowRefs([ray.put(t) for t in tables], tables[0].schema)
    res = dpa.run(refs, key="k", reducer=dpa.Sum("v"))
    assert res.to_dict() == {"a": 0 + 0 + 2, "b": 1 + 1}
    assert sum(res.stats.processed) == 6
    with pytest.raises(dpa.ConfigError, match="runtime='ray'"):
        dpa.run(refs, key="k", config=dpa.JobConfig(runtime="local"))
    with pytest.raises(dpa.ConfigError, match="pyarrow.Schema"):
        dpa.ArrowRefs([], "not a schema")
    with pytest.raises(dpa.SchemaError, match="nope"):
        dpa.run(refs, key="nope")


def test_parquet_files_are_read_by_the_mappers(tmp_path):
    import collections

    import pyarrow.parquet as pq

    keys = [f"k{i % 7}" if i % 3 else "hot" for i in range(5000)]
    for i in range(3):
        part = pa.table({"k": keys[i::3], "v": list(range(len(keys[i::3])))})
        pq.write_table(part, tmp_path / f"p{i}.parquet", row_group_size=400)
    files = dpa.ParquetFiles(sorted(str(p) for p in tmp_path.glob("*.parquet")), ["k"])
    res = dpa.run(files, key="k", config=dpa.JobConfig(batch_size=1000, policy="doubling"))
    assert res.to_dict() == dict(collections.Counter(keys))
    assert sum(res.stats.processed) == 5000
    assert sum(res.stats.blocks_per_mapper) == len(files.pieces(1000)) > 3  # blocks are row-group runs


# --------------------------------------------------------------------------- balancing by default


def test_default_config_spreads_one_hot_key_over_every_reducer():
    table = pa.table({"key": [7] * 3000})
    res = dpa.run(table, key="key", reducer=dpa.WithCost(dpa.Count(), 1e-3), config=dpa.JobConfig(num_reducers=4))
    assert res.to_dict() == {7: 3000}
    assert all(p > 0 for p in res.stats.processed), res.stats.processed
    assert dpa.metrics.skew(res.stats.processed) <= 0.2


def test_default_config_rebalances_a_skewed_job():
    words = skewed_words(3000)
    res = dpa.run(words, reducer=dpa.WithCost(dpa.Count(), 1e-3), config=dpa.JobConfig(num_reducers=4))
    assert res.to_dict() == dict(collections.Counter(words))
    assert res.stats.rebalances  # how well a 1 s job balances on a loaded CI machine varies: benchmarks.stragglers


def test_default_config_balances_a_user_reducer_on_its_measured_cost():
    class SlowCount(dpa.Reducer):
        """Records that really cost time (no WithCost): the reducers measure it.
        (Defined here: workers cannot import test modules, so it is pickled by value.)"""

        def create(self):
            return 0

        def add(self, acc, value):
            time.sleep(0.0005)
            return acc + 1

        def merge(self, a, b):
            return a + b

    words = skewed_words(3000)
    res = dpa.run(words, reducer=SlowCount(), config=dpa.JobConfig(num_reducers=4))
    assert res.to_dict() == dict(collections.Counter(words))
    assert res.stats.rebalances  # how well a 1 s job balances on a loaded CI machine varies: benchmarks.stragglers


def test_a_block_of_a_big_table_goes_to_the_object_store_without_its_parent(monkeypatch):
    """The driver puts a slice of the user's table as it is (no copy): Ray's Arrow reducer
    writes only the slice's rows. With that reducer off, the block is copied first."""
    import numpy as np

    from dpa.runtime.ray.driver import _for_put

    table = pa.table({"k": np.arange(2_000_000), "v": np.ones(2_000_000)})
    block = table.slice(1_000_000, 1000)
    context = ray._private.worker.global_worker.get_serialization_context()
    assert _for_put(block) is block
    assert context.serialize(block).total_bytes < 100_000  # the parent holds 32 MB
    two_chunks = pa.concat_tables([table.slice(0, 10), table.slice(10, 10)])
    assert _for_put(two_chunks).column("k").num_chunks == 1
    monkeypatch.setenv("RAY_DISABLE_CUSTOM_ARROW_DATA_SERIALIZATION", "1")
    copied = _for_put(block)
    assert copied is not block and copied.equals(block)


def test_an_idle_pool_keeps_no_reference_to_its_last_input(monkeypatch):
    """The coordinator lets go of the input blocks it kept for a replay when the job ends,
    so the object store frees them then, not when the pool's next job starts."""
    from ray._private.internal_api import memory_summary

    put = []  # the ids of the blocks the driver put (a ref kept here would hold them)
    real_put = ray.put

    def spy(value, **kw):
        ref = real_put(value, **kw)
        put.append(ref.hex())
        return ref

    monkeypatch.setattr(ray, "put", spy)
    table = pa.table({"k": np.arange(400_000) % 1000, "v": np.ones(400_000)})
    res = dpa.run(table, key="k", reducer=dpa.Count(), config=dpa.JobConfig(num_mappers=2))
    assert res.to_dict()[7] == 400
    monkeypatch.undo()
    assert put
    gcs = ray.get_runtime_context().gcs_address  # (this job's Ray, whatever else runs on the machine)
    deadline = time.time() + 20
    while True:
        summary = memory_summary(address=gcs, line_wrap=False, stats_only=False, num_entries=10_000)
        held = [ref for ref in put if ref in summary]
        if not held or time.time() > deadline:
            break
        time.sleep(0.2)
    assert not held, f"{len(held)} of {len(put)} input blocks still referenced after the job"


def test_a_forecast_ring_is_routed_from_the_first_push_and_needs_no_merge():
    keys = np.concatenate([np.zeros(3000, np.int64), np.arange(7000, dtype=np.int64) % 900 + 1])
    np.random.default_rng(4).shuffle(keys)
    table = pa.table({"key": keys})
    config = dpa.JobConfig(num_reducers=4, policy="doubling", tau=100.0)  # no round but the forecast's
    # (On a warm pool: a new pool's first job routes before its balancer is up, see the next test.)
    dpa.run(table.slice(0, 100), key="key", config=config)
    res = dpa.run(table, key="key", reducer=dpa.WithCost(dpa.Count(), 2e-4), config=config)
    assert res.to_dict() == dict(collections.Counter(keys.tolist()))
    assert res.stats.rebalances and all(not any(e.queue_lengths) for e in res.stats.rebalances)
    assert res.stats.ring_version > 0 and not res.stats.merged and sum(res.stats.forwarded) == 0


@pytest.mark.parametrize("policy", ["hybrid", "doubling", "pkg"])
def test_a_new_pool_s_first_job_started_by_the_driver_is_exact(policy):
    # reuse_actors=False: every job starts a new pool, whose first job the driver opens
    # (dpa.runtime.ray.driver.open_job): each mapper routes its first block before the
    # coordinator and the balancer are up, and asks the coordinator for the rest.
    keys = np.concatenate([np.zeros(4000, np.int64), np.arange(8000, dtype=np.int64) % 700 + 1])
    np.random.default_rng(5).shuffle(keys)
    config = dpa.JobConfig(num_mappers=3, num_reducers=4, batch_size=1000, policy=policy, reuse_actors=False)
    res = dpa.run(pa.table({"key": keys}), key="key", reducer=[dpa.Count(), dpa.WithCost(dpa.Sum("key"), 1e-4)],
                  config=config)
    expected = collections.Counter(keys.tolist())
    assert res.to_dict() == {k: (n, k * n) for k, n in expected.items()}
    assert sum(res.stats.blocks_per_mapper) == 12 and all(res.stats.blocks_per_mapper)
    assert sum(res.stats.processed) == len(keys)


class UnimportableCount(dpa.Count):
    """Defined at module level of a test module the actors cannot import."""


def test_a_new_pool_s_first_job_fails_clearly_when_the_actors_cannot_load_the_reducer():
    # (The driver starts a new pool's members itself: a member that cannot unpickle the plan
    # fails the job with the same advice as on a warm pool.)
    with pytest.raises(dpa.JobFailedError, match="could not load your code"):
        dpa.run(["a", "b"], reducer=UnimportableCount(), config=dpa.JobConfig(reuse_actors=False, timeout_s=60))
