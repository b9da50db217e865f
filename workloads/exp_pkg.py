"""Reproduction of the simulation experiments of the Partial Key Grouping paper (Nasir et al.).

``python -m workloads.exp_pkg --out results/pkg`` replays synthetic key streams through
dpa's policies with :func:`dpa.simulate.simulate` (no Ray) and writes ``pkg.json``,
``pkg.md`` and PNG plots into ``--out``. The experiments:

(a) **Table II**: imbalance of H (key grouping), PoTC, On-Greedy, Off-Greedy and PKG on
    Zipf streams standing in for the paper's Wikipedia (WP) and Twitter (TW) datasets, for
    ``W = 5, 10, 50, 100`` workers, beside the paper's values.
(b) The same grid on the log-normal streams **LN1 / LN2** (:data:`workloads.generators.LN1`).
(c) **Local vs global load estimation** (Q2, Figures 4-5): PKG with a global load oracle
    (G), with local estimation at ``S = 1..20`` sources (L), and with local estimation plus
    periodic probing (LP), beside H.
(d) **d choices** (Q4, Figure 9): PKG with ``d = 1..10`` on Zipf ``z = 1.2``, ``K = 1M``
    (three hash draws).
(e) A **drifting** stream (Q3, the cashtag experiment's question): the hot key changes
    every tenth of the stream.

Choices made where the paper leaves room (all documented in the report as well):

* **Zipf stand-ins for WP and TW.** The real logs are not used. Each is a bounded Zipf
  stream of ``n`` messages over ``K`` keys, with ``K`` chosen so that keys per message
  equals the dataset's (WP: 2.9M keys / 22M messages, TW: 31M / 1.2G) and the exponent
  ``z`` solved (:func:`solve_zipf_exponent`) so that the most frequent key has exactly the
  dataset's ``p1`` (WP 9.32%, TW 2.67%, Table I). Only ``p1`` and the key count are
  matched; the rest of the real distributions is not.
* **Imbalance normalisation**: see :data:`workloads.exp_common.IMBALANCE_DOC`. The numbers
  compared with the paper are ``I(n) / n``, the imbalance at the end of the stream over the
  number of messages (the paper's unbalanced cells are exactly that; its balanced
  Off-Greedy cells rule out a time average).
* **Global vs local.** Table II predates the paper's local estimation (Q2 says "so far, it
  still uses global information about the load"), so its five methods run with one router
  that sees the whole stream (``shared_router=True``): PKG is the paper's G, PoTC and
  On-Greedy get the coordinated key tables their definitions assume, Off-Greedy gets the
  exact key frequencies of the stream. A "PKG (L5)" row (local estimation, 5 sources, what
  a dpa job does) is added for reference.
* **Periodic probing (LP)** is not a dpa policy (the routers of :mod:`dpa.partitioners.grouping`
  never see the reducers' real load). :func:`replay_pkg` implements it here: ``S`` PKG
  routers (the same :class:`~dpa.partitioners.grouping.PKGRouter` objects a dpa job uses)
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

import argparse
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpa.errors import ConfigError
from dpa.partitioners.grouping import PKGPolicy
from dpa.simulate import simulate
from workloads.exp_common import (
    IMBALANCE_DOC,
    Claim,
    StageTimer,
    claims_markdown,
    hash_keys,
    imbalance_of,
    imbalance_series,
    imbalance_summary,
    markdown_table,
    new_figure,
    run_metadata,
    save_figure,
    sci,
    write_json,
)
from workloads.generators import (
    LOGNORMAL_PRESETS,
    drifting,
    lognormal_preset,
    zipf,
    zipf_probabilities,
)

__all__ = [
    "BALANCED",
    "PAPER_TABLE2",
    "PROBES_PER_STREAM",
    "TABLE2_WORKERS",
    "ZIPF_DATASETS",
    "PaperDataset",
    "Sizes",
    "Stream",
    "Variant",
    "drift_stream",
    "evaluate_claims",
    "lognormal_stream",
    "main",
    "markdown",
    "jaccard",
    "replay_pkg",
    "run_all",
    "run_choices",
    "run_drift",
    "run_grid",
    "run_sources",
    "run_variant",
    "solve_zipf_exponent",
    "zipf_num_keys",
    "zipf_stream",
    "zipf_top_share",
]

logger = logging.getLogger(__name__)

Log = Callable[[str], None] | None


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

CHOICES_Z = 1.2
CHOICES_KEYS = 1_000_000
CHOICES_WORKERS = (5, 10, 40, 50, 100)
CHOICES_D = tuple(range(1, 11))
CHOICES_SEEDS = (0, 1, 2)
SOURCES = (1, 2, 5, 10, 20)
SOURCES_WORKERS = (5, 10, 50)
DRIFT_KEYS = 2_900
DRIFT_HOT_FRACTION = 0.10
DRIFT_PERIODS = 10
DRIFT_WORKERS = (5, 10, 50)


@dataclass(frozen=True)
class Sizes:
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

    def scaled(self, factor: float) -> Sizes:
        """All sizes times ``factor`` (at least 1,000 messages each)."""
        if not (factor > 0 and math.isfinite(factor)):
            raise ConfigError(f"--scale must be a finite number > 0, got {factor!r}")
        return Sizes(**{k: max(1_000, int(v * factor)) for k, v in asdict(self).items()})


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

    A thin wrapper over :func:`dpa.simulate.simulate` (``probe_every``): message ``i``
    belongs to source ``i % S``; each source routes with its own
    :class:`~dpa.partitioners.grouping.PKGRouter`, and after every ``probe_every`` messages
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
    res = simulate(hashes, PKGPolicy(d=d), num_sources=int(num_sources), num_workers=int(num_workers),
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
        The :func:`~workloads.exp_common.imbalance_summary` entries plus ``dist_cost``
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


# ============================================================================ experiments
def run_grid(streams: Sequence[Stream], workers: Sequence[int], variants: Sequence[Variant],
             seed: int = 0, log: Log = None) -> dict[str, Any]:
    """Every variant on every stream and worker count (Table II and the LN grid).

    Returns:
        ``{"workers": [...], "streams": {name: info}, "cells": {name: {label: [metrics per W]}}}``.
    """
    out: dict[str, Any] = {"workers": list(workers), "streams": {}, "cells": {}}
    for stream in streams:
        out["streams"][stream.name] = stream.info
        cells: dict[str, list[dict[str, Any]]] = {}
        for v in variants:
            cells[v.label] = [run_variant(stream, v, W, seed) for W in workers]
            if log:
                log(f"  {stream.name:4s} {v.label:13s} " + " ".join(
                    f"W={W}:{sci(c['paper'])}" for W, c in zip(workers, cells[v.label])))
        out["cells"][stream.name] = cells
    return out


def run_sources(streams: Sequence[Stream], workers: Sequence[int] = SOURCES_WORKERS,
                sources: Sequence[int] = SOURCES, seed: int = 0, log: Log = None) -> dict[str, Any]:
    """H, PKG G, and PKG L / LP for each number of sources (Q2, Figures 4-5).

    Also measures how often G and L5 send a message to the same worker (the paper reports
    a 47% agreement on WP).

    Returns:
        ``{"workers", "sources", "probe_every", "streams", "cells": {name: {str(W): {"H": m,
        "G": m, "L": {str(S): m}, "LP": {str(S): m}, "agreement_G_L5": float}}}}``.
    """
    out: dict[str, Any] = {"workers": list(workers), "sources": list(sources), "streams": {}, "cells": {},
                           "probe_every": {}}
    for stream in streams:
        out["streams"][stream.name] = stream.info
        out["probe_every"][stream.name] = probe_interval(len(stream.hashes))
        per_w: dict[str, Any] = {}
        for W in workers:
            g = run_variant(stream, Variant("G", "pkg", shared=True), W, seed, keep_destinations=True)
            g_dest = g.pop("destinations")
            cell: dict[str, Any] = {"H": run_variant(stream, Variant("H", "hash"), W, seed), "G": g,
                                    "L": {}, "LP": {}}
            for S in sources:
                lv = run_variant(stream, Variant(f"L{S}", "pkg", sources=S), W, seed, keep_destinations=True)
                l_dest = lv.pop("destinations")
                if S == 5:
                    cell["agreement_G_L5"] = float(np.mean(l_dest == g_dest))
                cell["L"][str(S)] = lv
                cell["LP"][str(S)] = run_variant(stream, Variant(f"L{S}P", "pkg", sources=S, probe=True), W, seed)
            per_w[str(W)] = cell
            if log:
                log(f"  {stream.name:4s} W={W:3d} H={sci(cell['H']['paper'])} G={sci(g['paper'])} L: "
                    + " ".join(f"S{S}={sci(cell['L'][str(S)]['paper'])}" for S in sources)
                    + " | LP: " + " ".join(f"S{S}={sci(cell['LP'][str(S)]['paper'])}" for S in sources))
        out["cells"][stream.name] = per_w
    return out


def run_choices(n: int, seeds: Sequence[int] = CHOICES_SEEDS, z: float = CHOICES_Z,
                num_keys: int = CHOICES_KEYS, choices: Sequence[int] = CHOICES_D,
                workers: Sequence[int] = CHOICES_WORKERS, num_sources: int = 5, log: Log = None) -> dict[str, Any]:
    """PKG (local estimation, ``num_sources`` sources) with ``d`` choices (Q4, Figure 9).

    Whether the few hottest keys' ``d`` hash choices collide decides the outcome near the
    threshold, so the experiment runs one stream per seed (the seed permutes which key
    id gets which rank, i.e. draws new hash choices for the hot keys) and reports the
    median over these draws and how many of them were balanced (<= :data:`BALANCED`).
    The lower bound stored with each cell is ``max(0, p1 / d - 1 / W)``: the hottest key
    alone puts at least ``p1 / d`` of the messages on one of its ``<= d`` workers.

    Returns:
        ``{"stream": info, "seeds", "choices", "workers", "cells": {str(W): {str(d):
        {"paper": median, "draws": [I(n)/n per seed], "balanced_draws": int}}},
        "bound": {str(W): {str(d): float}}}``.
    """
    streams = []
    for seed in seeds:
        hashes = hash_keys(zipf(z, num_keys, n, seed)["key"].to_numpy())
        streams.append(Stream("ZF", hashes, _measured(hashes)))
    p1 = zipf_top_share(z, num_keys)
    info = {"kind": "zipf", "dataset": "ZF", "num_keys": num_keys, "z": z, "p1_model": p1, "messages": n,
            "p1_measured": [s.p1 for s in streams]}
    out: dict[str, Any] = {"stream": info, "seeds": list(seeds), "choices": list(choices),
                           "workers": list(workers), "sources": num_sources, "cells": {}, "bound": {}}
    for W in workers:
        cells = {}
        for d in choices:
            v = Variant(f"d={d}", "pkg", sources=num_sources, d=d)
            draws = [run_variant(st, v, W, seed)["paper"] for st, seed in zip(streams, seeds)]
            cells[str(d)] = {"paper": float(np.median(draws)), "draws": draws,
                             "balanced_draws": sum(x <= BALANCED for x in draws)}
        out["cells"][str(W)] = cells
        out["bound"][str(W)] = {str(d): max(0.0, p1 / d - 1 / W) for d in choices}
        if log:
            log(f"  ZF z={z} W={W:3d} median " + " ".join(
                f"d{d}={sci(c['paper'])}[{c['balanced_draws']}/{len(seeds)}]" for d, c in cells.items()))
    return out


DRIFT_VARIANTS = (
    Variant("H", "hash"),
    Variant("On-Greedy", "on-greedy", shared=True),
    Variant("PKG (G)", "pkg", shared=True),
    Variant("PKG (L5)", "pkg", sources=5),
    Variant("PKG (L5P)", "pkg", sources=5, probe=True),
)


def run_drift(n: int, seed: int = 0, workers: Sequence[int] = DRIFT_WORKERS, series_workers: int = 10,
              log: Log = None) -> dict[str, Any]:
    """H, On-Greedy and PKG (G, L5, L5P) on a drifting stream (Q3).

    Returns:
        ``{"stream": info, "workers", "cells": {str(W): {label: metrics}}, "series":
        {label: {"t": [...], "I_over_t": [...]}}}`` with the series of ``I(t) / t`` at
        ``W = series_workers``.
    """
    stream = drift_stream(n, seed)
    out: dict[str, Any] = {"stream": stream.info, "workers": list(workers), "cells": {}, "series": {},
                           "series_workers": series_workers}
    for W in workers:
        cells = {}
        for v in DRIFT_VARIANTS:
            m = run_variant(stream, v, W, seed, keep_destinations=True)
            dest = m.pop("destinations")
            cells[v.label] = m
            if W == series_workers:
                t, s = imbalance_series(dest, W, 200)
                out["series"][v.label] = {"t": t.tolist(), "I_over_t": (s / t).tolist()}
        out["cells"][str(W)] = cells
        if log:
            log(f"  drift W={W:3d} " + " ".join(f"{k}={sci(c['paper'])}" for k, c in cells.items()))
    return out


def run_all(sizes: Sizes = Sizes(), seed: int = 0, log: Log = None,
            table2_workers: Sequence[int] = TABLE2_WORKERS, sources: Sequence[int] = SOURCES,
            sources_workers: Sequence[int] = SOURCES_WORKERS, choices: Sequence[int] = CHOICES_D,
            choices_workers: Sequence[int] = CHOICES_WORKERS, choices_keys: int = CHOICES_KEYS,
            drift_workers: Sequence[int] = DRIFT_WORKERS) -> dict[str, Any]:
    """Runs experiments (a)-(e) and returns their results (JSON-friendly)."""
    timed = StageTimer(log)

    def table2() -> dict[str, Any]:
        return run_grid([zipf_stream(name, sizes.table2, seed) for name in ZIPF_DATASETS], table2_workers,
                        TABLE2_VARIANTS, seed, log)

    def ln() -> dict[str, Any]:
        return run_grid([lognormal_stream(name, sizes.lognormal, seed) for name in LOGNORMAL_PRESETS],
                        table2_workers, TABLE2_VARIANTS, seed, log)

    def src() -> dict[str, Any]:
        streams = [zipf_stream(name, sizes.sources, seed) for name in ZIPF_DATASETS]
        streams += [lognormal_stream(name, sizes.sources, seed) for name in LOGNORMAL_PRESETS]
        return run_sources(streams, sources_workers, sources, seed, log)

    results = {
        "sizes": asdict(sizes),
        "seed": seed,
        "table2": timed("table2", table2),
        "lognormal": timed("lognormal", ln),
        "sources": timed("sources", src),
        "choices": timed("choices", lambda: run_choices(sizes.choices, tuple(seed + s for s in CHOICES_SEEDS),
                                                        choices=choices,
                                                        workers=choices_workers, num_keys=choices_keys,
                                                        log=log)),
        "drift": timed("drift", lambda: run_drift(sizes.drift, seed, drift_workers, log=log)),
    }
    results["timings_s"] = timed.timings
    results["claims"] = [c.to_dict() for c in evaluate_claims(results)]
    return results


# ============================================================================ claims
def jaccard(agreement: float) -> float:
    """Jaccard overlap of two routings' (message, worker) pair sets that agree on a share ``a``.

    Both sets have ``n`` pairs and share ``a n``, so ``|A & B| / |A | B| = a / (2 - a)``.
    """
    return agreement / (2.0 - agreement)


def _paper_value(dataset: str, label: str, W: int) -> float | None:
    row = _PAPER_ROW.get(label)
    if row is None or dataset not in PAPER_TABLE2 or W not in TABLE2_WORKERS:
        return None
    return PAPER_TABLE2[dataset][row][TABLE2_WORKERS.index(W)]


def _abs(metric: dict[str, Any], n: int) -> float:
    """The imbalance ``I(n)`` in messages."""
    return metric["paper"] * n


def evaluate_claims(results: dict[str, Any]) -> list[Claim]:
    """The paper's simulation claims with verdicts computed from ``results`` (of :func:`run_all`)."""
    claims: list[Claim] = []
    t2 = results["table2"]
    workers = t2["workers"]

    # -- Table II: regime (balanced or not) per cell, ours vs the paper
    agree, total, mismatches = 0, 0, []
    for ds, cells in t2["cells"].items():
        for label, per_w in cells.items():
            for W, m in zip(workers, per_w):
                paper = _paper_value(ds, label, W)
                if paper is None:
                    continue
                total += 1
                if (paper <= BALANCED) == (m["paper"] <= BALANCED):
                    agree += 1
                else:
                    mismatches.append(f"{ds} {label} W={W}: ours {sci(m['paper'])}, paper {sci(paper)}")
    claims.append(Claim(
        "Table II's pattern of balanced (<= 1e-4) and unbalanced cells", "Table II",
        total > 0 and agree == total,
        f"{agree}/{total} cells in the same regime" + (f"; differ: {'; '.join(mismatches)}" if mismatches else "")))

    # -- saturated cells: close to the paper (both are ~ p1/d - 1/W)
    close, sat, far = 0, 0, []
    for ds, cells in t2["cells"].items():
        for label, per_w in cells.items():
            for W, m in zip(workers, per_w):
                paper = _paper_value(ds, label, W)
                if paper is None or paper <= BALANCED or m["paper"] <= BALANCED:
                    continue
                sat += 1
                ratio = m["paper"] / paper
                if 0.5 <= ratio <= 2:
                    close += 1
                else:
                    far.append(f"{ds} {label} W={W}: x{ratio:.2f}")
    claims.append(Claim(
        "unbalanced cells: values of Table II", "Table II", sat > 0 and close >= 0.75 * sat,
        f"{close}/{sat} unbalanced cells within a factor 2 of the paper" + (f"; others: {', '.join(far)}" if far else "")))

    # -- PKG far below hashing; PKG best
    ratios = []
    for ds, cells in t2["cells"].items():
        for W, p, h in zip(workers, cells["PKG"], cells["Hashing (KG)"]):
            ratios.append((ds, W, h["paper"] / p["paper"] if p["paper"] > 0 else math.inf))
    big = [r for r in ratios if r[2] >= 100]
    claims.append(Claim(
        "PKG reduces the imbalance of hashing by up to several orders of magnitude", "abstract, Table II",
        all(r[2] > 1 for r in ratios) and len(big) > 0,
        "H / PKG: " + ", ".join(f"{ds} W={W} " + (f"x{r:.3g}" if math.isfinite(r) else "(PKG 0)")
                                for ds, W, r in ratios)))
    best, cells_n, worse = 0, 0, []
    for ds, cells in t2["cells"].items():
        n = t2["streams"][ds]["messages"]
        for i, W in enumerate(workers):
            cells_n += 1
            pkg = _abs(cells["PKG"][i], n)
            others = {lab: _abs(cells[lab][i], n) for lab in ("Off-Greedy", "On-Greedy", "PoTC", "Hashing (KG)")}
            if all(pkg <= o + 2.0 for o in others.values()):  # ties within 2 messages, as in the paper's W=10 cells
                best += 1
            else:
                lab, o = min(others.items(), key=lambda kv: kv[1])
                worse.append(f"{ds} W={W}: PKG {pkg:.3g} vs {lab} {o:.3g} msgs")
    claims.append(Claim(
        "PKG performs consistently better than the other methods (even Off-Greedy)", "Table II",
        best == cells_n,
        f"PKG <= every other method (ties within 2 messages, like the paper's own PKG vs Off-Greedy at W=10) in "
        f"{best}/{cells_n} cells" + (f"; not in: {'; '.join(worse)}" if worse else "")))
    tw = t2["cells"].get("TW")
    if tw is not None:
        pairs = [(W, on["paper"], po["paper"]) for W, on, po in zip(workers, tw["On-Greedy"], tw["PoTC"])]
        claims.append(Claim(
            "PoTC is outclassed by On-Greedy on TW", "Table II",
            all(on <= po for _, on, po in pairs),
            "TW On-Greedy vs PoTC: " + ", ".join(f"W={W} {sci(on)} vs {sci(po)}" for W, on, po in pairs)))

    # -- LN: PKG below H everywhere
    ln = results.get("lognormal")
    if ln:
        lw = ln["workers"]
        ev = []
        ok = True
        for ds, cells in ln["cells"].items():
            for W, p, h in zip(lw, cells["PKG (L5)"], cells["Hashing (KG)"]):
                ok &= p["paper"] < h["paper"]
                ev.append(f"{ds} W={W} {sci(h['paper'])}/{sci(p['paper'])}")
        claims.append(Claim("H always imposes a much higher imbalance than PKG with local estimation (LN1, LN2)",
                            "Figure 4", ok, "H / PKG (L5): " + ", ".join(ev)))

    # -- Q2: L vs G vs H, sources, probing
    src = results["sources"]
    lower, within, n_cells, off = 0, 0, 0, []
    robust, robust_n, spread = 0, 0, []
    probe_better, probe_worse, probe_fixes, probe_n = 0, 0, 0, 0
    agreements = []
    for ds, per_w in src["cells"].items():
        n = src["streams"][ds]["messages"]
        for W, cell in per_w.items():
            g = cell["G"]["paper"]
            ls = [cell["L"][str(S)]["paper"] for S in src["sources"]]
            for S, lv in zip(src["sources"], ls):
                n_cells += 1
                lower += lv < cell["H"]["paper"]
                # "less than one order of magnitude", with 1 message of slack for balanced cells
                if _abs(cell["L"][str(S)], n) <= 10 * _abs(cell["G"], n) + 1.0:
                    within += 1
                else:
                    off.append(f"{ds} W={W} S={S}: L {sci(lv)} vs G {sci(g)}")
                probe_n += 1
                l_abs, lp_abs = _abs(cell["L"][str(S)], n), _abs(cell["LP"][str(S)], n)
                probe_better += 2 * lp_abs < l_abs and l_abs - lp_abs > 1.0
                probe_fixes += cell["LP"][str(S)]["paper"] <= BALANCED < lv
                probe_worse += lp_abs > 2 * l_abs and lp_abs - l_abs > 1.0
            robust_n += 1
            hi, lo = max(ls), min(ls)
            if hi * n <= 10 * lo * n + 1.0:
                robust += 1
            spread.append(f"{ds} W={W} x{hi / max(lo, 1e-300):.3g}")
            if "agreement_G_L5" in cell:
                both = cell["G"]["paper"] <= BALANCED and cell["L"]["5"]["paper"] <= BALANCED
                agreements.append((ds, W, cell["agreement_G_L5"], both))
    claims.append(Claim("PKG with local estimation (L) always has a lower imbalance than H", "Figure 4",
                        lower == n_cells, f"{lower}/{n_cells} (dataset, W, S) cells"))
    claims.append(Claim("L differs from the global oracle G by less than one order of magnitude", "Figure 4",
                        within == n_cells, f"{within}/{n_cells} cells (1 message of slack)"
                        + (f"; not: {'; '.join(off[:12])}" + (" ..." if len(off) > 12 else "") if off else "")))
    claims.append(Claim("the imbalance of L is robust to the number of sources (S = 1..20)", "Figure 4",
                        robust == robust_n, f"max/min over S within 10x in {robust}/{robust_n} (dataset, W): "
                        + ", ".join(spread)))
    claims.append(Claim("periodic probing (LP) does not improve on L", "Figure 5, Q2",
                        probe_fixes == 0,
                        f"LP balanced where L is not: {probe_fixes}/{probe_n} cells; LP below L by > 2x (and > 1 "
                        f"message) in {probe_better}/{probe_n}, above by > 2x in {probe_worse}/{probe_n} "
                        f"(probe every 1/{PROBES_PER_STREAM} of the stream)"))
    balanced_agreements = [a for _, _, a, both in agreements if both]
    claims.append(Claim(
        "G and L take different decisions, yet both balance", "Q2",
        bool(balanced_agreements) and max(balanced_agreements) < 1.0,
        "share of messages G and L5 route to the same worker: "
        + ", ".join(f"{ds} W={W} {a:.0%}{' (both balanced)' if both else ''}" for ds, W, a, both in agreements)))
    wp = [(W, jaccard(a)) for ds, W, a, both in agreements if ds == "WP" and both]
    if wp:
        claims.append(Claim(
            "the agreement of G and L on WP is only 47% (Jaccard overlap); here: within 10 points", "Q2",
            all(abs(j - 0.47) <= 0.10 for _, j in wp),
            "Jaccard overlap of the (message, worker) pairs of G and L5, a/(2-a) for agreement a: "
            + ", ".join(f"WP W={W} {j:.0%}" for W, j in wp)))

    # -- Q4: d choices
    ch = results["choices"]
    need: dict[int, int | None] = {}
    for W in ch["workers"]:
        cells = ch["cells"][str(W)]
        need[W] = next((d for d in ch["choices"] if cells[str(d)]["paper"] <= BALANCED), None)
    d2_bad = all(ch["cells"][str(W)]["2"]["paper"] > BALANCED for W in ch["workers"] if "2" in ch["cells"][str(W)])
    ev = "median over draws; " + ", ".join(
        f"W={W}: {'d=' + str(d) if d else 'none up to d=' + str(max(ch['choices']))}" for W, d in need.items())
    claims.append(Claim("at z = 1.2 PKG with d = 2 is unbalanced whatever W", "Q4, Figure 9", d2_bad,
                        "d=2, median (balanced draws): " + ", ".join(
                            f"W={W} {sci(ch['cells'][str(W)]['2']['paper'])} "
                            f"({ch['cells'][str(W)]['2']['balanced_draws']}/{len(ch['seeds'])})"
                            for W in ch["workers"] if "2" in ch["cells"][str(W)])))
    if 5 in need and 40 in need:
        claims.append(Claim("balance is restored with d = 4 at W = 5 and d = 9 at W = 40", "Q4, Figure 9",
                            need[5] is not None and need[5] <= 4 and need[40] is not None and need[40] <= 9,
                            f"smallest balanced d (<= {BALANCED:g}): {ev}"))
    big_w = [W for W in (50, 100) if W in need]
    if big_w:
        claims.append(Claim("for W = 50, 100 the imbalance is still high with d <= 10 (needs tens of choices)",
                            "Q4, Figure 9", all(need[W] is None for W in big_w), ev))

    # -- Q3: drift
    dr = results.get("drift")
    if dr:
        ev_parts, ok = [], True
        for W, cells in dr["cells"].items():
            for lab in ("PKG (G)", "PKG (L5)", "PKG (L5P)"):
                if int(W) <= 10:
                    ok &= cells[lab]["paper"] <= BALANCED
            ev_parts.append(f"W={W}: " + ", ".join(f"{k} {sci(c['paper'])}" for k, c in cells.items()))
        claims.append(Claim("PKG (G, L5, L5P) keeps a low imbalance under drift in the key popularity "
                            "(where balance is attainable: W <= 10 here)", "Q3, Figure 5 (CT)", ok,
                            "; ".join(ev_parts)))
    return claims


