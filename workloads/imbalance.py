"""Key hashing and imbalance measures of the stream experiments (:mod:`workloads.exp_pkg`, ...).

* :func:`hash_keys` hashes a key array once, exactly as :func:`dpa.tools.simulate.simulate` (and a
  dpa job) hashes an ``int64`` key column, so an experiment can replay the same stream through
  many policies with ``keys_are_hashes=True`` without re-hashing it every time.
* :func:`imbalance_summary` / :func:`imbalance_of` turn an imbalance series ``I(t)`` into the
  normalisations used in the papers (see :data:`IMBALANCE_DOC`).

Nothing here imports Ray.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from dpa.errors import ConfigError
from dpa.keys.columns import hash_key_columns

__all__ = ["IMBALANCE_DOC", "hash_keys", "imbalance_of", "imbalance_series", "imbalance_summary"]

IMBALANCE_DOC = (
    "`I(t) = max_w L_w(t) - mean_w L_w(t)` (messages). The number compared with the PKG paper is "
    "`I(n)/n`: the imbalance at the end of the stream as a fraction of all `n` messages "
    "(`SimResult.final_imbalance / n`). That is what the paper's Table II values are: its unbalanced "
    "cells equal the analytic `p1/d - 1/W` (WP, W=100: PKG 3.7e-2 = 9.32%/2 - 1%, Off-Greedy 8.3e-2 = "
    "9.32% - 1%), which is `I(n)/n`, while a time average `mean_t I(t) / n` (the simulator's "
    "`imbalance_per_message`) is half of it for an imbalance growing linearly in `t`; and its balanced "
    "Off-Greedy cells are 0.4-0.9 messages (3.7e-8 x 22M, 3.4e-10 x 1.2G), which only an end-of-stream "
    "measure can give: a static key binding on a randomly ordered stream fluctuates by hundreds of "
    "messages mid-stream (our time averages show it). The JSON also holds `time_avg` = "
    "`mean_t I(t) / mean_t t` (1000 evenly spaced samples), `per_message` = `mean_t I(t) / n` and the "
    "imbalances in messages. In the balanced regime `I(n)` is a few messages whatever the stream length, "
    "so the paper's values (n = 22M for WP, 1.2G for TW) and ours (a few million) are compared in "
    "messages there (`value * n`)."
)
"""How the imbalance numbers of :mod:`workloads.exp_pkg` are normalised (for the reports)."""


# ------------------------------------------------------------------------------ keys
def hash_keys(keys: np.ndarray) -> np.ndarray:
    """32-bit key hashes of integer key ids, exactly as a dpa job hashes an ``int64`` column.

    Args:
        keys: Integer key ids (any integer dtype).

    Returns:
        A ``uint32`` array, one hash per key.

    Raises:
        ConfigError: ``keys`` is not a one-dimensional integer array.
    """
    arr = np.asarray(keys)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise ConfigError(f"hash_keys needs a 1-D integer array, got dtype {arr.dtype} and shape {arr.shape}")
    table = pa.table({"key": pa.array(arr.astype(np.int64, copy=False), type=pa.int64())})
    return hash_key_columns(table, ["key"])


# ------------------------------------------------------------------------------ imbalance
def imbalance_series(dest: np.ndarray, num_workers: int, num_samples: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    """``I(t)`` of a routed stream at ``num_samples`` evenly spaced times.

    Uses the same sample times as :func:`dpa.tools.simulate.simulate` (``ceil(j * n / k)`` for
    ``j = 1..k``), so the numbers of a custom replay are comparable with a ``SimResult``.

    Args:
        dest: Worker of each message, in stream order.
        num_workers: ``W``.
        num_samples: Number of sample times ``k``.

    Returns:
        ``(times, I)``: ``int64`` sample times and ``float64`` imbalances.
    """
    dest = np.asarray(dest, dtype=np.int64)
    n = len(dest)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    k = max(1, min(num_samples, n))
    ends = np.unique(np.ceil(np.arange(1, k + 1) * (n / k)).astype(np.int64))
    segment = np.repeat(np.arange(len(ends)), np.diff(np.concatenate(([0], ends))))
    counts = np.bincount(segment * num_workers + dest, minlength=len(ends) * num_workers)
    loads = np.cumsum(counts.reshape(len(ends), num_workers), axis=0)
    return ends, loads.max(axis=1) - ends / num_workers


def imbalance_summary(times: np.ndarray, series: np.ndarray, num_messages: int,
                      num_workers: int) -> dict[str, float]:
    """The normalisations of an imbalance series (see :data:`IMBALANCE_DOC`).

    Args:
        times: Sample times ``t``.
        series: ``I(t)`` at those times.
        num_messages: ``n``.
        num_workers: ``W``.

    Returns:
        ``{"paper": I(n) / n (the PKG paper's normalisation), "time_avg": mean I / mean t,
        "per_message": mean I / n, "fraction_of_avg_load": mean I / mean (t / W),
        "final_messages": I(n), "mean_messages": mean I}``; ``times[-1]`` must be ``n``.
    """
    keys = ("paper", "time_avg", "per_message", "fraction_of_avg_load", "final_messages", "mean_messages")
    if len(series) == 0 or num_messages == 0:
        return dict.fromkeys(keys, 0.0)
    mean_i = float(np.mean(series))
    mean_t = float(np.mean(times))
    final = float(series[-1])
    return {
        "paper": final / num_messages,
        "time_avg": mean_i / mean_t,
        "per_message": mean_i / num_messages,
        "fraction_of_avg_load": mean_i * num_workers / mean_t,
        "final_messages": final,
        "mean_messages": mean_i,
    }


def imbalance_of(result: Any) -> dict[str, float]:
    """:func:`imbalance_summary` of a :class:`dpa.tools.simulate.SimResult`."""
    return imbalance_summary(result.sample_times, result.imbalance_series, result.num_messages,
                             result.num_workers)
