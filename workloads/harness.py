"""The one harness of the paper experiments: command line, runs, claims and report.

An experiment module declares what it measures and how it reports it, as one
:class:`Experiment`, and exposes the harness's ``main``::

    EXPERIMENT = Experiment(
        module="workloads.exp_dkg", description=__doc__,
        out="results/dkg", json_name="dkg.json", md_name="dkg.md",
        add_arguments=_arguments,            # the experiment's own options
        run=lambda args, log: run_all(...),   # workloads + runs -> JSON-friendly results
        claims=claims,                        # results -> [Claim] (stored under "claims")
        markdown=lambda res: markdown(res, res["meta"]["command"]),
        plots=_plots,                         # (results, out_dir) -> [PNG paths]
        quick=("--scale", "0.01"),            # what --quick means
    )
    main = EXPERIMENT.main                    # main(argv) -> int; `python -m`, `dpa experiment`

:meth:`Experiment.main` parses the common options (``--out``, ``--quick`` and, where the
experiment declares them, ``--runtime``, ``--runs``, ``--seed``), starts Ray for
``--runtime ray`` (:func:`dpa.runtime.ray.session.ensure_ray`, through
:func:`workloads.experiment.runtime_session`), runs, adds the claims and the metadata
(:func:`metadata`), writes the JSON (:func:`write_json`, the only JSON writer of the
experiments), the markdown and the plots, prints the claims, and returns the exit code.

Experiments whose one option is ``--scale`` (the message counts of their streams) are
built by :func:`scaled_experiment`, their sizes being a :class:`ScaledSizes`.

Also here: the small writing helpers the reports share (:class:`Claim`,
:func:`claims_markdown`, :func:`markdown_table`, :func:`sci`, :func:`new_figure`,
:func:`label_axes`, :func:`save_figure`, :class:`StageTimer`). Plots use matplotlib's
object API on the Agg canvas, so they never touch the process-wide backend.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpa.errors import ConfigError

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "Claim",
    "Experiment",
    "Log",
    "ScaledSizes",
    "StageTimer",
    "claims_markdown",
    "label_axes",
    "markdown_table",
    "metadata",
    "new_figure",
    "save_figure",
    "scaled_experiment",
    "sci",
    "write_json",
]

Log = Callable[[str], None] | None
"""A progress printer (None = quiet)."""


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


def new_figure(nrows: int = 1, ncols: int = 1, width: float = 6.0, height: float = 4.5,
               layout: str | None = "constrained", sharey: bool = False) -> tuple[Any, np.ndarray]:
    """A figure on the Agg canvas with ``nrows x ncols`` axes.

    Args:
        nrows: Rows of subplots.
        ncols: Columns of subplots.
        width: Width of one subplot in inches.
        height: Height of one subplot in inches.
        layout: Matplotlib layout engine (None = call ``fig.tight_layout()`` yourself).
        sharey: Share the y axis between subplots.

    Returns:
        ``(figure, axes)`` with ``axes`` a 2-D array.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height * nrows), dpi=110, layout=layout)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, squeeze=False, sharey=sharey)


def label_axes(ax: Any, xlabel: str, ylabel: str, title: str | None = None, *, log_y: bool = False,
               legend: float | None = 8) -> None:
    """The usual finish of a plot: axis labels, title, a light grid and the legend.

    Args:
        ax: The axes.
        xlabel: Label of the x axis.
        ylabel: Label of the y axis.
        title: Title of the axes (None = none).
        log_y: Log-scale y axis, gridded at the minor ticks too.
        legend: Font size of the legend (None = no legend).
    """
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title is not None:
        ax.set_title(title)
    ax.grid(True, which="both" if log_y else "major", alpha=0.3)
    if legend is not None:
        ax.legend(fontsize=legend)


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

    def __init__(self, log: Log = None) -> None:
        self.log = log
        self.timings: dict[str, float] = {}

    def __call__(self, name: str, fn: Callable[[], Any]) -> Any:
        if self.log:
            self.log(f"[{name}]")
        t0 = time.perf_counter()
        result = fn()
        self.timings[name] = time.perf_counter() - t0
        return result


