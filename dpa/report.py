"""Run reports: ``stats.json`` plus PNG plots of what the load balancer did.

:func:`write_report` takes a :class:`dpa.Result`, a :class:`dpa.Stats` or the dict of
``Stats.to_dict()`` (e.g. a ``stats.json`` read back) and writes into a directory:

* ``stats.json`` — everything in ``stats.to_dict()`` (and ``baseline_stats.json``);
* ``queues.png`` — queue length per reducer over time (``stats.timeline``), with every
  rebalance event marked by a vertical line labelled with its action and reducer;
* ``records.png`` — records processed per reducer with load balancing, beside the same
  job without it (``baseline_stats``, e.g. a second run with ``max_rounds=0``);
* ``tokens.png`` — ring tokens per reducer over time, rebuilt from the initial tokens and
  each event's ``tokens_after`` (ring policies only);
* ``report.md`` — the key numbers and the event log, linking the images.

:func:`write_experiment_report` plots the skew ``S`` per workload and method of a Table 1
run beside the paper's values (:data:`workloads.paper.PAPER_TABLE1`).

The data preparation functions (``queue_series``, ``token_steps``, ...) are plain Python on
the stats dict; the plotting uses matplotlib's object API with the Agg canvas, so it never
changes the process-wide backend and needs no display. Nothing here imports Ray.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Table1Row",
    "event_markers",
    "initial_token_counts",
    "load_stats",
    "plot_queues",
    "plot_records",
    "plot_table1",
    "plot_tokens",
    "queue_series",
    "records_comparison",
    "stats_dict",
    "table1_rows",
    "token_steps",
    "write_experiment_report",
    "write_report",
]

#: Initial tokens per reducer of the halving method when nothing better is known
#: (``JobConfig.initial_tokens``' default, ``dpa.ring.DEFAULT_HALVING_TOKENS``).
DEFAULT_HALVING_TOKENS = 16

#: Most rebalance events that get a text label in a plot (the rest still get a line).
MAX_EVENT_LABELS = 16

_DPI = 110


# =============================================================================== data prep
def stats_dict(obj: Any) -> dict[str, Any]:
    """The JSON-friendly stats dict of a ``Result``, ``Stats`` or stats dict (copied).

    Raises:
        TypeError: For anything else.
    """
    if obj is None:
        raise TypeError("expected a dpa.Result, dpa.Stats or a stats dict, got None")
    stats = getattr(obj, "stats", None)
    if stats is not None and hasattr(stats, "to_dict"):
        obj = stats
    if hasattr(obj, "to_dict") and not isinstance(obj, Mapping):
        obj = obj.to_dict()
    if not isinstance(obj, Mapping):
        raise TypeError(f"expected a dpa.Result, dpa.Stats or a stats dict, got {type(obj).__name__}")
    if "processed" not in obj:
        raise ValueError("not a dpa stats dict: it has no 'processed' entry")
    return _jsonable(dict(obj))


def load_stats(path: str | Path) -> dict[str, Any]:
    """Reads a ``stats.json`` written by :func:`write_report`."""
    with open(path, encoding="utf-8") as f:
        return stats_dict(json.load(f))


def _jsonable(value: Any) -> Any:
    """Tuples -> lists, numpy scalars/arrays -> Python, recursively."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "to_dict") and not isinstance(value, (str, bytes)):
        return _jsonable(value.to_dict())
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy
        return _jsonable(value.tolist())
    return value


def _num_reducers(stats: Mapping[str, Any]) -> int:
    return len(stats.get("processed") or [])


def _timeline(stats: Mapping[str, Any]) -> list[tuple[float, list[int], int]]:
    out = []
    for point in stats.get("timeline") or []:
        if isinstance(point, Mapping):
            out.append((float(point["time_s"]), list(point["queue_lengths"]), int(point.get("version", 0))))
        else:  # (time_s, queue_lengths, version) as in Stats.timeline
            t, q, v = point
            out.append((float(t), list(q), int(v)))
    return out


