"""Bad inputs give the exact answer or a clear error, never a wrong number.

1. Column types that change between input blocks: value columns are promoted exactly,
   key columns must keep one key class.
2. Integer sums that leave int64 (uint64) raise ArithmeticOverflowError.
3. A map_fn returning a str/bytes/dict/non-iterable after the dry-run sample.
4. Int keys beyond int64.
5. Key functions returning lists, dicts, sets or nested tuples.

Every end-to-end check runs on the in-process runtime with small blocks.
"""

from __future__ import annotations

import collections
import math
import pickle
from collections.abc import Iterator
from decimal import Decimal

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import dpa
from dpa.aggregates.int_sums import sum_may_overflow
from dpa.aggregates.state import ColumnarState, DictState, concat_results
from dpa.engine.block_types import add_key_columns
from dpa.engine.planning import build_plan
from dpa.errors import (
    ArithmeticOverflowError,
    DPAError,
    JobFailedError,
    KeyEncodingError,
    SchemaError,
    UserCodeError,
)
from dpa.input.records import HASH_COL, WEIGHT_COL, IntegerRangeError, records_to_table, unify
from dpa.input.sources import normalize_source


def local(**kw) -> dpa.JobConfig:
    kw.setdefault("batch_size", 4)
    kw.setdefault("num_mappers", 2)
    kw.setdefault("num_reducers", 3)
    return dpa.JobConfig(runtime="local", **kw)


def raises_in_job(*types: type[BaseException], match: str):
    """Errors raised by user code or reducers inside a job may reach the caller wrapped in
    JobFailedError (whose message contains the original one)."""
    return pytest.raises((*types, JobFailedError), match=match)


class PySum(dpa.Reducer):
    """A user-defined reducer: runs through DictState on Python values."""

    def create(self):
        return 0

    def add(self, acc, value):
        return acc + value

    def merge(self, a, b):
        return a + b


# The reproduction: an int column that holds floats in a later block.
INT_THEN_FLOAT = [{"k": i % 3, "v": 1} for i in range(1000)] + [{"k": i % 3, "v": 1.5} for i in range(1000)]


def _oracle(records, reducer: str):
    groups = collections.defaultdict(list)
    for r in records:
        groups[r["k"]].append(r["v"])
    fns = {
        "sum": lambda vs: math.fsum(vs), "min": min, "max": max, "mean": lambda vs: math.fsum(vs) / len(vs),
        "collect": sorted, "top_k": lambda vs: sorted(vs, reverse=True)[:3], "custom": lambda vs: math.fsum(vs),
    }
    return {k: fns[reducer](vs) for k, vs in groups.items()}


# --------------------------------------------------------------------------- 1. types change
@pytest.mark.parametrize("name, reducer", [
    ("sum", lambda: dpa.Sum("v")), ("min", lambda: dpa.Min("v")), ("max", lambda: dpa.Max("v")),
    ("mean", lambda: dpa.Mean("v")), ("collect", lambda: dpa.Collect("v")), ("top_k", lambda: dpa.TopK("v", 3)),
    ("custom", lambda: PySum("v")),
])
@pytest.mark.parametrize("policy", ["doubling", "shuffle"])
def test_value_column_int_then_float_is_promoted_exactly(name, reducer, policy):
    res = dpa.run(INT_THEN_FLOAT, key="k", reducer=reducer(), config=local(policy=policy))
    got = res.to_dict()
    if name == "collect":
        got = {k: sorted(v) for k, v in got.items()}
    assert got == _oracle(INT_THEN_FLOAT, name)
    if name in ("sum", "min", "max", "collect"):
        value_type = res.to_arrow().schema.field(res.value_column).type
        assert value_type in (pa.float64(), pa.list_(pa.float64()))  # the promoted type


def test_sum_of_int_then_float_is_exact_without_map_side_combine():
    res = dpa.run(INT_THEN_FLOAT, key="k", reducer=dpa.Sum("v"), config=local(map_side_combine=False))
    assert res.to_dict() == {0: 835.0, 1: 832.5, 2: 832.5}


