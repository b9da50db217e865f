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
from collections.abc import Iterable, Sequence
from typing import Any

import mmh3
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpa.errors import ConfigError, KeyEncodingError, SchemaError

__all__ = [
    "KeyHashCache",
    "encode_key",
    "int_key_out_of_range",
    "key_type_class",
    "python_key_class",
    "hash_bytes",
    "hash_key",
    "hash_key_columns",
    "hash_values",
    "murmur3_32_batch",
]

_MARK = b"\xff"
_NONE = b"\xffN"
_TRUE = b"\xffB\x01"
_FALSE = b"\xffB\x00"
_INT = b"\xffi"
_BIGINT = b"\xffI"
_FLOAT = b"\xfff"
_BYTES = b"\xffb"
_TUPLE = b"\xffT"

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_PACK_Q = struct.Struct(">q").pack
_PACK_D = struct.Struct(">d").pack
_PACK_LEN = struct.Struct(">I").pack
_CANONICAL_NAN = _PACK_D(math.nan)

_ALLOWED = "str, bytes, int, float, bool, None or tuples of these"


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
    if _INT64_MIN <= value <= _INT64_MAX:
        return _INT + _PACK_Q(value)
    nbytes = (value.bit_length() + 8) // 8  # room for the sign bit
    return _BIGINT + value.to_bytes(nbytes, "big", signed=True)


def _encode_float(value: float) -> bytes:
    if value != value:  # NaN: one canonical bit pattern
        return _FLOAT + _CANONICAL_NAN
    if value == 0.0:  # -0.0 -> 0.0
        return _FLOAT + _PACK_D(0.0)
    return _FLOAT + _PACK_D(value)


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
        return _BYTES + key
    if kind is tuple:
        parts = [_TUPLE]
        for element in key:
            encoded = encode_key(element)
            parts.append(_PACK_LEN(len(encoded)))
            parts.append(encoded)
        return b"".join(parts)
    if key is None:
        return _NONE
    if kind is bool or isinstance(key, np.bool_):
        return _TRUE if key else _FALSE
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
        return _BYTES + bytes(key)
    if isinstance(key, tuple):
        return encode_key(tuple(key))
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
        f"[{_INT64_MIN}, {_INT64_MAX}] that dpa's key columns hold (Arrow, like Spark, has "
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
    return type(value).__name__


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
    return str(dtype)


def hash_bytes(data: bytes) -> int:
    """Hashes bytes with MurmurHash3 x86_32, seed 0.

    Args:
        data: The bytes to hash.

    Returns:
        The 32-bit hash as an unsigned int in ``[0, 2**32)``.
    """
    return mmh3.hash(data, seed=0, signed=False)


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
            return (_TUPLE, encode_key(key))
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


# ---------------------------------------------------------------------------------------
# Vectorised MurmurHash3 x86_32
# ---------------------------------------------------------------------------------------

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)
_M5 = np.uint32(5)
_N1 = np.uint32(0xE6546B64)
_F1 = np.uint32(0x85EBCA6B)
_F2 = np.uint32(0xC2B2AE35)
_TAIL_MASKS = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF], dtype=np.uint32)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _mix_k(k: np.ndarray) -> np.ndarray:
    k *= _C1
    k = _rotl(k, 15)
    k *= _C2
    return k


