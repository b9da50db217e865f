"""GroupApply (a per-group function) and its row store, without a runtime."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import dpa
from dpa.aggregates.group_apply import GroupApply, GroupUnit
from dpa.aggregates.rows import RowsState, unit_size
from dpa.aggregates.state import make_state
from dpa.errors import ConfigError, GroupTooLargeError, SchemaError, UserCodeError
from dpa.input.records import HASH_COL
from dpa.keys.columns import hash_key_columns

KEY_COLS = ["k"]


def _rows(keys, values=None) -> pa.Table:
    keys = list(keys)
    values = list(range(len(keys))) if values is None else list(values)
    table = pa.table({"k": keys, "v": values})
    return table.append_column(HASH_COL, pa.array(hash_key_columns(table, KEY_COLS), pa.uint32()))


def _count(pdf: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"k": [pdf.k.iloc[0]], "n": [len(pdf)], "s": [int(pdf.v.sum())]})


def _groups(units: list[GroupUnit]) -> dict:
    got = {}
    for u in units:
        for a, b in zip(u.offsets[:-1], u.offsets[1:]):
            keys = u.table["k"].slice(a, b - a).to_pylist()
            assert len(set(keys)) == 1  # a group's rows are contiguous and alone
            assert keys[0] not in got  # a key is in one group only
            got[keys[0]] = sorted(u.table["v"].slice(a, b - a).to_pylist())
    return got


@pytest.mark.parametrize("bad, match", [
    (dict(fn=3), "needs a function"),
    (dict(fn=_count, schema="k long"), "pyarrow.Schema"),
    (dict(fn=_count, batch_format="polars"), "batch_format"),
    (dict(fn=_count, max_group_bytes=0), "max_group_bytes"),
])
def test_bad_arguments_are_refused_with_the_fix(bad, match):
    with pytest.raises(ConfigError, match=match):
        GroupApply(**bad)


def test_fn_with_a_key_parameter_is_told_the_key():
    assert not GroupApply(_count).with_key
    assert GroupApply(lambda key, pdf: pdf).with_key
    assert not GroupApply(lambda pdf, scale=2: pdf).with_key


def test_the_row_store_is_chosen_by_make_state_and_merges_by_concatenation():
    state = make_state(GroupApply(_count), KEY_COLS, "dict")
    assert isinstance(state, RowsState) and GroupApply(_count).can_merge
    state.add(_rows([1, 2, 1]))
    other = RowsState(GroupApply(_count), KEY_COLS)
    other.add(_rows([2, 3], [10, 11]))
    parts = other.partition(2)
    state.begin_merge()
    for p in parts:
        state.add_partial(p)
    assert state.num_keys == 3
    groups = _groups(state.units(None))
    assert groups == {1: [0, 2], 2: [1, 10], 3: [11]}


def test_extract_export_and_restore_move_rows_whole():
    state = RowsState(GroupApply(_count), KEY_COLS)
    state.add(_rows(range(20)))
    moves = state.extract(lambda h: (h % 2).astype(np.int64), 0, 2)
    assert len(moves) == 1 and moves[0][0] == 1
    kept = state.export()
    assert kept.num_rows + moves[0][1].num_rows == 20
    copy = RowsState(GroupApply(_count), KEY_COLS)
    copy.restore(kept)
    assert copy.export().num_rows == kept.num_rows


def test_units_put_large_groups_alone_and_pack_small_ones_largest_first():
    keys = [0] * 50 + [1] * 30 + [k for k in range(2, 22) for _ in range(2)]
    state = RowsState(GroupApply(_count), KEY_COLS)
    state.add(_rows(keys))
    units = state.units(10)
    sizes = [unit_size(u) for u in units]
    assert sizes[0].rows == 50 and sizes[0].groups == 1 and sizes[0].largest == 50
    assert sizes[1].rows == 30 and sizes[1].groups == 1
    assert all(s.rows == 10 and s.groups == 5 for s in sizes[2:])
    assert sum(s.rows for s in sizes) == len(keys)
    assert state.units(10) == []  # the store was emptied


def test_a_group_over_the_byte_bound_fails_naming_the_key_rows_and_knob():
    state = RowsState(GroupApply(_count, max_group_bytes=1_000), KEY_COLS)
    state.add(_rows([7] * 500 + [1, 2]))
    with pytest.raises(GroupTooLargeError, match=r"key 7 holds 500 rows, about \d+ bytes.*max_group_bytes=1000") as info:
        state.units(100)
    assert info.value.key == 7


def _unit(keys, values=None) -> GroupUnit:
    state = RowsState(GroupApply(_count), KEY_COLS)
    state.add(_rows(keys, values))
    (unit,) = state.units(None)
    return unit


@pytest.mark.parametrize("fmt", ["pandas", "arrow", "numpy"])
def test_every_batch_format_sees_whole_groups_and_may_return_any_rows(fmt):
    def fn(group):
        ks = group["k"] if fmt != "arrow" else group["k"].to_numpy()
        vs = group["v"] if fmt != "arrow" else group["v"].to_numpy()
        return {"k": [int(np.asarray(ks)[0])] * 2, "n": [len(ks), int(np.asarray(vs).sum())]}

    done = GroupApply(fn, batch_format=fmt).apply(_unit([1, 2, 1, 3, 1]), KEY_COLS)
    rows = sorted(zip(done.table["k"].to_pylist(), done.table["n"].to_pylist()))
    assert rows == sorted([(1, 3), (1, 6), (2, 1), (2, 1), (3, 1), (3, 3)])
    assert done.rows == 5 and done.groups == 3 and done.seconds >= 0


def test_fn_given_the_key_gets_a_tuple_of_its_values():
    seen = []
    GroupApply(lambda key, pdf: seen.append(key)).apply(_unit(["a", "b", "a"]), KEY_COLS)
    assert sorted(seen) == [("a",), ("b",)]


def test_a_schema_casts_the_output_and_a_mismatch_names_the_key_and_both_schemas():
    schema = pa.schema([("k", pa.int32()), ("n", pa.float64()), ("s", pa.int64())])
    done = GroupApply(_count, schema=schema).apply(_unit([1, 1, 2]), KEY_COLS)
    assert done.table.schema == schema
    wrong = pa.schema([("k", pa.int64()), ("count", pa.int64())])
    with pytest.raises(SchemaError, match=r"returned columns \['k', 'n', 's'\] for the group of key 1.*schema has"):
        GroupApply(_count, schema=wrong).apply(_unit([1, 1, 2]), KEY_COLS)
    bad_type = pa.schema([("k", pa.list_(pa.int64())), ("n", pa.int64()), ("s", pa.int64())])
    with pytest.raises(SchemaError, match=r"does not fit the schema.*returned: k: int64.*schema: k: list<item: int64>"):
        GroupApply(_count, schema=bad_type).apply(_unit([1]), KEY_COLS)


def test_fn_errors_name_the_key_and_the_original_exception():
    def boom(pdf):
        if pdf.k.iloc[0] == 2:
            raise ZeroDivisionError("no")
        return pdf

    with pytest.raises(UserCodeError, match=r"ZeroDivisionError: no on the group of key 2 \(1 rows\)") as info:
        GroupApply(boom).apply(_unit([1, 2]), KEY_COLS)
    assert info.value.key == 2 and isinstance(info.value.__cause__, ZeroDivisionError)
    with pytest.raises(UserCodeError, match="must return a pandas.DataFrame.*returned int"):
        GroupApply(lambda pdf: 3).apply(_unit([1]), KEY_COLS)


def test_a_wrapped_group_apply_or_combined_input_is_refused_before_the_job():
    table = pa.table({"k": [1, 2]})
    with pytest.raises(ConfigError, match="cannot be wrapped"):
        dpa.run(table, key="k", reducer=dpa.WithCost(GroupApply(_count), 0.001), runtime="local")
    with pytest.raises(ConfigError, match="partial states"):
        dpa.run(table, key="k", reducer=GroupApply(_count), runtime="local", input_combined=True)


def _many_small(groups: int = 600, seed: int = 3) -> pa.Table:
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, groups, groups * 6)
    return _rows(keys.tolist(), rng.random(len(keys)).tolist())


def _pandas_reference(table: pa.Table, fn) -> pd.DataFrame:
    pdf = table.drop_columns([HASH_COL]).to_pandas()
    return pd.concat([fn(g.reset_index(drop=True)) for _, g in pdf.groupby("k")], ignore_index=True)


def _by_rows(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)


def _units_of(table: pa.Table, target_rows: int | None) -> list[GroupUnit]:
    state = RowsState(GroupApply(_count), KEY_COLS)
    state.add(table)
    return state.units(target_rows)


def _mutating(pdf: pd.DataFrame) -> pd.DataFrame:
    pdf["x"] = pdf.v - pdf.v.mean()  # assigning into the group hands no warning and no other group's rows
    pdf.loc[0, "v"] = -1.0  # the group's index is 0..rows-1
    return pdf


@pytest.mark.parametrize("fn", [
    lambda pdf: pdf.assign(x=pdf.v - pdf.v.mean()),
    lambda pdf: pd.DataFrame({"k": [pdf.k.iloc[0]], "n": [len(pdf)], "m": [pdf.v.mean()]}),
    _mutating,
    lambda pdf: pdf.head(0) if pdf.k.iloc[0] % 3 else pdf.tail(1),  # some groups return no rows
], ids=["assign", "summary", "mutating", "some-empty"])
@pytest.mark.parametrize("target_rows", [None, 50])
def test_many_small_groups_give_pandas_answer(fn, target_rows):
    table = _many_small()
    units = _units_of(table, target_rows)
    got = [GroupApply(fn).apply(u, KEY_COLS) for u in units]
    out = pd.concat([r.table.to_pandas() for r in got if r.table is not None], ignore_index=True)
    pd.testing.assert_frame_equal(_by_rows(out), _by_rows(_pandas_reference(table, fn)))
    assert sum(r.groups for r in got) == table["k"].to_pandas().nunique()


def _typed(pdf: pd.DataFrame) -> pd.DataFrame:
    """Columns of pandas' extension and object dtypes, with nulls in some groups."""
    k = int(pdf.k.iloc[0])
    n = len(pdf)
    return pd.DataFrame({
        "k": pd.array([k] * n, dtype="Int64"),
        "maybe": pd.array([None if k % 3 == 0 else i for i in range(n)], dtype="Int64"),
        "label": pd.Categorical(["odd" if k % 2 else "even"] * n, categories=["even", "odd"]),
        "s": [f"k{k}-{i}" for i in range(n)],
        "t": pd.date_range("2026-01-01", periods=n, freq="h", tz="UTC") + pd.Timedelta(days=k),
        "f": pdf.v.to_numpy() * 2,
    })


