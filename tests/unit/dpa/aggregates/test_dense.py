"""The group-by by key value (dense integer-like keys) gives Arrow's hash group-by's answer."""

from __future__ import annotations

import datetime
import math
from unittest import mock

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpa.aggregates import dense
from dpa.aggregates.composite import group_ids
from dpa.aggregates.dense import DENSE_SPAN_ROWS, DENSE_SPAN_SLACK, dense_keys, group_aggregate
from dpa.input.records import HASH_COL

KEY_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint32(), pa.uint64(), pa.date32(),
             pa.date64(), pa.timestamp("us"), pa.timestamp("ns", tz="Europe/Paris"), pa.time32("s"),
             pa.time64("us"), pa.duration("ms")]

AGGS = [([], "count_all"), ("i", "count"), ("i", "sum"), ("i", "mean"), ("i", "min"), ("i", "max"),
        ("x", "count"), ("x", "sum"), ("x", "mean"), ("x", "variance"), ("f", "sum"), ("f", "mean"),
        ("u", "sum"), ("u", "min"), ("u", "max"), ("s", "count"), ("b", "min"), ("b", "max")]

FLOATS = st.one_of(st.none(), st.just(math.nan), st.just(-0.0), st.just(math.inf),
                   st.floats(-1e9, 1e9, allow_nan=False, width=64))


def _key_array(offsets: list[int], dtype: pa.DataType) -> pa.Array:
    """Keys of ``dtype`` near the top of its range for uint64 (so the ids must not wrap)."""
    if pa.types.is_uint64(dtype):
        return pa.array([2**64 - 200 + o for o in offsets], dtype)
    if pa.types.is_date64(dtype):
        return pa.array([o * 86_400_000 for o in offsets], pa.int64()).view(dtype)
    width = 32 if pa.types.is_date32(dtype) or pa.types.is_time32(dtype) else 64
    storage = dtype if pa.types.is_integer(dtype) else (pa.int32() if width == 32 else pa.int64())
    return pa.array(offsets, storage).view(dtype) if storage != dtype else pa.array(offsets, dtype)


@st.composite
def tables(draw):
    dtype = draw(st.sampled_from(KEY_TYPES))
    n = draw(st.integers(1, 120))
    offsets = draw(st.lists(st.integers(0, 127), min_size=n, max_size=n))
    ints = draw(st.lists(st.one_of(st.none(), st.integers(-10**9, 10**9)), min_size=n, max_size=n))
    floats = draw(st.lists(FLOATS, min_size=n, max_size=n))
    small = draw(st.lists(st.one_of(st.none(), st.integers(0, 255)), min_size=n, max_size=n))
    strings = draw(st.lists(st.one_of(st.none(), st.text(max_size=2)), min_size=n, max_size=n))
    bools = draw(st.lists(st.one_of(st.none(), st.booleans()), min_size=n, max_size=n))
    table = pa.table({"k": _key_array(offsets, dtype), "i": pa.array(ints, pa.int64()),
                      "x": pa.array(floats, pa.float64()),
                      "f": pa.array([None if v is None else v for v in floats], pa.float32()),
                      "u": pa.array(small, pa.uint8()), "s": pa.array(strings, pa.string()),
                      "b": pa.array(bools, pa.bool_())})
    chunks = draw(st.integers(1, 3))  # (a table of several chunks reads the same)
    if chunks > 1 and n >= chunks:
        cut = n // chunks
        table = pa.concat_tables([table.slice(0, cut), table.slice(cut)])
    return table


def _same(a: pa.ChunkedArray, b: pa.ChunkedArray, rel: float = 0.0) -> bool:
    """Equal values and nulls, NaN equal to NaN, -0.0 told from 0.0 (by the bits); with
    ``rel``, floats within that relative difference."""
    if not a.type.equals(b.type):
        return False
    if rel and pa.types.is_floating(a.type):
        x, y = (np.asarray(pc.fill_null(v, -1.0).to_numpy(), dtype=np.float64) for v in (a, b))
        return (pc.is_null(a).equals(pc.is_null(b)) and bool(np.all(np.isnan(x) == np.isnan(y)))
                and bool(np.allclose(x, y, rtol=rel, atol=0.0, equal_nan=True)))
    if pa.types.is_floating(a.type):
        a, b = pc.cast(a, pa.float64()), pc.cast(b, pa.float64())
        bits = [pa.chunked_array([c.view(pa.int64()) for c in pa.chunked_array(x).chunks], pa.int64()) for x in (a, b)]
        nan_a = pc.fill_null(pc.is_nan(a), False)
        nan_b = pc.fill_null(pc.is_nan(b), False)
        return nan_a.equals(nan_b) and pc.if_else(nan_a, 0, bits[0]).equals(pc.if_else(nan_b, 0, bits[1]))
    return a.equals(b)