def murmur3_32_batch(data: np.ndarray | bytes, offsets: np.ndarray) -> np.ndarray:
    """Vectorised MurmurHash3 x86_32 (seed 0) of many byte strings.

    Item ``i`` is ``data[offsets[i]:offsets[i + 1]]`` (the layout of an Arrow binary
    array). The result equals ``mmh3.hash(item, 0, signed=False)`` for every item.

    Args:
        data: The concatenated bytes (``uint8`` array or ``bytes``).
        offsets: ``n + 1`` non-decreasing offsets into ``data``.

    Returns:
        A ``uint32`` array of ``n`` hashes.
    """
    data = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes) else data
    offsets = np.asarray(offsets, dtype=np.int64)
    n = len(offsets) - 1
    if n <= 0:
        return np.zeros(0, dtype=np.uint32)
    starts = offsets[:-1]
    lengths = np.diff(offsets)
    base = int(starts[0]) & ~3
    end = int(offsets[-1])
    # Four shifted little-endian uint32 views of the data so that the unaligned word
    # at byte p is words[p & 3, p >> 2]; zero padding makes the tail read safe.
    span = end - base
    m = span // 4 + 2
    buf = np.zeros(4 * m + 3, dtype=np.uint8)
    buf[:span] = data[base:end]
    words = np.empty((4, m), dtype=np.uint32)
    for r in range(4):
        words[r] = buf[r : r + 4 * m].view("<u4")
    rel = starts - base
    nfull = lengths >> 2
    h = np.zeros(n, dtype=np.uint32)
    max_blocks = int(nfull.max())
    with np.errstate(over="ignore"):
        if max_blocks > 0:
            if int(nfull.min()) == max_blocks:
                order = None
                s_rel, s_nfull = rel, nfull
            else:
                order = np.argsort(-nfull, kind="stable")
                s_rel, s_nfull = rel[order], nfull[order]
            neg = -s_nfull  # ascending
            counts = np.searchsorted(neg, -np.arange(max_blocks), side="left")
            hs = h if order is None else np.zeros(n, dtype=np.uint32)
            for b in range(max_blocks):
                c = int(counts[b])
                p = s_rel[:c] + 4 * b
                k = _mix_k(words[p & 3, p >> 2])
                hv = hs[:c] ^ k
                hv = _rotl(hv, 13)
                hv *= _M5
                hv += _N1
                hs[:c] = hv
            if order is not None:
                h[order] = hs
        p = rel + 4 * nfull
        k = words[p & 3, p >> 2] & _TAIL_MASKS[lengths & 3]
        h ^= _mix_k(k)  # k == 0 when there is no tail, and mixing 0 gives 0
        h ^= lengths.astype(np.uint32)
        h ^= h >> np.uint32(16)
        h *= _F1
        h ^= h >> np.uint32(13)
        h *= _F2
        h ^= h >> np.uint32(16)
    return h


# ---------------------------------------------------------------------------------------
# Arrow column encodings
# ---------------------------------------------------------------------------------------


