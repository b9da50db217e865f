"""``dpa.groupby(ds, key)``: Ray Data's ``ds.groupby(key)`` aggregations, run by dpa.

For a ``ray.data.Dataset`` the natural result is another ``ray.data.Dataset``. The methods
here run :func:`dpa.run` and return :meth:`dpa.Result.to_ray_dataset`: the reducers' result
blocks, left in the object store. Output columns are named as Ray Data names them
(``count()``, ``sum(v)``, ``mean(v)``, ``min(v)``, ``max(v)``), so that a pipeline can switch
from ``ds.groupby(k).sum("v")`` to ``dpa.groupby(ds, k).sum("v")`` without renaming.

:meth:`GroupedDataset.aggregate` takes any :class:`dpa.Reducer` (``Collect``, ``TopK``,
``WithCost``, a user's own) and keeps its column name; :meth:`GroupedDataset.run` returns
the :class:`dpa.Result` itself (with its :class:`dpa.Stats`).
"""

from __future__ import annotations

import logging
from typing import Any

from dpa.aggregates.builtins import Count, Max, Mean, Min, Sum
from dpa.aggregates.contract import Reducer
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

    def run(self, reducer: Reducer) -> Result:
        """Runs ``reducer`` per key; the :class:`dpa.Result` (data stays in the object store)."""
        import dpa

        return dpa.run(self.dataset, key=self.key, reducer=reducer, config=self.config, **self.overrides)

    def aggregate(self, reducer: Reducer) -> Any:
        """``reducer`` per key, as a ``ray.data.Dataset`` (key columns, then ``reducer.name``)."""
        if not isinstance(reducer, Reducer):
            raise ConfigError(
                f"aggregate() takes a dpa.Reducer such as dpa.Sum('v'), got {type(reducer).__name__}; "
                "Ray Data's AggregateFn objects do not run on dpa"
            )
        return self.run(reducer).to_ray_dataset()

    def count(self) -> Any:
        """Rows per key, in column ``count()``."""
        return self.aggregate(Count("count()"))

    def sum(self, on: str) -> Any:
        """Sum of ``on`` per key, in column ``sum(on)`` (nulls ignored)."""
        return self.aggregate(Sum(on, f"sum({on})"))

    def min(self, on: str) -> Any:
        """Smallest ``on`` per key, in column ``min(on)``."""
        return self.aggregate(Min(on, f"min({on})"))

    def max(self, on: str) -> Any:
        """Largest ``on`` per key, in column ``max(on)``."""
        return self.aggregate(Max(on, f"max({on})"))

    def mean(self, on: str) -> Any:
        """Mean of ``on`` per key, in column ``mean(on)`` (float64)."""
        return self.aggregate(Mean(on, f"mean({on})"))

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
