"""Load imbalance metrics.

* :func:`skew` is the DPA paper's ``S`` (eq. 2), the primary metric of its experiments.
* :func:`imbalance` is ``I = max - mean`` of the PKG paper (Nasir et al.).
* :func:`max_over_avg` is ``max / mean``, the skewness measure used by Fang et al.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["imbalance", "max_over_avg", "skew"]


def skew(processed: Sequence[int]) -> float:
    """The DPA paper's skew ``S`` (eq. 2) of per-reducer message counts.

    With ``M = sum(processed)``, ``R = len(processed)``, ``U = ceil(M / R)`` (the ideal,
    uniform load, computed with exact integer arithmetic) and ``W = max(processed)``:
    ``S = (W - U) / (M - U)``. ``S = 0`` means no skew, ``S = 1`` means a single reducer
    processed every message.

    Edge cases, all defined as ``0.0`` (no measurable skew): an empty sequence, a single
    reducer (``R == 1``), and ``M - U == 0`` (which happens exactly when ``M <= 1``,
    e.g. no messages at all or one message).

    Args:
        processed: Number of messages processed by each reducer (non-negative).

    Returns:
        ``S`` in ``[0, 1]``.

    Raises:
        ValueError: If a count is negative.
    """
    counts = [int(c) for c in processed]
    r = len(counts)
    if r <= 1:
        return 0.0
    if min(counts) < 0:
        raise ValueError(f"message counts must be non-negative, got {counts}")
    m = sum(counts)
    u = -(-m // r)  # exact ceil(m / r)
    if m - u == 0:
        return 0.0
    w = max(counts)
    return (w - u) / (m - u)


def imbalance(loads: Sequence[float]) -> float:
    """PKG's load imbalance ``I = max(loads) - mean(loads)``.

    Args:
        loads: Load of each worker.

    Returns:
        ``I`` (``0.0`` for an empty sequence).
    """
    values = [float(x) for x in loads]
    if not values:
        return 0.0
    return max(values) - sum(values) / len(values)


def max_over_avg(loads: Sequence[float]) -> float:
    """Fang et al.'s skewness ``max(loads) / mean(loads)``; ``1.0`` is perfectly balanced.

    Args:
        loads: Load of each worker.

    Returns:
        The ratio; ``1.0`` when the sequence is empty or the total load is zero.
    """
    values = [float(x) for x in loads]
    if not values:
        return 1.0
    total = sum(values)
    if total == 0:
        return 1.0
    return max(values) * len(values) / total
