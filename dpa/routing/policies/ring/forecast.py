"""A ring policy's first ring, planned from the mappers' forecast before the first push.

Each mapper counts the keys of its first block before routing any of it
(:meth:`dpa.routing.policy.Planner.observe_forecast`). For a ring policy that forecast is a
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
at or after it.

Where a hot key holds more than a fair share, no ring splits it, and what is left to
choose is which reducer takes it and how little else that reducer keeps. Rings of one
first size offer only so many such draws: the search also starts from first rings of
other sizes (:func:`first_ring_sizes`, :meth:`~dpa.routing.hash_ring.HashRing.respace`), whose token
positions are other draws. On 30 Zipf(1.1) jobs of 40k records over 10k keys (8
reducers, ``python -m benchmarks.first_ring``) the doubling ring it picks holds 1.34 fair
shares on its largest reducer on average (worst 1.51), against 1.43 (worst 1.74) from
the policy's first ring alone; halving's 1.40 (worst 1.57) against 1.67 (worst 2.10).
The search takes 65-70 ms, once per job. Pure logic, no Ray.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpa.routing.hash_ring import HashRing
from dpa.routing.policies.ring.lookahead import KeyLoads, LookaheadPlan
from dpa.routing.ring import MAX_RING_TOKENS

__all__ = [
    "BEAM_WIDTH", "FIRST_RING_SHIFTS", "FORECAST_ROUNDS", "TAIL_POINTS", "FirstRingPlan", "RingScorer",
    "first_ring_sizes", "forecast_loads", "plan_first_ring", "round_tokens",
]

#: Most rounds per reducer the first ring may take (they do not count against
#: ``max_rounds``, which bounds the rebalances of a running job).
FORECAST_ROUNDS = 3
#: Vectors of rounds the beam search keeps per step.
BEAM_WIDTH = 8
#: Evenly spaced hashes that stand for the forecast's tail of unnamed keys.
TAIL_POINTS = 1024
#: The other first rings the search may start from (:func:`first_ring_sizes`): the
#: policy's ``initial_tokens`` times these powers of two. Doubling grows a ring from its
#: first size, halving shrinks it.
FIRST_RING_SHIFTS = {"doubling": (-3, -2, -1, 1), "halving": (-1, 1, 2, 3)}
_SPACE = 1 << 32


def first_ring_sizes(method: str, initial_tokens: int) -> tuple[int, ...]:
    """Tokens per reducer of the first rings :func:`plan_first_ring` may start from
    besides one of ``initial_tokens`` (:data:`FIRST_RING_SHIFTS`; at least 1 each)."""
    sizes = {max(1, initial_tokens << s if s >= 0 else initial_tokens >> -s) for s in FIRST_RING_SHIFTS[method]}
    return tuple(sorted(sizes - {initial_tokens}))


def forecast_loads(hashes: np.ndarray, counts: np.ndarray, total: int) -> KeyLoads:
    """A mapper's forecast as key loads: every key it counted named (exact counts of a
    sample, not a sketch's estimates that only the heavy keys can trust), the rest of its
    ``total`` records as a uniform tail."""
    c = np.asarray(counts, dtype=np.float64)
    return KeyLoads(np.asarray(hashes, dtype=np.uint32), c, max(0.0, float(total) - float(c.sum())))


def round_tokens(counts: Sequence[int], method: str, rounds: Sequence[int]) -> tuple[int, ...] | None:
    """Tokens per reducer after ``rounds[i]`` rounds relieving reducer ``i``, in any order.

    Args:
        counts: Tokens per reducer now (0 = an inactive slot, which no round changes).
        method: ``"doubling"`` (every other reducer's tokens double) or ``"halving"``.
        rounds: Rounds per reducer.

    Returns:
        The counts, or None if a round cannot be taken: halving below one token, a round
        for an inactive slot, or a ring past :data:`~dpa.routing.ring.MAX_RING_TOKENS`.
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
        # A distance carries its reducer in its low bits: the least of them names the owner,
        # ties going to the lowest reducer id as on the ring.
        self._shift = max(1, (ring.num_reducers - 1).bit_length())
        self._mask = (1 << self._shift) - 1
        self._distances: dict[tuple[int, int], np.ndarray] = {}

    def _distance(self, reducer: int, tokens: int) -> np.ndarray:
        """Clockwise distance from each hash to ``reducer``'s nearest token at or after it,
        shifted left with ``reducer`` in the low bits (``int64``)."""
        key = (reducer, tokens)
        if key not in self._distances:
            p = np.sort(self.ring.token_positions(reducer, tokens)).astype(np.uint32)
            k = np.searchsorted(p, self.hashes, side="left")
            # (wrapping past the last token to the first is uint32 arithmetic's own)
            gap = (p[np.where(k < len(p), k, 0)] - self.hashes).astype(np.int64)
            self._distances[key] = (gap << self._shift) | reducer
        return self._distances[key]

    def peak(self, counts: Sequence[int]) -> float:
        """Largest predicted share (1.0 = a fair share) of the ring with these counts."""
        nearest: np.ndarray | None = None
        for i, t in enumerate(counts):
            if t > 0:
                d = self._distance(i, t)
                nearest = d.copy() if nearest is None else np.minimum(nearest, d, out=nearest)
        if nearest is None:
            return 0.0
        loads = np.bincount(nearest & self._mask, weights=self.weights, minlength=len(counts))
        if self.fixed is not None:
            loads = loads + self.fixed
        return float(loads.max()) / self.fair if self.fair > 0 else 0.0


@dataclass(frozen=True)
class FirstRingPlan(LookaheadPlan):
    """What :func:`plan_first_ring` chose.

    Attributes:
        respace: Tokens per reducer of the first ring the rounds start from
            (:meth:`~dpa.routing.hash_ring.HashRing.respace`), or 0: they start from the current ring.
    """

    respace: int = 0


def _beam(scorer: RingScorer, counts: tuple[int, ...], method: str, rounds_left: Sequence[int],
          width: int) -> tuple[float, tuple[int, ...], tuple[int, ...]]:
    """The best ``(peak, rounds, tokens)`` a beam search over vectors of rounds finds,
    starting from no round (whose peak it starts with)."""
    start = (0,) * len(counts)
    best = (scorer.peak(counts), start, counts)
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
    return best


def plan_first_ring(ring: HashRing, method: str, loads: KeyLoads, rounds_left: Sequence[int],
                    respace: Sequence[int] = (), margin: float = 0.05, width: int = BEAM_WIDTH,
                    points: int = TAIL_POINTS) -> FirstRingPlan:
    """The first ring predicted to hold the lowest largest share of ``loads``.

    For the current ring, and for each first ring of ``respace[k]`` tokens per reducer, a
    beam search over vectors of rounds: from no round, each step adds one round to one
    reducer (while it has rounds left) and keeps the ``width`` vectors with the lowest
    predicted largest share (fewer rounds first on ties). The best ring seen wins (the
    current one first on ties, then the earlier in ``respace``), provided it beats the
    current ring by more than ``margin`` fair shares. Rings of another size are other
    draws of token positions: where a ring cannot split a hot key, the choice among more
    rings is what lowers the largest share (``python -m benchmarks.first_ring``).

    Args:
        ring: The current ring (not changed).
        method: ``"halving"`` or ``"doubling"``.
        loads: The forecast.
        rounds_left: Rounds each reducer may take (0 for inactive slots).
        respace: Other first rings to start from, in tokens per reducer.
        margin: Least predicted gain (in fair shares) worth a ring change.
        width: Vectors kept per step.
        points: Hashes that stand for the tail.

    Returns:
        The plan (``relieved`` lists each reducer once per round, in reducer order; empty
        with ``respace`` 0: keep the ring).
    """
    counts = ring.token_counts
    if loads.total <= 0:
        return FirstRingPlan((), counts, 0.0, 0.0)
    scorer = RingScorer(ring, loads, points)
    before = scorer.peak(counts)
    keep = FirstRingPlan((), counts, before, before)
    # No ring splits a key: the largest named one is a floor under every ring's peak.
    floor = float(np.max(loads.counts)) / scorer.fair if len(loads.counts) and loads.fixed is None else 0.0
    if before <= max(1.0, floor) + margin:
        return keep  # nothing to gain: spare the search
    best = (*_beam(scorer, counts, method, rounds_left, width), 0)
    for size in respace:
        other = ring.copy()
        if not other.respace(int(size)):
            continue
        found = _beam(RingScorer(other, loads, points), other.token_counts, method, rounds_left, width)
        if found[0] < best[0] - 1e-9:
            best = (*found, int(size))
    peak, rounds, tokens, base = best
    if peak >= before - margin or (not any(rounds) and not base):
        return keep
    relieved = tuple(i for i, r in enumerate(rounds) for _ in range(r))
    return FirstRingPlan(relieved, tokens, before, peak, base)
