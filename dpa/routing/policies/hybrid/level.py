"""Levelling the ring on the records each reducer holds: ``hybrid``'s straggler signal for
a tail without hot keys.

The ring's rule, ``Q_max > Q_second (1 + tau)``, compares the two longest queues. Queues
bounded in time are all about as full while the mappers still hold input, and with many
reducers the two largest are close even when the reducers' shares of the keys differ by
tens of percent (about 100 keys per reducer: the busiest of 64 gets some 1.2 times the
mean), so it does not fire. What each reducer holds (records processed, being processed
or queued there, :meth:`~dpa.routing.policy.Planner.observe_held`) against the mean of
all the records known shows the unevenness whatever the queues' bound
(:meth:`~dpa.routing.policies.hybrid.planner.HybridPlanner.final_loads` turns them into
what each reducer is predicted to end with).

The model. Each active reducer ``i`` is predicted to end with ``final[i]`` records;
``movable[i]`` of them are queued records of its tail keys. A ring change that takes a
fraction of ``i``'s hash space takes that fraction of its movable records with it:
records are assumed spread evenly over ``i``'s own hash space (the keys' reports are too
coarse at width to place each key: the planner's sketch holds a few thousand keys), which
is what the arcs' shares of the hash space cannot tell, since every reducer starts with
the same share.

The move: *trimming* reducer ``x`` to ``t - k`` tokens removes its ``k`` highest token
indices (:meth:`~dpa.routing.hash_ring.HashRing.set_tokens`); each removed token's arc
goes to the next token clockwise, so only ``x``'s keys move, to a few other reducers, in
steps of about ``1 / t`` of its share (a halving moves half of them at once). Reducers
forward the queued records of the keys they no longer own, so the move lowers ``x``'s
remaining work at once. :func:`plan_trims` trims the most loaded reducers, each by the
``k`` that lowers the largest of it and its recipients most, or keeps the ring when
that is predicted to gain too little. Everything here is pure logic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpa.routing.hash_ring import HashRing

__all__ = ["TrimPlan", "plan_trims"]

_SPACE = float(1 << 32)


@dataclass(frozen=True)
class TrimPlan:
    """What :func:`plan_trims` chose.

    Attributes:
        trimmed: ``(reducer, tokens after)`` per trim, in order (empty: keep the ring).
        token_counts: Tokens per reducer after the trims.
        before: Predicted largest final load over the mean, on the current ring.
        after: The same after the trims.
    """

    trimmed: tuple[tuple[int, int], ...]
    token_counts: tuple[int, ...]
    before: float
    after: float


class _Ring:
    """A ring's tokens in clockwise order, with the arc each live token owns (plain lists:
    a trim looks at a few tokens, where numpy's per-call cost would be most of the work)."""

    def __init__(self, ring: HashRing) -> None:
        counts = ring.token_counts
        held = [(i, t) for i, t in enumerate(counts) if t > 0]
        pos = np.concatenate([ring.token_positions(i, t) for i, t in held])
        owner = np.concatenate([np.full(t, i, dtype=np.int64) for i, t in held])
        index = np.concatenate([np.arange(t, dtype=np.int64) for _, t in held])
        order = np.lexsort((index, owner, pos))  # the order of RingSnapshot.build
        p = pos[order].astype(np.float64)
        self.owner: list[int] = owner[order].tolist()
        self.index: list[int] = index[order].tolist()
        # the arc from the previous token (exclusive) to each token (inclusive), wrapping
        self.arc: list[float] = (np.diff(p, prepend=p[-1] - _SPACE) / _SPACE).tolist()
        self.alive = [True] * len(self.owner)
        self.counts = list(counts)
        self.slot: dict[tuple[int, int], int] = {(o, j): s for s, (o, j) in enumerate(zip(self.owner, self.index))}

    def span(self, reducer: int) -> float:
        """Hash space (a fraction of the ring) ``reducer`` owns."""
        return sum(self.arc[self.slot[reducer, j]] for j in range(self.counts[reducer]))

    def removal(self, reducer: int, tokens: int) -> list[tuple[int, int]]:
        """What trimming ``reducer`` to ``tokens`` tokens does: per removed token, its slot
        and the slot its arc goes to (the next live token clockwise that stays)."""
        n, out = len(self.owner), []
        for j in range(tokens, self.counts[reducer]):
            g = self.slot[reducer, j]
            s = (g + 1) % n
            while not self.alive[s] or (self.owner[s] == reducer and self.index[s] >= tokens):
                s = (s + 1) % n
            out.append((g, s))
        return out

    def trim(self, reducer: int, tokens: int) -> None:
        """Trims ``reducer`` to ``tokens`` tokens (the removed arcs join their successors)."""
        for g, s in self.removal(reducer, tokens):
            self.arc[s] += self.arc[g]
            self.arc[g] = 0.0
            self.alive[g] = False
        self.counts[reducer] = tokens

    def best_trim(self, x: int, final: np.ndarray, density: float) -> tuple[float, int, dict[int, float]] | None:
        """The trim of ``x`` with the lowest predicted maximum over it and its recipients
        (the fewest tokens on ties), if that is below ``final[x]``: ``(peak, tokens after,
        records gained per recipient)``."""
        t, choice = self.counts[x], None
        for k in range(1, t):
            gained: dict[int, float] = {}
            for g, s in self.removal(x, t - k):
                o = self.owner[s]
                if o != x:  # (an arc that joins one of x's own tokens stays with x)
                    gained[o] = gained.get(o, 0.0) + self.arc[g] * density
            if not gained:
                continue
            peak = max(float(final[x]) - sum(gained.values()), max(float(final[o]) + v for o, v in gained.items()))
            if peak < final[x] - 1e-9 and (choice is None or peak < choice[0] - 1e-9):
                choice = (peak, t - k, gained)
        return choice


