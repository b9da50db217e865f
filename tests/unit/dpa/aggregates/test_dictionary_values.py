"""Dictionary-encoded value columns (a pandas categorical, a parquet dictionary column):
every aggregate reads their values, as if the column had been decoded first."""

from __future__ import annotations

import datetime

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import dpa

N = 400


def _tables() -> tuple[pa.Table, pa.Table]:
    """The same records twice: value columns dictionary-encoded, and decoded."""
    rng = np.random.default_rng(5)
    s = [None if i % 11 == 0 else f"s{v}" for i, v in enumerate(rng.integers(0, 9, N))]
    x = [None if i % 13 == 0 else float(v) for i, v in enumerate(rng.integers(0, 50, N))]
    d = [datetime.date(2026, 1, 1) + datetime.timedelta(days=int(v)) for v in rng.integers(0, 20, N)]
    b = [bool(v) for v in rng.integers(0, 2, N)]
    plain = pa.table({"k": rng.zipf(1.5, N) % 7, "s": pa.array(s), "x": pa.array(x), "d": pa.array(d, pa.date32()),
                      "b": pa.array(b)})
    encoded = pa.table({"k": plain["k"], **{c: plain[c].dictionary_encode() for c in ["s", "x", "d", "b"]}})
    return encoded, plain


REDUCERS = [
    lambda: dpa.Count("s"), lambda: dpa.Min("s"), lambda: dpa.Max("d"), lambda: dpa.Collect("s"),
    lambda: dpa.TopK("x", 3), lambda: dpa.Sum("x"), lambda: dpa.Mean("x"), lambda: dpa.Std("x"),
    lambda: dpa.CountDistinct("s"), lambda: dpa.CollectSet("d"), lambda: dpa.ApproxCountDistinct("s"),
    lambda: dpa.Median("x"), lambda: dpa.CountIf("b"), lambda: dpa.Any("b"), lambda: dpa.All("b"),
    lambda: dpa.MaxBy("s", by="d"), lambda: dpa.MinBy("x", by="s"),
]


def _canonical(table: pa.Table) -> list:
    rows = table.sort_by("k").to_pylist()
    return [{c: sorted(v, key=str) if isinstance(v, list) else v for c, v in r.items()} for r in rows]


@pytest.mark.parametrize("make", REDUCERS, ids=lambda make: repr(make()))
def test_an_aggregate_of_a_dictionary_column_equals_it_of_the_decoded_column(make):
    encoded, plain = _tables()
    got = dpa.run(encoded, key="k", reducer=make(), runtime="local", num_reducers=3, batch_size=64).to_arrow()
    want = dpa.run(plain, key="k", reducer=make(), runtime="local", num_reducers=3, batch_size=64).to_arrow()
    assert got.schema == want.schema
    if isinstance(make(), (dpa.Collect, dpa.TopK)):  # (their order depends on arrival)
        assert [r["k"] for r in _canonical(got)] == [r["k"] for r in _canonical(want)]
        return
    assert _canonical(got) == _canonical(want)


def test_several_aggregates_of_pandas_categoricals_in_one_pass():
    df = pd.DataFrame({"k": pd.Categorical(["a", "b", "a", "a"]), "c": pd.Categorical(["y", "x", None, "x"]),
                       "n": pd.Categorical([3, 1, 2, 2])})
    result = dpa.run(df, key="k", reducer=[dpa.Min("c"), dpa.Max("n"), dpa.Sum("n"), dpa.Count("c"), dpa.Min("k")],
                     runtime="local")
    table = result.to_arrow()
    assert pa.types.is_dictionary(table.schema.field("k").type)  # a key keeps its type
    assert [table.schema.field(c).type for c in table.column_names[1:]] == [pa.string(), pa.int64(), pa.int64(),
                                                                          pa.int64(), pa.string()]
    assert result.to_dict() == {"a": ("x", 3, 7, 2, "a"), "b": ("x", 1, 1, 1, "b")}
