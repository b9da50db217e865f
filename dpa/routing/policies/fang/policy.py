"""Fang et al.'s mixed routing (a small routing table over ``hash % R``) as the dpa
policies ``mintable``, ``minmig`` and ``mixed``: the snapshot, router, planner and settings.

Paper: *Parallel Stream Processing Against Workload Skewness and Variance* (Fang et al.).
The planning itself (three phases, LLFD with Adjust, compact form) is in
:mod:`dpa.routing.policies.fang.plan`; the model, the algorithms and every choice made where
the paper is vague are in ``docs/policies/fang.md``. Choices of this module: the planner
counts intervals in records reported through ``observe_keys`` (option ``interval``), never
in ``check``'s ``now``; it publishes only when the new table differs; ``mixed`` defaults to
``table_limit=1000`` (:data:`MIXED_DEFAULT_TABLE_LIMIT`, the paper's value is not legible
in our copy), ``mintable`` and ``minmig`` to no limit.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpa.errors import ConfigError
from dpa.routing.policies.common import (
    KeyStatsPolicy,
    LatestQueuesPlanner,
    SnapshotRouter,
    check_int_option,
)
from dpa.routing.policies.fang.plan import MODES, discretize, migration_cost, plan_table
from dpa.routing.policy import Decision, JobShape, PolicySettings, RebalanceEvent

logger = logging.getLogger(__name__)

__all__ = [
    "MIXED_DEFAULT_TABLE_LIMIT",
    "MODES",
    "FangPlanner",
    "FangPolicy",
    "FangSettings",
    "TableRouter",
    "TableSnapshot",
    "build_fang",
    "discretize",
    "migration_cost",
    "plan_table",
]

#: Default ``A_max`` of the ``mixed`` policy (Mixed without a limit is MinMig).
MIXED_DEFAULT_TABLE_LIMIT = 1000


# ---------------------------------------------------------------------------- snapshot
@dataclass(frozen=True, eq=False)
class TableSnapshot:
    """Mixed routing state: explicit table (sorted hashes -> workers) over ``hash % R``.

    Attributes:
        num_reducers: ``R``.
        keys: Sorted ``uint32`` key hashes with an entry.
        dests: ``int64`` worker of each entry.
        version: Routing-state version.
    """

    num_reducers: int
    keys: np.ndarray
    dests: np.ndarray
    version: int = 0

    @classmethod
    def from_table(cls, table: Mapping[int, int], num_reducers: int, version: int = 0) -> TableSnapshot:
        """Builds a snapshot from a ``{hash: worker}`` table (entries equal to ``hash % R`` are dropped)."""
        items = sorted((int(k), int(d)) for k, d in table.items() if int(d) != int(k) % num_reducers)
        keys = np.array([k for k, _ in items], dtype=np.uint32)
        dests = np.array([d for _, d in items], dtype=np.int64)
        return cls(num_reducers, keys, dests, version)

    @property
    def table_size(self) -> int:
        """Entries of the explicit table."""
        return len(self.keys)

    def as_dict(self) -> dict[int, int]:
        """The table as ``{hash: worker}``."""
        return dict(zip(self.keys.tolist(), self.dests.tolist(), strict=True))

    def lookup_batch(self, hashes: np.ndarray) -> np.ndarray:
        """Worker of each hash: the table's entry on a hit, else ``hash % R`` (``int64``)."""
        h = np.asarray(hashes).astype(np.uint32, copy=False)
        out = (h % np.uint32(self.num_reducers)).astype(np.int64)
        if len(self.keys) and len(h):
            pos = np.searchsorted(self.keys, h)
            pos[pos == len(self.keys)] = 0
            hit = self.keys[pos] == h
            out[hit] = self.dests[pos[hit]]
        return out


TableRouter = SnapshotRouter
"""Routes by the snapshot's table over the hash."""