def test_key_column_that_changes_type_raises_schema_error():
    records = [{"k": i % 3, "v": 1} for i in range(1000)] + [{"k": 1.5, "v": 1.5} for _ in range(1000)]
    with pytest.raises(SchemaError) as info:
        dpa.run(records, key="k", reducer=dpa.Sum("v"), config=local())
    msg = str(info.value)
    for part in ("key column 'k'", "int64", "double", "block 250", "records 1000-1003", "1.5", "one type"):
        assert part in msg


def test_key_ints_mixed_with_floats_in_one_block_raise():
    # Arrow would store the block as floats, making the int key 1 the different key 1.0.
    with pytest.raises(SchemaError, match=r"key field 'k' mixes int and float keys: 1 in record 0"):
        dpa.run([{"k": 1}, {"k": 1.5}], key="k", config=local())
    with pytest.raises(SchemaError, match=r"mix int and float keys: 1 in record 8"):
        dpa.run([2] * 8 + [1, 1.5], config=local())


def test_key_column_float_then_int_block_raises():
    with pytest.raises(SchemaError, match=r"key column 'value' changes type: double keys before, int64 keys in block 2"):
        dpa.run([1.5] * 8 + [1] * 4, config=local())


def test_tuple_records_value_promotion_and_key_change():
    records = [(i % 2, 1) for i in range(8)] + [(1, 0.5)] * 4
    res = dpa.run(records, key=0, reducer=dpa.Sum("f1"), config=local())
    assert res.to_dict() == {0: 4, 1: 6.0}
    with pytest.raises(SchemaError, match="key column 'f0' changes type: int64 keys before, string keys"):
        dpa.run([(1, 1)] * 4 + [("1", 1)] * 4, key=0, config=local())


def test_key_null_in_first_block_then_typed_keys():
    records = [{"k": None, "v": 1}] * 4 + [{"k": 7, "v": 2}] * 4
    assert dpa.run(records, key="k", reducer=dpa.Sum("v"), config=local()).to_dict() == {None: 4, 7: 8}


def test_value_null_in_first_block_then_ints():
    records = [{"k": 1, "v": None}] * 4 + [{"k": 1, "v": 2}] * 4
    assert dpa.run(records, key="k", reducer=dpa.Sum("v"), config=local()).to_dict() == {1: 8}


def test_value_column_changing_to_an_incompatible_type_raises():
    records = [{"k": 1, "v": 1}] * 4 + [{"k": 1, "v": "a"}] * 4
    with pytest.raises(SchemaError, match=r"column 'v' changes type from int64 to string in block 1 of the input "
                                          r"\(records 4-7\) \(e.g. 'a'\).*give the column one type"):
        dpa.run(records, key="k", reducer=dpa.Collect("v"), config=local())


def test_reducer_revalidated_when_a_column_type_changes():
    records = [{"k": 1, "v": None}] * 4 + [{"k": 1, "v": "a"}] * 4  # null promotes to string...
    with pytest.raises(SchemaError, match=r"Sum\('v'\) needs a numeric column.*block 1 of the input"):
        dpa.run(records, key="k", reducer=dpa.Sum("v"), config=local())  # ...which Sum cannot add


def test_value_ints_beyond_2_53_with_floats_raise_for_value_keeping_reducers():
    records = [{"k": 1, "v": 2**60 + 1}] * 4 + [{"k": 2, "v": 1.5}] * 4
    with pytest.raises(SchemaError, match=r"column 'v' holds both floats.*beyond 2\*\*53"):
        dpa.run(records, key="k", reducer=dpa.Max("v"), config=local())


