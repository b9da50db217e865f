"""The streams and routing replays of the PKG paper experiments (:mod:`workloads.exp_pkg`).

Choices made where the paper leaves room (all documented in the report as well):

* **Zipf stand-ins for WP and TW.** The real logs are not used. Each is a bounded Zipf
  stream of ``n`` messages over ``K`` keys, with ``K`` chosen so that keys per message
  equals the dataset's (WP: 2.9M keys / 22M messages, TW: 31M / 1.2G) and the exponent
  ``z`` solved (:func:`solve_zipf_exponent`) so that the most frequent key has exactly the
  dataset's ``p1`` (WP 9.32%, TW 2.67%, Table I). Only ``p1`` and the key count are
  matched; the rest of the real distributions is not.
* **Imbalance normalisation**: see :data:`workloads.imbalance.IMBALANCE_DOC`. The numbers
  compared with the paper are ``I(n) / n``, the imbalance at the end of the stream over the
  number of messages (the paper's unbalanced cells are exactly that; its balanced
  Off-Greedy cells rule out a time average).
* **Global vs local.** Table II predates the paper's local estimation (Q2 says "so far, it
  still uses global information about the load"), so its five methods run with one router
  that sees the whole stream (``shared_router=True``): PKG is the paper's G, PoTC and
  On-Greedy get the coordinated key tables their definitions assume, Off-Greedy gets the
  exact key frequencies of the stream. A "PKG (L5)" row (local estimation, 5 sources, what
  a dpa job does) is added for reference.
* **Periodic probing (LP)** is not a dpa policy (the routers of :mod:`dpa.routing.policies.grouping`
  never see the reducers' real load). :func:`replay_pkg` implements it here: ``S`` PKG
  routers (the same :class:`~dpa.routing.policies.grouping.PKGRouter` objects a dpa job uses)
  route the stream in segments of ``probe_every`` messages; after each segment every
  router's local load vector is set to the true worker loads, as the paper describes
  ("the local estimate vector is set to the actual load of the workers"). The paper probes
  every minute (``T_p = 1``) on logs of a day (WP); we probe :data:`PROBES_PER_STREAM`
  times per stream (1440 = the minutes of a day). Without probing, :func:`replay_pkg` is
  exactly ``simulate(..., "pkg", num_sources=S)`` (tested).
* **Figure 9** does not say whether it used G or L; we use L with 5 sources (the paper's
  default). "Balanced" means an imbalance of at most :data:`BALANCED` (1e-4; the paper's
  balanced cells are 3.4e-10 .. 1.9e-5, its unbalanced ones >= 3.4e-3).
* **Drift.** The cashtag dataset (CT) is not available; :func:`drift_stream` uses
  :func:`workloads.generators.drifting` with CT's 2.9k keys, a hot key with 10% of the
  messages (about WP's ``p1``) that changes every tenth of the stream, and uniform
  background keys.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpa.errors import ConfigError
from dpa.routing.policies.grouping import PKGPolicy, PKGSettings
from dpa.tools.simulate import simulate
from workloads.generators import (
    LOGNORMAL_PRESETS,
    drifting,
    lognormal_preset,
    zipf,
    zipf_probabilities,
)
from workloads.harness import ScaledSizes
from workloads.imbalance import hash_keys, imbalance_of, imbalance_series, imbalance_summary

__all__ = [
    "BALANCED",
    "PAPER_TABLE2",
    "PROBES_PER_STREAM",
    "TABLE2_VARIANTS",
    "TABLE2_WORKERS",
    "ZIPF_DATASETS",
    "PaperDataset",
    "Sizes",
    "Stream",
    "Variant",
    "drift_stream",
    "jaccard",
    "lognormal_stream",
    "paper_value",
    "probe_interval",
    "replay_pkg",
    "run_variant",
    "solve_zipf_exponent",
    "zipf_num_keys",
    "zipf_stream",
    "zipf_top_share",
]


# ============================================================================ paper data
@dataclass(frozen=True)
class PaperDataset:
    """A real dataset of the PKG paper's Table I.

    Attributes:
        name: Symbol in the paper.
        messages: Messages in the dataset.
        keys: Distinct keys.
        p1: Fraction of messages with the most frequent key.
    """

    name: str
    messages: int
    keys: int
    p1: float


WP = PaperDataset("WP", messages=22_000_000, keys=2_900_000, p1=0.0932)
TW = PaperDataset("TW", messages=1_200_000_000, keys=31_000_000, p1=0.0267)
ZIPF_DATASETS: dict[str, PaperDataset] = {"WP": WP, "TW": TW}

TABLE2_WORKERS = (5, 10, 50, 100)
"""The worker counts of Table II."""

PAPER_TABLE2: dict[str, dict[str, tuple[float, float, float, float]]] = {
    "WP": {
        "pkg": (3.7e-8, 1.3e-7, 2.7e-2, 3.7e-2),
        "off-greedy": (3.7e-8, 4.1e-8, 7.4e-2, 8.3e-2),
        "on-greedy": (3.6e-7, 6.4e-3, 7.4e-2, 8.3e-2),
        "potc": (7.3e-7, 7.8e-3, 7.4e-2, 8.3e-2),
        "hash": (6.4e-2, 7.8e-2, 9.2e-2, 9.2e-2),
    },
    "TW": {
        "pkg": (3.4e-10, 1.4e-9, 2.3e-9, 3.4e-3),
        "off-greedy": (3.4e-10, 6e-10, 6.7e-3, 1.7e-2),
        "on-greedy": (7.2e-9, 7.9e-8, 1.0e-2, 1.7e-2),
        "potc": (1.9e-5, 4.3e-6, 1.2e-2, 1.7e-2),
        "hash": (3.5e-2, 3.2e-2, 2.0e-2, 2.8e-2),
    },
}
"""Table II of the paper: fraction of average imbalance per dataset, method and W (5, 10, 50, 100)."""

BALANCED = 1e-4
"""Imbalance (fraction of messages) at or below which a cell counts as balanced."""

PROBES_PER_STREAM = 1440
"""LP probes per stream: the paper's 1-minute probe on a one-day log."""