def _arrow(table: pa.Table, group_cols: list[str], aggs: list) -> pa.Table:
    return table.group_by(group_cols, use_threads=False).aggregate(aggs).sort_by(group_cols[0])


def every_batch_by_value():
    """Batches of any number of groups are grouped by key value (small tests have few)."""
    return mock.patch.object(dense, "DENSE_MIN_GROUPS", 0)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=tables())
def test_equals_arrow_group_by_for_every_integer_like_key(table):
    # (date64 holds milliseconds: whole days are too far apart to index, and go to Arrow)
    assert (dense_keys(table["k"]) is None) == (pa.types.is_date64(table["k"].type) and len(set(table["k"].to_pylist())) > 1)
    with every_batch_by_value():
        ours = group_aggregate(table, ["k"], AGGS).sort_by("k")
    theirs = _arrow(table, ["k"], AGGS)
    assert ours.schema.equals(theirs.schema)
    for name in ours.column_names:
        # Arrow merges the variances of its internal chunks (Chan et al.): last bits may differ.
        rel = 1e-12 if name.endswith("variance") else 0.0
        assert _same(ours[name], theirs[name], rel), (name, ours[name], theirs[name])


def test_rows_come_ordered_by_key():
    table = pa.table({"k": [5, 3, 5, 9, 3], "v": [1, 2, 3, 4, 5]})
    with every_batch_by_value():
        out = group_aggregate(table, ["k"], [("v", "sum")])
    assert out.to_pydict() == {"k": [3, 5, 9], "v_sum": [7, 4, 4]}


def test_few_groups_in_a_large_batch_go_to_arrow_unless_only_counted():
    rows = dense.DENSE_SMALL_ROWS + 1
    table = pa.table({"k": np.array([5, 3, 9])[np.arange(rows) % 3], "v": np.ones(rows, dtype=np.int64)})
    # Arrow keeps the keys in order of appearance; by key value they come sorted.
    assert group_aggregate(table, ["k"], [("v", "sum")])["k"].to_pylist() == [5, 3, 9]
    assert group_aggregate(table, ["k"], [([], "count_all"), ("v", "count")])["k"].to_pylist() == [3, 5, 9]
    n = dense.DENSE_MIN_GROUPS
    many = pa.table({"k": np.arange(rows)[::-1] % n, "v": np.ones(rows)})
    assert group_aggregate(many, ["k"], [("v", "sum")])["k"].to_pylist()[:2] == [0, 1]


def test_small_batches_are_grouped_by_value_whatever_their_groups():
    table = pa.table({"k": [5, 3, 5, 9, 3], "v": [1, 2, 3, 4, 5]})
    out = group_aggregate(table, ["k"], [("v", "sum"), ("v", "max")])
    assert out.to_pydict() == {"k": [3, 5, 9], "v_sum": [7, 4, 4], "v_max": [5, 3, 4]}


def test_hash_column_is_carried_per_group():
    table = pa.table({"k": [2, 1, 2, 7], HASH_COL: pa.array([20, 10, 20, 70], pa.uint32()), "c": [1, 1, 1, 1]})
    with every_batch_by_value():
        out = group_aggregate(table, ["k", HASH_COL], [("c", "sum")])
    assert out.column_names == ["k", HASH_COL, "c_sum"]
    assert out.to_pydict() == {"k": [1, 2, 7], HASH_COL: [10, 20, 70], "c_sum": [1, 2, 1]}
    assert out.schema.field(HASH_COL).type == pa.uint32()


