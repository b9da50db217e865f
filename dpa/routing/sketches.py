"""Frequent-item sketches over batches of ``(key hash, count)`` pairs.

Three counters, all fed with numpy batches (a batch is a ``uint32`` hash array and an
aligned ``int64`` count array, typically one reducer's per-interval key report):

* :class:`LossyCounter` — Manku & Motwani's *lossy counting* with error ``epsilon``.
* :class:`SlidingLossyCounter` — Gedik's emulation of a sliding window with ``x`` (default
  3) lossy counters built over staggered tumbling windows (Gedik, "Partitioning functions
  for stateful data parallelism in stream processing", section 4.1.2 and Figure 2).
* :class:`SpaceSaving` — Metwally et al.'s *Space-Saving* top-k counter with a fixed
  capacity.

Batch semantics shared by all three: ``update(hashes, counts, total)`` adds ``counts[j]``
occurrences of ``hashes[j]`` (repeated hashes are summed first). ``total`` (optional,
``>= counts.sum()``) is the number of records the batch stands for: the
``total - counts.sum()`` records whose keys were not listed (e.g. below a reducer's
top-K cut-off) advance the stream length ``n`` but are attributed to no key. The
guarantees below hold for the listed records; unlisted records can only make the
reported relative frequencies smaller (their keys are unknown).

Lossy counting, batch version (choices documented here, tested in
``tests/unit/test_sketches.py``). The stream is divided into buckets of
``w = ceil(1 / epsilon)`` records; ``b = floor(n / w)`` is the number of *completed*
buckets. Every entry is ``(hash, f, delta)``: ``f`` occurrences counted since the entry was
created and ``delta``, an upper bound of the occurrences missed before. Per batch:

1. repeated hashes are summed;
2. a tracked hash gets ``f += count``; an untracked one is inserted with ``f = count`` and
   ``delta = floor(n_before / w)`` (the completed buckets before the batch);
3. ``n`` grows by the batch size, then entries with ``f + delta <= floor(n / w)`` are
   deleted.

This is the original algorithm with the deletion step run at batch ends instead of at
every bucket boundary: an entry deleted at completed-bucket count ``b`` had true count
``<= f + delta <= b``, and a re-inserted entry gets ``delta >= b``, so the invariant
``f <= true count <= f + delta <= f + epsilon * n`` holds exactly as in the paper, and
every item with true count ``>= support * n`` is reported by ``frequent(support)``
(``f >= (support - epsilon) * n``). Only the space bound is looser while a batch spans many
buckets (entries of the batch are pruned at its end). State is three sorted numpy arrays,
so a batch costs ``O((m + k) log(m + k))`` for ``m`` distinct hashes and ``k`` entries.

Sliding window emulation (Gedik, Figure 2). With window ``W`` records and ``x`` counters,
a new lossy counter is started every ``P = ceil(W / (x - 1))`` records (at stream offsets
``0, P, 2P, ...``); a counter started at ``s`` is queried once it holds ``W`` records
and is dropped at ``s + W + P``, when the next one takes over. So ``x`` counters are in
flight, and the one queried (the oldest) always covers the last ``W`` to
``(1 + 1 / (x - 1)) * W`` records (``W`` to ``1.5 W`` for ``x = 3``, as the paper states;
exactly so when ``x - 1`` divides ``W``, otherwise ``W`` to ``x * P``).
Before ``W`` records have been seen the oldest counter covers the whole stream so far
(the paper's footnote 2: the lower bound does not hold during initialisation). A batch
that crosses a boundary is split there, treating its listed pairs as coming first, in
order, and its unlisted records (``total - counts.sum()``) last.

Space-Saving, batch version: the listed pairs are processed in order, each as one
weighted update: a monitored hash gets ``count += c``; otherwise, if fewer than
``capacity`` hashes are monitored, it enters with ``(count=c, error=0)``, else it
replaces the hash with the smallest count ``m`` (ties: the smallest hash) and enters
with ``(count=m + c, error=m)``. The weighted algorithm keeps Metwally's guarantees:
``count - error <= true count <= count``, ``error <= min count <= n_listed / capacity``,
and every hash with true count ``> min count`` (in particular ``> n / capacity``) is
monitored.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections.abc import Iterable

import numpy as np

from dpa.errors import ConfigError

__all__ = ["LossyCounter", "SlidingLossyCounter", "SpaceSaving", "aggregate", "split_batch"]

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- helpers
def _as_batch(hashes: Iterable[int] | np.ndarray, counts: Iterable[int] | np.ndarray | None,
              total: int | None) -> tuple[np.ndarray, np.ndarray, int]:
    """Validates one batch; returns ``(uint32 hashes, int64 counts, total records)``."""
    h = np.asarray(hashes)
    if h.ndim != 1:
        raise ConfigError(f"hashes must be a 1-d array, got shape {h.shape}")
    if h.size and (not np.issubdtype(h.dtype, np.integer) or h.min() < 0 or int(h.max()) >= 2**32):
        raise ConfigError("hashes must be integers in [0, 2**32)")
    h = h.astype(np.uint32, copy=False)
    if counts is None:
        c = np.ones(len(h), dtype=np.int64)
    else:
        c = np.asarray(counts)
        if c.shape != h.shape:
            raise ConfigError(f"counts must align with hashes: shapes {c.shape} and {h.shape}")
        if c.size and (not np.issubdtype(c.dtype, np.integer) or c.min() < 0):
            raise ConfigError("counts must be non-negative integers")
        c = c.astype(np.int64, copy=False)
    listed = int(c.sum())
    if total is None:
        n = listed
    else:
        if isinstance(total, bool) or not isinstance(total, (int, np.integer)) or total < listed:
            raise ConfigError(
                f"total must be an integer >= the sum of counts ({listed}), got {total!r}"
            )
        n = int(total)
    return h, c, n


def aggregate(hashes: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sums the counts of repeated hashes; drops zero counts.

    Args:
        hashes: ``uint32`` hashes.
        counts: ``int64`` counts, aligned.

    Returns:
        ``(distinct sorted hashes, their summed counts)``.
    """
    if len(hashes) == 0:
        return np.zeros(0, np.uint32), np.zeros(0, np.int64)
    uniq, inv = np.unique(hashes, return_inverse=True)
    summed = np.zeros(len(uniq), dtype=np.int64)
    np.add.at(summed, inv.reshape(-1), counts)
    keep = summed > 0
    return uniq[keep], summed[keep]


