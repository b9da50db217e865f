"""What load balancing does to a list of letters: the analyses behind the paper workloads.

:func:`lb_at_t0` drives the real :class:`dpa.routing.policies.ring.policy.DPAPlanner` as if every item were
queued at t=0; :func:`lb_drain` is a fluid model of the same planner while the reducers
work off their queues; :func:`check_lb_rule` checks a workload against the paper's
one-round result (see ``docs/experiments/dpa_workloads.md``). Used by
:mod:`workloads.paper_construct` and the tests.
"""

from __future__ import annotations

import itertools
import string
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from dpa.errors import ConfigError
from dpa.metrics import skew
from dpa.routing.policies.ring.policy import DPAPlanner
from dpa.routing.ring import DEFAULT_HALVING_TOKENS, RingSnapshot
from workloads.paper import (
    FIGURE3_ROUNDS,
    METHODS,
    NUM_REDUCERS,
    PAPER_TAU,
    initial_ring,
    no_lb_counts,
)

__all__ = [
    "check_lb_rule",
    "default_alphabet",
    "halving_rings",
    "lb_at_t0",
    "lb_drain",
    "lb_rule",
    "more_rounds_never_hurt",
    "moves_on_own_round",
    "one_round_rings",
    "single_letter",
]


def default_alphabet() -> list[str]:
    """Candidate letters in order of preference.

    Lowercase ASCII letters, then uppercase ones, then two-letter lowercase strings.
    """
    two = [a + b for a in string.ascii_lowercase for b in string.ascii_lowercase]
    return list(string.ascii_lowercase) + list(string.ascii_uppercase) + two


def lb_at_t0(
    items: Iterable[str],
    method: str,
    max_rounds: int = 1,
    *,
    num_reducers: int = NUM_REDUCERS,
    tau: float = PAPER_TAU,
) -> dict[str, Any]:
    """What the real balancer does to a workload if it acts at t=0 with every item queued.

    The queue length of each reducer is the number of items it owns under the current
    ring. A real :class:`dpa.routing.policies.ring.policy.DPAPlanner` (eq. 1, at most ``max_rounds`` rounds per
    reducer) is fed those lengths; its decisions are applied and it is asked again until
    it stops. This is the "t0" analysis of :func:`workloads.experiment.instant_lb`, for
    any list of items.

    Args:
        items: Workload items.
        method: ``"halving"`` or ``"doubling"``.
        max_rounds: Rounds each reducer may trigger.
        num_reducers: Number of reducers.
        tau: Threshold of eq. 1.

    Returns:
        ``{"loads": items per reducer under the final ring, "skew": S of those loads,
        "actions": [(reducer, action), ...], "token_counts": final tokens per reducer}``.
    """
    letters = list(items)
    ring = initial_ring(method, num_reducers)
    planner = DPAPlanner(method, tau, max_rounds, ring)
    actions: list[tuple[int, str]] = []

    def loads() -> list[int]:
        snap = planner.snapshot
        counts = [0] * num_reducers
        for letter in letters:
            counts[snap.key_lookup(letter)] += 1
        return counts

    for _ in range(4 * num_reducers * max(1, max_rounds) + 1):
        for r, q in enumerate(loads()):
            planner.observe(r, q, planner.snapshot.version)
        decisions = planner.check(0.0)
        if not decisions:
            break
        actions.extend((d.event.reducer, d.event.action) for d in decisions)
    final = loads()
    return {"loads": final, "skew": skew(final), "actions": actions,
            "token_counts": list(ring.token_counts)}


def one_round_rings(method: str, num_reducers: int = NUM_REDUCERS) -> list[RingSnapshot]:
    """Every ring reachable when each reducer triggers at most one round.

    With one round per reducer the ring only depends on *which* reducers had their round
    (halving: each of them has half its tokens; doubling: every reducer has
    ``2 ** (rounds of the others)`` tokens), not on the order.

    Returns:
        ``2 ** num_reducers`` snapshots; entry ``mask`` is the ring after one round on
        every reducer ``x`` with bit ``x`` of ``mask`` set (entry 0 is the initial ring).
    """
    out = []
    for mask in range(1 << num_reducers):
        ring = initial_ring(method, num_reducers)
        for x in range(num_reducers):
            if mask >> x & 1:
                ring.redistribute(x, method)
        out.append(ring.snapshot())
    return out


def halving_rings(
    num_reducers: int = NUM_REDUCERS, max_rounds: int = FIGURE3_ROUNDS
) -> dict[tuple[int, ...], RingSnapshot]:
    """Every halving ring reachable with up to ``max_rounds`` rounds per reducer.

    Keyed by the tokens of each reducer (``16 >> rounds``, at least 1); the ring does
    not depend on the order of the rounds.
    """
    levels = sorted({max(1, DEFAULT_HALVING_TOKENS >> k) for k in range(max_rounds + 1)})
    return {
        counts: RingSnapshot.build(counts)
        for counts in itertools.product(levels[::-1], repeat=num_reducers)
    }


