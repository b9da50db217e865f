"""dpa.groupby's Ray-Data-shaped methods: what each asks dpa to compute, and bad input.

The jobs themselves run on Ray in ``tests/integration/dpa/test_ray_dataset.py``; here
``aggregate`` is replaced by a recorder, so the checks need no Ray.
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

import dpa
from dpa.groupby import GroupedDataset

TABLE = pa.table({"k": [1, 2], "v": [1, 2], "w": [0.5, 1.5], "s": ["a", "b"]})


@pytest.fixture
def asked(monkeypatch):
    """The reducers each method hands to ``aggregate``, as (type name, column, output name)."""
    calls: list[list[tuple[str, str | None, str]]] = []

    def record(self, *reducers):
        calls.append([(type(r).__name__, r.column, r.name) for r in reducers])
        return "dataset"

    monkeypatch.setattr(GroupedDataset, "aggregate", record)
    return calls


def test_one_column_list_or_all_columns_name_their_outputs_as_ray_data(asked):
    g = dpa.groupby(TABLE, "k")
    assert g.sum("v") == "dataset"
    g.min(["v", "w"])
    g.max(on=None)
    g.mean(("w",))
    assert asked == [
        [("Sum", "v", "sum(v)")],
        [("Min", "v", "min(v)"), ("Min", "w", "min(w)")],
        [("Max", "v", "max(v)"), ("Max", "w", "max(w)"), ("Max", "s", "max(s)")],
        [("Mean", "w", "mean(w)")],
    ]


def test_all_columns_leave_out_every_key_column_and_read_pandas_columns(asked):
    dpa.groupby(TABLE, ["k", "s"]).sum()
    dpa.groupby(TABLE.to_pandas(), "s").mean()
    assert asked == [[("Sum", "v", "sum(v)"), ("Sum", "w", "sum(w)")],
                     [("Mean", "k", "mean(k)"), ("Mean", "v", "mean(v)"), ("Mean", "w", "mean(w)")]]


@pytest.mark.parametrize("ddof, sample", [(1, True), (0, False)])
def test_std_takes_ray_datas_ddof(monkeypatch, ddof, sample):
    given = []
    monkeypatch.setattr(GroupedDataset, "aggregate", lambda self, *reducers: given.extend(reducers))
    dpa.groupby(TABLE, "k").std(["v", "w"], ddof=ddof)
    assert [(type(r).__name__, r.column, r.name, r.sample) for r in given] == [
        ("Std", "v", "std(v)", sample), ("Std", "w", "std(w)", sample)]


@pytest.mark.parametrize("call, message", [
    (lambda g: g.std("v", ddof=2), "ddof=1 .sample. or ddof=0"),
    (lambda g: g.std("v", ddof=True), "ddof=1 .sample. or ddof=0"),
    (lambda g: g.sum("v", ignore_nulls=False), "only ignore_nulls=True"),
    (lambda g: g.mean([]), "non-empty list"),
    (lambda g: g.max(3), "non-empty list"),
    (lambda g: g.min(["v", "v"]), "column twice"),
])
def test_bad_arguments_fail_before_any_job(asked, call, message):
    with pytest.raises(dpa.ConfigError, match=message):
        call(dpa.groupby(TABLE, "k"))
    assert asked == []


def test_all_columns_of_a_source_without_a_known_schema_must_be_named(asked):
    with pytest.raises(dpa.ConfigError, match=r"not known before it is read; name them: sum\(on=\[...\]\)"):
        dpa.groupby(iter([{"k": 1, "v": 2}]), "k").sum()
    with pytest.raises(dpa.ConfigError, match="no column besides the key"):
        dpa.groupby(pa.table({"k": [1]}), "k").mean()
    with pytest.raises(dpa.ConfigError, match="no column besides the key"):
        dpa.groupby(pd.DataFrame({"k": [1]}), "k").mean()


@pytest.mark.parametrize("args, message", [
    ((), "at least one dpa.Reducer"),
    (([],), "at least one dpa.Reducer"),
    (("sum",), r"got str; Ray Data's AggregateFn"),
    ((dpa.Count(), 3), r"got int \(argument 2\)"),
    (([dpa.Count(), dpa.Sum("v"), None],), r"got NoneType \(argument 3\)"),
])
def test_aggregate_takes_dpa_reducers_only(args, message):
    with pytest.raises(dpa.ConfigError, match=message):
        dpa.groupby(TABLE, "k").aggregate(*args)


def test_aggregate_runs_several_reducers_as_one_list(monkeypatch):
    ran = []
    monkeypatch.setattr(GroupedDataset, "run", lambda self, reducer: ran.append(reducer) or _Result())
    g = dpa.groupby(TABLE, "k")
    a, b = dpa.Count(), dpa.Sum("v")
    g.aggregate(a, b)
    g.aggregate([a, b])
    g.aggregate(a)
    assert ran == [[a, b], [a, b], a]


class _Result:
    def to_ray_dataset(self):
        return "dataset"
