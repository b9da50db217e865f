"""``dpa run --agg NAME[:COLUMN[:PARAM]]``: several aggregates per job from the command line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dpa.tools.cli.errors import UsageError

#: name -> (factory(column, param), needs a column, takes a parameter)
AGG_NAMES = ("count", "sum", "min", "max", "mean", "avg", "count_distinct", "approx_count_distinct", "median",
             "quantile", "var", "var_pop", "std", "std_pop", "collect_set", "count_if", "any", "all", "max_by", "min_by")


def parse_agg(spec: str, cols: Sequence[str] | None) -> Any:
    """The reducer of one ``--agg`` spec, e.g. ``sum:bytes``, ``quantile:latency:0.95``, ``count``,
    ``max_by:status:updated_at`` (the status at the largest updated_at).

    Raises:
        UsageError: an unknown name, a missing or unknown column, or a bad parameter.
    """
    import dpa

    name, _, rest = spec.partition(":")
    column, _, param = rest.partition(":")
    name = name.strip().lower()
    if name not in AGG_NAMES:
        raise UsageError(f"--agg {spec!r}: unknown aggregate {name!r}; choose one of {', '.join(AGG_NAMES)}")
    if name == "count" and not column:
        return dpa.Count()  # records; count:COLUMN counts the column's non-null values
    if not column:
        raise UsageError(f"--agg {spec!r}: {name} needs a column, e.g. --agg {name}:COLUMN")
    _check_column(spec, column, cols)
    if name in ("max_by", "min_by"):
        if not param:
            raise UsageError(f"--agg {spec!r}: {name} needs the column that orders the rows, "
                             f"e.g. --agg {name}:{column}:updated_at")
        _check_column(spec, param, cols)
        return (dpa.MaxBy if name == "max_by" else dpa.MinBy)(column, by=param)
    if param and name != "quantile":
        raise UsageError(f"--agg {spec!r}: only quantile, max_by and min_by take a parameter "
                         "(quantile:COLUMN:Q, max_by:COLUMN:BY)")
    if name == "quantile":
        try:
            q = float(param) if param else 0.5
        except ValueError:
            raise UsageError(f"--agg {spec!r}: the quantile must be a number in [0, 1], got {param!r}") from None
        if not 0 <= q <= 1:
            raise UsageError(f"--agg {spec!r}: the quantile must be in [0, 1], got {q}")
        return dpa.ApproxQuantile(column, q=q)
    factories = {
        "count": dpa.Count, "sum": dpa.Sum, "min": dpa.Min, "max": dpa.Max, "mean": dpa.Mean, "avg": dpa.Mean,
        "count_distinct": dpa.CountDistinct, "approx_count_distinct": dpa.ApproxCountDistinct,
        "median": dpa.Median, "var": dpa.Var, "std": dpa.Std, "collect_set": dpa.CollectSet,
        "count_if": dpa.CountIf, "any": dpa.Any, "all": dpa.All,
        "var_pop": lambda c: dpa.Var(c, sample=False), "std_pop": lambda c: dpa.Std(c, sample=False),
    }
    return factories[name](column)


def _check_column(spec: str, column: str, cols: Sequence[str] | None) -> None:
    if cols is not None and column not in cols:
        raise UsageError(f"--agg {spec!r}: column {column!r} is not in the input; columns: {', '.join(cols)}")


def parse_aggs(specs: Sequence[str], cols: Sequence[str] | None) -> list[Any]:
    """The reducers of every ``--agg`` (see :func:`parse_agg`)."""
    return [parse_agg(s, cols) for s in specs]
