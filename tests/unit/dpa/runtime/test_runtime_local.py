"""The in-process runtime: same logic as the actors, the correctness oracle."""

from __future__ import annotations

import collections
import random

import pandas as pd
import pyarrow as pa
import pytest

import dpa
from dpa.errors import ConfigError, KeyEncodingError, SchemaError
from workloads.paper import workload


def local(**kw):
    return dpa.JobConfig(runtime="local", **kw)


def paper(**kw):
    """The paper's ring (hashed tokens), which its workloads WL1-WL5 are built for."""
    return local(policy_options={"token_spacing": "hashed"}, **kw)


def skewed_words(n=3000, seed=1):
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(40)]
    return [vocab[0] if rng.random() < 0.5 else rng.choice(vocab) for _ in range(n)]


@pytest.mark.parametrize("policy", ["halving", "doubling", "hash"])
@pytest.mark.parametrize("rounds", [0, 1, 3])
def test_word_count_equals_counter(policy, rounds):
    words = skewed_words()
    res = dpa.run(words, reducer=dpa.WithCost(dpa.Count(), 0.001),
                  config=local(policy=policy, max_rounds=rounds, batch_size=100, chunk_size=20))
    assert res.to_dict() == dict(collections.Counter(words))
    assert sum(res.stats.processed) == len(words) == sum(res.stats.emitted)


def test_forced_rebalance_forwards_and_merges_exactly():
    words = workload("WL4")  # 85/5/5/5 under halving: reducer 0 is the straggler
    res = dpa.run(words, reducer=dpa.WithCost(dpa.Count(), 0.01),
                  config=paper(policy="halving", max_rounds=2, batch_size=5, chunk_size=1))
    assert res.to_dict() == dict(collections.Counter(words))
    assert res.stats.rebalances and res.stats.rebalances[0].action == "halve"
    assert sum(res.stats.forwarded) > 0 and res.stats.merged
    assert res.stats.skew < 0.8  # the no-LB value: balancing helped
    assert res.stats.final_tokens[res.stats.rebalances[0].reducer] < 16


def test_no_lb_skew_matches_paper_construction():
    res = dpa.run(workload("WL4"), config=paper(policy="halving", max_rounds=0))
    assert sorted(res.stats.processed) == [5, 5, 5, 85]
    assert abs(res.stats.skew - 0.80) < 1e-9 and res.stats.rebalances == [] and not res.stats.merged


def test_deterministic():
    cfg = paper(policy="doubling", max_rounds=3, batch_size=7, chunk_size=2)
    runs = [dpa.run(workload("WL5"), reducer=dpa.WithCost(dpa.Count(), 0.01), config=cfg) for _ in range(2)]
    assert runs[0].stats.processed == runs[1].stats.processed
    assert [e.to_dict() for e in runs[0].stats.rebalances] == [e.to_dict() for e in runs[1].stats.rebalances]


def test_sources_and_reducers():
    df = pd.DataFrame({"k": ["a", "b", "a", None, None], "x": [1, 2, 3, 4, None], "y": [1.0, 2.0, 3.0, 4.0, 5.0]})
    assert dpa.run(df, key="k", reducer=dpa.Sum("x"), config=local()).to_dict() == {"a": 4, "b": 2, None: 4}
    assert dpa.run(pa.Table.from_pandas(df), key="k", reducer=dpa.Mean("y"), config=local()).to_dict() == {
        "a": 2.0, "b": 2.0, None: 4.5}
    assert dpa.run(df, key="k", reducer=dpa.Max("x"), config=local()).to_dict() == {"a": 3, "b": 2, None: 4}
    assert dpa.run(df, key="k", reducer=dpa.Min("x"), config=local()).to_dict() == {"a": 1, "b": 2, None: 4}
    got = dpa.run(df, key="k", reducer=dpa.Collect("x"), config=local()).to_dict()
    assert sorted(got["a"]) == [1, 3]
    assert dpa.run(df, key="k", reducer=dpa.TopK("y", k=1), config=local()).to_dict()["a"] == [3.0]


