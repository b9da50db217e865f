"""Reproduction of the load-distribution measurements of the Dynamic Key Grouping paper (Dalabasmaz & Can).

``python -m workloads.exp_dkg --out results/dkg`` replays key streams through shuffle
grouping (SG), key grouping (KG), PKG and DKG with :func:`dpa.tools.simulate.simulate` (no Ray)
and writes ``dkg.json``, ``dkg.md`` and PNG plots into ``--out``. It measures the paper's
two load metrics, both already in :class:`dpa.tools.simulate.SimResult`:

* **StdDev** (eq. 7): population standard deviation of the workers' loads, in percent of
  all messages (``stddev_pct``; 0 = perfect balance).
* **DistCost** (eq. 8): (key, worker) pairs holding state / distinct keys (``dist_cost``;
  1 for KG, up to ``W`` for SG).

The paper's latency and throughput come from a Storm cluster and are not simulated.

Experiments (the paper's topology: 5 sources (spouts) unless varied, W = 10, 50, 100):

(a) **Hot-key streams at 30% and 80%** for every W, plus the 68% "twitter-election"
    stand-in, whose W = 10 row is the paper's Table 3.
(b) **Skew sweep** 0%..100% at W = 10 (the paper's Figures 10-11, synthetic datasets).
(c) **Sources** S = 5, 10, 15, 20 on the election stand-in at W = 10 (Figure 13).

The streams (the 204 country keys with a hot key of a given share, and the election
stand-in with its calibrated tail) are built in :mod:`workloads.dkg_streams`.

**DKG's cycles.** The paper promotes Baby -> Teenage every 15 s and Teenage -> Old every
  60 s, and warms up for 15 s; :mod:`dpa.routing.policies.dkg` counts these cycles in records
  per source (``promote_every``; Old every 4 cycles, warm-up one cycle). A fixed record count
  would make DKG's behaviour depend on our stream length and on the number of sources (a
  source of a 20-source run would see a quarter of the records of a 5-source run in the
  same "time"). So the cycle is set to the same *fraction of the run* as in the paper:
  DKG processed twitter-election in 1,174,979 ms (Table 3), i.e. :data:`DKG_CYCLES_PER_RUN`
  = 78 cycles of 15 s, hence ``promote_every = records per source / 78``
  (:func:`dkg_promote_every`). The Key Space keeps the paper's 100 expected keys.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from dpa.routing.policies.dkg import dkg_max_machines, dkg_threshold
from dpa.tools.simulate import simulate
from workloads.dkg_streams import (
    COUNTRY_KEYS,
    ELECTION_HOT,
    PAPER_TABLE3,
    Sizes,
    calibrate_tail_keys,
    country_stream,
    election_stream,
    expected_shuffle_dist_cost,
)
from workloads.harness import (
    Claim,
    Log,
    StageTimer,
    claims_markdown,
    label_axes,
    markdown_table,
    new_figure,
    save_figure,
    scaled_experiment,
)
from workloads.imbalance import hash_keys

__all__ = [
    "COUNTRY_KEYS",
    "PAPER_TABLE1",
    "PAPER_TABLE3",
    "POLICIES",
    "Sizes",
    "calibrate_tail_keys",
    "country_stream",
    "dkg_promote_every",
    "election_stream",
    "claims",
    "expected_shuffle_dist_cost",
    "main",
    "markdown",
    "measure",
    "run_all",
    "run_skew_sweep",
    "run_sources",
    "run_workers",
]

POLICIES = ("shuffle", "hash", "pkg", "dkg")
LABELS = {"shuffle": "SG", "hash": "KG", "pkg": "PKG", "dkg": "DKG"}

PAPER_WORKERS = (10, 50, 100)
PAPER_SOURCES = (5, 10, 15, 20)
DEFAULT_SOURCES = 5
SKEWS = (0.3, 0.8)
DKG_CYCLES_PER_RUN = 78
"""15-second cycles in the paper's DKG run on twitter-election (1,174,979 ms, Table 3)."""
SWEEP = tuple(round(0.1 * i, 1) for i in range(11))

