"""Canonical key encodings of dates, times, timestamps, durations and decimals.

The companion of :mod:`dpa.keys.encoding` (scalars) and :mod:`dpa.keys.columns` (Arrow columns) for
the key types people group by besides strings and numbers. Every encoding starts with the
non-UTF-8 byte ``0xFF`` and a one-byte tag, like the others of :func:`dpa.keys.encoding.encode_key`,
and depends only on the value, never on the process or on how the value is stored:

==================================  ===  ==============================================
value (Python / Arrow)              tag  payload
==================================  ===  ==============================================
``datetime.date`` / date32, date64  D    days since 1970-01-01, 8 bytes big-endian
naive ``datetime`` / timestamp       w    seconds since 1970-01-01 00:00 of the wall
  without a time zone                     clock (8 bytes, signed, floored) and the
                                          nanoseconds within that second (4 bytes)
aware ``datetime`` / timestamp       t    the same for the UTC instant (the zone is
  with a time zone                        only how the instant is shown)
``datetime.time`` / time32, time64   h    nanoseconds since midnight, 8 bytes
``timedelta`` / duration             u    seconds (floored) and nanoseconds, as ``w``
``decimal.Decimal`` / decimal128,    c    the value in plain notation without trailing
  decimal256                              zeros (``1.50`` and ``1.5`` are one key)
==================================  ===  ==============================================

So the unit of a timestamp, time or duration column does not change its keys (a
``timestamp[ms]`` and a ``timestamp[us]`` column hold the same keys), and neither do a
decimal's precision and scale. A naive and a zoned timestamp are different key classes
(:func:`temporal_key_class`): one is a wall-clock reading, the other an instant. pandas'
``Timestamp`` and ``Timedelta`` keep their nanoseconds.
"""

from __future__ import annotations

import datetime as dt
import decimal
import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpa.errors import KeyEncodingError

TAG_DATE = b"\xffD"
TAG_WALL = b"\xffw"
TAG_INSTANT = b"\xfft"
TAG_TIME = b"\xffh"
TAG_DURATION = b"\xffu"
TAG_DECIMAL = b"\xffc"

_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_PACK_Q = struct.Struct(">q").pack
_PACK_QI = struct.Struct(">qI").pack
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


# -- scalars ---------------------------------------------------------------------------

def _wall_parts(value: dt.datetime) -> tuple[int, int]:
    days = value.toordinal() - _EPOCH_ORDINAL
    seconds = days * 86400 + value.hour * 3600 + value.minute * 60 + value.second
    return seconds, value.microsecond * 1000 + int(getattr(value, "nanosecond", 0))


def encode_temporal(key: object) -> bytes | None:
    """The encoding of a date, datetime, time, timedelta or Decimal key; None for other types.

    Raises:
        KeyEncodingError: a Decimal NaN or infinity, or a time with a time zone.
    """
    if isinstance(key, dt.datetime):  # (before date: a datetime is a date)
        offset = key.utcoffset()
        if offset is None:
            return TAG_WALL + _PACK_QI(*_wall_parts(key))
        seconds, nanos = _wall_parts(key.replace(tzinfo=None))
        shift = offset.days * 86400 + offset.seconds
        extra = offset.microseconds * 1000
        nanos -= extra
        if nanos < 0:
            nanos += 1_000_000_000
            seconds -= 1
        return TAG_INSTANT + _PACK_QI(seconds - shift, nanos)
    if isinstance(key, dt.date):
        return TAG_DATE + _PACK_Q(key.toordinal() - _EPOCH_ORDINAL)
    if isinstance(key, dt.time):
        if key.tzinfo is not None:
            raise KeyEncodingError(
                f"cannot encode time key {key!r} with a time zone; Arrow and Spark times have none: "
                "drop it (key.replace(tzinfo=None)) or use a datetime")
        seconds = key.hour * 3600 + key.minute * 60 + key.second
        return TAG_TIME + _PACK_Q(seconds * 1_000_000_000 + key.microsecond * 1000
                                  + int(getattr(key, "nanosecond", 0)))
    if isinstance(key, dt.timedelta):
        seconds = key.days * 86400 + key.seconds
        return TAG_DURATION + _PACK_QI(seconds, key.microseconds * 1000 + int(getattr(key, "nanoseconds", 0)))
    if isinstance(key, decimal.Decimal):
        return TAG_DECIMAL + _decimal_text(key).encode("ascii")
    return None


