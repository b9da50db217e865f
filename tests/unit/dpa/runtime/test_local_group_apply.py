"""Per-group functions on the in-process runtime: the output equals pandas' for every policy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import dpa
from dpa.engine.planning import build_plan
from dpa.input.sources import normalize_source
from dpa.runtime.local import run_local

_RNG = np.random.default_rng(7)
N = 4_000
TABLE = pa.table({
    "k": (_RNG.zipf(1.2, N) % 150).astype(np.int64),
    "s": pa.array([f"u{i % 7}" for i in range(N)]),
    "v": _RNG.integers(0, 1_000, N),
})


def top_two(pdf: pd.DataFrame) -> pd.DataFrame:
    """Per key: its two largest values and the group's size (two rows, order-free)."""
    top = pdf.sort_values("v", ascending=False, kind="stable").head(2)
    return pd.DataFrame({"k": top.k.to_numpy(), "v": top.v.to_numpy(), "n": [len(pdf)] * len(top)})


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)


def _reference(fn, key) -> pd.DataFrame:
    pdf = TABLE.to_pandas()
    return _sorted(pd.concat([fn(g.reset_index(drop=True)) for _, g in pdf.groupby(key, dropna=False)]))


@pytest.mark.parametrize("policy", sorted(dpa.policies()))
def test_every_policy_gives_pandas_answer(policy):
    res = dpa.run(TABLE, key="k", reducer=dpa.GroupApply(top_two), runtime="local", policy=policy,
                  num_reducers=4, batch_size=250)
    pd.testing.assert_frame_equal(_sorted(res.to_pandas()), _reference(top_two, "k"), check_dtype=False)
    ga = res.stats.group_apply
    assert ga["groups"] == TABLE["k"].to_pandas().nunique() == res.stats.num_keys
    assert ga["rows"] == N and sum(ga["rows_run"]) == N


def test_keys_split_while_collecting_are_whole_when_fn_runs():
    # hybrid splits the hot key across reducers while rows arrive (a costly collection is
    # not needed: a forced split ring); the final merge brings its rows together.
    res = dpa.run(TABLE, key="k", reducer=dpa.GroupApply(top_two), runtime="local", policy="shuffle",
                  num_reducers=4, batch_size=250)
    assert res.stats.merged and res.stats.merged_keys > 0
    pd.testing.assert_frame_equal(_sorted(res.to_pandas()), _reference(top_two, "k"), check_dtype=False)


def test_composite_string_keys_and_the_key_argument():
    def tag(key, pdf):
        return pd.DataFrame({"k": [key[0]], "s": [key[1]], "n": [len(pdf)]})

    res = dpa.run(TABLE, key=["k", "s"], reducer=dpa.GroupApply(tag), runtime="local", num_reducers=3)
    want = TABLE.to_pandas().groupby(["k", "s"]).size().reset_index(name="n")
    pd.testing.assert_frame_equal(_sorted(res.to_pandas()), _sorted(want), check_dtype=False)


def test_empty_input_gives_the_schema_and_to_dict_explains_itself():
    schema = pa.schema([("k", pa.int64()), ("n", pa.int64())])
    res = dpa.run(TABLE.slice(0, 0), key="k", reducer=dpa.GroupApply(top_two, schema=schema), runtime="local")
    assert res.to_arrow().schema == schema and len(res) == 0
    with pytest.raises(dpa.ConfigError, match="no per-key value"):
        res.to_dict()


def test_fn_failure_fails_the_job_naming_the_key():
    def boom(pdf):
        if pdf.k.iloc[0] == 3:
            raise ValueError("bad group")
        return None

    with pytest.raises(dpa.JobFailedError, match=r"ValueError: bad group on the group of key 3") as info:
        dpa.run(TABLE, key="k", reducer=dpa.GroupApply(boom), runtime="local")
    assert info.value.key == 3


def test_the_apply_phase_spreads_a_hot_key_and_its_neighbours_over_the_workers():
    # 1 ms per row: the virtual makespan of the apply phase is close to
    # max(total / workers, largest group) although one reducer collected the hot key.
    keys = np.concatenate([np.zeros(600, np.int64), np.arange(1, 1_401, dtype=np.int64) % 200 + 1])
    table = pa.table({"k": keys})

    def slow(pdf):
        import time
        time.sleep(0.001 * len(pdf))
        return pd.DataFrame({"k": [pdf.k.iloc[0]], "n": [len(pdf)]})

    plan, blocks = build_plan(normalize_source(table, 200, 2), "k", dpa.GroupApply(slow), None,
                              dpa.JobConfig(runtime="local", num_reducers=4, policy="hash"))
    out = run_local(plan, blocks)
    ga = out.group_apply
    bound = max(len(keys) * 0.001 / 4, 0.6)
    assert max(ga["busy_s"]) < bound * 1.4
    assert ga["largest_group_rows"] == 600 and ga["moved_units"] > 0


def test_recovery_from_failures_while_collecting_keeps_the_answer():
    plan, blocks = build_plan(normalize_source(TABLE, 250, 2), "k", dpa.GroupApply(top_two), None,
                              dpa.JobConfig(runtime="local", num_reducers=4, checkpoint_interval_s=0.001))
    out = run_local(plan, blocks, faults=[(0.0, "reducer-1"), (0.0, "mapper-0")])
    assert out.recoveries
    got = pd.concat([t.to_pandas() for t in out.tables if t is not None])
    pd.testing.assert_frame_equal(_sorted(got), _reference(top_two, "k"), check_dtype=False)


def test_many_small_groups_give_pandas_answer_and_run_in_a_few_units():
    rng = np.random.default_rng(11)
    table = pa.table({"k": rng.integers(0, 3_000, 24_000), "s": pa.array([f"s{i % 5}" for i in range(24_000)]),
                      "v": rng.random(24_000)})

    def centre(pdf):
        return pdf.assign(x=pdf.v - pdf.v.mean())

    res = dpa.run(table, key="k", reducer=dpa.GroupApply(centre), runtime="local", num_reducers=2)
    pdf = table.to_pandas()
    want = pd.concat([centre(g) for _, g in pdf.groupby("k")], ignore_index=True)
    pd.testing.assert_frame_equal(_sorted(res.to_pandas()), _sorted(want))
    ga = res.stats.group_apply
    assert ga["groups"] == pdf.k.nunique() and ga["units"] <= 2 * 8 + 2
