"""``dpa.groupby(ds, key)``: Ray Data's ``ds.groupby(key)`` aggregations, run by dpa.

For a ``ray.data.Dataset`` the natural result is another ``ray.data.Dataset``. The methods
here run :func:`dpa.run` and return :meth:`dpa.Result.to_ray_dataset`: the reducers' result
blocks, left in the object store. ``count()``, ``sum()``, ``min()``, ``max()``, ``mean()`` and
``std()`` take what Ray Data's take (``on``: a column, a list of columns, or None for every
column but the key; ``ddof`` for ``std``) and name their columns as Ray Data names them
(``count()``, ``sum(v)``, ``mean(v)``, ``std(v)``, ...), so that a pipeline can switch from
``ds.groupby(k).sum(["a", "b"])`` to ``dpa.groupby(ds, k).sum(["a", "b"])`` without renaming.
Several columns are aggregated in one job (one pass over the input, one row per key).

:meth:`GroupedDataset.aggregate` takes one or more :class:`dpa.Reducer` (``Collect``,
``TopK``, ``WithCost``, a user's own), as Ray Data's ``aggregate(*aggs)`` takes its
aggregations, and computes them all in one job; one reducer keeps its own column name,
several are named as :func:`dpa.run` names a list of them (``count(1)``, ``sum(v)``, ...,
or the names given). :meth:`GroupedDataset.run` returns the :class:`dpa.Result` itself
(with its :class:`dpa.Stats`).

Nulls are skipped, as with Ray Data's default ``ignore_nulls=True`` (and SQL); a NaN is a
value and makes a float sum, mean or deviation NaN, as in Ray Data. Where Ray Data gives
NaN for the deviation of a single value, ``std`` gives null, as Spark and DuckDB do.
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa

from dpa.aggregates.builtins import Count, Max, Mean, Min, Sum
from dpa.aggregates.contract import Reducer, what_it_is
from dpa.aggregates.moments import Std
from dpa.config import JobConfig
from dpa.errors import ConfigError
from dpa.result import Result

logger = logging.getLogger(__name__)

__all__ = ["GroupedDataset", "groupby"]


class GroupedDataset:
    """A dataset grouped by key columns; each aggregation runs one dpa job.

    Args:
        dataset: The input (a ``ray.data.Dataset``; anything :func:`dpa.run` takes works).
        key: Key column name or list of names.
        config: A :class:`dpa.JobConfig` (default ``JobConfig()``, on the Ray runtime).
        overrides: Shortcuts for ``config``'s fields by their own names (``num_reducers=8``,
            ``policy="hash"``, ...), as :func:`dpa.run` takes them.
    """

    def __init__(self, dataset: Any, key: str | list[str], config: JobConfig | None = None,
                 **overrides: Any) -> None:
        if not (isinstance(key, str) or (isinstance(key, (list, tuple)) and key
                                         and all(isinstance(k, str) for k in key))):
            raise ConfigError(f"groupby key must be a column name or a list of names, got {key!r}")
        if config is not None and not isinstance(config, JobConfig):
            raise ConfigError(f"config must be a dpa.JobConfig, got {type(config).__name__}")
        self.dataset = dataset
        self.key = key if isinstance(key, str) else list(key)
        self.config = config
        self.overrides = overrides

    def run(self, reducer: Reducer | list[Reducer]) -> Result:
        """Runs ``reducer`` (or a list of reducers, in one pass) per key; the
        :class:`dpa.Result` (data stays in the object store)."""
        import dpa

        return dpa.run(self.dataset, key=self.key, reducer=reducer, config=self.config, **self.overrides)

    def aggregate(self, *reducers: Reducer | list[Reducer]) -> Any:
        """The ``reducers`` per key, all in one job, as a ``ray.data.Dataset``: the key
        columns, then one column per reducer (one reducer: its ``name``; several: named as
        :func:`dpa.run` names a list). ``aggregate(a, b)`` and ``aggregate([a, b])`` are the same.

        Raises:
            ConfigError: No reducer, or one that is not a :class:`dpa.Reducer` (Ray Data's
                ``AggregateFn`` objects among them).
        """
        return self.run(_reducers(reducers)).to_ray_dataset()

    def count(self) -> Any:
        """Rows per key, in column ``count()``."""
        return self.aggregate(Count(name="count()"))

    def sum(self, on: str | list[str] | None = None, ignore_nulls: bool = True) -> Any:
        """Sum per key of ``on`` (a column, a list of columns, or None: every column but the
        key), in columns ``sum(on)``; nulls are skipped."""
        return self._aggregate_on(Sum, "sum", on, ignore_nulls)

    def min(self, on: str | list[str] | None = None, ignore_nulls: bool = True) -> Any:
        """Smallest value per key of ``on`` (as :meth:`sum`), in columns ``min(on)``."""
        return self._aggregate_on(Min, "min", on, ignore_nulls)

    def max(self, on: str | list[str] | None = None, ignore_nulls: bool = True) -> Any:
        """Largest value per key of ``on`` (as :meth:`sum`), in columns ``max(on)``."""
        return self._aggregate_on(Max, "max", on, ignore_nulls)

    def mean(self, on: str | list[str] | None = None, ignore_nulls: bool = True) -> Any:
        """Mean per key of ``on`` (as :meth:`sum`), in columns ``mean(on)`` (float64)."""
        return self._aggregate_on(Mean, "mean", on, ignore_nulls)

    def std(self, on: str | list[str] | None = None, ddof: int = 1, ignore_nulls: bool = True) -> Any:
        """Standard deviation per key of ``on`` (as :meth:`sum`), in columns ``std(on)``
        (float64): sample (``ddof=1``, the default) or population (``ddof=0``); null for a
        key with ``ddof`` values or fewer.

        Raises:
            ConfigError: ``ddof`` is neither 0 nor 1.
        """
        if isinstance(ddof, bool) or ddof not in (0, 1):
            raise ConfigError(f"std() takes ddof=1 (sample) or ddof=0 (population), got ddof={ddof!r}")
        return self._aggregate_on(lambda c, name: Std(c, sample=ddof == 1, name=name), "std", on, ignore_nulls)

    def _aggregate_on(self, make: Any, label: str, on: str | list[str] | None, ignore_nulls: bool) -> Any:
        """One aggregate per column of ``on``, named ``label(column)``, in one job."""
        if ignore_nulls is not True:
            raise ConfigError(
                f"{label}() takes only ignore_nulls=True: dpa's aggregates skip nulls, as SQL's do. To tell "
                f"which keys hold nulls, add a boolean column that marks them (e.g. v_is_null, with "
                f"ds.map_batches) and count it in the same job: aggregate(dpa.CountIf('v_is_null'), ...)")
        columns = self._columns(on, label)
        return self.aggregate(*[make(c, f"{label}({c})") for c in columns])

    def _columns(self, on: str | list[str] | None, label: str) -> list[str]:
        """``on`` as a list of column names; None is every column of the dataset but the key."""
        if isinstance(on, str):
            return [on]
        if isinstance(on, (list, tuple)) and on and all(isinstance(c, str) for c in on):
            if len(set(on)) != len(on):
                raise ConfigError(f"{label}() got a column twice in on={list(on)!r}; name each column once")
            return list(on)
        if on is not None:
            raise ConfigError(f"{label}() takes on= a column name, a non-empty list of names or None, got {on!r}")
        keys = [self.key] if isinstance(self.key, str) else self.key
        names = _column_names(self.dataset)
        if names is None:
            raise ConfigError(
                f"{label}() with on=None aggregates every column but the key, and the columns of this "
                f"{type(self.dataset).__name__} are not known before it is read; name them: {label}(on=[...])")
        columns = [c for c in names if c not in keys]
        if not columns:
            raise ConfigError(f"{label}() with on=None found no column besides the key {self.key!r}")
        return columns

    def map_groups(self, fn: Any, batch_format: str = "pandas", schema: Any = None) -> Any:
        """``fn`` on all rows of each key, as Ray Data's ``map_groups``: a ``ray.data.Dataset``
        of the rows ``fn`` returned (:class:`dpa.GroupApply`, scheduled over the reducers by
        cost, so one large group does not make a straggler).

        Args:
            fn: ``fn(group)`` or ``fn(key, group)``; returns a ``pandas.DataFrame``, a
                ``pyarrow.Table``, a dict of column arrays, or None.
            batch_format: What ``group`` is: ``"pandas"`` (default), ``"pyarrow"`` or
                ``"numpy"`` (a dict of column name -> ``numpy.ndarray``).
            schema: Optional ``pyarrow.Schema`` of the output.
        """
        from dpa.aggregates.group_apply import GroupApply

        fmt = {"pyarrow": "arrow"}.get(batch_format, batch_format)
        return self.run(GroupApply(fn, schema=schema, batch_format=fmt)).to_ray_dataset()

    def __repr__(self) -> str:
        return f"GroupedDataset(key={self.key!r})"


def _reducers(given: tuple[Any, ...]) -> Reducer | list[Reducer]:
    """``aggregate``'s arguments as one reducer or a list of them, checked."""
    items = list(given[0]) if len(given) == 1 and isinstance(given[0], (list, tuple)) else list(given)
    if not items:
        raise ConfigError("aggregate() needs at least one dpa.Reducer, e.g. aggregate(dpa.Count(), dpa.Sum('v'))")
    for i, r in enumerate(items):
        if not isinstance(r, Reducer):
            where = "" if len(items) == 1 else f" (argument {i + 1})"
            raise ConfigError(
                f"aggregate() takes dpa.Reducer objects such as dpa.Sum('v'), {what_it_is(r)}{where}; "
                "Ray Data's AggregateFn objects do not run on dpa: use dpa's (dpa.Count(), dpa.Sum(...), "
                "dpa.Mean(...), dpa.Std(...), ...)"
            )
    return items[0] if len(items) == 1 else items


