"""Result.to_ray_dataset(): the reducers' result blocks as a Ray Dataset, for every reducer."""

from __future__ import annotations

import inspect

import numpy as np
import pyarrow as pa
import pytest
import ray

import dpa
from dpa.aggregates.contract import Reducer

KEYS = 40
#: Reducers that read a boolean column (``b``); the others read ``v``.
BOOL_REDUCERS = {"CountIf", "Any", "All"}
#: Reducers whose answer depends on the order partial states merge in (sketches): the local
#: oracle is compared with them on keys and types only.
APPROXIMATE = {"ApproxCountDistinct", "ApproxQuantile", "Median"}


def _spread() -> Reducer:
    class Spread(Reducer):  # defined here: cloudpickle ships it by value to the actors
        """A user reducer without a columnar path: ``"min..max"`` of ``v`` as a string."""

        def __init__(self) -> None:
            super().__init__("v", "spread")

        def create(self):
            return None

        def add(self, acc, value):
            return (value, value) if acc is None else (min(acc[0], value), max(acc[1], value))

        def merge(self, a, b):
            return a if b is None else b if a is None else (min(a[0], b[0]), max(a[1], b[1]))

        def finalize(self, acc):
            return f"{acc[0]}..{acc[1]}"

    return Spread()


def _group_sizes():
    """``fn(group) -> (k, rows)``, made here so that the actors get it by value."""

    def sizes(pdf):
        return {"k": [int(pdf.k.iloc[0])], "rows": [len(pdf)]}

    return sizes


def _reducers() -> list[Reducer]:
    """One instance of every reducer dpa exports, reading column ``v`` where it reads one.

    Found from ``dpa.__all__``, so that a new built-in reducer is covered without editing
    this list: a reducer is built as ``cls("v")``, or ``cls()`` when it takes no column.
    """
    out: list[Reducer] = []
    for name in dpa.__all__:
        cls = getattr(dpa, name)
        if not (inspect.isclass(cls) and issubclass(cls, Reducer)) or cls is Reducer:
            continue
        if name == "WithCost":
            out.append(dpa.WithCost(dpa.Count(), 0.0))
            continue
        if name == "GroupApply":  # a per-group function: one row per key
            out.append(dpa.GroupApply(_group_sizes()))
            continue
        params = list(inspect.signature(cls.__init__).parameters)
        column = "b" if name in BOOL_REDUCERS else "v"
        if "by" in params:  # the value at a key's largest or smallest v (MaxBy, MinBy)
            out.append(cls("b", by="v"))
            continue
        out.append(cls(column) if "column" in params else cls())
    return [*out, _spread()]


def _table(rows: int = 3000, seed: int = 3) -> pa.Table:
    rng = np.random.default_rng(seed)
    keys = np.minimum(rng.zipf(1.3, rows), KEYS).astype(np.int64)
    v = rng.integers(-50, 50, rows).astype(np.int64)
    return pa.table({"k": keys, "v": v, "b": v % 3 == 0})


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by([("k", "ascending")])


def _canonical(table: pa.Table) -> pa.Table:
    """Sorted by key, list values sorted too (the order Collect gathers in is not fixed)."""
    table = _sorted(table)
    for i, field in enumerate(table.schema):
        if pa.types.is_list(field.type) or pa.types.is_large_list(field.type):
            values = [None if v is None else sorted(v) for v in table[field.name].to_pylist()]
            table = table.set_column(i, field, pa.array(values, field.type))
    return table


def _collected(ds) -> pa.Table:
    return pa.concat_tables(ray.get(list(ds.to_arrow_refs())))


@pytest.mark.parametrize("reducer", _reducers(), ids=repr)
def test_round_trips_every_reducer(ray_session, reducer):
    data = _table()
    source = ray.data.from_arrow([data.slice(0, 1500), data.slice(1500)])
    result = dpa.run(source, key="k", reducer=reducer, runtime="ray", num_mappers=2, num_reducers=4)
    ds = result.to_ray_dataset()
    got = _collected(ds)
    want = result.to_arrow()
    assert got.schema.equals(want.schema), (got.schema, want.schema)
    assert _sorted(got).equals(_sorted(want))
    # The local oracle agrees too, through its own to_ray_dataset().
    local = dpa.run(data, key="k", reducer=reducer, runtime="local", num_mappers=2, num_reducers=4)
    ours, theirs = _canonical(_collected(local.to_ray_dataset())), _canonical(want)
    assert ours.schema.equals(theirs.schema) and ours["k"].equals(theirs["k"])
    if type(reducer).__name__ in APPROXIMATE:
        return
    for name in ours.column_names[1:]:
        a, b = ours[name].to_pylist(), theirs[name].to_pylist()
        if pa.types.is_floating(ours.schema.field(name).type):  # sums in another order
            assert np.allclose(np.array(a, dtype=float), np.array(b, dtype=float), rtol=1e-9, equal_nan=True)
        else:
            assert a == b


