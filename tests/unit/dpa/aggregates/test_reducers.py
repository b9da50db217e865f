"""The combine contract: merge algebra (Hypothesis) and columnar == scalar paths."""

from __future__ import annotations

import collections
import math

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpa
from dpa.aggregates.contract import Reducer
from dpa.aggregates.state import ColumnarState, DictState
from dpa.errors import ConfigError, SchemaError
from dpa.input.records import HASH_COL
from dpa.keys.columns import hash_key_columns

keys = st.sampled_from(["a", "b", "c", None, "ü", "d" * 50])
values = st.one_of(st.none(), st.integers(-1000, 1000))
rows = st.lists(st.tuples(keys, values), max_size=60)


def to_table(data):
    t = pa.table({"k": pa.array([k for k, _ in data], pa.string()), "v": pa.array([v for _, v in data], pa.int64())})
    return t.append_column(HASH_COL, pa.array(hash_key_columns(t, ["k"]), pa.uint32()))


def reference(reducer: Reducer, data):
    """The scalar contract, applied record by record: the specification."""
    accs: dict = {}
    for k, v in data:
        accs[k] = reducer.add(accs.get(k, reducer.create()) if k in accs else reducer.create(), v)
    return {k: reducer.finalize(a) for k, a in accs.items()}


def run_split(reducer, data, cuts, nparts):
    """Columnar path: data cut into batches spread over states, then partitioned-merged."""
    states = [ColumnarState(reducer, ["k"]) for _ in range(nparts)]
    bounds = sorted({0, len(data), *[c % (len(data) + 1) for c in cuts]})
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        states[i % nparts].add(to_table(data[lo:hi]))
    parts = [s.partition(nparts) for s in states]
    finals = [ColumnarState(reducer, ["k"]) for _ in range(nparts)]
    for p in parts:
        for j in range(nparts):
            finals[j].add_partial(p[j])
    out = {}
    for f in finals:
        t = f.finalize()
        if t is not None:
            for k, v in zip(t["k"].to_pylist(), t[reducer.name].to_pylist()):
                assert k not in out, "a key finalized on two reducers"
                out[k] = v
    return out


def normalize(reducer, result):
    if isinstance(reducer, dpa.Collect):
        return {k: sorted(v, key=lambda x: (x is None, x)) for k, v in result.items()}
    if isinstance(reducer, dpa.Mean):
        return {k: None if v is None else round(v, 9) for k, v in result.items()}
    return result


BUILTINS = [dpa.Count(), dpa.Count("v"), dpa.Sum("v"), dpa.Min("v"), dpa.Max("v"), dpa.Mean("v"), dpa.Collect("v"), dpa.TopK("v", k=3)]


@pytest.mark.parametrize("reducer", BUILTINS, ids=repr)
@settings(max_examples=60, deadline=None)
@given(data=rows, cuts=st.lists(st.integers(0, 100), max_size=5), nparts=st.integers(1, 4))
def test_columnar_split_merge_equals_scalar_reference(reducer, data, cuts, nparts):
    assert normalize(reducer, run_split(reducer, data, cuts, nparts)) == normalize(reducer, reference(reducer, data))


@pytest.mark.parametrize("reducer", BUILTINS, ids=repr)
@settings(max_examples=60, deadline=None)
@given(a=st.lists(values, max_size=8), b=st.lists(values, max_size=8), c=st.lists(values, max_size=8))
def test_merge_is_associative_and_commutative(reducer, a, b, c):
    def acc(vs):
        x = reducer.create()
        for v in vs:
            x = reducer.add(x, v)
        return x

    def fin(x):
        out = reducer.finalize(x)
        if isinstance(reducer, dpa.Collect):
            return sorted(out, key=lambda v: (v is None, v))
        if isinstance(out, float):
            return round(out, 9)
        return out

    ab_c = reducer.merge(reducer.merge(acc(a), acc(b)), acc(c))
    a_bc = reducer.merge(acc(a), reducer.merge(acc(b), acc(c)))
    assert fin(ab_c) == fin(a_bc) == fin(acc(a + b + c))
    assert fin(reducer.merge(acc(a), acc(b))) == fin(reducer.merge(acc(b), acc(a)))