# ============================================================================ report
def _table2_markdown(grid: dict[str, Any], with_paper: bool) -> str:
    workers = grid["workers"]
    names = list(grid["cells"])
    header = ["method"] + [f"{ds} W={W}" for ds in names for W in workers]
    rows = []
    labels = list(next(iter(grid["cells"].values())))
    for label in labels:
        row = [label]
        for ds in names:
            for i, W in enumerate(workers):
                ours = sci(grid["cells"][ds][label][i]["paper"])
                paper = _paper_value(ds, label, W) if with_paper else None
                row.append(f"{ours} ({sci(paper)})" if paper is not None else ours)
        rows.append(row)
    for d, name in ((1, "bound, 1 worker per key: p1 - 1/W"), (2, "bound, 2 workers per key: p1/2 - 1/W")):
        row = [name]
        for ds in names:
            p1 = grid["streams"][ds]["p1_measured"]
            row += [sci(max(0.0, p1 / d - 1 / W)) for W in workers]
        rows.append(row)
    return markdown_table(header, rows)


def _streams_markdown(streams: dict[str, dict[str, Any]]) -> str:
    rows = []
    for name, s in streams.items():
        params = (f"Zipf z={s['z']:.4f}, K={s['num_keys']:,}" if s["kind"] == "zipf"
                  else f"log-normal mu={s['mu']}, sigma={s['sigma']}" if s["kind"] == "lognormal"
                  else f"drifting, K={s['num_keys']:,}, hot {s['hot_fraction']:.0%} per period of {s['period']:,}")
        target = s.get("p1_target")
        rows.append([name, params, f"{s['messages']:,}", f"{s['distinct_keys']:,}",
                     f"{s['new_keys_second_half']:,}", f"{s['p1_measured']:.2%}",
                     f"{target:.2%}" if target is not None else "-"])
    return markdown_table(["stream", "generator", "messages", "distinct keys", "keys first seen in the 2nd half",
                           "p1 measured", "p1 paper"], rows)


