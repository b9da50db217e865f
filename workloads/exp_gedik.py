"""Gedik's evaluation (Figures 3, 4 and 6): imbalance and migration as channels are added.

For each resource-function combination (``LCL``, ``LLL``, ``LQL``) and each method --
uniform hash (``hash % N``), consistent hash, and the partitioning functions built by
``scan``, ``redist`` and ``readj`` (:mod:`dpa.routing.policies.gedik.policy`) -- the number of channels
grows ``N = 1, 2, ..., 32``, one channel per adaptation period, each function being built
from the previous one (the paper's section 5.1 protocol). After every step the paper's
metrics are computed over the whole domain:

* relative load imbalance ``b`` (eq. 11) and its per-resource parts ``b_s, b_c, b_n``;
* relative migration cost ``m`` (eq. 12) of the step ``N - 1 -> N``.

Workload (the paper's Table 1 defaults): ``|D| = 10^6`` items, Zipf ``z = 1`` (the item of
rank ``k`` has relative frequency ``∝ 1/k^z``), ``alpha = 1.2``, ``sigma = 0.1``,
utility ``U^APM``, 1000 consistent-hash replicas per channel. Frequencies are the exact
Zipf probabilities (the lossy counters' job is tested separately in
``tests/unit/test_sketches.py``): the construction receives every item with
``f >= delta`` (eq. 17), as a lossy counter with ``epsilon -> 0`` would report them, and
applies the quadratic post-processing itself. Item ``k`` is the integer key
``perm[k]`` (a seeded permutation of ``[0, |D|)``) hashed exactly as dpa hashes an
``int64`` key column; each run uses another seed, and figures are means over ``--runs``
runs (the paper: 5). Figure 3 is the ``N = 10`` point of this sweep; Figure 4 repeats the
sweep up to ``N = 10`` for several skews (``LQL`` only for ``z <= 0.5``, as in the paper).

Usage::

    python -m workloads.exp_gedik --out results/gedik            # ~1 minute
    python -m workloads.exp_gedik --out /tmp/g --domain 100000 --runs 1 --max-channels 12

Outputs in ``--out``: ``gedik.json`` (settings, every per-N value of every run and the
means), ``gedik_channels.png`` (Figure 6 shape), ``gedik_n10.png`` (Figure 3 shape),
``gedik_skew.png`` (Figure 4 shape) and ``gedik.md`` (tables and the paper's claims
beside ours, each with a computed verdict).
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from dpa.keys.columns import hash_key_columns
from dpa.routing.policies.gedik.construct import construct
from dpa.routing.policies.gedik.model import (
    GedikParams,
    PartitionFunction,
    consistent_hash,
    frequency_threshold,
    relative_imbalance,
    relative_migration_cost,
    resource_loads,
)
from workloads.generators import zipf_probabilities
from workloads.harness import Experiment

__all__ = ["EXPERIMENT", "METHODS", "claims", "Universe", "grow", "main", "markdown", "plot", "run_experiment"]

logger = logging.getLogger(__name__)

METHODS = ("uniform", "consistent", "scan", "redist", "readj")
COMBOS = ("LCL", "LLL", "LQL")
COLORS = {"uniform": "tab:gray", "consistent": "tab:blue", "scan": "tab:green", "redist": "tab:orange",
          "readj": "tab:red"}
MARKERS = {"uniform": "s", "consistent": "o", "scan": "^", "redist": "v", "readj": "D"}


@dataclass
class Universe:
    """The item domain of one run: frequencies by rank, hashes, cached consistent hashes.

    Attributes:
        freqs: Relative frequency of each item, rank order (decreasing).
        hashes: ``uint32`` dpa key hash of each item.
        replicas: Consistent-hash replicas per channel.
    """

    freqs: np.ndarray
    hashes: np.ndarray
    replicas: int = 1000

    def __post_init__(self) -> None:
        self._order = np.argsort(self.hashes, kind="stable")
        self._sorted = self.hashes[self._order]
        self._ch: dict[int, np.ndarray] = {}

    @classmethod
    def zipf(cls, z: float, domain_size: int, seed: int, replicas: int = 1000) -> Universe:
        """Zipf(``z``) frequencies over ``domain_size`` integer keys permuted with ``seed``."""
        freqs = zipf_probabilities(z, domain_size)
        ids = np.random.default_rng(seed).permutation(domain_size).astype(np.int64)
        hashes = hash_key_columns(pa.table({"key": ids}), ["key"])
        return cls(freqs, hashes, replicas)

    def consistent(self, num_channels: int) -> np.ndarray:
        """``H_c`` of every item for ``num_channels`` channels (cached)."""
        a = self._ch.get(num_channels)
        if a is None:
            a = consistent_hash(num_channels, self.replicas).lookup_batch(self.hashes).astype(np.int8)
            self._ch[num_channels] = a
        return a

    def assignment(self, pf: PartitionFunction) -> np.ndarray:
        """``p(d)`` of every item: the cached consistent hash with the explicit entries applied."""
        a = self.consistent(pf.num_channels).copy()
        if len(pf.explicit_hashes):
            lo = np.searchsorted(self._sorted, pf.explicit_hashes, side="left")
            hi = np.searchsorted(self._sorted, pf.explicit_hashes, side="right")
            for s, e, d in zip(lo.tolist(), hi.tolist(), pf.explicit_dest.tolist()):
                a[self._order[s:e]] = d  # every item with that hash (collisions included)
        return a

    def candidates(self, params: GedikParams, num_channels: int) -> tuple[np.ndarray, np.ndarray]:
        """What an exact frequency counter reports: items with ``f >= delta`` of eq. 17 for ``N``
        and ``N - 1`` (so the previous explicit items keep their frequency)."""
        thresholds = [frequency_threshold(params, n) for n in (num_channels, num_channels - 1) if n >= 1]
        delta = min(thresholds)
        k = int(np.searchsorted(-self.freqs, -delta, side="right")) if np.isfinite(delta) else 0
        h, f = self.hashes[:k], self.freqs[:k]
        uniq, inv = np.unique(h, return_inverse=True)
        if len(uniq) < len(h):  # colliding 32-bit hashes are one item for the router
            f = np.bincount(inv.reshape(-1), weights=f, minlength=len(uniq))
            h = uniq
        return h, f


def grow(universe: Universe, method: str, params: GedikParams, max_channels: int) -> list[dict[str, Any]]:
    """Grows ``N = 1 .. max_channels`` with one method; returns the metrics of every step.

    Args:
        universe: Items, frequencies, hashes.
        method: One of :data:`METHODS`.
        params: Gedik parameters (resources, alpha, sigma, utility, replicas, |D|).
        max_channels: Largest ``N``.

    Returns:
        One dict per ``N``: ``N``, ``b``, ``b_s``, ``b_c``, ``b_n``, ``m`` (None for ``N = 1``),
        ``explicit`` (explicit entries) and ``build_s`` (construction seconds).
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; use one of {METHODS}")
    f = universe.freqs
    out: list[dict[str, Any]] = []
    prev_assign: np.ndarray | None = None
    pf: PartitionFunction | None = None
    for N in range(1, max_channels + 1):
        explicit, build_s = 0, 0.0
        if method == "uniform":
            assign = (universe.hashes % np.uint32(N)).astype(np.int8)
        elif method == "consistent":
            assign = universe.consistent(N)
        else:
            if pf is None:
                pf = PartitionFunction(1, params.replicas)
            else:
                pf, info = construct(universe.candidates(params, N), pf, N, method, params)
                build_s = info.seconds
            explicit = len(pf.explicit_hashes)
            assign = universe.assignment(pf)
        b, bk = relative_imbalance(resource_loads(f, assign, N, params), params.alphas)
        m = None if prev_assign is None else relative_migration_cost(f, prev_assign, assign, N, params)
        out.append({"N": N, "b": b, "b_s": float(bk[0]), "b_c": float(bk[1]), "b_n": float(bk[2]), "m": m,
                    "explicit": explicit, "build_s": build_s})
        prev_assign = assign
    return out


