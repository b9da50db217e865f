"""Fang et al.'s mixed routing (routing table over a hash) as dpa policies ``mintable``,
``minmig`` and ``mixed``.

Paper: *Parallel Stream Processing Against Workload Skewness and Variance* (Fang, Zhang,
Fu, Zhang, Zhou, Zhu). A key ``k`` goes to ``A[k]`` if the small explicit routing table
``A`` has an entry for it, otherwise to its hash destination ``h(k) = hash % R`` (eq. 1),
where ``hash`` is dpa's 32-bit key hash. At the end of each interval the controller
evaluates the imbalance and, if it is too high, builds a new table from the interval's
per-key statistics.

Model (section 2.1), as implemented:

* **Computation cost** ``c(k)``: the key's records in the last interval (the paper allows
  any cost; dpa counts records, so ``c = g``, the frequency).
* **Memory** ``S(k)``: the state the key holds. ``state="window"`` (default) is the paper's
  window model, ``S(k) = sum of g_j(k)`` over the last ``window`` intervals (tuples kept
  for ``w`` intervals, e.g. a windowed join); ``state="unit"`` gives every key ``S = 1``
  (one accumulator per key, dpa's aggregations).
* **Load** ``L(d) = sum of c(k)`` over the keys routed to ``d``; average ``L_bar``.
  An instance is *overloaded* when ``L(d) > (1 + theta) * L_bar`` (the balance indicator's
  upper bound ``theta_max``, called ``theta`` here).
* **Migration cost** (eq. 2 and section 5): the state of the keys whose destination
  changes, as a fraction of all state, :func:`migration_cost`.
* **Workload skewness** (section 5): ``max(L) / L_bar``, :func:`workload_skewness`.

The three phases (section 3) and the algorithms:

* **Phase I (Cleaning)** moves table keys back to their hash destination (virtually).
  MinTable (Alg. 2) cleans all entries, MinMig (Alg. 3) none, Mixed (Alg. 4) the ``n``
  entries with the *smallest memory* first.
* **Phase II (Preparing)**: from every overloaded instance, keys are disassociated in
  decreasing order of the selection criterion ``R`` until the instance is no longer
  overloaded (or has no known key left); they form the candidate set ``C``.
* **Phase III (Assigning)**: LLFD (Alg. 1). Repeatedly the candidate with the largest
  ``R`` is taken; instances are tried in ascending order of their current load estimate
  (ties: lower id first, which is what makes the paper's Figure 4 walk-through try ``d1``
  before ``d2`` at ``9 = 9``); the first one for which **Adjust** returns true gets it.
  Adjust returns true if ``L(d) + c(k) <= (1 + theta) * L_bar``; otherwise it looks for an
  *exchangeable set* ``E`` of keys (i) originally associated with ``d``, (ii) each with a
  strictly smaller cost than ``k``, (iii) with ``L(d) + c(k) - c(E) <= (1 + theta) * L_bar``.
  ``E`` is built greedily in decreasing ``R`` order (the paper: "selected by R"); its keys
  are disassociated and added to ``C``. A table entry is written whenever a key's new
  destination differs from its hash destination (and removed when it goes home).
* **Criteria**: MinTable uses *highest computation cost first*; MinMig and Mixed use the
  **migration priority index** ``gamma(k) = c(k) ** beta / S(k)`` (largest first), the
  weight factor ``beta`` defaulting to 1.5 (the paper's default). With ``beta = 1`` and
  ``window = 1`` every key has ``gamma = 1`` (the paper's example); larger ``beta`` favours
  heavy keys, hence smaller tables (Appendix C).
* **Mixed** (Alg. 4): starts with ``n = 0`` (= MinMig); while the resulting table is larger
  than ``table_limit``, ``n`` grows by the number of entries overused in the last trial and
  the three phases are re-run from the old table.

Choices where the paper is vague (each tested in ``tests/unit/test_policies_fang.py``):

* "Originally associated with d" (Adjust's condition (i)) means: associated with ``d``
  after Phases I and II and never disassociated in this run; keys LLFD itself placed on
  ``d`` are never evicted again. This also bounds LLFD: every key is placed at most once.
* When Adjust fails on every instance (no assignment within the bound exists, e.g. a key
  heavier than ``(1 + theta) * L_bar``), the key goes to the least loaded instance without
  an exchange (LLFD's primary rule). The paper's Theorem 1 assumes a perfect assignment
  exists and does not say.
* Ties of a criterion are broken by the key hash (ascending), so plans are deterministic.
  ``gamma`` of a key without load is 0; of a loaded key without state, infinite.
* Mixed stops when ``n`` reaches the number of old entries (everything cleaned) and the
  table is still too large: it then "degenerates to MinTable" (section 5, Appendix B), so
  the MinTable plan is computed and the smaller of the two tables kept.
* ``table_limit`` is a hard bound for every mode: if a plan still has too many entries
  (MinTable or MinMig, which do not control the size, or an infeasible limit), the entries
  with the smallest cost are moved back to their hash destination (``stats["truncated"]``).
  With ``table_limit=None`` nothing is bounded (and Mixed is MinMig).
* Keys in the old table that had no records in the interval keep their entry (with cost
  0) unless cleaned; under the window state model their state may still be non-zero.
* Unlisted keys (reducers report only their ``key_stats_top`` keys) are a fixed background
  load of the reporting reducer: they count for the loads and never move.
* The trigger is ``max L > (1 + theta) * L_bar`` over the last interval (the upper bound of
  the paper's balance indicator); under-loaded instances alone never trigger a rebalance.
* Figure 4's hash destinations are in the figure, not in our copy of the text; the tests
  use a layout consistent with every number the text gives (loads 16/4, average 10, the
  re-overloading 9 + 2 = 11, perfect balance, 2 initial entries, 4 after LLFD alone, 2 after
  MinTable) and check the walk-through step by step.

The planner (:class:`FangPlanner`) counts intervals in records reported through
``observe_keys`` (option ``interval``), never in ``check``'s ``now``; it publishes only when
the new table differs from the current one (a plan that cannot improve, e.g. one key
heavier than the bound, publishes nothing). The ``mixed`` registry entry defaults to
``table_limit=1000`` (:data:`MIXED_DEFAULT_TABLE_LIMIT`; the paper's default is not legible
in our copy), ``mintable`` and ``minmig`` to no limit. Events carry ``action`` = the policy
name, ``reducer`` = the most loaded worker of the interval and no tokens.

**Compact representation** (section 4): :func:`compact_vectors` builds the 6-dimensional
vectors ``(next, current, hash, c, S, count)`` and :func:`discretize` implements the
two-step value discretization of section 4.2: representative values (:func:`hlhe_representatives`)
and a greedy choice between the two neighbouring representatives that cancels the
accumulated deviation. The paper's worked numbers are lost from our copy of the text, so
the representative series is our reading of "half-linear-half-exponential" with degree
``m``: the largest values are approximated on a linear grid of step ``m`` (``m, 2m, 3m,
...``), the values below ``m`` on the exponential grid ``1, 2, 4, ... < m`` (degree 1 is
exact on integers, larger degrees are coarser, as the paper's Figure 11 reads); the greedy
step takes the larger neighbour while the accumulated deviation ``sum(actual - approx)`` is
positive, the smaller one otherwise. With ``discretize=m`` the planner discretizes ``c`` and
``S`` before planning and reports the number of 6-dimensional vectors and the load
estimation error. The vector-adapted Mixed of section 4.1 (phases rewriting vector fields)
is not implemented: the plan is computed per key on the discretized values, so the option
shows the representation's accuracy, not its speed-up.
"""

