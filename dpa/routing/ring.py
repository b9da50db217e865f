"""Consistent-hash ring of the DPA paper (section 4.2).

Reducer ``i`` owns tokens ``j = 0 .. T_i - 1``. Token ``(i, j)`` is the string
``"token-{i}-{j}"`` and sits on the ring at ``hash_bytes(s.encode("utf-8"))`` (32-bit
MurmurHash3, seed 0, see :mod:`dpa.keys.encoding`). A key with hash ``h`` belongs to the owner of
the first token at or after ``h`` walking clockwise (increasing positions), wrapping from
the end of the ring to its first token. Equal token positions are ordered by
``(position, reducer, j)``, so the first of them in that order wins.

Because a reducer always owns a prefix ``0 .. T_i - 1`` of its token indices, a ring is
fully determined by its tuple of per-reducer token counts:

* *halving* reducer ``i`` removes its highest half of token indices (``T_i -> T_i // 2``);
* *doubling* adds indices ``T_i .. 2 T_i - 1`` to every reducer except the overloaded one.

Token spacing. With ``even_tokens=E`` (:class:`HashRing`), the first ``E`` tokens of the
first ring's reducers keep the *order* their hashes give them around the ring but sit at
evenly spaced positions (``(k + 1/2) / (R E)`` of the hash space for the ``k``-th of them):
every reducer then owns exactly ``1 / R`` of the hash space, where hashed positions leave
arcs that differ by tens of percent (8 reducers x 16 tokens: the largest share is 1.27
fair shares). Halving still hands a removed token's arc to a pseudo-random successor, and
tokens added by doubling (``j >= E``) are hashed as always. ``E = 0`` is the paper's ring.

Elastic rings. A ring may have more reducer ids (*slots*) than reducers taking part: a
slot with zero tokens owns no keys. The first ring of an elastic job gives its tokens to
the first ``A`` slots only (``active=A`` in :meth:`HashRing.for_method`), and even spacing
then applies to those ``A`` reducers alone, so their positions are exactly those of a ring
of ``A`` reducers. :meth:`HashRing.set_tokens` activates a slot (it owns tokens
``0 .. T - 1`` at their usual positions) or retires one (zero tokens); as with halving and
doubling, only keys of that slot change owner.

:class:`~dpa.routing.hash_ring.HashRing` is the mutable, authoritative ring kept by the load balancer;
:class:`RingSnapshot` is an immutable, picklable view of one version of it with
precomputed sorted arrays, shipped to mappers and reducers.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from dpa.errors import ConfigError
from dpa.keys.encoding import hash_bytes, hash_key
from dpa.keys.murmur3 import murmur3_32_batch

DEFAULT_HALVING_TOKENS = 16
#: :meth:`RingSnapshot.lookup_batch` looks hashes up by their top ``_BUCKET_BITS`` bits
#: (a table of ``2**_BUCKET_BITS`` owners) once a snapshot has looked up that many hashes
#: by binary search: building the table costs about as much as searching that many.
_BUCKET_BITS = 16
#: Most tokens a ring may hold: token doubling grows the ring geometrically (every round
#: doubles all but one reducer's tokens), so a doubling that would pass this is refused
#: (the planner logs the reducer's rounds as exhausted).
MAX_RING_TOKENS = 1 << 16
"""Initial tokens per reducer for the halving method.

A power of two, so that every halving keeps an integer number of tokens, and large
enough for the 4 rounds of load balancing of Figure 3 of the paper: 16 -> 8 -> 4 -> 2 -> 1.
"""

METHODS = ("halving", "doubling")
"""Names of the key space redistribution methods accepted by :meth:`HashRing.redistribute`."""


@lru_cache(maxsize=1 << 16)
def token_position(reducer: int, j: int) -> int:
    """Position of token ``j`` of ``reducer`` on the ring.

    Args:
        reducer: Reducer id.
        j: Token index of that reducer.

    Returns:
        ``hash_bytes(f"token-{reducer}-{j}".encode("utf-8"))``, in ``[0, 2**32)``.
    """
    return hash_bytes(_token_name(reducer, j))


def _token_name(reducer: int, j: int) -> bytes:
    """The bytes token ``j`` of ``reducer`` is hashed from (the paper's token naming)."""
    return f"token-{reducer}-{j}".encode()


@lru_cache(maxsize=64)
def _even_positions(num_reducers: int, tokens: int) -> dict[tuple[int, int], int]:
    """Evenly spaced positions of tokens ``(i, j < tokens)``, in their hashed order."""
    order = sorted((token_position(i, j), i, j) for i in range(num_reducers) for j in range(tokens))
    step = (1 << 32) / len(order)
    return {(i, j): int((k + 0.5) * step) for k, (_, i, j) in enumerate(order)}


#: Hashed positions of each reducer's tokens ``0 .. n - 1`` (:func:`token_position`,
#: vectorised), kept per reducer and grown on demand: a balancer planning first rings
#: (:mod:`dpa.routing.policies.ring.forecast`) computes them once per process.
_HASHED: dict[int, np.ndarray] = {}


def _hashed_positions(reducer: int, count: int) -> np.ndarray:
    """``token_position(reducer, j)`` for ``j < count`` or more (``uint32``, token order)."""
    known = _HASHED.get(reducer, np.zeros(0, dtype=np.uint32))
    if len(known) < count:
        js = range(len(known), max(int(count), 2 * len(known)))
        names = [_token_name(reducer, j) for j in js]
        offsets = np.zeros(len(names) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in names], out=offsets[1:])
        known = _HASHED[reducer] = np.concatenate([known, murmur3_32_batch(b"".join(names), offsets)])
    return known


