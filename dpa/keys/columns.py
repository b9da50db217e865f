"""Hashing whole Arrow key columns: canonical encodings built column-wise, then murmur3.

The vectorised counterpart of :func:`dpa.keys.encoding.hash_key`: every row gets exactly the hash
``hash_key`` gives its value (or tuple of values), computed over the distinct values of a
batch with :func:`dpa.keys.murmur3.murmur3_32_batch`.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpa._internal.arrays import one_array, to_numpy
from dpa.errors import KeyEncodingError, SchemaError

__all__ = ["canonical_float_keys", "check_key_type", "decode_dictionaries", "decoded_schema", "hash_key_columns"]

from dpa.keys.encoding import (
    INT64_MAX,
    TAG_BYTES,
    TAG_FLOAT,
    TAG_INT,
    TAG_NONE,
    TAG_TUPLE,
    KeyHashCache,
    encode_key,
    hash_bytes,
)
from dpa.keys.murmur3 import murmur3_32_batch, murmur3_32_words
from dpa.keys.types import encode_temporal_array, temporal_key_class


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
            enc = pa.concat_arrays([enc, pa.array([TAG_NONE], type=pa.large_binary())])
        return enc.take(idx)
    if pa.types.is_null(t):
        return pa.array([TAG_NONE] * n, type=pa.large_binary())
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        enc = arr.cast(pa.large_binary())
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        raw = arr.cast(pa.large_binary())
        enc = pc.binary_join_element_wise(_scalar(TAG_BYTES), raw, _scalar(b""))
    elif pa.types.is_boolean(t):
        bits = np.asarray(arr.fill_null(False), dtype=np.uint8).reshape(n, 1)
        enc = _fixed_encoding(b"\xffB", bits)
    elif pa.types.is_integer(t):
        if pa.types.is_uint64(t):
            big = pc.greater(arr, pa.scalar(INT64_MAX, pa.uint64())).fill_null(False)
            if pc.any(big).as_py():
                return _python_encoding(arr.to_pylist())
        values = np.asarray(arr.fill_null(0).cast(pa.int64()), dtype=np.int64)
        payload = values.astype(">i8").view(np.uint8).reshape(n, 8)
        enc = _fixed_encoding(TAG_INT, payload)
    elif pa.types.is_floating(t):
        values = np.asarray(arr.fill_null(0).cast(pa.float64()), dtype=np.float64)
        values = values + 0.0  # -0.0 -> 0.0
        values[np.isnan(values)] = math.nan
        payload = values.astype(">f8").view(np.uint8).reshape(n, 8)
        enc = _fixed_encoding(TAG_FLOAT, payload)
    elif temporal_key_class(t) is not None:
        enc = encode_temporal_array(arr)
    else:
        raise _bad_column_type(t)
    if nulls:
        enc = pc.if_else(arr.is_null(), pa.scalar(TAG_NONE, pa.large_binary()), enc)
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
        or temporal_key_class(t) is not None
    )


def check_key_type(name: str, t: pa.DataType) -> None:
    """Raises :class:`KeyEncodingError` if a column of type ``t`` cannot be a key column.

    The key types are the scalar ones (strings, binary, numbers, booleans, null, dates,
    times, timestamps, durations, decimals) and dictionaries of them; nested types (lists,
    structs, maps, unions) are not.
    """
    if not _supported_type(t):
        raise KeyEncodingError(f"key column {name!r}: {_bad_column_type(t)}")


def decode_dictionaries(table: pa.Table) -> pa.Table:
    """``table`` with its dictionary-encoded columns (a pandas categorical, a parquet
    dictionary column) decoded to their value type (:func:`decoded_schema`).

    Batches of one job carry different dictionaries, which Arrow's group-by cannot unify,
    and Arrow's aggregates take few dictionary types (no ``min``, ``max`` or ``list`` of one).
    Key columns and the value columns reducers read are decoded alike; a dictionary key's
    result gets the dictionary type back (:class:`dpa.result.Result`), an aggregate's output
    is of the value type (``Min`` of a categorical of strings is a string).
    """
    schema = table.schema
    decoded = decoded_schema(schema)
    if decoded.equals(schema):
        return table
    return pa.table([col if col.type.equals(f.type) else col.cast(f.type) for col, f in zip(table.columns, decoded)],
                    schema=decoded)


def decoded_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with each dictionary field of its value type (what
    :func:`decode_dictionaries` makes of a table of it)."""
    fields = [f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in schema]
    return pa.schema(fields, metadata=schema.metadata)


def _bad_column_type(t: pa.DataType) -> KeyEncodingError:
    hint = ("flatten it, e.g. key=[...] naming its fields as columns, or cast it to a string"
            if pa.types.is_nested(t) else "cast it, e.g. to pa.string()")
    return KeyEncodingError(
        f"cannot hash key column of Arrow type {t}; key columns must be string, binary, "
        "integer, floating point, boolean, null, date, time, timestamp, duration, decimal, or a "
        f"dictionary of one of these — {hint}"
    )


def _hash_encoded(enc: pa.Array) -> np.ndarray:
    if len(enc) == 0:
        return np.zeros(0, dtype=np.uint32)
    data, offsets = _binary_parts(enc)
    return murmur3_32_batch(data, offsets)