def test_sum_of_ints_beyond_2_53_with_floats_rounds_like_a_float_sum():
    records = [{"k": 1, "v": 2**60}] * 40 + [{"k": 1, "v": 1.5}] * 40
    for reducer in (dpa.Sum("v"), dpa.WithCost(dpa.Sum("v"), 0.001)):  # with and without map-side combine
        got = dpa.run(records, key="k", reducer=reducer, config=local(num_reducers=2)).to_dict()
        assert got == {1: pytest.approx(40 * 2.0**60 + 60)}


def _arrow_stream() -> Iterator[pa.Table]:
    yield pa.table({"k": [1, 2, 1], "v": [1, 2, 3]})
    yield pa.table({"k": [1, 2], "v": [1.5, 2.5]})


def test_arrow_stream_value_type_change_is_promoted():
    res = dpa.run(_arrow_stream(), key="k", reducer=dpa.Sum("v"), config=local())
    assert res.to_dict() == {1: 5.5, 2: 4.5}


def test_arrow_stream_key_type_change_raises():
    def tables():
        yield pa.table({"k": [1, 2, 1], "v": [1, 2, 3]})
        yield pa.table({"k": [1.0, 2.0], "v": [1, 2]})  # was silently cast to the int keys 1, 2

    with pytest.raises(SchemaError, match=r"key column 'k' changes type: int64 keys before, double keys in block 1 "
                                          r"of the input \(records 3-4\) \(e.g. 1.0\)"):
        dpa.run(tables(), key="k", config=local())


def test_arrow_stream_lossless_casts_within_a_key_class_still_apply():
    def tables():
        yield pa.table({"k": pa.array([1, 2], pa.int32()), "v": pa.array([1, 2], pa.int32())})
        yield pa.table({"k": pa.array([1, 2**40]), "v": [1, 2]})  # int64 beyond int32: kept as int64

    assert dpa.run(tables(), key="k", reducer=dpa.Sum("v"), config=local()).to_dict() == {1: 2, 2: 2, 2**40: 2}


def test_pandas_stream_value_type_change_is_promoted():
    def frames():
        yield pd.DataFrame({"k": ["a", "b"], "v": [1, 2]})
        yield pd.DataFrame({"k": ["a", "b"], "v": [0.5, 0.25]})

    assert dpa.run(frames(), key="k", reducer=dpa.Sum("v"), config=local()).to_dict() == {"a": 1.5, "b": 2.25}


def test_records_to_table_never_casts_to_the_schema():
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    table = records_to_table([{"k": 1.5, "v": 2.5, "extra": 1}], "dict", schema)
    assert table.column_names == ["k", "v"]
    assert table.to_pylist() == [{"k": 1.5, "v": 2.5}]
    assert records_to_table([{"v": 1}], "dict", schema).to_pylist() == [{"k": None, "v": 1}]


def test_unify_promotes_exactly_or_raises():
    ints, floats = pa.table({"x": [2**60 + 1]}), pa.table({"x": [1.5]})
    with pytest.raises(SchemaError, match=r"'x' \(int64 / double\)"):
        unify([ints, floats])
    assert unify([ints, floats], float_rounding=True)["x"].to_pylist() == [float(2**60), 1.5]
    assert unify([pa.table({"x": [1]}), floats])["x"].to_pylist() == [1.0, 1.5]
    with pytest.raises(SchemaError, match="int64 / string"):
        unify([ints, pa.table({"x": ["a"]})])


@pytest.mark.parametrize("reducer", [dpa.Sum("v"), dpa.Min("v"), dpa.Max("v"), dpa.Mean("v"),
                                     dpa.Collect("v"), dpa.TopK("v", 2)])
def test_partial_states_of_different_types_merge(reducer):
    def batch(values):
        return pa.table({"k": ["a"] * len(values), HASH_COL: pa.array([7] * len(values), pa.uint32()), "v": values})

    left, right = ColumnarState(reducer, ["k"]), ColumnarState(reducer, ["k"])
    left.add(batch([1, 5]))
    right.add(batch([2.5, 0.5]))
    for part in right.partition(1):
        left.add_partial(part)
    out = left.finalize().to_pylist()[0][reducer.name]
    expected = {"sum": 9.0, "min": 0.5, "max": 5.0, "mean": 2.25, "collect": [0.5, 1.0, 2.5, 5.0], "top_k": [5.0, 2.5]}
    assert (sorted(out) if reducer.kind == "collect" else out) == expected[reducer.kind]


