"""A ring policy's first ring, planned from the mappers' forecast before the first push.

Each mapper counts the keys of its first block before routing any of it
(:meth:`dpa.policy.Planner.observe_forecast`). For a ring policy that forecast is a
prediction of the whole job: a key that is hot in it will be hot in every push. The
paper's rule relieves a straggler only once its queue has grown, one round at a time,
and a round of token doubling re-deals keys among all reducers, so the hot key often
hops to another reducer and the rounds chase it while the job runs. Here the rounds are
chosen before any record moves, on the forecast, and go out as the ring the first push
is routed under.

Rounds commute: a ring reached by doubling or halving is fixed by how many rounds each
reducer took (doubling: ``T_i 2^(n - r_i)`` for ``n`` rounds in all, halving:
``T_i >> r_i``). :func:`plan_first_ring` searches those vectors of rounds with a beam
search (one more round per step, the :data:`BEAM_WIDTH` best vectors kept), scoring each
ring on the forecast: named keys exactly, the rest as a uniform tail sampled at
:data:`TAIL_POINTS` evenly spaced hashes. A reducer's token positions do not depend on the
others' counts, so each reducer's distances to the sampled hashes are computed once per
token count and a ring is scored by taking, per hash, the reducer with the nearest token
at or after it. Pure logic, no Ray.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dpa.partitioners.ring_lookahead import KeyLoads, LookaheadPlan
from dpa.ring import MAX_RING_TOKENS, HashRing

__all__ = ["BEAM_WIDTH", "FORECAST_ROUNDS", "TAIL_POINTS", "RingScorer", "plan_first_ring", "round_tokens"]

#: Most rounds per reducer the first ring may take (they do not count against
#: ``max_rounds``, which bounds the rebalances of a running job).
FORECAST_ROUNDS = 3
#: Vectors of rounds the beam search keeps per step.
BEAM_WIDTH = 12
#: Evenly spaced hashes that stand for the forecast's tail of unnamed keys.
TAIL_POINTS = 2048
_SPACE = 1 << 32


def round_tokens(counts: Sequence[int], method: str, rounds: Sequence[int]) -> tuple[int, ...] | None:
    """Tokens per reducer after ``rounds[i]`` rounds relieving reducer ``i``, in any order.

    Args:
        counts: Tokens per reducer now (0 = an inactive slot, which no round changes).
        method: ``"doubling"`` (every other reducer's tokens double) or ``"halving"``.
        rounds: Rounds per reducer.

    Returns:
        The counts, or None if a round cannot be taken: halving below one token, a round
        for an inactive slot, or a ring past :data:`~dpa.ring.MAX_RING_TOKENS`.
    """
    if any(r and not t for t, r in zip(counts, rounds)):
        return None
    if method == "halving":
        out = tuple(t >> r for t, r in zip(counts, rounds))
        return None if any(t and not o for t, o in zip(counts, out)) else out
    n = sum(rounds)
    out = tuple(t << (n - r) for t, r in zip(counts, rounds))
    return out if sum(out) <= MAX_RING_TOKENS else None


class RingScorer:
    """Predicted largest share of rings that differ from ``ring`` only in token counts.

    Args:
        ring: The ring whose spacing (token positions) the scored rings share.
        loads: Named keys, scored exactly, and a tail.
        points: Evenly spaced hashes that stand for the tail (0: no tail, e.g. exact
            counts of every key).
    """

    def __init__(self, ring: HashRing, loads: KeyLoads, points: int = TAIL_POINTS) -> None:
        grid = ((np.arange(points) + 0.5) * (_SPACE / max(1, points))).astype(np.uint32)
        self.hashes = np.concatenate([np.asarray(loads.hashes, dtype=np.uint32), grid])
        self.weights = np.concatenate([np.asarray(loads.counts, dtype=np.float64),
                                       np.full(points, loads.tail / max(1, points))])
        self.fixed = loads.fixed
        self.ring = ring
        self.fair = loads.total / max(1, sum(1 for t in ring.token_counts if t > 0))
        self._distances: dict[tuple[int, int], np.ndarray] = {}

    def _distance(self, reducer: int, tokens: int) -> np.ndarray:
        """Clockwise distance from each hash to ``reducer``'s nearest token at or after it."""
        key = (reducer, tokens)
        if key not in self._distances:
            p = np.sort(self.ring.token_positions(reducer, tokens)).astype(np.uint32)
            k = np.searchsorted(p, self.hashes, side="left")
            # (wrapping past the last token to the first is uint32 arithmetic's own)
            self._distances[key] = p[np.where(k < len(p), k, 0)] - self.hashes
        return self._distances[key]

    def peak(self, counts: Sequence[int]) -> float:
        """Largest predicted share (1.0 = a fair share) of the ring with these counts."""
        active = [i for i, t in enumerate(counts) if t > 0]
        nearest = np.stack([self._distance(i, counts[i]) for i in active]).argmin(axis=0)
        owners = np.asarray(active)[nearest]  # ties go to the lowest reducer id, as on the ring
        loads = np.bincount(owners, weights=self.weights, minlength=len(counts))
        if self.fixed is not None:
            loads = loads + self.fixed
        return float(loads.max()) / self.fair if self.fair > 0 else 0.0


def plan_first_ring(ring: HashRing, method: str, loads: KeyLoads, rounds_left: Sequence[int],
                    margin: float = 0.05, width: int = BEAM_WIDTH, points: int = TAIL_POINTS) -> LookaheadPlan:
    """The rounds whose ring is predicted to hold the lowest largest share of ``loads``.

    A beam search over vectors of rounds: from no round, each step adds one round to one
    reducer (while it has rounds left) and keeps the ``width`` vectors with the lowest
    predicted largest share (fewer rounds first on ties). The best vector seen wins,
    provided it beats the current ring by more than ``margin`` fair shares.

    Args:
        ring: The current ring (not changed).
        method: ``"halving"`` or ``"doubling"``.
        loads: The forecast.
        rounds_left: Rounds each reducer may take (0 for inactive slots).
        margin: Least predicted gain (in fair shares) worth a ring change.
        width: Vectors kept per step.
        points: Hashes that stand for the tail.

    Returns:
        The plan (``relieved`` lists each reducer once per round, in reducer order; empty:
        keep the ring).
    """
    counts = ring.token_counts
    if loads.total <= 0:
        return LookaheadPlan((), counts, 0.0, 0.0)
    scorer = RingScorer(ring, loads, points)
    before = scorer.peak(counts)
    if before <= 1.0 + margin:
        return LookaheadPlan((), counts, before, before)  # nothing to gain: spare the search
    start = (0,) * len(counts)
    best: tuple[float, tuple[int, ...], tuple[int, ...]] = (before, start, counts)
    seen = {start}
    frontier = [start]
    while frontier:
        children: list[tuple[float, int, tuple[int, ...], tuple[int, ...]]] = []
        for rounds in frontier:
            for i, left in enumerate(rounds_left):
                if rounds[i] >= left:
                    continue
                child = rounds[:i] + (rounds[i] + 1,) + rounds[i + 1:]
                if child in seen:
                    continue
                seen.add(child)
                tokens = round_tokens(counts, method, child)
                if tokens is not None:
                    children.append((scorer.peak(tokens), sum(child), child, tokens))
        children.sort()
        kept = children[:width]
        if kept and kept[0][0] < best[0] - 1e-9:
            best = (kept[0][0], kept[0][2], kept[0][3])
        frontier = [c[2] for c in kept]
    peak, rounds, tokens = best
    if not any(rounds) or peak >= before - margin:
        return LookaheadPlan((), counts, before, before)
    relieved = tuple(i for i, r in enumerate(rounds) for _ in range(r))
    return LookaheadPlan(relieved, tokens, before, peak)
