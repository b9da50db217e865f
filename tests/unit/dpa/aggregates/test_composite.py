"""Several aggregates per job: one pass, one row per key, one column per aggregate."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pyarrow as pa
import pytest

import dpa
from dpa.aggregates.composite import Aggregates, RecordAggregates, combine
from dpa.errors import ConfigError, SchemaError
from dpa.input.records import WEIGHT_COL


@pytest.fixture
def table() -> pa.Table:
    rng = np.random.default_rng(1)
    n = 6000
    return pa.table({"k": (rng.zipf(1.4, n) % 40).astype(np.int64), "x": rng.integers(-50, 50, n),
                     "s": [f"s{v}" for v in rng.integers(0, 30, n)]})


def _expected(table: pa.Table) -> dict:
    count, total, distinct = Counter(), defaultdict(int), defaultdict(set)
    for k, x, s in zip(*(table[c].to_pylist() for c in ("k", "x", "s"))):
        count[k] += 1
        total[k] += x
        distinct[k].add(s)
    return {k: (count[k], total[k], len(distinct[k])) for k in count}


@pytest.mark.parametrize("policy", ["hybrid", "hash", "shuffle", "pkg", "halving"])
def test_one_pass_equals_separate_jobs(table, policy):
    result = dpa.run(table, key="k", reducer=[dpa.Count(), dpa.Sum("x"), dpa.CountDistinct("s")],
                     runtime="local", policy=policy, batch_size=500)
    assert result.to_arrow().column_names == ["k", "count(1)", "sum(x)", "count(DISTINCT s)"]
    assert result.to_dict() == _expected(table)
    assert result.value_columns == ["count(1)", "sum(x)", "count(DISTINCT s)"]
    assert result.to_dict(row="dict")[0] == dict(zip(result.value_columns, _expected(table)[0]))
    if policy in ("shuffle", "pkg"):
        assert result.stats.merged_keys > 0
    assert list(result.to_pandas().columns) == ["k", "count(1)", "sum(x)", "count(DISTINCT s)"]


def test_names_aliases_and_clashes(table):
    out = dpa.run(table, key="k", reducer=[dpa.Sum("x").alias("total"), dpa.Sum("x", name="again"),
                                           dpa.Mean("x"), dpa.TopK("x", k=2), dpa.Collect("s")], runtime="local")
    assert out.to_arrow().column_names == ["k", "total", "again", "avg(x)", "top_k(x, 2)", "collect_list(s)"]
    with pytest.raises(ConfigError, match="both named 'sum\\(x\\)'.*alias"):
        dpa.run(table, key="k", reducer=[dpa.Sum("x"), dpa.Sum("x")], runtime="local")
    with pytest.raises(ConfigError, match="named 'k' like a key column"):
        dpa.run(table, key="k", reducer=[dpa.Sum("x").alias("k")], runtime="local")
    with pytest.raises(ConfigError, match="empty list"):
        dpa.run(table, key="k", reducer=[], runtime="local")
    with pytest.raises(ConfigError, match=r"reducer\[1\] must be a dpa.Reducer"):
        dpa.run(table, key="k", reducer=[dpa.Count(), "sum"], runtime="local")
    with pytest.raises(SchemaError, match="'nope'"):
        dpa.run(table, key="k", reducer=[dpa.Count(), dpa.Sum("nope")], runtime="local")
    with pytest.raises(SchemaError, match="numeric"):
        dpa.run(table, key="k", reducer=[dpa.Count(), dpa.Var("s")], runtime="local")
    with pytest.raises(ValueError, match="row must be"):
        out.to_dict(row="list")


def test_costs_add_up_and_stay_outside():
    reducer = combine([dpa.WithCost(dpa.Count(), 0.001), dpa.WithCost(dpa.CountDistinct("s"), 0.002)])
    assert isinstance(reducer, dpa.WithCost) and reducer.seconds_per_record == pytest.approx(0.003)
    assert isinstance(reducer.inner, Aggregates)
    assert [m.name for m in reducer.inner.members] == ["count(1)", "count(DISTINCT s)"]


def test_user_reducer_without_merge_keeps_keys_whole(table):
    class NoMerge(dpa.Reducer):
        def create(self):
            return 0

        def add(self, acc, record):
            return acc + 1

    reducers = [dpa.Sum("x"), NoMerge(name="n")]
    assert isinstance(combine(reducers), RecordAggregates)
    out = dpa.run(table, key="k", reducer=reducers, runtime="local")  # the default policy falls back to hash
    assert {k: (s, n) for k, (s, n) in out.to_dict().items()} == {k: (t, c) for k, (c, t, _) in _expected(table).items()}
    with pytest.raises(ConfigError, match="does not implement merge\\(\\), but policy 'shuffle'"):
        dpa.run(table, key="k", reducer=reducers, runtime="local", policy="shuffle")


@pytest.mark.parametrize("policy", ["shuffle", "hash"])
def test_user_reducer_with_merge_on_records(tally, policy):
    records = [{"k": i % 7, "x": i} for i in range(700)]
    out = dpa.run(records, key="k", reducer=[tally(name="n"), dpa.Sum("x"), dpa.CountDistinct("x")],
                  runtime="local", policy=policy, batch_size=50).to_dict()
    assert out[3] == (100, sum(i for i in range(700) if i % 7 == 3), 100)
    tuples = [(i % 3, float(i)) for i in range(90)]
    out = dpa.run(tuples, key=0, reducer=[tally(name="n"), dpa.Max("f1")], runtime="local", policy=policy).to_dict()
    assert out[2] == (30, 89.0)
    scalars = [i % 4 for i in range(40)]
    assert dpa.run(scalars, reducer=[dpa.Count(), dpa.Sum()], runtime="local").to_dict()[3] == (10, 30)


def test_partial_states_and_input_combined(table):
    reducer = combine([dpa.Count(), dpa.Sum("x"), dpa.Var("x"), dpa.CountDistinct("s")])
    partial = reducer.partial_from_batch(table.append_column("__dpa_h", pa.array(np.zeros(len(table), np.uint32))),
                                         ["k", "__dpa_h"], WEIGHT_COL)
    assert partial.column_names == ["k", "__dpa_h", *reducer.state_columns(), WEIGHT_COL]
    assert partial[WEIGHT_COL].to_pylist() == partial["__a0_count"].to_pylist()
    combined = partial.drop(["__dpa_h"])
    out = dpa.run(pa.concat_tables([combined, combined]), key="k", reducer=reducer, runtime="local",
                  input_combined=True).to_dict()
    want = _expected(table)
    for k, (c, t, d) in want.items():
        assert out[k][0] == 2 * c and out[k][1] == 2 * t and out[k][3] == d


def test_empty_input_has_every_column():
    empty = pa.table({"k": pa.array([], pa.string()), "x": pa.array([], pa.float64())})
    out = dpa.run(empty, key="k", reducer=[dpa.Count(), dpa.Median("x"), dpa.CollectSet("x")], runtime="local")
    assert out.to_arrow().schema.names == ["k", "count(1)", "median(x)", "collect_set(x)"]
    assert out.to_dict() == {}


def test_members_share_one_aggregate_and_merge_by_group_id(table):
    """Mean and Std of one column count it once; Max of integers joins the shared group-by;
    Std merges by the composite's group ids; the merged states equal a single-pass state."""
    reducer = combine([dpa.Count(), dpa.Mean("x"), dpa.Std("x"), dpa.Max("x")])
    hashed = table.append_column("__dpa_h", pa.array(np.zeros(len(table), np.uint32)))
    group_cols = ["k", "__dpa_h"]
    whole = reducer.partial_from_batch(hashed, group_cols)
    assert whole["__a1_mcount"].equals(whole["__a2_n"])  # (one count of x, two names)
    halves = [reducer.partial_from_batch(hashed.slice(i, 3000), group_cols) for i in (0, 3000)]
    merged = reducer.merge_partials(pa.concat_tables(halves), group_cols).sort_by("k")
    whole = whole.sort_by("k")
    assert merged.column_names == whole.column_names
    for name in merged.column_names:
        if name.startswith("__a2_"):
            assert np.allclose(merged[name].to_numpy(), whole[name].to_numpy(), rtol=1e-9), name
        else:
            assert merged[name].equals(whole[name]), name
    out = reducer.finalize_table(merged, ["k"]).to_pydict()
    xs = defaultdict(list)
    for k, x in zip(table["k"].to_pylist(), table["x"].to_pylist()):
        xs[k].append(x)
    for k, std in zip(out["k"], out["stddev_samp(x)"]):
        want = np.std(xs[k], ddof=1) if len(xs[k]) > 1 else None
        assert (std is None and want is None) or np.isclose(std, want), k