def test_key_fn_keys_that_change_type_between_blocks_raise():
    # The keys of block 13 (records 52-55) are floats, the earlier ones ints.
    with pytest.raises(SchemaError, match="key column 'key' changes type: int64 keys before, double keys"):
        dpa.run(list(range(100)), key=lambda r: float(r) if r >= 52 else r, config=local())


def test_map_fn_keys_that_change_type_between_blocks_raise():
    with pytest.raises(SchemaError, match=r"key column 'value' changes type: int64 keys before, double keys in a "
                                          r"block of 4 records after map_fn \(e.g. 80.0\)"):
        dpa.run(list(range(100)), map_fn=lambda r: [float(r) if r >= 80 else r], config=local())


def test_batch_map_output_types_are_followed_on_the_mappers():
    table = pa.table({"k": [i % 2 for i in range(16)], "v": list(range(16))})

    def halve_late_blocks(t: pa.Table) -> pa.Table:  # blocks from record 8 on get float values
        if t["v"][0].as_py() < 8:
            return t
        return t.set_column(1, "v", pc.divide(pc.cast(t["v"], pa.float64()), 2.0))

    res = dpa.run(table, key="k", reducer=dpa.Sum("v"), map_fn=dpa.BatchMap(halve_late_blocks), config=local())
    assert res.to_dict() == {0: 0 + 2 + 4 + 6 + (8 + 10 + 12 + 14) / 2, 1: 1 + 3 + 5 + 7 + (9 + 11 + 13 + 15) / 2}

    def to_strings(t: pa.Table) -> pa.Table:
        return t if t["v"][0].as_py() < 8 else t.set_column(1, "v", pc.cast(t["v"], pa.string()))

    with pytest.raises(SchemaError, match=r"column 'v' changes type from int64 to string in a block of 4 records after map_fn"):
        dpa.run(table, key="k", reducer=dpa.Collect("v"), map_fn=dpa.BatchMap(to_strings), config=local())


def test_schema_error_raised_mid_stream_reaches_the_user():
    def tables():
        yield pa.table({"k": [1, 2]})
        yield pa.table({"k": ["x", "y"]})

    with pytest.raises((SchemaError, JobFailedError), match="key column 'k' changes type"):
        dpa.run(tables(), key="k", config=local())


# --------------------------------------------------------------------------- 2. Sum overflow
_OVERFLOW = r"Sum\('v'\) overflowed int64.*key 'a'.*cast the column to float64 or decimal"


def test_sum_overflow_in_map_side_combine_raises():
    records = [{"k": "a", "v": 2**62}] * 4  # one block: the mapper's partial sum overflows
    with raises_in_job(ArithmeticOverflowError, match=_OVERFLOW):
        dpa.run(records, key="k", reducer=dpa.Sum("v"), config=local())


def test_sum_overflow_in_reducer_state_merge_raises():
    records = [{"k": "a", "v": 2**62}] * 4
    for config in (local(batch_size=1), local(batch_size=1, map_side_combine=False)):
        with raises_in_job(ArithmeticOverflowError, match=_OVERFLOW):
            dpa.run(records, key="k", reducer=dpa.Sum("v"), config=config)


def test_sum_overflow_in_final_partitioned_merge_raises():
    # shuffle splits every key over the reducers: each holds one 2**62, the final merge overflows.
    records = [{"k": "a", "v": 2**62}] * 4
    config = local(batch_size=1, num_mappers=1, num_reducers=4, policy="shuffle")
    with raises_in_job(ArithmeticOverflowError, match=_OVERFLOW):
        dpa.run(records, key="k", reducer=dpa.Sum("v"), config=config)