def test_tuple_records_dict_records_multi_column_and_callable_keys():
    rows = [("a", 1), ("b", 2), ("a", 3)]
    assert dpa.run(rows, key=0, reducer=dpa.Sum("f1"), config=local()).to_dict() == {"a": 4, "b": 2}
    dicts = [{"c": "x", "d": 1}, {"c": "x", "d": 1}, {"c": "y", "d": 1}]
    assert dpa.run(dicts, key=["c", "d"], config=local()).to_dict() == {("x", 1): 2, ("y", 1): 1}
    assert dpa.run(dicts, key=lambda r: r["c"].upper(), config=local()).to_dict() == {"X": 2, "Y": 1}
    assert dpa.run(dicts, key=lambda r: (r["c"], r["d"] + 1), config=local()).to_dict() == {("x", 2): 2, ("y", 2): 1}


def test_map_fn_per_record_and_batch():
    lines = ["a b a", "c a", ""]
    res = dpa.run(lines, map_fn=lambda line: line.split(), config=local())
    assert res.to_dict() == {"a": 3, "b": 1, "c": 1}
    t = pa.table({"w": ["a", "b", "a"]})
    res = dpa.run(t, key="w", map_fn=dpa.BatchMap(lambda b: b.filter(pa.compute.equal(b["w"], "a"))), config=local())
    assert res.to_dict() == {"a": 2}


def test_user_defined_reducer():
    class Longest(dpa.Reducer):
        def create(self):
            return ""

        def add(self, acc, rec):
            return max(acc, rec["w"], key=len)

        def merge(self, a, b):
            return max(a, b, key=len)

    rows = [{"k": i % 3, "w": "x" * i} for i in range(30)]
    res = dpa.run(rows, key="k", reducer=dpa.WithCost(Longest(), 0.01),
                  config=local(max_rounds=2, batch_size=3, chunk_size=1))
    assert res.to_dict() == {0: "x" * 27, 1: "x" * 28, 2: "x" * 29}


def test_empty_input_gives_typed_empty_result():
    t = pa.table({"k": pa.array([], pa.string()), "v": pa.array([], pa.int64())})
    res = dpa.run(t, key="k", reducer=dpa.Sum("v"), config=local())
    assert res.to_arrow().num_rows == 0
    assert res.to_arrow().schema.field("k").type == pa.string()
    assert dpa.run([], config=local()).to_dict() == {}


def test_bad_input_errors_before_running():
    t = pa.table({"a": [1], "b": ["x"]})
    with pytest.raises(SchemaError, match="available columns: a, b"):
        dpa.run(t, key="missing", config=local())
    with pytest.raises(SchemaError, match="numeric"):
        dpa.run(t, key="a", reducer=dpa.Sum("b"), config=local())
    with pytest.raises(KeyEncodingError, match="list"):
        dpa.run(pa.table({"a": [[1, 2]]}), key="a", config=local())
    with pytest.raises(KeyEncodingError, match="type list"):
        dpa.run([{"a": 1}], key=lambda r: [r["a"]], config=local())
    with pytest.raises(ConfigError, match="does not implement merge"):
        class NoMerge(dpa.Reducer):
            def create(self):
                return 0

            def add(self, a, v):
                return a + 1

        dpa.run(t, key="a", reducer=NoMerge(), config=local(policy="doubling", max_rounds=1))
    with pytest.raises(ConfigError, match="source must be"):
        dpa.run(42, config=local())
    with pytest.raises(ConfigError, match="iterable of records"):
        dpa.run(["a b"], map_fn=lambda s: {"w": s}, config=local())