@pytest.mark.parametrize("x", [pa.array([1.5, -0.0, 2.0, None, 7.25, 3.0]), pa.array([1, 5, 2, None, 7, 3])],
                         ids=["float64", "int64"])
def test_members_reading_one_column_alike_compute_each_aggregate_once(monkeypatch, x):
    """Mean and Sum read x as it is (Mean sums integers exactly); Std reads it as float64 (a
    cast of an int column): the shared group-by sums x once and counts it once (a cast
    keeps the nulls, so Std's count of its view is the count of x)."""
    table = pa.table({"k": ["a", "b", "a", "a", "b", "c"], "x": x})
    asked: list[list] = []
    original = pa.TableGroupBy.aggregate

    def spy(self, aggregations):
        asked.append(list(aggregations))
        return original(self, aggregations)

    monkeypatch.setattr(pa.TableGroupBy, "aggregate", spy)
    reducer = combine([dpa.Count(), dpa.Mean("x"), dpa.Std("x"), dpa.Sum("x")])
    out = reducer.finalize_table(reducer.partial_from_batch(table, ["k"]), ["k"]).sort_by("k").to_pydict()
    (aggs,) = asked
    counts = [a for a in aggs if a[1] == "count"]
    assert len(counts) == 1, aggs
    assert sum(1 for a in aggs if a[1] == "sum") == 1, aggs
    values = [v for v in x.to_pylist()]
    assert out["avg(x)"][0] == pytest.approx(np.mean([values[0], values[2]]))  # (a's null is skipped)
    assert out["stddev_samp(x)"][0] == pytest.approx(np.std([values[0], values[2]], ddof=1))
    assert out["sum(x)"] == [values[0] + values[2], values[1] + values[4], values[5]]


