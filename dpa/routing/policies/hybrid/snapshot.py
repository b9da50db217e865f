"""The ``hybrid`` policy's routing: its snapshot (a DPA ring plus planned shares of the hot
keys) and the router that spreads a hot key's records by those shares.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from dpa.routing.policy import Router
from dpa.routing.ring import RingSnapshot

_EMPTY_U32 = np.zeros(0, dtype=np.uint32)
_PHI = (np.sqrt(5.0) - 1.0) / 2.0  # the golden ratio's fractional part
#: Keys of each mapper's forecast the hot-key rule keeps (its most frequent): a hot key
@dataclass(frozen=True, eq=False)
class HybridSnapshot:
    """One version of the hybrid routing state: the ring plus the hot keys and their widths.

    Attributes:
        ring: The DPA ring (owner of every key; first candidate of a hot key).
        hot: Sorted ``uint32`` hashes of the hot keys.
        cands: ``int64`` array of shape ``(len(hot), R)``: row ``i`` lists the reducers hot
            key ``i`` is split over, its home (where its backlog was) first, padded with -1.
        cumw: Cumulative share of the key's records each candidate gets (same shape,
            padded with 1.0): candidate ``j`` of key ``i`` gets ``cumw[i, j] - cumw[i, j-1]``.
        version: Version of the whole state (ring and hot keys).
        moves: ``int64`` array of shape ``(R, R)`` or None: ``moves[s, d]`` queued records
            of hot keys that reducer ``s`` hands to reducer ``d`` when it adopts this
            snapshot (:meth:`HybridPolicy.handover`), to level what the reducers hold.
    """

    ring: RingSnapshot
    hot: np.ndarray
    cands: np.ndarray
    cumw: np.ndarray
    version: int
    moves: np.ndarray | None = None

    @property
    def num_reducers(self) -> int:
        """``R``."""
        return len(self.ring.token_counts)

    @property
    def token_counts(self) -> tuple[int, ...]:
        """Tokens per reducer of the ring (shown by metrics and reports)."""
        return self.ring.token_counts

    @property
    def table_size(self) -> int:
        """Number of hot keys (the explicit part of the routing state)."""
        return len(self.hot)

    def lookup_batch(self, hashes: np.ndarray) -> np.ndarray:
        """Ring owners of the keys (``int32``)."""
        return self.ring.lookup_batch(hashes)

    def hot_index(self, hashes: np.ndarray) -> np.ndarray:
        """Index of each hash in :attr:`hot`, or -1 for tail keys."""
        hashes = np.asarray(hashes, dtype=np.uint32)
        if not len(self.hot) or not len(hashes):
            return np.full(len(hashes), -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.hot, hashes), len(self.hot) - 1)
        return np.where(self.hot[pos] == hashes, pos, -1).astype(np.int64)

    @cached_property
    def widths(self) -> np.ndarray:
        """How many candidates each hot key has (its row of :attr:`cands` up to the padding)."""
        return (self.cands >= 0).sum(axis=1)

    def candidates(self, i: int) -> np.ndarray:
        """The reducers hot key number ``i`` is split over (home first)."""
        return self.cands[i, : int(self.widths[i])]

    def assign(self, i: int, positions: np.ndarray, phase: float) -> np.ndarray:
        """Candidates for the records at ``positions`` of hot key ``i``'s sequence.

        A golden-ratio (low-discrepancy) sequence ``frac(p * phi + phase)`` mapped through
        the cumulative shares: any run of consecutive positions gives each candidate its
        share to within a few records, deterministically and without per-record state.
        """
        cands = self.candidates(i)
        u = np.modf(positions * _PHI + phase)[0]
        j = np.searchsorted(self.cumw[i, : len(cands)], u, side="right")
        return cands[np.minimum(j, len(cands) - 1)]


class HybridRouter(Router):
    """Per-mapper routing: the ring for tail keys, planned shares for hot keys.

    The ``M`` mappers share each hot key's sequence (:meth:`HybridSnapshot.assign`) by
    interleaving: mapper ``m`` takes positions ``m, m + M, m + 2M, ...``. As long as the
    mappers see a key at similar rates, the positions used so far form an almost
    contiguous prefix of one low-discrepancy sequence, so the candidates' shares are met
    to within a few records over the whole job, not per mapper.
    """

    def __init__(self, mapper_id: int, num_mappers: int) -> None:
        self.mapper_id = mapper_id
        self.num_mappers = max(1, num_mappers)
        self.turn: dict[int, int] = {}  # hot key -> records routed so far by this mapper
        self.split_records = 0

    def route(self, hashes: np.ndarray, snapshot: HybridSnapshot) -> np.ndarray:
        hashes = np.asarray(hashes, dtype=np.uint32)
        dest = snapshot.ring.lookup_batch(hashes).astype(np.int64)
        idx = snapshot.hot_index(hashes)
        rows = np.flatnonzero(idx >= 0)
        if not len(rows):
            return dest
        grouped = rows[np.argsort(idx[rows], kind="stable")]
        keys, sizes = np.unique(idx[rows], return_counts=True)
        bounds = np.concatenate(([0], np.cumsum(sizes)))
        for j, k in enumerate(keys.tolist()):
            seg = grouped[bounds[j] : bounds[j + 1]]
            h = int(snapshot.hot[k])
            start = self.turn.get(h, 0)
            positions = (start + np.arange(len(seg))) * self.num_mappers + self.mapper_id
            dest[seg] = snapshot.assign(k, positions, 0.0)
            self.turn[h] = start + len(seg)
        self.split_records += len(rows)
        return dest