def test_mean_of_all_nulls_is_null_and_sum_of_all_nulls_is_null():
    data = [("a", None), ("a", None), ("b", 2)]
    assert run_split(dpa.Mean("v"), data, [1], 2) == {"a": None, "b": 2.0}
    assert run_split(dpa.Sum("v"), data, [1], 2) == {"a": None, "b": 2}


def test_topk_keeps_keys_whose_values_are_all_null():
    data = [("a", None), ("b", 5), ("b", 7), ("b", 1)]
    assert run_split(dpa.TopK("v", k=2), data, [1, 2], 3) == {"a": [], "b": [7, 5]}


class Concat(Reducer):
    """A user-defined reducer: joins words (order-insensitive check)."""

    def create(self):
        return []

    def add(self, acc, value):
        return acc + [value["w"]]

    def merge(self, a, b):
        return a + b

    def finalize(self, acc):
        return ",".join(sorted(acc))


def test_dict_state_user_reducer_partition_merge():
    t = pa.table({"k": ["x", "y", "x"], "w": ["b", "c", "a"]})
    t = t.append_column(HASH_COL, pa.array(hash_key_columns(t, ["k"]), pa.uint32()))
    s1, s2 = DictState(Concat(), ["k"], "dict"), DictState(Concat(), ["k"], "dict")
    s1.add(t.slice(0, 2))
    s2.add(t.slice(2))
    p1, p2 = s1.partition(2), s2.partition(2)
    outs = {}
    for j in range(2):
        f = DictState(Concat(), ["k"], "dict")
        f.set_key_schema(pa.schema([t.schema.field("k")]))
        f.add_partial(p1[j])
        f.add_partial(p2[j])
        res = f.finalize()
        if res is not None:
            outs.update(dict(zip(res["k"].to_pylist(), res["result"].to_pylist())))
    assert outs == {"x": "a,b", "y": "c"}


def test_reducer_without_merge_is_detected():
    class NoMerge(Reducer):
        def create(self):
            return 0

        def add(self, acc, v):
            return acc + 1

    assert not NoMerge().can_merge
    assert Concat().can_merge
    assert dpa.WithCost(Concat(), 0.0).can_merge


def test_sum_of_strings_is_a_clear_schema_error():
    with pytest.raises(SchemaError, match="numeric"):
        dpa.Sum("s").validate(pa.schema([("s", pa.string())]))


def test_bad_reducer_arguments():
    with pytest.raises(ConfigError):
        dpa.TopK("v", k=0)
    with pytest.raises(ConfigError):
        dpa.WithCost(dpa.Count(), -1)
    with pytest.raises(ConfigError):
        dpa.WithCost(dpa.Count(), 0.1, mode="nap")


def test_counter_reference_sanity():
    data = [("a", 1), ("b", 2), ("a", 3)]
    assert run_split(dpa.Count(), data, [1], 2) == dict(collections.Counter(k for k, _ in data))
    assert math.isclose(run_split(dpa.Mean("v"), data, [2], 2)["a"], 2.0)


# --------------------------------------------------------------------------- output types

_TYPES = [pa.int8(), pa.int32(), pa.int64(), pa.uint16(), pa.float32(), pa.float64(), pa.decimal128(3, 0),
          pa.decimal128(30, 4), pa.string(), pa.date32(), pa.bool_()]


@pytest.mark.parametrize("reducer", [dpa.Count(), dpa.Sum("v"), dpa.Min("v"), dpa.Max("v"), dpa.Mean("v"),
                                     dpa.Collect("v"), dpa.TopK("v", k=2)], ids=repr)
@pytest.mark.parametrize("dtype", _TYPES, ids=str)
def test_output_field_is_the_type_the_reducer_produces(reducer, dtype):
    """What a reducer says it outputs (what bridges type results by) is what it outputs."""
    schema = pa.schema([("v", dtype)])
    try:
        field = reducer.output_field(schema)
    except SchemaError:
        assert isinstance(reducer, (dpa.Sum, dpa.Mean)) and not pa.types.is_integer(dtype)
        return
    if pa.types.is_string(dtype) or pa.types.is_date(dtype) or pa.types.is_boolean(dtype):
        values = pa.nulls(3, dtype)
    else:
        values = pa.array([1, 2, None], pa.int8()).cast(dtype)
    table = pa.table({"k": [1, 1, 2], "v": values})
    part = reducer.partial_from_batch(table, ["k"])
    out = reducer.finalize_table(reducer.merge_partials(pa.concat_tables([part, part]), ["k"]), ["k"])
    assert field.name == reducer.name
    assert out.schema.field(reducer.name).type == field.type


