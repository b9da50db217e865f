"""The ``hybrid`` policy (:class:`HybridPolicy`), built from :class:`HybridSettings` and
the job's shape by :func:`build_hybrid`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dpa.routing.policies.common import check_int_option
from dpa.routing.policies.hybrid.planner import HybridPlanner
from dpa.routing.policies.hybrid.settings import HybridSettings
from dpa.routing.policies.hybrid.snapshot import _EMPTY_U32, _PHI, HybridRouter, HybridSnapshot
from dpa.routing.policies.ring.policy import RingPolicy
from dpa.routing.policy import JobShape, Router, Snapshot


@dataclass(frozen=True)
class HybridPolicy(RingPolicy):
    """DPA ring for the tail plus hot-key splitting, built from :class:`HybridSettings` and
    the job's shape: ``min_gap``, ``min_gap_s`` and the elastic shape are resolved as for
    the ring (:class:`~dpa.routing.policies.ring.policy.RingPolicy`), and the job's mappers
    (:attr:`num_mappers`) interleave on each hot key's sequence. In an elastic job the
    planner may activate and retire slots (:meth:`HybridPlanner.scale_out`,
    :meth:`HybridPlanner.scale_in`).
    """

    settings: HybridSettings = field(default_factory=HybridSettings)

    supports_elastic = True
    moves_keys = True
    splits_keys = True
    splits_by_plan = True
    wants_key_stats = True
    key_stats_when_backlogged = True
    wants_block_stats = True
    #: Mappers may combine: a hot key's partial-state rows are split by the planned shares
    #: like records (its reducers merge partial states at the end anyway).
    combinable = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int_option("num_mappers", self.shape.num_mappers, 1, "hybrid")

    @property
    def num_mappers(self) -> int:
        """Mappers of the job (``JobShape.num_mappers``)."""
        return int(self.shape.num_mappers)

    def keys_split_under(self, snapshot: Snapshot) -> bool:
        return len(snapshot.hot) > 0  # (only its hot keys are split)

    def initial_snapshot(self, num_reducers: int) -> HybridSnapshot:
        return HybridSnapshot(self.ring(num_reducers).snapshot(), _EMPTY_U32,
                              np.zeros((0, num_reducers), dtype=np.int64), np.ones((0, num_reducers)), 0)

    def make_router(self, mapper_id: int, num_reducers: int) -> Router:
        return HybridRouter(mapper_id, self.num_mappers)

    def make_planner(self, num_reducers: int) -> HybridPlanner:
        return HybridPlanner(self, num_reducers)

    def owners(self, snapshot: HybridSnapshot, hashes: np.ndarray) -> np.ndarray:
        """Ring owners (a hot key's first candidate; its records may be on others too)."""
        return snapshot.lookup_batch(hashes)

    def destinations(self, snapshot: HybridSnapshot, hashes: np.ndarray, reducer: int,
                     adopting: bool, previous: HybridSnapshot | None = None) -> np.ndarray:
        hashes = np.asarray(hashes, dtype=np.uint32)
        dest = snapshot.lookup_batch(hashes).astype(np.int64)
        idx = snapshot.hot_index(hashes)
        was_hot = None if previous is None else previous.hot_index(hashes) >= 0
        hot_rows = np.flatnonzero(idx >= 0)
        if not len(hot_rows):
            return dest
        # the rows of each hot key, in order (one sort, not a scan of the batch per key)
        grouped = hot_rows[np.argsort(idx[hot_rows], kind="stable")]
        keys, sizes = np.unique(idx[grouped], return_counts=True)
        bounds = np.concatenate(([0], np.cumsum(sizes))).tolist()
        for j, k in enumerate(keys.tolist()):
            rows = grouped[bounds[j]:bounds[j + 1]]
            cands = snapshot.candidates(k)
            mine = bool((cands == reducer).any())
            # The home spreads what it holds of a key that has just become hot (or a batch
            # routed before it knew); records of a key that was hot already are its share.
            spread = adopting and cands[0] == reducer and (was_hot is None or not was_hot[rows[0]])
            if mine and not spread:
                dest[rows] = reducer
            else:  # spread by the key's planned shares, from a phase of this batch
                phase = float(np.modf((int(hashes[rows[0]]) + len(hashes)) * _PHI)[0])
                dest[rows] = snapshot.assign(k, np.arange(len(rows)), phase)
        return dest


    def handover(self, snapshot: HybridSnapshot, hashes: np.ndarray, dest: np.ndarray, reducer: int) -> np.ndarray:
        """Hands ``snapshot.moves[reducer, d]`` kept records of hot keys to each reducer ``d``.

        The records are taken from the back of the queue (those this reducer would
        process last), and only of hot keys that ``d`` is a candidate of, so ``d`` keeps
        them; when fewer are queued, fewer move.
        """
        moves = snapshot.moves
        if moves is None or not moves[reducer].any():
            return dest
        idx = snapshot.hot_index(hashes)
        free = (dest == reducer) & (idx >= 0)
        dest = dest.copy()
        keys = np.unique(idx[free])  # the hot keys of the records that may move
        cands = snapshot.cands[keys]  # (their candidate rows: a few keys x R, not records x R)
        for d in np.flatnonzero(moves[reducer]).tolist():
            ok = free & np.isin(idx, keys[(cands == d).any(axis=1)])
            rows = np.flatnonzero(ok)[::-1][: int(moves[reducer, d])]
            dest[rows] = d
            free[rows] = False
        return dest


def build_hybrid(settings: HybridSettings, shape: JobShape) -> HybridPolicy:
    """The registry factory of ``hybrid`` (``min_gap``, the mappers and the elastic shape
    from the job's shape)."""
    return HybridPolicy(settings, shape)
