"""The DPA ring policies ``halving`` and ``doubling`` (paper section 4), and their settings.

:class:`RingSettings` holds the ring's options once; ``hybrid``'s settings
(:mod:`dpa.routing.policies.hybrid`) extend it. ``JobConfig.tau``, ``max_rounds`` and
``initial_tokens`` are shortcuts that feed these settings when the policy is given by name.
:func:`build_ring_policy` builds a :class:`DPAPolicy` from the settings and the job's
shape; :class:`RingPolicy`, the part it shares with ``hybrid``, resolves the defaults
that depend on the job (``min_gap``, ``min_gap_s``, the elastic shape) and deals the
first ring.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpa.errors import ConfigError
from dpa.routing.hash_ring import HashRing
from dpa.routing.policies.common import BuiltPolicy, SnapshotRouter, check_int_option
from dpa.routing.policies.ring.forecast import (
    FORECAST_ROUNDS,
    FirstRingPlan,
    first_ring_sizes,
    forecast_loads,
    plan_first_ring,
)
from dpa.routing.policies.ring.lookahead import KeyLoads, arc_shares, plan_rounds
from dpa.routing.policy import (
    Decision,
    JobShape,
    Planner,
    PolicySettings,
    RebalanceEvent,
    Snapshot,
)
from dpa.routing.ring import RingSnapshot, is_power_of_two
from dpa.routing.sketches import SpaceSaving

__all__ = ["DPAPlanner", "DPAPolicy", "RingPolicy", "RingRouter", "RingSettings", "build_ring_policy"]

logger = logging.getLogger(__name__)

METHODS = ("halving", "doubling")
#: What the straggler rule compares: seconds of work, or records (the paper).
BALANCE_ON = ("work", "records")
#: Where the first ring's tokens sit (:attr:`RingSettings.token_spacing`).
SPACINGS = ("even", "hashed")
#: The default ``min_gap_s`` in reducer steps (``JobShape.step_time_s``).
MIN_GAP_STEPS = 2
#: Keys the lookahead names one by one hold at least this fraction of a fair share
#: (``1 / R`` of the records); the rest is a uniform tail (:class:`KeyLoads`).
NAMED_KEY_SHARE = 1 / 16
#: Counters of the lookahead's SpaceSaving sketch of the reported keys.
LOOKAHEAD_CAPACITY = 4096
#: The lookahead looks again after a refusal once the records counted grew by this factor.
LOOKAHEAD_REGROW = 1.25


RingRouter = SnapshotRouter
"""Routes by the consistent-hash ring snapshot (vectorised ``searchsorted``)."""


class DPAPlanner(Planner):
    """The DPA load balancer's rule (paper section 4).

    When ``Q_max > Q_second * (1 + tau)`` the reducer with the longest queue is relieved by
    token halving or doubling, at most ``max_rounds`` times per reducer.

    Choices the paper leaves open (documented here, tested in ``tests/unit``):

    * Ties for the longest queue go to the lowest reducer id.
    * Decisions need fresh information: after a rebalance to version ``v`` the rule is
      not evaluated again until every reducer has reported a queue length under version
      ``>= v`` (reducers report as soon as they adopt a new ring, after eagerly forwarding
      the queued records they no longer own). Without this, the stale long queue of the
      reducer just relieved would trigger further rounds before forwarding had happened.
    * Reducers that have not reported yet count as queue length 0.
    * Halving a reducer that has one token left, or doubling past the ring's bound
      (:data:`~dpa.routing.ring.MAX_RING_TOKENS`), changes nothing: the event log records
      ``"exhausted"`` once and the reducer's rounds are used up.
    * ``patience`` (default 1, the paper's rule) asks the predicate to name the same
      reducer on that many consecutive checks before acting. Queue lengths are
      instantaneous and arrive in whole batches, so with large batches and cheap records a
      reducer that just received a batch looks like a straggler for a moment even when keys
      are uniform; a patience of a few checks filters out such bursts.
    * What is compared (``balance_on``): ``"work"`` (the default) compares the backlogs in
      estimated seconds of work that reducers report with their queue lengths (queued
      rows times each reducer's measured cost per row; a reducer that has not measured
      yet is valued at the mean rate of those that have), so an expensive reducer's short
      queue counts for what it costs; until some reducer has reported work the records
      rule applies. ``"records"`` compares queue lengths in records, the paper's rule.
    * ``min_gap_s`` (seconds, with ``"work"``): the largest backlog must also exceed the
      second by more than this; :class:`RingSettings` defaults it to
      :data:`MIN_GAP_STEPS` reducer steps (``JobConfig.step_time_s``), the granularity at
      which backlogs move. Cheap jobs, whose whole queues are worth milliseconds, are
      left alone: moving their keys cannot pay off.
    * ``min_gap`` (records, with ``"records"``): the longest queue must also exceed the second by more than
      this. Mappers push whole input blocks, so queue lengths move in steps of about a
      block's share per reducer (``batch_size / R`` records); a difference smaller than
      one such step per mapper (all ``M`` mappers may have pushed into one queue while the
      others drained theirs) is the noise of arrivals, not a straggler. :class:`RingSettings`
      defaults it to ``M * batch_size // R`` (:attr:`~dpa.routing.policy.JobShape.block_share`);
      ``min_gap=0`` is the paper's rule exactly (the Table 1 reproduction uses it).
    * ``lookahead`` (off here, on by default in :class:`RingSettings`): once the rule
      names a straggler, the rounds to apply are chosen on the reducers' key reports
      (:mod:`dpa.routing.policies.ring.lookahead`): the rule is run forward on the predicted
      loads of the records still to come and the best prefix of rounds is published at
      once, or nothing when no prefix is predicted to lower the largest share by 5% of a
      fair share (a refusal uses no round; the rule looks again once a quarter more
      records were counted). Until some keys were reported, the paper's single round.
    * The first ring, with ``lookahead``: the first mapper forecast (the key counts of a
      mapper's first block, before any record is routed) is planned on at once
      (:func:`~dpa.routing.policies.ring.forecast.plan_first_ring`): up to
      :data:`~dpa.routing.policies.ring.forecast.FORECAST_ROUNDS` rounds per reducer, chosen
      together, go out as the ring the first push is routed under, or nothing when the
      forecast predicts no gain of 5% of a fair share. The rounds may start from a first
      ring of another number of tokens per reducer
      (:func:`~dpa.routing.policies.ring.forecast.first_ring_sizes`; event ``"first_ring"``,
      reducer -1): another draw of token positions, where a ring cannot split a hot key.
      These rounds come before the job runs and do not count against ``max_rounds``;
      later forecasts are not planned on (records may be on their way by then). Until
      the reducers have reported as many records as the forecast counted, the lookahead
      predicts on the forecast (:meth:`key_loads`).

    Elastic rings (:attr:`active`): only reducer slots that own tokens take part. The
    fresh-report gate, the loads compared and the straggler rule consider active slots
    only (an inactive one never reports; its stale figures are ignored), the lookahead
    gives no round to an inactive slot, and reducer ids in events stay slot ids.
    :meth:`scale_out` and :meth:`scale_in` change which slots are active:

    * ``scale_out(slot)`` gives the slot :meth:`scale_out_tokens` tokens, the lower
      median of the active reducers' token counts (for halving rounded down to a power
      of two), at least 1: the newcomer owns about a typical reducer's arc of the ring,
      ``1 / (A + 1)`` of the hash space on a ring nobody has rebalanced yet, and neither
      a straggler's halved count nor doubling's skipped reducer pulls it off that. Its
      tokens sit at their own positions, so only keys that move *to* it change owner.
      Its rounds start at 0.
    * ``scale_in(slot)`` sets the slot's tokens to 0: its keys go to its ring
      successors, no other key moves.

    Either publishes a new snapshot; the rule then waits, as after a rebalance, until
    every active reducer (the new one included) has reported under it.
    """

    def __init__(self, method: str, tau: float, max_rounds: int, ring: HashRing, patience: int = 1,
                 min_gap: int = 0, balance_on: str = "records", min_gap_s: float = 0.0,
                 lookahead: bool = False) -> None:
        self.method = method
        self.tau = float(tau)
        self.max_rounds = int(max_rounds)
        self.ring = ring
        self.rounds = [0] * ring.num_reducers
        self.queue_lengths = [0] * ring.num_reducers
        self.report_versions = [0] * ring.num_reducers
        self._snapshot = ring.snapshot()
        self.patience = int(patience)
        self.min_gap = int(min_gap)
        self.balance_on = balance_on
        self.min_gap_s = float(min_gap_s)
        self.backlogs: list[float | None] = [None] * ring.num_reducers
        self._candidate: int | None = None
        self._streak = 0
        self.lookahead = bool(lookahead)
        self.sketch = SpaceSaving(LOOKAHEAD_CAPACITY)
        self._refused_at = 0.0  # records counted when the lookahead last kept the ring
        self._forecast_seen = False
        self._first_ring: FirstRingPlan | None = None  # planned on the first forecast, not published yet
        self._forecast_loads: KeyLoads | None = None  # the first forecast, every key named
        self._active = np.array([t > 0 for t in ring.token_counts], dtype=bool)

    @property
    def snapshot(self) -> RingSnapshot:
        return self._snapshot

    @property
    def active(self) -> np.ndarray:
        """Which reducer slots own tokens (a copy): ``bool``, one per slot."""
        return self._active.copy()

    @property
    def num_active(self) -> int:
        """Number of active reducer slots."""
        return int(self._active.sum())

    def resume(self, snapshot: Any) -> bool:
        """Continues from a ring it published: its tokens, version and active slots (those
        with tokens). The rounds each reducer used are not in a snapshot: ``max_rounds``
        counts afresh from here."""
        if not isinstance(snapshot, RingSnapshot) or snapshot.num_reducers != self.ring.num_reducers:
            return False
        self.ring.restore(snapshot)
        self._snapshot = self.ring.snapshot()
        self._active = np.array([t > 0 for t in snapshot.token_counts], dtype=bool)
        return True

    def observe_keys(self, reducer: int, hashes: np.ndarray, counts: np.ndarray, total: int) -> None:
        if self.lookahead:
            self.sketch.update(hashes, counts, total=int(total))

    def observe_forecast(self, mapper: int, hashes: np.ndarray, counts: np.ndarray, total: int) -> None:
        """Plans the first ring on the first forecast (see the class docstring); :meth:`check`
        publishes it."""
        if not self.lookahead or self.max_rounds == 0 or self._forecast_seen:
            return
        self._forecast_seen = True
        left = [FORECAST_ROUNDS if a else 0 for a in self._active.tolist()]
        loads = self._forecast_loads = forecast_loads(hashes, counts, total)
        plan = plan_first_ring(self.ring, self.method, loads, left, self._first_sizes())
        if plan.relieved or plan.respace:
            self._first_ring = plan
        else:
            logger.debug("forecast keeps the first ring: predicted largest share %.2f", plan.before)

    def _first_sizes(self) -> tuple[int, ...]:
        """Other first rings :meth:`observe_forecast` may choose, in tokens per reducer."""
        counts = {t for t in self.ring.token_counts if t > 0}
        return first_ring_sizes(self.method, counts.pop()) if len(counts) == 1 else ()

    def key_loads(self) -> KeyLoads:
        """The lookahead's estimate: keys of at least :data:`NAMED_KEY_SHARE` of a fair
        share by name (SpaceSaving counts), every other record as a uniform tail; or,
        while the reducers have reported fewer records than it counted, the first
        forecast's (every key it counted named), on which the first ring was planned: a
        sketch of a few early reports would judge that ring on a coarser view."""
        forecast = self._forecast_loads
        if forecast is not None and self.sketch.n < forecast.total:
            return forecast
        return self._named(*self.sketch.top(), float(self.sketch.n))

    def _named(self, hashes: np.ndarray, counts: np.ndarray, n: float) -> KeyLoads:
        """Keys of at least :data:`NAMED_KEY_SHARE` of a fair share of ``n`` records by
        name, the rest of the ``n`` as a uniform tail."""
        c = np.asarray(counts, dtype=np.float64)
        named = c >= n * NAMED_KEY_SHARE / self.num_active
        return KeyLoads(np.asarray(hashes, dtype=np.uint32)[named], c[named], max(0.0, n - float(c[named].sum())))

    def observe(self, reducer: int, queue_length: int, version: int) -> None:
        if version >= self.report_versions[reducer]:
            self.report_versions[reducer] = version
            self.queue_lengths[reducer] = int(queue_length)

    def observe_work(self, reducer: int, backlog_s: float, version: int) -> None:
        if version >= self.report_versions[reducer]:
            self.backlogs[reducer] = float(backlog_s)

    def loads(self) -> tuple[list[float], float]:
        """What the rule compares, per reducer, and the gap it needs beyond ``tau``.

        With ``balance_on="work"`` and some backlog reported: seconds of work (a reducer
        without an estimate valued at the mean seconds per record of the others) and
        ``min_gap_s``; otherwise queue lengths in records and ``min_gap``. Only active
        slots count: an inactive one is 0 and takes no part in the mean rate.
        """
        active = self._active.tolist()
        known = [(b, q) for b, q, a in zip(self.backlogs, self.queue_lengths, active) if a and b is not None]
        if self.balance_on != "work" or not known:
            return [float(q) if a else 0.0 for q, a in zip(self.queue_lengths, active)], float(self.min_gap)
        rated = [b / q for b, q in known if q > 0]
        rate = sum(rated) / len(rated) if rated else 0.0
        work = [(q * rate if b is None else b) if a else 0.0
                for b, q, a in zip(self.backlogs, self.queue_lengths, active)]
        return work, self.min_gap_s

    @staticmethod
    def straggler(queue_lengths: list[float], tau: float, min_gap: float = 0) -> int | None:
        """The reducer satisfying ``Q_max > Q_s (1 + tau)`` (paper eq. 1) and
        ``Q_max - Q_s > min_gap``, or None (``Q`` in records or in seconds of work)."""
        if len(queue_lengths) < 2:
            return None
        x = int(np.argmax(queue_lengths))
        q_max = queue_lengths[x]
        q_s = max(q for i, q in enumerate(queue_lengths) if i != x)
        return x if q_max > q_s * (1.0 + tau) and q_max - q_s > min_gap else None

    def _rule_inputs(self) -> tuple[list[float], float, float]:
        loads, gap = self.loads()
        return loads, self.tau, gap

    def _straggler(self, loads: list[float], tau: float, gap: float) -> int | None:
        """:meth:`straggler` among the active slots (a slot id, or None)."""
        if self._active.all():
            return self.straggler(loads, tau, gap)
        slots = np.flatnonzero(self._active).tolist()
        x = self.straggler([loads[i] for i in slots], tau, gap)
        return None if x is None else slots[x]

    def _fresh(self) -> bool:
        """Whether every active reducer has reported under the newest version."""
        version = self._snapshot.version
        return all(v >= version for v, a in zip(self.report_versions, self._active.tolist()) if a)

    def _ring_changed(self) -> Any:
        """The snapshot to publish after the ring changed (subclasses wrap the ring)."""
        return self.ring.snapshot()

    def check(self, now: float) -> list[Decision]:
        if self._first_ring is not None:
            plan, self._first_ring = self._first_ring, None
            logger.info("forecast: first ring's largest predicted share %.2f -> %.2f", plan.before, plan.after)
            return self._relieve(plan.relieved, now, counted=False, respace=plan.respace)
        if not self._fresh():
            return []
        x = self._straggler(*self._rule_inputs())
        self._streak = self._streak + 1 if x is not None and x == self._candidate else int(x is not None)
        self._candidate = x
        if x is None or self.rounds[x] >= self.max_rounds or self._streak < self.patience:
            return []
        self._streak = 0
        if self.lookahead and self.sketch.n:
            return self._look_ahead(x, now)
        if not self.ring.copy().redistribute(x, self.method):
            self.rounds[x] = self.max_rounds
            event = RebalanceEvent(now, x, "exhausted", tuple(self.queue_lengths), self.ring.token_counts,
                                   self._snapshot.version)
            logger.info("%s exhausted for reducer %d", self.method, x)
            return [Decision(None, event)]
        return self._relieve((x,), now)

    def _look_ahead(self, x: int, now: float) -> list[Decision]:
        """Rounds chosen on predicted key loads (see the class docstring)."""
        n = float(self.sketch.n)
        if self._refused_at and n < self._refused_at * LOOKAHEAD_REGROW:
            return []
        left = [self.max_rounds - r if a else 0 for r, a in zip(self.rounds, self._active.tolist())]
        plan = plan_rounds(self.ring, self.method, x, left, self.key_loads())
        if not plan.relieved:
            self._refused_at = n
            logger.debug("lookahead keeps the ring: predicted largest share %.2f, straggler %d", plan.before, x)
            return []
        self._refused_at = 0.0
        logger.info("lookahead: largest predicted share %.2f -> %.2f", plan.before, plan.after)
        return self._relieve(plan.relieved, now)

    def _relieve(self, relieved: tuple[int, ...], now: float, counted: bool = True,
                 respace: int = 0) -> list[Decision]:
        """Applies the rounds and publishes the ring once: one event per round (with the
        tokens after it), all under the published version. ``counted=False``: the rounds
        do not count against ``max_rounds`` (the first ring's). ``respace``: the rounds
        start from a first ring of that many tokens per reducer (event ``"first_ring"``,
        reducer -1)."""
        seen = tuple(self.queue_lengths)
        action = "halve" if self.method == "halving" else "double"
        steps = [(-1, "first_ring", self.ring.token_counts)] if respace and self.ring.respace(respace) else []
        for r in relieved:
            self.rounds[r] += int(counted)
            self.ring.redistribute(r, self.method)
            steps.append((r, action, self.ring.token_counts))
        if not steps:
            return []
        self._snapshot = self._ring_changed()
        version = self._snapshot.version
        events = [RebalanceEvent(now, r, a, seen, t, version) for r, a, t in steps]
        logger.info("rebalance: %s reducer(s) %s, queues %s -> tokens %s (v%d)", action, list(relieved), seen,
                    self.ring.token_counts, version)
        return [Decision(None, e) for e in events[:-1]] + [Decision(self._snapshot, events[-1])]

    def _check_slot(self, slot: int) -> int:
        if isinstance(slot, bool) or not isinstance(slot, (int, np.integer)) or not 0 <= slot < len(self._active):
            raise ValueError(f"reducer slot must be an integer in [0, {len(self._active)}), got {slot!r}")
        return int(slot)

    def scale_out_tokens(self) -> int:
        """Tokens :meth:`scale_out` gives a new reducer: the lower median of the active
        reducers' counts, for halving rounded down to a power of two; at least 1."""
        counts = sorted(t for t, a in zip(self.ring.token_counts, self._active.tolist()) if a)
        t = max(1, counts[(len(counts) - 1) // 2])
        return 1 << (t.bit_length() - 1) if self.method == "halving" else t

    def scale_out(self, slot: int, now: float) -> Decision:
        """Activates ``slot`` with :meth:`scale_out_tokens` tokens (see the class docstring)."""
        slot = self._check_slot(slot)
        if self._active[slot]:
            raise ValueError(f"reducer slot {slot} is active already")
        return self._rescale(slot, self.scale_out_tokens(), "scale_out", now)

    def scale_in(self, slot: int, now: float) -> Decision:
        """Retires ``slot``: its tokens go to 0, its keys to its ring successors."""
        slot = self._check_slot(slot)
        if not self._active[slot]:
            raise ValueError(f"reducer slot {slot} is not active")
        if self.num_active <= 1:
            raise ValueError(f"reducer slot {slot} is the last active reducer; it cannot be retired")
        return self._rescale(slot, 0, "scale_in", now)

    def _rescale(self, slot: int, tokens: int, action: str, now: float) -> Decision:
        """Gives ``slot`` ``tokens`` tokens and publishes the new snapshot."""
        seen = tuple(self.queue_lengths)
        before = self.ring.snapshot()
        self.ring.set_tokens(slot, tokens)
        self._active[slot] = tokens > 0
        self.rounds[slot] = 0
        self.queue_lengths[slot] = 0
        self.backlogs[slot] = None
        self._candidate, self._streak, self._refused_at = None, 0, 0.0
        self._slot_changed(slot, before)
        self._snapshot = self._ring_changed()
        event = RebalanceEvent(now, slot, action, seen, self.ring.token_counts, self._snapshot.version)
        logger.info("%s: reducer %d, tokens %s (v%d)", action, slot, self.ring.token_counts, self._snapshot.version)
        return Decision(self._snapshot, event)

    def _slot_changed(self, slot: int, before: RingSnapshot) -> None:
        """Called by :meth:`scale_out` and :meth:`scale_in` after the ring changed (``before``
        = the ring it had) and before the new snapshot is built; subclasses update what
        they keep per reducer."""
        return None

    @staticmethod
    def arc_moved(before: RingSnapshot, after: RingSnapshot) -> np.ndarray:
        """Fraction of each reducer's hash space on ``before`` that it owns no longer on
        ``after`` (arcs; 0 for a reducer that owned none)."""
        b, a = arc_shares(before), arc_shares(after)
        return np.divide(np.maximum(b - a, 0.0), b, out=np.zeros_like(b), where=b > 0)


@dataclass(frozen=True)
class RingSettings(PolicySettings):
    """Settings of the DPA ring policies (``halving``, ``doubling``; ``hybrid`` extends them).

    Args:
        method: ``"halving"`` (halve the straggler's tokens) or ``"doubling"`` (double
            the others'). Also the registered name.
        tau: Straggler threshold: act when ``Q_max > Q_second * (1 + tau)``; ``>= 0``.
        max_rounds: Rebalances allowed per reducer; 0 = the paper's "No LB".
        initial_tokens: Tokens per reducer on the first ring (a power of two; 16 allows
            4 halvings). The paper starts doubling from 1 token per reducer, whose arcs
            differ several-fold; 16 even them out (``benchmarks.stragglers --defaults``).
            With ``lookahead``, a first ring planned on the mappers' forecast may start
            from another power of two (:class:`DPAPlanner`).
        patience: Consecutive checks the same straggler must persist (1 = the paper).
        balance_on: ``"work"`` (default): compare the reducers' backlogs in estimated
            seconds of work; ``"records"``: compare queue lengths in records (the paper's
            rule; with ``min_gap=0`` exactly the paper's).
        min_gap_s: With ``"work"``: seconds of work the largest backlog must exceed the
            second by; None = :data:`MIN_GAP_STEPS` reducer steps
            (``JobConfig.step_time_s``).
        min_gap: With ``"records"``: records the longest queue must exceed the second by;
            None = one block's share per mapper
            (:attr:`~dpa.routing.policy.JobShape.block_share`), 0 = the paper.
        token_spacing: ``"even"`` (default): the first ring's tokens sit evenly spaced in
            their hashed order, so every reducer starts with exactly ``1 / R`` of the hash
            space; ``"hashed"``: at their hashes, the paper's ring, whose arcs differ by
            tens of percent (8 reducers x 16 tokens: the largest is 1.27 fair shares). See
            :mod:`dpa.routing.ring`.
        lookahead: Choose the rounds on the reducers' key reports before acting
            (:class:`DPAPlanner`; default True); False = apply one round per trigger, as
            the paper does. In ``hybrid`` it plans the ring for the tail, its split hot
            keys counted where their planned shares put them.

    Raises:
        ConfigError: An option is out of range (the message says which and what is valid).
    """

    method: str = "doubling"
    tau: float = 0.2
    max_rounds: int = 1
    initial_tokens: int = 16
    patience: int = 1
    min_gap: int | None = None
    balance_on: str = "work"
    min_gap_s: float | None = None
    token_spacing: str = "even"
    lookahead: bool = True

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(f"ring method must be 'halving' or 'doubling', got {self.method!r}")
        t = self.tau
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not (t >= 0 and math.isfinite(t)):
            raise ConfigError(f"policy {self.name!r}: tau must be a number >= 0 (e.g. 0.2), got {t!r}")
        check_int_option("max_rounds", self.max_rounds, 0, self.name)
        tokens = self.initial_tokens
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not is_power_of_two(tokens):
            lower = 1 << max(0, int(tokens).bit_length() - 1) if isinstance(tokens, int) and tokens > 0 else 1
            raise ConfigError(
                f"policy {self.name!r}: initial_tokens must be a power of two >= 1 for token halving, "
                f"got {tokens!r}; try {lower} or {lower * 2}"
            )
        check_int_option("patience", self.patience, 1, self.name)
        if self.min_gap is not None:
            check_int_option("min_gap", self.min_gap, 0, self.name)
        if self.balance_on not in BALANCE_ON:
            raise ConfigError(
                f"policy {self.name!r}: balance_on must be one of {BALANCE_ON} (compare seconds of work, "
                f"or queue lengths in records as the paper does), got {self.balance_on!r}"
            )
        g = self.min_gap_s
        if g is not None and (isinstance(g, bool) or not isinstance(g, (int, float)) or not (g >= 0 and math.isfinite(g))):
            raise ConfigError(f"policy {self.name!r}: min_gap_s must be a number of seconds >= 0, got {g!r}")
        if self.token_spacing not in SPACINGS:
            raise ConfigError(
                f"policy {self.name!r}: token_spacing must be one of {SPACINGS} (evenly spaced first tokens, "
                f"or at their hashes as in the paper), got {self.token_spacing!r}"
            )
        if not isinstance(self.lookahead, bool):
            raise ConfigError(f"policy {self.name!r}: lookahead must be True or False, got {self.lookahead!r}")

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.method


@dataclass(frozen=True)
class RingPolicy(BuiltPolicy):
    """What the ring policies (``halving``, ``doubling``, ``hybrid``) share: built from
    :class:`RingSettings` (or settings extending them) and the job's shape, it resolves
    the options whose default depends on the job and deals the first ring.

    Attributes:
        settings: The ring's options.
        shape: The job's shape: ``min_gap``'s and ``min_gap_s``' defaults and, for an
            elastic job, the reducer slots the job starts with.
    """

    settings: RingSettings = field(default_factory=RingSettings)

    @property
    def min_gap(self) -> int:
        """``settings.min_gap`` in records, by default one block's share per mapper
        (:attr:`~dpa.routing.policy.JobShape.block_share`)."""
        gap = self.settings.min_gap
        return self.shape.block_share if gap is None else gap

    @property
    def min_gap_s(self) -> float:
        """``settings.min_gap_s`` in seconds, by default :data:`MIN_GAP_STEPS` reducer steps
        (:attr:`~dpa.routing.policy.JobShape.step_time_s`)."""
        gap = self.settings.min_gap_s
        return MIN_GAP_STEPS * self.shape.step_time_s if gap is None else gap

    @property
    def active_reducers(self) -> int:
        """Elastic jobs: the first ring gives tokens to reducer slots
        ``0 .. active_reducers - 1`` only; 0 = all slots."""
        active = int(self.shape.active_reducers)
        return active if 0 < active < self.shape.num_reducers else 0

    @property
    def elastic(self) -> bool:
        """The planner may activate and retire slots during the job (``JobShape.elastic``)."""
        return bool(self.shape.elastic)

    def ring(self, num_reducers: int, active: int | None = None) -> HashRing:
        """The initial ring for ``num_reducers`` reducers (slots).

        Args:
            num_reducers: Reducers, or reducer slots of an elastic job.
            active: Only the first ``active`` slots get tokens (the others none, see
                :mod:`dpa.routing.ring`); None = :attr:`active_reducers`; 0 or
                ``num_reducers`` and more = all.
        """
        active = self.active_reducers if active is None else active
        first = active if active and 0 < active < num_reducers else None
        s = self.settings
        return HashRing.for_method(s.method, num_reducers, s.initial_tokens, s.token_spacing == "even", first)

    def tokens(self, snapshot: Snapshot, reducer: int) -> int | None:
        return int(snapshot.token_counts[reducer])


@dataclass(frozen=True)
class DPAPolicy(RingPolicy):
    """The DPA load balancer: consistent-hash ring with token halving or doubling, built
    from :class:`RingSettings` and the job's shape (see :class:`RingPolicy`).

    With ``max_rounds=0`` it has no planner and never moves a key, unless the job is
    elastic: then there is always a planner (:meth:`DPAPlanner.scale_out`,
    :meth:`DPAPlanner.scale_in`), and keys move.
    """

    routes_by_key = True
    #: With ``lookahead``, reducers count keys, but only while backlogged.
    key_stats_when_backlogged = True
    supports_elastic = True

    @property
    def moves_keys(self) -> bool:  # type: ignore[override]
        return self.settings.max_rounds > 0 or self.elastic

    @property
    def wants_key_stats(self) -> bool:  # type: ignore[override]
        return self.settings.lookahead and self.settings.max_rounds > 0

    @property
    def wants_block_stats(self) -> bool:  # type: ignore[override]
        return self.settings.lookahead and self.settings.max_rounds > 0

    def initial_snapshot(self, num_reducers: int) -> RingSnapshot:
        return self.ring(num_reducers).snapshot()

    def make_router(self, mapper_id: int, num_reducers: int) -> SnapshotRouter:
        return RingRouter()

    def owners(self, snapshot: RingSnapshot, hashes: np.ndarray) -> np.ndarray | None:
        return snapshot.lookup_batch(hashes) if self.moves_keys else None

    def make_planner(self, num_reducers: int) -> Planner | None:
        s = self.settings
        if s.max_rounds == 0 and not self.elastic:
            return None
        return DPAPlanner(s.method, s.tau, s.max_rounds, self.ring(num_reducers), s.patience,
                          self.min_gap, s.balance_on, self.min_gap_s, s.lookahead)


def build_ring_policy(settings: RingSettings, shape: JobShape) -> DPAPolicy:
    """The registry factory of ``halving`` and ``doubling``."""
    return DPAPolicy(settings, shape)
