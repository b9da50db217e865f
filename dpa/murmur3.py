"""MurmurHash3 x86_32, vectorised with numpy over many byte strings at once.

The one murmur3 implementation of dpa's hot path (:func:`dpa.keys.hash_bytes` is the scalar
one, through ``mmh3``; both give identical hashes). Its constants are shared with the
seeded per-key hashing of :mod:`dpa.partitioners.common`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["C1", "C2", "F1", "F2", "M5", "N1", "fmix32", "mix_h", "mix_k", "murmur3_32_batch", "rotl"]


C1 = np.uint32(0xCC9E2D51)
C2 = np.uint32(0x1B873593)
M5 = np.uint32(5)
N1 = np.uint32(0xE6546B64)
F1 = np.uint32(0x85EBCA6B)
F2 = np.uint32(0xC2B2AE35)
_TAIL_MASKS = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF], dtype=np.uint32)


def rotl(x: np.ndarray, r: int) -> np.ndarray:
    """Rotates ``uint32`` values left by ``r`` bits."""
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def mix_k(k: np.ndarray) -> np.ndarray:
    """Scrambles one 4-byte block: ``rotl(k * c1, 15) * c2`` (``k`` is modified in place).

    Like the other steps, it wraps around modulo ``2**32``; callers silence numpy's
    overflow warnings (``np.errstate(over="ignore")``).
    """
    k *= C1
    k = rotl(k, 15)
    k *= C2
    return k


def mix_h(h: np.ndarray | np.uint32, k: np.ndarray) -> np.ndarray:
    """One body round: ``rotl(h ^ k, 13) * 5 + n1`` for a scrambled block ``k`` (a new array)."""
    h = rotl(h ^ k, 13)
    h *= M5
    h += N1
    return h


def fmix32(h: np.ndarray, length: np.ndarray | np.uint32) -> np.ndarray:
    """The finalisation: xor the byte length, then the avalanche (``h`` is modified in place)."""
    h ^= length
    h ^= h >> np.uint32(16)
    h *= F1
    h ^= h >> np.uint32(13)
    h *= F2
    h ^= h >> np.uint32(16)
    return h


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
                hs[:c] = mix_h(hs[:c], mix_k(words[p & 3, p >> 2]))
            if order is not None:
                h[order] = hs
        p = rel + 4 * nfull
        k = words[p & 3, p >> 2] & _TAIL_MASKS[lengths & 3]
        h ^= mix_k(k)  # k == 0 when there is no tail, and mixing 0 gives 0
        fmix32(h, lengths.astype(np.uint32))
    return h


# ---------------------------------------------------------------------------------------
# Arrow column encodings
# ---------------------------------------------------------------------------------------
