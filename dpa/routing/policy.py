"""The policy contract: what a partitioning policy is, independent of any implementation.

A policy is a picklable :class:`PolicySpec`. The runtime asks it for

* ``initial_snapshot(R)``: the routing state every actor starts with (versioned,
  picklable, e.g. a :class:`~dpa.routing.ring.RingSnapshot`);
* ``make_router(mapper_id, R)``: a per-mapper :class:`Router` that maps a batch of key
  hashes to reducer ids under a snapshot (it may keep local state, e.g. load estimates);
* ``owners(snapshot, hashes)``: which reducer *owns* each key under a snapshot, used by
  reducers to forward records they no longer own (``None`` = no ownership: the policy
  splits keys and relies on the final merge);
* ``make_planner(R)``: an optional balancer-side :class:`Planner` that watches queue
  lengths and publishes new snapshots with higher versions.

Elastic jobs (:attr:`PolicySpec.supports_elastic`): ``R`` is then the number of reducer
*slots*, of which the job starts with :attr:`JobShape.active_reducers`; the others own no
keys until the planner activates them (:meth:`Planner.scale_out`), and active ones may be
retired again (:meth:`Planner.scale_in`).

A policy is built by a factory ``factory(settings, shape) -> PolicySpec`` from its own
typed :class:`PolicySettings` (what the user chose) and the :class:`JobShape` (what the
job looks like). The policy holds them rather than being them: the built-in policies keep
``self.settings`` and ``self.shape`` and read their options as ``self.settings.<option>``
(:class:`~dpa.routing.policies.common.BuiltPolicy`); no policy class subclasses a settings
class. This module imports no policy and not :mod:`dpa.config`: the built-in
policies live in :mod:`dpa.routing.policies`, the table of registered ones in
:mod:`dpa.routing.registry` (:func:`dpa.register_policy`, :func:`dpa.policies`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

logger = logging.getLogger(__name__)

__all__ = [
    "Decision", "JobShape", "Planner", "PolicyFactory", "PolicySettings", "PolicySpec", "RebalanceEvent",
    "Router", "Snapshot",
]


@runtime_checkable
class Snapshot(Protocol):
    """One version of a policy's routing state, as mappers and reducers hold it: immutable,
    picklable, versioned (a newer one has a higher ``version``). What a snapshot means
    beyond that is its policy's to say (:meth:`PolicySpec.destinations`,
    :meth:`PolicySpec.tokens`, :meth:`PolicySpec.keys_split_under`): the engine asks the
    policy, never the snapshot."""

    version: int

@dataclass(frozen=True)
class RebalanceEvent:
    """One entry of the balancer's event log.

    Attributes:
        time_s: Seconds since the job started (virtual seconds in the local runtime).
        reducer: The reducer the action was about (the longest queue); -1 for an action
            on the whole ring (``"first_ring"``).
        action: ``"halve"``, ``"double"``, ``"exhausted"`` (halving had nothing left),
            ``"first_ring"`` (a ring policy's first ring dealt again with another number of
            tokens per reducer, on the mappers' forecast, before any record was routed) or
            a policy-specific action name.
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

    snapshot: Snapshot | None
    event: RebalanceEvent


class Router:
    """Per-mapper routing: maps key hashes to reducer ids."""

    def route(self, hashes: np.ndarray, snapshot: Snapshot) -> np.ndarray:
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

    def observe_forecast(self, mapper: int, hashes: np.ndarray, counts: np.ndarray, total: int) -> None:
        """Records a mapper's key counts of the first input block it is about to route.

        Only called when the policy's :attr:`PolicySpec.wants_block_stats` is true. Each
        mapper counts the keys of its first block of the job before routing any of it (the
        PKG paper's local estimation) and reports the most frequent ones: a forecast of
        what the reducers will receive, so a key that is hot from the start can be split
        from the first push. The balancer evaluates the rule at once and the mapper
        routes under the snapshot that results.

        Args:
            mapper: The reporting mapper.
            hashes: ``uint32`` key hashes, distinct, most frequent first.
            counts: ``int64`` record counts, aligned with ``hashes``.
            total: Records of the block (``>= counts.sum()``).
        """
        return None

    def observe_work(self, reducer: int, backlog_s: float, version: int) -> None:
        """Records a reducer's backlog in estimated seconds of work (queued rows times its
        measured cost per row), reported under routing ``version`` with its queue length.

        Sent once the reducer has measured a step; planners that compare work rather than
        records use it. The default ignores it.
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

    def resume(self, snapshot: Snapshot) -> bool:
        """Continues from ``snapshot``, one this policy's planner published (a balancer
        restarted after a failure). Returns False if this planner cannot (it then keeps
        its first snapshot); what it learnt besides the routing (sketches, counts) starts
        afresh either way. A planner of an elastic policy takes the active reducers from
        the snapshot too."""
        return False

    @property
    def active(self) -> np.ndarray:
        """Which reducer slots take part (own keys, report and are balanced): a ``bool``
        array of length ``R``.

        Raises:
            NotImplementedError: The planner's policy is not elastic
                (:attr:`PolicySpec.supports_elastic` is false).
        """
        raise NotImplementedError(f"{type(self).__name__} does not support elastic reducers")

    def scale_out(self, slot: int, now: float) -> Decision:
        """Activates the inactive reducer ``slot``: it is given keys under a new snapshot.

        Args:
            slot: An inactive reducer slot.
            now: Seconds since the job started (for the event).

        Returns:
            The new snapshot (a higher version) and its ``"scale_out"`` event.

        Raises:
            ValueError: If ``slot`` is out of range or already active.
            NotImplementedError: The planner's policy is not elastic.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support elastic reducers")

    def scale_in(self, slot: int, now: float) -> Decision:
        """Retires the active reducer ``slot``: its keys go to the others under a new snapshot.

        Args:
            slot: An active reducer slot, not the last one.
            now: Seconds since the job started (for the event).

        Returns:
            The new snapshot (a higher version) and its ``"scale_in"`` event.

        Raises:
            ValueError: If ``slot`` is out of range, not active or the last active one.
            NotImplementedError: The planner's policy is not elastic.
        """
        raise NotImplementedError(f"{type(self).__name__} does not support elastic reducers")


