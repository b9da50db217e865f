"""Gedik's partitioning functions for stateful data parallelism, as the dpa policies
``gedik-scan``, ``gedik-redist`` and ``gedik-readj`` (B. Gedik, VLDB Journal): the
planner, the settings and the policy.

The model is in :mod:`dpa.routing.policies.gedik.model`, the constructions in
:mod:`dpa.routing.policies.gedik.construct`; the algorithms and the choices made where the
paper is vague are in ``docs/policies/gedik.md``. Choices of this module: frequencies come
from a :class:`dpa.routing.sketches.SlidingLossyCounter` fed by the reducers' key reports, with
``epsilon = eps_ratio * delta``; every ``period`` records the construction runs with
``old`` = the current function and publishes if the explicit table changed (damped by
``rho_threshold``); the event's reducer is the longest reported queue and
``tokens_after`` the explicit entries per reducer.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np

from dpa.errors import ConfigError
from dpa.routing.policies.common import (
    KeyStatsPolicy,
    LatestQueuesPlanner,
    SnapshotRouter,
    check_int_option,
)
from dpa.routing.policies.gedik.construct import ALGORITHMS, BuildInfo, construct, utility
from dpa.routing.policies.gedik.model import GedikParams, PartitionFunction, frequency_threshold
from dpa.routing.policy import Decision, JobShape, PolicySettings, RebalanceEvent
from dpa.routing.sketches import SlidingLossyCounter

__all__ = [
    "ALGORITHMS",
    "BuildInfo",
    "GedikParams",
    "GedikPlanner",
    "GedikPolicy",
    "GedikSettings",
    "PartitionFunction",
    "build_gedik",
    "construct",
    "frequency_threshold",
    "utility",
]

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- the policy
GedikRouter = SnapshotRouter
"""Routes by the partition function snapshot (Algorithm 1, vectorised)."""


class GedikPlanner(LatestQueuesPlanner):
    """Sliding lossy counters fed by key reports; rebuilds every ``period`` records.

    Attributes:
        counter: The :class:`~dpa.routing.sketches.SlidingLossyCounter` (None with one reducer).
        builds: :class:`BuildInfo` of every construction run.
    """

    def __init__(self, policy: GedikPolicy, num_reducers: int) -> None:
        self.policy = policy
        self.settings = settings = policy.settings
        self.params = settings.params
        self.N = int(num_reducers)
        self.queue_lengths = [0] * self.N
        self._snapshot = policy.initial_snapshot(self.N)
        self.delta = frequency_threshold(self.params, self.N)
        self.epsilon = settings.eps_ratio * self.delta if math.isfinite(self.delta) else 0.0
        self.counter = (SlidingLossyCounter(settings.window or settings.period, self.epsilon, settings.counters)
                        if math.isfinite(self.delta) else None)
        self.since_build = 0
        self.builds: list[BuildInfo] = []

    def observe_keys(self, reducer: int, hashes: np.ndarray, counts: np.ndarray, total: int) -> None:
        total = int(total)
        if self.counter is not None:
            self.counter.update(hashes, counts, max(total, int(np.sum(counts))))
        self.since_build += total

    def rebuild(self) -> tuple[PartitionFunction, BuildInfo] | None:
        """Runs the construction on the current frequencies (None with one reducer)."""
        if self.counter is None or self.counter.active.n == 0:
            return None
        freqs = self.counter.frequencies(self.delta)
        pf, info = construct(freqs, self._snapshot, self.N, self.settings.algorithm, self.params,
                             eps=self.epsilon, version=self._snapshot.version + 1)
        self.builds.append(info)
        return pf, info

    def check(self, now: float) -> list[Decision]:
        if self.since_build < self.settings.period:
            return []
        self.since_build = 0
        built = self.rebuild()
        if built is None:
            return []
        pf, info = built
        if pf.same_mapping(self._snapshot):
            return []
        t = self.settings.rho_threshold
        same_items = np.array_equal(pf.explicit_hashes, self._snapshot.explicit_hashes)
        if t is not None and same_items and not (info.rho_start > t and info.rho < info.rho_start):
            return []  # same explicit items, still balanced enough: keep the current placement
        self._snapshot = pf
        seen = tuple(self.queue_lengths)
        reducer = int(np.argmax(seen)) if seen else 0
        event = RebalanceEvent(now, reducer, f"gedik-{self.settings.algorithm}", seen, pf.explicit_counts(),
                               pf.version)
        logger.info("gedik-%s: v%d, %d explicit items (delta=%.3g), rho=%.3f", self.settings.algorithm,
                    pf.version, info.tracked, info.delta_refined, info.rho)
        return [Decision(pf, event)]


@dataclass(frozen=True)
class GedikSettings(PolicySettings):
    """Settings of ``gedik-scan``, ``gedik-redist`` and ``gedik-readj``.

    Args:
        algorithm: ``scan``, ``redist`` or ``readj`` (the name is ``gedik-<algorithm>``).
        alpha, sigma, resources, utility, replicas, domain_size, max_moves,
            readj_requires_gain: See :class:`GedikParams`.
        period: Records observed (via key reports) between constructions.
        window: Sliding window ``W`` of the lossy counters in records (default ``period``).
        counters: Lossy counters of the sliding window emulation (the paper's 3).
        eps_ratio: Lossy counting error as a fraction of ``delta`` (``0 < eps_ratio < 1``).
        rho_threshold: None (default): publish whenever the explicit table changes. A
            number ``t > 0``: when the explicit items are the same as before, publish a new
            placement only if the current one's balance penalty on the new frequencies
            (:attr:`BuildInfo.rho_start`) exceeds ``t`` and the new one is lower; ``t = 1``
            means "only when the explicit items break the eq. 14 tolerance". This keeps
            noise in the frequency estimates from moving keys back and forth every period
            (not in the paper, whose constructions run when the number of channels changes).
    """

    algorithm: str = "readj"
    alpha: float | tuple[float, float, float] = 1.2
    sigma: float = 0.1
    resources: str = "LCL"
    utility: str = "APM"
    replicas: int = 1000
    domain_size: int = 1_000_000
    max_moves: int = 5
    readj_requires_gain: bool = False
    period: int = 50_000
    window: int | None = None
    counters: int = 3
    eps_ratio: float = 0.1
    rho_threshold: float | None = None
    params: GedikParams = field(init=False, repr=False, compare=False, default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ConfigError(f"unknown Gedik algorithm {self.algorithm!r}; use one of {', '.join(ALGORITHMS)}")
        alpha = tuple(self.alpha) if isinstance(self.alpha, list) else self.alpha
        object.__setattr__(self, "alpha", alpha)
        object.__setattr__(self, "params", GedikParams(alpha, self.sigma, self.resources, self.utility,
                                                       self.replicas, self.domain_size, self.max_moves,
                                                       self.readj_requires_gain))
        check_int_option("period", self.period, 1, self.name)
        if self.window is not None:
            check_int_option("window", self.window, 1, self.name)
        check_int_option("counters", self.counters, 2, self.name)
        e = self.eps_ratio
        if isinstance(e, bool) or not isinstance(e, (int, float)) or not 0 < e < 1:
            raise ConfigError(f"policy {self.name!r}: eps_ratio must be in (0, 1) (the paper's 0.1), got {e!r}")
        t = self.rho_threshold
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0):
            raise ConfigError(f"policy {self.name!r}: rho_threshold must be None or > 0, e.g. 1.0, got {t!r}")

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"gedik-{self.algorithm}"


@dataclass(frozen=True)
class GedikPolicy(KeyStatsPolicy):
    """Gedik's consistent + explicit hash, rebuilt from sliding lossy counters (built from
    :class:`GedikSettings`)."""

    settings: GedikSettings = field(default_factory=GedikSettings)

    def initial_snapshot(self, num_reducers: int) -> PartitionFunction:
        return PartitionFunction(num_reducers, self.settings.replicas)

    def make_planner(self, num_reducers: int) -> GedikPlanner:
        return GedikPlanner(self, num_reducers)


def build_gedik(settings: GedikSettings, shape: JobShape) -> GedikPolicy:
    """The registry factory of ``gedik-scan``, ``gedik-redist`` and ``gedik-readj``."""
    return GedikPolicy(settings, shape)
