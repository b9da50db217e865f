"""Table 1 reports: the skew ``S`` per workload and method, measured beside published values.

:func:`table1_rows` reads Table 1 results in the common JSON shapes and joins them with the
reference values the caller passes (``paper``: ``{(workload, method): (S without LB,
S with LB)}``, e.g. ``workloads.paper.PAPER_TABLE1``; ``dpa``'s command line finds them
through the ``dpa.references`` entry point group). :func:`plot_table1` draws them, and
:func:`write_experiment_report` writes both the rows and the plot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dpa.tools.report.figures import dump_json, load_if_path, new_figure, save_figure

#: Published Table 1 skews: ``{(workload, method): (S without LB, S with LB)}``.
PaperTable = Mapping[tuple[str, str], tuple[float, float]]


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


def table1_rows(data: Any, paper: PaperTable | None = None) -> list[Table1Row]:
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

    Args:
        data: The results (see above).
        paper: The published values (e.g. ``workloads.paper.PAPER_TABLE1``); None or
            empty: measured rows only, with ``paper_*`` None.
    """
    if paper is None:
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


def plot_table1(data: Any, path: str | Path, *, paper: PaperTable | None = None,
                title: str | None = None) -> Path:
    """Skew S per workload and method (bars: measured; black ticks: ``paper``'s values, if given)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    rows = table1_rows(data, paper)
    methods = [m for m in ("halving", "doubling") if any(r.method == m for r in rows)]
    methods += sorted({r.method for r in rows} - set(methods))
    fig, axes = new_figure(width=6.0 * max(1, len(methods)), height=5.0, ncols=max(1, len(methods)))
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
               Patch(facecolor=colors["lb"], edgecolor="#333333", label="measured, with LB")]
    has_paper = any(r.paper_no_lb is not None or r.paper_with_lb is not None for r in rows)
    if has_paper:
        handles.append(Line2D([], [], color="black", marker="_", linestyle="none", markersize=18,
                              markeredgewidth=2.5, label="paper (Table 1)"))
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=9)
    fig.suptitle(title or ("Table 1: skew S per workload, measured vs. the paper" if has_paper
                           else "Table 1: skew S per workload"))
    return save_figure(fig, Path(path))


def write_experiment_report(table1: Any, out_dir: str | Path, *, paper: PaperTable | None = None,
                            title: str | None = None) -> list[Path]:
    """Writes ``table1.json`` (the rows, joined with the paper's) and ``table1.png``.

    Args:
        table1: Table 1 results (a path to their JSON, or the loaded object; see
            :func:`table1_rows` for the shapes understood).
        out_dir: Directory to write into.
        paper: The published values (see :func:`table1_rows`); None: measured values only.
        title: Title of the plot.

    Returns:
        The files written.

    Raises:
        ValueError: When no measured value could be found in ``table1``.
    """
    data = load_if_path(table1)
    rows = table1_rows(data, paper)
    if not any(r.no_lb is not None or r.with_lb is not None for r in rows):
        raise ValueError("no Table 1 results found (expected rows with workload, method, no_lb and with_lb)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [dump_json([asdict(r) for r in rows], out / "table1.json"),
               plot_table1(data, out / "table1.png", paper=paper, title=title)]
    return written