def split_batch(hashes: np.ndarray, counts: np.ndarray, n: int) -> tuple[tuple[np.ndarray, np.ndarray],
                                                                        tuple[np.ndarray, np.ndarray]]:
    """Splits a batch after its first ``n`` records (pairs taken in order).

    A pair that straddles the cut is split into two pairs with the same hash.

    Args:
        hashes: ``uint32`` hashes.
        counts: ``int64`` counts, aligned.
        n: Records in the head (``0 <= n``; more than the batch holds takes it all).

    Returns:
        ``((head hashes, head counts), (tail hashes, tail counts))``.
    """
    cum = np.cumsum(counts)
    k = int(np.searchsorted(cum, n, side="left"))  # first pair whose cumulative count >= n
    if k >= len(counts):
        return (hashes, counts), (hashes[:0], counts[:0])
    before = int(cum[k - 1]) if k > 0 else 0
    take = n - before  # records of pair k in the head (0 < take <= counts[k] unless n == before)
    head_h = hashes[: k + 1].copy()
    head_c = counts[: k + 1].copy()
    head_c[k] = take
    tail_h = hashes[k:].copy()
    tail_c = counts[k:].copy()
    tail_c[0] = counts[k] - take
    return (head_h[head_c > 0], head_c[head_c > 0]), (tail_h[tail_c > 0], tail_c[tail_c > 0])


