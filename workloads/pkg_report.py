"""The report of :mod:`workloads.exp_pkg`: markdown tables and plots of its results."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from workloads.harness import (
    Claim,
    claims_markdown,
    label_axes,
    markdown_table,
    new_figure,
    save_figure,
    sci,
)
from workloads.imbalance import IMBALANCE_DOC
from workloads.pkg_streams import BALANCED, PROBES_PER_STREAM, ZIPF_DATASETS, jaccard
from workloads.pkg_streams import paper_value as _paper_value

__all__ = ["markdown", "plot_choices", "plot_drift", "plot_grids", "plot_sources", "plots"]


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
    out = ["# PKG paper (Nasir et al.): simulation experiments reproduced with dpa.tools.simulate", "",
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
    label_axes(ax, "choices d", "imbalance I(n) / n",
               f"PKG with d choices, Zipf z={ch['stream']['z']}, K={ch['stream']['num_keys']:,} "
               f"(dots: draws; dotted: p1/d - 1/W; 0 drawn at 1e-10)", log_y=True)
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
    label_axes(ax, "messages t (dotted: the hot key changes)", "I(t) / t", f"drifting hot key, W={dr['series_workers']}",
               log_y=True)
    return save_figure(fig, path)


def plots(results: dict[str, Any], out: Path) -> list[Path]:
    """Every plot of the report into ``out``."""
    return [fn(results, out / name) for fn, name in ((plot_grids, "table2.png"), (plot_sources, "sources.png"),
                                                      (plot_choices, "choices.png"), (plot_drift, "drift.png"))]