def test_user_code_error_names_record():
    # UserCodeError, or JobFailedError wrapping it (the job's failure names the record either way).
    with pytest.raises((dpa.UserCodeError, dpa.JobFailedError), match="ZeroDivisionError.*record 0"):
        dpa.run([1, 2, 0, 3], map_fn=lambda x: [1 // x] if x else [1 // 0], config=local())


def test_reducer_without_merge_runs_without_lb():
    class NoMerge(dpa.Reducer):
        def create(self):
            return 0

        def add(self, a, v):
            return a + 1

    res = dpa.run(["a", "b", "a"], reducer=NoMerge(), config=local(max_rounds=0))
    assert res.to_dict() == {"a": 2, "b": 1}
    # The default policy falls back to one that keeps keys whole; a named one is never replaced.
    res = dpa.run(["a", "b", "a"], reducer=NoMerge(), config=local())
    assert res.to_dict() == {"a": 2, "b": 1} and res.stats.policy == "hash"
    with pytest.raises(ConfigError, match="does not implement merge"):
        dpa.run(["a"], reducer=NoMerge(), config=local(policy="hybrid"))


def test_bounded_queues_and_forwarding_do_not_deadlock():
    words = skewed_words(2000)
    res = dpa.run(words, reducer=dpa.WithCost(dpa.Count(), 0.001),
                  config=local(policy="doubling", max_rounds=4, batch_size=50, chunk_size=10, queue_capacity=60))
    assert res.to_dict() == dict(collections.Counter(words))
    assert max(res.stats.peak_queue) <= 60 + 50 + sum(res.stats.forwarded)


# --------------------------------------------------------------------------- balancing by default


def _zipf_keys(n, k=2000, z=1.1, seed=5):
    import numpy as np

    p = 1.0 / np.arange(1, k + 1) ** z
    return np.random.default_rng(seed).choice(k, size=n, p=p / p.sum())


def test_default_config_splits_one_hot_key_over_every_reducer():
    import numpy as np

    table = pa.table({"key": np.zeros(4000, dtype=np.int64)})
    res = dpa.run(table, key="key", reducer=dpa.WithCost(dpa.Count(), 1e-3),
                  config=dpa.JobConfig(num_reducers=8, runtime="local"))
    assert res.to_dict() == {0: 4000}
    assert dpa.metrics.skew(res.stats.processed) <= 0.05
    assert res.stats.virtual_time_s <= 1.2 * 4000 * 1e-3 / 8 + 0.1


@pytest.mark.parametrize("policy", [None, "doubling", "halving"])
def test_default_config_rebalances_a_zipf_job(policy):
    keys = _zipf_keys(8000)
    fields = {"num_reducers": 8, "runtime": "local", **({"policy": policy} if policy else {})}
    res = dpa.run(pa.table({"key": keys}), key="key", reducer=dpa.WithCost(dpa.Count(), 1e-3),
                  config=dpa.JobConfig(**fields))
    assert res.to_dict() == dict(collections.Counter(keys.tolist()))
    no_lb = dpa.run(pa.table({"key": keys}), key="key", reducer=dpa.WithCost(dpa.Count(), 1e-3),
                    config=dpa.JobConfig(**fields, max_rounds=0))
    assert res.stats.virtual_time_s <= no_lb.stats.virtual_time_s * 1.01  # balancing never made it slower
    if policy == "halving":
        # The first ring is planned on the mappers' forecast, before any record moves; after
        # that, halving the straggler would hand its top key (1.4 fair shares) to another
        # loaded reducer: the lookahead sees it and keeps the ring. Without the lookahead
        # (and its forecast), the paper's single round does halve it.
        assert res.stats.rebalances and all(e.time_s == 0.0 and not any(e.queue_lengths)
                                            for e in res.stats.rebalances)
        paper = dpa.run(pa.table({"key": keys}), key="key", reducer=dpa.WithCost(dpa.Count(), 1e-3),
                        config=dpa.JobConfig(**fields, policy_options={"lookahead": False}))
        assert paper.stats.rebalances
    else:
        assert res.stats.rebalances
    if policy is None:
        assert res.stats.virtual_time_s <= 1.15 * 8000 * 1e-3 / 8


def test_cheap_jobs_are_left_alone_by_default():
    keys = _zipf_keys(50_000)
    res = dpa.run(pa.table({"key": keys}), key="key", config=dpa.JobConfig(num_reducers=8, runtime="local"))
    assert res.to_dict() == dict(collections.Counter(keys.tolist()))
    assert not res.stats.rebalances and not res.stats.merged  # milliseconds of work: nothing worth moving
