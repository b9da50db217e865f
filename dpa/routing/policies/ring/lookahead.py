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
            loads: KeyLoads) -> list[tuple[tuple[int, ...], tuple[int, ...], float]]:
    """Every prefix of the forward run starting with ``first``: (relieved, tokens, max)."""
    ring = ring.copy()
    left = list(rounds_left)
    fair = _fair_share(ring, loads.total)
    relieved: list[int] = []
    out = []
    x = first
    while left[x] > 0:
        left[x] -= 1
        if not ring.redistribute(x, method):
            break  # exhausted: the ring cannot change for this reducer any more
        relieved.append(x)
        predicted = predicted_loads(ring.snapshot(), loads)
        out.append((tuple(relieved), ring.token_counts, float(predicted.max() / fair)))
        x = int(np.argmax(predicted))
    return out


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
    best = keep
    for start in starts:
        for relieved, tokens, peak in _greedy(ring, method, start, rounds_left, loads):
            if peak < best.after - 1e-9 or (peak <= best.after + 1e-9 and best.relieved
                                             and len(relieved) < len(best.relieved)):
                best = LookaheadPlan(relieved, tokens, before, peak)
    return best if best.relieved and best.after < before - margin else keep