def _events(stats: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for e in stats.get("rebalances") or []:
        if not isinstance(e, Mapping):
            e = e.to_dict() if hasattr(e, "to_dict") else vars(e)
        out.append(dict(e))
    return out


def end_time(stats: Mapping[str, Any]) -> float:
    """The last time the balancer looked: the last timeline sample or event."""
    times = [t for t, _, _ in _timeline(stats)] + [float(e["time_s"]) for e in _events(stats)]
    return max(times, default=0.0)


def queue_series(stats: Mapping[str, Any]) -> tuple[list[float], list[list[int]]]:
    """Times and, per reducer, the queue length sampled at those times.

    The balancer samples only when a queue length changed, so a point holds until the
    next one (plot as a step function). A sample at time 0 with empty queues is prepended
    when the first one is later, so the plot starts at the job's start.
    """
    points = _timeline(stats)
    r = _num_reducers(stats) or (len(points[0][1]) if points else 0)
    times = [t for t, _, _ in points]
    series = [[int(q[i]) if i < len(q) else 0 for _, q, _ in points] for i in range(r)]
    if points and times[0] > 0:
        times.insert(0, 0.0)
        for s in series:
            s.insert(0, 0)
    return times, series


def event_markers(stats: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Rebalance events as ``{"time_s", "reducer", "action", "label"}`` (``"halve r0"``)."""
    return [
        {"time_s": float(e["time_s"]), "reducer": int(e["reducer"]), "action": str(e["action"]),
         "label": f"{e['action']} r{e['reducer']}"}
        for e in _events(stats)
    ]


def initial_token_counts(stats: Mapping[str, Any], initial_tokens: int | Sequence[int] | None = None) -> list[int] | None:
    """Tokens per reducer when the job started, or None for policies without a ring.

    In order: ``initial_tokens`` when given (an int means that many for every reducer);
    the final tokens when nothing was rebalanced; 1 each for ``doubling``; the first
    event undone (``halve`` doubles the reducer's tokens back, ``double`` halves every
    other reducer's); ``DEFAULT_HALVING_TOKENS`` each for ``halving``.
    """
    r = _num_reducers(stats)
    if initial_tokens is not None:
        if isinstance(initial_tokens, int):
            return [int(initial_tokens)] * r
        return [int(t) for t in initial_tokens]
    final = stats.get("final_tokens")
    if final is None:
        return None
    events = _events(stats)
    if not events:
        return [int(t) for t in final]
    policy = str(stats.get("policy", ""))
    if policy == "doubling":
        return [1] * r
    first = events[0]
    after = [int(t) for t in first.get("tokens_after") or final]
    x = int(first["reducer"])
    action = first["action"]
    if action == "halve":
        after[x] *= 2
        return after
    if action == "double":
        return [t if i == x else max(1, t // 2) for i, t in enumerate(after)]
    if action == "exhausted":
        return after
    if policy == "halving":
        return [DEFAULT_HALVING_TOKENS] * r
    return after


def token_steps(stats: Mapping[str, Any], initial_tokens: int | Sequence[int] | None = None
                ) -> tuple[list[float], list[list[int]]] | None:
    """Times and tokens per reducer (a step function), or None without a ring.

    Starts at time 0 with :func:`initial_token_counts`, steps to each event's
    ``tokens_after`` at its time, and holds until :func:`end_time`.
    """
    start = initial_token_counts(stats, initial_tokens)
    if start is None:
        return None
    r = len(start)
    times = [0.0]
    rows = [list(start)]
    for e in _events(stats):
        after = e.get("tokens_after")
        if not after:
            continue
        times.append(float(e["time_s"]))
        rows.append([int(t) for t in after])
    end = max(end_time(stats), times[-1])
    if end <= times[-1]:
        end = times[-1] + max(1e-3, 0.05 * times[-1])
    times.append(end)
    rows.append(list(rows[-1]))
    return times, [[row[i] for row in rows] for i in range(r)]


def records_comparison(stats: Mapping[str, Any], baseline: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Records processed per reducer with LB (``stats``) and without (``baseline``)."""
    from dpa.metrics import skew

    with_lb = [int(x) for x in stats.get("processed") or []]
    without = None if baseline is None else [int(x) for x in baseline.get("processed") or []]
    total = sum(with_lb)
    return {
        "reducers": list(range(len(with_lb))),
        "with_lb": with_lb,
        "without_lb": without,
        "skew_with_lb": skew(with_lb),
        "skew_without_lb": None if without is None else skew(without),
        "ideal": total / len(with_lb) if with_lb else 0.0,
        "policy": str(stats.get("policy", "")),
        "baseline_policy": None if baseline is None else str(baseline.get("policy", "")),
        "rebalances": len(_events(stats)),
    }


# --------------------------------------------------------------------------- table 1
@dataclass(frozen=True)
class Table1Row:
    """One cell pair of Table 1: measured and paper skew without and with LB."""

    workload: str
    method: str
    no_lb: float | None
    with_lb: float | None
    paper_no_lb: float | None
    paper_with_lb: float | None


_WL_KEYS = ("workload", "wl", "name")
_METHOD_KEYS = ("method", "policy")
_NO_LB_KEYS = ("no_lb", "s_no_lb", "nolb", "without_lb", "no_lb_s", "s_without_lb", "baseline", "before")
_WITH_LB_KEYS = ("with_lb", "s_with_lb", "lb", "withlb", "with_lb_s", "s_lb", "balanced", "after")


def _norm(key: Any) -> str:
    return str(key).strip().lower().replace("-", "_").replace(" ", "_")


def _value(v: Any) -> float | None:
    """A number, a list of per-run numbers (mean), or a dict with ``mean``/``s``/``value``."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, Mapping):
        for k in ("mean", "skew_mean", "s_mean", "s", "skew", "value", "avg", "median", "skews", "runs"):
            for key, inner in v.items():
                if _norm(key) == k:
                    return _value(inner)
        return None
    if isinstance(v, (list, tuple)):
        values = [x for x in (_value(x) for x in v) if x is not None]
        return sum(values) / len(values) if values else None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _pick(d: Mapping[str, Any], names: Sequence[str]) -> Any:
    normalised = {_norm(k): v for k, v in d.items()}
    for name in names:
        if name in normalised:
            return normalised[name]
    return None


def _measured(d: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """(no LB, with LB) from a dict of measured values; also ``(a, b)`` pairs."""
    return _value(_pick(d, _NO_LB_KEYS)), _value(_pick(d, _WITH_LB_KEYS))


def _split_label(label: str) -> tuple[str, str] | None:
    for sep in ("/", ":", "|", ",", " "):
        if sep in label:
            a, b = (s.strip() for s in label.split(sep, 1))
            return (a, b) if a.upper().startswith("WL") else (b, a)
    return None


def table1_rows(data: Any, paper: Mapping[tuple[str, str], tuple[float, float]] | None = None) -> list[Table1Row]:
    """Table 1 results in any of the common JSON shapes, joined with the paper's values.

    Accepted shapes (``S`` values may be numbers, per-run lists (averaged) or
    ``{"mean": ...}`` dicts; key names are matched loosely, e.g. ``no_lb``/``S_no_lb``/
    ``without_lb`` and ``with_lb``/``S_with_lb``/``lb``):

    * a list of rows ``{"workload": "WL4", "method": "halving", "no_lb": .., "with_lb": ..}``;
    * ``{"rows": [...]}`` / ``{"results": [...]}`` / ``{"table1": ...}`` around one of these;
    * nested ``{"WL4": {"halving": {"no_lb": .., "with_lb": ..} | [no_lb, with_lb]}}``;
    * flat ``{"WL4/halving": {...} | [no_lb, with_lb]}`` (``/``, ``:`` or ``,`` separated).

    Rows come out in the paper's order (workload, then halving before doubling), then any
    other rows; the paper's values are ``None`` where it has none.
    """
    if paper is None:
        try:
            from workloads.paper import PAPER_TABLE1 as paper
        except ImportError:  # pragma: no cover - workloads ships with dpa
            paper = {}
    measured: dict[tuple[str, str], tuple[float | None, float | None]] = {}

    def add(wl: Any, method: Any, value: Any) -> None:
        if isinstance(value, Mapping):
            pair = _measured(value)
        elif isinstance(value, (list, tuple)) and len(value) == 2:
            pair = (_value(value[0]), _value(value[1]))
        else:
            return
        if pair != (None, None):
            measured[(str(wl).upper(), str(method).lower())] = pair

    def walk(obj: Any) -> None:
        if isinstance(obj, (list, tuple)):
            for row in obj:
                if isinstance(row, Mapping):
                    wl, method = _pick(row, _WL_KEYS), _pick(row, _METHOD_KEYS)
                    if wl is not None and method is not None:
                        add(wl, method, row)
            return
        if not isinstance(obj, Mapping):
            return
        for wrapper in ("rows", "results", "table1", "table", "data"):
            inner = _pick(obj, (wrapper,))
            if isinstance(inner, (list, tuple, Mapping)):
                walk(inner)
        for key, value in obj.items():
            label = str(key)
            if label.upper().startswith("WL") and isinstance(value, Mapping) and _measured(value) == (None, None):
                for method, cell in value.items():
                    add(label, method, cell)
                continue
            split = _split_label(label)
            if split is not None:
                add(split[0], split[1], value)

    walk(data)
    order = {k: i for i, k in enumerate(paper)}
    keys = sorted(set(measured) | set(paper), key=lambda k: (order.get(k, len(order)), k))
    rows = []
    for wl, method in keys:
        no_lb, with_lb = measured.get((wl, method), (None, None))
        p = paper.get((wl, method))
        rows.append(Table1Row(wl, method, no_lb, with_lb, None if p is None else p[0], None if p is None else p[1]))
    return rows


# ================================================================================ plotting
def _figure(width: float = 9.0, height: float = 5.0, ncols: int = 1):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def _colors(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def _time_label(stats: Mapping[str, Any]) -> str:
    if stats.get("runtime") == "local":
        return "virtual time since job start (s)"
    return "time since job start (s)"


def _mark_events(ax: Any, markers: list[dict[str, Any]], colors: list[Any]) -> None:
    """Vertical lines at rebalance events, labelled along the top of the axes.

    Call after the x limits are final. Labels closer than about a label's width to an
    earlier one move down a level so they never overlap.
    """
    from matplotlib.lines import Line2D

    if not markers:
        return
    trans = ax.get_xaxis_transform()
    x0, x1 = ax.get_xlim()
    span = (x1 - x0) or 1.0
    gap = 0.022  # about one rotated label's width, as a fraction of the axes width
    levels: list[float] = []  # last label position on each level
    for k, m in enumerate(markers):
        color = colors[m["reducer"] % len(colors)] if colors else "black"
        ax.axvline(m["time_s"], color=color, linestyle="--", linewidth=1.1, alpha=0.85, zorder=1)
        if k >= MAX_EVENT_LABELS:
            continue
        frac = (m["time_s"] - x0) / span
        level = next((i for i, last in enumerate(levels) if frac - last >= gap), len(levels))
        if level == len(levels):
            levels.append(frac)
        levels[level] = frac
        ax.annotate(m["label"], xy=(m["time_s"], 0.985 - 0.19 * (level % 4)), xycoords=trans, xytext=(2, 0),
                    textcoords="offset points", rotation=90, va="top", ha="left", fontsize=8, color="black",
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": color, "alpha": 0.9}, zorder=5)
    extra = f" ({len(markers) - MAX_EVENT_LABELS} unlabelled)" if len(markers) > MAX_EVENT_LABELS else ""
    handles, labels = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], color="gray", linestyle="--"))
    labels.append(f"rebalance event{extra}\n(colour = reducer)")
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, framealpha=0.9)


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=_DPI)
    return path


def plot_queues(stats: Any, path: str | Path, *, title: str | None = None) -> Path:
    """Queue length per reducer over time, with rebalance events marked."""
    stats = stats_dict(stats)
    times, series = queue_series(stats)
    colors = _colors(max(1, len(series)))
    fig, (ax,) = _figure()
    if times:
        for i, s in enumerate(series):
            ax.step(times, s, where="post", color=colors[i], linewidth=1.8, label=f"reducer {i}")
        ax.set_ylim(bottom=0, top=max(1, max((max(s) for s in series), default=1)) * 1.25)
    else:
        ax.text(0.5, 0.5, "no queue samples recorded", transform=ax.transAxes, ha="center", va="center")
    ax.set_xlim(0, max(end_time(stats), times[-1] if times else 0.0) or 1.0)
    _mark_events(ax, event_markers(stats), colors)
    if not event_markers(stats) and times:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(_time_label(stats))
    ax.set_ylabel("records waiting in the queue")
    ax.set_title(f"{title + ': ' if title else ''}queue length per reducer "
                 f"({stats.get('policy', '?')}, {len(event_markers(stats))} rebalances)")
    ax.grid(True, alpha=0.3)
    return _save(fig, Path(path))


def plot_records(stats: Any, path: str | Path, *, baseline_stats: Any = None, title: str | None = None) -> Path:
    """Records processed per reducer, with and (from ``baseline_stats``) without LB."""
    stats = stats_dict(stats)
    base = None if baseline_stats is None else stats_dict(baseline_stats)
    cmp = records_comparison(stats, base)
    r = len(cmp["reducers"])
    fig, (ax,) = _figure(width=max(7.0, 1.2 * r + 3), height=5.0)
    xs = list(range(r))
    bars = []
    if cmp["without_lb"] is not None:
        width = 0.4
        label = f"without LB ({cmp['baseline_policy']}, no rounds): S={cmp['skew_without_lb']:.2f}"
        bars.append(ax.bar([x - width / 2 for x in xs], cmp["without_lb"], width, color="#bbbbbb",
                           edgecolor="#555555", hatch="//", label=label))
        offset = width / 2
    else:
        width, offset = 0.6, 0.0
    label = f"with LB ({cmp['policy']}, {cmp['rebalances']} rebalances): S={cmp['skew_with_lb']:.2f}"
    bars.append(ax.bar([x + offset for x in xs], cmp["with_lb"], width, color="#1f77b4", edgecolor="#0d3d63", label=label))
    for group in bars:
        ax.bar_label(group, labels=[f"{int(b.get_height()):,}" for b in group], fontsize=8, padding=2)
    ax.axhline(cmp["ideal"], color="#d62728", linestyle=":", linewidth=1.5, label=f"even split ({cmp['ideal']:,.0f})")
    ax.set_xticks(xs, [f"reducer {i}" for i in xs])
    top = max([*cmp["with_lb"], *(cmp["without_lb"] or []), 1])
    ax.set_ylim(0, top * 1.3)
    ax.set_ylabel("records processed")
    ax.set_xlabel("reducer")
    ax.set_title(f"{title + ': ' if title else ''}records per reducer with and without load balancing"
                 if base is not None else f"{title + ': ' if title else ''}records per reducer")
    ax.legend(loc="upper right", fontsize=9, framealpha=0.9)
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, Path(path))


def plot_tokens(stats: Any, path: str | Path, *, initial_tokens: int | Sequence[int] | None = None,
                title: str | None = None) -> Path | None:
    """Ring tokens per reducer over time; None (nothing written) without a ring."""
    stats = stats_dict(stats)
    steps = token_steps(stats, initial_tokens)
    if steps is None:
        return None
    times, series = steps
    r = len(series)
    colors = _colors(max(1, r))
    fig, (ax,) = _figure()
    # Token counts are powers of two (log2 axis). Reducers often hold the same count, so
    # each line is shifted by a small fraction of a doubling to keep every one visible.
    values = sorted({v for s in series for v in s if v > 0}) or [1]
    shift = 0.07 if r <= 8 else 0.5 / r
    for i, s in enumerate(series):
        factor = 2 ** (shift * (i - (r - 1) / 2))
        ax.step(times, [max(v, 0.5) * factor for v in s], where="post", color=colors[i], linewidth=2.0,
                label=f"reducer {i}")
    ax.set_yscale("log", base=2)
    lo, hi = int(math.floor(math.log2(values[0]))), int(math.ceil(math.log2(values[-1])))
    ticks = [2 ** k for k in range(lo, hi + 1)]
    ax.set_yticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_ylim(values[0] / 1.6, values[-1] * 2.6)
    ax.set_xlim(0, times[-1])
    ax.annotate("lines shifted slightly up/down so equal counts stay visible", xy=(0.005, 0.01),
                xycoords="axes fraction", fontsize=7, color="#555555")
    _mark_events(ax, event_markers(stats), colors)
    if not event_markers(stats):
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    ax.set_xlabel(_time_label(stats))
    ax.set_ylabel("tokens on the ring")
    ax.set_title(f"{title + ': ' if title else ''}ring tokens per reducer ({stats.get('policy', '?')})")
    ax.grid(True, alpha=0.3)
    return _save(fig, Path(path))


def plot_table1(data: Any, path: str | Path, *, title: str | None = None) -> Path:
    """Skew S per workload and method (bars: measured; black ticks: the paper)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    rows = table1_rows(data)
    methods = [m for m in ("halving", "doubling") if any(r.method == m for r in rows)]
    methods += sorted({r.method for r in rows} - set(methods))
    fig, axes = _figure(width=6.0 * max(1, len(methods)), height=5.0, ncols=max(1, len(methods)))
    colors = {"no": "#bbbbbb", "lb": "#1f77b4"}
    for ax, method in zip(axes, methods):
        mine = [r for r in rows if r.method == method]
        xs = list(range(len(mine)))
        width = 0.38
        for offset, attr, paper_attr, key in ((-width / 2, "no_lb", "paper_no_lb", "no"),
                                              (width / 2, "with_lb", "paper_with_lb", "lb")):
            heights = [getattr(r, attr) for r in mine]
            pos = [x + offset for x in xs]
            group = ax.bar(pos, [h if h is not None else 0 for h in heights], width, color=colors[key],
                           edgecolor="#333333", hatch="//" if key == "no" else None)
            ax.bar_label(group, labels=["n/a" if h is None else f"{h:.2f}" for h in heights], fontsize=7, padding=6)
            paper = [(p, getattr(r, paper_attr)) for p, r in zip(pos, mine) if getattr(r, paper_attr) is not None]
            if paper:
                ax.scatter([p for p, _ in paper], [v for _, v in paper], marker="_", s=900, linewidths=2.5,
                           color="black", zorder=3)
        ax.set_xticks(xs, [r.workload for r in mine])
        ax.set_ylim(0, 1.18)
        ax.set_xlabel("workload")
        ax.set_ylabel("skew S (0 = even, 1 = one reducer did all)")
        ax.set_title(f"{method}")
        ax.grid(True, axis="y", alpha=0.3)
    handles = [Patch(facecolor=colors["no"], edgecolor="#333333", hatch="//", label="measured, no LB"),
               Patch(facecolor=colors["lb"], edgecolor="#333333", label="measured, with LB"),
               Line2D([], [], color="black", marker="_", linestyle="none", markersize=18, markeredgewidth=2.5,
                      label="paper (Table 1)")]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=9)
    fig.suptitle(title or "Table 1: skew S per workload, measured vs. the paper")
    return _save(fig, Path(path))


# ================================================================================ writers
def _dump(obj: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(_jsonable(obj), f, indent=2, default=str)
        f.write("\n")
    return path


def _markdown(stats: Mapping[str, Any], base: Mapping[str, Any] | None, title: str, images: list[Path]) -> str:
    cmp = records_comparison(stats, base)
    lines = [f"# {title}", ""]
    lines.append(f"* policy: `{stats.get('policy')}` on the `{stats.get('runtime')}` runtime, job `{stats.get('job_id')}`")
    lines.append(f"* records processed: {sum(cmp['with_lb']):,} over {len(cmp['with_lb'])} reducers, "
                 f"{stats.get('num_keys', 0):,} keys; forwarded: {sum(stats.get('forwarded') or []):,}")
    lines.append(f"* skew S with LB: {cmp['skew_with_lb']:.3f}"
                 + ("" if base is None else f"; without LB: {cmp['skew_without_lb']:.3f}"))
    lines.append(f"* wall time: {float(stats.get('wall_time_s') or 0):.2f} s"
                 + ("" if stats.get("virtual_time_s") is None else f"; virtual time {float(stats['virtual_time_s']):.3f} s"))
    lines.append(f"* processed per reducer: {cmp['with_lb']}"
                 + ("" if base is None else f" (without LB: {cmp['without_lb']})"))
    events = _events(stats)
    lines += ["", f"## Rebalances ({len(events)})", ""]
    if events:
        lines += ["| time (s) | action | reducer | queue lengths | tokens after | version |", "|---|---|---|---|---|---|"]
        for e in events:
            lines.append(f"| {float(e['time_s']):.4f} | {e['action']} | {e['reducer']} | {list(e['queue_lengths'])} "
                         f"| {list(e.get('tokens_after') or [])} | {e.get('version')} |")
    else:
        lines.append("none")
    lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in images]
    return "\n".join(lines) + "\n"


def write_report(result_or_stats: Any, out_dir: str | Path, *, baseline_stats: Any = None,
                 title: str | None = None, initial_tokens: int | Sequence[int] | None = None,
                 table1: Any = None) -> list[Path]:
    """Writes a run report into ``out_dir`` (created if needed).

    Args:
        result_or_stats: A :class:`dpa.Result`, :class:`dpa.Stats` or a stats dict.
        out_dir: Directory to write into (existing files of the same name are replaced).
        baseline_stats: The same job without load balancing (e.g. ``max_rounds=0``), for
            the "without LB" bars; a Result, Stats or stats dict.
        title: Prefix of every plot title and the heading of ``report.md``.
        initial_tokens: Tokens per reducer at the start (int or list), when known;
            otherwise inferred (see :func:`initial_token_counts`).
        table1: Optional Table 1 results (see :func:`table1_rows`) to plot as well.

    Returns:
        The files written: ``stats.json``, [``baseline_stats.json``], ``queues.png``,
        ``records.png``, [``tokens.png``, ring policies only], [``table1.png``],
        ``report.md``.
    """
    stats = stats_dict(result_or_stats)
    base = None if baseline_stats is None else stats_dict(baseline_stats)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [_dump(stats, out / "stats.json")]
    if base is not None:
        written.append(_dump(base, out / "baseline_stats.json"))
    images = [plot_queues(stats, out / "queues.png", title=title),
              plot_records(stats, out / "records.png", baseline_stats=base, title=title)]
    tokens = plot_tokens(stats, out / "tokens.png", initial_tokens=initial_tokens, title=title)
    if tokens is not None:
        images.append(tokens)
    if table1 is not None:
        images.append(plot_table1(_load_if_path(table1), out / "table1.png"))
    written += images
    md = out / "report.md"
    md.write_text(_markdown(stats, base, title or f"dpa run report ({stats.get('policy')})", images), encoding="utf-8")
    written.append(md)
    return written


def _load_if_path(data: Any) -> Any:
    if isinstance(data, (str, Path)):
        with open(data, encoding="utf-8") as f:
            return json.load(f)
    return data


def write_experiment_report(table1: Any, out_dir: str | Path, *, title: str | None = None) -> list[Path]:
    """Writes ``table1.json`` (the rows, joined with the paper's) and ``table1.png``.

    Args:
        table1: Table 1 results (a path to their JSON, or the loaded object; see
            :func:`table1_rows` for the shapes understood).
        out_dir: Directory to write into.
        title: Title of the plot.

    Returns:
        The files written.

    Raises:
        ValueError: When no measured value could be found in ``table1``.
    """
    data = _load_if_path(table1)
    rows = table1_rows(data)
    if not any(r.no_lb is not None or r.with_lb is not None for r in rows):
        raise ValueError("no Table 1 results found (expected rows with workload, method, no_lb and with_lb)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    from dataclasses import asdict

    written = [_dump([asdict(r) for r in rows], out / "table1.json"),
               plot_table1(data, out / "table1.png", title=title)]
    return written
