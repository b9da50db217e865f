"""The mutable, authoritative ring the load balancer keeps (:class:`HashRing`): token
halving and doubling, elastic slots, lookups; each version published as a
:class:`~dpa.routing.ring.RingSnapshot`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dpa.errors import ConfigError
from dpa.routing.ring import (
    DEFAULT_HALVING_TOKENS,
    MAX_RING_TOKENS,
    METHODS,
    RingSnapshot,
    _check_counts,
    _reducer_positions,
    is_power_of_two,
    nearest_power_of_two,
)


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
        if not is_power_of_two(t):
            try:
                suggestion = nearest_power_of_two(int(t))
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
        (:mod:`dpa.routing.policies.ring.forecast`).
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
        from, before a key is routed (:mod:`dpa.routing.policies.ring.forecast`).

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
