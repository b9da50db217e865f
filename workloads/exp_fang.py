"""Fang et al.'s MinTable, MinMig and Mixed under distribution fluctuation (vs plain hash).

Reproduces the synthetic set-up of the paper's section 5 with the pure planning function
:func:`dpa.partitioners.fang.plan_table` (no runtime, no Ray):

* **Stream**: ``K`` keys with Zipf(``z``) frequencies (ranks assigned to keys by a seeded
  permutation); every interval carries ``N`` tuples drawn from the current frequencies
  (exact multinomial counts, so ``c(k)`` is the key's records of the interval).
* **Fluctuation** (the paper's ``f``): at the start of every interval the generator swaps
  the frequencies of two keys whose hash destinations differ, the first drawn in
  proportion to its frequency (so hot keys move), the second uniformly, until the total
  change of the key distribution ``sum_k |p_new(k) - p_old(k)|`` (in ``[0, 2]``) reaches
  ``f``. The paper's exact measure of "change on workload" is lost from our copy of the
  text; this is our reading (its range ``[0, 2]`` matches the paper's range of ``f``).
* **Controller**: at the end of every interval, each method computes the loads of the
  interval under its current table; if ``max L > (1 + theta) * mean L`` it re-plans with
  the interval's statistics (``c`` = records, ``S`` = records over the last ``window``
  intervals) and the new table holds during the next interval. Per interval we record
  the skewness the interval ran with (``before``: the previous plan on the fluctuated
  distribution), the skewness the new plan reaches on the interval's statistics
  (``after``), the migration cost (state moved / all state, paper eq. 2), the table size
  and the planning time.
* **Hash**: ``hash % R`` with no table.

Sweeps: ``theta`` (the paper's Fig. 9), the table limit ``A_max`` of Mixed (Appendix B,
Fig. 17), the fluctuation rate ``f`` (Fig. 12), and hash's skewness against ``R`` and
``K`` (Fig. 7). Gedik's ``readj`` (:func:`dpa.partitioners.gedik_construct.construct`) joins
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
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from dpa.partitioners.fang import TableSnapshot
from dpa.partitioners.fang_plan import plan_table, workload_skewness
from dpa.partitioners.gedik_construct import construct
from dpa.partitioners.gedik_model import GedikParams, PartitionFunction
from workloads.generators import zipf_probabilities
from workloads.harness import (
    Claim,
    Experiment,
    claims_markdown,
    markdown_table,
    new_figure,
    save_figure,
)
from workloads.imbalance import hash_keys

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

METHODS = ("mixed", "mintable", "minmig")
COLORS = {"hash": "tab:gray", "mixed": "tab:blue", "mintable": "tab:orange", "minmig": "tab:green",
          "gedik-readj": "tab:red"}


@dataclass(frozen=True)
class Setup:
    """One experiment configuration (defaults: the paper's defaults where it gives them).

    Attributes:
        num_keys: ``K``.
        num_workers: ``R`` (task instances).
        z: Zipf exponent (paper default skewness 0.85).
        fluctuation: ``f`` in ``[0, 2]`` (paper default 1.0).
        intervals: Number of intervals.
        tuples: Tuples per interval.
        theta: Imbalance tolerance (paper default 0.08).
        beta: Weight factor of the priority index (paper default 1.5).
        table_limit: ``A_max`` of Mixed (MinTable/MinMig run unbounded, as in the paper).
        window: Intervals of state ``w``.
        seed: Seed of the stream.
    """

    num_keys: int = 10_000
    num_workers: int = 10
    z: float = 0.85
    fluctuation: float = 1.0
    intervals: int = 30
    tuples: int = 200_000
    theta: float = 0.08
    beta: float = 1.5
    table_limit: int = 100
    window: int = 1
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------- stream
@dataclass
class FluctuatingZipf:
    """Zipf frequencies over ``K`` keys that fluctuate by ``f`` every interval (see module doc).

    Attributes:
        home: Hash destination of each key (``hash % R``).
        probs: Current frequency of each key.
        swaps: Swaps made by the last :meth:`fluctuate`.
    """

    num_keys: int
    z: float
    home: np.ndarray
    seed: int = 0
    probs: np.ndarray = field(init=False)
    swaps: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.probs = zipf_probabilities(self.z, self.num_keys)[self.rng.permutation(self.num_keys)]

    def fluctuate(self, f: float, max_swaps: int | None = None) -> float:
        """Swaps frequencies until ``sum |p_new - p_old| >= f``; returns the change reached."""
        if f <= 0:
            self.swaps = 0
            return 0.0
        old = self.probs.copy()
        p = self.probs
        change = 0.0
        swaps = 0
        limit = max_swaps if max_swaps is not None else 20 * self.num_keys
        cdf = np.cumsum(old)
        cdf /= cdf[-1]
        while change < f and swaps < limit:
            a = int(min(np.searchsorted(cdf, self.rng.random(), side="right"), self.num_keys - 1))
            b = int(self.rng.integers(self.num_keys))
            if self.home[a] == self.home[b] or a == b:
                continue
            before = abs(p[a] - old[a]) + abs(p[b] - old[b])
            p[a], p[b] = p[b], p[a]
            change += abs(p[a] - old[a]) + abs(p[b] - old[b]) - before
            swaps += 1
        self.swaps = swaps
        return change

    def sample(self, n: int) -> np.ndarray:
        """Exact per-key tuple counts of one interval (multinomial)."""
        return self.rng.multinomial(n, self.probs / self.probs.sum())


# ---------------------------------------------------------------------------- methods
class _FangMethod:
    """A Fang algorithm: routing table over ``hash % R``, re-planned with :func:`plan_table`."""

    def __init__(self, mode: str, setup: Setup, hashes: np.ndarray) -> None:
        self.mode, self.setup, self.hashes = mode, setup, hashes
        self.table: dict[int, int] = {}
        self.snapshot = TableSnapshot.from_table({}, setup.num_workers)

    def dest(self) -> np.ndarray:
        return self.snapshot.lookup_batch(self.hashes)

    def plan(self, key_loads: dict[int, float], sizes: dict[int, float]) -> None:
        st = self.setup
        limit = st.table_limit if self.mode == "mixed" else None
        self.table, _ = plan_table(key_loads, sizes, self.table, st.num_workers, self.mode, st.theta, limit, st.beta)
        self.snapshot = TableSnapshot.from_table(self.table, st.num_workers, self.snapshot.version + 1)

    def table_size(self) -> int:
        return len(self.table)


class _GedikMethod:
    """Gedik's readj (:func:`dpa.partitioners.gedik_construct.construct`): explicit hash over a consistent hash.

    Fed with the interval's relative key frequencies; ``alpha = 1 + theta`` (Gedik bounds
    max/min per resource, Fang max/avg: the same number is the stricter bound for Gedik),
    resources ``LLL`` (state, computation and communication linear in the frequency, as in
    Fang's window model), every other parameter at Gedik's defaults.
    """

    def __init__(self, setup: Setup, hashes: np.ndarray) -> None:
        self.setup, self.hashes = setup, hashes
        self.params = GedikParams(alpha=1.0 + max(setup.theta, 1e-3), resources="LLL")
        self.pf = PartitionFunction(setup.num_workers, self.params.replicas)

    def dest(self) -> np.ndarray:
        return self.pf.lookup_batch(self.hashes).astype(np.int64)

    def plan(self, key_loads: dict[int, float], sizes: dict[int, float]) -> None:
        total = float(sum(key_loads.values()))
        freqs = {k: v / total for k, v in key_loads.items()} if total > 0 else {}
        self.pf, _ = construct(freqs, self.pf, self.setup.num_workers, "readj", self.params)

    def table_size(self) -> int:
        return len(self.pf.explicit_hashes)


# ---------------------------------------------------------------------------- runs
def _loads(counts: np.ndarray, dest: np.ndarray, W: int) -> np.ndarray:
    return np.bincount(dest, weights=counts, minlength=W)


def run_fluctuation(setup: Setup, methods: Sequence[str] = METHODS, gedik: bool = False) -> dict[str, Any]:
    """Runs every method on the same fluctuating stream (see the module docstring).

    Args:
        setup: The configuration.
        methods: Fang modes to run (``mixed``, ``mintable``, ``minmig``).
        gedik: Also run Gedik's readj.

    Returns:
        ``{"setup", "change": [...], "series": {method: {"before", "after", "migration",
        "table", "plan_ms", "replans"}}, "summary": {method: {...}}}``; ``hash`` has only
        ``before`` (= ``after``).
    """
    K, W = setup.num_keys, setup.num_workers
    hashes = hash_keys(np.arange(K, dtype=np.int64)).astype(np.int64)
    home = hashes % W
    stream = FluctuatingZipf(K, setup.z, home, setup.seed)
    runners: dict[str, Any] = {m: _FangMethod(m, setup, hashes) for m in methods}
    if gedik:
        runners["gedik-readj"] = _GedikMethod(setup, hashes)
    series: dict[str, dict[str, list[float]]] = {
        m: {"before": [], "after": [], "migration": [], "table": [], "plan_ms": [], "replans": []}
        for m in runners
    }
    series["hash"] = {"before": [], "after": []}
    history: deque[np.ndarray] = deque(maxlen=setup.window)
    changes: list[float] = []
    for t in range(setup.intervals):
        if t > 0:
            changes.append(stream.fluctuate(setup.fluctuation))
        counts = stream.sample(setup.tuples).astype(np.float64)
        history.append(counts)
        state = np.sum(history, axis=0)
        total_state = float(state.sum())
        h = workload_skewness(_loads(counts, home, W))
        series["hash"]["before"].append(h)
        series["hash"]["after"].append(h)
        live = np.flatnonzero(counts > 0)
        held = np.flatnonzero(state > 0)
        key_loads = dict(zip(hashes[live].tolist(), counts[live].tolist(), strict=True))
        sizes = dict(zip(hashes[held].tolist(), state[held].tolist(), strict=True))
        for m, runner in runners.items():
            s = series[m]
            dest = runner.dest()
            before = workload_skewness(_loads(counts, dest, W))
            s["before"].append(before)
            if before > 1.0 + setup.theta:
                started = time.perf_counter()
                runner.plan(key_loads, sizes)
                s["plan_ms"].append((time.perf_counter() - started) * 1000.0)
                new = runner.dest()
                s["migration"].append(float(state[new != dest].sum()) / total_state if total_state else 0.0)
                s["after"].append(workload_skewness(_loads(counts, new, W)))
                s["replans"].append(1)
            else:
                s["plan_ms"].append(0.0)
                s["migration"].append(0.0)
                s["after"].append(before)
                s["replans"].append(0)
            s["table"].append(runner.table_size())
    summary = {}
    for m, s in series.items():
        row = {"skew_before": float(np.mean(s["before"][1:] or s["before"])),
               "skew_after": float(np.mean(s["after"][1:] or s["after"]))}
        if m != "hash":
            replanned = [ms for ms, r in zip(s["plan_ms"], s["replans"], strict=True) if r]
            row.update(
                migration=float(np.mean(s["migration"][1:] or s["migration"])),
                migration_per_replan=float(np.mean([x for x, r in zip(s["migration"], s["replans"], strict=True)
                                                    if r] or [0.0])),
                table_mean=float(np.mean(s["table"])),
                table_final=int(s["table"][-1]),
                replans=int(sum(s["replans"])),
                plan_ms=float(np.mean(replanned)) if replanned else 0.0,
            )
        summary[m] = row
    return {"setup": setup.to_dict(), "change": changes, "series": series, "summary": summary}


def hash_skewness(num_workers: Sequence[int], num_keys: Sequence[int], z: float = 0.85,
                  tuples: int = 200_000, repeats: int = 20, seed: int = 0) -> dict[str, Any]:
    """Hash's workload skewness (max/avg) against ``R`` and ``K`` (the paper's Fig. 7).

    Every repeat draws a fresh rank -> key permutation (an "interval" with a new hot set).
    """
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {"by_workers": {}, "by_keys": {}}

    def measure(W: int, K: int) -> dict[str, float]:
        hashes = hash_keys(np.arange(K, dtype=np.int64)).astype(np.int64)
        p = zipf_probabilities(z, K)
        vals = []
        for _ in range(repeats):
            counts = rng.multinomial(tuples, p[rng.permutation(K)]).astype(np.float64)
            vals.append(workload_skewness(_loads(counts, hashes % W, W)))
        return {"mean": float(np.mean(vals)), "max": float(np.max(vals))}

    for W in num_workers:
        out["by_workers"][int(W)] = measure(int(W), 10_000)
    for K in num_keys:
        out["by_keys"][int(K)] = measure(10, int(K))
    return out


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