def test_sum_state_merge_overflow_names_the_key():
    state = ColumnarState(dpa.Sum("v"), ["k"])
    for _ in range(2):
        state.add_partial(pa.table({"k": ["a", "b"], HASH_COL: pa.array([1, 2], pa.uint32()), "sum": [2**62, 1]}))
    state.add_partial(pa.table({"k": ["a"], HASH_COL: pa.array([1], pa.uint32()), "sum": [2**62]}))
    with pytest.raises(ArithmeticOverflowError, match="key 'a'") as info:
        state.finalize()
    assert info.value.key == "a" and info.value.column == "v"


def test_sum_near_the_int64_limits_is_exact():
    limit = 2**63 - 1
    records = [{"k": "a", "v": 2**62}, {"k": "a", "v": 2**62 - 1}, {"k": "a", "v": 2**62}, {"k": "a", "v": -(2**62)},
               {"k": "b", "v": -(2**62)}, {"k": "b", "v": -(2**62)}]
    for config in (local(), local(batch_size=1), local(map_side_combine=False)):
        res = dpa.run(records, key="k", reducer=dpa.Sum("v"), config=config)
        assert res.to_dict() == {"a": limit, "b": -(2**63)}
        assert res.to_arrow().schema.field("sum").type == pa.int64()


def test_a_partial_sum_out_of_range_may_come_back():
    # Steps and blocks see 2**62, 2**62 (out of int64) before -2**62, -2**62: the key's sum is 0.
    records = [{"k": "a", "v": 2**62}] * 2 + [{"k": "a", "v": -(2**62)}] * 2 + [{"k": "b", "v": 1}]
    for config in (local(), local(batch_size=1), local(batch_size=2, map_side_combine=False)):
        res = dpa.run(records, key="k", reducer=dpa.Sum("v"), config=config)
        assert res.to_dict() == {"a": 0, "b": 1}
        assert res.to_arrow().schema.field("sum").type == pa.int64()


def test_decimal_sum_widens_by_ten_digits_like_spark():
    from decimal import Decimal

    table = pa.table({"k": [1, 1, 2], "v": pa.array([Decimal(999), Decimal(999), Decimal(-5)], pa.decimal128(3, 0))})
    for config in (local(), local(batch_size=1), local(map_side_combine=False)):
        res = dpa.run(table, key="k", reducer=dpa.Sum("v"), config=config)
        assert res.to_arrow().schema.field("sum").type == pa.decimal128(13, 0)
        assert res.to_dict() == {1: Decimal(1998), 2: Decimal(-5)}


def test_sum_negative_overflow_raises():
    with raises_in_job(ArithmeticOverflowError, match="reached -9223372036854775809"):
        dpa.run([{"k": "a", "v": -(2**63)}, {"k": "a", "v": -1}], key="k", reducer=dpa.Sum("v"), config=local())


def test_sum_of_uint64_overflows_at_2_64():
    ok = pa.table({"k": ["a", "a"], "v": pa.array([2**63, 2**62], pa.uint64())})
    res = dpa.run(ok, key="k", reducer=dpa.Sum("v"), config=local())
    assert res.to_dict() == {"a": 3 * 2**62}
    assert res.to_arrow().schema.field("sum").type == pa.uint64()
    bad = pa.table({"k": ["a", "a"], "v": pa.array([2**63, 2**63], pa.uint64())})
    with raises_in_job(ArithmeticOverflowError, match=r"overflowed uint64.*reached 18446744073709551616"):
        dpa.run(bad, key="k", reducer=dpa.Sum("v"), config=local())


@pytest.mark.parametrize("dtype, out", [(pa.int32(), pa.int64()), (pa.int8(), pa.int64()), (pa.uint8(), pa.uint64()),
                                        (pa.uint32(), pa.uint64())])
