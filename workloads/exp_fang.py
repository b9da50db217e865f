"""Fang et al.'s MinTable, MinMig and Mixed under distribution fluctuation (vs plain hash).

Reproduces the synthetic set-up of the paper's section 5 with the pure planning function
:func:`dpa.routing.policies.fang.policy.plan_table` (no runtime, no Ray): a Zipf stream whose key
distribution changes by ``f`` every interval, re-planned by each method whenever an
interval is too skewed (the stream, the controller and the methods are in
:mod:`workloads.fang_streams`).

Sweeps: ``theta`` (the paper's Fig. 9), the table limit ``A_max`` of Mixed (Appendix B,
Fig. 17), the fluctuation rate ``f`` (Fig. 12), and hash's skewness against ``R`` and
``K`` (Fig. 7). Gedik's ``readj`` (:func:`dpa.routing.policies.gedik.construct.construct`) joins
the main runs and the fluctuation sweep. It gets
the same trigger and the same interval statistics (as relative frequencies), with
``alpha = 1 + theta`` and linear state, computation and communication (``"LLL"``).

Usage::

    python -m workloads.exp_fang --out results/fang

Writes ``fang.json``, ``fang_intervals.png``, ``fang_sweeps.png`` and ``fang.md`` into
``--out``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from workloads.fang_streams import METHODS, FluctuatingZipf, Setup, hash_skewness, run_fluctuation
from workloads.harness import (
    Claim,
    Experiment,
    claims_markdown,
    markdown_table,
    new_figure,
    save_figure,
)

logger = logging.getLogger(__name__)

__all__ = [
    "EXPERIMENT",
    "FluctuatingZipf",
    "Setup",
    "claims",
    "hash_skewness",
    "main",
    "markdown",
    "run_all",
    "run_fluctuation",
]

COLORS = {"hash": "tab:gray", "mixed": "tab:blue", "mintable": "tab:orange", "minmig": "tab:green",
          "gedik-readj": "tab:red"}


def run_all(setup: Setup | None = None, windows: Sequence[int] = (1, 5),
            thetas: Sequence[float] = (0.02, 0.08, 0.2, 0.5),
            limits: Sequence[int] = (20, 50, 100, 300, 1000),
            fluctuations: Sequence[float] = (0.0, 0.1, 0.25, 0.5, 1.0, 1.5),
            sweep_intervals: int = 12, workers_grid: Sequence[int] = (5, 10, 20, 40),
            keys_grid: Sequence[int] = (5_000, 10_000, 100_000, 1_000_000),
            log: Callable[[str], None] | None = print) -> dict[str, Any]:
    """The main runs (one per state window ``w``) plus the sweeps.

    Each sweep point is a run of ``sweep_intervals`` intervals varying one parameter of
    ``setup``, for every window.

    Args:
        setup: The main configuration (its ``window`` is replaced by each of ``windows``).
        windows: State windows ``w`` (the paper tests 1 and 5).
        thetas: Tolerances of the theta sweep (must include ``setup.theta``).
        limits: ``A_max`` values of the Mixed sweep.
        fluctuations: ``f`` values of the fluctuation sweep.
        sweep_intervals: Intervals per sweep point.
        workers_grid: ``R`` values of the hash-skewness sweep.
        keys_grid: ``K`` values of the hash-skewness sweep.
        log: Progress printer (None = quiet).

    Returns:
        ``{"windows", "main": {w: run}, "theta_sweep": {w: {theta: summary}},
        "limit_sweep": {w: {A_max: summary}}, "fluctuation_sweep": {w: {f: summary}},
        "hash_skewness", "gedik"}``.
    """
    setup = setup or Setup()
    say = log or (lambda _msg: None)
    t0 = time.perf_counter()
    res: dict[str, Any] = {"windows": list(windows), "main": {}, "theta_sweep": {}, "limit_sweep": {},
                           "fluctuation_sweep": {}}
    for w in windows:
        base = replace(setup, window=w)
        res["main"][w] = run_fluctuation(base, gedik=True)
        short = replace(base, intervals=sweep_intervals)
        res["theta_sweep"][w] = {th: run_fluctuation(replace(short, theta=th))["summary"] for th in thetas}
        res["limit_sweep"][w] = {lim: run_fluctuation(replace(short, table_limit=lim), methods=("mixed",))["summary"]
                                 for lim in limits}
        res["fluctuation_sweep"][w] = {f: run_fluctuation(replace(short, fluctuation=f), gedik=True)["summary"]
                                       for f in fluctuations}
        say(f"window {w}: {time.perf_counter() - t0:.1f}s")
    res["hash_skewness"] = hash_skewness(workers_grid, keys_grid, z=setup.z, seed=setup.seed)
    say(f"hash skewness: {time.perf_counter() - t0:.1f}s")
    res["gedik"] = "compared in the main runs"
    return res


# ---------------------------------------------------------------------------- verdicts
def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def claims(res: dict[str, Any]) -> list[Claim]:
    """The paper's claims next to the verdict our numbers give (one row per window where it matters)."""
    out = []
    theta = res["main"][res["windows"][0]]["setup"]["theta"]
    for w in res["windows"]:
        s = res["main"][w]["summary"]
        th = res["theta_sweep"][w]
        lim = res["limit_sweep"][w]
        fs = res["fluctuation_sweep"][w]
        tag = f"w={w}: "
        out.append(Claim(
            "MinTable gives the smallest table, MinMig the largest, Mixed in between",
            "Sec. 3.2-3.3",
            s["mintable"]["table_mean"] <= s["mixed"]["table_mean"] <= s["minmig"]["table_mean"],
            tag + f"mean table size MinTable {s['mintable']['table_mean']:.0f}, Mixed {s['mixed']['table_mean']:.0f}, "
            f"MinMig {s['minmig']['table_mean']:.0f}"))
        out.append(Claim(
            "MinMig migrates the least, MinTable the most, Mixed in between",
            "Sec. 3.3",
            s["minmig"]["migration"] <= s["mixed"]["migration"] + 1e-12
            and s["mixed"]["migration"] <= s["mintable"]["migration"] + 1e-12,
            tag + f"migration per interval MinMig {_pct(s['minmig']['migration'])}, "
            f"Mixed {_pct(s['mixed']['migration'])}, MinTable {_pct(s['mintable']['migration'])}"))
        ratio = th[theta]["mintable"]["migration"] / max(th[theta]["mixed"]["migration"], 1e-12)
        out.append(Claim(
            "MinTable incurs about three times the migration cost of Mixed under the same theta",
            "Sec. 5, Fig. 9b",
            ratio >= 2.0,
            tag + f"theta={theta}: MinTable / Mixed migration = {ratio:.2f}x"))
        mig = [th[t]["mixed"]["migration"] for t in sorted(th)]
        out.append(Claim(
            "Stricter balance (smaller theta) costs more migration",
            "Sec. 5, Fig. 9b",
            all(a >= b - 1e-12 for a, b in zip(mig, mig[1:], strict=False)),
            tag + "Mixed migration by theta " + ", ".join(f"{t}: {_pct(m)}" for t, m in zip(sorted(th), mig,
                                                                                         strict=True))))
        lm = [lim[k]["mixed"]["migration"] for k in sorted(lim)]
        drop = 1 - lm[-1] / lm[0] if lm[0] > 0 else 0.0
        out.append(Claim(
            "Relaxing the table limit A_max greatly reduces Mixed's migration cost (we ask for >= 25% less)",
            "App. B, Fig. 17",
            drop >= 0.25,
            tag + "Mixed migration by A_max " + ", ".join(f"{k}: {_pct(m)}" for k, m in zip(sorted(lim), lm,
                                                                                          strict=True))
            + f" ({100 * drop:.0f}% less)"))
        worst = max(s[m]["skew_after"] for m in METHODS)
        out.append(Claim(
            "Every re-plan balances the interval it was computed on to within the tolerance (max/avg <= 1 + theta)",
            "Sec. 3 (Theorems 1-2)",
            worst <= 1 + theta + 1e-9,
            tag + "mean skewness after re-planning " + ", ".join(f"{m} {s[m]['skew_after']:.3f}" for m in METHODS)
            + f"; hash {s['hash']['skew_before']:.3f}"))
        fmax = max(fs)
        out.append(Claim(
            "Mixed keeps the operator balanced whatever the fluctuation rate f (Fig. 13: throughput near Ideal)",
            "Sec. 5, Figs. 12-13",
            all(fs[f]["mixed"]["skew_before"] <= 1 + 2 * theta for f in fs),
            tag + "skewness the intervals ran with, Mixed vs hash: "
            + ", ".join(f"f={f}: {fs[f]['mixed']['skew_before']:.2f} vs {fs[f]['hash']['skew_before']:.2f}"
                        for f in sorted(fs))
            + f" (at f={fmax} the plan of the last interval is stale)"))
        if "gedik-readj" in s:
            g = s["gedik-readj"]
            out.append(Claim(
                "Readj either fails to find a balancing plan or needs a large routing table when key workloads "
                "vary a lot; Mixed balances with a bounded table",
                "Sec. 1 and 6",
                (g["skew_after"] > 1 + theta + 1e-9 or g["table_mean"] > s["mixed"]["table_mean"])
                and s["mixed"]["skew_after"] <= 1 + theta + 1e-9,
                tag + f"skewness after re-planning: Readj {g['skew_after']:.3f}, Mixed {s['mixed']['skew_after']:.3f}; "
                f"mean table: Readj {g['table_mean']:.0f}, Mixed {s['mixed']['table_mean']:.0f}"))
            fl = sorted(fs)
            growth_g = fs[fl[-1]]["gedik-readj"]["migration"] - fs[fl[0]]["gedik-readj"]["migration"]
            growth_m = fs[fl[-1]]["mixed"]["migration"] - fs[fl[0]]["mixed"]["migration"]
            out.append(Claim(
                "With more frequent variance (higher f) Mixed's migration cost grows slower than Readj's",
                "Sec. 5, Fig. 12b",
                growth_m < growth_g,
                tag + f"migration from f={fl[0]} to f={fl[-1]}: Mixed {_pct(fs[fl[0]]['mixed']['migration'])} -> "
                f"{_pct(fs[fl[-1]]['mixed']['migration'])}, Readj {_pct(fs[fl[0]]['gedik-readj']['migration'])} -> "
                f"{_pct(fs[fl[-1]]['gedik-readj']['migration'])}"))
            out.append(Claim(
                "Mixed generates its plan much faster than Readj",
                "Sec. 5, Fig. 12a",
                s["mixed"]["plan_ms"] < g["plan_ms"],
                tag + f"mean planning time Mixed {s['mixed']['plan_ms']:.0f} ms, Readj {g['plan_ms']:.0f} ms "
                "(both ours, Python + numpy)"))
        tab = res["main"][w]["series"]["minmig"]["table"]
        out.append(Claim(
            "Without cleaning (MinMig) the routing table keeps growing over adjustments",
            "App. B, Fig. 18",
            tab[-1] > tab[len(tab) // 3],
            tag + f"MinMig table size at intervals {len(tab) // 3} and {len(tab) - 1}: {tab[len(tab) // 3]}, {tab[-1]}"))
    fig7 = res["hash_skewness"]
    bw = fig7["by_workers"]
    out.append(Claim(
        "Hash's skewness grows with the number of task instances",
        "Sec. 5, Fig. 7a",
        all(bw[a]["mean"] <= bw[b]["mean"] for a, b in zip(sorted(bw), sorted(bw)[1:], strict=False)),
        "hash max/avg by R " + ", ".join(f"{w}: {bw[w]['mean']:.2f}" for w in sorted(bw))))
    bk = fig7["by_keys"]
    out.append(Claim(
        "Hash's skewness shrinks as the key domain grows",
        "Sec. 5, Fig. 7b",
        all(bk[a]["mean"] >= bk[b]["mean"] for a, b in zip(sorted(bk), sorted(bk)[1:], strict=False)),
        "hash max/avg by K " + ", ".join(f"{k}: {bk[k]['mean']:.2f}" for k in sorted(bk))))
    return out


# ---------------------------------------------------------------------------- output
def _main_table(s: dict[str, Any]) -> str:
    names = ["hash", *[m for m in ("mixed", "mintable", "minmig", "gedik-readj") if m in s]]
    rows = []
    for m in names:
        r = s[m]
        if m == "hash":
            rows.append([m, f"{r['skew_before']:.3f}", "-", "-", "-", "-", "-", "-"])
        else:
            rows.append([m, f"{r['skew_before']:.3f}", f"{r['skew_after']:.3f}", _pct(r["migration"]),
                         _pct(r["migration_per_replan"]), f"{r['table_mean']:.0f}", str(r["replans"]),
                         f"{r['plan_ms']:.1f}"])
    return markdown_table(["method", "skewness before", "skewness after", "migration / interval",
                           "migration / re-plan", "mean table size", "re-plans", "plan ms"], rows)


def markdown(res: dict[str, Any], command: str, elapsed_s: float) -> str:
    """The results as markdown: set-up, main tables, sweeps, claims."""
    windows = res["windows"]
    setup = dict(res["main"][windows[0]]["setup"])
    setup.pop("window")
    lines = ["# Fang et al.: MinTable, MinMig and Mixed under distribution fluctuation", "",
             f"Command: `{command}` ({elapsed_s:.0f} s on this machine).", "",
             "Set-up: " + ", ".join(f"{k}={v}" for k, v in setup.items())
             + f"; state windows w in {windows}. Skewness is max/avg load; migration cost is the state of the "
             "moved keys over all state (paper eq. 2), per interval; `before` is the skewness an interval ran "
             "with (the previous plan on the fluctuated distribution), `after` the skewness the new plan "
             "reaches on the interval's own statistics. Intervals after the first are averaged. MinTable and "
             "MinMig run without a table limit (as in the paper), Mixed with A_max = table_limit.", ""]
    for w in windows:
        lines += [f"## Main run, w = {w}", "", _main_table(res["main"][w]["summary"])]
    if "gedik-readj" not in res["main"][windows[0]]["summary"]:
        lines += [f"Gedik's readj: {res['gedik']}.", ""]
    lines += ["## Tolerance theta (Fig. 9)", "", "Cells: migration per interval / skewness after / mean table size.",
              ""]
    for w in windows:
        th = res["theta_sweep"][w]
        rows = [[f"w={w}, theta={t}", *[f"{_pct(th[t][m]['migration'])} / {th[t][m]['skew_after']:.3f} / "
                                        f"{th[t][m]['table_mean']:.0f}" for m in METHODS]] for t in sorted(th)]
        lines += [markdown_table(["setting", *METHODS], rows)]
    lines += ["## Table limit A_max of Mixed (App. B, Fig. 17)", ""]
    rows = []
    for w in windows:
        lim = res["limit_sweep"][w]
        rows += [[w, k, _pct(lim[k]["mixed"]["migration"]), f"{lim[k]['mixed']['skew_after']:.3f}",
                  f"{lim[k]['mixed']['table_mean']:.0f}"] for k in sorted(lim)]
    lines += [markdown_table(["w", "A_max", "migration / interval", "skewness after", "mean table size"], rows)]
    lines += ["## Fluctuation rate f (Figs. 12-13)", "",
              "Cells: skewness before / skewness after / migration per interval.", ""]
    rows = []
    for w in windows:
        fs = res["fluctuation_sweep"][w]
        cols = [m for m in (*METHODS, "gedik-readj") if m in fs[min(fs)]]
        rows += [[w, f, f"{fs[f]['hash']['skew_before']:.3f}",
                  *[f"{fs[f][m]['skew_before']:.3f} / {fs[f][m]['skew_after']:.3f} / {_pct(fs[f][m]['migration'])}"
                    for m in cols]]
                 for f in sorted(fs)]
    lines += [markdown_table(["w", "f", "hash skewness", *cols], rows)]
    fig7 = res["hash_skewness"]
    rows = [[f"R={w}", f"{v['mean']:.2f}", f"{v['max']:.2f}"] for w, v in sorted(fig7["by_workers"].items())]
    rows += [[f"K={k}", f"{v['mean']:.2f}", f"{v['max']:.2f}"] for k, v in sorted(fig7["by_keys"].items())]
    lines += ["## Hash skewness (Fig. 7; K=10000 for the R rows, R=10 for the K rows)", "",
              markdown_table(["setting", "mean max/avg", "max max/avg"], rows)]
    lines += ["## Paper claims", "", claims_markdown(claims(res))]
    return "\n".join(lines)


def plot(res: dict[str, Any], out: Path) -> list[Path]:
    """Per-interval figure (one row per window) and sweep figure."""
    windows = res["windows"]
    fig, ax = new_figure(len(windows), 3, width=5.5, height=4.0)
    for row, w in enumerate(windows):
        series = res["main"][w]["series"]
        names = [m for m in ("hash", "mixed", "mintable", "minmig", "gedik-readj") if m in series]
        for m in names:
            x = np.arange(len(series[m]["before"]))
            ax[row, 0].plot(x, series[m]["before"], label=m, color=COLORS[m])
            if m != "hash":
                ax[row, 1].plot(x, 100 * np.asarray(series[m]["migration"]), label=m, color=COLORS[m])
                ax[row, 2].plot(x, series[m]["table"], label=m, color=COLORS[m])
        ax[row, 0].set(title=f"Skewness each interval ran with (w={w})", xlabel="interval", ylabel="max / avg load")
        ax[row, 1].set(title=f"Migration cost of the re-plan (w={w})", xlabel="interval",
                       ylabel="state moved (% of all state)")
        ax[row, 2].set(title=f"Routing table size (w={w})", xlabel="interval", ylabel="entries")
        for a in ax[row]:
            a.legend()
            a.grid(alpha=0.3)
    paths = [save_figure(fig, out / "fang_intervals.png")]

    fig, grid = new_figure(2, 2, width=6.0, height=4.2)
    ax = grid.reshape(1, 4)
    styles = {windows[0]: "-", **{w: "--" for w in windows[1:]}}
    for w in windows:
        th = res["theta_sweep"][w]
        ts = sorted(th)
        for m in METHODS:
            ax[0, 0].plot(ts, [100 * th[t][m]["migration"] for t in ts], marker="o", ls=styles[w],
                          label=f"{m} w={w}", color=COLORS[m])
        lim = res["limit_sweep"][w]
        ks = sorted(lim)
        ax[0, 1].plot(ks, [100 * lim[k]["mixed"]["migration"] for k in ks], marker="o", ls=styles[w],
                      color=COLORS["mixed"], label=f"mixed w={w}")
        fs = res["fluctuation_sweep"][w]
        fl = sorted(fs)
        for m in ("hash", *METHODS, "gedik-readj"):
            if (m == "hash" and w != windows[0]) or m not in fs[fl[0]]:
                continue
            ax[0, 2].plot(fl, [fs[f][m]["skew_before"] for f in fl], marker="o", ls=styles[w],
                          label=m if m == "hash" else f"{m} w={w}", color=COLORS[m])
    ax[0, 0].set(title="Migration cost vs tolerance", xlabel="theta", ylabel="state moved per interval (%)")
    ax[0, 1].set(title="Mixed: migration cost vs table limit", xlabel="A_max (entries)",
                 ylabel="state moved per interval (%)", xscale="log")
    ax[0, 2].set(title="Skewness intervals ran with vs fluctuation", xlabel="fluctuation rate f",
                 ylabel="max / avg load")
    fig7 = res["hash_skewness"]["by_workers"]
    ws = sorted(fig7)
    ax[0, 3].plot(ws, [fig7[w]["mean"] for w in ws], marker="o", color=COLORS["hash"], label="hash (mean)")
    ax[0, 3].plot(ws, [fig7[w]["max"] for w in ws], marker="x", ls="--", color=COLORS["hash"], label="hash (max)")
    ax[0, 3].set(title="Hash skewness vs task instances", xlabel="R", ylabel="max / avg load")
    for a in ax[0]:
        a.legend(fontsize=7)
        a.grid(alpha=0.3)
    paths.append(save_figure(fig, out / "fang_sweeps.png"))
    return paths


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--intervals", type=int, default=Setup.intervals)
    parser.add_argument("--keys", type=int, default=Setup.num_keys)
    parser.add_argument("--workers", type=int, default=Setup.num_workers)
    parser.add_argument("--small-sweeps", action="store_true",
                        help="one window, few sweep points, a small hash-skewness grid (for smoke runs)")


#: The sweeps of ``--small-sweeps`` (:func:`run_all` arguments).
SMALL_SWEEPS: dict[str, Any] = {"windows": (1,), "thetas": (0.08, 0.3), "limits": (5, 50), "fluctuations": (0.0, 1.0),
                                "sweep_intervals": 2, "workers_grid": (5,), "keys_grid": (2_000,)}


def _run(args: argparse.Namespace, log: Callable[[str], None] | None) -> dict[str, Any]:
    setup = Setup(num_keys=args.keys, num_workers=args.workers, intervals=args.intervals, seed=args.seed)
    return run_all(setup, log=log, **(SMALL_SWEEPS if args.small_sweeps else {}))


EXPERIMENT = Experiment(
    module="workloads.exp_fang", description=__doc__ or "", out="results/fang", json_name="fang.json",
    add_arguments=_arguments, run=_run, seed=Setup.seed, claims=claims, plots=plot, print_markdown=True,
    markdown=lambda res: markdown(res, res["meta"]["command"], res["meta"]["elapsed_s"]),
    quick=("--intervals", "4", "--keys", "2000", "--workers", "5", "--small-sweeps"),
)
main = EXPERIMENT.main


if __name__ == "__main__":
    sys.exit(main())
