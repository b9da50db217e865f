"""The driver ships only the columns a job reads to the object store."""

from __future__ import annotations

import pyarrow as pa

import dpa
from dpa.aggregates.composite import combine
from dpa.engine.planning import build_plan
from dpa.input.sources import normalize_source
from dpa.runtime.ray.driver import _project


def _plan(table: pa.Table, key, reducer, map_fn=None):
    config = dpa.JobConfig(runtime="local")
    return build_plan(normalize_source(table, None), key, reducer, map_fn, config)[0]


def test_a_job_ships_its_key_and_reducer_columns_only():
    table = pa.table({"k": [1, 2], "x": [1.0, 2.0], "unread": ["a", "b"], "y": [3, 4]})
    plan = _plan(table, key="k", reducer=combine([dpa.Count(), dpa.Sum("x"), dpa.Max("y")]))
    columns = plan.source_columns
    assert columns == {"k", "x", "y"}
    assert _project(table, columns).column_names == ["k", "x", "y"]
    assert _project(table, None) is table


def test_a_map_fn_or_key_function_sees_whole_records():
    table = pa.table({"k": [1, 2], "x": [1.0, 2.0]})
    assert _plan(table, key=lambda r: r["k"], reducer=dpa.Sum("x")).source_columns is None
    assert _plan(table, key="k", reducer=dpa.Count(), map_fn=lambda r: [r]).source_columns is None


def test_the_columns_a_job_reads_are_known_from_its_arguments_as_its_plan_says():
    from dpa.engine.planning import read_columns

    table = pa.table({"k": [1, 2], "j": [5, 6], "x": [1.0, 2.0], "y": [3, 4], "s": ["a", "b"]})
    config = dpa.JobConfig(runtime="local")
    jobs = [("k", dpa.Count(), None), ("k", combine([dpa.Count(), dpa.Sum("x"), dpa.Max("y")]), None),
            (["k", "j"], dpa.Mean("x"), None), ("k", dpa.WithCost(dpa.Sum("y"), 0.0), None),
            ("k", dpa.Collect("s"), None), (lambda r: r["k"], dpa.Sum("x"), None), ("k", dpa.Count(), lambda r: [r])]
    for key, reducer, map_fn in jobs:
        assert read_columns(key, reducer, map_fn, config) == _plan(table, key, reducer, map_fn).source_columns


def test_a_table_is_cut_by_the_bytes_of_the_columns_the_job_reads():
    import numpy as np

    from dpa.input.sources import AUTO_MAX_BLOCK_BYTES, DEFAULT_BATCH_SIZE

    rows = 4 * DEFAULT_BATCH_SIZE
    table = pa.table({"k": np.arange(rows) % 1000, "x": np.ones(rows),
                      **{f"unread{i}": np.zeros(rows) for i in range(AUTO_MAX_BLOCK_BYTES // (8 * rows) + 1)}})
    assert table.nbytes > AUTO_MAX_BLOCK_BYTES  # all columns: more than one block per mapper...
    config = dpa.JobConfig(runtime="local", num_mappers=1)
    source = normalize_source(table, None, 1)
    assert source.block_rows < rows
    plan, blocks = build_plan(source, "k", dpa.Sum("x"), None, config)
    assert plan.source_columns == {"k", "x"}  # ...the two it reads: one
    assert source.block_rows == rows and [b.num_rows for b in blocks] == [rows]
    given = normalize_source(table, 1000, 1)  # a batch_size given is kept
    build_plan(given, "k", dpa.Sum("x"), None, dpa.JobConfig(runtime="local", num_mappers=1, batch_size=1000))
    assert given.block_rows == 1000