def _decimal_text(value: decimal.Decimal) -> str:
    if not value.is_finite():
        raise KeyEncodingError(
            f"cannot encode Decimal key {value!r}: NaN and infinity are not values of a decimal column; "
            "use a float key or drop those records")
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def python_temporal_class(value: object) -> str | None:
    """The key class of a Python date/time/decimal value, or None for other types."""
    if isinstance(value, dt.datetime):
        return "timestamp" if value.utcoffset() is None else "timestamp_tz"
    if isinstance(value, dt.date):
        return "date"
    if isinstance(value, dt.time):
        return "time"
    if isinstance(value, dt.timedelta):
        return "duration"
    if isinstance(value, decimal.Decimal):
        return "decimal"
    return None


# -- Arrow types -----------------------------------------------------------------------

def temporal_key_class(dtype: pa.DataType) -> str | None:
    """The key class of an Arrow date/time/timestamp/duration/decimal type, else None."""
    if pa.types.is_date(dtype):
        return "date"
    if pa.types.is_timestamp(dtype):
        return "timestamp" if dtype.tz is None else "timestamp_tz"
    if pa.types.is_time(dtype):
        return "time"
    if pa.types.is_duration(dtype):
        return "duration"
    if pa.types.is_decimal(dtype):
        return "decimal"
    return None


def _ints(arr: pa.Array) -> np.ndarray:
    """The int64 storage of a temporal array (nulls as 0; the caller masks them)."""
    storage = pa.int32() if pa.types.is_date32(arr.type) or pa.types.is_time32(arr.type) else pa.int64()
    values = arr.view(storage) if hasattr(arr, "view") else arr.cast(storage)
    return np.asarray(values.fill_null(0), dtype=np.int64)


def _rows(prefix: bytes, payload: np.ndarray) -> pa.Array:
    n, width = payload.shape
    out = np.empty((n, len(prefix) + width), dtype=np.uint8)
    out[:, : len(prefix)] = np.frombuffer(prefix, dtype=np.uint8)
    out[:, len(prefix):] = payload
    offsets = np.arange(n + 1, dtype=np.int64) * out.shape[1]
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(out.reshape(-1))])


def _seconds_nanos(tag: bytes, values: np.ndarray, unit: str) -> pa.Array:
    per = _PER_SECOND[unit]
    seconds = np.floor_divide(values, per)
    nanos = (values - seconds * per) * (1_000_000_000 // per)
    payload = np.empty((len(values), 12), dtype=np.uint8)
    payload[:, :8] = seconds.astype(">i8").view(np.uint8).reshape(-1, 8)
    payload[:, 8:] = nanos.astype(">u4").view(np.uint8).reshape(-1, 4)
    return _rows(tag, payload)


def encode_temporal_array(arr: pa.Array) -> pa.Array | None:
    """Encodings (large_binary; a null row gets a placeholder the caller replaces) of every
    value of a date/time/timestamp/duration/decimal array, as :func:`encode_temporal`
    encodes them; None for other types."""
    t = arr.type
    if pa.types.is_decimal(t):
        return _decimal_array(arr)
    if temporal_key_class(t) is None:
        return None
    values = _ints(arr)
    if pa.types.is_date32(t):
        return _rows(TAG_DATE, values.astype(">i8").view(np.uint8).reshape(-1, 8))
    if pa.types.is_date64(t):
        days = np.floor_divide(values, 86_400_000)
        return _rows(TAG_DATE, days.astype(">i8").view(np.uint8).reshape(-1, 8))
    if pa.types.is_time(t):
        nanos = values * (1_000_000_000 // _PER_SECOND[t.unit])
        return _rows(TAG_TIME, nanos.astype(">i8").view(np.uint8).reshape(-1, 8))
    if pa.types.is_timestamp(t):
        return _seconds_nanos(TAG_WALL if t.tz is None else TAG_INSTANT, values, t.unit)
    return _seconds_nanos(TAG_DURATION, values, t.unit)


def _decimal_array(arr: pa.Array) -> pa.Array:
    text = None
    if arr.type.scale >= 0:
        text = pc.cast(arr, pa.string())
        if arr.type.scale > 0:
            text = pc.replace_substring_regex(pc.replace_substring_regex(text, r"0+$", ""), r"\.$", "")
        if pc.any(pc.match_substring(text, "E")).as_py():  # scientific notation: format in Python
            text = None
    if text is None:
        values = arr.to_pylist()
        text = pa.array([None if v is None else _decimal_text(v) for v in values], pa.string())
    text = text.fill_null("")
    return pc.binary_join_element_wise(pa.scalar(TAG_DECIMAL, pa.large_binary()), text.cast(pa.large_binary()),
                                       pa.scalar(b"", pa.large_binary()))