@pytest.mark.parametrize("fn", [_typed, lambda pdf: pdf], ids=["extension-dtypes", "the-group-itself"])
def test_outputs_of_every_pandas_dtype_concatenate_as_pandas_does(fn):
    table = _many_small(groups=300)
    (unit,) = _units_of(table, None)
    done = GroupApply(fn).apply(unit, KEY_COLS)
    want = _pandas_reference(table, fn)
    got = done.table.to_pandas()
    assert got.dtypes.tolist() == want.dtypes.tolist()
    pd.testing.assert_frame_equal(_by_rows(got), _by_rows(want))


def test_each_group_is_a_fresh_frame_indexed_from_zero_whose_changes_stay_its_own():
    table = _many_small(groups=100)
    (unit,) = _units_of(table, None)
    seen = []

    def look(pdf):
        seen.append((pdf.index.equals(pd.RangeIndex(len(pdf))), pdf.k.nunique(), float(pdf.v.sum())))
        pdf["v"] = 0.0  # a column replaced in one group is not seen by the next
        pdf.loc[0, "k"] = -1
        return None

    assert GroupApply(look).apply(unit, KEY_COLS).table is None
    want = table.to_pandas().groupby("k").v.sum()
    assert all(indexed and keys == 1 for indexed, keys, _ in seen)
    assert sorted(s for _, _, s in seen) == pytest.approx(sorted(want.tolist()))