from __future__ import annotations

import bisect
import heapq
import logging
import math
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from dpa.errors import ConfigError
from dpa.metrics import max_over_avg
from dpa.partitioners.common import check_int_option
from dpa.policy import Decision, Planner, PolicySpec, RebalanceEvent, Router, register_policy

if TYPE_CHECKING:
    from dpa.config import JobConfig

logger = logging.getLogger(__name__)

__all__ = [
    "MODES",
    "FangPlanner",
    "FangPolicy",
    "TableRouter",
    "TableSnapshot",
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


# ---------------------------------------------------------------------------- snapshot
@dataclass(frozen=True, eq=False)
class TableSnapshot:
    """Mixed routing state: explicit table (sorted hashes -> workers) over ``hash % R``.

    Attributes:
        num_reducers: ``R``.
        keys: Sorted ``uint32`` key hashes with an entry.
        dests: ``int64`` worker of each entry.
        version: Routing-state version.
    """

    num_reducers: int
    keys: np.ndarray
    dests: np.ndarray
    version: int = 0

    @classmethod
    def from_table(cls, table: Mapping[int, int], num_reducers: int, version: int = 0) -> TableSnapshot:
        """Builds a snapshot from a ``{hash: worker}`` table (entries equal to ``hash % R`` are dropped)."""
        items = sorted((int(k), int(d)) for k, d in table.items() if int(d) != int(k) % num_reducers)
        keys = np.array([k for k, _ in items], dtype=np.uint32)
        dests = np.array([d for _, d in items], dtype=np.int64)
        return cls(num_reducers, keys, dests, version)

    @property
    def table_size(self) -> int:
        """Entries of the explicit table."""
        return len(self.keys)

    def as_dict(self) -> dict[int, int]:
        """The table as ``{hash: worker}``."""
        return dict(zip(self.keys.tolist(), self.dests.tolist(), strict=True))

    def lookup_batch(self, hashes: np.ndarray) -> np.ndarray:
        """Worker of each hash: the table's entry on a hit, else ``hash % R`` (``int64``)."""
        h = np.asarray(hashes).astype(np.uint32, copy=False)
        out = (h % np.uint32(self.num_reducers)).astype(np.int64)
        if len(self.keys) and len(h):
            pos = np.searchsorted(self.keys, h)
            pos[pos == len(self.keys)] = 0
            hit = self.keys[pos] == h
            out[hit] = self.dests[pos[hit]]
        return out


class TableRouter(Router):
    """Routes by the snapshot's table over the hash."""

    def route(self, hashes: np.ndarray, snapshot: TableSnapshot) -> np.ndarray:
        return snapshot.lookup_batch(hashes)


# ---------------------------------------------------------------------------- planner
class FangPlanner(Planner):
    """The controller (section 4, Figure 5): per-interval key statistics -> new table.

    ``observe_keys`` accumulates the interval's per-key records; once ``interval`` records
    have been observed, the next ``check`` closes the interval: it computes every worker's
    load under the current table (listed keys by their current destination, unlisted
    records at the reporting reducer) and, if ``max L > (1 + theta) * L_bar``, runs
    :func:`plan_table` and publishes the new table with a higher version (unless it is
    unchanged). Periods are counted in observed records, never in ``now``.
    """

    def __init__(self, policy: FangPolicy, num_reducers: int) -> None:
        self.policy = policy
        self.num_reducers = num_reducers
        self._snapshot = TableSnapshot.from_table({}, num_reducers, 0)
        self._table: dict[int, int] = {}
        self.queue_lengths = [0] * num_reducers
        self._counts: dict[int, int] = {}
        self._residual = [0] * num_reducers
        self._records = 0
        self._history: deque[dict[int, int]] = deque(maxlen=policy.window)
        self._residual_history: deque[int] = deque(maxlen=policy.window)
        self.intervals = 0
        self.last_stats: dict[str, Any] | None = None

    @property
    def snapshot(self) -> TableSnapshot:
        return self._snapshot

    def observe(self, reducer: int, queue_length: int, version: int) -> None:
        if 0 <= reducer < self.num_reducers:
            self.queue_lengths[reducer] = int(queue_length)

    def observe_keys(self, reducer: int, hashes: np.ndarray, counts: np.ndarray, total: int) -> None:
        counts_l = np.asarray(counts, dtype=np.int64).tolist()
        acc = self._counts
        for h, c in zip(np.asarray(hashes).astype(np.uint32, copy=False).tolist(), counts_l, strict=True):
            acc[h] = acc.get(h, 0) + c
        self._residual[reducer] += max(0, int(total) - sum(counts_l))
        self._records += int(total)

    def interval_loads(self) -> list[float]:
        """Loads of the open interval under the current table."""
        loads = [float(x) for x in self._residual]
        snap = self._snapshot
        if self._counts:
            hs = np.fromiter(self._counts.keys(), dtype=np.uint32, count=len(self._counts))
            cs = np.fromiter(self._counts.values(), dtype=np.float64, count=len(self._counts))
            owners = snap.lookup_batch(hs)
            np_loads = np.bincount(owners, weights=cs, minlength=self.num_reducers)
            loads = [a + b for a, b in zip(loads, np_loads.tolist(), strict=True)]
        return loads

    def check(self, now: float) -> list[Decision]:
        p = self.policy
        if self._records < p.interval:
            return []
        loads = self.interval_loads()
        counts, residual = self._counts, [float(x) for x in self._residual]
        self._history.append(counts)
        self._residual_history.append(sum(self._residual))
        self._counts, self._residual, self._records = {}, [0] * self.num_reducers, 0
        self.intervals += 1
        mean = sum(loads) / len(loads)
        if mean <= 0 or max(loads) <= (1.0 + p.theta) * mean:
            return []
        if p.state == "unit":
            seen: set[int] = set().union(*self._history) | set(self._table)
            sizes: dict[int, float] = {k: 1.0 for k in seen}
            bg_state = 0.0
        else:
            sizes = {}
            for past in self._history:
                for k, c in past.items():
                    sizes[k] = sizes.get(k, 0.0) + c
            bg_state = float(sum(self._residual_history))
        table, stats = plan_table(
            {k: float(c) for k, c in counts.items()}, sizes, self._table, self.num_reducers,
            mode=p.mode, theta=p.theta, table_limit=p.table_limit, beta=p.beta,
            background_loads=residual, background_state=bg_state, discretize_degree=p.discretize,
        )
        self.last_stats = stats
        x = max(range(self.num_reducers), key=lambda d: (loads[d], -d))
        if table == self._table:
            logger.info("fang %s: imbalance %.3f but the plan keeps the table", p.mode, max(loads) / mean)
            return []
        self._table = table
        self._snapshot = TableSnapshot.from_table(table, self.num_reducers, self._snapshot.version + 1)
        event = RebalanceEvent(now, x, p.name, tuple(self.queue_lengths), (), self._snapshot.version)
        logger.info("fang %s: skewness %.3f -> %.3f, table %d entries, migration %.2f%% (v%d)", p.mode,
                    stats["skewness_before"], stats["skewness_after"], stats["table_size"],
                    100.0 * stats["migration_cost"], self._snapshot.version)
        return [Decision(self._snapshot, event)]


# ---------------------------------------------------------------------------- policy
@dataclass(frozen=True)
class FangPolicy(PolicySpec):
    """Mixed routing with MinTable, MinMig or Mixed rebalancing (see the module docstring).

    Args:
        mode: ``"mintable"``, ``"minmig"`` or ``"mixed"`` (also the registry name).
        theta: Imbalance tolerance: rebalance when ``max L > (1 + theta) * mean L`` over
            the last interval, and plan to that bound (paper default 0.08).
        table_limit: Most routing-table entries ``A_max`` (None = unbounded).
        beta: Weight factor of the migration priority index (paper default 1.5).
        interval: Records (as reported by reducers) per statistics interval.
        window: Intervals of history in the state size ``S(k)`` (``state="window"``).
        state: ``"window"`` (``S`` = records in the window) or ``"unit"`` (``S = 1``).
        discretize: Degree of discretization of ``c`` and ``S`` (section 4.2), or None.
    """

    mode: str = "mixed"
    theta: float = 0.08
    table_limit: int | None = None
    beta: float = 1.5
    interval: int = 50_000
    window: int = 1
    state: str = "window"
    discretize: int | None = None

    routes_by_key = True
    moves_keys = True
    wants_key_stats = True

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"fang: mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        for name in ("theta", "beta"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"policy {self.mode!r}: option {name} must be a finite number >= 0, got {v!r}")
        if self.table_limit is not None:
            check_int_option("table_limit", self.table_limit, 0, self.mode)
        check_int_option("interval", self.interval, 1, self.mode)
        check_int_option("window", self.window, 1, self.mode)
        if self.discretize is not None:
            check_int_option("discretize", self.discretize, 1, self.mode)
        if self.state not in ("window", "unit"):
            raise ConfigError(f"policy {self.mode!r}: option state must be 'window' or 'unit', got {self.state!r}")

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.mode

    def initial_snapshot(self, num_reducers: int) -> TableSnapshot:
        return TableSnapshot.from_table({}, num_reducers, 0)

    def make_router(self, mapper_id: int, num_reducers: int) -> Router:
        return TableRouter()

    def owners(self, snapshot: TableSnapshot, hashes: np.ndarray) -> np.ndarray:
        return snapshot.lookup_batch(hashes)

    def make_planner(self, num_reducers: int) -> FangPlanner:
        return FangPlanner(self, num_reducers)


#: Default ``A_max`` of the ``mixed`` policy (Mixed without a limit is MinMig).
MIXED_DEFAULT_TABLE_LIMIT = 1000


def _factory(mode: str):
    def build(cfg: JobConfig) -> PolicySpec:
        opts = dict(cfg.policy_options)
        if mode == "mixed":
            opts.setdefault("table_limit", MIXED_DEFAULT_TABLE_LIMIT)
        return FangPolicy(mode, **opts)

    return build


register_policy("mintable", _factory("mintable"),
                "Fang et al.: routing table over hash, rebuilt from scratch (MinTable)")
register_policy("minmig", _factory("minmig"),
                "Fang et al.: routing table over hash, least migration first (MinMig)")
register_policy("mixed", _factory("mixed"),
                "Fang et al.: routing table over hash, bounded table with least migration (Mixed)")
