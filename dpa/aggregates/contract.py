"""Reducers: the combine contract every aggregate follows, and :class:`WithCost`.

A reducer follows a combine contract like Apache Beam's ``CombineFn``:

* ``create() -> acc``            a new accumulator for one key,
* ``add(acc, value) -> acc``     fold one input value in,
* ``merge(a, b) -> acc``         combine two partial accumulators of the same key,
* ``finalize(acc) -> result``    turn the accumulator into the output value.

``merge`` is what makes load balancing exact: when the balancer moves a key, the key's
records are processed by several reducers and the *final state merge* combines their
partial accumulators. A reducer without ``merge`` can only run with policies that never
move or split keys (``max_rounds=0`` or ``policy="hash"``).

User-defined reducers subclass :class:`Reducer` and implement the four methods; they are
run per record by :class:`dpa.aggregates.state.DictState`. The built-ins (:class:`Count`,
:class:`Sum`, :class:`Min`, :class:`Max`, :class:`Mean`, :class:`Collect`, :class:`TopK`)
implement the same scalar contract *and* a vectorised columnar one used by
:class:`dpa.aggregates.state.ColumnarState`: a batch is pre-aggregated with Arrow's hash group-by,
partial states are merged with another group-by, and ``finalize_table`` produces the
output columns.

:class:`WithCost` wraps any reducer with a per-record processing cost (sleep or CPU
spin) so experiments can model compute-heavy reducers, as in the DPA paper. The wrapper
exists only at the API edge: :func:`dpa.aggregates.requested.requested` takes it apart into
the aggregate and its :class:`Cost`, and the job plan carries the two side by side.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from dpa._internal.arrays import from_numpy, to_numpy
from dpa.aggregates.dense import group_aggregate
from dpa.errors import ConfigError, SchemaError

#: Column holding a group id while a composite's member merges by it.
GROUP_ID_COL = "__dpa_gid"


def by_group_id(table: pa.Table, size: int) -> pa.Table:
    """``table`` (one row per group id in :data:`GROUP_ID_COL`, ids ``0..size-1``) in
    group-id order.

    Raises:
        SchemaError: the table does not hold one row per group (an aggregate's bug).
    """
    gid = to_numpy(table[GROUP_ID_COL])
    if len(gid) != size:
        raise SchemaError(f"internal: an aggregate returned {len(gid)} partial rows for {size} groups")
    if size == 0 or (gid[0] == 0 and bool(np.all(np.diff(gid) == 1))):
        return table  # in order already (a group-by by key value lists groups so): no copy
    order = np.empty(size, dtype=np.int64)
    order[gid] = np.arange(size, dtype=np.int64)
    return table.take(from_numpy(order))


class Reducer:
    """Base class of reducers (the combine contract).

    Attributes:
        name: Output column name in the result.
        column: Input column the reducer reads; ``None`` means the whole record (a dict
            for dict records, a tuple for tuple records, the value for scalar records).
        kind: ``"custom"`` for user-defined reducers; built-ins name themselves.
    """

    kind: str = "custom"

    def __init__(self, column: str | None = None, name: str = "result") -> None:
        self.column = column
        self.name = name

    # -- scalar combine contract ------------------------------------------------------
    def create(self) -> Any:
        """Returns a new, empty accumulator."""
        raise NotImplementedError(f"{type(self).__name__} must implement create()")

    def add(self, acc: Any, value: Any) -> Any:
        """Folds one value into ``acc`` and returns the accumulator."""
        raise NotImplementedError(f"{type(self).__name__} must implement add()")

    def merge(self, a: Any, b: Any) -> Any:
        """Combines two accumulators of the same key (needed for load balancing)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement merge()")

    def finalize(self, acc: Any) -> Any:
        """Turns an accumulator into the output value (identity by default)."""
        return acc

    def alias(self, name: str) -> Reducer:
        """A copy of this reducer whose output column is ``name`` (e.g. in a list of aggregates)."""
        if not isinstance(name, str) or not name:
            raise ConfigError(f"alias needs a non-empty name, got {name!r}")
        out = copy.copy(self)
        out.name, out._aliased = name, True
        return out

    def spark_types(self, input_schema: pa.Schema | None = None) -> Reducer:
        """This reducer with the result types Spark gives its own aggregate, where they
        differ from dpa's (``Mean`` of a decimal: Spark's decimal ``avg``); the reducer
        itself where they do not. The Spark bridge runs what this returns.

        Args:
            input_schema: The input columns as Arrow, where known.
        """
        return self

    def add_batch(self, acc: Any, values: list[Any]) -> Any:
        """Folds many values of one key into ``acc``; override for speed."""
        for value in values:
            acc = self.add(acc, value)
        return acc

    # -- introspection used by the runtime --------------------------------------------
    @property
    def can_merge(self) -> bool:
        """Whether this reducer implements ``merge`` (so keys may move or split)."""
        return type(self).merge is not Reducer.merge

    @property
    def columnar(self) -> bool:
        """Whether the vectorised columnar path is available."""
        return False

    def input_columns(self) -> list[str] | None:
        """Columns the reducer reads, or ``None`` for the whole record."""
        return None if self.column is None else [self.column]

    def output_field(self, input_schema: pa.Schema | None) -> pa.Field | None:
        """The Arrow field of the output column, given the input's Arrow schema.

        Bridges (e.g. ``spark_bridge``) use it to type a result before the job runs.
        A user-defined reducer returns ``None`` (the default): its output type is known
        only from the finalized values, and is then taken from the result's schema.

        Args:
            input_schema: Schema of the input columns (at least :meth:`input_columns`).

        Returns:
            The output field (named :attr:`name`), or ``None`` if it is not known up front.
        """
        return None

    def validate(self, schema: pa.Schema | None) -> None:
        """Checks the reducer fits the input schema; raises :class:`SchemaError` if not."""
        if schema is not None and self.column is not None and self.column not in schema.names:
            raise SchemaError(
                f"{self!r} reads column {self.column!r}, which the input does not have; "
                f"available columns: {', '.join(schema.names)}"
            )

    def __repr__(self) -> str:
        col = "" if self.column is None else repr(self.column)
        return f"{type(self).__name__}({col})"


class ColumnarReducer(Reducer):
    """A reducer with a vectorised Arrow implementation (the built-ins).

    Subclasses define ``state_aggregations`` (how a raw batch becomes partial states),
    ``merge_aggregations`` (how partial states of the same key combine) and
    ``finalize_table``. Partial-state tables have the group columns (key columns plus
    :data:`HASH_COL`) followed by the state columns.
    """

    #: Whether partial states may round when an integer state column meets a floating one
    #: (:func:`dpa.input.records.unify`): true for sums, whose float result is rounded anyway;
    #: false where a state holds input values (min, max, lists), which must stay exact.
    float_rounding: bool = False

    #: [(input column or None for count_all, arrow hash function, state column name)]
    def state_aggregations(self) -> list[tuple[str | None, str, str]]:
        raise NotImplementedError

    #: [(state column, arrow hash function)] to merge partial states.
    def merge_aggregations(self) -> list[tuple[str, str]]:
        return [(state, fn) for _, fn, state in self.state_aggregations()]

    @property
    def columnar(self) -> bool:
        return True

    def prepare(self, table: pa.Table) -> pa.Table:
        """Hook to cast input columns before aggregation (identity by default)."""
        return table

    def state_columns(self) -> list[str]:
        """Names of the state columns of a partial-state table."""
        return [state for _, _, state in self.state_aggregations()]

    def partial_from_batch(self, table: pa.Table, group_cols: list[str], weight_col: str | None = None) -> pa.Table:
        """Pre-aggregates a raw batch into one partial-state row per key.

        With ``weight_col``, also adds that column: the number of records per key.
        """
        table = self.prepare(table)
        states = self.state_aggregations()
        aggs = [([] if col is None else col, fn) for col, fn, _ in states]
        names = list(group_cols) + self.state_columns()
        # A state that is the record count already (Count's) doubles as the weight column.
        same = next((i for i, (col, fn, _) in enumerate(states) if col is None and fn == "count_all"), None)
        if weight_col is not None and same is None:
            aggs.append(([], "count_all"))
            names.append(weight_col)
        out = group_aggregate(table, group_cols, aggs).rename_columns(names)
        if weight_col is not None and same is not None:
            out = out.append_column(weight_col, out.column(len(group_cols) + same))
        return out

    def merge_partials(self, table: pa.Table, group_cols: list[str]) -> pa.Table:
        """Combines partial-state rows that share a key."""
        aggs = self.merge_aggregations()
        out = group_aggregate(table, group_cols, list(aggs))
        return out.rename_columns(list(group_cols) + [state for state, _ in aggs])

    def merge_groups(self, table: pa.Table, gid: np.ndarray, size: int) -> pa.Table:
        """Combines partial-state rows by a group id the caller computed (a composite's).

        Args:
            table: This reducer's state columns.
            gid: Group id per row, in ``[0, size)``.
            size: Number of groups.

        Returns:
            The merged state columns, row ``g`` for group ``g``.
        """
        merged = self.merge_partials(table.append_column(GROUP_ID_COL, from_numpy(gid)), [GROUP_ID_COL])
        return by_group_id(merged, size).select(self.state_columns())

    def finalize_table(self, table: pa.Table, key_cols: list[str]) -> pa.Table:
        """Turns partial states into the output columns (key columns first)."""
        (state,) = [s for _, _, s in self.state_aggregations()]
        return pa.table([table[c] for c in key_cols] + [table[state]], names=list(key_cols) + [self.name])

    def validate(self, schema: pa.Schema | None) -> None:
        super().validate(schema)
        if schema is not None and self.column is not None:
            self.check_type(schema.field(self.column).type)

    def check_type(self, dtype: pa.DataType) -> None:
        """Raises :class:`SchemaError` if the column type cannot be aggregated."""

    def output_field(self, input_schema: pa.Schema | None) -> pa.Field | None:
        if self.column is None:
            return pa.field(self.name, self.output_type(None), nullable=True)
        if input_schema is None or self.column not in input_schema.names:
            return None
        dtype = input_schema.field(self.column).type
        self.check_type(dtype)
        return pa.field(self.name, self.output_type(dtype), nullable=True)

    def output_type(self, input_type: pa.DataType | None) -> pa.DataType:
        """Arrow type of the output for an input column of ``input_type``.

        The default is the input's own type (min, max); aggregations that change the
        type (count, sum, mean, lists) override it.
        """
        if input_type is None:
            raise SchemaError(f"{self!r} needs an input column to have an output type")
        return input_type



#: Ways a reducer pays its per-record cost (:class:`Cost`).
COST_MODES = ("sleep", "spin")


@dataclass(frozen=True)
class Cost:
    """What a reducer pays for every record it processes (forwarded records are free).

    Attributes:
        seconds_per_record: Seconds per processed record (>= 0; 0 = no cost).
        mode: ``"sleep"`` waits without using a CPU, ``"spin"`` busy-waits on it.
    """

    seconds_per_record: float = 0.0
    mode: str = "sleep"

    def __post_init__(self) -> None:
        if not isinstance(self.seconds_per_record, (int, float)) or self.seconds_per_record < 0:
            raise ConfigError(f"a cost needs seconds_per_record >= 0, got {self.seconds_per_record!r}")
        if self.mode not in COST_MODES:
            raise ConfigError(f"a cost's mode must be 'sleep' or 'spin', got {self.mode!r}")


class WithCost(Reducer):
    """Wraps a reducer with a fixed processing cost per record.

    The cost is paid by the reducer actor for every record it *processes* (forwarded
    records are free), so queues build up as with the compute-heavy reducers of the DPA
    paper. ``mode="sleep"`` waits without using a CPU (so many reducers fit on a few
    cores), and a timer's lateness is taken off the next wait, so a reducer's waits add up
    to the cost of its records (:mod:`dpa.runtime.ray.pacing`); ``mode="spin"`` busy-waits
    on the CPU. The in-process runtime charges the cost in virtual time instead.

    The engine never runs the wrapper: a job's plan holds ``inner`` and the :class:`Cost`
    side by side (:func:`dpa.aggregates.requested.requested` takes the wrapper apart).

    Args:
        inner: The reducer doing the actual aggregation.
        seconds_per_record: Cost per processed record, in seconds (>= 0).
        mode: ``"sleep"`` or ``"spin"``.
    """

    def __init__(self, inner: Reducer, seconds_per_record: float, mode: str = "sleep") -> None:
        if not isinstance(inner, Reducer):
            raise ConfigError(f"WithCost wraps a dpa.Reducer, got {type(inner).__name__}")
        if not isinstance(seconds_per_record, (int, float)) or seconds_per_record < 0:
            raise ConfigError(f"WithCost needs seconds_per_record >= 0, got {seconds_per_record!r}")
        if mode not in COST_MODES:
            raise ConfigError(f"WithCost mode must be 'sleep' or 'spin', got {mode!r}")
        super().__init__(inner.column, inner.name)
        self.inner = inner
        self.seconds_per_record = float(seconds_per_record)
        self.mode = mode
        self.kind = inner.kind

    def create(self) -> Any:
        return self.inner.create()

    def add(self, acc: Any, value: Any) -> Any:
        return self.inner.add(acc, value)

    def merge(self, a: Any, b: Any) -> Any:
        return self.inner.merge(a, b)

    def finalize(self, acc: Any) -> Any:
        return self.inner.finalize(acc)

    @property
    def can_merge(self) -> bool:
        return self.inner.can_merge

    def spark_types(self, input_schema: pa.Schema | None = None) -> Reducer:
        inner = self.inner.spark_types(input_schema)
        if inner is self.inner:
            return self
        out = copy.copy(self)
        out.inner = inner
        return out

    def input_columns(self) -> list[str] | None:
        return self.inner.input_columns()

    def validate(self, schema: pa.Schema | None) -> None:
        self.inner.validate(schema)

    def output_field(self, input_schema: pa.Schema | None) -> pa.Field | None:
        return self.inner.output_field(input_schema)

    def __repr__(self) -> str:
        return f"WithCost({self.inner!r}, {self.seconds_per_record}, mode={self.mode!r})"


def what_it_is(value: Any) -> str:
    """How an error names something given where a reducer was expected: ``got str``, or
    for a reducer class itself ``got the class dpa.Sum; make one: dpa.Sum('x')``."""
    if isinstance(value, type) and issubclass(value, Reducer):
        example = "dpa.Count()" if value.__name__ == "Count" else f"dpa.{value.__name__}('x')"
        return f"got the class {value.__name__}; make one: {example}"
    return f"got {type(value).__name__}"
