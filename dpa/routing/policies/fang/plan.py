"""Fang et al.'s planning: the three phases (cleaning, preparing, LLFD assigning), the
metrics and the compact representation, as pure functions (no runtime).

:func:`plan_table` is the entry point; :mod:`dpa.routing.policies.fang.policy` drives it from the
balancer. The algorithms and the choices made where the paper is vague are in
``docs/policies/fang.md``; the main ones: Adjust's "originally associated with d" means
"after phases I and II, never disassociated in this run"; when Adjust fails everywhere the
key goes to the least loaded instance; ties break by key hash; Mixed that cleans everything
and is still too large keeps the smaller of its table and MinTable's; ``table_limit`` is
a hard bound (the cheapest entries go home).
"""

from __future__ import annotations

import bisect
import heapq
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpa.errors import ConfigError
from dpa.metrics import max_over_avg
from dpa.routing.policies.common import check_int_option

__all__ = [
    "MODES",
    "compact_vectors",
    "discretize",
    "hlhe_representatives",
    "llfd",
    "migration_cost",
    "plan_table",
    "priority_index",
    "workload_skewness",
]

#: The three algorithms of the paper (policy names).
MODES = ("mintable", "minmig", "mixed")

_INF = float("inf")

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- metrics
def workload_skewness(loads: Any) -> float:
    """The paper's workload skewness ``max(L) / mean(L)`` (1.0 = perfectly balanced)."""
    return max_over_avg([float(x) for x in np.asarray(loads, dtype=float).ravel()])


def migration_cost(old_dest: Mapping[int, int], new_dest: Mapping[int, int],
                   state_sizes: Mapping[int, float], total_state: float | None = None) -> float:
    """Fraction of all state held by keys whose destination changes (paper eq. 2, section 5).

    Args:
        old_dest: Destination of each key under the old assignment function.
        new_dest: Destination under the new one (keys missing here keep ``old_dest``).
        state_sizes: ``S(k)`` of each key (missing keys hold no state).
        total_state: Denominator (default: the sum of ``state_sizes``).

    Returns:
        ``sum(S(k) for moved k) / total_state`` in ``[0, 1]`` (0 without state).
    """
    total = float(sum(state_sizes.values())) if total_state is None else float(total_state)
    if total <= 0:
        return 0.0
    moved = sum(float(state_sizes.get(k, 0.0)) for k, d in new_dest.items() if old_dest.get(k, d) != d)
    return moved / total


def priority_index(cost: float, size: float, beta: float) -> float:
    """The migration priority index ``gamma(k) = c(k) ** beta / S(k)`` (section 3.2).

    A key without load has priority 0; a loaded key without state, infinite priority.
    """
    if cost <= 0:
        return 0.0
    if size <= 0:
        return _INF
    return cost ** beta / size


# ---------------------------------------------------------------------------- compact form
def hlhe_representatives(max_value: float, degree: int) -> np.ndarray:
    """The representative values of degree ``m`` (strictly decreasing), up to ``max_value``.

    Linear part ``m * ceil(max_value / m), ..., 2m, m`` then exponential part
    ``..., 4, 2, 1`` (powers of two below ``m``). See the module docstring.
    """
    m = check_int_option("degree", degree, 1, "fang")
    top = max(1.0, float(max_value))
    linear = m * np.arange(max(1, math.ceil(top / m)), 0, -1, dtype=np.float64)
    expo = [2.0 ** j for j in range(int(math.log2(m)) + 1) if 2 ** j < m][::-1]
    return np.concatenate([linear, np.asarray(expo, dtype=np.float64)])