def more_rounds_never_hurt(
    items: Sequence[str],
    method: str = "halving",
    *,
    max_rounds: int = FIGURE3_ROUNDS,
    num_reducers: int = NUM_REDUCERS,
    tau: float = PAPER_TAU,
) -> list[str]:
    """Checks that S at t0 (:func:`lb_at_t0`) does not rise from 1 to ``max_rounds`` rounds.

    The paper's Experiment 2 (Figure 3): "the additional rounds never hurt the halving
    method". Returns the violations found (empty if none).
    """
    skews = [
        lb_at_t0(items, method, r, num_reducers=num_reducers, tau=tau)["skew"]
        for r in range(1, max_rounds + 1)
    ]
    return [
        f"{method}: S at t0 rises from {a:.3f} ({r} rounds) to {b:.3f} ({r + 1} rounds)"
        for r, (a, b) in enumerate(zip(skews, skews[1:]), start=1)
        if b > a + 1e-9
    ]


def _drain(
    amounts: Sequence[int],
    owners: Callable[[int], Sequence[int]],
    num_reducers: int,
    tau: float,
) -> tuple[list[float], list[int]]:
    """Fluid model of one round per reducer while the reducers work off their queues.

    ``amounts[k]`` items of key ``k`` are queued at t=0 on their owner; ``owners(mask)``
    gives the owner of every key in the ring after one round on each reducer of
    ``mask``. Every non-empty reducer processes one item per time unit, taken
    proportionally from the keys in its queue. The planner rule (eq. 1 on the queue
    lengths, lowest id on ties, at most one round per reducer, nothing while the
    straggler has used its round) is checked continuously, and a round re-routes every
    queued item to its key's new owner. Since all non-empty queues shrink at the same
    rate, it is solved event by event: a queue empties, or the longest queue reaches
    ``1 + tau`` times the second.

    Returns:
        Items processed by each reducer, and the reducers relieved in order.
    """
    eps = 1e-9
    every = range(num_reducers)
    mask = 0
    owner = owners(0)
    queues = [[0.0] * len(amounts) for _ in every]
    for key, amount in enumerate(amounts):
        queues[owner[key]][key] += amount
    processed = [0.0] * num_reducers
    rounds: list[int] = []
    for _ in range(8 * num_reducers + 8):  # at most 3 events per reducer
        q = [sum(row) for row in queues]
        busy = [i for i in every if q[i] > eps]
        if not busy:
            break
        x = max(every, key=lambda i: (q[i], -i))
        second = max(q[i] for i in every if i != x)
        can = not mask >> x & 1
        if not (can and q[x] > second * (1.0 + tau) + eps):
            dt = min(q[i] for i in busy)
            trigger = can and second > eps and ((1.0 + tau) * second - q[x]) / tau < dt
            if trigger:
                dt = ((1.0 + tau) * second - q[x]) / tau
            for i in busy:
                step = min(dt, q[i])
                processed[i] += step
                keep = (q[i] - step) / q[i]
                queues[i] = [a * keep for a in queues[i]]
            if not trigger:
                continue
        mask |= 1 << x
        rounds.append(x)
        owner = owners(mask)
        moved = [[0.0] * len(amounts) for _ in every]
        for row in queues:
            for key, amount in enumerate(row):
                if amount:
                    moved[owner[key]][key] += amount
        queues = moved
    return processed, rounds


def lb_drain(
    items: Iterable[str],
    method: str,
    *,
    num_reducers: int = NUM_REDUCERS,
    tau: float = PAPER_TAU,
) -> dict[str, Any]:
    """The balancer with one round per reducer while equal-speed reducers drain their queues.

    Complements :func:`lb_at_t0`: every item is queued at t=0, then every reducer
    processes one item per time unit and the planner rule is checked continuously, so
    rounds triggered later, as the queues run down (when the longest remaining queue
    exceeds ``1 + tau`` times the second), are taken into account. A fluid model (see
    :func:`_drain`): it does not depend on any runtime's timing.

    Returns:
        ``{"processed": items processed per reducer (fractional), "skew": S of those,
        "rounds": reducers relieved in order}``.
    """
    counts = Counter(items)
    keys = sorted(counts)
    rings = one_round_rings(method, num_reducers)
    table = [[snap.key_lookup(k) for k in keys] for snap in rings]
    processed, rounds = _drain([counts[k] for k in keys], table.__getitem__, num_reducers, tau)
    return {"processed": processed, "skew": _fluid_skew(processed), "rounds": rounds}