def _mean_runs(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    keys = ("b", "b_s", "b_c", "b_n", "m", "explicit", "build_s")
    out = []
    for step in zip(*runs):
        row: dict[str, Any] = {"N": step[0]["N"]}
        for k in keys:
            vals = [s[k] for s in step if s[k] is not None]
            row[k] = float(np.mean(vals)) if vals else None
        out.append(row)
    return out


def run_experiment(domain_size: int = 1_000_000, runs: int = 3, max_channels: int = 32, z: float = 1.0,
                   combos: tuple[str, ...] = COMBOS, methods: tuple[str, ...] = METHODS,
                   skews: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0), skew_channels: int = 10,
                   alpha: float = 1.2, sigma: float = 0.1, utility: str = "APM", replicas: int = 1000,
                   readj_requires_gain: bool = False, log: Any = print) -> dict[str, Any]:
    """Runs the channel sweep (Figures 3 and 6) and the skew sweep (Figure 4).

    Returns:
        ``{"settings", "channels": {combo: {method: [per-N means]}}, "channels_runs": ...,
        "skew": {combo: {method: [{"z", "b", "m", ...} at N = skew_channels]}}}``.
    """
    settings = {"domain_size": domain_size, "runs": runs, "max_channels": max_channels, "z": z,
                "combos": list(combos), "methods": list(methods), "skews": list(skews),
                "skew_channels": skew_channels, "alpha": alpha, "sigma": sigma, "utility": utility,
                "replicas": replicas, "readj_requires_gain": readj_requires_gain}

    def sweep(z: float, todo: list[str] | tuple[str, ...], channels: int,
              sweep_log: Any = None) -> dict[str, dict[str, list[list[dict[str, Any]]]]]:
        """Every run's :func:`grow` of every method up to ``channels`` channels on Zipf(``z``)."""
        out: dict[str, dict[str, list[list[dict[str, Any]]]]] = {c: {m: [] for m in methods} for c in todo}
        for seed in range(runs):
            started = time.perf_counter()
            uni = Universe.zipf(z, domain_size, seed, replicas)
            for combo in todo:
                params = GedikParams(alpha, sigma, combo, utility, replicas, domain_size,
                                     readj_requires_gain=readj_requires_gain)
                for method in methods:
                    out[combo][method].append(grow(uni, method, params, channels))
            if sweep_log:
                sweep_log(f"  channel sweep, run {seed + 1}/{runs}: {time.perf_counter() - started:.1f}s")
        return out

    per_run = sweep(z, combos, max_channels, log)
    channels = {c: {m: _mean_runs(per_run[c][m]) for m in methods} for c in combos}
    skew: dict[str, dict[str, list[dict[str, Any]]]] = {c: {m: [] for m in methods} for c in combos}
    for zz in skews:
        started = time.perf_counter()
        # the paper restricts LQL (quadratic computation) to z in [0.25, 0.5]
        todo = [c for c in combos if not (c[1] == "Q" and zz > 0.5)]
        rows = sweep(zz, todo, skew_channels)
        for combo in todo:
            for method in methods:
                skew[combo][method].append({"z": zz, **_mean_runs(rows[combo][method])[-1]})
        if log:
            log(f"  skew sweep z={zz}: {time.perf_counter() - started:.1f}s")
    return {"settings": settings, "channels": channels, "channels_runs": per_run, "skew": skew}