class PolicySpec:
    """Base class of partitioning policies (see the module docstring)."""

    #: Registry name.
    name: str = ""
    #: Ownership of a key may change during the job (reducers forward; final merge).
    moves_keys: bool = False
    #: One key may be routed to several reducers at once (final merge, no forwarding).
    splits_keys: bool = False
    #: Keys are split only under snapshots the planner publishes: a job whose routing
    #: never changed needs no final merge.
    splits_by_plan: bool = False
    #: Routing depends only on the key's hash and the snapshot, never on how many records
    #: were routed.
    routes_by_key: bool = False
    #: The planner wants per-key arrival counts (:meth:`Planner.observe_keys`); reducers
    #: then count the keys they receive and send them with their queue reports.
    wants_key_stats: bool = False
    #: With ``wants_key_stats``: reducers count keys only while their backlog is worth
    #: balancing (two steps of work or more); otherwise they report just how many records
    #: arrived. Spares cheap jobs the cost of counting keys.
    key_stats_when_backlogged: bool = False
    #: Most key hashes a reducer sends per report when ``wants_key_stats``.
    key_stats_top: int = 1024
    #: The planner wants each mapper's key counts of its first block before the mapper
    #: routes it (:meth:`Planner.observe_forecast`).
    wants_block_stats: bool = False
    #: The job may change its number of reducers while it runs: the policy's snapshots
    #: give keys only to active reducer slots, and its planner implements
    #: :attr:`Planner.active`, :meth:`Planner.scale_out` and :meth:`Planner.scale_in`.
    supports_elastic: bool = False

    def initial_snapshot(self, num_reducers: int) -> Snapshot:
        raise NotImplementedError

    def tokens(self, snapshot: Snapshot, reducer: int) -> int | None:
        """The ring tokens ``reducer`` owns under ``snapshot`` (shown by the dashboard; 0 =
        an elastic slot that owns no keys), or None for a policy without tokens."""
        return None

    def keys_split_under(self, snapshot: Snapshot) -> bool:
        """Whether ``snapshot`` may route one key to several reducers (then the final merge
        is needed even if the routing never changed). By default every snapshot of a
        policy that splits keys, unless it splits them only by plan (:attr:`splits_by_plan`:
        the policy says which snapshots do)."""
        return bool(self.splits_keys) and not self.splits_by_plan

    def make_router(self, mapper_id: int, num_reducers: int) -> Router:
        raise NotImplementedError

    def owners(self, snapshot: Snapshot, hashes: np.ndarray) -> np.ndarray | None:
        return None

    def make_planner(self, num_reducers: int) -> Planner | None:
        return None

    def destinations(self, snapshot: Snapshot, hashes: np.ndarray, reducer: int, adopting: bool,
                     previous: Snapshot | None = None) -> np.ndarray | None:
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

    def handover(self, snapshot: Snapshot, hashes: np.ndarray, dest: np.ndarray, reducer: int) -> np.ndarray:
        """Adjusts where a reducer sends its queued records, once per snapshot it adopts.

        Called after :meth:`destinations` over the whole queue (front first) when
        ``reducer`` adopts ``snapshot`` (never for single batches), so a snapshot can ask
        a reducer to hand some of its queued records to others exactly once. The default
        returns ``dest`` unchanged.
        """
        return dest

    @property
    def combinable(self) -> bool:
        """Whether mappers may pre-aggregate a block per key before routing
        (``map_side_combine``): the policy then routes one partial-state row per key and
        block, weighted by its records. True for policies that route by key alone; a
        policy that splits keys by planned shares may accept it too (its reducers merge
        partial states anyway), one that balances single records (PKG, shuffle) may not.
        """
        return self.routes_by_key

    @property
    def needs_merge(self) -> bool:
        """Whether the reducer must implement ``merge`` for this policy."""
        return self.moves_keys or self.splits_keys


