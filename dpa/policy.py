"""Partitioning policies: the one plug-in point for deciding which reducer gets a record.

A policy is a picklable :class:`PolicySpec`. The runtime asks it for

* ``initial_snapshot(R)``: the routing state every actor starts with (versioned,
  picklable, e.g. a :class:`~dpa.ring.RingSnapshot`);
* ``make_router(mapper_id, R)``: a per-mapper :class:`Router` that maps a batch of key
  hashes to reducer ids under a snapshot (it may keep local state, e.g. load estimates);
* ``owners(snapshot, hashes)``: which reducer *owns* each key under a snapshot, used by
  reducers to forward records they no longer own (``None`` = no ownership: the policy
  splits keys and relies on the final merge);
* ``make_planner(R)``: an optional balancer-side :class:`Planner` that watches queue
  lengths and publishes new snapshots with higher versions.

The same objects run in the Ray actors and in the in-process runtime. Register new
policies with :func:`register_policy`; :func:`make_policy` builds one from a
:class:`~dpa.config.JobConfig`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from dpa.errors import ConfigError
from dpa.ring import HashRing, RingSnapshot

if TYPE_CHECKING:
    from dpa.config import JobConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RebalanceEvent:
    """One entry of the balancer's event log.

    Attributes:
        time_s: Seconds since the job started (virtual seconds in the local runtime).
        reducer: The reducer the action was about (the longest queue).
        action: ``"halve"``, ``"double"``, ``"exhausted"`` (halving had nothing left) or a
            policy-specific action name.
        queue_lengths: The queue lengths the decision was based on, per reducer.
        tokens_after: Tokens per reducer after the action (ring policies).
        version: Routing-state version after the action.
    """

    time_s: float
    reducer: int
    action: str
    queue_lengths: tuple[int, ...]
    tokens_after: tuple[int, ...]
    version: int

    def to_dict(self) -> dict[str, Any]:
        """Returns the event as a JSON-friendly dict."""
        return {
            "time_s": self.time_s,
            "reducer": self.reducer,
            "action": self.action,
            "queue_lengths": list(self.queue_lengths),
            "tokens_after": list(self.tokens_after),
            "version": self.version,
        }


@dataclass(frozen=True)
class Decision:
    """A planner's output: the new snapshot to publish (or None) and the logged event."""

    snapshot: Any | None
    event: RebalanceEvent


class Router:
    """Per-mapper routing: maps key hashes to reducer ids."""

    def route(self, hashes: np.ndarray, snapshot: Any) -> np.ndarray:
        """Returns an int array of reducer ids, one per hash."""
        raise NotImplementedError


class Planner:
    """Balancer-side logic: consumes queue-length reports, emits new routing snapshots."""

    def observe(self, reducer: int, queue_length: int, version: int) -> None:
        """Records a reducer's latest queue length, reported under routing ``version``."""
        raise NotImplementedError

    def observe_keys(self, reducer: int, hashes: np.ndarray, counts: np.ndarray, total: int) -> None:
        """Records the keys that arrived at ``reducer`` from mappers since its last report.

        Only called when the policy's :attr:`PolicySpec.wants_key_stats` is true. Reducers
        count the records pushed to them by mappers (forwarded records are not counted
        again) and report, with each queue length, the ``key_stats_top`` most frequent key
        hashes of the interval and their record counts, plus ``total``: every record that
        arrived in the interval (so ``total - counts.sum()`` records belong to keys not
        listed). Every record is counted at exactly one reducer, so summing the reports
        of all reducers gives the global key frequencies of the stream.

        Args:
            reducer: The reporting reducer.
            hashes: ``uint32`` key hashes, distinct.
            counts: ``int64`` record counts, aligned with ``hashes``.
            total: Records that arrived at the reducer in the interval.
        """
        return None

    def observe_held(self, reducer: int, held: int) -> None:
        """Records processed or queued at ``reducer`` now (after forwarding), sent with key stats."""
        return None

    def check(self, now: float) -> list[Decision]:
        """Evaluates the balancing rule at time ``now``; returns the actions taken."""
        raise NotImplementedError

    @property
    def snapshot(self) -> Any:
        """The authoritative current snapshot."""
        raise NotImplementedError


