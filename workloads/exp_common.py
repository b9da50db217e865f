"""Shared helpers of the literature reproduction scripts (:mod:`workloads.exp_pkg`, :mod:`workloads.exp_dkg`).

* :func:`hash_keys` hashes a key array once, exactly as :func:`dpa.simulate.simulate` (and a
  dpa job) hashes an ``int64`` key column, so a script can replay the same stream through
  many policies with ``keys_are_hashes=True`` without re-hashing it every time.
* :func:`imbalance_summary` / :func:`imbalance_of` turn an imbalance series ``I(t)`` into the
  normalisations used in the papers (see :data:`IMBALANCE_DOC`).
* :class:`Claim` and :func:`claims_markdown` record a paper's claim next to the verdict
  *computed* from our measurements and the evidence for it.
* :func:`markdown_table`, :func:`sci`, :func:`new_figure`, :func:`save_figure` and
  :func:`run_metadata` are small writing helpers. JSON goes through
  :func:`workloads.experiment.write_json`, re-exported here.

Nothing here imports Ray; plots use matplotlib's object API with the Agg canvas (as
:mod:`dpa.report` does), so they never touch the process-wide backend.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from dpa.errors import ConfigError
from dpa.key_columns import hash_key_columns
from workloads.experiment import write_json

__all__ = [
    "IMBALANCE_DOC",
    "Claim",
    "claims_markdown",
    "hash_keys",
    "imbalance_of",
    "imbalance_series",
    "imbalance_summary",
    "markdown_table",
    "new_figure",
    "run_metadata",
    "save_figure",
    "sci",
    "write_json",
]

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

    Uses the same sample times as :func:`dpa.simulate.simulate` (``ceil(j * n / k)`` for
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
    """:func:`imbalance_summary` of a :class:`dpa.simulate.SimResult`."""
    return imbalance_summary(result.sample_times, result.imbalance_series, result.num_messages,
                             result.num_workers)


# ------------------------------------------------------------------------------ claims
@dataclass
class Claim:
    """A paper's claim and the verdict our measurements give.

    Attributes:
        claim: The claim, quoted or closely paraphrased.
        where: Where the paper makes it (table, figure, section).
        holds: Our verdict, computed from the measurements.
        evidence: The measured numbers behind the verdict.
    """

    claim: str
    where: str
    holds: bool
    evidence: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def claims_markdown(claims: Sequence[Claim]) -> str:
    """A markdown table of claims with a "reproduced?" column."""
    rows = [[c.where, c.claim, "**yes**" if c.holds else "**no**", c.evidence] for c in claims]
    return markdown_table(["paper", "claim", "reproduced?", "our evidence"], rows)


# ------------------------------------------------------------------------------ writing
def sci(x: float | None, digits: int = 1) -> str:
    """Compact scientific notation (``3.7e-08``); ``0`` for zero, ``n/a`` for None/NaN."""
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "n/a"
    if x == 0:
        return "0"
    return f"{x:.{digits}e}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table (cells are ``str()``-ed; ``|`` is escaped)."""
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def new_figure(nrows: int = 1, ncols: int = 1, width: float = 6.0, height: float = 4.5) -> tuple[Any, np.ndarray]:
    """A constrained-layout figure on the Agg canvas with ``nrows x ncols`` axes.

    Args:
        nrows: Rows of subplots.
        ncols: Columns of subplots.
        width: Width of one subplot in inches.
        height: Height of one subplot in inches.

    Returns:
        ``(figure, axes)`` with ``axes`` a 2-D array.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height * nrows), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, squeeze=False)


def save_figure(fig: Any, path: str | Path) -> Path:
    """Saves ``fig`` as PNG, creating parent directories."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p)
    return p


class StageTimer:
    """Runs an experiment's named stages, logging each name and recording its wall time.

    ``timed = StageTimer(log); out = timed("table2", fn)``; ``timed.timings`` maps each
    stage name to its seconds.
    """

    def __init__(self, log: Any = None) -> None:
        self.log = log
        self.timings: dict[str, float] = {}

    def __call__(self, name: str, fn: Any) -> Any:
        if self.log:
            self.log(f"[{name}]")
        t0 = time.perf_counter()
        result = fn()
        self.timings[name] = time.perf_counter() - t0
        return result


def run_metadata(module: str, elapsed_s: float, **extra: Any) -> dict[str, Any]:
    """Run metadata stored next to the results (command, time, machine).

    Args:
        module: The script's module (``"workloads.exp_pkg"``), for the command line.
        elapsed_s: Wall time of the run.
        **extra: More entries.
    """
    return {
        "command": " ".join(["python -m", module, *sys.argv[1:]]),
        "argv": sys.argv,
        "elapsed_s": elapsed_s,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        **extra,
    }