PAPER_TABLE1: dict[int, tuple[float, float, int]] = {
    5: (20.00, 24.47, 5), 10: (10.00, 13.16, 8), 20: (5.00, 7.24, 14), 50: (2.00, 3.41, 30), 100: (1.00, 2.00, 51),
}
"""Table 1 of the paper: machines -> (ideal load %, threshold load %, most machines per key)."""


# ============================================================================ measuring
def dkg_promote_every(num_messages: int, num_sources: int) -> int:
    """DKG's promotion cycle in records per source: 1/78 of each source's share of the stream."""
    return max(1, round(num_messages / num_sources / DKG_CYCLES_PER_RUN))


def measure(hashes: np.ndarray, policy: str, num_workers: int, num_sources: int = DEFAULT_SOURCES,
            seed: int = 0) -> dict[str, Any]:
    """StdDev, DistCost and a few more load figures of one policy on one stream.

    ``dkg`` runs with ``promote_every = dkg_promote_every(n, S)`` (see the module docstring).
    """
    opts = {"promote_every": dkg_promote_every(len(hashes), num_sources)} if policy == "dkg" else {}
    r = simulate(hashes, policy, num_sources=num_sources, num_workers=num_workers, seed=seed,
                 keys_are_hashes=True, **opts)
    loads = np.sort(r.loads)[::-1] * (100.0 / max(1, r.num_messages))
    return {
        "stddev": r.stddev_pct,
        "dist_cost": r.dist_cost,
        "dist_cost_rest": _dist_cost_without_hottest(hashes, r.destinations, num_workers),
        "max_load_pct": float(loads[0]),
        "top2_load_pct": [float(x) for x in loads[:2]],
        "max_over_avg": r.max_over_avg,
        "replication_max": r.replication_max,
        "router_stats": dict(r.router_stats),
        "options": opts,
        "wall_s": r.wall_time_s,
    }