def test_sum_of_narrow_ints_is_exact_in_the_wide_type(dtype, out):
    top = 2 ** (dtype.bit_width - (1 if pa.types.is_signed_integer(dtype) else 0)) - 1
    table = pa.table({"k": ["a"] * 10, "v": pa.array([top] * 10, dtype)})
    res = dpa.run(table, key="k", reducer=dpa.Sum("v"), config=local())
    assert res.to_dict() == {"a": 10 * top}
    assert res.to_arrow().schema.field("sum").type == out


def test_sum_may_overflow_bound():
    assert not sum_may_overflow(pa.array([1, 2, 3]))
    assert not sum_may_overflow(pa.array([2**31 - 1] * 100, pa.int32()))  # decided by the type alone
    assert not sum_may_overflow(pa.array([2**62 - 1, -(2**62)]))  # max|x| * n = 2**63 ... just inside
    assert sum_may_overflow(pa.array([2**62, 2**62]))
    assert sum_may_overflow(pa.array([2**62, 2**62, 1]))
    assert not sum_may_overflow(pa.array([2**61, 1, 1, 1]))  # the sum of |x| decides
    assert not sum_may_overflow(pa.array([1.5e300, 1.5e300]))  # floats never
    assert not sum_may_overflow(pa.array([None, None], pa.int64()))


def test_arithmetic_overflow_error_is_a_dpa_error_and_pickles():
    exc = ArithmeticOverflowError("boom", column="v", key=("a", 1))
    assert isinstance(exc, DPAError) and isinstance(exc, OverflowError)
    copy = pickle.loads(pickle.dumps(exc))
    assert (str(copy), copy.column, copy.key) == ("boom", "v", ("a", 1))


def test_sum_of_decimals_is_not_checked_for_int_overflow():
    table = pa.table({"k": ["a", "a"], "v": pa.array([Decimal(2**62), Decimal(2**62)], pa.decimal128(38, 0))})
    assert dpa.run(table, key="k", reducer=dpa.Sum("v"), config=local()).to_dict() == {"a": Decimal(2**63)}


def test_mean_of_ints_beyond_2_53_rounds_instead_of_failing():
    got = dpa.run([{"k": 1, "v": 2**60 + 1}] * 2, key="k", reducer=dpa.Mean("v"), config=local()).to_dict()
    assert got == {1: float(2**60)}


# --------------------------------------------------------------------------- 3. map_fn results
@pytest.mark.parametrize("bad, name", [("xyz", "str"), (b"xy", "bytes"), ({"k": 1}, "dict"), (5, "int")])
def test_map_fn_returning_a_non_record_iterable_after_the_sample_raises(bad, name):
    lines = ["a b"] * 70 + ["x"]  # "x" is past the 64-record dry run
    with raises_in_job(UserCodeError, match=rf"map_fn returned .* \(type {name}\) for record 'x'.*\[record\]"):
        dpa.run(lines, map_fn=lambda s: bad if s == "x" else s.split(), config=local())


def test_apply_map_raises_user_code_error_naming_the_record():
    source = normalize_source(["a b", "c"], 4)
    plan, blocks = build_plan(source, None, dpa.Count(), lambda s: s.split() if s != "c" else "c", local())
    with pytest.raises(UserCodeError, match=r"returned 'c' \(type str\) for record 'c'.*character by character") as info:
        plan.apply_map(next(blocks))
    assert info.value.record == "c"


def test_map_fn_result_raising_while_iterated_is_user_code_error():
    def gen(r):
        yield r
        if r == 90:
            raise ValueError("bad record")

    with raises_in_job(UserCodeError, match="record 90 raised ValueError while being iterated: bad record"):
        dpa.run(list(range(100)), map_fn=gen, config=local())


# --------------------------------------------------------------------------- 4. keys beyond int64
_BIG = r"int key 18446744073709551616 .*outside the int64 range.*str\(key\)"