@pytest.mark.parametrize("table, reason", [
    (pa.table({"k": pa.array([1, None, 1]), "v": [1, 2, 3]}), "a null key"),
    (pa.table({"k": ["a", "b", "a"], "v": [1, 2, 3]}), "a string key"),
    (pa.table({"k": [0.5, 1.5, 0.5], "v": [1, 2, 3]}), "a float key"),
    (pa.table({"k": [0, 10**9, 0], "v": [1, 2, 3]}), "a key range far wider than the rows"),
])
def test_keys_that_are_not_dense_go_to_arrow(table, reason):
    assert dense_keys(table["k"]) is None, reason
    out = group_aggregate(table, ["k"], [("v", "sum")])
    assert out.sort_by("k").equals(_arrow(table, ["k"], [("v", "sum")]))


def test_span_limit():
    rows = 10
    limit = DENSE_SPAN_ROWS * rows + DENSE_SPAN_SLACK
    inside = pa.array([0] * (rows - 1) + [limit - 1])
    outside = pa.array([0] * (rows - 1) + [limit])
    assert dense_keys(inside).size == limit
    assert dense_keys(outside) is None


def test_keys_from_a_positive_minimum_are_their_own_ids():
    column = pa.array(np.arange(100, 200, dtype=np.int64).repeat(3))  # (ids 0..199: twice the range)
    keys = dense_keys(column)
    assert (keys.low, keys.size) == (0, 200)
    assert np.shares_memory(keys.ids, np.frombuffer(column.buffers()[1], dtype=np.int64))  # (no copy)
    table = pa.table({"k": column, "v": np.arange(300.0)})
    aggs = [([], "count_all"), ("v", "sum")]
    with every_batch_by_value():
        ours = group_aggregate(table, ["k"], aggs)
    assert ours.equals(_arrow(table, ["k"], aggs).sort_by("k"))
    # Otherwise the ids are key - low: a negative key, or keys far from 0 for their range.
    for values, low, size, ids in (([-5, 3], -5, 9, [0, 8]), ([60_000, 60_010], 60_000, 11, [0, 10])):
        shifted = dense_keys(pa.array(values, pa.int64()))
        assert (shifted.low, shifted.size, shifted.ids.tolist()) == (low, size, ids)


def test_integer_sums_beyond_float_precision_are_arrow_exact_sums():
    big = 2**62
    table = pa.table({"k": [1, 1, 2], "v": pa.array([big, 3, -big], pa.int64())})
    with every_batch_by_value():
        out = group_aggregate(table, ["k"], [("v", "sum"), ("v", "mean")])
    assert out.sort_by("k").equals(_arrow(table, ["k"], [("v", "sum"), ("v", "mean")]))
    assert out.sort_by("k")["v_sum"].to_pylist() == [big + 3, -big]


def test_aggregations_with_options_or_other_functions_go_to_arrow():
    table = pa.table({"k": [1, 2, 1], "v": [1.0, 2.0, 3.0], "s": ["a", "b", "c"]})
    aggs = [("v", "variance", pc.VarianceOptions(ddof=1)), ("s", "min"), ("v", "list")]
    out = group_aggregate(table, ["k"], aggs)
    assert out.sort_by("k").equals(_arrow(table, ["k"], aggs))


def test_dates_and_timestamps_keep_their_type():
    days = pa.array([datetime.date(2024, 3, 1), datetime.date(2024, 2, 28), datetime.date(2024, 3, 1)])
    stamps = pa.array([0, 3_600_000_000, 0], pa.int64()).view(pa.timestamp("us", tz="America/New_York"))
    for keys in (days, stamps):
        with every_batch_by_value():
            out = group_aggregate(pa.table({"k": keys, "v": [1, 2, 3]}), ["k"], [("v", "sum")])
        assert out.schema.field("k").type == keys.type
        assert out["v_sum"].to_pylist() == [2, 4] if keys is days else [4, 2]


def test_group_ids_from_dense_keys_number_present_keys_densely():
    table = pa.table({"k": pa.array([40, 7, 40, 12, 7, 7], pa.int32())})
    gid, size = group_ids(table, ["k"])
    assert size == 3
    assert sorted(set(gid.tolist())) == [0, 1, 2]
    keys = table["k"].to_pylist()
    for a in range(len(keys)):
        for b in range(len(keys)):
            assert (gid[a] == gid[b]) == (keys[a] == keys[b])