# ---------------------------------------------------------------------------- claims
def _at(series: list[dict[str, Any]], N: int) -> dict[str, Any]:
    return next(r for r in series if r["N"] == N)


def claims(result: dict[str, Any]) -> list[dict[str, str]]:
    """The paper's statements with our numbers and a computed verdict."""
    ch = result["channels"]
    methods = result["settings"]["methods"]
    maxN = result["settings"]["max_channels"]
    rows: list[dict[str, str]] = []

    def add(claim: str, ours: str, ok: bool | None) -> None:
        rows.append({"claim": claim, "ours": ours, "verdict": "n/a" if ok is None else ("agree" if ok else "disagree")})

    n10 = min(10, maxN)
    if "uniform" in methods:
        ms = {c: _at(ch[c]["uniform"], n10)["m"] for c in ch}
        add(f"Fig. 3: uniform hash migration is more than 8x the ideal (N={n10})",
            ", ".join(f"{c}: {v:.2f}" for c, v in ms.items()), all(v is not None and v > 8 for v in ms.values()))
        v = _at(ch["LCL"]["uniform"], maxN)["m"] if "LCL" in ch else None
        if v is not None:
            add(f"Fig. 6: uniform hash migration reaches ~22x the ideal at N={maxN} (LCL)", f"{v:.2f}",
                abs(v - 22) / 22 < 0.25)
    others = [m for m in methods if m != "consistent"]
    if "consistent" in methods and others:
        for what, key, best in (("lowest migration", "m", min), ("highest imbalance", "b", max)):
            for c in ch:
                Ns = [r["N"] for r in ch[c]["consistent"] if r["N"] >= 2]
                wins = 0
                for N in Ns:
                    vals = {m: _at(ch[c][m], N)[key] for m in methods}
                    wins += best(vals, key=lambda k, vals=vals: vals[k]) == "consistent"
                means = {m: float(np.mean([_at(ch[c][m], N)[key] for N in Ns])) for m in methods}
                add(f"Figs. 3/6: consistent hash has the {what} ({c}, N=2..{maxN})",
                    f"at {wins}/{len(Ns)} values of N; mean {key} over N: "
                    + ", ".join(f"{m} {v:.2f}" for m, v in means.items()), wins == len(Ns))
        if "LLL" in ch and maxN >= 10:
            r = {m: _at(ch["LLL"][m], 10) for m in methods}
            add("Fig. 3 (LLL, N=10): b = 1.75 consistent, 1.55 uniform, ~1.32 scan/redist, ~1.2 readj",
                ", ".join(f"{m} {r[m]['b']:.2f}" for m in methods), None)
            add("Fig. 3 (LLL, N=10): m = ~1.34 readj, ~1.23 scan/redist",
                ", ".join(f"{m} {r[m]['m']:.2f}" for m in methods if m in ("scan", "redist", "readj")), None)
    if "readj" in methods and "LCL" in ch:
        Ns = [N for N in range(2, min(20, maxN) + 1)]
        wins = 0
        for N in Ns:
            vals = {m: _at(ch["LCL"][m], N)["b"] for m in methods}
            wins += min(vals, key=vals.get) == "readj"
        add(f"Fig. 6: readj has the lowest imbalance for N in [2, {min(20, maxN)}] (LCL)",
            f"lowest at {wins}/{len(Ns)} values of N", wins == len(Ns))
    if "redist" in methods and "LCL" in ch:
        ms = [r["m"] for r in ch["LCL"]["redist"] if r["m"] is not None]
        add(f"Fig. 6: redist migration is almost flat, ~1.15x ideal (LCL, N=2..{maxN})",
            f"min {min(ms):.2f}, median {float(np.median(ms)):.2f}, max {max(ms):.2f}",
            0.8 <= float(np.median(ms)) <= 1.5 and max(ms) - min(ms) < 1.0)
    if "scan" in methods and "LCL" in ch:
        v = _at(ch["LCL"]["scan"], maxN)["m"]
        add(f"Fig. 6: scan migration reaches above 3 at N={maxN} (LCL)", f"{v:.2f}", v > 3)
    if "consistent" in methods and "LCL" in ch:
        v = _at(ch["LCL"]["consistent"], maxN)["b"]
        add(f"Fig. 6: consistent hash imbalance above 2 at N={maxN} (LCL)", f"{v:.2f}", v > 2)
    if "LQL" in ch and maxN >= 10:
        vals = {m: _at(ch["LQL"][m], 10)["b_c"] for m in methods if m in ("scan", "redist", "readj")}
        add("Fig. 3 (LQL, N=10): relative computation imbalance b_c of scan/redist/readj is 'in the 30s'",
            ", ".join(f"{m} {v:.1f}" for m, v in vals.items()), all(20 <= v < 40 for v in vals.values()))
    sk = result.get("skew", {})
    if any(sk[c][m] for c in sk for m in methods) and "uniform" in methods:
        ms = [r["m"] for c in sk for r in sk[c]["uniform"]]
        if ms:
            add("Fig. 4: uniform hash migration above 8x the ideal at every skew",
                f"min {min(ms):.2f} over all combos and skews", min(ms) > 8)
        zmin = min(r["z"] for c in sk for r in sk[c]["uniform"])
        cells = []
        for c in sk:
            for i, r in enumerate(sk[c]["uniform"]):
                if r["z"] <= 0.5:
                    best = min(methods, key=lambda m, i=i, c=c: sk[c][m][i]["b"])
                    cells.append((c, r["z"], best, r["b"], sk[c][best][i]["b"]))
        at_min = [x for x in cells if x[1] == zmin]
        if at_min:
            misses = [x for x in cells if x[2] != "uniform"]
            add("Fig. 4: at low skew uniform hash has the lowest imbalance",
                f"lowest at z={zmin:g} in {sum(x[2] == 'uniform' for x in at_min)}/{len(at_min)} combos"
                + "".join(f"; not at {c} z={z:g}: uniform {bu:.2f} vs {m} {bm:.2f}" for c, z, m, bu, bm in misses),
                all(x[2] == "uniform" for x in at_min))
        first = {}
        for c in sk:
            for m in methods:
                above = [r["z"] for r in sk[c][m] if r["b"] > 1]
                first.setdefault(c, {})[m] = min(above) if above else math.inf
        checked = {c: v for c, v in first.items() if math.isfinite(v.get("consistent", math.inf))}
        if checked:
            add("Fig. 4: as skew grows, consistent hash is the first to exceed b = 1",
                "; ".join(f"{c}: first z with b > 1: " + ", ".join(
                    f"{m} {z:g}" if math.isfinite(z) else f"{m} none" for m, z in v.items())
                    for c, v in checked.items()),
                all(v["consistent"] <= min(v.values()) for v in checked.values()))
        low = [(c, m, r["b"]) for c in sk for m in methods for r in sk[c][m] if r["z"] <= 0.25]
        if low:
            worst = max(low, key=lambda t: t[2])
            add("Fig. 4: at very low skew all approaches are below the ideal line (b <= 1)",
                f"largest b at z=0.25: {worst[2]:.2f} ({worst[1]}, {worst[0]})", worst[2] <= 1)
    return rows


