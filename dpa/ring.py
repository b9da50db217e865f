"""Consistent-hash ring of the DPA paper (section 4.2).

Reducer ``i`` owns tokens ``j = 0 .. T_i - 1``. Token ``(i, j)`` is the string
``"token-{i}-{j}"`` and sits on the ring at ``hash_bytes(s.encode("utf-8"))`` (32-bit
MurmurHash3, seed 0, see :mod:`dpa.keys`). A key with hash ``h`` belongs to the owner of
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

:class:`HashRing` is the mutable, authoritative ring kept by the load balancer;
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
from dpa.keys import hash_bytes, hash_key
from dpa.murmur3 import murmur3_32_batch

__all__ = [
    "DEFAULT_HALVING_TOKENS",
    "METHODS",
    "HashRing",
    "RingSnapshot",
    "token_position",
]

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
#: (:mod:`dpa.partitioners.ring_forecast`) computes them once per process.
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
        """Returns the reducer owning ``key`` (hashed with :func:`dpa.keys.hash_key`).

        Args:
            key: Any key accepted by :func:`dpa.keys.encode_key`.

        Returns:
            The reducer id.
        """
        return self.lookup_hash(hash_key(key))


def _nearest_power_of_two(x: int) -> int:
    if x <= 1:
        return 1
    lower = 1 << (int(x).bit_length() - 1)
    upper = lower * 2
    return lower if x - lower < upper - x else upper  # ties go up


class HashRing:
    """The mutable, authoritative ring of the load balancer.

    Every change increments :attr:`version`; :meth:`snapshot` returns the (cached)
    immutable :class:`RingSnapshot` of the current version.

    Args:
        token_counts: Initial tokens per reducer.
        even_tokens: Tokens ``j < even_tokens`` of these reducers are evenly spaced in
            their hashed order (see the module docstring); 0 = all hashed (the paper).
        even_reducers: With ``even_tokens``: only reducers ``i < even_reducers`` have
            evenly spaced tokens (the active reducers of an elastic ring's first version);
            None = all of them.

    Raises:
        ConfigError: If the token counts are invalid (see :meth:`RingSnapshot.build`) or
            ``even_reducers`` is not in ``[1, len(token_counts)]``.
    """

    def __init__(self, token_counts: Sequence[int], even_tokens: int = 0, even_reducers: int | None = None) -> None:
        self._counts = list(_check_counts(token_counts))
        if isinstance(even_tokens, bool) or not isinstance(even_tokens, (int, np.integer)) or even_tokens < 0:
            raise ConfigError(f"even_tokens must be an integer >= 0, got {even_tokens!r}")
        spaced = len(self._counts) if even_reducers is None else even_reducers
        if isinstance(spaced, bool) or not isinstance(spaced, (int, np.integer)) or not 1 <= spaced <= len(self._counts):
            raise ConfigError(f"even_reducers must be an integer in [1, {len(self._counts)}], got {even_reducers!r}")
        self._even = (int(spaced), int(even_tokens)) if even_tokens else (0, 0)
        self._version = 0
        self._snapshot: RingSnapshot | None = None

    def copy(self) -> HashRing:
        """An independent ring with the same tokens, spacing and version."""
        ring = HashRing(self._counts)
        ring._even, ring._version, ring._snapshot = self._even, self._version, self._snapshot
        return ring

    @classmethod
    def _first(cls, num_reducers: int, tokens: int, even: bool, active: int | None) -> HashRing:
        """``tokens`` for each of the first ``active`` reducers (None or 0 = all), 0 for the others."""
        r = int(num_reducers)
        a = r if not active else active
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)) or not 1 <= a <= r:
            raise ConfigError(f"active reducers must be an integer in [1, {r}] (or 0 = all), got {active!r}")
        a = int(a)
        if a == r:
            return cls([tokens] * r, tokens if even else 0)
        return cls([tokens] * a + [0] * (r - a), tokens if even else 0, a)

    @classmethod
    def for_halving(
        cls, num_reducers: int, initial_tokens: int = DEFAULT_HALVING_TOKENS, even: bool = False,
        active: int | None = None,
    ) -> HashRing:
        """A ring for the token halving method: ``initial_tokens`` tokens per reducer.

        Args:
            num_reducers: Number of reducers (>= 1), slots of an elastic ring.
            initial_tokens: Tokens per reducer; a power of two >= 1.
            even: Space these tokens evenly (see the module docstring); False = hashed.
            active: Only the first ``active`` reducers get tokens (an elastic ring; even
                spacing among them only); None or 0 = all.

        Returns:
            The ring.

        Raises:
            ConfigError: If ``num_reducers < 1``, ``initial_tokens`` is not a power of two
                or ``active`` is not in ``[1, num_reducers]``.
        """
        _check_num_reducers(num_reducers)
        t = initial_tokens
        if not isinstance(t, (int, np.integer)) or t < 1 or (int(t) & (int(t) - 1)) != 0:
            try:
                suggestion = _nearest_power_of_two(int(t))
            except (TypeError, ValueError):
                suggestion = DEFAULT_HALVING_TOKENS
            raise ConfigError(
                f"initial_tokens for the halving method must be a power of two >= 1 so "
                f"every halving keeps a whole number of tokens, got {t!r}; "
                f"use e.g. {suggestion}"
            )
        return cls._first(num_reducers, int(t), even, active)

    @classmethod
    def for_doubling(cls, num_reducers: int, initial_tokens: int = 1, even: bool = False,
                     active: int | None = None) -> HashRing:
        """A ring for the token doubling method: ``initial_tokens`` per reducer (the paper: 1).

        Args:
            num_reducers: Number of reducers (>= 1), slots of an elastic ring.
            initial_tokens: Tokens per reducer, >= 1. One token each (the paper) leaves
                arcs that differ several-fold; more even the first ring out.
            even: Space these tokens evenly (see the module docstring); False = hashed.
            active: Only the first ``active`` reducers get tokens (an elastic ring; even
                spacing among them only); None or 0 = all.

        Returns:
            The ring.

        Raises:
            ConfigError: If ``num_reducers < 1``, ``initial_tokens < 1`` or ``active`` is
                not in ``[1, num_reducers]``.
        """
        _check_num_reducers(num_reducers)
        t = initial_tokens
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 1:
            raise ConfigError(f"initial_tokens for the doubling method must be an integer >= 1, got {t!r}")
        return cls._first(num_reducers, int(t), even, active)

    @classmethod
    def for_method(
        cls, method: str, num_reducers: int, initial_tokens: int | None = None, even: bool = False,
        active: int | None = None,
    ) -> HashRing:
        """The initial ring of a redistribution method (``"halving"`` or ``"doubling"``).

        Args:
            method: ``"halving"`` or ``"doubling"``.
            num_reducers: Number of reducers (>= 1), slots of an elastic ring.
            initial_tokens: Tokens per reducer; default :data:`DEFAULT_HALVING_TOKENS` for
                halving and 1 (the paper) for doubling.
            even: Space the first ring's tokens evenly (see the module docstring).
            active: Only the first ``active`` reducers get tokens; None or 0 = all.

        Returns:
            The ring.

        Raises:
            ConfigError: On an unknown method or invalid sizes.
        """
        _check_method(method)
        if method == "halving":
            return cls.for_halving(
                num_reducers,
                DEFAULT_HALVING_TOKENS if initial_tokens is None else initial_tokens,
                even,
                active,
            )
        return cls.for_doubling(num_reducers, 1 if initial_tokens is None else initial_tokens, even, active)

    @property
    def num_reducers(self) -> int:
        """Number of reducers."""
        return len(self._counts)

    @property
    def token_counts(self) -> tuple[int, ...]:
        """Current tokens per reducer."""
        return tuple(self._counts)

    @property
    def version(self) -> int:
        """Starts at 0 and increments on every change."""
        return self._version

    def snapshot(self) -> RingSnapshot:
        """Returns the immutable snapshot of the current version (cached)."""
        if self._snapshot is None or self._snapshot.version != self._version:
            self._snapshot = RingSnapshot.build(self._counts, version=self._version, even=self._even)
        return self._snapshot

    def key_lookup(self, key: Any) -> int:
        """Returns the reducer owning ``key`` in the current version."""
        return self.snapshot().key_lookup(key)

    def token_positions(self, reducer: int, count: int, start: int = 0) -> np.ndarray:
        """Positions of tokens ``start .. count - 1`` of ``reducer`` on this ring (its
        spacing), in token order (``int64``): where they would sit with ``count`` tokens,
        whatever it holds now.

        A reducer's positions do not depend on the other reducers' counts, so rings that
        differ only in counts can be compared reducer by reducer
        (:mod:`dpa.partitioners.ring_forecast`).
        """
        return _reducer_positions(self._check_node(reducer), int(count), self._even, int(start))

    def lookup_hash(self, h: int) -> int:
        """Returns the reducer owning hash ``h`` in the current version."""
        return self.snapshot().lookup_hash(h)

    def lookup_batch(self, hashes: np.ndarray) -> np.ndarray:
        """Vectorised lookup of key hashes in the current version (``int32`` owners)."""
        return self.snapshot().lookup_batch(hashes)

    def _check_node(self, node_id: int) -> int:
        if not isinstance(node_id, (int, np.integer)) or not 0 <= node_id < len(self._counts):
            raise ConfigError(
                f"reducer id must be an integer in [0, {len(self._counts)}), got {node_id!r}"
            )
        return int(node_id)

    def _changed(self) -> None:
        self._version += 1

    def restore(self, snapshot: RingSnapshot) -> None:
        """Takes the tokens, spacing and version of ``snapshot``, one of this ring's (a
        balancer restarted after a failure).

        Raises:
            ConfigError: If it has another number of reducers.
        """
        if snapshot.num_reducers != len(self._counts):
            raise ConfigError(f"a snapshot of {snapshot.num_reducers} reducers cannot restore a ring of "
                              f"{len(self._counts)}")
        self._counts = list(snapshot.token_counts)
        self._even = (int(snapshot.spacing[0]), int(snapshot.spacing[1]))
        self._version = snapshot.version
        self._snapshot = None

    def respace(self, tokens: int) -> bool:
        """Deals the first ring again: ``tokens`` tokens for every reducer that owns any,
        placed as a first ring of that many (evenly spaced if this ring's first tokens are).

        Unlike a round, this may move any key: it is meant for the ring a job starts
        from, before a key is routed (:mod:`dpa.partitioners.ring_forecast`).

        Args:
            tokens: Tokens per reducer (>= 1).

        Returns:
            Whether the ring changed (the version then increments).

        Raises:
            ConfigError: If ``tokens`` is not an integer >= 1.
        """
        if isinstance(tokens, bool) or not isinstance(tokens, (int, np.integer)) or tokens < 1:
            raise ConfigError(f"a first ring needs an integer >= 1 of tokens per reducer, got {tokens!r}")
        counts = [int(tokens) if t else 0 for t in self._counts]
        even = (self._even[0], int(tokens)) if self._even[1] else (0, 0)
        if counts == self._counts and even == self._even:
            return False
        self._counts, self._even = counts, even
        self._changed()
        return True

    @property
    def spacing(self) -> tuple[int, int]:
        """``(R, E)``: tokens ``j < E`` of reducers ``i < R`` are evenly spaced; ``(0, 0)``: none."""
        return self._even

    def halve(self, node_id: int) -> bool:
        """Token halving: removes the highest half of ``node_id``'s token indices.

        The reducer keeps tokens ``0 .. T // 2 - 1``. Only keys of ``node_id`` move.

        Args:
            node_id: The overloaded reducer.

        Returns:
            ``True`` if the ring changed; ``False`` (and nothing changes) when the reducer
            has at most one token left, i.e. halving is exhausted.
        """
        node_id = self._check_node(node_id)
        t = self._counts[node_id]
        if t <= 1:
            return False
        self._counts[node_id] = t // 2
        self._changed()
        return True

    def double_except(self, node_id: int) -> None:
        """Token doubling: doubles the tokens of every reducer except ``node_id``.

        Reducer ``i`` with ``T_i`` tokens gains indices ``T_i .. 2 T_i - 1``. Reducers with
        zero tokens keep zero. The version changes only if some count changed.

        Args:
            node_id: The overloaded reducer.
        """
        self._double_except(node_id)

    def _double_except(self, node_id: int) -> bool:
        node_id = self._check_node(node_id)
        grown = sum(2 * t if i != node_id else t for i, t in enumerate(self._counts))
        if grown > MAX_RING_TOKENS:
            return False  # exhausted: the ring would outgrow its bound (doubling grows it geometrically)
        changed = False
        for i, t in enumerate(self._counts):
            if i != node_id and t > 0:
                self._counts[i] = 2 * t
                changed = True
        if changed:
            self._changed()
        return changed

    def redistribute(self, node_id: int, method: str) -> bool:
        """Relieves ``node_id`` with the given method (the paper's ``redistribute``).

        Args:
            node_id: The overloaded reducer.
            method: ``"halving"`` or ``"doubling"``.

        Returns:
            Whether the ring changed (``False`` e.g. when halving is exhausted).

        Raises:
            ConfigError: On an unknown method or reducer id.
        """
        _check_method(method)
        if method == "halving":
            return self.halve(node_id)
        return self._double_except(node_id)

    def set_tokens(self, node_id: int, count: int) -> bool:
        """Gives reducer ``node_id`` exactly ``count`` tokens (elastic scaling).

        The reducer owns tokens ``0 .. count - 1`` at their usual positions: going from
        zero to ``count`` activates a slot, going to zero retires it. Only keys of
        ``node_id`` change owner (to or from it). The version changes only if the count
        did.

        Args:
            node_id: The reducer (slot).
            count: Its number of tokens (>= 0).

        Returns:
            Whether the ring changed.

        Raises:
            ConfigError: On an invalid reducer id or count, or if the ring would be left
                without tokens.
        """
        node_id = self._check_node(node_id)
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
            raise ConfigError(f"a reducer's token count must be an integer >= 0, got {count!r}")
        count = int(count)
        if count == self._counts[node_id]:
            return False
        if count == 0 and sum(self._counts) == self._counts[node_id]:
            raise ConfigError(f"reducer {node_id} holds every token of the ring; it cannot be left without any")
        self._counts[node_id] = count
        self._changed()
        return True

    def add_reducer(self, initial_tokens: int) -> int:
        """Adds a reducer (for elastic scaling).

        Args:
            initial_tokens: Its number of tokens (>= 0).

        Returns:
            The new reducer id (the previous ``num_reducers``).

        Raises:
            ConfigError: If ``initial_tokens`` is negative or not an integer.
        """
        if not isinstance(initial_tokens, (int, np.integer)) or initial_tokens < 0:
            raise ConfigError(
                f"initial_tokens of a new reducer must be an integer >= 0, got {initial_tokens!r}"
            )
        self._counts.append(int(initial_tokens))
        self._changed()
        return len(self._counts) - 1

    def __repr__(self) -> str:
        return f"HashRing(token_counts={self.token_counts}, version={self._version})"


def _check_num_reducers(num_reducers: int) -> None:
    if not isinstance(num_reducers, (int, np.integer)) or num_reducers < 1:
        raise ConfigError(f"num_reducers must be an integer >= 1, got {num_reducers!r}")


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise ConfigError(
            f"unknown redistribution method {method!r}; use one of {', '.join(METHODS)}"
        )
