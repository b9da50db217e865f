"""Looking ahead before a ring round: the DPA rule run forward on estimated key loads.

The paper's rule relieves the reducer with the longest queue and finds out afterwards
what the round did. A round of token doubling re-deals keys among *all* reducers, and
either method may hand the one hot key that made a reducer the straggler to another
reducer, which then becomes the straggler itself. Queue lengths cannot tell, but the
key counts the reducers report (:meth:`dpa.routing.policy.Planner.observe_keys`) can: with them
the planner predicts each reducer's share of the records still to come under any ring,
assuming the rest of the stream looks like what arrived so far.

:func:`plan_rounds` runs the paper's rule forward on those predictions: it relieves the
measured straggler, then whichever reducer the prediction says is the most loaded, round
after round while rounds are left, and keeps the prefix of that sequence whose predicted
maximum is lowest. The planner publishes that ring at once (one version), or nothing when
no prefix beats the current ring by a margin: no reshuffle that the prediction says makes
things worse, and one move instead of a cascade of them. Everything here is pure logic.

Elastic rings: reducers with zero tokens (inactive slots) own no keys, are predicted to
get nothing and count for no fair share (a fair share is ``1 / A`` of the records, ``A``
the reducers with tokens). No round makes them active: doubling keeps zero tokens at
zero and halving cannot halve fewer than two, and the planner gives them no rounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpa.routing.hash_ring import HashRing
from dpa.routing.ring import RingSnapshot

__all__ = ["KeyLoads", "LookaheadPlan", "arc_shares", "plan_rounds", "predicted_loads"]

_SPACE = float(1 << 32)


@dataclass(frozen=True)
class KeyLoads:
    """Estimated records per key: the heavy keys named, the rest as a uniform tail.

    Attributes:
        hashes: ``uint32`` hashes of the keys counted one by one.
        counts: Their estimated records (``float64``, aligned with ``hashes``).
        tail: Records of all other keys, assumed spread evenly over the hash space.
        fixed: Records per reducer that no ring round moves (e.g. ``hybrid``'s split hot
            keys, placed by their planned shares), or None.
    """

    hashes: np.ndarray
    counts: np.ndarray
    tail: float
    fixed: np.ndarray | None = None

    @property
    def total(self) -> float:
        """All records the estimate covers."""
        return float(self.counts.sum()) + self.tail + (0.0 if self.fixed is None else float(self.fixed.sum()))


def arc_shares(snapshot: RingSnapshot) -> np.ndarray:
    """Fraction of the hash space each reducer owns on the ring.

    A token owns the arc from the previous token (exclusive) to itself (inclusive),
    wrapping around, the same rule as :meth:`RingSnapshot.lookup_batch`.
    """
    pos = snapshot.positions.astype(np.float64)
    arcs = np.diff(pos, prepend=pos[-1] - _SPACE)
    return np.bincount(snapshot.owners, weights=arcs, minlength=snapshot.num_reducers) / _SPACE


def predicted_loads(snapshot: RingSnapshot, loads: KeyLoads) -> np.ndarray:
    """Records each reducer would get under ``snapshot`` (named keys exactly, tail by arc)."""
    named = np.bincount(snapshot.lookup_batch(loads.hashes), weights=loads.counts,
                        minlength=snapshot.num_reducers)
    out = named + loads.tail * arc_shares(snapshot)
    return out if loads.fixed is None else out + loads.fixed


@dataclass(frozen=True)
class LookaheadPlan:
    """What :func:`plan_rounds` chose.

    Attributes:
        relieved: Reducers relieved, in order (empty: keep the current ring).
        token_counts: Tokens per reducer after those rounds.
        before: Predicted largest share of the current ring (1.0 = a fair share).
        after: Predicted largest share after the rounds.
    """

    relieved: tuple[int, ...]
    token_counts: tuple[int, ...]
    before: float
    after: float


def _fair_share(ring: HashRing, total: float) -> float:
    """Records per reducer that owns tokens."""
    return total / sum(1 for t in ring.token_counts if t > 0)


def _greedy(ring: HashRing, method: str, first: int, rounds_left: Sequence[int],
            loads: KeyLoads) -> tuple[list[int], list[float]]:
    """The forward run starting with ``first``: the reducers relieved, in order, and the
    predicted maximum (in fair shares) after each (every prefix of the run)."""
    if method == "halving":
        return _greedy_halving(ring, first, rounds_left, loads)
    ring = ring.copy()
    left = list(rounds_left)
    fair = _fair_share(ring, loads.total)
    relieved: list[int] = []
    peaks: list[float] = []
    x = first
    while left[x] > 0:
        left[x] -= 1
        if not ring.redistribute(x, method):
            break  # exhausted: the ring cannot change for this reducer any more
        relieved.append(x)
        predicted = predicted_loads(ring.snapshot(), loads)
        peaks.append(float(predicted.max() / fair))
        x = int(np.argmax(predicted))
    return relieved, peaks


def _greedy_halving(ring: HashRing, first: int, rounds_left: Sequence[int],
                    loads: KeyLoads) -> tuple[list[int], list[float]]:
    """:func:`_greedy` for halving, without a snapshot per round: a halving only removes
    tokens, and a removed token's arc (its share of the tail and the named keys in it)
    goes to the next live token clockwise. The predicted load of every token is computed
    once, then each removal moves one token's load to its successor (found through
    union-find pointers over the removed tokens): ``O(T log T)`` for the ring's ``T``
    tokens, plus ``O(W)`` per round for the most loaded reducer."""
    counts = list(ring.token_counts)
    held = [(i, t) for i, t in enumerate(counts) if t > 0]
    pos = np.concatenate([ring.token_positions(i, t) for i, t in held]).astype(np.uint32)
    owner = np.concatenate([np.full(t, i, dtype=np.int64) for i, t in held])
    index = np.concatenate([np.arange(t, dtype=np.int64) for _, t in held])
    order = np.lexsort((index, owner, pos))  # the order of RingSnapshot.build
    pos, owner, index = pos[order], owner[order], index[order]
    n = len(pos)
    p = pos.astype(np.float64)
    token_load = loads.tail * (np.diff(p, prepend=p[-1] - _SPACE) / _SPACE)
    at = np.searchsorted(pos, np.asarray(loads.hashes, dtype=np.uint32), side="left")
    at[at == n] = 0
    token_load = token_load + np.bincount(at, weights=loads.counts, minlength=n)
    predicted = np.bincount(owner, weights=token_load, minlength=len(counts))
    if loads.fixed is not None:
        predicted = predicted + loads.fixed
    # each reducer's tokens (sorted positions) by token index
    by_index = np.lexsort((index, owner))
    starts = np.searchsorted(owner[by_index], np.arange(len(counts)), side="left")
    tl = token_load.tolist()
    up = list(range(n))  # a live token is its own root; a removed one points clockwise

    def successor(k: int) -> int:
        """The first live token after removed token ``k`` clockwise (path compression)."""
        j = k
        while up[j] != j:
            j = up[j]
        while up[k] != k:
            up[k], k = j, up[k]
        return j

    fair = _fair_share(ring, loads.total)
    left = list(rounds_left)
    relieved: list[int] = []
    peaks: list[float] = []
    x = first
    while left[x] > 0:
        left[x] -= 1
        t = counts[x]
        if t <= 1:
            break  # exhausted: the ring cannot change for this reducer any more
        counts[x] = t // 2
        for k in by_index[starts[x] + t // 2: starts[x] + t].tolist():
            up[k] = k + 1 if k + 1 < n else 0
            d = successor(k)
            load = tl[k]
            tl[d] += load
            tl[k] = 0.0
            predicted[x] -= load
            predicted[owner[d]] += load
        relieved.append(x)
        peaks.append(float(predicted.max() / fair))
        x = int(np.argmax(predicted))
    return relieved, peaks


def plan_rounds(ring: HashRing, method: str, straggler: int, rounds_left: Sequence[int],
                loads: KeyLoads, margin: float = 0.05) -> LookaheadPlan:
    """The best prefix of the paper's rule run forward on predicted loads.

    Two forward runs are tried, one that starts by relieving the measured ``straggler``
    (the paper's choice) and one that starts with the predicted most loaded reducer; each
    then relieves the predicted most loaded reducer while it has rounds left. The prefix
    with the lowest predicted maximum wins (the shorter on ties), provided it beats the
    current ring's by more than ``margin`` fair shares.

    Args:
        ring: The current ring (not changed).
        method: ``"halving"`` or ``"doubling"``.
        straggler: The reducer the measured rule named.
        rounds_left: Rounds each reducer may still be relieved (0 for inactive slots).
        loads: The key-load estimate.
        margin: Least predicted gain (in fair shares) worth a ring change.

    Returns:
        The plan; ``relieved`` is empty when the current ring is kept.
    """
    fair = _fair_share(ring, loads.total) if loads.total > 0 else 1.0
    now = predicted_loads(ring.snapshot(), loads)
    before = float(now.max() / fair)
    keep = LookaheadPlan((), ring.token_counts, before, before)
    if loads.total <= 0:
        return keep
    starts = [straggler] + ([int(np.argmax(now))] if int(np.argmax(now)) != straggler else [])
    best_run: list[int] = []
    best_len, best_peak = 0, before
    for start in starts:
        relieved, peaks = _greedy(ring, method, start, rounds_left, loads)
        for length, peak in enumerate(peaks, 1):
            if peak < best_peak - 1e-9 or (peak <= best_peak + 1e-9 and best_len and length < best_len):
                best_run, best_len, best_peak = relieved, length, peak
    if not best_len or not best_peak < before - margin:
        return keep
    after = ring.copy()
    for x in best_run[:best_len]:
        after.redistribute(x, method)
    return LookaheadPlan(tuple(best_run[:best_len]), after.token_counts, before, best_peak)