@dataclass(frozen=True)
class JobShape:
    """What a policy factory learns about the job: its shape, not its whole configuration.

    Attributes:
        num_mappers: Mapper actors (``JobConfig.num_mappers``).
        num_reducers: Reducer actors, or reducer slots of an elastic job
            (``JobConfig.slots``).
        batch_size: Records per input block (``JobConfig.batch_size``).
        seed: Seed for randomised policies (``JobConfig.seed``).
        step_time_s: Target seconds of work per reducer step (``JobConfig.step_time_s``).
        active_reducers: Reducers the job starts with, slots ``0 .. active_reducers - 1``
            (``JobConfig.num_reducers`` of an elastic job); 0 = all ``num_reducers``.
        elastic: The number of active reducers may change during the job
            (``JobConfig.elastic``).
        queue_time_s: Bound of each reducer's queue in seconds of work
            (``JobConfig.queue_time_s``; ``inf``: bounded in records only).
    """

    num_mappers: int = 1
    num_reducers: int = 1
    batch_size: int = 1
    seed: int = 0
    step_time_s: float = 0.1
    active_reducers: int = 0
    elastic: bool = False
    queue_time_s: float = 1.0

    @property
    def block_share(self) -> int:
        """One block's share per reducer from each mapper: ``M * batch_size // R`` records
        (``R`` = the reducers the job starts with, :attr:`active_reducers` if set).

        Queue lengths move in steps of about this much while blocks arrive; the ring
        policies' default ``min_gap``.
        """
        return int(self.num_mappers) * int(self.batch_size) // int(self.active_reducers or self.num_reducers)


@dataclass(frozen=True)
class PolicySettings:
    """Base class of a policy's own typed settings (a frozen dataclass per policy).

    Subclasses declare their options as fields, validate them in ``__post_init__``
    (raising :class:`~dpa.errors.ConfigError` with what to do), and name the registered
    policy they select with ``name`` (a class attribute, or a property when one settings
    class serves several names, e.g. ``RingSettings(method="halving").name == "halving"``).
    Pass one as ``policy=...`` (to ``dpa.run`` or ``dpa.BalanceConfig``). Settings only hold options: the registered
    factory builds the policy from them, and the policy holds them (``policy.settings``)
    rather than subclassing them. Settings may extend other settings (``HybridSettings``
    extends ``RingSettings``).
    """

    name: ClassVar[str] = ""


#: Builds a policy from its settings and the job's shape.
PolicyFactory = Callable[[Any, JobShape], "PolicySpec"]