def test_a_view_that_changes_values_is_kept_beside_the_column():
    """CountDistinct reads -0.0 as 0.0: its view differs from x bit for bit (though -0.0 ==
    0.0), so Sum beside it still reads x itself and CountDistinct its own view."""
    table = pa.table({"k": ["a"] * 4, "x": [-0.0, 0.0, 1.0, 1.0]})
    out = dpa.run(table, key="k", reducer=[dpa.CountDistinct("x"), dpa.Sum("x"), dpa.Min("x")],
                  runtime="local").to_dict()
    assert out == {"a": (2, 2.0, -0.0)}


def test_default_merge_by_group_id_orders_groups_by_id():
    states = pa.table({"count": pa.array([2, 5, 1, 4], pa.int64())})
    merged = dpa.Count().merge_groups(states, np.array([1, 0, 1, 2]), 3)
    assert merged.to_pydict() == {"count": [5, 3, 4]}


def test_by_group_id_orders_rows_and_keeps_a_table_in_order_as_it_is():
    from dpa.aggregates.contract import GROUP_ID_COL, by_group_id

    shuffled = pa.table({GROUP_ID_COL: pa.array([2, 0, 1], pa.int64()), "v": ["c", "a", "b"]})
    assert by_group_id(shuffled, 3)["v"].to_pylist() == ["a", "b", "c"]
    ordered = pa.table({GROUP_ID_COL: pa.array([0, 1, 2], pa.int64()), "v": ["a", "b", "c"]})
    assert by_group_id(ordered, 3) is ordered
    assert by_group_id(ordered.slice(0, 0), 0).num_rows == 0
    with pytest.raises(dpa.SchemaError):
        by_group_id(ordered, 4)