def _check_epsilon(epsilon: float) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float, np.floating)) or not 0 < epsilon < 1:
        raise ConfigError(f"lossy counting epsilon must be a number in (0, 1), got {epsilon!r}")
    return float(epsilon)


# ---------------------------------------------------------------------------- batches
class _BatchCounter:
    """Base of the three counters: :meth:`update` checks a batch, ``_update`` counts it."""

    def update(self, hashes: Iterable[int] | np.ndarray, counts: Iterable[int] | np.ndarray | None = None,
               total: int | None = None) -> None:
        """Adds one batch (the batch semantics are in the module docstring).

        Args:
            hashes: Key hashes (``uint32``; repeats allowed).
            counts: Occurrences of each hash (default 1 each).
            total: Records the batch stands for, ``>= counts.sum()`` (default: the sum).

        Raises:
            ConfigError: On malformed input.
        """
        self._update(*_as_batch(hashes, counts, total))

    def _update(self, h: np.ndarray, c: np.ndarray, n_batch: int) -> None:
        """Counts a checked batch: ``uint32`` hashes, aligned ``int64`` counts, its records."""
        raise NotImplementedError


# ---------------------------------------------------------------------------- lossy counting
class LossyCounter(_BatchCounter):
    """Manku & Motwani's lossy counting over batches (see the module docstring).

    Args:
        epsilon: Error bound in ``(0, 1)``: estimates undercount by at most ``epsilon * n``.

    Attributes:
        epsilon: The error bound.
        width: Bucket width ``ceil(1 / epsilon)`` in records.
        n: Records seen (listed and unlisted).
    """

    def __init__(self, epsilon: float) -> None:
        self.epsilon = _check_epsilon(epsilon)
        self.width = math.ceil(1.0 / self.epsilon)
        self.n = 0
        self._keys = np.zeros(0, dtype=np.uint32)
        self._f = np.zeros(0, dtype=np.int64)
        self._delta = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        """Number of entries kept."""
        return len(self._keys)

    @property
    def buckets(self) -> int:
        """Completed buckets ``floor(n / width)`` (the current ``epsilon * n`` bound)."""
        return self.n // self.width

    def _update(self, h: np.ndarray, c: np.ndarray, n_batch: int) -> None:
        self._add(*aggregate(h, c), n_batch)

    def _add(self, uniq: np.ndarray, cnt: np.ndarray, n_batch: int) -> None:
        b_before = self.n // self.width
        if len(uniq):
            idx = np.searchsorted(self._keys, uniq)
            found = idx < len(self._keys)
            found[found] = self._keys[idx[found]] == uniq[found]
            np.add.at(self._f, idx[found], cnt[found])
            new = ~found
            if new.any():
                pos = idx[new]
                self._keys = np.insert(self._keys, pos, uniq[new])
                self._f = np.insert(self._f, pos, cnt[new])
                self._delta = np.insert(self._delta, pos, np.full(int(new.sum()), b_before, np.int64))
        self.n += n_batch
        b = self.n // self.width
        keep = self._f + self._delta > b
        if not keep.all():
            self._keys, self._f, self._delta = self._keys[keep], self._f[keep], self._delta[keep]

    def estimate(self, h: int) -> int:
        """Counted occurrences of ``h`` (``0`` if untracked): ``true - epsilon * n <= estimate <= true``."""
        i = int(np.searchsorted(self._keys, np.uint32(h)))
        if i < len(self._keys) and int(self._keys[i]) == int(h):
            return int(self._f[i])
        return 0

    def entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Copies of the state: ``(sorted hashes, counts f, deltas)``."""
        return self._keys.copy(), self._f.copy(), self._delta.copy()

    def frequent(self, support: float) -> tuple[np.ndarray, np.ndarray]:
        """Items with ``f >= (support - epsilon) * n``, most frequent first.

        Every item whose true count is ``>= support * n`` is among them.

        Args:
            support: The threshold ``s`` as a fraction of ``n`` (``epsilon <= s <= 1`` is
                the meaningful range; smaller values return every entry).

        Returns:
            ``(hashes uint32, counts int64)``, by decreasing count, ties by hash.
        """
        threshold = (float(support) - self.epsilon) * self.n
        mask = self._f >= threshold
        h, f = self._keys[mask], self._f[mask]
        order = np.lexsort((h, -f))
        return h[order], f[order]


class SlidingLossyCounter(_BatchCounter):
    """Gedik's sliding-window emulation with ``counters`` lossy counters (module docstring).

    Args:
        window: The window ``W`` in records (``>= 1``).
        epsilon: Error bound of every lossy counter.
        counters: Number of lossy counters ``x`` (``>= 2``; the paper uses 3).

    Attributes:
        window: ``W``.
        period: ``P = ceil(W / (x - 1))``, records between counter starts.
        n: Records seen in total.
    """

    def __init__(self, window: int, epsilon: float, counters: int = 3) -> None:
        if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
            raise ConfigError(f"sliding window size must be an integer >= 1 record, got {window!r}")
        if isinstance(counters, bool) or not isinstance(counters, (int, np.integer)) or counters < 2:
            raise ConfigError(f"the sliding window emulation needs >= 2 lossy counters, got {counters!r}")
        self.window = int(window)
        self.epsilon = _check_epsilon(epsilon)
        self.counters = int(counters)
        self.period = math.ceil(self.window / (self.counters - 1))
        self.n = 0
        # (start offset, counter), oldest first
        self._live: list[tuple[int, LossyCounter]] = [(0, LossyCounter(self.epsilon))]

    @property
    def active(self) -> LossyCounter:
        """The counter answering queries: the oldest one in flight."""
        return self._live[0][1]

    @property
    def active_span(self) -> int:
        """Records covered by the active counter (``W .. (1 + 1/(x-1)) W`` once warmed up)."""
        return self.n - self._live[0][0]

    def __len__(self) -> int:
        """Entries kept over all counters in flight."""
        return sum(len(c) for _, c in self._live)

    def _update(self, h: np.ndarray, c: np.ndarray, n_batch: int) -> None:
        """Feeds the batch to the counters in flight, split at counter start / retirement boundaries."""
        while n_batch > 0:
            boundary = (self.n // self.period + 1) * self.period
            room = boundary - self.n
            if room >= n_batch:
                self._feed(h, c, n_batch)
                n_batch = 0
            else:
                (hh, hc), (h, c) = split_batch(h, c, room)
                self._feed(hh, hc, room)  # unlisted records fill the head after its pairs
                n_batch -= room
            if self.n % self.period == 0:
                self._rotate()

    def _feed(self, h: np.ndarray, c: np.ndarray, n: int) -> None:
        uniq, cnt = aggregate(h, c)
        for _, counter in self._live:
            counter._add(uniq, cnt, n)
        self.n += n

    def _rotate(self) -> None:
        """At a multiple of ``P``: retire the oldest if its successor is complete, start one."""
        if len(self._live) > 1 and self.n - self._live[1][0] >= self.window:
            self._live.pop(0)
        self._live.append((self.n, LossyCounter(self.epsilon)))
        # keep at most x counters (the youngest ones)
        while len(self._live) > self.counters:
            self._live.pop(0)

    def frequent(self, support: float) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`LossyCounter.frequent` of the active counter."""
        return self.active.frequent(support)

    def frequencies(self, support: float) -> tuple[np.ndarray, np.ndarray]:
        """Items reported by :meth:`frequent` with their relative frequencies ``f / n_active``.

        Returns:
            ``(hashes uint32, frequencies float64)``; empty before any record.
        """
        h, f = self.frequent(support)
        n = self.active.n
        if n == 0:
            return h[:0], np.zeros(0, np.float64)
        return h, f.astype(np.float64) / n

    def estimate(self, h: int) -> int:
        """:meth:`LossyCounter.estimate` of the active counter."""
        return self.active.estimate(h)