class PolicySpec:
    """Base class of partitioning policies (see the module docstring)."""

    #: Registry name.
    name: str = ""
    #: Ownership of a key may change during the job (reducers forward; final merge).
    moves_keys: bool = False
    #: One key may be routed to several reducers at once (final merge, no forwarding).
    splits_keys: bool = False
    #: Routing depends only on the key's hash and the snapshot, never on how many records
    #: were routed, so mappers may pre-aggregate a block per key (``map_side_combine``).
    routes_by_key: bool = False
    #: The planner wants per-key arrival counts (:meth:`Planner.observe_keys`); reducers
    #: then count the keys they receive and send them with their queue reports.
    wants_key_stats: bool = False
    #: Most key hashes a reducer sends per report when ``wants_key_stats``.
    key_stats_top: int = 1024

    def initial_snapshot(self, num_reducers: int) -> Any:
        raise NotImplementedError

    def make_router(self, mapper_id: int, num_reducers: int) -> Router:
        raise NotImplementedError

    def owners(self, snapshot: Any, hashes: np.ndarray) -> np.ndarray | None:
        return None

    def make_planner(self, num_reducers: int) -> Planner | None:
        return None

    def destinations(self, snapshot: Any, hashes: np.ndarray, reducer: int, adopting: bool,
                     previous: Any = None) -> np.ndarray | None:
        """Where ``reducer`` should send each of its queued records (itself = keep it).

        Reducers call this on every chunk they take (``adopting=False``), on the queued
        records when they adopt a new snapshot (``adopting=True``, ``previous`` = the
        snapshot they had), and on a mapper's batch routed under an older snapshot
        (``adopting=True``, ``previous`` = the snapshot it was routed under). The default is the
        key's owner (:meth:`owners`); a policy that lets several reducers hold one key
        (e.g. a hot key split under a snapshot) overrides it so that a reducer keeps the
        records it may hold, and may spread queued records over the key's reducers when
        a new snapshot is adopted. None = keep everything.
        """
        return self.owners(snapshot, hashes)

    def handover(self, snapshot: Any, hashes: np.ndarray, dest: np.ndarray, reducer: int) -> np.ndarray:
        """Adjusts where a reducer sends its queued records, once per snapshot it adopts.

        Called after :meth:`destinations` over the whole queue (front first) when
        ``reducer`` adopts ``snapshot`` (never for single batches), so a snapshot can ask
        a reducer to hand some of its queued records to others exactly once. The default
        returns ``dest`` unchanged.
        """
        return dest

    @property
    def needs_merge(self) -> bool:
        """Whether the reducer must implement ``merge`` for this policy."""
        return self.moves_keys or self.splits_keys


