"""Keys people group by: dates, times, timestamps, durations, decimals, dictionaries, wide strings."""

from __future__ import annotations

import datetime as dt
import decimal
from collections import Counter

import pandas as pd
import pyarrow as pa
import pytest

import dpa
from dpa.errors import KeyEncodingError
from dpa.keys.columns import hash_key_columns
from dpa.keys.encoding import encode_key, hash_key, key_type_class, python_key_class

D = decimal.Decimal
UTC = dt.timezone.utc
PLUS2 = dt.timezone(dt.timedelta(hours=2))

COLUMNS = {
    "date32": pa.array([dt.date(2024, 3, 1), dt.date(1969, 12, 31), None, dt.date(1, 1, 1)], pa.date32()),
    "date64": pa.array([dt.date(2024, 3, 1), dt.date(1969, 12, 31), None, dt.date(9999, 12, 31)], pa.date64()),
    "ts_s": pa.array([dt.datetime(2024, 3, 1, 12), dt.datetime(1960, 1, 1, 0, 0, 1), None, dt.datetime(1970, 1, 1)],
                     pa.timestamp("s")),
    "ts_us_tz": pa.array([dt.datetime(2024, 3, 1, 12, 0, 0, 5, tzinfo=UTC), dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
                          None, dt.datetime(2000, 1, 1, tzinfo=UTC)], pa.timestamp("us", tz="Europe/Paris")),
    "ts_ns": pa.array([1, -1, None, 1_700_000_000_123_456_789], pa.int64()).view(pa.timestamp("ns")),
    "time32": pa.array([dt.time(0, 0), dt.time(23, 59, 59), None, dt.time(12, 30)], pa.time32("s")),
    "time64": pa.array([1000, 86_399_999_999_000, None, 0], pa.int64()).view(pa.time64("ns")),
    "duration": pa.array([dt.timedelta(seconds=-1, microseconds=3), dt.timedelta(days=3), None, dt.timedelta(0)],
                         pa.duration("us")),
    "dec": pa.array([D("1.50"), D("-0.07"), None, D("100.00")], pa.decimal128(10, 2)),
    "dec256": pa.array([D("1.5"), D("-12345678901234567890123456789.5"), None, D("0")], pa.decimal256(45, 1)),
    "dec_small": pa.array([D("0.0000001"), D("1.0000000"), None, D("-0.0000010")], pa.decimal128(20, 7)),
    "large_string": pa.array(["a", "é", None, ""], pa.large_string()),
    "large_binary": pa.array([b"a", b"\x00", None, b""], pa.large_binary()),
    "fixed_binary": pa.array([b"ab", b"\x00\x01", None, b"zz"], pa.binary(2)),
    "dict_date": pa.array([dt.date(2024, 3, 1), dt.date(2024, 3, 1), None, dt.date(2024, 3, 2)]).dictionary_encode(),
    "dict_dec": pa.array([D("1.5"), D("2.5"), None, D("1.5")], pa.decimal128(5, 1)).dictionary_encode(),
}


@pytest.mark.parametrize("name", sorted(COLUMNS))
def test_vectorised_hash_equals_scalar_hash(name: str) -> None:
    arr = COLUMNS[name]
    table = pa.table({"k": arr, "j": pa.array([1, 2, 3, 4])})
    hashes = hash_key_columns(table, ["k"])
    assert hashes.tolist() == [hash_key(v) for v in arr.to_pylist()]
    both = hash_key_columns(table, ["k", "j"])
    assert both.tolist() == [hash_key((v, j)) for v, j in zip(arr.to_pylist(), [1, 2, 3, 4])]
    assert hash_key_columns(table, ["k"], distinct=True).tolist() == hashes.tolist()


def test_units_scales_and_zones_do_not_change_keys() -> None:
    instant = dt.datetime(2024, 3, 1, 12, 0, 0, 250000, tzinfo=UTC)
    assert encode_key(instant) == encode_key(instant.astimezone(PLUS2))
    assert encode_key(instant) != encode_key(instant.replace(tzinfo=None))  # naive: a wall clock
    assert encode_key(D("1.50")) == encode_key(D("1.5")) == encode_key(D("15E-1"))
    assert encode_key(D("-0.00")) == encode_key(D("0"))
    assert encode_key(D("1.5")) != encode_key(1.5)
    ms = pa.table({"k": pa.array([instant], pa.timestamp("ms", tz="UTC"))})
    ns = pa.table({"k": pa.array([instant], pa.timestamp("ns", tz="Asia/Tokyo"))})
    assert hash_key_columns(ms, ["k"]).tolist() == hash_key_columns(ns, ["k"]).tolist()
    a = pa.table({"k": pa.array([D("1.5")], pa.decimal128(5, 1))})
    b = pa.table({"k": pa.array([D("1.5")], pa.decimal256(40, 10))})
    assert hash_key_columns(a, ["k"]).tolist() == hash_key_columns(b, ["k"]).tolist()
    assert encode_key(pd.Timestamp("2024-01-01 00:00:00.000000001")) != encode_key(pd.Timestamp("2024-01-01"))
    assert encode_key(pd.Timedelta(1, "ns")) != encode_key(dt.timedelta(0))
    assert encode_key(dt.date(2024, 1, 1)) != encode_key(dt.datetime(2024, 1, 1))