# ---------------------------------------------------------------------------- space saving
class SpaceSaving(_BatchCounter):
    """Metwally et al.'s Space-Saving top-k counter, batch updates (module docstring).

    Args:
        capacity: Most hashes monitored (``>= 1``).

    Attributes:
        capacity: The capacity.
        n: Records seen (listed and unlisted).
        n_listed: Records seen with their key (what the guarantees refer to).
    """

    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
            raise ConfigError(f"SpaceSaving capacity must be an integer >= 1, got {capacity!r}")
        self.capacity = int(capacity)
        self.n = 0
        self.n_listed = 0
        self._count: dict[int, int] = {}
        self._err: dict[int, int] = {}
        self._heap: list[tuple[int, int]] = []  # (count, hash), lazily invalidated

    def __len__(self) -> int:
        return len(self._count)

    def __contains__(self, h: object) -> bool:
        return h in self._count

    def _pop_min(self) -> tuple[int, int]:
        heap, count = self._heap, self._count
        while True:
            c, h = heap[0]
            if count.get(h) == c:
                return c, h
            heapq.heappop(heap)

    def _compact(self) -> None:
        self._heap = [(c, h) for h, c in self._count.items()]
        heapq.heapify(self._heap)

    def _update(self, h: np.ndarray, c: np.ndarray, n_batch: int) -> None:
        """Processes the batch's pairs in the given order, one weighted update each."""
        count, err, heap, cap = self._count, self._err, self._heap, self.capacity
        for x, w in zip(h.tolist(), c.tolist()):
            if w == 0:
                continue
            cur = count.get(x)
            if cur is not None:
                count[x] = cur + w
                heapq.heappush(heap, (cur + w, x))
            elif len(count) < cap:
                count[x] = w
                err[x] = 0
                heapq.heappush(heap, (w, x))
            else:
                m, victim = self._pop_min()
                heapq.heappop(heap)
                del count[victim]
                del err[victim]
                count[x] = m + w
                err[x] = m
                heapq.heappush(heap, (m + w, x))
            if len(heap) > 4 * cap + 64:
                self._compact()
                heap = self._heap
        self.n += n_batch
        self.n_listed += int(c.sum())

    @property
    def min_count(self) -> int:
        """The smallest monitored count (0 if empty)."""
        if not self._count:
            return 0
        return self._pop_min()[0]

    @property
    def error(self) -> int:
        """Bound on any count's overestimate: the min count once full, else 0."""
        return self.min_count if len(self._count) >= self.capacity else 0

    def estimate(self, h: int) -> int:
        """Monitored count of ``h`` (an upper bound of its true count), 0 if not monitored.

        An unmonitored hash has a true count ``<= error``.
        """
        return self._count.get(int(h), 0)

    def error_of(self, h: int) -> int:
        """Overestimate bound of ``h``'s count (``count - error_of <= true <= count``)."""
        return self._err.get(int(h), 0)

    def top(self, n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The ``n`` largest counts (all monitored hashes when ``n`` is None).

        Returns:
            ``(hashes uint32, counts int64)`` by decreasing count, ties by hash.
        """
        size = len(self._count)
        hashes = np.fromiter(self._count.keys(), dtype=np.uint32, count=size)
        counts = np.fromiter(self._count.values(), dtype=np.int64, count=size)
        order = np.lexsort((hashes, -counts))  # by decreasing count, then by hash
        if n is not None:
            order = order[: max(0, int(n))]
        return hashes[order], counts[order]

    def guaranteed(self, n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Like :meth:`top` but with the guaranteed counts ``count - error_of``."""
        h, c = self.top(n)
        g = np.array([self._err[int(x)] for x in h.tolist()], dtype=np.int64)
        return h, c - g