def markdown(results: dict[str, Any], command: str = "python -m workloads.exp_pkg") -> str:
    """The report of :func:`run_all`'s results as markdown."""
    t2, ln, src, ch, dr = (results[k] for k in ("table2", "lognormal", "sources", "choices", "drift"))
    out = ["# PKG paper (Nasir et al.): simulation experiments reproduced with dpa.simulate", "",
           f"Command: `{command}` (seed {results['seed']}); run time "
           f"{sum(results['timings_s'].values()):.0f} s "
           f"({', '.join(f'{k} {v:.0f} s' for k, v in results['timings_s'].items())}).", "",
           "**Metric.** " + IMBALANCE_DOC, "",
           "## Streams", "", _streams_markdown({**t2["streams"], **ln["streams"]}), "",
           "## (a) Table II: imbalance by method and W, ours (paper)", "",
           "PKG, Off-Greedy, On-Greedy and PoTC with global knowledge (one router for the whole "
           "stream), as in the paper's Table II; `PKG (L5)` = local estimation at 5 sources (not in the "
           "paper's table). The two `bound` rows are the least imbalance possible when the hottest key is on "
           "1 resp. 2 workers.", "",
           _table2_markdown(t2, with_paper=True), ""]
    # balanced cells in messages
    rows = []
    for ds, cells in t2["cells"].items():
        pn = ZIPF_DATASETS[ds].messages
        for label in ("PKG", "Off-Greedy"):
            for i, W in enumerate(t2["workers"]):
                paper = _paper_value(ds, label, W)
                if paper is not None and paper <= BALANCED:
                    m = cells[label][i]
                    rows.append([ds, label, W, f"{m['final_messages']:.2f}", f"{m['mean_messages']:.2f}",
                                 f"{paper * pn:.2f}"])
    if rows:
        out += ["Balanced cells in absolute terms: the imbalance is a few messages, whatever the stream length "
                "(the paper's value times its n: 22M messages for WP, 1.2G for TW). The time average shows why "
                "the paper's metric cannot be one for Off-Greedy:", "",
                markdown_table(["dataset", "method", "W", "ours: I(n) (msgs)", "ours: mean_t I(t) (msgs)",
                                "paper value x paper n (msgs)"], rows), ""]
    out += ["## (b) LN1 / LN2", "", "No numbers in the paper (Figure 4 is a plot); same methods as (a).", "",
            _table2_markdown(ln, with_paper=False), ""]
    # sources
    out += ["## (c) Local (L) vs global (G) load estimation, and periodic probing (LP)", "",
            f"PKG, d = 2. L = local estimation at S sources; LP = L plus a probe of the true loads every "
            f"1/{PROBES_PER_STREAM} of the stream ({', '.join(f'{k}: {v:,} msgs' for k, v in src['probe_every'].items())}); "
            f"G = global oracle; H = hashing. `agree` = share of messages G and L5 send to the same worker / Jaccard "
            f"overlap of their (message, worker) pairs (the paper's measure: 47% on WP).", ""]
    header = ["stream", "W", "H", "G"] + [f"L{S}" for S in src["sources"]] + [f"L{S}P" for S in src["sources"]] + ["agree"]
    rows = []
    for ds, per_w in src["cells"].items():
        for W, cell in per_w.items():
            rows.append([ds, W, sci(cell["H"]["paper"]), sci(cell["G"]["paper"])]
                        + [sci(cell["L"][str(S)]["paper"]) for S in src["sources"]]
                        + [sci(cell["LP"][str(S)]["paper"]) for S in src["sources"]]
                        + [f"{cell['agreement_G_L5']:.0%} / {jaccard(cell['agreement_G_L5']):.0%}"
                           if "agreement_G_L5" in cell else "n/a"])
    out += [markdown_table(header, rows), ""]
    # choices
    out += ["## (d) d choices (Figure 9)", "",
            f"Zipf z={ch['stream']['z']}, K={ch['stream']['num_keys']:,}, {ch['stream']['messages']:,} messages "
            f"(p1 = {ch['stream']['p1_model']:.2%}), PKG with local estimation at S={ch['sources']}, one stream per "
            f"seed {ch['seeds']} (each draws new hash choices for the hot keys). Each cell: median `I(n)/n` over "
            f"the draws [balanced draws] (bound `max(0, p1/d - 1/W)`).", ""]
    header = ["W"] + [f"d={d}" for d in ch["choices"]]
    rows = [[W] + [f"{sci(c['paper'])} [{c['balanced_draws']}/{len(ch['seeds'])}] ({sci(ch['bound'][str(W)][str(d)])})"
                   for d, c in ch["cells"][str(W)].items()] for W in ch["workers"]]
    out += [markdown_table(header, rows), ""]
    # drift
    s = dr["stream"]
    out += ["## (e) Drifting hot key", "",
            f"{s['messages']:,} messages over {s['num_keys']:,} keys; with probability {s['hot_fraction']:.0%} a "
            f"message carries the current hot key, which changes every {s['period']:,} messages.", ""]
    labels = list(next(iter(dr["cells"].values())))
    out += ["Each cell: `I(n)/n` / time average `mean_t I(t) / mean_t t` (spikes after a change of hot key "
            "show in the latter and in `drift.png`).", ""]
    rows = [[W] + [f"{sci(cells[lab]['paper'])} / {sci(cells[lab]['time_avg'])}" for lab in labels]
            for W, cells in dr["cells"].items()]
    out += [markdown_table(["W", *labels], rows), ""]
    out += ["## Claims of the paper, checked", "", claims_markdown([Claim(**c) for c in results["claims"]]), ""]
    out += ["Plots: `table2.png`, `sources.png`, `choices.png`, `drift.png`.", ""]
    return "\n".join(out)