@pytest.mark.parametrize("records, key", [
    ([{"k": 2**64, "v": 1}], "k"),  # first block
    ([{"k": 1, "v": 1}] * 4 + [{"k": 2**64, "v": 1}], "k"),  # a later block
    ([(2**64, 1)], 0),
    ([2**64], None),
])
def test_record_key_beyond_int64_raises_key_encoding_error(records, key):
    with pytest.raises(KeyEncodingError, match=_BIG):
        dpa.run(records, key=key, config=local())


def test_record_key_below_int64_raises_key_encoding_error():
    with pytest.raises(KeyEncodingError, match=r"int key -9223372036854775809 in field 'k' of record 0"):
        dpa.run([{"k": -(2**63) - 1}], key="k", config=local())


def test_key_fn_returning_int_beyond_int64_raises_key_encoding_error():
    with pytest.raises(KeyEncodingError, match=r"returned by the key function for record 3 is outside"):
        dpa.run(list(range(10)), key=lambda r: 2**64 if r == 3 else r, config=local())  # plan time
    with pytest.raises(KeyEncodingError, match=r"returned by the key function for record 90 is outside"):
        dpa.run(list(range(100)), key=lambda r: 2**64 if r == 90 else r, config=local())  # run time


def test_map_fn_key_beyond_int64_raises_key_encoding_error():
    with pytest.raises(KeyEncodingError, match=_BIG):  # in the dry run
        dpa.run(list(range(100)), map_fn=lambda r: [{"k": 2**64 if r == 2 else r}], key="k", config=local())
    with pytest.raises(KeyEncodingError, match=_BIG):  # later
        dpa.run(list(range(100)), map_fn=lambda r: [{"k": 2**64 if r == 90 else r}], key="k", config=local())


def test_value_beyond_int64_raises_schema_error_naming_the_field():
    for records in ([{"k": 1, "v": 2**64}], [{"k": 1, "v": 1}] * 4 + [{"k": 1, "v": 2**64}]):
        with pytest.raises(IntegerRangeError, match=r"field 'v' of record \d .*holds the int 18446744073709551616.*"
                                                    r"convert the field to float, decimal.Decimal or str"):
            dpa.run(records, key="k", reducer=dpa.Sum("v"), config=local())


def test_encode_key_and_hash_key_accept_big_ints_without_overflow_error():
    # The canonical encoding covers any int (uint64 Arrow columns hold up to 2**64 - 1).
    assert dpa.encode_key(2**64).startswith(b"\xffI")
    assert 0 <= dpa.hash_key(2**64) < 2**32
    assert 0 <= dpa.hash_key(-(2**100)) < 2**32


# --------------------------------------------------------------------------- 5. key functions
@pytest.mark.parametrize("bad, name", [([1], "list"), ({"a": 1}, "dict"), ({1}, "set")])
def test_key_fn_returning_a_container_fails_at_plan_time(bad, name):
    source = normalize_source(list(range(100)), 4)
    with pytest.raises(KeyEncodingError, match=rf"key function returned a {name} for record 2: cannot encode"):
        build_plan(source, lambda r: bad if r == 2 else r, dpa.Count(), None, local())


@pytest.mark.parametrize("bad, name", [([1], "list"), ({"a": 1}, "dict"), ({1}, "set")])
def test_key_fn_returning_a_container_later_raises_key_encoding_error(bad, name):
    with pytest.raises(KeyEncodingError, match=rf"key function returned a {name} for record 90"):
        dpa.run(list(range(100)), key=lambda r: bad if r == 90 else r, config=local())


def test_key_fn_returning_nested_tuples_raises_key_encoding_error():
    with pytest.raises(KeyEncodingError, match=r"element 1 of the key function's tuple keys is a tuple, \(0, 1\)"):
        dpa.run(list(range(10)), key=lambda r: ("a", (r, 1)), config=local())