def plan_trims(ring: HashRing, final: np.ndarray, movable: np.ndarray, trims_left: Sequence[int],
               mean: float, slack: float, margin: float) -> TrimPlan:
    """The trims that level the reducers' predicted final loads (see the module docstring).

    Forward run: the reducers above ``mean + slack`` are taken most loaded first; the
    first that a trim helps (:meth:`_Ring.best_trim`: the lowest predicted maximum over
    it and the reducers its arcs go to, below its own load) is trimmed, and the run
    starts again from the most loaded. A reducer whose arcs would all go to reducers
    about as loaded waits for them: trimming them may free it. Each reducer is trimmed
    once per run at most. No step raises the largest load, so the whole run is kept,
    provided it lowers the records above ``mean + slack`` by more than ``margin``.

    Args:
        ring: The current ring (not changed).
        final: Records each reducer is predicted to end with on this ring (0 for
            inactive slots, which take no part: give them no trims).
        movable: Of those, the records that move with the reducer's hash space.
        trims_left: Trims each reducer may still get (0 for inactive slots).
        mean: The mean final load of the active reducers (> 0).
        slack: Reducers at or below ``mean + slack`` records are not trimmed.
        margin: Least predicted gain (records above ``mean + slack``) worth a ring change.

    Returns:
        The plan; ``trimmed`` is empty when the current ring is kept.
    """
    final = np.asarray(final, dtype=np.float64).copy()
    movable = np.minimum(np.asarray(movable, dtype=np.float64), final).copy()
    budget = [min(1, int(x)) for x in trims_left]
    active = sum(1 for t in ring.token_counts if t > 0)
    before = float(final.max() / mean) if mean > 0 else 0.0
    keep = TrimPlan((), ring.token_counts, before, before)
    if mean <= 0 or active < 2:
        return keep
    bound = mean + slack
    excess_before = float(np.maximum(final - bound, 0.0).sum())
    work = _Ring(ring)
    steps: list[tuple[int, int]] = []
    while True:
        above = np.flatnonzero(final > bound)
        for x in above[np.argsort(-final[above], kind="stable")].tolist():
            if budget[x] <= 0 or work.counts[x] <= 1 or movable[x] <= 0:
                continue
            choice = work.best_trim(x, final, movable[x] / work.span(x))
            if choice is not None:
                break
        else:
            break
        _, tokens, gained = choice
        work.trim(x, tokens)
        budget[x] -= 1
        for o, v in gained.items():
            final[o] += v
            movable[o] += v
            final[x] -= v
            movable[x] -= v
        steps.append((x, tokens))
    gain = excess_before - float(np.maximum(final - bound, 0.0).sum())
    if not steps or gain <= margin:
        return keep
    return TrimPlan(tuple(steps), tuple(work.counts), before, float(final.max() / mean))
