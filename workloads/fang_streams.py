"""The fluctuating key stream of Fang et al.'s section 5 and its replay through the planners.

:mod:`workloads.exp_fang` sweeps :func:`run_fluctuation` over the paper's parameters. One
replay, with the pure planning function :func:`dpa.routing.policies.fang.policy.plan_table` (no
runtime, no Ray):

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
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from dpa.routing.policies.fang.plan import plan_table, workload_skewness
from dpa.routing.policies.fang.policy import TableSnapshot
from dpa.routing.policies.gedik.construct import construct
from dpa.routing.policies.gedik.model import GedikParams, PartitionFunction
from workloads.generators import zipf_probabilities
from workloads.imbalance import hash_keys

__all__ = ["METHODS", "FluctuatingZipf", "Setup", "hash_skewness", "run_fluctuation"]

METHODS = ("mixed", "mintable", "minmig")
"""Fang's three algorithms (their ``dpa`` policy names)."""


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
    """Gedik's readj (:func:`dpa.routing.policies.gedik.construct.construct`): explicit hash over a consistent hash.

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


# ---------------------------------------------------------------------------- replay
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