def test_large_batch_equals_arrow():
    rng = np.random.default_rng(3)
    n = 200_000
    x = rng.exponential(20.0, n)
    x[rng.random(n) < 0.001] = np.nan
    table = pa.table({"k": rng.zipf(1.3, n) % 50_000, "i": pa.array(rng.integers(0, 10_000, n), mask=rng.random(n) < 0.01),
                      "x": pa.array(x, mask=rng.random(n) < 0.01)})
    aggs = [([], "count_all"), ("i", "sum"), ("i", "max"), ("x", "sum"), ("x", "count"), ("x", "mean"), ("x", "variance")]
    assert len(pc.unique(table["k"])) >= dense.DENSE_MIN_GROUPS  # (grouped by value with the defaults)
    ours, theirs = group_aggregate(table, ["k"], aggs), _arrow(table, ["k"], aggs)
    for name in ours.column_names:
        assert _same(ours[name], theirs[name], 1e-12 if name.endswith("variance") else 0.0), name


def test_rows_per_id_counts_read_only_and_writeable_ids_alike():
    ids = np.random.default_rng(2).integers(0, 50, 1000)
    expected = np.bincount(ids, minlength=60)
    read_only = pa.array(ids).to_numpy(zero_copy_only=True)  # (an Arrow buffer: numpy may not write it)
    assert not read_only.flags.writeable and ids.flags.writeable
    for array in (ids, read_only):
        got = dense._rows_per_id(array, 60)
        assert got.dtype == np.int64 and np.array_equal(got, expected)


@pytest.mark.parametrize("rows", [1, 7, 4096, 10_001, 1 << 16])
def test_variance_second_pass_in_steps_adds_as_one_pass_does(rows):
    rng = np.random.default_rng(5)
    n, size = 10_001, 300
    ids = rng.integers(0, size, n)
    values = rng.normal(1e6, 3.0, n)
    valid = rng.random(n) > 0.05
    counts = np.bincount(ids[valid], minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(ids[valid], weights=values[valid], minlength=size) / counts
    deviation = np.where(valid, values - mean[ids], 0.0)
    expected = np.zeros(size)
    np.add.at(expected, ids, deviation * deviation)
    with mock.patch.object(dense, "PASS_ROWS", rows):
        got = dense._sum_of_squared_deviations(values, valid, ids, mean, size)
    assert np.array_equal(got, expected)  # (bit for bit: the same additions in the same order)


def test_integer_sums_wrap_around_as_arrow_s_do():
    table = pa.table({"k": [1, 1, 2], "v": pa.array([2**62, 2**62, 5], pa.int64())})
    with every_batch_by_value():
        out = group_aggregate(table, ["k"], [("v", "sum")])
    assert out.equals(_arrow(table, ["k"], [("v", "sum")]))
    assert out["v_sum"].to_pylist() == [-(2**63), 5]


@pytest.mark.parametrize("key_types, expected", [
    ([pa.int64()], True), ([pa.uint8()], True), ([pa.date32()], True), ([pa.timestamp("us", "UTC")], True),
    ([pa.duration("s")], True), ([pa.string()], False), ([pa.float64()], False),
    ([pa.int64(), pa.int64()], False), ([None], False), (None, False),
])
def test_which_keys_may_group_by_value(key_types, expected):
    assert dense.groups_by_value(key_types) is expected


ONLY_VALID = pc.CountOptions(mode="only_valid")

DISTINCT_VALUE_TYPES = [pa.int8(), pa.int32(), pa.int64(), pa.uint8(), pa.uint32(), pa.date32(), pa.date64(),
                        pa.timestamp("ms", tz="UTC"), pa.time64("us"), pa.duration("s")]


def _distinct_as_arrow_s(table: pa.Table, aggs: list) -> list:
    """Groups ``table`` by ``k`` by value and by Arrow; checks the two agree (the same
    schema, the distinct values of ``v`` as sets) and that the groups come by key value;
    returns our lists."""
    with every_batch_by_value():
        ours = group_aggregate(table, ["k"], aggs)
    theirs = _arrow(table, ["k"], aggs)
    assert ours.schema.equals(theirs.schema)
    assert ours["k"].to_pylist() == sorted(set(table["k"].to_pylist()))  # (grouped by value, not by Arrow)
    assert _sets(ours, "v_distinct") == _sets(theirs, "v_distinct")
    return ours["v_distinct"].to_pylist()


def _sets(table: pa.Table, column: str) -> dict:
    """``{key: set of the list's values}``, from a table ordered any way."""
    return {k: set(v) for k, v in zip(table["k"].to_pylist(), table[column].to_pylist())}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from(DISTINCT_VALUE_TYPES), data=st.data())