def _reducer_positions(reducer: int, count: int, even: tuple[int, int], start: int = 0) -> np.ndarray:
    """Positions of tokens ``start .. count - 1`` of ``reducer`` (``int64``, token order)
    on a ring whose spacing is ``even`` (see :meth:`RingSnapshot.build`)."""
    out = _hashed_positions(reducer, count)[start:count].astype(np.int64)
    spaced, tokens = even
    if reducer < spaced and start < tokens:
        table = _even_positions(spaced, tokens)
        for j in range(start, min(tokens, count)):
            out[j - start] = table[reducer, j]
    return out


def _check_counts(token_counts: Sequence[int]) -> tuple[int, ...]:
    try:
        counts = tuple(int(t) for t in token_counts)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"token counts must be non-negative integers, got {token_counts!r}"
        ) from exc
    if len(counts) < 1:
        raise ConfigError("a hash ring needs at least one reducer (token_counts is empty)")
    for i, (raw, t) in enumerate(zip(token_counts, counts, strict=True)):
        if t != raw or t < 0:
            raise ConfigError(
                f"token count of reducer {i} must be a non-negative integer, got {raw!r}"
            )
    if sum(counts) <= 0:
        raise ConfigError(
            f"a hash ring needs at least one token in total, got token counts {counts}"
        )
    return counts


