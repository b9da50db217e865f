"""What token doubling can reach at best on a known key distribution: the bound
(:func:`doubling_bound`) and ``doubling`` started on that ring, never rebalancing
(:func:`fixed_ring_policy`): the oracles the straggler benchmark compares the policy with."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from dpa.keys.columns import hash_key_columns
from dpa.routing.hash_ring import HashRing
from dpa.routing.policies.ring.forecast import RingScorer, first_ring_sizes, round_tokens
from dpa.routing.policies.ring.lookahead import KeyLoads
from dpa.routing.policies.ring.policy import DPAPolicy, RingSettings


class Bound(NamedTuple):
    """A ring :func:`doubling_bound` found: its largest share (in fair shares), the rounds
    per reducer, the tokens per reducer, and the first ring's tokens per reducer."""

    share: float
    rounds: tuple[int, ...]
    tokens: tuple[int, ...]
    first_tokens: int


def doubling_bound(table: pa.Table, num_reducers: int = 8, rounds: int = 1, initial_tokens: int | None = None,
                   token_spacing: str | None = None) -> Bound:
    """The lowest largest share (in fair shares) of any ring token doubling can reach.

    Doubling rounds commute (each doubles every reducer's tokens but one), so a ring is
    fixed by its first ring and how often each reducer was relieved: every combination of
    up to ``rounds`` per reducer (rings past :data:`~dpa.routing.ring.MAX_RING_TOKENS` excluded, as
    the planner refuses them), from each first ring the planner may start from, is scored
    with the table's exact key counts (:class:`~dpa.routing.policies.ring.forecast.RingScorer`,
    no tail). The ``doubling`` makespan cannot beat this times the ideal.

    Args:
        table: Records with an integer ``key`` column.
        num_reducers: Reducers of the ring.
        rounds: Most rounds per reducer.
        initial_tokens: Tokens per reducer of the only first ring to start from; None = the
            policy's default and the other sizes its planner may choose on a forecast
            (:func:`~dpa.routing.policies.ring.forecast.first_ring_sizes`).
        token_spacing: ``"even"`` or ``"hashed"`` first tokens; None = the policy's default.

    Returns:
        The best ring.
    """
    counts = table.group_by("key").aggregate([([], "count_all")])
    loads = KeyLoads(hash_key_columns(counts, ["key"]), counts["count_all"].to_numpy().astype(np.float64), 0.0)
    settings = RingSettings(method="doubling")
    even = (settings.token_spacing if token_spacing is None else token_spacing) == "even"
    sizes = ((settings.initial_tokens, *first_ring_sizes("doubling", settings.initial_tokens))
             if initial_tokens is None else (initial_tokens,))
    best = Bound(float("inf"), (), (), 0)
    for base in sizes:
        first = [base] * num_reducers
        scorer = RingScorer(HashRing(first, base if even else 0), loads, points=0)
        for relieved in itertools.product(range(rounds + 1), repeat=num_reducers):
            tokens = round_tokens(first, "doubling", relieved)
            if tokens is not None:  # (None: past the ring's bound, which the planner refuses too)
                share = scorer.peak(tokens)
                if share < best.share:
                    best = Bound(share, relieved, tokens, base)
    return best


def fixed_ring_factory(tokens: tuple[int, ...], first_tokens: int | None = None) -> Any:
    """A policy factory (for :func:`dpa.register_policy`): ``doubling`` started on a given
    ring that never rebalances.

    The first ring has ``tokens[i]`` tokens for reducer ``i`` at doubling's positions
    from a first ring of ``first_tokens`` per reducer (None = the policy's default; its
    tokens evenly spaced as the policy's are), as if the rounds of :func:`doubling_bound`
    had been taken before the first record: an oracle that knew every key's count in
    advance. Its makespan is what doubling's best ring costs at run time with no
    forwarding and no waiting for a rebalance.
    """

    @dataclasses.dataclass(frozen=True)
    class FixedRing(DPAPolicy):  # defined here, so Ray ships it by value to the actors
        first_tokens: tuple[int, ...] = ()

        def ring(self, num_reducers: int, active: int | None = None) -> HashRing:
            s = self.settings
            return HashRing(list(self.first_tokens), s.initial_tokens if s.token_spacing == "even" else 0)

    def factory(settings: Any, shape: Any) -> Any:
        options: dict[str, Any] = {} if first_tokens is None else {"initial_tokens": int(first_tokens)}
        ring = RingSettings(method="doubling", max_rounds=0, **options)
        return FixedRing(ring, shape, first_tokens=tuple(int(t) for t in tokens))

    return factory