def _fluid_skew(processed: Sequence[float]) -> float:
    """:func:`dpa.metrics.skew` for fractional counts (``W`` rounded to 1e-6)."""
    m = round(sum(processed))
    r = len(processed)
    u = -(-m // r)
    if r <= 1 or m - u <= 0:
        return 0.0
    return (round(max(processed), 6) - u) / (m - u)


def lb_rule(no_lb: float, with_lb: float) -> str:
    """How the construction treats one (workload, method) row of Table 1.

    Returns:
        ``"improves"`` if the paper's S with one round of LB is lower than without,
        ``"stable"`` if it is equal, ``"neutral"`` if it is higher (the paper attributes
        those increases to premature rounds, i.e. timing, not to the letters).
    """
    if with_lb < no_lb - 1e-9:
        return "improves"
    if with_lb > no_lb + 1e-9:
        return "neutral"
    return "stable"


def check_lb_rule(
    items: Sequence[str],
    method: str,
    with_lb: float,
    no_lb: float,
    *,
    num_reducers: int = NUM_REDUCERS,
    tau: float = PAPER_TAU,
) -> list[str]:
    """Checks a workload against the LB constraint of its Table 1 row (see module docs).

    * ``"improves"``: the planner acting at t=0 (:func:`lb_at_t0`, one round per
      reducer) reaches ``S <= with_lb``, and so does the drain model
      (:func:`lb_drain`, which adds the rounds triggered as the queues run down).
    * ``"stable"``: S at t=0 equals the no-LB S, no ring of :func:`one_round_rings`
      gives a reducer more items than the no-LB maximum (whatever rounds happen, S
      cannot rise) and the drain model's S is not above the no-LB S.
    * ``"neutral"``: S at t=0 equals the no-LB S.

    Returns:
        The violations found (empty if the workload satisfies the rule).
    """
    rule = lb_rule(no_lb, with_lb)
    base = no_lb_counts(items, method, num_reducers)
    s_base = skew(base)
    s_t0 = lb_at_t0(items, method, 1, num_reducers=num_reducers, tau=tau)["skew"]
    problems = []
    if rule == "improves":
        if s_t0 > with_lb + 1e-9:
            problems.append(f"{method}: S at t0 {s_t0:.3f} > {with_lb}")
        s_drain = lb_drain(items, method, num_reducers=num_reducers, tau=tau)["skew"]
        if s_drain > with_lb + 1e-9:
            problems.append(f"{method}: S of the drain model {s_drain:.3f} > {with_lb}")
        return problems
    if abs(s_t0 - s_base) > 1e-9:
        problems.append(f"{method}: S at t0 {s_t0:.3f} != no-LB S {s_base:.3f}")
    if rule == "stable":
        for mask, snap in enumerate(one_round_rings(method, num_reducers)):
            loads = [0] * num_reducers
            for x in items:
                loads[snap.key_lookup(x)] += 1
            if max(loads) > max(base):
                problems.append(f"{method}: rounds on mask {mask:b} give {loads} (no LB {base})")
        s_drain = lb_drain(items, method, num_reducers=num_reducers, tau=tau)["skew"]
        if s_drain > s_base + 1e-9:
            problems.append(f"{method}: S of the drain model {s_drain:.3f} > no-LB S {s_base:.3f}")
    return problems


def moves_on_own_round(letter: str, method: str, num_reducers: int = NUM_REDUCERS) -> bool:
    """Whether one round of ``method`` on the initial owner of ``letter`` moves it away."""
    ring = initial_ring(method, num_reducers)
    owner = ring.key_lookup(letter)
    ring.redistribute(owner, method)
    return ring.key_lookup(letter) != owner


def single_letter(
    moving: Iterable[str],
    *,
    num_reducers: int = NUM_REDUCERS,
    alphabet: Sequence[str] | None = None,
) -> str:
    """WL3's letter: the first one that LB moves exactly under the ``moving`` methods.

    Under each method of ``moving`` one round on the letter's owner must move it to
    another reducer; under the other methods it must stay on its owner in every ring of
    :func:`one_round_rings` (whatever rounds happen, it does not move).

    Raises:
        ConfigError: If no letter of the alphabet qualifies.
    """
    want = set(moving)
    for method in want:
        if method not in METHODS:
            raise ConfigError(f"unknown method {method!r}; use one of {METHODS}")
    rings = {m: one_round_rings(m, num_reducers) for m in METHODS if m not in want}
    for letter in default_alphabet() if alphabet is None else alphabet:
        if all(moves_on_own_round(letter, m, num_reducers) for m in want) and all(
            len({s.key_lookup(letter) for s in snaps}) == 1 for snaps in rings.values()
        ):
            return letter
    raise ConfigError(f"no letter moves on its owner's round exactly under {sorted(want)}")