def _neighbours(x: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Largest representative ``<= x`` and smallest ``>= x`` (values ``>= 1``)."""
    lo = np.empty_like(x)
    hi = np.empty_like(x)
    big = x >= m
    lo[big] = m * np.floor(x[big] / m)
    hi[big] = m * np.ceil(x[big] / m)
    small = ~big
    e = np.log2(x[small])
    lo[small] = 2.0 ** np.floor(e)
    hi[small] = np.minimum(2.0 ** np.ceil(e), m)
    return lo, hi


def discretize(values: Any, degree: int) -> np.ndarray:
    """Section 4.2: values replaced by representatives so that sums stay accurate.

    Values are divided by the smallest positive one if it is below 1 (so that all are
    ``>= 1``, the paper's normalisation; integer counts are left as they are), each is
    approximated by one of its two neighbouring representatives
    (:func:`hlhe_representatives`), in non-increasing order of value, choosing the larger
    one while the accumulated deviation ``sum(actual - approx)`` is positive and the
    smaller one otherwise. Zeros stay zero.

    Args:
        values: Non-negative numbers (costs or memory sizes).
        degree: The degree of discretization ``m >= 1`` (1 = finest).

    Returns:
        The approximations, aligned with ``values`` (``float64``).
    """
    m = check_int_option("degree", degree, 1, "fang")
    v = np.asarray(values, dtype=np.float64)
    out = np.zeros_like(v)
    pos = np.flatnonzero(v > 0)
    if not len(pos):
        return out
    scale = min(1.0, float(v[pos].min()))  # normalise only if the smallest value is below 1
    x = v[pos] / scale
    lo, hi = _neighbours(x, m)
    order = np.argsort(-x, kind="stable")
    approx = np.empty_like(x)
    dev = 0.0
    for i, a, b in zip(order.tolist(), lo[order].tolist(), hi[order].tolist(), strict=True):
        r = b if dev > 0 else a
        approx[i] = r
        dev += x[i] - r
    out[pos] = approx * scale
    return out


def compact_vectors(next_dest: Any, cur_dest: Any, hash_dest: Any, cost: Any, size: Any) -> np.ndarray:
    """The 6-dimensional compact representation ``(next, current, hash, c, S, count)``.

    Keys with equal ``(next, current, hash, c, S)`` are merged into one row whose last
    column counts them (section 4). Rows are sorted lexicographically.

    Returns:
        A ``float64`` array of shape ``(rows, 6)``.
    """
    cols = [np.asarray(a, dtype=np.float64) for a in (next_dest, cur_dest, hash_dest, cost, size)]
    if not len(cols[0]):
        return np.zeros((0, 6))
    rows, counts = np.unique(np.stack(cols, axis=1), axis=0, return_counts=True)
    return np.concatenate([rows, counts[:, None].astype(np.float64)], axis=1)


# ---------------------------------------------------------------------------- LLFD
@dataclass
class _Keys:
    """The planning problem in index form (keys sorted by hash)."""

    hashes: list[int]
    cost: list[float]
    size: list[float]
    home: list[int]
    old: list[int]


def llfd(candidates: list[int], dest: list[int], cost: list[float], prio: list[float],
         hashes: list[int], loads: list[float], bound: float,
         trace: list[tuple[int, int, bool, tuple[int, ...]]] | None = None) -> dict[str, int]:
    """Least-Load Fit Decreasing with Adjust (Algorithm 1), in place.

    Args:
        candidates: Indices of the keys in ``C`` (disassociated: ``dest[i] == -1``).
        dest: Destination per key index; ``-1`` for candidates. Updated in place.
        cost: ``c(k)`` per key index.
        prio: Value of the selection criterion per key index (largest first).
        hashes: Key hash per index (tie-breaker).
        loads: Load estimate per instance (keys not in ``C`` plus background), updated.
        bound: ``(1 + theta) * L_bar``.
        trace: If given, every Adjust call is appended as ``(key index, instance,
            accepted, exchangeable set E)`` (for tests and walk-throughs).

    Returns:
        Counters: ``exchanges`` (successful Adjust with a non-empty ``E``), ``evicted``
        (keys put back into ``C``), ``fallbacks`` (keys no instance accepted).
    """
    W = len(loads)
    tol = 1e-9 * max(1.0, abs(bound))
    original = [False] * len(dest)
    members: list[list[int]] = [[] for _ in range(W)]
    for i, d in enumerate(dest):
        if d >= 0:
            original[i] = True
            members[d].append(i)
    # Originals of each instance in criterion order (for E) and by cost (feasibility).
    by_prio = [sorted(m, key=lambda i: (-prio[i], hashes[i])) for m in members]
    by_cost = [sorted(m, key=lambda i: cost[i]) for m in members]
    cost_sorted = [[cost[i] for i in m] for m in by_cost]
    prefix = [np.concatenate(([0.0], np.cumsum(c))).tolist() for c in cost_sorted]
    removed: list[list[int]] = [[] for _ in range(W)]
    start = [0] * W  # by_prio[d][:start[d]] are all evicted already

    heap = [(-prio[i], hashes[i], i) for i in candidates]
    heapq.heapify(heap)
    counters = {"exchanges": 0, "evicted": 0, "fallbacks": 0}

    def eligible(d: int, c: float) -> float:
        """Sum of the costs of d's remaining originals with cost < c."""
        j = bisect.bisect_left(cost_sorted[d], c)
        total = prefix[d][j]
        for i in removed[d]:
            if cost[i] < c:
                total -= cost[i]
        return total

    def adjust(i: int, d: int) -> bool:
        need = loads[d] + cost[i] - bound
        if need <= tol:
            if trace is not None:
                trace.append((i, d, True, ()))
            return True
        if eligible(d, cost[i]) + tol < need:
            if trace is not None:
                trace.append((i, d, False, ()))
            return False
        chosen: list[int] = []
        got = 0.0
        ranked = by_prio[d]
        while start[d] < len(ranked) and not original[ranked[start[d]]]:
            start[d] += 1
        for j in ranked[start[d]:]:
            if not original[j] or cost[j] >= cost[i]:
                continue
            chosen.append(j)
            got += cost[j]
            if got + tol >= need:
                break
        for j in chosen:
            original[j] = False
            removed[d].append(j)
            dest[j] = -1
            loads[d] -= cost[j]
            heapq.heappush(heap, (-prio[j], hashes[j], j))
        counters["exchanges"] += 1
        counters["evicted"] += len(chosen)
        if trace is not None:
            trace.append((i, d, True, tuple(chosen)))
        return True

    while heap:
        _, _, i = heapq.heappop(heap)
        order = sorted(range(W), key=lambda d: (loads[d], d))
        target = -1
        for d in order:
            if adjust(i, d):
                target = d
                break
        if target < 0:
            target = order[0]
            counters["fallbacks"] += 1
        dest[i] = target
        loads[target] += cost[i]
    return counters


def _phase_two(dest: list[int], cost: list[float], prio: list[float], hashes: list[int],
               loads: list[float], bound: float) -> list[int]:
    """Disassociates keys, largest criterion first, from every overloaded instance."""
    W = len(loads)
    tol = 1e-9 * max(1.0, abs(bound))
    over = [d for d in range(W) if loads[d] > bound + tol]
    if not over:
        return []
    per: dict[int, list[int]] = {d: [] for d in over}
    for i, d in enumerate(dest):
        if d in per and cost[i] > 0:
            per[d].append(i)
    picked: list[int] = []
    for d in over:
        for i in sorted(per[d], key=lambda i: (-prio[i], hashes[i])):
            if loads[d] <= bound + tol:
                break
            dest[i] = -1
            loads[d] -= cost[i]
            picked.append(i)
    return picked


def _three_phases(keys: _Keys, clean: set[int], prio: list[float], background: list[float],
                  bound: float) -> tuple[list[int], dict[str, int]]:
    """Phase I (clean the given key indices), Phase II and Phase III (LLFD)."""
    dest = [keys.home[i] if i in clean else keys.old[i] for i in range(len(keys.old))]
    loads = list(background)
    for i, d in enumerate(dest):
        loads[d] += keys.cost[i]
    cand = _phase_two(dest, keys.cost, prio, keys.hashes, loads, bound)
    counters = llfd(cand, dest, keys.cost, prio, keys.hashes, loads, bound)
    counters["candidates"] = len(cand)
    return dest, counters


def _entries(keys: _Keys, dest: list[int]) -> int:
    return sum(1 for d, h in zip(dest, keys.home, strict=True) if d != h)


def plan_table(key_loads: Mapping[int, float], state_sizes: Mapping[int, float] | None,
               old_table: Mapping[int, int], num_workers: int, mode: str = "mixed",
               theta: float = 0.08, table_limit: int | None = None, beta: float = 1.5,
               background_loads: Any = None, background_state: float = 0.0,
               discretize_degree: int | None = None) -> tuple[dict[int, int], dict[str, Any]]:
    """Builds a new routing table with MinTable, MinMig or Mixed (a pure function).

    Args:
        key_loads: ``c(k)`` per key hash (the last interval's records).
        state_sizes: ``S(k)`` per key hash; None = ``S = c`` (window of one interval).
        old_table: The current table ``A`` (key hash -> worker).
        num_workers: ``R``; hash destination is ``hash % R``.
        mode: ``"mintable"``, ``"minmig"`` or ``"mixed"``.
        theta: Imbalance tolerance ``theta_max >= 0``.
        table_limit: Most entries ``A_max`` (None = unbounded).
        beta: Weight factor of the migration priority index (``>= 0``).
        background_loads: Load per worker of keys not in ``key_loads`` (never moved).
        background_state: State of those keys (only the migration-cost denominator).
        discretize_degree: Plan on discretized ``c`` and ``S`` (section 4.2), or None.

    Returns:
        ``(table, stats)``: the new table (key hash -> worker, only keys whose worker
        differs from ``hash % R``) and a dict with ``table_size``, ``migrated_keys``,
        ``migrated_state``, ``migration_cost``, ``loads_before``, ``loads_after``,
        ``skewness_before``, ``skewness_after``, ``trials`` (Mixed's ``n`` values),
        ``mintable_fallback``, ``truncated``, ``candidates``, ``exchanges``, ``evicted``,
        ``fallbacks``, ``plan_ms`` and, when discretizing, ``compact_vectors`` and
        ``estimation_error``.

    Raises:
        ConfigError: On bad arguments.
    """
    started = time.perf_counter()
    W = check_int_option("num_workers", num_workers, 1, "fang")
    if mode not in MODES:
        raise ConfigError(f"fang: mode must be one of {', '.join(MODES)}, got {mode!r}")
    if not (isinstance(theta, (int, float)) and theta >= 0 and math.isfinite(theta)):
        raise ConfigError(f"fang: theta must be a finite number >= 0, got {theta!r}")
    if not (isinstance(beta, (int, float)) and beta >= 0 and math.isfinite(beta)):
        raise ConfigError(f"fang: beta must be a finite number >= 0, got {beta!r}")
    if table_limit is not None:
        table_limit = check_int_option("table_limit", table_limit, 0, "fang")
    for k, d in old_table.items():
        if not (isinstance(d, (int, np.integer)) and 0 <= d < W):
            raise ConfigError(f"fang: old table sends key {k} to {d!r}, outside [0, {W})")
    bg = [0.0] * W if background_loads is None else [float(x) for x in background_loads]
    if len(bg) != W:
        raise ConfigError(f"fang: background_loads needs {W} values, got {len(bg)}")

    sizes = key_loads if state_sizes is None else state_sizes
    universe = sorted(set(int(k) for k in key_loads) | set(int(k) for k in sizes) | set(int(k) for k in old_table))
    keys = _Keys(
        hashes=universe,
        cost=[float(key_loads.get(k, 0.0)) for k in universe],
        size=[float(sizes.get(k, 0.0)) for k in universe],
        home=[k % W for k in universe],
        old=[int(old_table.get(k, k % W)) for k in universe],
    )
    exact_cost = list(keys.cost)
    stats: dict[str, Any] = {"mode": mode}
    if discretize_degree is not None:
        keys.cost = discretize(keys.cost, discretize_degree).tolist()
        keys.size = discretize(keys.size, discretize_degree).tolist()
        total_c = sum(exact_cost)
        stats["estimation_error"] = abs(sum(keys.cost) - total_c) / total_c if total_c else 0.0
        stats["compact_vectors"] = int(len(compact_vectors(keys.old, keys.old, keys.home, keys.cost, keys.size)))

    loads_before = list(bg)
    for i, d in enumerate(keys.old):
        loads_before[d] += exact_cost[i]
    total = sum(bg) + sum(keys.cost)
    bound = (1.0 + float(theta)) * total / W

    by_cost = keys.cost
    gamma = [priority_index(c, s, float(beta)) for c, s in zip(keys.cost, keys.size, strict=True)]
    counters_sum = {"candidates": 0, "exchanges": 0, "evicted": 0, "fallbacks": 0}
    trials: list[int] = []
    mintable_fallback = False

    def run(clean: set[int], prio: list[float]) -> list[int]:
        dest, counters = _three_phases(keys, clean, prio, bg, bound)
        for name, value in counters.items():
            counters_sum[name] += value
        return dest

    in_table = [i for i in range(len(universe)) if keys.old[i] != keys.home[i]]
    if mode == "mintable":
        dest = run(set(in_table), by_cost)
    elif mode == "minmig":
        dest = run(set(), gamma)
    else:
        order = sorted(in_table, key=lambda i: (keys.size[i], keys.hashes[i]))  # smallest memory first
        n_back = 0
        while True:
            trials.append(n_back)
            dest = run(set(order[:n_back]), gamma)
            size = _entries(keys, dest)
            if table_limit is None or size <= table_limit:
                break
            if n_back >= len(order):
                mintable_fallback = True
                alt = run(set(in_table), by_cost)
                if _entries(keys, alt) < size:
                    dest = alt
                break
            n_back = min(len(order), n_back + size - table_limit)

    truncated = 0
    if table_limit is not None:
        entries = [i for i in range(len(dest)) if dest[i] != keys.home[i]]
        excess = len(entries) - table_limit
        if excess > 0:
            for i in sorted(entries, key=lambda i: (exact_cost[i], keys.hashes[i]))[:excess]:
                dest[i] = keys.home[i]
            truncated = excess
            logger.info("fang %s: table limit %d: %d entries moved back", mode, table_limit, excess)

    table = {keys.hashes[i]: dest[i] for i in range(len(dest)) if dest[i] != keys.home[i]}
    loads_after = list(bg)
    for i, d in enumerate(dest):
        loads_after[d] += exact_cost[i]
    moved = [i for i in range(len(dest)) if dest[i] != keys.old[i]]
    exact_size = [float(sizes.get(k, 0.0)) for k in universe]
    total_state = sum(exact_size) + float(background_state)
    moved_state = sum(exact_size[i] for i in moved)
    stats.update(
        table_size=len(table),
        migrated_keys=len(moved),
        migrated_state=moved_state,
        migration_cost=moved_state / total_state if total_state > 0 else 0.0,
        loads_before=loads_before,
        loads_after=loads_after,
        skewness_before=workload_skewness(loads_before),
        skewness_after=workload_skewness(loads_after),
        bound=bound,
        trials=trials,
        mintable_fallback=mintable_fallback,
        truncated=truncated,
        plan_ms=(time.perf_counter() - started) * 1000.0,
        **counters_sum,
    )
    return table, stats
