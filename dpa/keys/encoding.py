"""Canonical key encoding and hashing.

Every key that dpa routes is first turned into bytes by :func:`encode_key` and then
hashed with 32-bit MurmurHash3 (x86_32 variant, seed 0, unsigned result) by
:func:`hash_bytes`. Python's builtin ``hash()`` is never used: it is salted per process
(``PYTHONHASHSEED``), so mappers and reducers in different processes would disagree.

Encoding rules (the encoding is injective: different keys give different bytes):

* ``str``: its plain UTF-8 bytes, so a string key hashes exactly like ``mmh3(key)`` in
  the DPA paper.
* Every other type starts with the byte ``0xFF`` (which never occurs in UTF-8, so no
  non-string key can collide with a string key), then a one-byte type tag, then a payload:

  ====================  ===  ====================================================
  type                  tag  payload
  ====================  ===  ====================================================
  ``None``              N    (empty)
  ``bool``              B    one byte, 0 or 1 (also ``numpy.bool_``)
  ``int`` in int64      i    8 bytes, big-endian two's complement
  other ``int``         I    minimal big-endian two's complement (arbitrary size)
  ``float``             f    8 bytes, big-endian IEEE-754 double; ``-0.0`` is
                             encoded as ``0.0`` and every NaN as the same NaN
  ``bytes``-like        b    the raw bytes (``bytes``, ``bytearray``, ``memoryview``)
  ``tuple``             T    for each element: 4-byte big-endian length, then the
                             element's own encoding (so ``("ab", "c")`` differs
                             from ``("a", "bc")``); tuples nest
  date, datetime, time, D w  see :mod:`dpa.keys.types` (the unit of a timestamp
  timedelta, Decimal    t h  column, or a decimal's scale, does not change its keys)
                        u c
  ====================  ===  ====================================================

  numpy integers and floats are encoded like the equivalent Python ``int``/``float``.

Note:
    ``1`` (int), ``1.0`` (float) and ``True`` (bool) are three *different* keys, as values
    of an int64, a float64 and a boolean Arrow/Spark column would be. Python considers them
    equal (``1 == 1.0 == True``), dpa does not. Hence a key column keeps one *key class*
    (:func:`key_type_class`: null, bool, int, float, str or bytes) for the whole job: int32
    then int64 is fine, int then float is a :class:`~dpa.errors.SchemaError`.

    :func:`encode_key` accepts ints of any size, but the keys of a job live in Arrow
    columns: keys taken from Python records or returned by a key function must fit int64
    (``-2**63 <= k < 2**63``; an Arrow ``uint64`` column may hold up to ``2**64 - 1``).
    ``dpa.run`` raises :class:`~dpa.errors.KeyEncodingError` for larger ones
    (:func:`int_key_out_of_range`); use ``str(key)`` as the key instead.

For Arrow data, :func:`hash_key_columns` computes the same hashes column-wise: it hashes
only the distinct values (or distinct tuples for multi-column keys) with a vectorised
numpy implementation of MurmurHash3 and expands the result to all rows.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable
from typing import Any

import mmh3
import numpy as np
import pyarrow as pa

from dpa.errors import ConfigError, KeyEncodingError
from dpa.keys.types import encode_temporal, python_temporal_class, temporal_key_class

__all__ = [
    "NAN_KEY",
    "KeyHashCache",
    "canonical_key",
    "encode_key",
    "int_key_out_of_range",
    "key_type_class",
    "python_key_class",
    "hash_bytes",
    "hash_key",
    "hash_values",
]

TAG_MARK = b"\xff"
TAG_NONE = b"\xffN"
TAG_TRUE = b"\xffB\x01"
TAG_FALSE = b"\xffB\x00"
TAG_INT = b"\xffi"
TAG_BIGINT = b"\xffI"
TAG_FLOAT = b"\xfff"
TAG_BYTES = b"\xffb"
TAG_TUPLE = b"\xffT"

_INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
_PACK_Q = struct.Struct(">q").pack
_PACK_D = struct.Struct(">d").pack
_PACK_LEN = struct.Struct(">I").pack
_CANONICAL_NAN = _PACK_D(math.nan)

_ALLOWED = "str, bytes, int, float, bool, None or tuples of these (or date, datetime, time, timedelta, Decimal)"


def _bad_key(key: Any) -> KeyEncodingError:
    type_name = type(key).__name__
    text = repr(key)
    if len(text) > 80:
        text = text[:77] + "..."
    if isinstance(key, list):
        hint = "convert it, e.g. tuple(...)"
    elif isinstance(key, (set, frozenset)):
        hint = "convert it, e.g. tuple(sorted(...))"
    elif isinstance(key, dict):
        hint = "convert it, e.g. tuple(sorted(d.items()))"
    else:
        hint = "convert it, e.g. str(...) or int(...)"
    return KeyEncodingError(
        f"cannot encode key of type {type_name}: {text}; keys must be {_ALLOWED} — {hint}"
    )


def _encode_str(value: str) -> bytes:
    try:
        return str.encode(value, "utf-8")
    except UnicodeEncodeError as exc:
        raise KeyEncodingError(
            f"cannot encode str key {value!r} as UTF-8 ({exc.reason}, e.g. a lone "
            "surrogate); clean the string, e.g. s.encode('utf-8', 'replace').decode()"
        ) from None


def _encode_int(value: int) -> bytes:
    if _INT64_MIN <= value <= INT64_MAX:
        return TAG_INT + _PACK_Q(value)
    nbytes = (value.bit_length() + 8) // 8  # room for the sign bit
    return TAG_BIGINT + value.to_bytes(nbytes, "big", signed=True)


def _encode_float(value: float) -> bytes:
    if value != value:  # NaN: one canonical bit pattern
        return TAG_FLOAT + _CANONICAL_NAN
    if value == 0.0:  # -0.0 -> 0.0
        return TAG_FLOAT + _PACK_D(0.0)
    return TAG_FLOAT + _PACK_D(value)


def encode_key(key: Any) -> bytes:
    """Encodes a key as canonical, process-independent bytes.

    See the module docstring for the exact format.

    Args:
        key: A ``str``, ``bytes``/``bytearray``/``memoryview``, ``int`` (any size, or a
            numpy integer), ``float`` (or numpy float), ``bool`` (or ``numpy.bool_``),
            ``None``, or a (nested) tuple of these.

    Returns:
        The encoding. For ``str`` keys it is ``key.encode("utf-8")``.

    Raises:
        KeyEncodingError: If the key (or a tuple element) has another type.
    """
    kind = type(key)
    if kind is str:
        return _encode_str(key)
    if kind is int:
        return _encode_int(key)
    if kind is bytes:
        return TAG_BYTES + key
    if kind is tuple:
        parts = [TAG_TUPLE]
        for element in key:
            encoded = encode_key(element)
            parts.append(_PACK_LEN(len(encoded)))
            parts.append(encoded)
        return b"".join(parts)
    if key is None:
        return TAG_NONE
    if kind is bool or isinstance(key, np.bool_):
        return TAG_TRUE if key else TAG_FALSE
    if kind is float:
        return _encode_float(key)
    # Less common types and subclasses.
    if isinstance(key, str):
        return _encode_str(key)
    if isinstance(key, (np.integer, int)):
        return _encode_int(int(key))
    if isinstance(key, (np.floating, float)):
        return _encode_float(float(key))
    if isinstance(key, (bytes, bytearray, memoryview)):
        return TAG_BYTES + bytes(key)
    if isinstance(key, tuple):
        return encode_key(tuple(key))
    encoded = encode_temporal(key)  # dates, times, timestamps, durations, decimals
    if encoded is not None:
        return encoded
    raise _bad_key(key)


def int_key_out_of_range(value: int, where: str = "") -> KeyEncodingError:
    """The error for an int key that no int64 key column can hold.

    Args:
        value: The key (outside ``[-2**63, 2**63 - 1]``).
        where: Where it came from, e.g. ``"in field 'k' of record 7 ({...})"``.

    Returns:
        A :class:`KeyEncodingError` saying what the limits are and how to fix it.
    """
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return KeyEncodingError(
        f"int key {text}{' ' + where if where else ''} is outside the int64 range "
        f"[{_INT64_MIN}, {INT64_MAX}] that dpa's key columns hold (Arrow, like Spark, has "
        "no wider integer type; a uint64 Arrow column may hold up to 2**64 - 1); "
        "use str(key) as the key instead"
    )


#: Key class of each exact Python type (subclasses and numpy types: see python_key_class).
_PY_CLASS = {str: "str", int: "int", float: "float", bool: "bool", bytes: "bytes", type(None): "null",
             tuple: "tuple", bytearray: "bytes", memoryview: "bytes"}


def python_key_class(value: Any) -> str:
    """The key class of a Python key, as :func:`encode_key` tags it.

    Returns:
        ``"null"``, ``"bool"``, ``"int"``, ``"float"``, ``"str"``, ``"bytes"`` or
        ``"tuple"``; for any other type its name (which :func:`encode_key` rejects).
    """
    cls = _PY_CLASS.get(type(value))
    if cls is not None:
        return cls
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, str):
        return "str"
    if isinstance(value, (int, np.integer)):
        return "int"
    if isinstance(value, (float, np.floating)):
        return "float"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytes"
    if isinstance(value, tuple):
        return "tuple"
    return python_temporal_class(value) or type(value).__name__


def key_type_class(dtype: pa.DataType) -> str:
    """The key class of an Arrow column type: which keys its values are.

    Columns of one class hold the same keys (an int32 1 and an int64 1 are the key ``1``;
    a ``string`` and a ``large_string`` "a" are ``"a"``); columns of different classes
    never do (an int 1 and a float 1.0 are different keys, see the module docstring).

    Args:
        dtype: An Arrow type (dictionary types count as their value type).

    Returns:
        ``"null"``, ``"bool"``, ``"int"``, ``"float"``, ``"str"``, ``"bytes"``, or the
        type's own name for types that are not key types (lists, structs, ...).
    """
    if pa.types.is_dictionary(dtype):
        return key_type_class(dtype.value_type)
    if pa.types.is_null(dtype):
        return "null"
    if pa.types.is_boolean(dtype):
        return "bool"
    if pa.types.is_integer(dtype):
        return "int"
    if pa.types.is_floating(dtype):
        return "float"
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return "str"
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype) or pa.types.is_fixed_size_binary(dtype):
        return "bytes"
    return temporal_key_class(dtype) or str(dtype)


def hash_bytes(data: bytes) -> int:
    """Hashes bytes with MurmurHash3 x86_32, seed 0.

    Args:
        data: The bytes to hash.

    Returns:
        The 32-bit hash as an unsigned int in ``[0, 2**32)``.
    """
    return mmh3.hash(data, seed=0, signed=False)


#: The one NaN object every NaN key is replaced by (:func:`canonical_key`): Python compares
#: NaN unequal to itself but finds an object in a dict by identity, so one object makes
#: one group.
NAN_KEY = math.nan


def canonical_key(key: Any) -> Any:
    """The representative of ``key``'s group, as Spark and DuckDB group floating-point keys:
    ``-0.0`` becomes ``0.0`` and every NaN :data:`NAN_KEY`, in tuples too (their encodings,
    :func:`encode_key`, already agree). Any other key is returned as it is.
    """
    if isinstance(key, float):
        return NAN_KEY if key != key else key + 0.0  # (-0.0 + 0.0 == 0.0)
    if isinstance(key, tuple) and any(isinstance(k, (float, tuple)) for k in key):
        return tuple(canonical_key(k) for k in key)
    return key


def hash_key(key: Any) -> int:
    """Hashes a key: ``hash_bytes(encode_key(key))``.

    Args:
        key: Any key accepted by :func:`encode_key`.

    Returns:
        The unsigned 32-bit hash.

    Raises:
        KeyEncodingError: If the key type is not supported.
    """
    # Always hash bytes: mmh3 given a str with a lone surrogate crashes the process.
    return mmh3.hash(encode_key(key), seed=0, signed=False)


class KeyHashCache:
    """A bounded ``key -> hash`` memo shared across batches.

    A mapper sees the same hot keys in every batch; keeping their hashes avoids
    re-encoding them. Keys that Python considers equal but dpa does not (``1``, ``1.0``,
    ``True``) are kept apart. When full, the oldest half of the entries is evicted.

    Args:
        max_entries: Maximum number of cached keys (>= 1).

    Raises:
        ConfigError: If ``max_entries < 1``.
    """

    def __init__(self, max_entries: int = 65536) -> None:
        if max_entries < 1:
            raise ConfigError(f"KeyHashCache max_entries must be >= 1, got {max_entries}")
        self.max_entries = int(max_entries)
        self._data: dict[Any, int] = {}
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._data)

    @staticmethod
    def _slot(key: Any) -> Any:
        kind = type(key)
        if kind is str:
            return key
        if kind is tuple:
            return (TAG_TUPLE, encode_key(key))
        return (kind, key)

    def hash(self, key: Any) -> int:
        """Returns :func:`hash_key` of ``key``, from the cache when possible.

        Args:
            key: Any key accepted by :func:`encode_key`.

        Returns:
            The unsigned 32-bit hash.
        """
        try:
            slot = self._slot(key)
            value = self._data.get(slot)
        except TypeError:  # unhashable: let hash_key raise a helpful error
            return hash_key(key)
        if value is not None:
            self.hits += 1
            return value
        self.misses += 1
        value = hash_key(key)
        if len(self._data) >= self.max_entries:
            self._evict()
        self._data[slot] = value
        return value

    def _evict(self) -> None:
        drop = max(1, len(self._data) // 2)
        for slot in list(self._data)[:drop]:
            del self._data[slot]

    def clear(self) -> None:
        """Removes every entry."""
        self._data.clear()


def hash_values(values: Iterable[Any], cache: KeyHashCache | None = None) -> np.ndarray:
    """Hashes a sequence of Python keys.

    Args:
        values: Keys accepted by :func:`encode_key`.
        cache: Optional :class:`KeyHashCache` to consult and fill.

    Returns:
        A ``uint32`` array with ``hash_key(v)`` for each value.
    """
    fn = cache.hash if cache is not None else hash_key
    return np.fromiter((fn(v) for v in values), dtype=np.uint32)
