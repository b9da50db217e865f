"""The driver ships only the columns a job reads to the object store."""

from __future__ import annotations

import pyarrow as pa

import dpa
from dpa.aggregates.composite import combine
from dpa.engine.plan import build_plan
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