def test_distinct_equals_arrow_s_as_sets_in_ascending_order(dtype, data):
    n = data.draw(st.integers(1, 120))
    keys = data.draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))
    low, high = (0, 255) if pa.types.is_uint8(dtype) else (-100, 100) if pa.types.is_int8(dtype) else (-10**5, 10**5)
    if pa.types.is_unsigned_integer(dtype) or pa.types.is_time(dtype):
        low = 0  # (a time of day is not negative; dates stay within Python's years)
    values = data.draw(st.lists(st.one_of(st.none(), st.integers(low, high)), min_size=n, max_size=n))
    storage = dtype if pa.types.is_integer(dtype) else dense._storage_type(dtype)
    if pa.types.is_date64(dtype):  # (whole days of milliseconds)
        values = [None if v is None else v * 86_400_000 for v in values]
    column = pa.array(values, storage)
    table = pa.table({"k": pa.array(keys, pa.int64()), "v": column if storage == dtype else column.view(dtype)})
    for items in _distinct_as_arrow_s(table, [("v", "distinct", ONLY_VALID), ([], "count_all")]):
        assert items == sorted(set(items))  # (each value once, ascending)


def test_distinct_keeps_keys_whose_values_are_all_null():
    table = pa.table({"k": [1, 2, 1], "v": pa.array([None, 5, None], pa.int64())})
    with every_batch_by_value():
        out = group_aggregate(table, ["k"], [("v", "distinct", ONLY_VALID)])
    assert out.to_pydict() == {"k": [1, 2], "v_distinct": [[], [5]]}


def test_distinct_of_values_too_wide_to_pair_with_groups_goes_to_arrow():
    # 2 groups x a span of 2**62: group * span + value would not fit an int64.
    table = pa.table({"k": [0, 1, 0], "v": pa.array([-(2**61), 2**61, 2**61], pa.int64())})
    aggs = [("v", "distinct", ONLY_VALID)]
    key, wanted = dense._plan(table, ["k"], aggs)
    assert dense._dense_aggregate(table, ["k"], key, wanted, dense_keys(table["k"]), 0) is None
    with every_batch_by_value():
        out = group_aggregate(table, ["k"], aggs)
    assert _sets(out, "v_distinct") == {0: {-(2**61), 2**61}, 1: {2**61}}


def test_distinct_with_another_option_or_of_floats_goes_to_arrow():
    table = pa.table({"k": [0, 1, 0], "v": pa.array([1, None, 1], pa.int64()), "x": [0.5, 0.5, 1.5]})
    for aggs in ([("v", "distinct", pc.CountOptions(mode="all"))], [("x", "distinct", ONLY_VALID)], [("v", "distinct")]):
        with every_batch_by_value():
            assert dense._plan(table, ["k"], aggs) is None
            out = group_aggregate(table, ["k"], aggs)
        assert out.sort_by("k").equals(_arrow(table, ["k"], aggs))


@pytest.mark.parametrize("size", [1, 300, (1 << 16) + 5, 3_000_000])
def test_group_order_lists_rows_group_by_group_in_their_order(size):
    rng = np.random.default_rng(size)
    ids = rng.integers(0, size, 20_000)
    order = dense.group_order(ids, size)
    assert np.array_equal(order, np.argsort(ids, kind="stable"))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from([pa.string(), pa.large_string(), pa.binary(), pa.large_binary()]), data=st.data())
def test_distinct_strings_equal_arrow_s_as_sets(dtype, data):
    n = data.draw(st.integers(1, 120))
    keys = data.draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))
    texts = data.draw(st.lists(st.one_of(st.none(), st.text(max_size=3)), min_size=n, max_size=n))
    values = texts if pa.types.is_string(dtype) or pa.types.is_large_string(dtype) else [
        None if t is None else t.encode() for t in texts]
    table = pa.table({"k": pa.array(keys, pa.int64()), "v": pa.array(values, dtype)})
    for items in _distinct_as_arrow_s(table, [("v", "distinct", ONLY_VALID)]):
        assert len(items) == len(set(items))  # (each value once)