def test_blocks_are_the_reducers_own_objects(ray_session):
    result = dpa.run(_table(), key="k", reducer=dpa.Sum("v"), runtime="ray", num_mappers=2, num_reducers=4)
    ds = result.to_ray_dataset()
    assert result.to_ray_dataset() is ds  # built once
    blocks = {r.hex() for r in ds.to_arrow_refs()}
    assert blocks <= {r.hex() for r in result.arrow_refs}  # no copy made on the driver
    assert ds.count() == KEYS or ds.count() == len(result)


def test_blocks_of_different_types_are_promoted(ray_session):
    # Keys 0..19 have int64 values, keys 20..39 float64: reducers holding only one kind
    # type their Max output differently; the dataset promotes as to_arrow() does.
    ints = pa.table({"k": np.arange(20, dtype=np.int64), "v": np.arange(20, dtype=np.int64)})
    floats = pa.table({"k": np.arange(20, 40, dtype=np.int64), "v": np.arange(20, 40, dtype=np.float64) + 0.5})
    source = ray.data.from_arrow([ints, floats])
    result = dpa.run(source, key="k", reducer=dpa.Max("v"), runtime="ray", num_mappers=2, num_reducers=8)
    got = _collected(result.to_ray_dataset())
    want = result.to_arrow()
    assert got.schema.field("max" if "max" in got.column_names else result.value_column).type == pa.float64()
    assert _sorted(got).equals(_sorted(want))


def test_empty_result_keeps_its_schema(ray_session):
    empty = pa.table({"k": pa.array([], pa.int64()), "v": pa.array([], pa.int64())})
    result = dpa.run(ray.data.from_arrow(empty), key="k", reducer=dpa.Sum("v"), runtime="ray")
    ds = result.to_ray_dataset()
    assert ds.count() == 0
    assert ds.schema().names == ["k", result.value_column]


@pytest.mark.parametrize("method", ["count", "sum", "min", "max", "mean"])
def test_groupby_equals_ray_datas_own(ray_session, method):
    source = ray.data.from_arrow([_table(seed=5).slice(0, 1500), _table(seed=5).slice(1500)])
    args = () if method == "count" else ("v",)
    got = getattr(dpa.groupby(source, "k", num_mappers=2, num_reducers=4), method)(*args)
    want = getattr(source.groupby("k"), method)(*args)
    got_t = _sorted(_collected(got))
    want_t = _sorted(pa.Table.from_pandas(want.to_pandas(), preserve_index=False))
    assert got_t.column_names == want_t.column_names
    assert got_t["k"].to_pylist() == want_t["k"].to_pylist()
    g, w = got_t.column(1).to_pylist(), want_t.column(1).to_pylist()
    assert g == pytest.approx(w) if method == "mean" else g == w


def _numeric(seed: int = 7) -> pa.Table:
    """``k``, int ``v`` and a float ``w`` with nulls: every column aggregable by every method."""
    data = _table(seed=seed)
    w = np.random.default_rng(seed).normal(10.0, 3.0, data.num_rows)
    return pa.table({"k": data["k"], "v": data["v"],
                     "w": pa.array(w, mask=np.arange(data.num_rows) % 7 == 0)})


def _values(table: pa.Table, column: int) -> list:
    """A column's values with NaN as None (Ray Data's deviation of one value is NaN, dpa's null)."""
    return [None if isinstance(x, float) and x != x else x for x in table.column(column).to_pylist()]


@pytest.mark.parametrize("method, args, kwargs", [
    ("sum", (["v", "w"],), {}),
    ("min", (), {}),
    ("max", (["w", "v"],), {}),
    ("mean", (), {}),
    ("std", ("w",), {"ddof": 0}),
    ("std", (), {}),
], ids=["sum-list", "min-all", "max-list", "mean-all", "std-pop", "std-all"])
def test_groupby_over_several_columns_equals_ray_datas_own(ray_session, method, args, kwargs):
    data = _numeric()
    source = ray.data.from_arrow([data.slice(0, 1500), data.slice(1500)])
    got = _sorted(_collected(getattr(dpa.groupby(source, "k", num_mappers=2, num_reducers=4), method)(*args, **kwargs)))
    want = getattr(source.groupby("k"), method)(*args, **kwargs)
    want = _sorted(pa.Table.from_pandas(want.to_pandas(), preserve_index=False))
    assert got.column_names == want.column_names
    assert got["k"].to_pylist() == want["k"].to_pylist()
    for i in range(1, got.num_columns):
        g, w = _values(got, i), _values(want, i)
        assert [x is None for x in g] == [x is None for x in w], got.column_names[i]
        assert [x for x in g if x is not None] == pytest.approx([x for x in w if x is not None]), got.column_names[i]