# ------------------------------------------------------------------------------ JSON
def write_json(path: str | Path, obj: Any) -> Path:
    """Writes ``obj`` as indented JSON, creating parent directories."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(obj, indent=1, default=_json_default) + "\n")
    return p


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if hasattr(obj, "tolist"):  # numpy arrays
        return obj.tolist()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def metadata(module: str, argv: Sequence[str], elapsed_s: float, **extra: Any) -> dict[str, Any]:
    """Run metadata stored under ``"meta"`` next to every experiment's results.

    Args:
        module: The experiment's module (``"workloads.exp_pkg"``), for the command line.
        argv: The arguments it was run with.
        elapsed_s: Wall time of the run.
        **extra: More entries (runtime, runs, settings, ...).
    """
    meta: dict[str, Any] = {
        "experiment": module.rsplit(".", 1)[-1],
        "command": " ".join(["python -m", module, shlex.join(argv)]).strip(),
        "argv": list(argv),
        "elapsed_s": elapsed_s,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        **extra,
    }
    if extra.get("runtime") == "ray":
        import ray

        meta["ray"] = ray.__version__
    return meta


# ------------------------------------------------------------------------------ experiment
@dataclass(frozen=True)
class Experiment:
    """One paper experiment: its options, runs, claims and report.

    Attributes:
        module: The module run as ``python -m`` (``"workloads.exp_pkg"``).
        description: Its docstring (the first line is the ``--help`` description).
        run: ``(args, log) -> results``: builds the workloads and runs them; the results
            must be JSON-friendly (a dict).
        out: Default of ``--out``.
        json_name: The JSON file inside the ``--out`` directory; None = ``--out`` is the
            JSON file itself (markdown next to it, ``.md``; plots in its directory).
        md_name: The markdown file inside the ``--out`` directory (ignored when
            ``json_name`` is None).
        out_flags: The spellings of ``--out`` (the first is the documented one).
        add_arguments: Adds the experiment's own options to the parser.
        claims: ``results -> [Claim or dict]``: stored under ``"claims"`` and printed.
        markdown: ``results -> str`` (results with ``"meta"``).
        plots: ``(results, out_dir) -> [paths]``.
        verdict: ``(results, args) -> exit code`` (may print a summary); default 0.
        meta: ``args -> dict`` of extra metadata (settings, ...).
        runtime: Default of ``--runtime`` (``"ray"`` or ``"local"``); None = no such option.
        runs: Default of ``--runs``; None = no such option.
        seed: Default of ``--seed``; None = no such option.
        quick: The options ``--quick`` stands for (the smallest meaningful run); the
            ones given on the command line win.
        print_markdown: Print the markdown report at the end.
    """

    module: str
    description: str
    run: Callable[[argparse.Namespace, Log], dict[str, Any]]
    out: str
    json_name: str | None = None
    md_name: str | None = None
    out_flags: tuple[str, ...] = ("--out",)
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None
    claims: Callable[[dict[str, Any]], Sequence[Any]] | None = None
    markdown: Callable[[dict[str, Any]], str] | None = None
    plots: Callable[[dict[str, Any], Path], Sequence[Path]] | None = None
    verdict: Callable[[dict[str, Any], argparse.Namespace], int] | None = None
    meta: Callable[[argparse.Namespace], dict[str, Any]] | None = None
    runtime: str | None = None
    runs: int | None = None
    seed: int | None = None
    quick: tuple[str, ...] = ()
    print_markdown: bool = False

    def parser(self) -> argparse.ArgumentParser:
        """The experiment's command line: the common options, then its own."""
        p = argparse.ArgumentParser(prog=f"python -m {self.module}",
                                    description=self.description.strip().split("\n")[0])
        where = "JSON file (markdown next to it, .md)" if self.json_name is None else "output directory"
        p.add_argument(*self.out_flags, dest="out", default=self.out, help=f"{where} (default {self.out})")
        if self.quick:
            p.add_argument("--quick", action="store_true",
                           help=f"the smallest meaningful run: {' '.join(self.quick)} (options given win)")
        if self.runtime is not None:
            from workloads.experiment import RUNTIMES

            p.add_argument("--runtime", choices=RUNTIMES, default=self.runtime,
                           help="ray: the real actors; local: the in-process simulator (virtual time) "
                                f"(default {self.runtime})")
        if self.runs is not None:
            p.add_argument("--runs", type=int, default=self.runs, help=f"runs, averaged (default {self.runs})")
        if self.seed is not None:
            p.add_argument("--seed", type=int, default=self.seed, help=f"random seed (default {self.seed})")
        if self.add_arguments is not None:
            self.add_arguments(p)
        return p

    def parse(self, argv: Sequence[str]) -> argparse.Namespace:
        """Parses ``argv``; with ``--quick`` the :attr:`quick` options come first (``argv`` wins)."""
        args = self.parser().parse_args(list(argv))
        if getattr(args, "quick", False):
            args = self.parser().parse_args([*self.quick, *argv])
        return args

    def paths(self, args: argparse.Namespace) -> tuple[Path, Path, Path]:
        """``(json, markdown, plot directory)`` of a run."""
        out = Path(args.out)
        if self.json_name is None:
            return out, out.with_suffix(".md"), out.parent
        return out / self.json_name, out / (self.md_name or Path(self.json_name).with_suffix(".md").name), out

    def main(self, argv: Sequence[str] | None = None, log: Log = print) -> int:
        """Runs the experiment from a command line and writes its report.

        Args:
            argv: Arguments (default ``sys.argv[1:]``).
            log: Progress printer.

        Returns:
            The exit code: the experiment's :attr:`verdict` (0 without one).
        """
        argv = list(sys.argv[1:] if argv is None else argv)
        args = self.parse(argv)
        started = time.perf_counter()
        session: Any = contextlib.nullcontext()
        if self.runtime is not None:
            from workloads.experiment import runtime_session

            session = runtime_session(args.runtime)
        with session:
            results = self.run(args, log)
        if self.claims is not None:
            results["claims"] = [c.to_dict() if hasattr(c, "to_dict") else dict(c) for c in self.claims(results)]
        extra = {k: getattr(args, k) for k in ("runtime", "runs", "seed") if hasattr(args, k)}
        extra.update(self.meta(args) if self.meta is not None else {})
        results["meta"] = metadata(self.module, argv, time.perf_counter() - started, **extra)
        json_path, md_path, plot_dir = self.paths(args)
        written = [write_json(json_path, results)]
        if self.markdown is not None:
            text = self.markdown(results)
            md_path.write_text(text, encoding="utf-8")
            written.append(md_path)
            if self.print_markdown and log:
                log("\n" + text)
        if self.plots is not None:
            written += list(self.plots(results, plot_dir))
        code = self.verdict(results, args) if self.verdict is not None else 0
        if log:
            for c in results.get("claims", []):
                if "holds" in c:
                    log(f"  [{'yes' if c['holds'] else 'NO '}] {c['where']}: {c['claim']}")
            log(f"wrote {', '.join(str(p) for p in written)} in {results['meta']['elapsed_s']:.1f} s")
        return int(code)


