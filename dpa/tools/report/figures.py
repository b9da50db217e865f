"""Shared plumbing of :mod:`dpa.tools.report`: matplotlib figures on the Agg canvas, and JSON files.

Figures use matplotlib's object API with the Agg canvas, so they never change the
process-wide backend and need no display.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: Resolution of every PNG.
DPI = 110


def jsonable(value: Any) -> Any:
    """Tuples -> lists, numpy scalars/arrays -> Python, recursively."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "to_dict") and not isinstance(value, (str, bytes)):
        return jsonable(value.to_dict())
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy
        return jsonable(value.tolist())
    return value


def new_figure(width: float = 9.0, height: float = 5.0, ncols: int = 1) -> tuple[Any, list[Any]]:
    """A constrained-layout figure on its own Agg canvas, and its ``ncols`` axes in a row."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def palette(n: int) -> list[Any]:
    """``n`` distinct colours (tab10, or tab20 beyond 10)."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def save_figure(fig: Any, path: Path) -> Path:
    """Writes ``fig`` as a PNG at ``path`` (creating its directory); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    return path


def dump_json(obj: Any, path: Path) -> Path:
    """Writes ``obj`` as indented JSON at ``path`` (creating its directory); returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(jsonable(obj), f, indent=2, default=str)
        f.write("\n")
    return path


def load_if_path(data: Any) -> Any:
    """The JSON in the file ``data`` names, or ``data`` itself when it is not a path."""
    if isinstance(data, (str, Path)):
        with open(data, encoding="utf-8") as f:
            return json.load(f)
    return data