# ---------------------------------------------------------------------------- output
def plot(result: dict[str, Any], out_dir: str | Path) -> list[Path]:
    """Writes the three PNGs (Figures 6, 3 and 4 shapes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ch, methods = result["channels"], result["settings"]["methods"]
    combos = list(ch)

    def save(fig: Any, title: str, name: str) -> Path:
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path

    def m_and_b(series: dict[str, dict[str, list[dict[str, Any]]]], x: str, xlabel: str, titles: tuple[str, str],
                **style: Any) -> Any:
        """m (top, log scale) and b (bottom) against ``x``, one column per combination."""
        fig, axes = plt.subplots(2, len(series), figsize=(4.6 * len(series), 7.0), squeeze=False)
        for col, c in enumerate(series):
            for m in methods:
                xs = [r[x] for r in series[c][m]]
                for row, key in enumerate(("m", "b")):
                    axes[row][col].plot(xs, [r[key] for r in series[c][m]], marker=MARKERS[m], color=COLORS[m],
                                        label=m, **style)
            axes[0][col].set_yscale("log")
            for row in (0, 1):
                axes[row][col].set_title(f"{c}: {titles[row]}")
                axes[row][col].axhline(1.0, color="black", lw=0.8, ls="--")
                axes[row][col].set_xlabel(xlabel)
                axes[row][col].grid(True, alpha=0.3)
            axes[0][col].set_ylabel("m (log scale)")
            axes[1][col].set_ylabel("b")
            axes[0][col].legend(fontsize=7)
        return fig

    # Figure 6: m and b against N, one column per combination
    s = result["settings"]
    fig = m_and_b({c: {m: [r for r in ch[c][m] if r["N"] >= 2] for m in methods} for c in combos}, "N",
                  "number of channels N", ("relative migration cost m", "relative load imbalance b"), ms=3)
    paths = [save(fig, f"Gedik Fig. 6 shape: Zipf z={s['z']}, |D|={s['domain_size']:,}, alpha={s['alpha']}, "
                       f"sigma={s['sigma']}, U^{s['utility']}, mean of {s['runs']} run(s)", "gedik_channels.png")]
    # Figure 3: the N = 10 point, grouped bars of m, b, b_s, b_c, b_n
    N = min(10, s["max_channels"])
    metrics = ["m", "b", "b_s", "b_c", "b_n"]
    fig, axes = plt.subplots(1, len(combos), figsize=(4.6 * len(combos), 3.8), squeeze=False)
    width = 0.8 / len(methods)
    for col, c in enumerate(combos):
        ax = axes[0][col]
        for i, m in enumerate(methods):
            r = _at(ch[c][m], N)
            ax.bar(np.arange(len(metrics)) + i * width, [r[k] for k in metrics], width, color=COLORS[m], label=m)
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        ax.set_yscale("log")
        ax.set_xticks(np.arange(len(metrics)) + 0.4 - width / 2)
        ax.set_xticklabels(metrics)
        ax.set_title(f"{c}, N={N}")
        ax.set_ylabel("relative value (log scale)")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    paths.append(save(fig, "Gedik Fig. 3 shape: migration m, imbalance b and per-resource b_k", "gedik_n10.png"))
    # Figure 4: m and b against skew
    sk = result.get("skew", {})
    sk_combos = [c for c in sk if any(sk[c][m] for m in methods)]
    if sk_combos:
        fig = m_and_b({c: sk[c] for c in sk_combos}, "z", "Zipf skew z",
                      (f"m at N={s['skew_channels']}", f"b at N={s['skew_channels']}"))
        paths.append(save(fig, "Gedik Fig. 4 shape: migration and imbalance against skew", "gedik_skew.png"))
    return paths


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.2f}" if v < 100 else f"{v:.0f}"
    return str(v)


def markdown(result: dict[str, Any], command: str, elapsed_s: float) -> str:
    """Tables of the sweep and the claims, as markdown."""
    s = result["settings"]
    ch, methods = result["channels"], s["methods"]
    lines = [
        "# Gedik's partitioning functions: imbalance and migration (Figures 3, 4, 6)",
        "",
        f"Command: `{command}` ({elapsed_s:.0f} s). Zipf z={s['z']}, |D|={s['domain_size']:,} items, "
        f"alpha={s['alpha']}, sigma={s['sigma']}, utility U^{s['utility']}, {s['replicas']} replicas per "
        f"channel, readj stopping rule: {'utility must drop' if s.get('readj_requires_gain') else 'pseudo-code'}, "
        f"N grown 1 -> {s['max_channels']} one channel per period, mean of {s['runs']} run(s) "
        "(seeded key permutations). b = relative load imbalance (eq. 11), m = relative migration cost of "
        "the step N-1 -> N (eq. 12); 1 is the ideal for both.",
        "",
    ]
    N10 = min(10, s["max_channels"])
    lines += [f"## Figure 3 shape: N = {N10}", "",
              "| combo | method | m | b | b_s | b_c | b_n | explicit items |",
              "|---|---|---:|---:|---:|---:|---:|---:|"]
    for c in ch:
        for m in methods:
            r = _at(ch[c][m], N10)
            lines.append(f"| {c} | {m} | {_fmt(r['m'])} | {_fmt(r['b'])} | {_fmt(r['b_s'])} | {_fmt(r['b_c'])} | "
                         f"{_fmt(r['b_n'])} | {r['explicit']:.0f} |")
    show = [N for N in (2, 4, 6, 8, 10, 12, 16, 20, 24, 28, 32) if N <= s["max_channels"]]
    lines += ["", "## Figure 6 shape: against the number of channels N", ""]
    for key, label in (("m", "relative migration cost m"), ("b", "relative load imbalance b")):
        lines += [f"### {label}", "", "| combo | method | " + " | ".join(f"N={N}" for N in show) + " |",
                  "|---|---|" + "---:|" * len(show)]
        for c in ch:
            for m in methods:
                lines.append(f"| {c} | {m} | " + " | ".join(_fmt(_at(ch[c][m], N)[key]) for N in show) + " |")
        lines.append("")
    sk = result.get("skew", {})
    if sk and any(sk[c][m] for c in sk for m in methods):
        lines += [f"## Figure 4 shape: against the skew z (N = {s['skew_channels']})", "",
                  "| combo | z | " + " | ".join(f"{m} m / b" for m in methods) + " |",
                  "|---|---:|" + "---:|" * len(methods)]
        for c in sk:
            zs = [r["z"] for r in sk[c][methods[0]]]
            for i, z in enumerate(zs):
                lines.append(f"| {c} | {z} | " + " | ".join(
                    f"{_fmt(sk[c][m][i]['m'])} / {_fmt(sk[c][m][i]['b'])}" for m in methods) + " |")
        lines.append("")
    lines += ["## The paper's claims beside ours", "", "| paper | ours | verdict |", "|---|---|---|"]
    for row in claims(result):
        lines.append(f"| {row['claim']} | {row['ours']} | {row['verdict']} |")
    build = {m: max((r["build_s"] or 0) for c in ch for r in ch[c][m]) for m in methods if m in ("scan", "redist", "readj")}
    lines += ["", "Slowest construction per algorithm (s): " + ", ".join(f"{m} {v:.3f}" for m, v in build.items()), ""]
    return "\n".join(lines)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--domain", type=int, default=1_000_000, help="domain size |D| (default 10^6)")
    parser.add_argument("--max-channels", type=int, default=32, help="grow N up to this")
    parser.add_argument("--z", type=float, default=1.0, help="Zipf skew of the channel sweep")
    parser.add_argument("--skews", default="0.25,0.5,0.75,1.0", help="skews of the Figure 4 sweep ('' = skip)")
    parser.add_argument("--skew-channels", type=int, default=10, help="N of the Figure 4 sweep")
    parser.add_argument("--combos", default=",".join(COMBOS), help="resource-function combinations")
    parser.add_argument("--alpha", type=float, default=1.2)
    parser.add_argument("--sigma", type=float, default=0.1)
    parser.add_argument("--utility", default="APM")
    parser.add_argument("--replicas", type=int, default=1000)
    parser.add_argument("--readj-requires-gain", action="store_true",
                        help="readj stops when no readjustment lowers the utility (default: the pseudo-code)")


def _run(args: argparse.Namespace, log: Any) -> dict[str, Any]:
    skews = tuple(float(x) for x in args.skews.split(",") if x.strip())
    return run_experiment(args.domain, args.runs, args.max_channels, args.z,
                          tuple(c.strip().upper() for c in args.combos.split(",") if c.strip()), METHODS, skews,
                          args.skew_channels, args.alpha, args.sigma, args.utility.upper(), args.replicas,
                          args.readj_requires_gain)


EXPERIMENT = Experiment(
    module="workloads.exp_gedik", description=__doc__ or "", out="results/gedik", json_name="gedik.json",
    add_arguments=_arguments, run=_run, runs=3, claims=claims, plots=plot, print_markdown=True,
    markdown=lambda res: markdown(res, res["meta"]["command"], res["meta"]["elapsed_s"]),
    quick=("--domain", "2000", "--runs", "1", "--max-channels", "6", "--skews", "0.5", "--skew-channels", "4",
           "--replicas", "50"),
)
main = EXPERIMENT.main


if __name__ == "__main__":
    sys.exit(main())