@dataclass(frozen=True)
class RingSnapshot:
    """An immutable version of the ring with precomputed lookup arrays.

    Build it with :meth:`RingSnapshot.build` (or :meth:`HashRing.snapshot`). It is small
    (two arrays of ``total_tokens`` entries) and picklable.

    Attributes:
        version: Version of the :class:`HashRing` it was taken from.
        token_counts: Tokens owned by each reducer.
        positions: Sorted ``uint32`` token positions.
        owners: ``int32`` reducer owning the token at each sorted position.
        spacing: ``(R, E)``: tokens ``j < E`` of reducers ``i < R`` sit evenly spaced (see
            the module docstring); ``(0, 0)`` = every token at its hash.
    """

    version: int
    token_counts: tuple[int, ...]
    positions: np.ndarray = field(repr=False, compare=False)
    owners: np.ndarray = field(repr=False, compare=False)
    spacing: tuple[int, int] = (0, 0)
    _pos_list: list[int] = field(init=False, repr=False, compare=False, default_factory=list)
    _own_list: list[int] = field(init=False, repr=False, compare=False, default_factory=list)
    _buckets: np.ndarray | None = field(init=False, repr=False, compare=False, default=None)
    _searched: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_pos_list", self.positions.tolist())
        object.__setattr__(self, "_own_list", self.owners.tolist())
        object.__setattr__(self, "_buckets", None)
        object.__setattr__(self, "_searched", 0)

    @classmethod
    def build(cls, token_counts: Sequence[int], version: int = 0, even: tuple[int, int] = (0, 0)) -> RingSnapshot:
        """Builds the snapshot of the ring with the given token counts.

        Args:
            token_counts: Tokens per reducer; reducer ``i`` owns tokens ``0 .. T_i - 1``.
                Zero is allowed (that reducer owns no keys) if the total is positive.
            version: Version number to record.
            even: ``(R, E)``: tokens ``j < E`` of reducers ``i < R`` are evenly spaced
                (see the module docstring); ``(0, 0)`` = every token hashed (the paper).

        Returns:
            The snapshot.

        Raises:
            ConfigError: If there are no reducers, a count is negative or not an integer,
                or the total is zero.
        """
        counts = _check_counts(token_counts)
        held = [(i, t) for i, t in enumerate(counts) if t]
        pos = np.concatenate([_reducer_positions(i, t, even) for i, t in held]).astype(np.uint32)
        owner = np.concatenate([np.full(t, i, dtype=np.int32) for i, t in held])
        index = np.concatenate([np.arange(t, dtype=np.int64) for _, t in held])
        order = np.lexsort((index, owner, pos))
        return cls(
            version=int(version),
            token_counts=counts,
            positions=np.ascontiguousarray(pos[order]),
            owners=np.ascontiguousarray(owner[order]),
            spacing=(int(even[0]), int(even[1])) if even[1] else (0, 0),
        )

    def __getstate__(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "token_counts": self.token_counts,
            "positions": self.positions,
            "owners": self.owners,
            "spacing": self.spacing,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)
        self.__post_init__()

    @property
    def num_reducers(self) -> int:
        """Number of reducers (including those with zero tokens)."""
        return len(self.token_counts)

    @property
    def total_tokens(self) -> int:
        """Number of tokens on the ring."""
        return len(self._pos_list)

    def lookup_hash(self, h: int) -> int:
        """Returns the reducer owning hash ``h``.

        Args:
            h: A key hash in ``[0, 2**32)``.

        Returns:
            The owner of the first token at or after ``h`` (wrapping around).
        """
        idx = bisect.bisect_left(self._pos_list, h)
        if idx == len(self._pos_list):
            idx = 0
        return self._own_list[idx]

    def lookup_batch(self, hashes: np.ndarray) -> np.ndarray:
        """Vectorised :meth:`lookup_hash`.

        Args:
            hashes: Array of key hashes (``uint32``, or any integers in ``[0, 2**32)``).

        Returns:
            An ``int32`` array with the owning reducer of each hash.
        """
        hashes = np.asarray(hashes)
        if hashes.dtype != np.uint32:
            hashes = hashes.astype(np.uint32)
        if self._buckets is None:
            object.__setattr__(self, "_searched", self._searched + len(hashes))
            if self._searched < 1 << _BUCKET_BITS:
                return self._search(hashes)
        # Most hashes fall in a bucket of the hash space that no token splits, whose owner
        # is one gather away; a binary search of a few tokens per hash costs ten times as
        # much (it mispredicts a branch per step). Only hashes in split buckets search.
        owners = self._bucket_owners()[hashes >> np.uint32(32 - _BUCKET_BITS)]
        split = np.flatnonzero(owners < 0)
        if len(split):
            owners[split] = self._search(hashes[split])
        return owners

    def _search(self, hashes: np.ndarray) -> np.ndarray:
        idx = np.searchsorted(self.positions, hashes, side="left")
        idx[idx == len(self.positions)] = 0
        return self.owners[idx]

    def _bucket_owners(self) -> np.ndarray:
        """The owner of every hash in each of the ``2**_BUCKET_BITS`` equal buckets of the
        hash space, or -1 where a token splits the bucket (built on first use: it is not
        pickled with the snapshot)."""
        if self._buckets is None:
            shift = 32 - _BUCKET_BITS
            lows = (np.arange(1 << _BUCKET_BITS, dtype=np.uint64) << np.uint64(shift)).astype(np.uint32)
            highs = lows + np.uint32((1 << shift) - 1)
            first = np.searchsorted(self.positions, lows, side="left")
            whole = first == np.searchsorted(self.positions, highs, side="left")
            first[first == len(self.positions)] = 0
            object.__setattr__(self, "_buckets", np.where(whole, self.owners[first], np.int32(-1)).astype(np.int32))
        return self._buckets

    def key_lookup(self, key: Any) -> int:
        """Returns the reducer owning ``key`` (hashed with :func:`dpa.keys.encoding.hash_key`).

        Args:
            key: Any key accepted by :func:`dpa.keys.encoding.encode_key`.

        Returns:
            The reducer id.
        """
        return self.lookup_hash(hash_key(key))


def is_power_of_two(n: object) -> bool:
    """Whether ``n`` is an integer power of two >= 1 (a ring's tokens per reducer, which
    halving halves); bools are not integers here."""
    return (isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 1
            and (int(n) & (int(n) - 1)) == 0)


def nearest_power_of_two(x: int) -> int:
    """The power of two nearest ``x`` (ties go up), for error messages that suggest one."""
    if x <= 1:
        return 1
    lower = 1 << (int(x).bit_length() - 1)
    upper = lower * 2
    return lower if x - lower < upper - x else upper  # ties go up