def test_output_field_of_wrappers_and_user_reducers():
    schema = pa.schema([("v", pa.decimal128(5, 2))])
    assert dpa.WithCost(dpa.Sum("v"), 0.001).output_field(schema).type == pa.decimal128(15, 2)
    assert not dpa.Count().output_field(None).nullable

    class Mine(Reducer):
        def create(self):
            return 0

    assert Mine("v").output_field(schema) is None  # known only from its results
    with pytest.raises(SchemaError, match="Sum\\('v'\\) needs a numeric column"):
        dpa.Sum("v").output_field(pa.schema([("v", pa.string())]))


def test_topk_ranks_nan_above_every_number_whatever_the_order():
    import itertools

    nan = float("nan")
    for order in itertools.permutations([nan, 2.5, -1.0, nan]):
        r = dpa.TopK("x", 3)
        acc = r.create()
        for v in order:
            acc = r.add(acc, v)
        assert math.isnan(acc[0]) and math.isnan(acc[1]) and acc[2] == 2.5
        merged = r.merge(r.add_batch(r.create(), list(order[:2])), r.add_batch(r.create(), list(order[2:])))
        assert math.isnan(merged[0]) and math.isnan(merged[1]) and merged[2] == 2.5
    only = dpa.TopK("x", 2).add_batch([], [nan, None])
    assert len(only) == 1 and math.isnan(only[0])


@pytest.mark.parametrize("reducer", [dpa.Count(), dpa.Sum("v"), dpa.Mean("v"), dpa.Min("v"), dpa.Count(name="n"),
                                     dpa.Count("v")],
                         ids=["count", "sum", "mean", "min", "count-named", "count-column"])
def test_partial_from_batch_weight_is_the_record_count(reducer):
    # Count()'s state doubles as the weight column; the others' weight is its own count_all
    # (Count("v")'s state counts v's non-null values instead).
    table = pa.table({"k": [1, 2, 1, None, 1], "v": [1.0, None, 3.0, 4.0, 5.0]})
    part = reducer.partial_from_batch(table, ["k"], "__w").sort_by("k")
    assert part.column_names == ["k", *reducer.state_columns(), "__w"]
    assert part["__w"].to_pylist() == [3, 1, 1]
    if reducer.column is not None and isinstance(reducer, dpa.Count):
        assert part["count"].to_pylist() == [3, 0, 1]
    assert part["k"].to_pylist() == [1, 2, None]
    assert reducer.partial_from_batch(table, ["k"]).column_names == ["k", *reducer.state_columns()]


def test_count_of_a_column_counts_its_non_null_values_nan_among_them():
    count = dpa.Count("x")
    assert (count.column, count.name, repr(count), count.input_columns()) == ("x", "count", "Count('x')", ["x"])
    assert count.add_batch(count.add(count.add(count.create(), None), float("nan")), [1.0, None]) == 2
    table = pa.table({"k": [1, 1, 2, 3], "x": [float("nan"), None, None, 2.0]})
    part = count.partial_from_batch(table, ["k"]).sort_by("k")
    assert part["count"].to_pylist() == [1, 0, 1]
    assert dpa.Count(name="n").column is None and repr(dpa.Count(name="n")) == "Count()"
    names = dpa.run(table, key="k", reducer=[dpa.Count(), dpa.Count("x"), dpa.Count("x", name="n")],
                    runtime="local").value_columns
    assert names == ["count(1)", "count(x)", "n"]


def test_count_of_a_missing_column_says_how_to_name_a_record_count():
    with pytest.raises(SchemaError, match=r"to count records under a name of your own, write dpa.Count\(name='n'\)"):
        dpa.run(pa.table({"k": [1]}), key="k", reducer=dpa.Count("n"), runtime="local")