def _dist_cost_without_hottest(hashes: np.ndarray, dest: np.ndarray, num_workers: int) -> float:
    """DistCost over every key but the most frequent one (NaN if there is no other key)."""
    keys, codes, counts = np.unique(hashes, return_inverse=True, return_counts=True)
    if len(keys) < 2:
        return math.nan
    pairs = np.unique(codes.astype(np.int64) * num_workers + np.asarray(dest, dtype=np.int64))
    workers_per_key = np.bincount(pairs // num_workers, minlength=len(keys))
    rest = np.arange(len(keys)) != int(np.argmax(counts))
    return float(workers_per_key[rest].mean())


def _cell(hashes: np.ndarray, num_workers: int, num_sources: int, seed: int, label: str,
          log: Log) -> dict[str, dict[str, Any]]:
    r"""Every policy :func:`measure`\ d on one stream, by label; logs ``label`` and their figures."""
    cell = {LABELS[p]: measure(hashes, p, num_workers, num_sources, seed) for p in POLICIES}
    if log:
        log(f"  {label} " + "  ".join(f"{k} sd={m['stddev']:.3f} dc={m['dist_cost']:.3f}" for k, m in cell.items()))
    return cell


def _describe(keys: np.ndarray) -> dict[str, Any]:
    _, counts = np.unique(keys, return_counts=True)
    return {"messages": len(keys), "distinct_keys": len(counts),
            "p1_measured": float(counts.max() / len(keys)) if len(keys) else 0.0}


def run_workers(n: int, seed: int = 0, skews: Sequence[float] = SKEWS, workers: Sequence[int] = PAPER_WORKERS,
                num_sources: int = DEFAULT_SOURCES, election: bool = True, log: Log = None) -> dict[str, Any]:
    """Experiment (a): every policy on the 30% / 80% country streams (and the election stand-in) per W.

    Returns:
        ``{"workers", "sources", "streams": {name: info}, "cells": {name: {str(W): {label: metrics}}}}``.
    """
    streams: list[tuple[str, np.ndarray, dict[str, Any]]] = []
    for f in skews:
        keys = country_stream(f, n, seed)
        streams.append((f"country-r{round(100 * f)}", keys,
                        {"kind": "country", "hot_fraction": f, "num_keys": COUNTRY_KEYS, **_describe(keys)}))
    if election:
        keys, tail = election_stream(n, seed)
        streams.append(("election-r68", keys, {"kind": "election", "hot_fraction": ELECTION_HOT,
                                               "tail_keys": tail, **_describe(keys)}))
    out: dict[str, Any] = {"workers": list(workers), "sources": num_sources, "streams": {}, "cells": {}}
    for name, keys, info in streams:
        hashes = hash_keys(keys)
        out["streams"][name] = info
        out["cells"][name] = {}
        for W in workers:
            out["cells"][name][str(W)] = _cell(hashes, W, num_sources, seed, f"{name:13s} W={W:3d}", log)
    return out


def run_skew_sweep(n: int, seed: int = 0, skews: Sequence[float] = SWEEP, num_workers: int = 10,
                   num_sources: int = DEFAULT_SOURCES, log: Log = None) -> dict[str, Any]:
    """Experiment (b): country streams at every skew ratio, W = 10 (Figures 10-11).

    Returns:
        ``{"skews", "workers", "sources", "cells": {str(skew): {label: metrics}}}``.
    """
    out: dict[str, Any] = {"skews": list(skews), "workers": num_workers, "sources": num_sources, "cells": {}}
    for f in skews:
        hashes = hash_keys(country_stream(f, n, seed))
        out["cells"][str(f)] = _cell(hashes, num_workers, num_sources, seed, f"skew {f:.0%} W={num_workers}", log)
    return out


def run_sources(n: int, seed: int = 0, sources: Sequence[int] = PAPER_SOURCES, num_workers: int = 10,
                log: Log = None) -> dict[str, Any]:
    """Experiment (c): the election stand-in with S = 5..20 sources at W = 10 (Figure 13).

    Returns:
        ``{"sources", "workers", "stream": info, "cells": {str(S): {label: metrics}}}``.
    """
    keys, tail = election_stream(n, seed)
    hashes = hash_keys(keys)
    out: dict[str, Any] = {"sources": list(sources), "workers": num_workers, "cells": {},
                           "stream": {"kind": "election", "hot_fraction": ELECTION_HOT, "tail_keys": tail,
                                      **_describe(keys)}}
    for S in sources:
        out["cells"][str(S)] = _cell(hashes, num_workers, S, seed, f"election S={S:2d} W={num_workers}", log)
    return out


def run_all(sizes: Sizes | None = None, seed: int = 0, log: Log = None, workers: Sequence[int] = PAPER_WORKERS,
            skews: Sequence[float] = SKEWS, sweep: Sequence[float] = SWEEP,
            sources: Sequence[int] = PAPER_SOURCES) -> dict[str, Any]:
    """Runs experiments (a)-(c) and returns their results (JSON-friendly; default sizes: :class:`Sizes`)."""
    sizes = sizes or Sizes()
    timed = StageTimer(log)

    results: dict[str, Any] = {
        "sizes": asdict(sizes),
        "seed": seed,
        "thresholds": {str(m): {"ideal": 100 / m, "threshold": dkg_threshold(m), "max_machines": dkg_max_machines(m)}
                       for m in PAPER_TABLE1},
        "workers": timed("workers", lambda: run_workers(sizes.workers, seed, skews, workers, log=log)),
        "sweep": timed("sweep", lambda: run_skew_sweep(sizes.sweep, seed, sweep, log=log)),
        "sources": timed("sources", lambda: run_sources(sizes.sources, seed, sources, log=log)),
    }
    results["timings_s"] = timed.timings
    return results


# ============================================================================ claims
def _fmt_cells(cells: dict[str, dict[str, Any]], key: str, digits: int = 2) -> str:
    return ", ".join(f"{k} {m[key]:.{digits}f}" for k, m in cells.items())


def claims(results: dict[str, Any]) -> list[Claim]:
    """The DKG paper's claims on StdDev / DistCost with verdicts computed from ``results``."""
    claims: list[Claim] = []
    th = results.get("thresholds", {})
    ok = all(abs(th[str(m)]["threshold"] - p[1]) < 0.006 and th[str(m)]["max_machines"] == p[2]
             for m, p in PAPER_TABLE1.items() if str(m) in th)
    claims.append(Claim("thresholds L_s = L_i + sqrt(L_i) and the most machines per key", "Table 1", ok and bool(th),
                        ", ".join(f"m={m}: {v['threshold']:.2f}% / {v['max_machines']}" for m, v in th.items())))

    wk = results["workers"]
    # -- Table 3 (election stand-in, W = 10)
    el = wk["cells"].get("election-r68", {}).get("10")
    if el is not None:
        sd = {k: m["stddev"] for k, m in el.items()}
        dc = {k: m["dist_cost"] for k, m in el.items()}
        claims.append(Claim("StdDev order SG < DKG < PKG < KG", "Table 3 (twitter-election, W=10)",
                            sd["SG"] < sd["DKG"] < sd["PKG"] < sd["KG"],
                            "ours: " + ", ".join(f"{k} {v:.3f}" for k, v in sd.items())
                            + "; paper: " + ", ".join(f"{k} {v['stddev']}" for k, v in PAPER_TABLE3.items())))
        claims.append(Claim("DistCost order KG (1) < PKG < DKG < SG", "Table 3 (twitter-election, W=10)",
                            dc["KG"] == 1.0 and dc["KG"] < dc["PKG"] < dc["DKG"] < dc["SG"],
                            "ours: " + ", ".join(f"{k} {v:.4f}" for k, v in dc.items())
                            + "; paper: " + ", ".join(f"{k} {v['dist_cost']}" for k, v in PAPER_TABLE3.items())))
        close = {k: sd[k] / PAPER_TABLE3[k]["stddev"] for k in ("KG", "PKG", "DKG")}
        claims.append(Claim("Table 3's StdDev values of KG, PKG, DKG (12.35 for PKG, 4.10 for DKG, ...)",
                            "Table 3", all(0.67 <= r <= 1.5 for r in close.values()),
                            "ours / paper: " + ", ".join(f"{k} x{r:.2f}" for k, r in close.items())))
    # -- section 4 example: 80% hot key, 10 machines
    c80 = wk["cells"].get("country-r80", {}).get("10")
    if c80 is not None:
        kg, pkg = c80["KG"]["top2_load_pct"], c80["PKG"]["top2_load_pct"]
        claims.append(Claim("with an 80% key on 10 machines, KG puts 80% on one machine and PKG 80% on two "
                            "machines evenly (40% each)", "section 4",
                            kg[0] >= 80 and min(pkg) >= 40 and abs(pkg[0] - pkg[1]) < 1,
                            f"KG top load {kg[0]:.1f}%, PKG top two {pkg[0]:.1f}% / {pkg[1]:.1f}%, "
                            f"DKG top two {c80['DKG']['top2_load_pct'][0]:.1f}% / {c80['DKG']['top2_load_pct'][1]:.1f}%"))
    # -- SG lowest StdDev, highest DistCost; KG DistCost 1, highest StdDev (every stream, W)
    sg_ok, kg_ok, n_cells = 0, 0, 0
    for per_w in wk["cells"].values():
        for cell in per_w.values():
            n_cells += 1
            sds = {k: m["stddev"] for k, m in cell.items()}
            dcs = {k: m["dist_cost"] for k, m in cell.items()}
            sg_ok += sds["SG"] == min(sds.values()) and dcs["SG"] == max(dcs.values())
            kg_ok += sds["KG"] == max(sds.values()) and dcs["KG"] == 1.0
    claims.append(Claim("SG has the lowest StdDev and the highest DistCost", "section 4.7, Figs 11-12",
                        sg_ok == n_cells, f"{sg_ok}/{n_cells} (stream, W) cells"))
    claims.append(Claim("KG has DistCost 1 and the highest StdDev", "section 4.7, Figs 11-12",
                        kg_ok == n_cells, f"{kg_ok}/{n_cells} (stream, W) cells"))
    # -- DKG vs PKG at 30% / 80%, every W
    for name, factor, text in (
            ("country-r30", 1.0, "at 30% skew DKG balances at least as well as PKG (the paper reports small gains "
                                 "there: latency 7%, throughput 8%)"),
            ("country-r80", 2.0, "at 80% skew DKG's StdDev is much lower (here: >= 2x) than PKG's (the paper: "
                                 "latency -48%, throughput +93%)")):
        per_w = wk["cells"].get(name)
        if not per_w:
            continue
        ok = all(c["PKG"]["stddev"] >= factor * c["DKG"]["stddev"] for c in per_w.values())
        claims.append(Claim(text, "abstract, Figs 10-11", ok, "; ".join(
            f"W={W}: PKG {c['PKG']['stddev']:.2f} vs DKG {c['DKG']['stddev']:.2f}" for W, c in per_w.items())))
    # -- sweep: PKG grows with skew; DKG better above 30%; similar below
    sw = results["sweep"]
    skews = sw["skews"]
    pkg_sd = [sw["cells"][str(f)]["PKG"]["stddev"] for f in skews]
    dkg_sd = [sw["cells"][str(f)]["DKG"]["stddev"] for f in skews]
    hi_pts = [(f, p) for f, p in zip(skews, pkg_sd) if f >= 0.2]
    claims.append(Claim("PKG's StdDev increases continuously with the skewness", "Fig 11.b",
                        all(b[1] >= a[1] - 0.05 for a, b in zip(hi_pts, hi_pts[1:])) and len(hi_pts) > 1,
                        "PKG StdDev by skew: " + ", ".join(f"{f:.0%} {v:.2f}" for f, v in zip(skews, pkg_sd))))
    above = [(f, p, d) for f, p, d in zip(skews, pkg_sd, dkg_sd) if 0.3 < f < 1.0]
    claims.append(Claim("DKG's StdDev is much better (here: >= 2x) than PKG's above 30% skew", "Fig 11.b",
                        bool(above) and all(p >= 2 * d for _, p, d in above),
                        "DKG StdDev by skew: " + ", ".join(f"{f:.0%} {v:.2f}" for f, v in zip(skews, dkg_sd))))
    below = [(f, p, d) for f, p, d in zip(skews, pkg_sd, dkg_sd) if f <= 0.2]
    claims.append(Claim("below 30% skew PKG is as good (PKG preferable under 30%)", "abstract, conclusions",
                        bool(below) and all(p <= d + 0.5 for _, p, d in below),
                        "PKG vs DKG StdDev: " + ", ".join(f"{f:.0%} {p:.2f} vs {d:.2f}" for f, p, d in below)))
    dist = [(f, sw["cells"][str(f)]["PKG"]["dist_cost"], sw["cells"][str(f)]["DKG"]["dist_cost"],
             sw["cells"][str(f)]["SG"]["dist_cost"]) for f in skews if f < 1.0]
    claims.append(Claim("KG, PKG and DKG have DistCosts far below SG's (here: < half of SG's)", "Fig 11.c",
                        bool(dist) and all(d < 0.5 * s for _, _, d, s in dist),
                        "PKG / DKG / SG DistCost: " + ", ".join(f"{f:.0%} {p:.2f}/{d:.2f}/{s:.1f}" for f, p, d, s in dist)))
    claims.append(Claim("KG, PKG and DKG have very similar DistCosts (here: DKG within 1.5x of PKG)", "Fig 11.c",
                        bool(dist) and all(d <= 1.5 * p for _, p, d, _ in dist),
                        "DKG / PKG: " + ", ".join(f"{f:.0%} x{d / p:.2f}" for f, p, d, _ in dist)))
    if 1.0 in skews:
        dkg_dc = {f: sw["cells"][str(f)]["DKG"]["dist_cost"] for f in skews}
        claims.append(Claim("DKG's DistCost peaks at 100% skewness (a special case)", "Fig 11.c",
                            max(dkg_dc, key=lambda f: dkg_dc[f]) == 1.0,
                            "DKG DistCost: " + ", ".join(f"{f:.0%} {v:.2f}" for f, v in dkg_dc.items())))
    # -- workers (election): StdDev falls with W; DKG closest to SG
    el_w = wk["cells"].get("election-r68")
    if el_w:
        ws = sorted(int(w) for w in el_w)
        falls = all(el_w[str(b)][k]["stddev"] <= el_w[str(a)][k]["stddev"]
                    for k in ("KG", "PKG", "DKG") for a, b in zip(ws, ws[1:]))
        claims.append(Claim("StdDev decreases with more workers for all methods", "Fig 12.b", falls,
                            "; ".join(f"W={w}: " + _fmt_cells(el_w[str(w)], "stddev") for w in ws)))
        claims.append(Claim("DKG is much better than PKG, closest to SG, for every W", "Fig 12.b",
                            all(el_w[str(w)]["DKG"]["stddev"] < el_w[str(w)]["PKG"]["stddev"] for w in ws),
                            "; ".join(f"W={w}: PKG {el_w[str(w)]['PKG']['stddev']:.2f} DKG "
                                      f"{el_w[str(w)]['DKG']['stddev']:.2f}" for w in ws)))
    # -- sources
    so = results["sources"]
    spread = {}
    for k in LABELS.values():
        vals = [so["cells"][str(S)][k]["stddev"] for S in so["sources"]]
        spread[k] = (min(vals), max(vals))
    claims.append(Claim("the number of sources (5..20) has no effect on StdDev", "Fig 13",
                        all(hi - lo <= max(0.5, 0.2 * hi) for lo, hi in spread.values()),
                        "StdDev range over S: " + ", ".join(f"{k} {lo:.2f}..{hi:.2f}" for k, (lo, hi) in spread.items())))
    return claims


# ============================================================================ report
def markdown(results: dict[str, Any], command: str = "python -m workloads.exp_dkg") -> str:
    """The report of :func:`run_all`'s results as markdown."""
    wk, sw, so = results["workers"], results["sweep"], results["sources"]
    out = ["# DKG paper (Dalabasmaz & Can): StdDev and DistCost reproduced with dpa.tools.simulate", "",
           f"Command: `{command}` (seed {results['seed']}); run time {sum(results['timings_s'].values()):.0f} s.", "",
           "StdDev = population standard deviation of the worker loads in % of all messages (eq. 7); "
           "DistCost = (key, worker) pairs / distinct keys (eq. 8). Sources (spouts) = "
           f"{wk['sources']} unless varied. Latency and throughput (Storm measurements) are not simulated.", "",
           "## Streams", ""]
    rows = []
    for name, s in {**wk["streams"], "election-r68 (sources run)": so["stream"]}.items():
        gen = (f"hot key {s['hot_fraction']:.0%} + uniform over {COUNTRY_KEYS - 1} keys" if s["kind"] == "country"
               else f"hot key {s['hot_fraction']:.0%} + uniform over {s['tail_keys']:,} tail keys (calibrated)")
        rows.append([name, gen, f"{s['messages']:,}", f"{s['distinct_keys']:,}", f"{s['p1_measured']:.2%}"])
    out += [markdown_table(["stream", "generator", "messages", "distinct keys", "hot key share"], rows), ""]

    el = wk["cells"].get("election-r68", {}).get("10")
    if el is not None:
        out += ["## Table 3: twitter-election (68%), 5 sources, 10 workers: ours (paper)", ""]
        rows = [[k, f"{m['stddev']:.4f} ({PAPER_TABLE3[k]['stddev']})", f"{m['dist_cost']:.4f} ({PAPER_TABLE3[k]['dist_cost']})",
                 f"{m['max_load_pct']:.1f}%"] for k, m in el.items()]
        out += [markdown_table(["method", "StdDev", "DistCost", "max load"], rows),
                "SG's DistCost was fitted (tail size); the other values are predictions.", ""]

    out += ["## (a) StdDev / DistCost by stream and W", ""]
    header = ["stream", "W"] + [f"{k} StdDev" for k in LABELS.values()] + [f"{k} DistCost" for k in LABELS.values()]
    rows = []
    for name, per_w in wk["cells"].items():
        for W, cell in per_w.items():
            rows.append([name, W] + [f"{cell[k]['stddev']:.3f}" for k in LABELS.values()]
                        + [f"{cell[k]['dist_cost']:.3f}" for k in LABELS.values()])
    out += [markdown_table(header, rows), ""]
    rows = []
    for name, per_w in wk["cells"].items():
        for W, cell in per_w.items():
            st = cell["DKG"]["router_stats"]
            rows.append([name, W, f"{cell['PKG']['top2_load_pct'][0]:.1f}% / {cell['PKG']['top2_load_pct'][1]:.1f}%",
                         f"{cell['DKG']['top2_load_pct'][0]:.1f}% / {cell['DKG']['top2_load_pct'][1]:.1f}%",
                         f"{cell['PKG']['dist_cost_rest']:.3f} / {cell['DKG']['dist_cost_rest']:.3f}",
                         cell["DKG"]["replication_max"], f"{st.get('scale_outs', 0):,}", f"{st.get('scale_downs', 0):,}"])
    out += ["Top-two worker loads, DistCost without the hot key, and DKG's activity (most workers of one key; "
            "scale-out and scale-down decisions summed over the sources):", "",
            markdown_table(["stream", "W", "PKG top two", "DKG top two", "DistCost w/o hot key PKG / DKG",
                            "DKG max workers/key", "DKG scale-outs", "DKG scale-downs"], rows), ""]

    out += [f"## (b) Skew sweep, W = {sw['workers']} (Figures 10-11)", ""]
    header = ["skew"] + [f"{k} StdDev" for k in LABELS.values()] + [f"{k} DistCost" for k in LABELS.values()]
    rows = [[f"{float(f):.0%}"] + [f"{cell[k]['stddev']:.3f}" for k in LABELS.values()]
            + [f"{cell[k]['dist_cost']:.3f}" for k in LABELS.values()] for f, cell in sw["cells"].items()]
    out += [markdown_table(header, rows), ""]

    out += [f"## (c) Sources, election stand-in, W = {so['workers']} (Figure 13)", ""]
    header = ["S"] + [f"{k} StdDev" for k in LABELS.values()] + [f"{k} DistCost" for k in LABELS.values()]
    rows = [[S] + [f"{cell[k]['stddev']:.3f}" for k in LABELS.values()]
            + [f"{cell[k]['dist_cost']:.3f}" for k in LABELS.values()] for S, cell in so["cells"].items()]
    out += [markdown_table(header, rows), ""]

    out += ["## Table 1: DKG thresholds (dpa.routing.policies.dkg) vs the paper", ""]
    rows = [[m, f"{v['ideal']:.2f}", f"{v['threshold']:.2f} ({PAPER_TABLE1[int(m)][1]:.2f})",
             f"{v['max_machines']} ({PAPER_TABLE1[int(m)][2]})"] for m, v in results["thresholds"].items()]
    out += [markdown_table(["machines", "ideal load %", "threshold % (paper)", "max machines (paper)"], rows), ""]
    out += ["## Claims of the paper, checked", "", claims_markdown([Claim(**c) for c in results["claims"]]), "",
            "Plots: `dkg_workers.png`, `dkg_skew.png`, `dkg_sources.png`.", ""]
    return "\n".join(out)


# ============================================================================ plots
def _policy_lines(ax: Any, xs: Sequence[float], cells: Sequence[dict[str, dict[str, Any]]], key: str) -> None:
    """One line per policy (SG, KG, PKG, DKG in colours C0..C3): its ``key`` in each cell against ``xs``."""
    for k, label in enumerate(LABELS.values()):
        ax.plot(xs, [cell[label][key] for cell in cells], marker="o", color=f"C{k}", label=label)


def plot_workers(results: dict[str, Any], path: str | Path) -> Path:
    """StdDev and DistCost vs W, one column per stream."""
    wk = results["workers"]
    names = list(wk["cells"])
    fig, axes = new_figure(2, len(names), width=4.2, height=3.4)
    for c, name in enumerate(names):
        ws = [int(w) for w in wk["cells"][name]]
        for r, key in enumerate(("stddev", "dist_cost")):
            _policy_lines(axes[r][c], ws, [wk["cells"][name][str(w)] for w in ws], key)
        if name == "election-r68" and "10" in wk["cells"][name]:
            for k, label in enumerate(LABELS.values()):
                axes[0][c].plot([10], [PAPER_TABLE3[label]["stddev"]], marker="s", markerfacecolor="none",
                                color=f"C{k}", linestyle="none")
                axes[1][c].plot([10], [PAPER_TABLE3[label]["dist_cost"]], marker="s", markerfacecolor="none",
                                color=f"C{k}", linestyle="none")
        axes[0][c].set_title(f"{name} (hollow: paper's Table 3)" if name == "election-r68" else name)
        axes[1][c].set_yscale("log")
        for r, lab in enumerate(("StdDev (% of messages)", "DistCost")):
            axes[r][c].set_xlabel("workers W")
            axes[r][c].set_ylabel(lab)
            axes[r][c].set_xscale("log")
            axes[r][c].set_xticks(ws, [str(w) for w in ws])
            axes[r][c].grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    return save_figure(fig, path)


def plot_sweep(results: dict[str, Any], path: str | Path) -> Path:
    """StdDev and DistCost vs the hot key's share (Figure 11 b, c)."""
    sw = results["sweep"]
    fig, axes = new_figure(1, 2, width=5.5, height=4.0)
    xs = [100 * f for f in sw["skews"]]
    for c, key in enumerate(("stddev", "dist_cost")):
        _policy_lines(axes[0][c], xs, [sw["cells"][str(f)] for f in sw["skews"]], key)
    for c, lab in enumerate(("StdDev (% of messages)", "DistCost")):
        axes[0][c].set_xlabel("skewness ratio (hot key share, %)")
        axes[0][c].set_ylabel(lab)
        axes[0][c].grid(True, alpha=0.3)
    axes[0][1].set_yscale("log")
    axes[0][0].set_title(f"country-skew streams, W={sw['workers']}, S={sw['sources']}")
    axes[0][0].legend(fontsize=8)
    return save_figure(fig, path)


def plot_sources(results: dict[str, Any], path: str | Path) -> Path:
    """StdDev vs the number of sources (Figure 13)."""
    so = results["sources"]
    fig, axes = new_figure(1, 1, width=6.0, height=4.0)
    _policy_lines(axes[0][0], so["sources"], [so["cells"][str(S)] for S in so["sources"]], "stddev")
    label_axes(axes[0][0], "sources S", "StdDev (% of messages)", f"election stand-in (68%), W={so['workers']}")
    return save_figure(fig, path)


def plots(results: dict[str, Any], out: Path) -> list[Path]:
    """Every plot of the report into ``out``."""
    return [fn(results, out / name) for fn, name in ((plot_workers, "dkg_workers.png"), (plot_sweep, "dkg_skew.png"),
                                                      (plot_sources, "dkg_sources.png"))]


# ============================================================================ CLI
EXPERIMENT = scaled_experiment(
    "workloads.exp_dkg", __doc__, Sizes, run_all, claims=claims, markdown=markdown, plots=plots,
    out="results/dkg", json_name="dkg.json", quick_scale="0.01",
)
main = EXPERIMENT.main


if __name__ == "__main__":
    import sys

    sys.exit(main())
