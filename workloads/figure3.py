"""Experiment 2 of the DPA paper (Figure 3): skew ``S`` against the maximum LB rounds.

For each workload WL1..WL5 and method (halving, doubling), the job of Table 1
(:mod:`workloads.table1`, same settings) runs with ``max_rounds`` = 0..4 (the maximum
number of redistributions each reducer may trigger; 0 = No LB), ``--runs`` times; the
mean ``S`` is plotted per workload, one line per method. The paper's Table 1 values
(rounds 0 and 1) are drawn as hollow markers for reference; the paper's Figure 3
values themselves are only given as a picture.

Usage::

    python -m workloads.figure3                     # Ray, 3 runs per point
    python -m workloads.figure3 --runtime local     # in-process simulator, seconds
    python -m workloads.figure3 --out-dir results/figure3/ --max-rounds 4

Outputs in ``--out-dir``: ``figure3.json`` (settings, every run's ``stats.to_dict()``,
mean per point), ``figure3.png`` and ``figure3.md`` (the numbers as a table).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from workloads.experiment import (
    Settings,
    add_common_args,
    instant_lb,
    report_inexact,
    run_cell,
    settings_from_args,
)
from workloads.harness import Experiment, Log
from workloads.paper import METHODS, PAPER_TABLE1, WORKLOAD_NAMES

__all__ = ["EXPERIMENT", "main", "markdown", "plot", "run_figure3"]

COLORS = {"halving": "tab:blue", "doubling": "tab:orange"}


def run_figure3(runtime: str = "local", runs: int = 3, settings: Settings | None = None,
                workloads: list[str] | None = None, methods: list[str] | None = None,
                max_rounds: int = 4, log: Log = print, retries: int = 0) -> dict[str, Any]:
    """Runs Experiment 2.

    Must be called inside :func:`workloads.experiment.runtime_session` for Ray.

    Returns:
        ``{"rounds": [0..max_rounds], "series": {workload: {method: [mean S]}},
        "t0": {workload: {method: [S predicted at t=0]}}, "cells": [run_cell results]}``.
    """
    settings = settings or Settings()
    workloads = list(workloads or WORKLOAD_NAMES)
    methods = list(methods or METHODS)
    rounds = list(range(max_rounds + 1))
    series: dict[str, dict[str, list[float]]] = {}
    t0: dict[str, dict[str, list[float]]] = {}
    cells = []
    for name in workloads:
        for method in methods:
            started = time.perf_counter()
            means = []
            for r in rounds:
                cell = run_cell(name, method, r, runs, runtime, settings, retries)
                cells.append(cell)
                means.append(cell["skew_mean"])
            series.setdefault(name, {})[method] = means
            t0.setdefault(name, {})[method] = [instant_lb(name, method, r, settings)["skew"] for r in rounds]
            if log is not None:
                log(f"  {name} {method:8s} S by max rounds {rounds}: {' '.join(f'{m:.2f}' for m in means)}"
                    f"  [{time.perf_counter() - started:.1f}s]")
    return {"rounds": rounds, "series": series, "t0": t0, "cells": cells}


def plot(result: dict[str, Any], path: str | Path, title: str = "") -> Path:
    """Draws one subplot per workload (S vs max rounds, a line per method) into a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series, rounds = result["series"], result["rounds"]
    names = list(series)
    fig, axes = plt.subplots(1, len(names), figsize=(3.4 * len(names) + 0.6, 3.6), sharey=True, squeeze=False)
    for ax, name in zip(axes[0], names):
        for method, values in series[name].items():
            color = COLORS.get(method)
            ax.plot(rounds, values, marker="o", color=color, label=method.capitalize())
            paper = PAPER_TABLE1.get((name, method))
            if paper is not None and len(rounds) > 1:
                ax.plot([0, 1], list(paper), linestyle="none", marker="s", markersize=9,
                        markerfacecolor="none", color=color, label=f"{method.capitalize()} (paper, Table 1)")
        ax.set_title(name)
        ax.set_xlabel("max LB rounds per reducer")
        ax.set_xticks(rounds)
        ax.set_ylim(-0.04, 1.04)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    axes[0][0].set_ylabel("skew S (mean)")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def markdown(result: dict[str, Any], meta: dict[str, Any]) -> str:
    """The numbers of the figure as a markdown table."""
    rounds = result["rounds"]
    s = meta["settings"]
    out = [
        f"# Figure 3 (Experiment 2) — runtime `{meta['runtime']}`, {meta['runs']} run(s), mean S",
        "",
        f"cost {s['seconds_per_record'] * 1000:g} ms/record, batch_size={s['batch_size']}, "
        f"chunk_size={s['chunk_size']}, lb_interval_s={s['lb_interval_s']}, "
        f"report_interval_s={s['report_interval_s']}, tau={s['tau']}. "
        "Paper = Table 1 (rounds 0 and 1); t0 = S if the balancer acted at t=0 with every record queued.",
        "",
        "| WL | Method | " + " | ".join(f"r={r}" for r in rounds) + " | paper r=0 | paper r=1 | t0 r=" + str(rounds[-1]) + " |",
        "|---|---|" + "---:|" * (len(rounds) + 3),
    ]
    for name, by_method in result["series"].items():
        for method, values in by_method.items():
            paper = PAPER_TABLE1.get((name, method), (float("nan"), float("nan")))
            out.append(f"| {name} | {method} | " + " | ".join(f"{v:.2f}" for v in values)
                       + f" | {paper[0]:.2f} | {paper[1]:.2f} | {result['t0'][name][method][-1]:.2f} |")
    out += ["", f"Elapsed {meta['elapsed_s']:.1f} s."]
    return "\n".join(out) + "\n"


def _arguments(parser: argparse.ArgumentParser) -> None:
    add_common_args(parser)
    parser.add_argument("--max-rounds", type=int, default=4, help="largest max_rounds (default 4)")


def _run(args: argparse.Namespace, log: Log) -> dict[str, Any]:
    settings = settings_from_args(args)
    if log:
        log(f"Figure 3: runtime={args.runtime} runs={args.runs} rounds 0..{args.max_rounds} {settings}")
    return run_figure3(args.runtime, args.runs, settings, args.workloads, args.methods, args.max_rounds, log=log,
                       retries=args.retries)


def _plots(result: dict[str, Any], out_dir: Path) -> list[Path]:
    meta = result["meta"]
    return [plot(result, out_dir / "figure3.png",
                 title=f"DPA Experiment 2: S vs max LB rounds ({meta['runtime']} runtime, mean of {meta['runs']} run(s))")]


def _verdict(result: dict[str, Any], args: argparse.Namespace) -> int:
    inexact = [m for cell in result["cells"] for m in cell["inexact"]]
    report_inexact(inexact, len(result["cells"]) * args.runs)
    return int(bool(inexact))


EXPERIMENT = Experiment(
    module="workloads.figure3", description=__doc__ or "", out="results/figure3/", json_name="figure3.json",
    out_flags=("--out-dir", "--out"), add_arguments=_arguments, run=_run, plots=_plots, verdict=_verdict,
    markdown=lambda res: markdown(res, res["meta"]), print_markdown=True,
    meta=lambda args: {"settings": settings_from_args(args).to_dict()},
    runtime="ray", runs=3, quick=("--runtime", "local", "--runs", "1", "--workloads", "WL4", "--max-rounds", "2"),
)
main = EXPERIMENT.main


if __name__ == "__main__":
    sys.exit(main())
