"""One bridge job, checked and described before any Spark job or Ray work starts.

:func:`prepare` checks the key, the reducer (a list of them becomes one composite), the
columns and their types, and the ``precombine`` value, and returns a :class:`Job`: the
columns the job reads (:meth:`Job.narrowed`), whether Spark's tasks combine first on a
given path (:meth:`Job.use_precombine`), the reducer as the bridge runs it
(:meth:`Job.spark_reducer`) and the result's Spark schema (:meth:`Job.output_schema`).
Both paths start from a Job: the RayDP path (:mod:`spark_bridge.raydp_path`) and the
staged path (:mod:`spark_bridge.staged`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dpa.config import JobConfig
from dpa.errors import ConfigError

from .schema import (
    is_group_apply,
    output_schema,
    result_spark_schema,
    spark_typed,
    validate_columns,
)

if TYPE_CHECKING:  # pragma: no cover - imported for type hints only
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

logger = logging.getLogger(__name__)

__all__ = ["PRECOMBINE_MODES", "Job", "can_precombine", "key_columns", "prepare"]

#: Values of ``run_with_result(precombine=...)`` besides ``None`` / ``True`` / ``False``.
PRECOMBINE_MODES = ("sql", "arrow")


def key_columns(key: str | Sequence[str]) -> list[str]:
    """``key`` as a list of column names.

    Raises:
        ConfigError: ``key`` is not a name or a list of distinct, non-empty names.
    """
    if isinstance(key, str):
        columns = [key]
    elif isinstance(key, Sequence) and not isinstance(key, (bytes, bytearray)):
        columns = list(key)
    else:
        raise ConfigError(f"key must be a column name or a list of column names, got {key!r}")
    if not columns:
        raise ConfigError("key must name at least one column")
    bad = [c for c in columns if not isinstance(c, str) or not c]
    if bad:
        raise ConfigError(f"key column names must be non-empty strings, got {bad!r}")
    duplicates = sorted({c for c in columns if columns.count(c) > 1})
    if duplicates:
        raise ConfigError(f"key lists column(s) {duplicates} more than once")
    return columns


def can_precombine(reducer: Any, map_fn: Any, config: Any) -> bool:
    """Whether Spark's tasks may do dpa's map-side combine: wherever dpa itself would
    combine on the map side (a built-in reducer without cost, no ``map_fn``,
    ``map_side_combine``, a policy that accepts combined rows)."""
    from dpa.aggregates.contract import ColumnarReducer
    from dpa.aggregates.requested import requested
    from dpa.routing.registry import make_policy

    asked = requested(reducer)
    return (map_fn is None and isinstance(asked.aggregate, ColumnarReducer) and not asked.cost.seconds_per_record
            and bool(config.map_side_combine) and make_policy(config).combinable)


@dataclass(frozen=True)
class Job:
    """A checked bridge job (made by :func:`prepare`).

    Attributes:
        key_columns: Grouping columns.
        reducer: The ``dpa.Reducer`` (several aggregates combined into one).
        map_fn: The per-record/batch function dpa applies first, or ``None``.
        config: The ``dpa.JobConfig``.
        precombine: The ``precombine`` argument as given (checked).
        input_schema: The input DataFrame's Spark schema.
        combinable: Whether Spark's tasks may combine first (:func:`can_precombine`).
    """

    key_columns: list[str]
    reducer: Any
    map_fn: Callable[..., Any] | None
    config: Any
    precombine: bool | str | None
    input_schema: StructType
    combinable: bool

    def needed_columns(self) -> list[str]:
        """The key columns and the reducer's input columns (every column when the reducer
        reads them all)."""
        wanted = self.reducer.input_columns()  # (WithCost passes its aggregate's on)
        keys = self.key_columns
        return [f.name for f in self.input_schema.fields] if wanted is None else [*keys, *(c for c in wanted if c not in keys)]

    def narrowed(self, df: DataFrame) -> DataFrame:
        """``df`` with only the columns the job reads (all of them when a ``map_fn`` runs)."""
        return df if self.map_fn is not None else df.select(*self.needed_columns())

    def use_precombine(self, path: str) -> bool:
        """Whether Spark's tasks combine first on ``path`` (``"raydp"`` or ``"staged"``).

        Raises:
            ConfigError: ``precombine`` requires a combine that cannot apply to this job, or
                ``"sql"`` on the staged path.
        """
        if path == "staged" and self.precombine == "sql":
            raise ConfigError("precombine='sql' runs Spark's partial aggregation through RayDP; the staged "
                              "path combines in Arrow: use precombine=None, True or 'arrow'")
        if self.precombine is None:
            return self.combinable
        if self.precombine and not self.combinable:
            raise ConfigError(
                f"precombine={self.precombine!r} needs a built-in reducer without cost, no map_fn, "
                "map_side_combine=True and a policy that accepts map-side combined rows (e.g. hybrid, doubling, halving, hash)"
            )
        return bool(self.precombine)

    def spark_reducer(self) -> Any:
        """The reducer the bridge runs: with Spark's result types (:func:`spark_bridge.schema.spark_typed`)."""
        return spark_typed(self.reducer, self.input_schema)

    def output_schema(self, arrow_schema: Any) -> StructType:
        """The result's Spark schema, given the dpa result's Arrow schema."""
        return output_schema(self.input_schema, self.key_columns, self.reducer, self.map_fn, arrow_schema)


def prepare(df: DataFrame, key: str | Sequence[str], reducer: Any, map_fn: Callable[..., Any] | None,
            config: Any, precombine: bool | str | None) -> Job:
    """Checks a bridge job (see :func:`spark_bridge.run_with_result` for the arguments).

    With a ``map_fn`` the key and input columns may be ones it creates: ``dpa.run`` checks
    them on a dry run over the first rows, still before any actor starts.

    Raises:
        dpa.errors.SchemaError: A key or input column is missing, or has a type the reducer
            cannot read.
        dpa.errors.ConfigError: Bad ``key``, reducer or ``precombine``.
    """
    keys = key_columns(key)
    if isinstance(reducer, (list, tuple)):  # several aggregates in one pass
        from dpa.aggregates.composite import combine

        reducer = combine(list(reducer))
    input_schema = df.schema
    if is_group_apply(reducer):
        validate_columns([f.name for f in input_schema.fields], keys)
    elif map_fn is None:
        result_spark_schema(input_schema, keys, reducer)  # column and type checks, fail fast
    if not (precombine is None or isinstance(precombine, bool) or precombine in PRECOMBINE_MODES):
        raise ConfigError(f"precombine must be None, True, False, 'sql' or 'arrow', got {precombine!r}")
    config = JobConfig() if config is None else config
    return Job(keys, reducer, map_fn, config, precombine, input_schema, can_precombine(reducer, map_fn, config))
