"""Sources that hold map-side partial states already (JobConfig.input_combined)."""

from __future__ import annotations

import collections

import pyarrow as pa
import pytest

import dpa
from dpa.errors import ConfigError, SchemaError
from dpa.input.records import WEIGHT_COL


def _raw(n=5000):
    keys = [f"k{i % 37}" if i % 3 else "hot" for i in range(n)]
    return pa.table({"k": keys, "v": list(range(n))})


@pytest.mark.parametrize("reducer", [dpa.Count(), dpa.Sum("v"), dpa.Max("v"), dpa.Mean("v")])
def test_partials_from_several_blocks_give_the_raw_result(reducer):
    raw = _raw()
    parts = [reducer.partial_from_batch(raw.slice(i, 1000), ["k"], WEIGHT_COL) for i in range(0, raw.num_rows, 1000)]
    combined = pa.concat_tables(parts)
    cfg = dpa.JobConfig(runtime="local", policy="doubling", max_rounds=1, batch_size=40, input_combined=True)
    got = dpa.run(combined, key="k", reducer=reducer, config=cfg)
    want = dpa.run(raw, key="k", reducer=reducer, config=dpa.JobConfig(runtime="local"))
    assert got.to_dict() == pytest.approx(want.to_dict()) if isinstance(reducer, dpa.Mean) else got.to_dict() == want.to_dict()
    # counters stay in records, not partial rows
    assert sum(got.stats.processed) == raw.num_rows == sum(got.stats.emitted)
    if isinstance(reducer, dpa.Count):
        assert got.to_dict() == dict(collections.Counter(raw["k"].to_pylist()))


def test_bad_combined_input_is_refused_before_running():
    partial = dpa.Count().partial_from_batch(_raw(), ["k"], WEIGHT_COL)
    with pytest.raises(SchemaError, match=WEIGHT_COL):
        dpa.run(partial.drop_columns([WEIGHT_COL]), key="k",
                config=dpa.JobConfig(runtime="local", input_combined=True))
    with pytest.raises(ConfigError, match="accepts map-side combined rows.*got .pkg."):
        dpa.run(partial, key="k", config=dpa.JobConfig(runtime="local", policy="pkg", input_combined=True))
    with pytest.raises(ConfigError, match="without cost"):
        dpa.run(partial, key="k", reducer=dpa.WithCost(dpa.Count(), 0.001),
                config=dpa.JobConfig(runtime="local", input_combined=True))
