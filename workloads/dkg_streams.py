"""The streams of the Dynamic Key Grouping paper's experiments (Dalabasmaz & Can), rebuilt.

:mod:`workloads.exp_dkg` replays them through the policies. The paper describes its
datasets only briefly; this is how they are built here:

* **country-skew-rX** (:func:`country_stream`): "the names of the 204 countries", 10M
  records, "skewness ratio" X% = the share of the most frequent key (the paper's real
  datasets' ratios, e.g. 9% for Wikipedia pageviews, match their top key's share). We draw
  ``n`` records: exactly ``round(X% * n)`` of them, at random positions, carry the hot key;
  the others are uniform over the other 203 keys. Keys are integer ids (hashed like a dpa
  key column) instead of country names; only the distribution matters.
* **twitter-election** (:func:`election_stream`): the real dataset is not available. Its
  skewness ratio is 68% (Table 2). Its tail is unknown, but Table 3 gives SG a DistCost of
  2.4491 at W = 10, i.e. the average key reaches only ~2.4 of 10 workers, so most keys are
  rare. We use a hot key with 68% of the records and a uniform tail whose number of keys is
  *calibrated* (:func:`calibrate_tail_keys`) so that SG's expected DistCost at W = 10 is
  2.4491 (keys with Poisson(``lambda``) occurrences spread at random:
  ``E[workers] = W (1 - e^(-lambda/W)) / (1 - e^(-lambda))``). That single number is fitted;
  the other seven of Table 3's StdDev/DistCost values are predictions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpa.errors import ConfigError
from workloads.harness import ScaledSizes

__all__ = [
    "COUNTRY_KEYS",
    "ELECTION_HOT",
    "PAPER_TABLE3",
    "Sizes",
    "calibrate_tail_keys",
    "country_stream",
    "election_stream",
    "expected_shuffle_dist_cost",
]

COUNTRY_KEYS = 204
"""Keys of the paper's synthetic datasets (country names)."""

ELECTION_HOT = 0.68
"""Share of the hot key of twitter-election (the paper's Table 2)."""

PAPER_TABLE3: dict[str, dict[str, float]] = {
    "SG": {"latency_ms": 559_329, "stddev": 0.0001, "dist_cost": 2.4491, "throughput": 9_511},
    "KG": {"latency_ms": 3_955_045, "stddev": 20.3202, "dist_cost": 1.0000, "throughput": 1_344},
    "PKG": {"latency_ms": 1_941_879, "stddev": 12.3513, "dist_cost": 1.1647, "throughput": 2_739},
    "DKG": {"latency_ms": 1_174_979, "stddev": 4.0972, "dist_cost": 1.2414, "throughput": 4_529},
}
"""Table 3 of the paper: twitter-election (68% skew), 5 spouts, 10 workers."""


@dataclass(frozen=True)
class Sizes(ScaledSizes):
    """Messages per stream (the paper's datasets have 10M; defaults keep a run near a minute).

    Attributes:
        workers: Streams of experiment (a).
        sweep: Streams of the skew sweep (b).
        sources: Stream of the sources experiment (c).
    """

    workers: int = 2_000_000
    sweep: int = 1_000_000
    sources: int = 1_000_000


def _check_fraction(hot_fraction: float) -> float:
    if not (isinstance(hot_fraction, (int, float)) and 0.0 <= hot_fraction <= 1.0):
        raise ConfigError(f"hot_fraction must be a number in [0, 1], got {hot_fraction!r}")
    return float(hot_fraction)


def _hot_plus_uniform(hot_fraction: float, n: int, tail_keys: int, seed: int) -> np.ndarray:
    """Key 0 on exactly ``round(f * n)`` random positions, the rest uniform over ``1..tail_keys``."""
    if not isinstance(n, (int, np.integer)) or n < 0:
        raise ConfigError(f"n must be an integer >= 0, got {n!r}")
    if not isinstance(tail_keys, (int, np.integer)) or tail_keys < 1:
        raise ConfigError(f"the stream needs at least one key besides the hot one, got {tail_keys!r}")
    rng = np.random.default_rng(seed)
    keys = 1 + np.minimum((rng.random(n) * tail_keys).astype(np.int64), tail_keys - 1)
    hot = round(_check_fraction(hot_fraction) * n)
    keys[rng.permutation(n)[:hot]] = 0
    return keys


def country_stream(hot_fraction: float, n: int, seed: int = 0, num_keys: int = COUNTRY_KEYS) -> np.ndarray:
    """The paper's ``country-skew-rX`` stream: the hot key holds exactly ``hot_fraction`` of ``n``.

    Args:
        hot_fraction: Share of the hot key (the paper's skewness ratio), in ``[0, 1]``.
        n: Records.
        seed: Seed.
        num_keys: Keys including the hot one (204 countries).

    Returns:
        ``int64`` key ids; the hot key is 0, the others ``1..num_keys-1`` (uniform).
    """
    return _hot_plus_uniform(hot_fraction, n, num_keys - 1, seed)


def expected_shuffle_dist_cost(mean_occurrences: float, num_workers: int) -> float:
    """Expected SG DistCost of keys with Poisson(``lambda``) occurrences spread at random over ``W``.

    ``W (1 - e^(-lambda/W)) / (1 - e^(-lambda))``: the mean number of distinct workers of a key,
    over the keys that occur at least once.
    """
    lam, W = float(mean_occurrences), int(num_workers)
    return W * -math.expm1(-lam / W) / -math.expm1(-lam)


def calibrate_tail_keys(n: int, hot_fraction: float = ELECTION_HOT, target: float = PAPER_TABLE3["SG"]["dist_cost"],
                        num_workers: int = 10) -> int:
    """Tail keys such that SG's expected DistCost at ``num_workers`` is ``target``.

    Solves :func:`expected_shuffle_dist_cost` ``(lambda, W) = target`` by bisection (it rises
    from 1 at ``lambda -> 0`` to ``W``) and returns ``round((1 - f) n / lambda)``.

    Raises:
        ConfigError: ``target`` is not in ``(1, W)``.
    """
    if not 1.0 < target < num_workers:
        raise ConfigError(f"target DistCost must be in (1, {num_workers}), got {target!r}")
    lo, hi = 1e-9, 1.0
    while expected_shuffle_dist_cost(hi, num_workers) < target:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if expected_shuffle_dist_cost(mid, num_workers) < target:
            lo = mid
        else:
            hi = mid
    lam = (lo + hi) / 2
    return max(1, round((1.0 - _check_fraction(hot_fraction)) * n / lam))


def election_stream(n: int, seed: int = 0, hot_fraction: float = ELECTION_HOT,
                    tail_keys: int | None = None) -> tuple[np.ndarray, int]:
    """The twitter-election stand-in: a 68% hot key plus a calibrated uniform tail.

    Returns:
        ``(keys, tail_keys)``.
    """
    tail = calibrate_tail_keys(n, hot_fraction) if tail_keys is None else tail_keys
    return _hot_plus_uniform(hot_fraction, n, tail, seed), tail
