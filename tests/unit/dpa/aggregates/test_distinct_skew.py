"""Distinct under skew: a hot key's CountDistinct is split like any aggregate and merged exactly,
and its state holds one entry per distinct value, not per record."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import dpa
from dpa.input.records import HASH_COL


@pytest.fixture(scope="module")
def hot_table() -> pa.Table:
    rng = np.random.default_rng(5)
    n = 120_000
    hot = rng.random(n) < 0.8  # one key holds 80% of the records ...
    key = np.where(hot, 0, rng.integers(1, 2000, n))
    value = np.where(hot, rng.integers(0, 30_000, n), rng.integers(0, 50, n))  # ... and 30k distinct values
    return pa.table({"k": key, "v": value})


@pytest.mark.parametrize("policy", ["shuffle", "pkg", "hybrid"])
def test_hot_key_split_and_merged_exactly(hot_table, policy):
    result = dpa.run(hot_table, key="k", reducer=[dpa.CountDistinct("v"), dpa.Count()], runtime="local",
                     policy=policy, num_reducers=4, batch_size=4096)
    out = result.to_dict()
    keys, values = hot_table["k"].to_numpy(), hot_table["v"].to_numpy()
    assert out[0] == (len(np.unique(values[keys == 0])), int((keys == 0).sum()))
    for k in (1, 7, 1999):
        assert out[k][0] == len(np.unique(values[keys == k]))
    if policy != "hybrid":  # (hybrid splits the hot key only when its forecast says so)
        assert result.stats.merged_keys > 0
    assert sum(1 for p in result.stats.processed if p) > 1


def test_state_is_bounded_by_distinct_values(hot_table):
    reducer = dpa.CountDistinct("v")
    table = hot_table.append_column(HASH_COL, pa.array(np.zeros(len(hot_table), np.uint32)))
    parts = [reducer.partial_from_batch(table.slice(i, 10_000), ["k", HASH_COL]) for i in range(0, len(table), 10_000)]
    merged = reducer.merge_partials(pa.concat_tables(parts), ["k", HASH_COL])
    hot = merged.filter(pa.compute.equal(merged["k"], 0))
    distinct = len(np.unique(hot_table["v"].to_numpy()[hot_table["k"].to_numpy() == 0]))
    records = int((hot_table["k"].to_numpy() == 0).sum())
    assert len(hot["values"][0]) == distinct < records
    assert merged.num_rows == len(np.unique(hot_table["k"].to_numpy()))