# ---------------------------------------------------------------------------- planner
class FangPlanner(LatestQueuesPlanner):
    """The controller (section 4, Figure 5): per-interval key statistics -> new table.

    ``observe_keys`` accumulates the interval's per-key records; once ``interval`` records
    have been observed, the next ``check`` closes the interval: it computes every worker's
    load under the current table (listed keys by their current destination, unlisted
    records at the reporting reducer) and, if ``max L > (1 + theta) * L_bar``, runs
    :func:`plan_table` and publishes the new table with a higher version (unless it is
    unchanged). Periods are counted in observed records, never in ``now``.
    """

    def __init__(self, policy: FangPolicy, num_reducers: int) -> None:
        self.policy = policy
        self.settings = policy.settings
        self.num_reducers = num_reducers
        self._snapshot = TableSnapshot.from_table({}, num_reducers, 0)
        self._table: dict[int, int] = {}
        self.queue_lengths = [0] * num_reducers
        self._counts: dict[int, int] = {}
        self._residual = [0] * num_reducers
        self._records = 0
        self._history: deque[dict[int, int]] = deque(maxlen=policy.settings.window)
        self._residual_history: deque[int] = deque(maxlen=policy.settings.window)
        self.intervals = 0
        self.last_stats: dict[str, Any] | None = None

    def observe_keys(self, reducer: int, hashes: np.ndarray, counts: np.ndarray, total: int) -> None:
        counts_l = np.asarray(counts, dtype=np.int64).tolist()
        acc = self._counts
        for h, c in zip(np.asarray(hashes).astype(np.uint32, copy=False).tolist(), counts_l, strict=True):
            acc[h] = acc.get(h, 0) + c
        self._residual[reducer] += max(0, int(total) - sum(counts_l))
        self._records += int(total)

    def interval_loads(self) -> list[float]:
        """Loads of the open interval under the current table."""
        loads = [float(x) for x in self._residual]
        snap = self._snapshot
        if self._counts:
            hs = np.fromiter(self._counts.keys(), dtype=np.uint32, count=len(self._counts))
            cs = np.fromiter(self._counts.values(), dtype=np.float64, count=len(self._counts))
            owners = snap.lookup_batch(hs)
            np_loads = np.bincount(owners, weights=cs, minlength=self.num_reducers)
            loads = [a + b for a, b in zip(loads, np_loads.tolist(), strict=True)]
        return loads

    def check(self, now: float) -> list[Decision]:
        p = self.settings
        if self._records < p.interval:
            return []
        loads = self.interval_loads()
        counts, residual = self._counts, [float(x) for x in self._residual]
        self._history.append(counts)
        self._residual_history.append(sum(self._residual))
        self._counts, self._residual, self._records = {}, [0] * self.num_reducers, 0
        self.intervals += 1
        mean = sum(loads) / len(loads)
        if mean <= 0 or max(loads) <= (1.0 + p.theta) * mean:
            return []
        if p.state == "unit":
            seen: set[int] = set().union(*self._history) | set(self._table)
            sizes: dict[int, float] = {k: 1.0 for k in seen}
            bg_state = 0.0
        else:
            sizes = {}
            for past in self._history:
                for k, c in past.items():
                    sizes[k] = sizes.get(k, 0.0) + c
            bg_state = float(sum(self._residual_history))
        table, stats = plan_table(
            {k: float(c) for k, c in counts.items()}, sizes, self._table, self.num_reducers,
            mode=p.mode, theta=p.theta, table_limit=p.table_limit, beta=p.beta,
            background_loads=residual, background_state=bg_state, discretize_degree=p.discretize,
        )
        self.last_stats = stats
        x = max(range(self.num_reducers), key=lambda d: (loads[d], -d))
        if table == self._table:
            logger.info("fang %s: imbalance %.3f but the plan keeps the table", p.mode, max(loads) / mean)
            return []
        self._table = table
        self._snapshot = TableSnapshot.from_table(table, self.num_reducers, self._snapshot.version + 1)
        event = RebalanceEvent(now, x, p.name, tuple(self.queue_lengths), (), self._snapshot.version)
        logger.info("fang %s: skewness %.3f -> %.3f, table %d entries, migration %.2f%% (v%d)", p.mode,
                    stats["skewness_before"], stats["skewness_after"], stats["table_size"],
                    100.0 * stats["migration_cost"], self._snapshot.version)
        return [Decision(self._snapshot, event)]


# ---------------------------------------------------------------------------- settings, policy
@dataclass(frozen=True)
class FangSettings(PolicySettings):
    """Settings of ``mintable``, ``minmig`` and ``mixed`` (see ``docs/policies/fang.md``).

    Args:
        mode: ``"mintable"``, ``"minmig"`` or ``"mixed"`` (also the registered name).
        theta: Imbalance tolerance: rebalance when ``max L > (1 + theta) * mean L`` over
            the last interval, and plan to that bound (paper default 0.08).
        table_limit: Most routing-table entries ``A_max``; None = unbounded; ``"auto"``
            (default) = :data:`MIXED_DEFAULT_TABLE_LIMIT` for ``mixed``, None otherwise.
        beta: Weight factor of the migration priority index (paper default 1.5).
        interval: Records (as reported by reducers) per statistics interval.
        window: Intervals of history in the state size ``S(k)`` (``state="window"``).
        state: ``"window"`` (``S`` = records in the window) or ``"unit"`` (``S = 1``).
        discretize: Degree of discretization of ``c`` and ``S`` (section 4.2), or None.
    """

    mode: str = "mixed"
    theta: float = 0.08
    table_limit: int | None | str = "auto"
    beta: float = 1.5
    interval: int = 50_000
    window: int = 1
    state: str = "window"
    discretize: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"fang: mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.table_limit == "auto":
            object.__setattr__(self, "table_limit", MIXED_DEFAULT_TABLE_LIMIT if self.mode == "mixed" else None)
        for name in ("theta", "beta"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"policy {self.mode!r}: option {name} must be a finite number >= 0, got {v!r}")
        if self.table_limit is not None:
            check_int_option("table_limit", self.table_limit, 0, self.mode)
        check_int_option("interval", self.interval, 1, self.mode)
        check_int_option("window", self.window, 1, self.mode)
        if self.discretize is not None:
            check_int_option("discretize", self.discretize, 1, self.mode)
        if self.state not in ("window", "unit"):
            raise ConfigError(f"policy {self.mode!r}: option state must be 'window' or 'unit', got {self.state!r}")

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.mode


@dataclass(frozen=True)
class FangPolicy(KeyStatsPolicy):
    """Mixed routing with MinTable, MinMig or Mixed rebalancing, built from
    :class:`FangSettings` (its ``mode`` is the registered name)."""

    settings: FangSettings = field(default_factory=FangSettings)

    def initial_snapshot(self, num_reducers: int) -> TableSnapshot:
        return TableSnapshot.from_table({}, num_reducers, 0)

    def make_planner(self, num_reducers: int) -> FangPlanner:
        return FangPlanner(self, num_reducers)


def build_fang(settings: FangSettings, shape: JobShape) -> FangPolicy:
    """The registry factory of ``mintable``, ``minmig`` and ``mixed``."""
    return FangPolicy(settings, shape)