def test_outputs_whose_types_or_columns_differ_between_groups_combine_as_arrow_promotes_them():
    table = _many_small(groups=200)
    (unit,) = _units_of(table, None)

    def mixed(pdf):  # int for even keys, float for odd ones; the first group decides nothing
        n = len(pdf) if pdf.k.iloc[0] % 2 == 0 else len(pdf) + 0.5
        return pd.DataFrame({"k": [pdf.k.iloc[0]], "n": [n]})

    done = GroupApply(mixed).apply(unit, KEY_COLS)
    assert done.table.schema.field("n").type == pa.float64()
    assert sorted(done.table["n"].to_pylist()) == sorted(_pandas_reference(table, mixed)["n"].tolist())

    def flags(pdf):  # bool for some groups, int for others: Arrow cannot combine them, pandas would
        flag = bool(pdf.k.iloc[0] % 2) if pdf.k.iloc[0] < 100 else int(pdf.k.iloc[0])
        return pd.DataFrame({"k": [pdf.k.iloc[0]], "f": [flag]})

    with pytest.raises(SchemaError):
        GroupApply(flags).apply(unit, KEY_COLS)

    def shuffled(pdf):  # the same columns in another order for odd keys
        out = pd.DataFrame({"k": [pdf.k.iloc[0]], "n": [len(pdf)]})
        return out[["n", "k"]] if pdf.k.iloc[0] % 2 else out

    schema = pa.schema([("k", pa.int64()), ("n", pa.int32())])
    done = GroupApply(shuffled, schema=schema).apply(unit, KEY_COLS)
    assert done.table.schema == schema and done.groups == done.table.num_rows


def test_a_bad_output_among_many_groups_names_its_key():
    table = _many_small(groups=200)
    (unit,) = _units_of(table, None)

    def one_bad(pdf):
        k = int(pdf.k.iloc[0])
        return pd.DataFrame({"k": [k], "n": ["many" if k == 77 else len(pdf)]})

    schema = pa.schema([("k", pa.int64()), ("n", pa.int64())])
    with pytest.raises(SchemaError, match="for the group of key 77 does not fit the schema"):
        GroupApply(one_bad, schema=schema).apply(unit, KEY_COLS)

    def mixed_objects(pdf):
        k = int(pdf.k.iloc[0])
        return pd.DataFrame({"k": [k, k], "n": pd.Series([1, "x"] if k == 77 else ["a", "b"], dtype=object)})

    with pytest.raises(UserCodeError, match="Arrow cannot convert for the group of key 77"):
        GroupApply(mixed_objects).apply(unit, KEY_COLS)
