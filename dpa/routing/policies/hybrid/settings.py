"""The ``hybrid`` policy's settings (:class:`HybridSettings`): the DPA ring's, plus the
hot-key rule's threshold, widths and shares.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpa.errors import ConfigError
from dpa.routing.policies.common import check_int_option
from dpa.routing.policies.ring.policy import (
    RingSettings,
)


@dataclass(frozen=True)
class HybridSettings(RingSettings):
    """Settings of ``hybrid``: :class:`RingSettings` for the tail plus hot-key splitting.

    Args:
        method: Ring method for the tail: ``"halving"`` (default) or ``"doubling"``.
        tau, max_rounds, initial_tokens, patience, min_gap, balance_on, min_gap_s: The ring's, see
            :class:`RingSettings` (``max_rounds=0``: hot-key splitting only).
        theta: A key is hot at ``theta`` of all records (default ``1 / (8 R)``: an eighth
            of a fair share, so that the warm keys below the hottest are placed by shares too
            rather than left to the ring, which can only move them whole).
        min_width: Fewest reducers a hot key is split over.
        slack: Expected loads within ``(1 + slack)`` of the mean count as balanced.
        share_step: A new snapshot is published when a hot key's planned share of some
            candidate moved by more than this (besides hot-set and candidate changes).
        min_count: Fewest records before a key can be hot.
        capacity: Counters of the balancer's SpaceSaving sketch.
        level_tau: With no hot key, the ring is levelled on the records each reducer
            holds when the most loaded is predicted to end more than this fraction above
            the mean (:mod:`dpa.routing.policies.hybrid.level`; not in elastic jobs).
        level_rounds: Times each reducer's tokens may be trimmed by that levelling
            (0 = no levelling: the ring's rule alone, as in ``halving``).
    """

    method: str = "halving"
    theta: float | None = None
    min_width: int = 2
    slack: float = 0.02
    share_step: float = 0.05
    min_count: int = 2
    capacity: int = 4096
    level_tau: float = 0.05
    level_rounds: int = 4

    def __post_init__(self) -> None:
        if self.method not in ("halving", "doubling"):
            raise ConfigError(f"policy 'hybrid': method must be 'halving' or 'doubling', got {self.method!r}")
        super().__post_init__()
        check_int_option("min_count", self.min_count, 1, "hybrid")
        check_int_option("capacity", self.capacity, 1, "hybrid")
        if self.theta is not None and not (isinstance(self.theta, (int, float)) and 0 < self.theta <= 1):
            raise ConfigError(f"policy 'hybrid': theta must be a fraction in (0, 1], got {self.theta!r}")
        check_int_option("min_width", self.min_width, 1, "hybrid")
        check_int_option("level_rounds", self.level_rounds, 0, "hybrid")
        t = self.level_tau
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not (0 <= t < float("inf")):
            raise ConfigError(f"policy 'hybrid': level_tau must be a number >= 0 (e.g. 0.05), got {t!r}")
        if not (isinstance(self.slack, (int, float)) and self.slack >= 0):
            raise ConfigError(f"policy 'hybrid': slack must be a number >= 0, got {self.slack!r}")

    @property
    def name(self) -> str:  # type: ignore[override]
        return "hybrid"