def _binary_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Returns (data uint8, offsets int64) of a binary/string array without nulls."""
    if pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type):
        off_dtype = np.int64
    else:
        off_dtype = np.int32
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=off_dtype)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return data, offsets.astype(np.int64)


def _scalar(value: bytes) -> pa.Scalar:
    return pa.scalar(value, pa.large_binary())


def _from_parts(data: np.ndarray, offsets: np.ndarray) -> pa.Array:
    n = len(offsets) - 1
    return pa.Array.from_buffers(
        pa.large_binary(),
        n,
        [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data))],
    )


def _fixed_encoding(prefix: bytes, payload: np.ndarray) -> pa.Array:
    """Encodings ``prefix + payload[i]`` for a 2-D uint8 payload, as large_binary."""
    n, width = payload.shape
    pre = np.frombuffer(prefix, dtype=np.uint8)
    out = np.empty((n, len(prefix) + width), dtype=np.uint8)
    out[:, : len(prefix)] = pre
    out[:, len(prefix) :] = payload
    offsets = np.arange(n + 1, dtype=np.int64) * out.shape[1]
    return _from_parts(out.reshape(-1), offsets)


def _python_encoding(values: list[Any]) -> pa.Array:
    return pa.array([encode_key(v) for v in values], type=pa.large_binary())


def _encode_array(arr: pa.Array) -> pa.Array:
    """Canonical encodings (large_binary, no nulls) of every value of an Arrow array.

    Meant for *distinct* values (dictionaries), so the Python fallbacks stay cheap.
    """
    t = arr.type
    n = len(arr)
    nulls = arr.null_count > 0
    if pa.types.is_dictionary(t):
        enc = _encode_array(arr.dictionary)
        idx = arr.indices.cast(pa.int64())
        if nulls:
            idx = idx.fill_null(len(enc))
            enc = pa.concat_arrays([enc, pa.array([_NONE], type=pa.large_binary())])
        return enc.take(idx)
    if pa.types.is_null(t):
        return pa.array([_NONE] * n, type=pa.large_binary())
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        enc = arr.cast(pa.large_binary())
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        raw = arr.cast(pa.large_binary())
        enc = pc.binary_join_element_wise(_scalar(_BYTES), raw, _scalar(b""))
    elif pa.types.is_boolean(t):
        bits = np.asarray(arr.fill_null(False), dtype=np.uint8).reshape(n, 1)
        enc = _fixed_encoding(b"\xffB", bits)
    elif pa.types.is_integer(t):
        if pa.types.is_uint64(t):
            big = pc.greater(arr, pa.scalar(_INT64_MAX, pa.uint64())).fill_null(False)
            if pc.any(big).as_py():
                return _python_encoding(arr.to_pylist())
        values = np.asarray(arr.fill_null(0).cast(pa.int64()), dtype=np.int64)
        payload = values.astype(">i8").view(np.uint8).reshape(n, 8)
        enc = _fixed_encoding(_INT, payload)
    elif pa.types.is_floating(t):
        values = np.asarray(arr.fill_null(0).cast(pa.float64()), dtype=np.float64)
        values = values + 0.0  # -0.0 -> 0.0
        values[np.isnan(values)] = math.nan
        payload = values.astype(">f8").view(np.uint8).reshape(n, 8)
        enc = _fixed_encoding(_FLOAT, payload)
    else:
        raise _bad_column_type(t)
    if nulls:
        enc = pc.if_else(arr.is_null(), pa.scalar(_NONE, pa.large_binary()), enc)
    return enc


def _supported_type(t: pa.DataType) -> bool:
    if pa.types.is_dictionary(t):
        return _supported_type(t.value_type)
    return (
        pa.types.is_null(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_boolean(t)
        or pa.types.is_integer(t)
        or pa.types.is_floating(t)
    )


def _bad_column_type(t: pa.DataType) -> KeyEncodingError:
    return KeyEncodingError(
        f"cannot hash key column of Arrow type {t}; key columns must be string, binary, "
        "integer, floating point, boolean or null — cast it, e.g. to pa.string()"
    )


def _hash_encoded(enc: pa.Array) -> np.ndarray:
    if len(enc) == 0:
        return np.zeros(0, dtype=np.uint32)
    data, offsets = _binary_parts(enc)
    return murmur3_32_batch(data, offsets)


def _tuple_encoding(columns: Sequence[pa.Array]) -> pa.Array:
    """Encodings of the row tuples of equally long arrays (nulls are allowed)."""
    n = len(columns[0])
    parts: list[Any] = [_scalar(_TUPLE)]
    for col in columns:
        enc = _encode_array(col)
        _, offsets = _binary_parts(enc)
        lens = np.diff(offsets).astype(">u4").view(np.uint8).reshape(n, 4)
        len_enc = _from_parts(lens.reshape(-1), np.arange(n + 1, dtype=np.int64) * 4)
        parts.append(len_enc)
        parts.append(enc)
    return pc.binary_join_element_wise(*parts, _scalar(b""))


def _codes(col: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """Dictionary-encodes a column: (int64 codes per row, distinct values incl. null)."""
    if pa.types.is_dictionary(col.type):
        col = (
            col.dictionary_decode()
            if hasattr(col, "dictionary_decode")
            else col.cast(col.type.value_type)
        )
    if pa.types.is_null(col.type):
        return np.zeros(len(col), dtype=np.int64), pa.nulls(1)
    encoded = pc.dictionary_encode(col, null_encoding="encode")
    codes = np.asarray(encoded.indices, dtype=np.int64)
    return codes, encoded.dictionary


def _as_array(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks == 1:
            return column.chunk(0)
        if column.num_chunks == 0:
            return pa.array([], type=column.type)
        return column.combine_chunks()
    return column


def hash_key_columns(
    table: pa.Table | pa.RecordBatch,
    columns: Sequence[str],
    cache: KeyHashCache | None = None,
) -> np.ndarray:
    """Hashes the key of every row of an Arrow table, vectorised.

    With one column the key of row ``i`` is that column's value; with several columns it
    is the tuple of their values, so
    ``hash_key_columns(t, ["a", "b"])[i] == hash_key((t["a"][i], t["b"][i]))``. Nulls are
    the key ``None``. Only distinct values (or distinct tuples) are hashed; the hashing
    itself is a numpy MurmurHash3, so no per-value Python work happens for the supported
    column types (string, binary, integer, floating point, boolean, null, dictionary).

    Args:
        table: The rows (``pyarrow.Table`` or ``RecordBatch``).
        columns: Names of the key columns (at least one).
        cache: Accepted for API symmetry with :func:`hash_values`; the Arrow path is
            already vectorised over distinct values, so it does not need the cache and
            results are identical with or without it.

    Returns:
        A ``uint32`` array with one hash per row.

    Raises:
        KeyEncodingError: If a key column has an unsupported Arrow type.
        SchemaError: If ``columns`` is empty or names a missing column (a ``ValueError``).
    """
    del cache  # see docstring
    if isinstance(columns, str):
        columns = [columns]
    if len(columns) == 0:
        raise SchemaError("hash_key_columns needs at least one key column")
    names = table.schema.names
    for name in columns:
        if name not in names:
            raise SchemaError(f"key column {name!r} not found; table has columns {names}")
    n = table.num_rows
    if n == 0:
        return np.zeros(0, dtype=np.uint32)
    arrays = [_as_array(table.column(name)) for name in columns]
    for name, arr in zip(columns, arrays, strict=True):
        if not _supported_type(arr.type):
            raise KeyEncodingError(f"key column {name!r}: {_bad_column_type(arr.type)}")
    if len(arrays) == 1:
        codes, distinct = _codes(arrays[0])
        hashes = _hash_encoded(_encode_array(distinct))
        return hashes[codes]
    # Multi-column: fold per-column codes into one combined code, re-encoding after each
    # step so the combined code always stays < n * (column cardinality) and fits int64.
    per_col = [_codes(a) for a in arrays]
    combined = per_col[0][0]
    # history[j] maps a combined code after step j to (previous combined, column code).
    history: list[tuple[np.ndarray, np.ndarray]] = []
    size = len(per_col[0][1])
    for codes, distinct in per_col[1:]:
        width = len(distinct)
        joint = combined * width + codes
        encoded = pc.dictionary_encode(pa.array(joint, type=pa.int64()))
        uniq = np.asarray(encoded.dictionary, dtype=np.int64)
        history.append((uniq // width, uniq % width))
        combined = np.asarray(encoded.indices, dtype=np.int64)
        size = len(uniq)
    # Unwind to per-column codes of each distinct tuple.
    tuple_codes: list[np.ndarray] = [None] * len(per_col)  # type: ignore[list-item]
    current = np.arange(size, dtype=np.int64)
    for j in range(len(history) - 1, -1, -1):
        prev, col_code = history[j]
        tuple_codes[j + 1] = col_code[current]
        current = prev[current]
    tuple_codes[0] = current
    distinct_columns = [per_col[j][1].take(pa.array(tuple_codes[j])) for j in range(len(per_col))]
    hashes = _hash_encoded(_tuple_encoding(distinct_columns))
    return hashes[combined]