def _column_names(dataset: Any) -> list[str] | None:
    """The column names of ``dataset`` if they are known without reading it (a Ray Dataset
    asks for its schema, which a lazy one may compute from its first block), else None."""
    if isinstance(dataset, pa.Table):
        return list(dataset.column_names)
    columns = getattr(dataset, "columns", None)  # pandas
    if columns is not None and not callable(columns):
        return [str(c) for c in columns]
    schema = getattr(dataset, "schema", None)
    if callable(schema):  # ray.data.Dataset
        found = schema()
        names = getattr(found, "names", None)
        return list(names) if names is not None else None
    return None


def groupby(dataset: Any, key: str | list[str], config: JobConfig | None = None,
            **overrides: Any) -> GroupedDataset:
    """Groups ``dataset`` by ``key`` for dpa aggregations that return Ray Datasets.

    Example::

        import dpa, ray

        ds = ray.data.read_parquet("events/")
        per_user = dpa.groupby(ds, "user_id").sum("bytes")   # a ray.data.Dataset
        per_user.write_parquet("out/")

    Args:
        dataset: A ``ray.data.Dataset`` (or any source :func:`dpa.run` takes).
        key: Key column name or list of names.
        config: A :class:`dpa.JobConfig`; ``overrides`` (shortcuts for its fields by their
            own names, as :func:`dpa.run` takes them) replace its fields.
    """
    return GroupedDataset(dataset, key, config, **overrides)
