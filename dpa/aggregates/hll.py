"""HyperLogLog states of many keys at once, built and merged with numpy over whole batches.

The state of a key is two columns of a partial-state table:

* ``hashes``: the sorted distinct 64-bit hashes of its values while it has at most
  :func:`exact_limit` of them (``2**lg_k / 8``, as many bytes as the registers), so a key
  with few distinct values is counted exactly (barring a 64-bit hash collision); stored as
  a list of int64 holding the hashes' bits, as Spark's Arrow conversion (the bridge's
  map-side combine) has no uint64;
* ``registers``: beyond that, ``2**lg_k`` one-byte HLL registers (``hashes`` then empty).

Merging is the union of the hash sets, or the register-wise maximum once a key has
registers: the same state whatever order partial states merge in. The estimate of a key with
registers is Ertl's improved raw estimator ("New cardinality estimation algorithms for
HyperLogLog sketches", 2017), unbiased from small to large cardinalities without empirical
bias tables; its relative standard error is HLL's ``1.04 / sqrt(2**lg_k)``.

Values are hashed by type, vectorised: integers (and booleans) as their int64 value, floats
as the bits of their float64 (``-0.0`` as ``0.0``, every NaN as one NaN) through MurmurHash3's
64-bit finaliser; strings and binaries by two MurmurHash3 x86_32 hashes of their bytes
(:func:`dpa.keys.murmur3.murmur3_32_batch`, of the bytes and of the bytes after one prefix
byte); other types by the same two hashes of the canonical key encoding
(:func:`dpa.keys.encoding.encode_key`) of each distinct value of the batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpa._internal.arrays import fill_null
from dpa.aggregates.dense import group_order
from dpa.keys.encoding import encode_key
from dpa.keys.murmur3 import murmur3_32_batch

__all__ = ["build_states", "estimates", "exact_limit", "hash_column", "state_arrays"]

_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
_NAN_BITS = np.array([np.nan], dtype=np.float64).view(np.uint64)[0]


def exact_limit(lg_k: int) -> int:
    """The most distinct values a key's state keeps as hashes (counted exactly)."""
    return max(1, (1 << lg_k) // 8)


def _fmix64(x: np.ndarray) -> np.ndarray:
    x = x.copy()
    with np.errstate(over="ignore"):
        x ^= x >> _S33
        x *= _M1
        x ^= x >> _S33
        x *= _M2
        x ^= x >> _S33
    return x


def _hash_bytes(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """64-bit hashes of byte strings ``data[offsets[i]:offsets[i + 1]]``: MurmurHash3 x86_32
    of the bytes (high half) and of the bytes after a ``0x5A`` byte (low half), mixed."""
    offsets = np.asarray(offsets, dtype=np.int64)
    n = len(offsets) - 1
    if n <= 0:
        return np.zeros(0, np.uint64)
    high = murmur3_32_batch(data, offsets).astype(np.uint64)
    prefixed = np.insert(np.asarray(data[:int(offsets[-1])], dtype=np.uint8), offsets[:-1], np.uint8(0x5A))
    low = murmur3_32_batch(prefixed, offsets + np.arange(n + 1)).astype(np.uint64)
    return _fmix64((high << np.uint64(32)) | low)


def _binary_hashes(array: pa.Array) -> np.ndarray:
    array = array.cast(pa.large_binary())
    if len(array) == 0:
        return np.zeros(0, np.uint64)
    buffers = array.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64)[array.offset:array.offset + len(array) + 1]
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    return _hash_bytes(data, offsets)


def hash_column(column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """``(64-bit hash per value, whether the value is non-null)`` of a column of scalars."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks else pa.array([], column.type)
    dtype = column.type
    if pa.types.is_dictionary(dtype):
        column, dtype = column.cast(dtype.value_type), dtype.value_type
    valid = np.asarray(column.is_valid(), dtype=bool) if len(column) else np.zeros(0, bool)
    if pa.types.is_null(dtype) or len(column) == 0:
        return np.zeros(len(column), np.uint64), valid
    if pa.types.is_boolean(dtype) or pa.types.is_integer(dtype):
        if pa.types.is_uint64(dtype):
            bits = np.asarray(fill_null(column, 0), dtype=np.uint64)
        else:
            bits = np.asarray(fill_null(column.cast(pa.int64()), 0), dtype=np.int64).view(np.uint64)
        return _fmix64(bits), valid
    if pa.types.is_floating(dtype):
        x = np.asarray(fill_null(column.cast(pa.float64()), 0.0), dtype=np.float64) + 0.0
        bits = x.view(np.uint64).copy()
        bits[np.isnan(x)] = _NAN_BITS
        return _fmix64(bits ^ np.uint64(0x9E3779B97F4A7C15)), valid
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or pa.types.is_binary(dtype) \
            or pa.types.is_large_binary(dtype):
        return _binary_hashes(column), valid
    # Other types: the canonical key encoding of each distinct value, hashed as bytes.
    encoded = column.dictionary_encode()
    uniques = [encode_key(v) for v in encoded.dictionary.to_pylist()]
    per_unique = _binary_hashes(pa.array(uniques, pa.binary()))
    indices = np.asarray(fill_null(encoded.indices, 0), dtype=np.int64)
    return (per_unique[indices] if len(per_unique) else np.zeros(len(column), np.uint64)), valid


def _register_rank(hashes: np.ndarray, lg_k: int) -> tuple[np.ndarray, np.ndarray]:
    """Register index (the top ``lg_k`` bits) and rank (1 + the leading zeros of the other
    ``64 - lg_k`` bits, ``65 - lg_k`` when they are all zero) of each hash."""
    q = 64 - lg_k
    index = (hashes >> np.uint64(q)).astype(np.int64)
    rest = hashes & np.uint64((1 << q) - 1)
    hi = (rest >> np.uint64(32)).astype(np.float64)  # (below 2**32: exact as floats)
    lo = (rest & np.uint64(0xFFFFFFFF)).astype(np.float64)
    bit_length = np.where(hi > 0, 32 + np.frexp(hi)[1], np.frexp(lo)[1])
    return index, (q + 1 - bit_length).astype(np.uint8)


def build_states(lg_k: int, size: int, gid: np.ndarray, hashes: np.ndarray,
                 reg_gid: np.ndarray | None = None, regs: np.ndarray | None = None
                 ) -> tuple[pa.ListArray, pa.LargeBinaryArray]:
    """The states of ``size`` keys from hashes (``hashes[i]`` of key ``gid[i]``) and, for a
    merge, register rows (``regs[j]``, ``2**lg_k`` bytes, of key ``reg_gid[j]``).

    Returns:
        ``(hashes column, registers column)``, one row per key.
    """
    m = 1 << lg_k
    limit = exact_limit(lg_k)
    forced = np.zeros(size, bool)  # keys with registers in a part: registers
    if reg_gid is not None and len(reg_gid):
        forced[reg_gid] = True
    # Keys with more hashes than the limit (repeats included) get registers at once, from all
    # their hashes (a maximum: repeats change nothing). More non-zero registers than the limit
    # prove more distinct values than it, so only the other keys' hashes are sorted.
    many = (np.bincount(gid, minlength=size) > limit) | forced
    position = np.cumsum(many) - 1  # each such key's row of the register matrix
    registers = np.zeros((int(many.sum()), m), dtype=np.uint8)
    dense = forced.copy()
    if len(registers):
        to_regs = many[gid]
        index, rank = _register_rank(hashes[to_regs], lg_k)
        np.maximum.at(registers.reshape(-1), position[gid[to_regs]] * m + index, rank)
        if reg_gid is not None and len(reg_gid):
            rows = position[reg_gid]
            by_row = np.argsort(rows, kind="stable")
            rows, regs = rows[by_row], regs[by_row]
            starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
            registers[rows[starts]] = np.maximum(registers[rows[starts]], np.maximum.reduceat(regs, starts, axis=0))
        dense[many] |= np.count_nonzero(registers, axis=1) > limit
    rest = ~dense[gid]
    g, h = gid[rest], hashes[rest]
    order = np.argsort(h)
    order = order[group_order(g[order], size)]  # by key, then by hash (faster than a lexsort)
    g, h = g[order], h[order]
    first = np.ones(len(g), bool)
    first[1:] = (g[1:] != g[:-1]) | (h[1:] != h[:-1])
    g, h = g[first], h[first]
    counts = np.bincount(g, minlength=size)
    dense |= counts > limit  # (only keys of ``many`` can have more)
    registers = registers[dense[many]]
    sparse_counts = np.where(dense, 0, counts)
    kept = h[~dense[g]]
    hash_col = pa.ListArray.from_arrays(pa.array(np.r_[0, np.cumsum(sparse_counts)].astype(np.int32)),
                                        pa.array(kept.view(np.int64), pa.int64()))  # (bits: Spark has no uint64)
    reg_offsets = np.r_[0, np.cumsum(dense * m)].astype(np.int64)
    reg_col = pa.LargeBinaryArray.from_buffers(pa.large_binary(), size, [None, pa.py_buffer(reg_offsets.tobytes()),
                                                              pa.py_buffer(registers.tobytes())])
    return hash_col, reg_col


def state_arrays(hash_col: Any, reg_col: Any, lg_k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The parts of a state table: ``(row of each hash, hashes, rows with registers, their
    registers as a (rows, 2**lg_k) uint8 matrix)``."""
    m = 1 << lg_k
    if isinstance(hash_col, pa.ChunkedArray):
        hash_col = hash_col.combine_chunks() if hash_col.num_chunks else pa.array([], pa.list_(pa.int64()))
    if isinstance(reg_col, pa.ChunkedArray):
        reg_col = reg_col.combine_chunks() if reg_col.num_chunks else pa.array([], pa.large_binary())
    rows = np.asarray(pc.list_parent_indices(hash_col), dtype=np.int64)
    hashes = np.asarray(pc.list_flatten(hash_col), dtype=np.int64).view(np.uint64)
    lengths = np.asarray(fill_null(pc.binary_length(reg_col), 0), dtype=np.int64)
    reg_rows = np.flatnonzero(lengths == m)
    if not len(reg_rows):
        return rows, hashes, reg_rows, np.zeros((0, m), np.uint8)
    buffers = reg_col.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64)[reg_col.offset:reg_col.offset + len(reg_col) + 1]
    data = np.frombuffer(buffers[2], dtype=np.uint8)
    regs = data[offsets[reg_rows][:, None] + np.arange(m)]
    return rows, hashes, reg_rows, regs


def _sigma(x: np.ndarray) -> np.ndarray:
    out = x.copy()
    y = np.ones_like(x)
    x = x.copy()
    for _ in range(64):
        x = x * x
        out = out + x * y
        y = y + y
    return out


def _tau(x: np.ndarray) -> np.ndarray:
    edge = (x == 0) | (x == 1)
    out = 1.0 - x
    y = np.ones_like(x)
    for _ in range(64):
        x = np.sqrt(x)
        y = y * 0.5
        out = out - (1.0 - x) ** 2 * y
    return np.where(edge, 0.0, out / 3.0)


def estimates(regs: np.ndarray, lg_k: int) -> np.ndarray:
    """Ertl's improved raw estimate of each row of registers (float64)."""
    m = 1 << lg_k
    q = 64 - lg_k
    if not len(regs):
        return np.zeros(0)
    cells = np.repeat(np.arange(len(regs), dtype=np.int64) * (q + 2), m) + regs.reshape(-1)
    hist = np.bincount(cells, minlength=len(regs) * (q + 2)).reshape(len(regs), q + 2).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        zero = hist[:, 0] / m
        z = m * _tau(1.0 - hist[:, q + 1] / m)
        for k in range(q, 0, -1):
            z = 0.5 * (z + hist[:, k])
        z = z + m * np.where(zero == 1.0, np.inf, _sigma(np.minimum(zero, 1.0)))
    return m * m / (2.0 * np.log(2.0)) / z