def test_groupby_aggregate_runs_several_reducers_in_one_job(ray_session):
    from ray.data.aggregate import Count, Max, Mean, Std, Sum

    data = _numeric(seed=11)
    source = ray.data.from_arrow([data.slice(0, 1500), data.slice(1500)])
    grouped = dpa.groupby(source, "k", num_mappers=2, num_reducers=4)
    got = _sorted(_collected(grouped.aggregate(dpa.Count(), dpa.Sum("v"), dpa.Mean("w"), dpa.Std("w"), dpa.Max("v"))))
    assert got.column_names == ["k", "count(1)", "sum(v)", "avg(w)", "stddev_samp(w)", "max(v)"]
    as_list = _sorted(_collected(grouped.aggregate([dpa.Count(), dpa.Sum("v"), dpa.Mean("w"), dpa.Std("w"),
                                                    dpa.Max("v")])))
    assert as_list.equals(got)
    want = source.groupby("k").aggregate(Count(), Sum("v"), Mean("w"), Std("w"), Max("v"))
    want = _sorted(pa.Table.from_pandas(want.to_pandas(), preserve_index=False))
    assert got["k"].to_pylist() == want["k"].to_pylist()
    for i in range(1, got.num_columns):
        g, w = _values(got, i), _values(want, i)
        assert [x is None for x in g] == [x is None for x in w], got.column_names[i]
        assert [x for x in g if x is not None] == pytest.approx([x for x in w if x is not None]), got.column_names[i]


def test_groupby_rejects_bad_input():
    with pytest.raises(dpa.ConfigError, match="groupby key"):
        dpa.groupby(None, 3)
    with pytest.raises(dpa.ConfigError, match="dpa.Reducer"):
        dpa.groupby(None, "k").aggregate("sum")
    with pytest.raises(dpa.ConfigError, match="at least one dpa.Reducer"):
        dpa.groupby(None, "k").aggregate()


def test_a_materialized_dataset_is_planned_without_running_a_ray_data_job(ray_session, monkeypatch):
    from ray.data.dataset import Dataset

    def no_jobs(*args, **kwargs):
        raise AssertionError("a Ray Data job ran to read the dataset's first rows")

    source = ray.data.from_arrow([_table(seed=7).slice(0, 0), _table(seed=7)]).materialize()
    monkeypatch.setattr(Dataset, "take_batch", no_jobs)
    monkeypatch.setattr(Dataset, "count", no_jobs)
    result = dpa.run(source, key="k", reducer=dpa.Sum("v"), runtime="ray", num_mappers=2, num_reducers=2)
    want = _table(seed=7).group_by("k").aggregate([("v", "sum")])
    assert dict(zip(want["k"].to_pylist(), want["v_sum"].to_pylist())) == result.to_dict()
    monkeypatch.undo()
    empty = ray.data.from_arrow(_table().slice(0, 0)).materialize()
    assert len(dpa.run(empty, key="k", reducer=dpa.Sum("v"), runtime="ray")) == 0


def test_a_materialized_datasets_small_blocks_are_read_in_runs(ray_session):
    table = _table(seed=9)
    want = dict(zip(*table.group_by("k").aggregate([("v", "sum")]).select(["k", "v_sum"]).to_pydict().values()))
    arrow = ray.data.from_arrow([table.slice(i, 250) for i in range(0, table.num_rows, 250)])  # 12 blocks
    pandas = ray.data.from_pandas([table.slice(i, 500).to_pandas() for i in range(0, table.num_rows, 500)])
    for source, blocks in ((arrow, 12), (pandas, 6)):
        # By default, a dataset this small is one run (one input block, as a table of its size).
        result = dpa.run(source, key="k", reducer=dpa.Sum("v"), runtime="ray", num_mappers=2, num_reducers=2)
        assert result.to_dict() == want and sum(result.stats.blocks_per_mapper) == 1
        # Given batch_size: runs of about that many rows.
        result = dpa.run(source, key="k", reducer=dpa.Sum("v"), runtime="ray", num_mappers=2, num_reducers=2,
                         batch_size=1000)
        assert result.to_dict() == want and sum(result.stats.blocks_per_mapper) == 3
        result = dpa.run(source, key="k", reducer=dpa.Sum("v"), runtime="ray", num_mappers=2, num_reducers=2,
                         batch_size=1)
        assert result.to_dict() == want and sum(result.stats.blocks_per_mapper) == blocks


def test_a_lazy_dataset_is_probed_once_and_read_as_it_streams(ray_session):
    source = ray.data.from_arrow(_table(seed=8)).map_batches(lambda b: b, batch_format="pyarrow")
    result = dpa.run(source, key="k", reducer=dpa.Count(), runtime="ray", num_mappers=2, num_reducers=2)
    assert sum(result.to_dict().values()) == 3000
