"""Water filling for the ``hybrid`` planner's shares: :func:`fill` levels the lowest bins
with an amount, :func:`fill_within` does so with each bin's part capped."""

from __future__ import annotations

import numpy as np

__all__ = ["fill", "fill_array", "fill_capped", "fill_within"]


#: Bins from which :func:`fill` levels in numpy (below, plain floats are faster).
_FILL_NUMPY = 48


def fill(loads: list[float], amount: float) -> list[float]:
    """Continuous water filling: how much of ``amount`` each bin gets to level the lowest.

    The level is the largest ``k`` whose ``(sum of the k lowest loads + amount) / k``
    reaches the ``k``-th lowest load. A key's few candidates are filled in plain Python
    floats (the planner fills them many times per plan, where numpy's per-call cost would
    be most of the work), a widely split key's in numpy: the same sums in the same order,
    so both give the same floats.

    Args:
        loads: Current load of each bin.
        amount: Load to add (>= 0).

    Returns:
        Non-negative additions summing to ``amount`` that raise the least loaded bins to
        one common level (bins above it get nothing).
    """
    if amount <= 0 or not loads:
        return [0.0] * len(loads)
    if len(loads) >= _FILL_NUMPY:
        return fill_array(np.asarray(loads, dtype=np.float64), amount).tolist()
    prefix = 0.0
    level = 0.0
    for k, x in enumerate(sorted(loads), 1):
        prefix += x
        candidate = (prefix + amount) / k
        if candidate >= x:
            level = candidate
    return [max(level - load, 0.0) for load in loads]


def fill_array(loads: np.ndarray, amount: float) -> np.ndarray:
    """:func:`fill` over a ``float64`` array, in numpy (the same sums in the same order as
    :func:`fill`'s plain floats, so the same results)."""
    if amount <= 0 or not len(loads):
        return np.zeros(len(loads))
    x = np.sort(loads)
    candidate = (np.cumsum(x) + amount) / np.arange(1, len(x) + 1, dtype=np.float64)
    reached = np.flatnonzero(candidate >= x)
    level = float(candidate[reached[-1]]) if len(reached) else 0.0
    return np.maximum(level - loads, 0.0)


def fill_within(loads: np.ndarray, parts: np.ndarray, caps: np.ndarray, amount: float) -> tuple[np.ndarray, float]:
    """Water filling of ``amount`` over bins at ``loads + parts``, no bin's part beyond its cap.

    The bins with room are filled (:func:`fill_array`); those the fill takes beyond their
    cap get their cap, and what they could not take is filled over the others again.

    Args:
        loads: Each bin's load before its part (``float64``).
        parts: What each bin got so far (``float64``, at most its cap).
        caps: Each bin's largest part.
        amount: Load to add (>= 0).

    Returns:
        The new parts and what is left of ``amount`` (0 when the bins' room took it all).
    """
    parts = parts.copy()
    left = float(amount)
    idx = np.flatnonzero(caps - parts > 1e-9)
    while left > 1e-9 and len(idx):
        add = fill_array(loads[idx] + parts[idx], left)
        over = add > caps[idx] - parts[idx]
        if not over.any():
            parts[idx] += add
            return parts, 0.0
        capped = idx[over]
        left -= float((caps[capped] - parts[capped]).sum())
        parts[capped] = caps[capped]
        idx = idx[~over]
    return parts, max(left, 0.0)


def fill_capped(h: int, hot: dict[int, list[int]], at: dict[int, np.ndarray], levels: np.ndarray,
                budget: np.ndarray, amount: float, closed: np.ndarray) -> np.ndarray:
    """Water filling of ``amount`` records of hot key ``h`` over its candidates, each
    given at most its ``budget`` (the planner's ``_interval_budget``, what the other keys left
    of it). While the candidates' budgets cannot take the amount, the key grows by
    the slot with the most budget left it does not have yet; when no slot has any
    left, what remains is filled over the candidates on their levels alone (every
    queue is about full: the key's records wait wherever they go)."""
    parts = np.zeros(len(at[h]))
    left = float(amount)
    while left > 1e-9:
        cap = np.maximum(budget[at[h]], 0.0)
        if float((cap - parts).sum()) >= left - 1e-9:
            parts, left = fill_within(levels[at[h]], parts, cap, left)
            if left <= 1e-9:
                break
        blocked = closed.copy()
        blocked[at[h]] = True
        spare = np.where(blocked, -np.inf, budget)
        r = int(np.argmax(spare))
        if not np.isfinite(spare[r]) or spare[r] <= 1e-9:
            parts += fill_array(levels[at[h]] + parts, left)  # no room anywhere: level alone
            break
        hot[h].append(r)
        at[h] = np.append(at[h], r)
        parts = np.append(parts, 0.0)
    return parts
