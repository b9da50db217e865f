"""Reproduction of the simulation experiments of the Partial Key Grouping paper (Nasir et al.).

``python -m workloads.exp_pkg --out results/pkg`` replays synthetic key streams through
dpa's policies with :func:`dpa.tools.simulate.simulate` (no Ray) and writes ``pkg.json``,
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

The streams, and the choices made where the paper leaves room, are described in
:mod:`workloads.pkg_streams`; the report and plots are :mod:`workloads.pkg_report`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from workloads.generators import LOGNORMAL_PRESETS, zipf
from workloads.harness import Claim, Log, StageTimer, scaled_experiment, sci
from workloads.imbalance import hash_keys, imbalance_series
from workloads.pkg_report import markdown, plots
from workloads.pkg_streams import (
    BALANCED,
    PROBES_PER_STREAM,
    TABLE2_VARIANTS,
    TABLE2_WORKERS,
    ZIPF_DATASETS,
    Sizes,
    Stream,
    Variant,
    _measured,
    drift_stream,
    jaccard,
    lognormal_stream,
    probe_interval,
    run_variant,
    zipf_stream,
    zipf_top_share,
)
from workloads.pkg_streams import paper_value as _paper_value

__all__ = [
    "EXPERIMENT",
    "claims",
    "main",
    "markdown",
    "run_all",
    "run_choices",
    "run_drift",
    "run_grid",
    "run_sources",
]

CHOICES_Z = 1.2
CHOICES_KEYS = 1_000_000
CHOICES_WORKERS = (5, 10, 40, 50, 100)
CHOICES_D = tuple(range(1, 11))
CHOICES_SEEDS = (0, 1, 2)
SOURCES = (1, 2, 5, 10, 20)
SOURCES_WORKERS = (5, 10, 50)
DRIFT_WORKERS = (5, 10, 50)


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


def run_all(sizes: Sizes | None = None, seed: int = 0, log: Log = None,
            table2_workers: Sequence[int] = TABLE2_WORKERS, sources: Sequence[int] = SOURCES,
            sources_workers: Sequence[int] = SOURCES_WORKERS, choices: Sequence[int] = CHOICES_D,
            choices_workers: Sequence[int] = CHOICES_WORKERS, choices_keys: int = CHOICES_KEYS,
            drift_workers: Sequence[int] = DRIFT_WORKERS) -> dict[str, Any]:
    """Runs experiments (a)-(e) and returns their results (JSON-friendly; default sizes: :class:`Sizes`)."""
    sizes = sizes or Sizes()
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
    return results


# ============================================================================ claims
def _abs(metric: dict[str, Any], n: int) -> float:
    """The imbalance ``I(n)`` in messages."""
    return metric["paper"] * n


def claims(results: dict[str, Any]) -> list[Claim]:
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


# ============================================================================ CLI
EXPERIMENT = scaled_experiment(
    "workloads.exp_pkg", __doc__, Sizes, run_all, claims=claims, markdown=markdown, plots=plots,
    out="results/pkg", json_name="pkg.json", quick_scale="0.005",
    scale_help="multiply every stream's message count (default 1: ~2-3 minutes)",
)
main = EXPERIMENT.main


if __name__ == "__main__":
    import sys

    sys.exit(main())