def test_key_classes() -> None:
    assert key_type_class(pa.date32()) == key_type_class(pa.date64()) == python_key_class(dt.date(2020, 1, 1)) == "date"
    assert key_type_class(pa.timestamp("s")) == python_key_class(dt.datetime(2020, 1, 1)) == "timestamp"
    assert key_type_class(pa.timestamp("ns", "UTC")) == python_key_class(dt.datetime(2020, 1, 1, tzinfo=UTC)) == "timestamp_tz"
    assert key_type_class(pa.decimal256(40, 2)) == python_key_class(D(1)) == "decimal"
    assert key_type_class(pa.dictionary(pa.int8(), pa.time64("us"))) == "time"


def test_bad_scalar_keys_are_explained() -> None:
    with pytest.raises(KeyEncodingError, match="NaN and infinity"):
        encode_key(D("NaN"))
    with pytest.raises(KeyEncodingError, match="time zone"):
        encode_key(dt.time(1, tzinfo=UTC))


@pytest.mark.parametrize("name", sorted(COLUMNS))
def test_group_by_keeps_the_input_type(name: str) -> None:
    arr = COLUMNS[name]
    table = pa.table({"k": pa.concat_arrays([arr, arr, arr]), "v": pa.array(range(12))})
    result = dpa.run(table, key="k", reducer=dpa.Sum("v"), runtime="local", policy="pkg")
    out = result.to_arrow()
    assert out.schema.field("k").type == arr.type
    want: Counter = Counter()
    for k, v in zip(table["k"].to_pylist(), table["v"].to_pylist()):
        want[k] += v
    assert result.to_dict() == dict(want)


def test_pandas_categorical_and_parquet_dictionary(tmp_path) -> None:
    df = pd.DataFrame({"day": pd.Categorical(["mon", "tue", "mon", None, "mon"]), "x": [1, 2, 3, 4, 5]})
    result = dpa.run(df, key="day", reducer=dpa.Sum("x"), runtime="local", batch_size=2)
    assert result.to_dict() == {"mon": 9, "tue": 2, None: 4}
    assert pa.types.is_dictionary(result.to_arrow().schema.field("day").type)
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"k": ["a", "b", "a"] * 100, "x": list(range(300))}), path, row_group_size=50)
    table = pq.read_table(path, read_dictionary=["k"])
    assert pa.types.is_dictionary(table.schema.field("k").type)
    assert dpa.run(table, key="k", runtime="local", batch_size=64).to_dict() == {"a": 200, "b": 100}


@pytest.mark.parametrize("dtype", [pa.list_(pa.int64()), pa.struct([("a", pa.int64())]),
                                   pa.map_(pa.string(), pa.int64())])
def test_nested_keys_rejected_before_the_job(dtype: pa.DataType) -> None:
    values = {"list": [[1], [2]], "struct": [{"a": 1}, {"a": 2}], "map": [[("a", 1)], [("b", 2)]]}
    kind = "list" if pa.types.is_list(dtype) else "struct" if pa.types.is_struct(dtype) else "map"
    table = pa.table({"k": pa.array(values[kind], dtype), "v": [1, 2]})
    with pytest.raises(KeyEncodingError, match="key column 'k'.*cannot hash key column of Arrow type"):
        dpa.run(table, key="k", runtime="local")


def test_python_records_with_date_keys() -> None:
    records = [{"day": dt.date(2024, 1, 1 + i % 3), "x": i} for i in range(30)]
    result = dpa.run(records, key="day", reducer=dpa.Count(), runtime="local")
    assert result.to_dict() == {dt.date(2024, 1, d): 10 for d in (1, 2, 3)}
    out = dpa.run(records, key=lambda r: (r["day"], D(r["x"] % 2)), runtime="local").to_dict()
    assert out[(dt.date(2024, 1, 1), D(0))] == 5
