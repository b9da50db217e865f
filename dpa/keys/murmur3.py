"""MurmurHash3 x86_32, vectorised with numpy over many byte strings at once.

The one murmur3 implementation of dpa's hot path (:func:`dpa.keys.encoding.hash_bytes` is the scalar
one, through ``mmh3``; both give identical hashes). Its constants are shared with the
seeded per-key hashing of :mod:`dpa.routing.policies.common`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["C1", "C2", "F1", "F2", "M5", "N1", "fmix32", "mix_h", "mix_k", "murmur3_32_batch", "murmur3_32_words", "rotl"]


C1 = np.uint32(0xCC9E2D51)
C2 = np.uint32(0x1B873593)
M5 = np.uint32(5)
N1 = np.uint32(0xE6546B64)
F1 = np.uint32(0x85EBCA6B)
F2 = np.uint32(0xC2B2AE35)
_TAIL_MASKS = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF], dtype=np.uint32)


def rotl(x: np.ndarray, r: int, spare: np.ndarray | None = None) -> np.ndarray:
    """Rotates ``uint32`` values left by ``r`` bits: a new array, or ``x`` itself rotated
    in place when a ``spare`` array of its size is given as scratch space."""
    if spare is None:
        return (x << np.uint32(r)) | (x >> np.uint32(32 - r))
    np.left_shift(x, np.uint32(r), out=spare)
    x >>= np.uint32(32 - r)
    x |= spare
    return x


def mix_k(k: np.ndarray, spare: np.ndarray | None = None) -> np.ndarray:
    """Scrambles one 4-byte block: ``rotl(k * c1, 15) * c2`` (``k`` is modified in place;
    with ``spare``, see :func:`rotl`, the result is ``k`` itself).

    Like the other steps, it wraps around modulo ``2**32``; callers silence numpy's
    overflow warnings (``np.errstate(over="ignore")``).
    """
    k *= C1
    k = rotl(k, 15, spare)
    k *= C2
    return k


def mix_h(h: np.ndarray | np.uint32, k: np.ndarray, spare: np.ndarray | None = None) -> np.ndarray:
    """One body round: ``rotl(h ^ k, 13) * 5 + n1`` for a scrambled block ``k`` (a new
    array; with ``spare``, see :func:`rotl`, ``h`` itself, updated in place)."""
    if spare is None:
        h = rotl(h ^ k, 13)
    else:
        h ^= k
        rotl(h, 13, spare)
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


def murmur3_32_words(words: list[np.ndarray], length: int) -> np.ndarray:
    """Vectorised MurmurHash3 x86_32 (seed 0) of ``n`` byte strings of one ``length``,
    given as their little-endian 4-byte words.

    A fast path of :func:`murmur3_32_batch` for fixed-width encodings (integers and
    floats), whose words a caller computes arithmetically instead of gathering bytes:
    ``words[b][i]`` is bytes ``4b .. 4b+3`` of string ``i``, the last one zero-padded when
    ``length`` is not a multiple of 4 (then it is the tail, which is only xor-ed in).

    Args:
        words: ``ceil(length / 4)`` ``uint32`` arrays of ``n`` values each (modified in place).
        length: The byte length of every string.

    Returns:
        A ``uint32`` array of ``n`` hashes, equal to ``murmur3_32_batch`` of the same bytes.
    """
    nfull = length // 4
    n = len(words[0]) if words else 0
    h = np.zeros(n, dtype=np.uint32)
    spare = np.empty(n, dtype=np.uint32)  # scratch for the in-place steps: no temporaries per block
    with np.errstate(over="ignore"):
        for b, k in enumerate(words):
            mix_k(k, spare)
            if b < nfull:
                mix_h(h, k, spare)
            else:  # the tail block is only xor-ed in
                h ^= k
        fmix32(h, np.uint32(length))
    return h