# ---------------------------------------------------------------------------- ring
class RingRouter(Router):
    """Routes by the consistent-hash ring snapshot (vectorised ``searchsorted``)."""

    def route(self, hashes: np.ndarray, snapshot: RingSnapshot) -> np.ndarray:
        return snapshot.lookup_batch(hashes)


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
    * Halving a reducer that has one token left changes nothing: the event log records
      ``"exhausted"`` once and the reducer's rounds are used up.
    * ``patience`` (default 1, the paper's rule) asks the predicate to name the same
      reducer on that many consecutive checks before acting. Queue lengths are
      instantaneous and arrive in whole batches, so with large batches and cheap records a
      reducer that just received a batch looks like a straggler for a moment even when keys
      are uniform; a patience of a few checks filters out such bursts.
    * ``min_gap`` (records): the longest queue must also exceed the second by more than
      this. Mappers push whole input blocks, so queue lengths move in steps of about a
      block's share per reducer (``batch_size / R`` records); a difference smaller than
      one such step per mapper (all ``M`` mappers may have pushed into one queue while the
      others drained theirs) is the noise of arrivals, not a straggler. :func:`make_policy`
      defaults it to ``M * batch_size // R`` for ``halving``/``doubling``/``hybrid``;
      ``min_gap=0`` is the paper's rule exactly (the Table 1 reproduction uses it).
    """

    def __init__(self, method: str, tau: float, max_rounds: int, ring: HashRing, patience: int = 1,
                 min_gap: int = 0) -> None:
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
        self._candidate: int | None = None
        self._streak = 0

    @property
    def snapshot(self) -> RingSnapshot:
        return self._snapshot

    def observe(self, reducer: int, queue_length: int, version: int) -> None:
        if version >= self.report_versions[reducer]:
            self.report_versions[reducer] = version
            self.queue_lengths[reducer] = int(queue_length)

    @staticmethod
    def straggler(queue_lengths: list[int], tau: float, min_gap: int = 0) -> int | None:
        """The reducer satisfying ``Q_max > Q_s (1 + tau)`` (paper eq. 1) and
        ``Q_max - Q_s > min_gap``, or None."""
        if len(queue_lengths) < 2:
            return None
        x = int(np.argmax(queue_lengths))
        q_max = queue_lengths[x]
        q_s = max(q for i, q in enumerate(queue_lengths) if i != x)
        return x if q_max > q_s * (1.0 + tau) and q_max - q_s > min_gap else None

    def _ring_changed(self) -> Any:
        """The snapshot to publish after the ring changed (subclasses wrap the ring)."""
        return self.ring.snapshot()

    def check(self, now: float) -> list[Decision]:
        if min(self.report_versions) < self._snapshot.version:
            return []
        x = self.straggler(self.queue_lengths, self.tau, self.min_gap)
        self._streak = self._streak + 1 if x is not None and x == self._candidate else int(x is not None)
        self._candidate = x
        if x is None or self.rounds[x] >= self.max_rounds or self._streak < self.patience:
            return []
        self._streak = 0
        seen = tuple(self.queue_lengths)
        self.rounds[x] += 1
        changed = self.ring.redistribute(x, self.method)
        if not changed:
            self.rounds[x] = self.max_rounds
            event = RebalanceEvent(now, x, "exhausted", seen, self.ring.token_counts, self._snapshot.version)
            logger.info("halving exhausted for reducer %d (1 token left)", x)
            return [Decision(None, event)]
        self._snapshot = self._ring_changed()
        action = "halve" if self.method == "halving" else "double"
        event = RebalanceEvent(now, x, action, seen, self.ring.token_counts, self._snapshot.version)
        logger.info("rebalance: %s reducer %d, queues %s -> tokens %s (v%d)", action, x, seen,
                    self.ring.token_counts, self._snapshot.version)
        return [Decision(self._snapshot, event)]


@dataclass(frozen=True)
class DPAPolicy(PolicySpec):
    """The DPA load balancer: consistent-hash ring with token halving or doubling.

    Args:
        method: ``"halving"`` (start with ``initial_tokens`` per reducer) or
            ``"doubling"`` (start with 1 token per reducer).
        tau: Straggler threshold (``>= 0``).
        max_rounds: Rebalances allowed per reducer; 0 = the paper's "No LB".
        initial_tokens: Tokens per reducer for halving (power of two).
    """

    routes_by_key = True

    method: str = "doubling"
    tau: float = 0.2
    max_rounds: int = 1
    initial_tokens: int = 16
    patience: int = 1
    min_gap: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.patience, bool) or not isinstance(self.patience, int) or self.patience < 1:
            raise ConfigError(f"policy option patience must be an integer >= 1, got {self.patience!r}")
        if isinstance(self.min_gap, bool) or not isinstance(self.min_gap, int) or self.min_gap < 0:
            raise ConfigError(f"policy option min_gap must be an integer >= 0 (records), got {self.min_gap!r}")

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.method

    @property
    def moves_keys(self) -> bool:  # type: ignore[override]
        return self.max_rounds > 0

    def _ring(self, num_reducers: int) -> HashRing:
        if self.method == "halving":
            return HashRing.for_halving(num_reducers, self.initial_tokens)
        return HashRing.for_doubling(num_reducers)

    def initial_snapshot(self, num_reducers: int) -> RingSnapshot:
        return self._ring(num_reducers).snapshot()

    def make_router(self, mapper_id: int, num_reducers: int) -> Router:
        return RingRouter()

    def owners(self, snapshot: RingSnapshot, hashes: np.ndarray) -> np.ndarray | None:
        return snapshot.lookup_batch(hashes) if self.moves_keys else None

    def make_planner(self, num_reducers: int) -> Planner | None:
        if self.max_rounds == 0:
            return None
        return DPAPlanner(self.method, self.tau, self.max_rounds, self._ring(num_reducers), self.patience,
                          self.min_gap)


# ---------------------------------------------------------------------------- hash
@dataclass(frozen=True)
class ModSnapshot:
    """Static routing ``hash % R`` (key grouping)."""

    num_reducers: int
    version: int = 0

    def lookup_batch(self, hashes: np.ndarray) -> np.ndarray:
        return (np.asarray(hashes, dtype=np.uint32) % np.uint32(self.num_reducers)).astype(np.int32)


class ModRouter(Router):
    def route(self, hashes: np.ndarray, snapshot: ModSnapshot) -> np.ndarray:
        return snapshot.lookup_batch(hashes)


@dataclass(frozen=True)
class HashPolicy(PolicySpec):
    """Key grouping: ``murmur3(key) % R``, never rebalanced."""

    routes_by_key = True

    name: str = "hash"

    def initial_snapshot(self, num_reducers: int) -> ModSnapshot:
        return ModSnapshot(num_reducers)

    def make_router(self, mapper_id: int, num_reducers: int) -> Router:
        return ModRouter()


# ---------------------------------------------------------------------------- registry
@dataclass
class _Entry:
    factory: Callable[[JobConfig], PolicySpec]
    description: str = ""
    options: dict[str, Any] = field(default_factory=dict)


_REGISTRY: dict[str, _Entry] = {}


def register_policy(name: str, factory: Callable[[JobConfig], PolicySpec], description: str = "") -> None:
    """Registers a policy factory under ``name`` (``factory(config) -> PolicySpec``)."""
    _REGISTRY[name] = _Entry(factory, description)


def policies() -> dict[str, str]:
    """Registered policy names with one-line descriptions."""
    return {name: e.description for name, e in sorted(_REGISTRY.items())}


def make_policy(config: JobConfig) -> PolicySpec:
    """Builds the policy named by ``config.policy``.

    Raises:
        ConfigError: unknown name (the message lists the valid ones) or bad options.
    """
    entry = _REGISTRY.get(config.policy)
    if entry is None:
        raise ConfigError(
            f"unknown policy {config.policy!r}; valid policies: {', '.join(sorted(_REGISTRY))}"
        )
    try:
        return entry.factory(config)
    except TypeError as exc:
        raise ConfigError(f"bad policy_options for {config.policy!r}: {exc}") from exc


def default_min_gap(cfg: JobConfig) -> int:
    """The straggler rule's default ``min_gap``: one block's share per reducer from each mapper."""
    return int(cfg.num_mappers) * int(cfg.batch_size) // int(cfg.num_reducers)


def _dpa_factory(method: str) -> Callable[[JobConfig], PolicySpec]:
    def build(cfg: JobConfig) -> PolicySpec:
        opts = {"min_gap": default_min_gap(cfg), **cfg.policy_options}
        return DPAPolicy(method, cfg.tau, cfg.max_rounds, cfg.initial_tokens, **opts)

    return build


register_policy("halving", _dpa_factory("halving"), "DPA ring, token halving on the straggler")
register_policy("doubling", _dpa_factory("doubling"), "DPA ring, token doubling on all but the straggler")
register_policy("hash", lambda cfg: HashPolicy(**cfg.policy_options), "key grouping: murmur3 % R, static")

import dpa.partitioners  # noqa: E402,F401  (registers the literature's policies)