def test_add_key_columns_never_raises_raw_arrow_errors():
    records = [{"x": 1}, {"x": 2}]
    table = pa.table({"x": [1, 2]})
    with pytest.raises(SchemaError, match=r"int 1 for record \{'x': 1\} and str 'a' for record \{'x': 2\}"):
        add_key_columns(table, [1, "a"], ["key"], records)
    with pytest.raises(SchemaError, match=r"int 1 for record .* and float 2.5"):
        add_key_columns(table, [1, 2.5], ["key"], records)
    with pytest.raises(KeyEncodingError, match="returned a list"):
        add_key_columns(table, [[1], [2]], ["key"], records)
    with pytest.raises(KeyEncodingError, match="outside the int64 range"):
        add_key_columns(table, [(1, 2**64), (1, 2)], ["key_0", "key_1"], records)
    with pytest.raises(SchemaError, match="expected a tuple of 2 values"):
        add_key_columns(table, [(1, 2), (1, 2, 3)], ["key_0", "key_1"], records)
    assert add_key_columns(table, [None, 3], ["key"], records)["key"].to_pylist() == [None, 3]


def test_dict_state_keeps_key_types_wide_enough():
    state = DictState(PySum("v"), ["k"], "dict")
    state.add(pa.table({"k": pa.array([1], pa.int32()), HASH_COL: pa.array([1], pa.uint32()), "v": [1]}))
    state.add(pa.table({"k": pa.array([2**40]), HASH_COL: pa.array([2], pa.uint32()), "v": [2]}))
    assert state.finalize().to_pylist() == [{"k": 1, "result": 1}, {"k": 2**40, "result": 2}]
    with pytest.raises(SchemaError, match="key column 'k' holds double keys"):
        state.add(pa.table({"k": [1.5], HASH_COL: pa.array([3], pa.uint32()), "v": [3]}))


def test_concat_results_promotes_reducer_outputs():
    a = pa.table({"k": ["a"], "sum": [2**60 + 1]})
    b = pa.table({"k": ["b"], "sum": [0.5]})
    out = concat_results([a, b], a.schema.empty_table())
    assert out.schema.field("sum").type == pa.float64()
    assert WEIGHT_COL not in out.column_names


def _breaking_stream():
    yield pa.table({"k": ["a"] * 10})
    yield pa.table({"k": ["b"] * 10})
    raise RuntimeError("source broke")


@pytest.mark.parametrize("map_fn", [None, "records", "batch"])
def test_a_source_that_raises_is_a_job_failure_at_planning_or_later(map_fn):
    fn = {None: None, "records": lambda r: [r], "batch": dpa.BatchMap(lambda t: t)}[map_fn]
    with pytest.raises(dpa.JobFailedError, match="reading the input failed: RuntimeError: source broke"):
        dpa.run(_breaking_stream(), key="k", map_fn=fn, config=local(batch_size=25))


def test_an_empty_input_with_a_tuple_field_key_is_an_empty_result():
    assert dpa.run([], key=0, config=local()).to_dict() == {}


@pytest.mark.parametrize("reducer, error, message", [
    (dpa.Sum, dpa.ConfigError, r"got the class Sum; make one: dpa.Sum\('x'\)"),
    (dpa.Count, dpa.ConfigError, r"got the class Count; make one: dpa.Count\(\)"),
    ([dpa.Count(), dpa.Mean], dpa.ConfigError, r"reducer\[1\] .* got the class Mean; make one"),
    (dpa.Sum("b"), dpa.SchemaError, r"count its true values with dpa.CountIf\('b'\)"),
    (dpa.Mean("s"), dpa.SchemaError, r"cast it to a number first or use Count/Collect"),
    (dpa.Max("lst"), dpa.SchemaError, r"cannot order values of type list<item: int64>; give it a column of scalars"),
])
def test_a_reducer_that_cannot_read_the_column_says_how_to_fix_it(reducer, error, message):
    table = pa.table({"k": [1, 2], "b": [True, False], "s": ["a", "b"], "lst": [[1], [2]]})
    with pytest.raises(error, match=message):
        dpa.run(table, key="k", reducer=reducer, runtime="local")