# ============================================================================ plots
_FLOOR = 1e-10  # zero imbalance is drawn at this value on log axes


def _pos(x: float) -> float:
    return max(x, _FLOOR)


def plot_grids(results: dict[str, Any], path: str | Path) -> Path:
    """Table II and LN grids: imbalance vs W per method (paper's Table II as hollow markers)."""
    grids = [(ds, results["table2"]) for ds in results["table2"]["cells"]]
    grids += [(ds, results["lognormal"]) for ds in results["lognormal"]["cells"]]
    fig, axes = new_figure(1, len(grids), width=4.6, height=4.2)
    for ax, (ds, grid) in zip(axes[0], grids):
        workers = grid["workers"]
        for k, (label, per_w) in enumerate(grid["cells"][ds].items()):
            color = f"C{k}"
            ax.plot(workers, [_pos(m["paper"]) for m in per_w], marker="o", color=color, label=label)
            paper = [_paper_value(ds, label, W) for W in workers]
            if any(p is not None for p in paper):
                ax.plot([W for W, p in zip(workers, paper) if p is not None], [p for p in paper if p is not None],
                        marker="s", markerfacecolor="none", linestyle=":", color=color)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(workers, [str(W) for W in workers])
        ax.set_xlabel("workers W")
        ax.set_ylabel("imbalance I(n) / n")
        ax.set_title(f"{ds} (p1 = {grid['streams'][ds]['p1_measured']:.2%})")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8, title="filled: dpa; hollow: paper; 0 drawn at 1e-10", title_fontsize=8)
    return save_figure(fig, path)