def _number_hashes(arr: pa.Array) -> np.ndarray | None:
    """Hashes of every value of an integer or floating point array, computed from the
    values' bits without building their encodings; None for other types (and for a
    ``uint64`` array, whose values past ``INT64_MAX`` are encoded differently).

    The encoding of a number is a 2-byte tag and its 8 bytes big-endian (see
    :func:`dpa.keys.encoding.encode_key`), so its murmur3 words are byte shuffles of the value's
    64 bits: bytes ``tag, b0 b1 | b2 b3 b4 b5 | b6 b7`` with ``b0`` the most significant.
    """
    t = arr.type
    if sys.byteorder != "little":  # (the halves below are read little-endian)
        return None
    integer = pa.types.is_integer(t) and not pa.types.is_uint64(t)
    if not (integer or pa.types.is_floating(t)):
        return None
    values = arr if arr.null_count == 0 else arr.fill_null(0)  # (nulls get their own hash below)
    if integer:
        tag = TAG_INT
        if not pa.types.is_int64(t):
            values = values.cast(pa.int64())
        bits = np.ascontiguousarray(to_numpy(values), dtype=np.int64)
    else:
        tag = TAG_FLOAT
        bits = to_numpy(values.cast(pa.float64())) + 0.0  # (a copy) -0.0 -> 0.0
        bits[np.isnan(bits)] = math.nan
    # The 64 bits as two little-endian 32-bit halves: bytes b7 b6 b5 b4 | b3 b2 b1 b0.
    halves = bits.view(np.uint32).reshape(-1, 2)
    lo, hi = halves[:, 0], halves[:, 1]
    word0 = hi >> np.uint32(24)  # tag, b0 b1
    word0 <<= np.uint32(16)
    word0 |= (hi >> np.uint32(16)) << np.uint32(24)
    word0 |= np.uint32(tag[0] | tag[1] << 8)
    word1 = (hi << np.uint32(16)) | (lo >> np.uint32(16))  # b2 b3 b4 b5, read little-endian
    word1.byteswap(inplace=True)
    tail = (lo >> np.uint32(8)) & np.uint32(0xFF)  # b6 b7
    tail |= (lo & np.uint32(0xFF)) << np.uint32(8)
    hashes = murmur3_32_words([word0, word1, tail], len(tag) + 8)
    if arr.null_count:
        hashes[np.asarray(arr.is_null(), dtype=bool)] = hash_bytes(TAG_NONE)
    return hashes


def _tuple_encoding(columns: Sequence[pa.Array]) -> pa.Array:
    """Encodings of the row tuples of equally long arrays (nulls are allowed)."""
    n = len(columns[0])
    parts: list[Any] = [_scalar(TAG_TUPLE)]
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


def hash_key_columns(
    table: pa.Table | pa.RecordBatch,
    columns: Sequence[str],
    cache: KeyHashCache | None = None,
    distinct: bool = False,
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
        distinct: The rows' keys are (nearly) all distinct, e.g. a map-side combined
            block: every row is hashed as it is, without first finding the distinct
            values (which then costs more than it saves). The hashes are the same.

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
    arrays = [one_array(table.column(name)) for name in columns]
    for name, arr in zip(columns, arrays, strict=True):
        if not _supported_type(arr.type):
            raise KeyEncodingError(f"key column {name!r}: {_bad_column_type(arr.type)}")
    if len(arrays) == 1:
        # Numbers are hashed row by row from their bits: that is cheaper than finding the
        # distinct values first (a combined block's keys are all distinct anyway).
        hashes = _number_hashes(arrays[0])
        if hashes is not None:
            return hashes
        if distinct and not pa.types.is_dictionary(arrays[0].type):
            return _hash_encoded(_encode_array(arrays[0]))
        codes, values = _codes(arrays[0])
        return _hash_encoded(_encode_array(values))[codes]
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


def canonical_float_keys(table: pa.Table, key_cols: Sequence[str]) -> pa.Table:
    """``table`` with its floating-point key columns canonical, so that Arrow's group-by
    and dpa's per-key dicts group keys as Spark and DuckDB do: ``-0.0`` becomes ``0.0``
    (the merged group's key prints as ``0.0``, as theirs does) and every NaN one NaN bit
    pattern. Other columns, and tables without such keys, are returned as they are.
    """
    for name in key_cols:
        if name not in table.column_names:
            continue
        column = table[name]
        if not pa.types.is_floating(column.type):
            continue
        if pa.types.is_float16(column.type):
            continue  # (Arrow computes nothing on half floats; hashing canonicalises them)
        nan, zero = pa.scalar(math.nan, column.type), pa.scalar(0.0, column.type)
        # Chunk by chunk: the column keeps the table's chunk layout (Arrow's grouping
        # kernels misread columns chunked unlike one another).
        canonical = pa.chunked_array([pc.if_else(pc.is_nan(chunk), nan, pc.add(chunk, zero))
                                      for chunk in column.chunks], column.type)
        table = table.set_column(table.schema.get_field_index(name), table.schema.field(name), canonical)
    return table