# ------------------------------------------------------------------------------ scaled experiments
class ScaledSizes:
    """Mixin of an experiment's frozen dataclass of message counts (one per stream)."""

    def scaled(self, factor: float) -> Self:
        """All sizes times ``factor`` (at least 1,000 messages each).

        Raises:
            ConfigError: ``factor`` is not a finite number > 0.
        """
        if not (factor > 0 and math.isfinite(factor)):
            raise ConfigError(f"--scale must be a finite number > 0, got {factor!r}")
        return type(self)(**{k: max(1_000, int(v * factor)) for k, v in asdict(self).items()})


def scaled_experiment(
    module: str, description: str | None, sizes: type[ScaledSizes], run_all: Callable[..., dict[str, Any]], *,
    claims: Callable[[dict[str, Any]], Sequence[Any]], markdown: Callable[[dict[str, Any], str], str],
    plots: Callable[[dict[str, Any], Path], Sequence[Path]], out: str, json_name: str, quick_scale: str,
    scale_help: str = "multiply every stream's message count",
) -> Experiment:
    """An :class:`Experiment` whose own option is ``--scale``, the factor of its default sizes.

    Args:
        module: The module run as ``python -m``.
        description: Its docstring.
        sizes: The dataclass of the default message counts.
        run_all: ``(sizes, seed, log=log) -> results``.
        claims: ``results -> [Claim]``.
        markdown: ``(results, command) -> str``.
        plots: ``(results, out_dir) -> [paths]``.
        out: Default of ``--out``.
        json_name: The JSON file inside ``--out``.
        quick_scale: The ``--scale`` of ``--quick``.
        scale_help: The ``--help`` of ``--scale``.

    Returns:
        The experiment (``--seed`` defaults to 0).
    """
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--scale", type=float, default=1.0, help=scale_help)

    return Experiment(
        module=module, description=description or "", out=out, json_name=json_name,
        add_arguments=add_arguments, seed=0, quick=("--scale", quick_scale),
        run=lambda args, log: run_all(sizes().scaled(args.scale), args.seed, log=log),
        claims=claims, markdown=lambda res: markdown(res, res["meta"]["command"]), plots=plots,
    )