def plot_sources(results: dict[str, Any], path: str | Path) -> Path:
    """Imbalance vs number of sources: L and LP lines, G and H as horizontal lines."""
    src = results["sources"]
    names = list(src["cells"])
    workers = src["workers"]
    fig, axes = new_figure(len(names), len(workers), width=3.6, height=3.0)
    for r, ds in enumerate(names):
        for c, W in enumerate(workers):
            ax = axes[r][c]
            cell = src["cells"][ds][str(W)]
            S = src["sources"]
            ax.plot(S, [_pos(cell["L"][str(s)]["paper"]) for s in S], marker="o", label="L (local)")
            ax.plot(S, [_pos(cell["LP"][str(s)]["paper"]) for s in S], marker="^", label="LP (probing)")
            ax.axhline(_pos(cell["G"]["paper"]), color="C2", linestyle="--", label="G (global)")
            ax.axhline(_pos(cell["H"]["paper"]), color="C3", linestyle=":", label="H (hashing)")
            ax.set_yscale("log")
            ax.set_title(f"{ds}, W={W}", fontsize=9)
            ax.set_xlabel("sources S")
            ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    return save_figure(fig, path)


def plot_choices(results: dict[str, Any], path: str | Path) -> Path:
    """Imbalance vs d, one line per W (Figure 9)."""
    ch = results["choices"]
    fig, axes = new_figure(1, 1, width=7.0, height=4.5)
    ax = axes[0][0]
    for k, W in enumerate(ch["workers"]):
        ax.plot(ch["choices"], [_pos(ch["cells"][str(W)][str(d)]["paper"]) for d in ch["choices"]],
                marker="o", color=f"C{k}", label=f"W={W} (median)")
        for d in ch["choices"]:
            draws = ch["cells"][str(W)][str(d)]["draws"]
            ax.scatter([d] * len(draws), [_pos(x) for x in draws], s=8, color=f"C{k}", alpha=0.5)
        ax.plot(ch["choices"], [ch["bound"][str(W)][str(d)] or math.nan for d in ch["choices"]], linestyle=":",
                color=f"C{k}")  # a zero bound is not drawn
    ax.axhline(BALANCED, color="gray", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("choices d")
    ax.set_ylabel("imbalance I(n) / n")
    ax.set_title(f"PKG with d choices, Zipf z={ch['stream']['z']}, K={ch['stream']['num_keys']:,} "
                 f"(dots: draws; dotted: p1/d - 1/W; 0 drawn at 1e-10)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_drift(results: dict[str, Any], path: str | Path) -> Path:
    """``I(t) / t`` through time on the drifting stream."""
    dr = results["drift"]
    fig, axes = new_figure(1, 1, width=8.0, height=4.5)
    ax = axes[0][0]
    for label, s in dr["series"].items():
        ax.plot(s["t"], [_pos(v) for v in s["I_over_t"]], label=label)
    period = dr["stream"]["period"]
    for x in range(period, dr["stream"]["messages"], period):
        ax.axvline(x, color="gray", linewidth=0.6, linestyle=":")
    ax.set_yscale("log")
    ax.set_xlabel("messages t (dotted: the hot key changes)")
    ax.set_ylabel("I(t) / t")
    ax.set_title(f"drifting hot key, W={dr['series_workers']}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


# ============================================================================ CLI
def main(argv: list[str] | None = None) -> None:
    """Command line: run experiments (a)-(e) and write ``pkg.json``, ``pkg.md`` and the plots."""
    parser = argparse.ArgumentParser(prog="python -m workloads.exp_pkg", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="results/pkg", help="output directory (default results/pkg)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply every stream's message count (default 1: ~2-3 minutes)")
    args = parser.parse_args(argv)
    sizes = Sizes().scaled(args.scale)
    started = time.perf_counter()
    results = run_all(sizes, args.seed, log=print)
    results["meta"] = run_metadata("workloads.exp_pkg", time.perf_counter() - started)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "pkg.json", results)
    for fn, name in ((plot_grids, "table2.png"), (plot_sources, "sources.png"), (plot_choices, "choices.png"),
                     (plot_drift, "drift.png")):
        fn(results, out / name)
    (out / "pkg.md").write_text(markdown(results, results["meta"]["command"]), encoding="utf-8")
    print(f"wrote {out / 'pkg.json'}, {out / 'pkg.md'} and 4 PNGs in {time.perf_counter() - started:.0f} s")
    for c in results["claims"]:
        print(f"  [{'yes' if c['holds'] else 'NO '}] {c['where']}: {c['claim']}")


if __name__ == "__main__":
    main()