DRIFT_KEYS = 2_900
DRIFT_HOT_FRACTION = 0.10
DRIFT_PERIODS = 10


@dataclass(frozen=True)
class Sizes(ScaledSizes):
    """Messages per stream of each experiment (defaults keep a run at ~2-3 minutes).

    Attributes:
        table2: Table II (a) streams.
        lognormal: LN1 / LN2 (b) streams.
        sources: Local vs global (c) streams.
        choices: d-choices (d) streams (one per seed).
        drift: Drifting (e) stream.
    """

    table2: int = 2_000_000
    lognormal: int = 2_000_000
    sources: int = 1_000_000
    choices: int = 300_000
    drift: int = 1_000_000


# ============================================================================ streams
def zipf_top_share(z: float, num_keys: int) -> float:
    """``p1``, the probability of the most frequent key, of a bounded Zipf(``z``, ``K``)."""
    return float(zipf_probabilities(z, num_keys)[0])


def solve_zipf_exponent(p1: float, num_keys: int, tol: float = 1e-9) -> float:
    """The Zipf exponent ``z`` whose most frequent key has probability ``p1`` over ``K`` keys.

    ``p1(z) = 1 / sum_{k=1..K} k**-z`` increases strictly with ``z`` from ``1/K`` (``z = 0``)
    towards 1, so the root is unique; it is found by bisection on ``z``.

    Args:
        p1: Target share of the most frequent key, in ``[1/K, 1)``.
        num_keys: ``K`` (>= 2).
        tol: Width of the final bracket on ``z``.

    Returns:
        ``z`` with ``zipf_top_share(z, K)`` equal to ``p1`` up to the bracket width.

    Raises:
        ConfigError: ``p1`` cannot be reached with ``K`` keys.
    """
    if not isinstance(num_keys, (int, np.integer)) or num_keys < 2:
        raise ConfigError(f"solve_zipf_exponent needs num_keys >= 2, got {num_keys!r}")
    if not (1.0 / num_keys <= p1 < 1.0):
        raise ConfigError(f"a Zipf stream over {num_keys} keys has p1 in [1/{num_keys}, 1); "
                          f"p1={p1!r} is out of range (use more keys or a larger p1)")
    lo, hi = 0.0, 1.0
    while zipf_top_share(hi, num_keys) < p1:
        lo, hi = hi, hi * 2
        if hi > 1e3:  # unreachable for p1 < 1: p1(1000) == 1 - 2**-1000
            raise ConfigError(f"no Zipf exponent up to 1000 reaches p1={p1} with K={num_keys}")
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if zipf_top_share(mid, num_keys) < p1:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def zipf_num_keys(dataset: PaperDataset, n: int) -> int:
    """Keys of the Zipf stand-in of ``dataset`` with ``n`` messages: the dataset's keys per message.

    At least ``ceil(2 / p1)`` so that ``p1`` stays reachable.
    """
    return max(math.ceil(2 / dataset.p1), round(n * dataset.keys / dataset.messages))


