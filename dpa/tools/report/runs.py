"""Run reports: ``stats.json``, PNG plots of what the load balancer did, and ``report.md``.

See :mod:`dpa.tools.report` for the files; the data preparation functions (``queue_series``,
``token_steps``, ...) are plain Python on the stats dict.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dpa.tools.report.figures import (
    dump_json,
    jsonable,
    load_if_path,
    new_figure,
    palette,
    save_figure,
)
from dpa.tools.report.table1 import PaperTable, plot_table1

#: Initial tokens per reducer of the halving method when nothing better is known
#: (``JobConfig.initial_tokens``' default, ``dpa.routing.ring.DEFAULT_HALVING_TOKENS``).
DEFAULT_HALVING_TOKENS = 16

#: Most rebalance events that get a text label in a plot (the rest still get a line).
MAX_EVENT_LABELS = 16


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
    return jsonable(dict(obj))


def load_stats(path: str | Path) -> dict[str, Any]:
    """Reads a ``stats.json`` written by :func:`write_report`."""
    with open(path, encoding="utf-8") as f:
        return stats_dict(json.load(f))


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
    """Rebalance events as ``{"time_s", "reducer", "action", "label"}`` (``"halve r0"``;
    an event about the whole ring, reducer -1, is labelled by its action alone)."""
    return [
        {"time_s": float(e["time_s"]), "reducer": int(e["reducer"]), "action": str(e["action"]),
         "label": f"{e['action']} r{e['reducer']}" if int(e["reducer"]) >= 0 else str(e["action"])}
        for e in _events(stats)
    ]


def initial_token_counts(stats: Mapping[str, Any], initial_tokens: int | Sequence[int] | None = None) -> list[int] | None:
    """Tokens per reducer when the job started, or None for policies without a ring.

    In order: ``initial_tokens`` when given (an int means that many for every reducer);
    the final tokens when nothing was rebalanced; the ring of a ``first_ring`` event (a
    first ring chosen on the mappers' forecast, before any record was routed); the first
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
    first = events[0]
    after = [int(t) for t in first.get("tokens_after") or final]
    x = int(first["reducer"])
    action = first["action"]
    if action == "first_ring":
        return after
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


# ================================================================================ plotting
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


def plot_queues(stats: Any, path: str | Path, *, title: str | None = None) -> Path:
    """Queue length per reducer over time, with rebalance events marked."""
    stats = stats_dict(stats)
    times, series = queue_series(stats)
    colors = palette(max(1, len(series)))
    fig, (ax,) = new_figure()
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
    return save_figure(fig, Path(path))


def plot_records(stats: Any, path: str | Path, *, baseline_stats: Any = None, title: str | None = None) -> Path:
    """Records processed per reducer, with and (from ``baseline_stats``) without LB."""
    stats = stats_dict(stats)
    base = None if baseline_stats is None else stats_dict(baseline_stats)
    cmp = records_comparison(stats, base)
    r = len(cmp["reducers"])
    fig, (ax,) = new_figure(width=max(7.0, 1.2 * r + 3), height=5.0)
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
    return save_figure(fig, Path(path))


def plot_tokens(stats: Any, path: str | Path, *, initial_tokens: int | Sequence[int] | None = None,
                title: str | None = None) -> Path | None:
    """Ring tokens per reducer over time; None (nothing written) without a ring."""
    stats = stats_dict(stats)
    steps = token_steps(stats, initial_tokens)
    if steps is None:
        return None
    times, series = steps
    r = len(series)
    colors = palette(max(1, r))
    fig, (ax,) = new_figure()
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
    return save_figure(fig, Path(path))


# ================================================================================ writers
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
                 table1: Any = None, table1_paper: PaperTable | None = None) -> list[Path]:
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
        table1_paper: The published values to plot ``table1`` beside (see :func:`table1_rows`).

    Returns:
        The files written: ``stats.json``, [``baseline_stats.json``], ``queues.png``,
        ``records.png``, [``tokens.png``, ring policies only], [``table1.png``],
        ``report.md``.
    """
    stats = stats_dict(result_or_stats)
    base = None if baseline_stats is None else stats_dict(baseline_stats)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [dump_json(stats, out / "stats.json")]
    if base is not None:
        written.append(dump_json(base, out / "baseline_stats.json"))
    images = [plot_queues(stats, out / "queues.png", title=title),
              plot_records(stats, out / "records.png", baseline_stats=base, title=title)]
    tokens = plot_tokens(stats, out / "tokens.png", initial_tokens=initial_tokens, title=title)
    if tokens is not None:
        images.append(tokens)
    if table1 is not None:
        images.append(plot_table1(load_if_path(table1), out / "table1.png", paper=table1_paper))
    written += images
    md = out / "report.md"
    md.write_text(_markdown(stats, base, title or f"dpa run report ({stats.get('policy')})", images), encoding="utf-8")
    written.append(md)
    return written