@dataclass
class Stream:
    """A key stream, hashed once, and how it was made.

    Attributes:
        name: Short name (``"WP"``, ``"LN1"``, ...).
        hashes: ``uint32`` key hashes in arrival order.
        info: Generator parameters and measured properties (JSON-friendly).
    """

    name: str
    hashes: np.ndarray
    info: dict[str, Any]

    @property
    def p1(self) -> float:
        """Measured share of the most frequent key."""
        return float(self.info["p1_measured"])


def _measured(hashes: np.ndarray) -> dict[str, Any]:
    _, first, counts = np.unique(hashes, return_index=True, return_counts=True)
    n = len(hashes)
    return {"messages": n, "distinct_keys": len(counts),
            "new_keys_second_half": int((first >= n // 2).sum()),
            "p1_measured": float(counts.max() / n) if n else 0.0}


def zipf_stream(name: str, n: int, seed: int = 0) -> Stream:
    """The Zipf stand-in for the paper's ``"WP"`` or ``"TW"`` dataset (see the module docstring)."""
    try:
        ds = ZIPF_DATASETS[name]
    except KeyError:
        raise ConfigError(f"unknown Zipf dataset {name!r}; use one of {', '.join(ZIPF_DATASETS)}") from None
    K = zipf_num_keys(ds, n)
    z = solve_zipf_exponent(ds.p1, K)
    keys = zipf(z, K, n, seed)["key"].to_numpy()
    hashes = hash_keys(keys)
    info = {"kind": "zipf", "dataset": name, "num_keys": K, "z": z, "p1_target": ds.p1,
            "p1_model": zipf_top_share(z, K), "paper_messages": ds.messages, "paper_keys": ds.keys,
            "seed": seed, **_measured(hashes)}
    return Stream(name, hashes, info)


def lognormal_stream(name: str, n: int, seed: int = 0) -> Stream:
    """The paper's LN1 / LN2 stream (:func:`workloads.generators.lognormal_preset`) with ``n`` messages."""
    if name not in LOGNORMAL_PRESETS:
        raise ConfigError(f"unknown log-normal dataset {name!r}; use one of {', '.join(LOGNORMAL_PRESETS)}")
    preset = LOGNORMAL_PRESETS[name]
    keys = lognormal_preset(name, n, seed)["key"].to_numpy()
    hashes = hash_keys(keys)
    info = {"kind": "lognormal", "dataset": name, "mu": preset.mu, "sigma": preset.sigma,
            "p1_target": preset.p1, "paper_messages": preset.messages, "paper_keys": preset.keys,
            "seed": seed, **_measured(hashes)}
    return Stream(name, hashes, info)


def drift_stream(n: int, seed: int = 0, num_keys: int = DRIFT_KEYS, hot_fraction: float = DRIFT_HOT_FRACTION,
                 periods: int = DRIFT_PERIODS) -> Stream:
    """A stream whose hot key changes ``periods`` times (:func:`workloads.generators.drifting`)."""
    period = max(1, math.ceil(n / periods))
    keys = drifting(num_keys, n, hot_fraction, period, seed)["key"].to_numpy()
    hashes = hash_keys(keys)
    info = {"kind": "drifting", "dataset": "drift", "num_keys": num_keys, "hot_fraction": hot_fraction,
            "period": period, "seed": seed, **_measured(hashes)}
    return Stream("drift", hashes, info)


# ============================================================================ replay
def replay_pkg(hashes: np.ndarray, num_sources: int, num_workers: int, probe_every: int | None = None,
               d: int = 2) -> np.ndarray:
    """PKG with local load estimation and optional periodic probing (the paper's L and LP).

    A thin wrapper over :func:`dpa.tools.simulate.simulate` (``probe_every``): message ``i``
    belongs to source ``i % S``; each source routes with its own
    :class:`~dpa.routing.policies.grouping.PKGRouter`, and after every ``probe_every`` messages
    every router's load estimate is set to the true load of every worker.

    Args:
        hashes: ``uint32`` key hashes in arrival order.
        num_sources: ``S``.
        num_workers: ``W``.
        probe_every: Messages between probes; None = never (plain L).
        d: Choices per key.

    Returns:
        The worker of each message (``int64``).

    Raises:
        ConfigError: Bad counts.
    """
    for label, v in (("num_sources", num_sources), ("num_workers", num_workers), ("d", d)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ConfigError(f"replay_pkg: {label} must be an integer >= 1, got {v!r}")
    if probe_every is not None and (not isinstance(probe_every, (int, np.integer)) or probe_every < 1):
        raise ConfigError(f"replay_pkg: probe_every must be an integer >= 1 or None, got {probe_every!r}")
    hashes = np.asarray(hashes).astype(np.uint32, copy=False)
    res = simulate(hashes, PKGPolicy(PKGSettings(d=d)), num_sources=int(num_sources), num_workers=int(num_workers),
                   keys_are_hashes=True, probe_every=None if probe_every is None else int(probe_every),
                   num_samples=1)
    return res.destinations.astype(np.int64)


def probe_interval(n: int) -> int:
    """Messages between LP probes for a stream of ``n`` messages."""
    return max(1, n // PROBES_PER_STREAM)


@dataclass(frozen=True)
class Variant:
    """One way of routing a stream.

    Attributes:
        label: Name in tables and plots.
        policy: dpa policy name.
        sources: ``S`` (ignored with ``shared``).
        shared: One router for the whole stream (global knowledge, the paper's G).
        probe: Use :func:`replay_pkg` with probing (policy must be ``pkg``).
        d: Choices (``pkg`` only).
    """

    label: str
    policy: str
    sources: int = 1
    shared: bool = False
    probe: bool = False
    d: int = 2


TABLE2_VARIANTS = (
    Variant("PKG", "pkg", shared=True),
    Variant("Off-Greedy", "off-greedy", shared=True),
    Variant("On-Greedy", "on-greedy", shared=True),
    Variant("PoTC", "potc", shared=True),
    Variant("Hashing (KG)", "hash"),
    Variant("PKG (L5)", "pkg", sources=5),
)
"""Table II's rows in the paper's order (PKG = global oracle), plus PKG with local estimation."""

_PAPER_ROW = {"PKG": "pkg", "Off-Greedy": "off-greedy", "On-Greedy": "on-greedy", "PoTC": "potc",
              "Hashing (KG)": "hash"}


def run_variant(stream: Stream, variant: Variant, num_workers: int, seed: int = 0,
                keep_destinations: bool = False) -> dict[str, Any]:
    """Routes ``stream`` with ``variant`` to ``num_workers`` workers and measures it.

    Returns:
        The :func:`~workloads.imbalance.imbalance_summary` entries plus ``dist_cost``
        (None for probing replays), ``wall_s`` and, with ``keep_destinations``, the
        ``destinations`` array (not JSON; callers pop it).
    """
    started = time.perf_counter()
    n = len(stream.hashes)
    if variant.probe:
        if variant.policy != "pkg":
            raise ConfigError(f"variant {variant.label!r}: probing is implemented for 'pkg' only")
        dest = replay_pkg(stream.hashes, variant.sources, num_workers, probe_interval(n), variant.d)
        times, series = imbalance_series(dest, num_workers)
        out: dict[str, Any] = imbalance_summary(times, series, n, num_workers)
        out["dist_cost"] = None
    else:
        opts = {"d": variant.d} if variant.policy == "pkg" and variant.d != 2 else {}
        r = simulate(stream.hashes, variant.policy, num_sources=variant.sources, num_workers=num_workers,
                     seed=seed, keys_are_hashes=True, shared_router=variant.shared, **opts)
        out = imbalance_of(r)
        out["dist_cost"] = r.dist_cost
        dest = r.destinations
    out["wall_s"] = time.perf_counter() - started
    if keep_destinations:
        out["destinations"] = np.asarray(dest)
    return out


def jaccard(agreement: float) -> float:
    """Jaccard overlap of two routings' (message, worker) pair sets that agree on a share ``a``.

    Both sets have ``n`` pairs and share ``a n``, so ``|A & B| / |A | B| = a / (2 - a)``.
    """
    return agreement / (2.0 - agreement)


def paper_value(dataset: str, label: str, W: int) -> float | None:
    """The paper's Table II value of a row label (``"PKG"``, ...) at ``W``; None if it has none."""
    row = _PAPER_ROW.get(label)
    if row is None or dataset not in PAPER_TABLE2 or W not in TABLE2_WORKERS:
        return None
    return PAPER_TABLE2[dataset][row][TABLE2_WORKERS.index(W)]
