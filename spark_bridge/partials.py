"""dpa's map-side combine as Spark SQL aggregates (no Python UDF).

:func:`native_partials` writes a built-in reducer's partial state as Spark aggregate
expressions: one row per key and input partition, as a dpa mapper's combine of that
partition would give, computed by Spark's own (code-generated) hash aggregation. Where
the state columns are bare aggregates whose partial buffers hold their values (``Count``,
``Sum`` of integers, floats and decimals of at most 18 digits, ``Min``/``Max``, ``Mean``), only
Spark's partial aggregation runs, with no shuffle and no final aggregation
(:mod:`spark_bridge.partial_plan`); otherwise, or when that plan cannot be taken, the
aggregates are grouped by ``(spark_partition_id(), key columns...)``, which keeps the
partitions apart at the price of Spark's shuffle and final aggregation. The rows then move to Ray as Arrow
(:func:`spark_bridge.convert.spark_to_arrow_refs`), where :class:`PartialFinish`, run by
the fetch task of each partition, gives them exactly the columns and Arrow types dpa's
reducers merge (``JobConfig.input_combined``): the key columns, the reducer's state
columns (:meth:`dpa.aggregates.contract.ColumnarReducer.state_columns`) and
:data:`dpa.input.records.WEIGHT_COL`, the number of input records per row, so that queue
lengths and the load balancer still count records.

Per reducer (``c`` is the reducer's column):

========== ========================================================================
``Count``  ``count(1)``
``Sum``    byte/short/int: ``sum(c)`` (a long; exact below 2**32 rows per group);
           long: ``sum(c >> 32)`` and ``sum(c & 0xFFFFFFFF)``, recombined exactly in
           :class:`PartialFinish` (an int64, or dpa's exact "pending" decimal when the
           partial sum leaves int64, so that only the key's final sum decides, as in
           dpa's own combine, and an overflow raises
           :class:`~dpa.errors.ArithmeticOverflowError` instead of wrapping as Spark's
           non-ANSI ``sum`` would); float/double: ``sum(c)`` (a double);
           ``decimal(p, s)``: ``sum(c)``, a ``decimal(min(38, p + 10), s)`` as dpa widens
           it; for ``p > 28`` also ``count(c)``: a null sum of a part with values is
           Spark's overflow (outside ANSI mode), raised by :class:`PartialFinish` as
           :class:`~dpa.errors.ArithmeticOverflowError`, as dpa's own combine raises
           where a key's sum in one block leaves 38 digits
``Min``    ``min(c)`` (Spark orders NaN as dpa does: NaN equals NaN and is larger than
           every other value)
``Max``    ``max(c)``
``Mean``   ``count(c)`` and the sum as ``Sum`` computes it (exact for integers, of
           ``decimal(p, s)`` a ``decimal(min(38, p + 10), s)``, dpa's
           :func:`~dpa.aggregates.exact_means.mean_sum_type`, checked as ``Sum``'s),
           a double sum of floats
``Collect`` ``transform(collect_list(struct(c)), s -> s.c)`` (nulls kept, as dpa keeps
           them; ``collect_list`` alone drops them)
``TopK``   ``slice(sort_array(collect_list(c), false), 1, k)`` (nulls ignored, largest
           first; float NaNs first, where Spark and dpa rank them)
``CountIf`` ``sum(cast(c as long))`` of a boolean column
``Any``    ``max(c)`` of a boolean column (``bool_or``)
``All``    ``min(c)`` of a boolean column (``bool_and``)
``Var``,   ``count(x)``, ``avg(x)``, ``var_pop(x)`` with ``x = cast(c as double)``: the
``Std``    part's count, mean and population variance that dpa merges (Chan et al.)
========== ========================================================================

Everything else returns ``None`` and the bridge keeps its ``mapInArrow`` precombine
(:func:`precombined`): subclasses of the built-ins (they may change
the aggregation), and column types these expressions do not cover.
"""

from __future__ import annotations

import decimal
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpa.aggregates.exact_means import mean_sum_type
from dpa.aggregates.int_sums import pending_type
from dpa.errors import ArithmeticOverflowError

from .cluster import executor_task_slots
from .partial_plan import MAX_BLOCKS_PER_SLOT, partial_aggregation

if TYPE_CHECKING:  # pragma: no cover - imported for type hints only
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType

__all__ = ["PartialFinish", "native_partials", "precombined"]

#: Internal columns of the Spark partial aggregation (dropped by :class:`PartialFinish`).
PARTITION_COL = "__dpa_pid"
SUM_HIGH_COL = "__dpa_sum_hi"
SUM_LOW_COL = "__dpa_sum_lo"
#: Prefix of the ``count(c)`` beside a wide decimal sum ``state`` (``OVERFLOW_PREFIX + state``).
OVERFLOW_PREFIX = "__dpa_n_"
#: Prefixes of the halves of a narrow decimal sum ``state``'s unscaled longs.
DECIMAL_HIGH_PREFIX = "__dpa_dhi_"
DECIMAL_LOW_PREFIX = "__dpa_dlo_"

#: Rows per group below which the halves of a long sum cannot wrap in Spark: the low
#: halves are < 2**32 each, so 2**31 of them sum to < 2**63.
_MAX_SPLIT_ROWS = 2**31
#: Decimal sums of at most this precision fit Spark's ``decimal(p + 10, s)`` sum type.
_NARROW_DECIMAL = 28
#: Decimals of at most this precision are a long in Spark (``Decimal.MAX_LONG_DIGITS``).
_COMPACT_DECIMAL = 18
_LOW_MASK = 0xFFFFFFFF


@dataclass(frozen=True)
class PartialFinish:
    """Turns one Arrow table of Spark's partial aggregates into dpa partial states.

    Run by the Ray task that fetches each Spark partition
    (:func:`spark_bridge.convert.spark_to_arrow_refs`), so the driver never sees the rows.

    Attributes:
        schema: The partial-state schema dpa receives: key columns, state columns,
            :data:`dpa.input.records.WEIGHT_COL`.
        split_sum: Name of a state column Spark computed as two halves
            (:data:`SUM_HIGH_COL`, :data:`SUM_LOW_COL`) of a long sum, or ``None``.
        input_column: The reducer's input column (named in overflow errors).
        weight_col: Name of the record-count column.
        split_copies: Other state columns that are the same long sum (a ``Sum`` and a
            ``Mean`` of one column): Spark computes the halves once.
        overflow_checks: ``(state column, its count column, input column)`` of each wide
            decimal sum (``p > 28``): a null sum whose count is positive overflowed in Spark.
        decimal_halves: ``(state column, high column, low column, input column)`` of each
            decimal sum of at most 18 digits that Spark computed as the halves of its
            unscaled longs; the state is ``high * 2**32 + low`` at the state type's scale.
        weight_from: A state column that is the record count too (``Count``'s, or
            ``Mean``'s count of a non-nullable column), copied into :attr:`weight_col`;
            ``None`` when Spark computed the weight itself.
    """

    schema: pa.Schema
    split_sum: str | None = None
    input_column: str | None = None
    weight_col: str = "__dpa_w"
    weight_from: str | None = None
    split_copies: tuple[str, ...] = ()
    overflow_checks: tuple[tuple[str, str, str | None], ...] = ()
    decimal_halves: tuple[tuple[str, str, str, str | None], ...] = ()

    def __call__(self, table: pa.Table) -> pa.Table:
        """Returns ``table`` with exactly :attr:`schema`'s columns and types.

        Raises:
            ArithmeticOverflowError: A partition held 2**31 rows or more of one key whose
                long column is summed (Spark could have wrapped a half of the sum), or a
                wide decimal sum of one key in one partition left 38 digits.
        """
        for state, count, column in self.overflow_checks:
            overflowed = pc.and_(table[state].is_null(), pc.greater(table[count], 0))
            if pc.any(overflowed).as_py():
                raise ArithmeticOverflowError(
                    f"the sum of column {column!r} for one key in one Spark partition has more than 38 digits, "
                    f"past {table.schema.field(state).type}; dpa does not wrap around (like Spark in ANSI mode). "
                    "precombine='arrow' sums each partition in 256 bits (only the key's total must fit); "
                    "or cast the column to a smaller scale or to double",
                    column=column,
                )
        if self.weight_from is not None:
            table = table.append_column(self.weight_col, table[self.weight_from])
        if self.split_sum is not None:
            joined = self._joined_sum(table)
            for name in (self.split_sum, *self.split_copies):
                table = table.append_column(name, joined)
        for state, high, low, column in self.decimal_halves:
            table = table.append_column(state, self._joined_decimal(table, high, low, column, self.schema.field(state).type))
        columns = []
        for field in self.schema:
            column = table[field.name]
            if self.split_sum is not None and field.name in (self.split_sum, *self.split_copies):
                columns.append(column)  # int64 or pending decimal: kept as it is
            else:
                columns.append(column.cast(field.type))
        return pa.Table.from_arrays(columns, names=self.schema.names)

    def _halves(self, table: pa.Table, high_name: str, low_name: str, column: str | None) -> tuple[Any, Any, Any, Any]:
        """``(valid, high, low, fits)`` of a sum Spark computed as halves: numpy arrays, the
        low halves' carry moved into the high ones (``low < 2**32``), ``fits`` where the
        sum fits int64."""
        weights = table[self.weight_col].to_numpy()
        if len(weights) and int(weights.max()) >= _MAX_SPLIT_ROWS:
            raise ArithmeticOverflowError(
                f"Sum({column!r}): a Spark partition holds {int(weights.max())} rows of one key, "
                f"too many to sum exactly in Spark (at most {_MAX_SPLIT_ROWS - 1}); repartition the DataFrame "
                "or run with precombine=False",
                column=column,
            )
        high_col = table[high_name].combine_chunks()
        valid = high_col.is_valid().to_numpy(zero_copy_only=False)
        high = high_col.fill_null(0).to_numpy()
        low = table[low_name].combine_chunks().fill_null(0).to_numpy()
        high = high + (low >> 32)
        low = low & _LOW_MASK
        return valid, high, low, (high >= -(2**31)) & (high < 2**31)

    def _joined_decimal(self, table: pa.Table, high_name: str, low_name: str, column: str | None,
                        target: pa.DataType) -> pa.Array:
        """A narrow decimal sum from the halves of its unscaled longs, as ``target``.

        Raises:
            ArithmeticOverflowError: The sum does not fit ``target`` (``decimal(p + 10, s)``).
        """
        valid, high, low, fits = self._halves(table, high_name, low_name, column)
        wide = pa.decimal128(38, target.scale)
        if bool(fits.all()):  # the unscaled int64 as the low word of each 128-bit decimal
            unscaled = (high << 32) | low
            words = np.empty(2 * len(unscaled), dtype=np.int64)
            words[0::2], words[1::2] = unscaled, unscaled >> 63
            bitmap = None if bool(valid.all()) else pa.array(valid, pa.bool_()).buffers()[1]
            joined = pa.Array.from_buffers(wide, len(unscaled), [bitmap, pa.py_buffer(words.tobytes())])
        else:
            joined = pa.array([None if not ok else decimal.Decimal(int(h) * 2**32 + int(lo)).scaleb(-target.scale)
                               for ok, h, lo in zip(valid, high.tolist(), low.tolist())], wide)
        try:
            return joined.cast(target)
        except pa.ArrowInvalid as exc:
            raise ArithmeticOverflowError(f"Sum({column!r}): a partial sum in one Spark partition does not fit "
                                          f"{target}: {exc}", column=column) from exc

    def _joined_sum(self, table: pa.Table) -> pa.ChunkedArray | pa.Array:
        """``high * 2**32 + low`` per row: int64 where every sum fits, else dpa's pending decimal."""
        valid, high, low, fits = self._halves(table, SUM_HIGH_COL, SUM_LOW_COL, self.input_column)
        mask = ~valid
        if bool(fits.all()):
            return pa.array((high << 32) | low, pa.int64(), mask=mask)
        # Some partial sum left int64: keep every sum exact, as dpa's own combine does;
        # the key's final sum decides (dpa.aggregates.int_sums.finalize_int_sums).
        values = [None if not ok else decimal.Decimal(int(h) * 2**32 + int(lo))
                  for ok, h, lo in zip(valid, high.tolist(), low.tolist())]
        return pa.array(values, pending_type(pa.int64()))


def _col(name: str) -> Column:
    """A column by its exact name (dots, spaces and backticks taken literally)."""
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


#: One state column's Spark aggregate: ``(name, aggregate, buffer type)``. The buffer type
#: is set where the aggregate is a bare function whose partial buffer is one column of that
#: type holding the final value, so Spark's partial aggregation alone already gives dpa's
#: state (:mod:`spark_bridge.partial_plan`); ``None`` where it is not (a decimal ``sum``'s
#: buffer has an ``isEmpty`` flag, ``collect_list``'s is serialized).
State = tuple[str, "Column", "DataType | None"]


def _state_expressions(inner: Any, dtype: DataType | None) -> tuple[list[State], str | None] | None:
    """Spark aggregates of ``inner``'s state columns (see :data:`State`), and the split-sum
    column, or None."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from dpa.aggregates.builtins import Collect, Count, Max, Mean, Min, Sum, TopK

    kind = type(inner)
    if kind is Count:  # count(1), or count(c): its non-null values
        target = F.lit(1) if inner.column is None else _col(inner.column)
        return [("count", F.count(target), T.LongType())], None
    column = inner.column
    if column is None or dtype is None:
        return None
    c = _col(column)
    atomic = (T.NumericType, T.StringType, T.BinaryType, T.BooleanType, T.DateType, T.TimestampType,
              T.TimestampNTZType)
    if kind is Sum:
        if isinstance(dtype, (T.ByteType, T.ShortType, T.IntegerType)):
            return [("sum", F.sum(c), T.LongType())], None
        if isinstance(dtype, T.LongType):
            return [(SUM_HIGH_COL, F.sum(F.shiftright(c, 32)), T.LongType()),
                    (SUM_LOW_COL, F.sum(c.bitwiseAND(F.lit(_LOW_MASK))), T.LongType())], "sum"
        if isinstance(dtype, (T.FloatType, T.DoubleType)):
            return [("sum", F.sum(c.cast("double")), T.DoubleType())], None
        if isinstance(dtype, T.DecimalType):
            return _decimal_sum("sum", c, dtype), None
        return None
    if kind in (Min, Max):
        if not isinstance(dtype, atomic):
            return None
        # Spark orders NaN as dpa does (equal to itself, above every number).
        return [(kind.kind, (F.min if kind is Min else F.max)(c), dtype)], None
    if kind is Mean:  # exact sums of integers and decimals, as dpa's Mean keeps them
        count = ("mcount", F.count(c), T.LongType())
        if isinstance(dtype, (T.ByteType, T.ShortType, T.IntegerType)):
            return [("msum", F.sum(c), T.LongType()), count], None
        if isinstance(dtype, T.LongType):
            return [(SUM_HIGH_COL, F.sum(F.shiftright(c, 32)), T.LongType()),
                    (SUM_LOW_COL, F.sum(c.bitwiseAND(F.lit(_LOW_MASK))), T.LongType()), count], "msum"
        if isinstance(dtype, (T.FloatType, T.DoubleType)):
            return [("msum", F.sum(c.cast("double")), T.DoubleType()), count], None
        if isinstance(dtype, T.DecimalType):
            return [*_decimal_sum("msum", c, dtype), count], None
        return None
    if kind is Collect:
        if isinstance(dtype, (T.MapType,)):
            return None
        wrapped = F.collect_list(F.struct(c.alias("v")))  # a struct is never null: nulls survive
        return [("items", F.transform(wrapped, lambda s: s["v"]), None)], None
    if kind is TopK:
        if not isinstance(dtype, atomic):
            return None
        values = F.sort_array(F.collect_list(c), asc=False)  # (NaN first, as dpa ranks it)
        return [("items", F.slice(values, 1, inner.k), None)], None
    return _more_state_expressions(inner, c, dtype)


def _unscaled(c: Column) -> Column | None:
    """Spark's ``UnscaledValue(c)`` (the long behind a decimal of at most 18 digits; the
    expression Spark's own optimizer sums narrow decimals with), or None where the JVM
    call fails (an internal API)."""
    from pyspark import SparkContext
    from pyspark.sql import Column

    try:
        jvm = SparkContext._active_spark_context._jvm
        return Column(jvm.org.apache.spark.sql.Column(
            jvm.org.apache.spark.sql.catalyst.expressions.UnscaledValue(c._jc.expr())))
    except Exception:  # noqa: BLE001 - any failure: sum the decimals as Spark does
        return None


def _decimal_sum(state: str, c: Column, dtype: DataType) -> list[State]:
    """The Spark aggregates of a decimal sum ``state``: for at most 18 digits the sums of the
    high and low 32-bit halves of the unscaled longs (:data:`DECIMAL_HIGH_PREFIX`; long
    adds instead of Spark's ``BigDecimal`` ones), joined in :class:`PartialFinish`; else
    Spark's decimal ``sum`` (:func:`_overflow_check`)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    unscaled = _unscaled(c) if dtype.precision <= _COMPACT_DECIMAL else None
    if unscaled is None:
        return [(state, F.sum(c), None), *_overflow_check(state, c, dtype)]
    return [(DECIMAL_HIGH_PREFIX + state, F.sum(F.shiftright(unscaled, 32)), T.LongType()),
            (DECIMAL_LOW_PREFIX + state, F.sum(unscaled.bitwiseAND(F.lit(_LOW_MASK))), T.LongType())]


def _decimal_halves(states: list[State], column: str | None) -> tuple[tuple[str, str, str, str | None], ...]:
    """:attr:`PartialFinish.decimal_halves` of ``states`` (names as in the Spark frame)."""
    return tuple((name.replace(DECIMAL_HIGH_PREFIX, "", 1), name, name.replace(DECIMAL_HIGH_PREFIX, DECIMAL_LOW_PREFIX, 1),
                  column) for name, _, _ in states if DECIMAL_HIGH_PREFIX in name)


def _overflow_check(state: str, c: Column, dtype: DataType) -> list[State]:
    """The ``count(c)`` that tells an overflowed sum of a decimal wider than 28 digits (whose
    Spark sum, a ``decimal(38)``, is null on overflow outside ANSI mode) from an empty one."""
    from pyspark.sql import functions as F

    return [(OVERFLOW_PREFIX + state, F.count(c), None)] if dtype.precision > _NARROW_DECIMAL else []


def _overflow_checks(states: list[State], column: str | None) -> tuple[tuple[str, str, str | None], ...]:
    """:attr:`PartialFinish.overflow_checks` of ``states`` (names as in the Spark frame)."""
    return tuple((name.replace(OVERFLOW_PREFIX, "", 1), name, column) for name, _, _ in states
                 if OVERFLOW_PREFIX in name)


def _more_state_expressions(inner: Any, c: Column, dtype: DataType) -> tuple[list[State], None] | None:
    """:func:`_state_expressions` of the conditional aggregates and the moments."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from dpa.aggregates.conditional import All, Any, CountIf
    from dpa.aggregates.moments import Std, Var

    kind = type(inner)
    if kind in (CountIf, Any, All):
        if not isinstance(dtype, (T.BooleanType, T.NullType)):
            return None
        b = c.cast("boolean")
        if kind is CountIf:
            return [("trues", F.sum(b.cast("long")), T.LongType())], None
        # max / min of booleans are bool_or / bool_and, with a one-column buffer
        return [(kind.kind, (F.max if kind is Any else F.min)(b), T.BooleanType())], None
    if kind in (Var, Std):
        if not isinstance(dtype, T.NumericType):
            return None
        x = c.cast("double")  # dpa's moments read the column as float64
        # the part's count, mean and population variance, as Arrow's hash aggregates give them
        return [("n", F.count(x), T.LongType()), ("mean", F.avg(x), None), ("var", F.var_pop(x), None)], None
    return None


def _map_side_frame(df: DataFrame, key_columns: list[str], states: list[State], weight_from: str | None,
                    fields: dict[str, Any]) -> DataFrame | None:
    """Spark's partial aggregation alone (:func:`spark_bridge.partial_plan.partial_aggregation`)
    of ``states`` and the record count, or None where a state is not a bare aggregate, a
    name collides with a key column, or the plan cannot be taken."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from dpa.input.records import WEIGHT_COL

    if any(t is None for _, _, t in states) or {name for name, _, _ in states} & set(key_columns):
        return None
    weight = [] if weight_from is not None else [(WEIGHT_COL, F.count(F.lit(1)), T.LongType())]
    return partial_aggregation(df, [_col(k) for k in key_columns], [*states, *weight], [fields[k] for k in key_columns],
                               max_blocks=executor_task_slots(df.sparkSession) * MAX_BLOCKS_PER_SLOT)


def _state_arrow_types(inner: Any, input_type: pa.DataType | None) -> dict[str, pa.DataType]:
    """Arrow types of ``inner``'s state columns as dpa's reducers merge them."""
    from dpa.aggregates.builtins import Collect, Count, Max, Mean, Min, Sum, TopK, sum_type

    kind = type(inner)
    if kind is Count:
        return {"count": pa.int64()}
    if kind is Sum:
        return {"sum": sum_type(input_type)}
    if kind in (Min, Max):
        return {kind.kind: input_type}
    if kind is Mean:
        if pa.types.is_decimal(input_type):
            total = mean_sum_type(input_type)
        else:
            total = pa.int64() if pa.types.is_integer(input_type) else pa.float64()
        return {"msum": total, "mcount": pa.int64()}
    if kind in (Collect, TopK):
        return {"items": pa.list_(input_type)}
    if kind.kind in ("count_if", "any", "all"):
        return {"trues": pa.int64()} if kind.kind == "count_if" else {kind.kind: pa.bool_()}
    if kind.kind in ("var", "std"):
        return {"n": pa.int64(), "mean": pa.float64(), "var": pa.float64()}
    raise AssertionError(f"no state types for {kind.__name__}")  # _state_expressions returned None


def native_partials(
    df: DataFrame, key_columns: list[str], reducer: Any
) -> tuple[DataFrame, PartialFinish] | None:
    """``df``'s dpa partial states per Spark partition, as Spark SQL aggregates.

    Args:
        df: The input DataFrame.
        key_columns: Grouping columns.
        reducer: The job's reducer (a built-in, possibly inside ``WithCost``; the caller
            checks it may precombine at all).

    Returns:
        ``(frame, finish)``: ``frame`` has the key columns, Spark's state columns and
        :data:`dpa.input.records.WEIGHT_COL` (unless a state column is the record count too;
        one row per key and input partition); ``finish`` turns each of its partitions, as
        Arrow, into the partial states dpa expects. ``frame`` is Spark's partial
        aggregation alone where every state is a bare aggregate (:data:`State`) and the plan
        allows it (coalesced to one partition per executor task slot), else the
        ``spark_partition_id()`` grouping.
        ``None`` when the reducer or its column type has no native formulation here
        (see the module docstring); the caller then precombines with ``mapInArrow``.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_type

    from dpa.aggregates.builtins import Count, Mean
    from dpa.aggregates.requested import requested
    from dpa.input.records import WEIGHT_COL

    inner = requested(reducer).aggregate
    fields = {f.name: f for f in df.schema.fields}
    if getattr(inner, "members", None) is not None:
        return _composite_partials(df, key_columns, inner.members, fields)
    column = getattr(inner, "column", None)
    dtype = fields[column].dataType if column in fields else None
    built = _state_expressions(inner, dtype)
    if built is None:
        return None
    states, split_sum = built
    try:
        key_types = [to_arrow_type(fields[k].dataType) for k in key_columns]
        input_type = None if dtype is None else to_arrow_type(dtype)
    except TypeError:
        return None
    state_types = _state_arrow_types(inner, input_type)

    schema = pa.schema(
        [pa.field(k, t) for k, t in zip(key_columns, key_types)]
        + [pa.field(name, t) for name, t in state_types.items()]
        + [pa.field(WEIGHT_COL, pa.int64())]
    )
    finish = PartialFinish(schema, split_sum, column, WEIGHT_COL, overflow_checks=_overflow_checks(states, column),
                           decimal_halves=_decimal_halves(states, column))
    # A state column that counts every row is the weight too; Spark would compute the two
    # as one buffer anyway (it turns count(c) of a non-nullable column into count(1)).
    weight_from = "count" if isinstance(inner, Count) and inner.column is None else (
        "mcount" if isinstance(inner, Mean) and not fields[column].nullable else None)
    frame = _map_side_frame(df, key_columns, states, weight_from, fields)
    if frame is not None:
        return frame, replace(finish, weight_from=weight_from)
    grouping = [F.spark_partition_id().alias(PARTITION_COL), *(_col(k) for k in key_columns)]
    aggregates = [aggregate.alias(name) for name, aggregate, _ in states]
    frame = df.groupBy(*grouping).agg(*aggregates, F.count(F.lit(1)).alias(WEIGHT_COL)).drop(PARTITION_COL)
    return frame, finish


def _composite_partials(df: DataFrame, key_columns: list[str], members: list[Any],
                        fields: dict[str, Any]) -> tuple[DataFrame, PartialFinish] | None:
    """:func:`native_partials` of several aggregates (:mod:`dpa.aggregates.composite`): each
    member's Spark aggregates under its prefixed state names, in one Spark aggregation; None
    when a member has no formulation here or members sum two long columns as halves."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_type

    from dpa.aggregates.builtins import Count
    from dpa.aggregates.composite import _prefix
    from dpa.input.records import WEIGHT_COL

    states: list[State] = []
    state_types: dict[str, pa.DataType] = {}
    split_sum = split_column = weight_from = None
    copies: list[str] = []
    checks: list[tuple[str, str, str | None]] = []
    halves: list[tuple[str, str, str, str | None]] = []
    try:
        key_types = [to_arrow_type(fields[k].dataType) for k in key_columns]
    except TypeError:
        return None
    for i, m in enumerate(members):
        column = getattr(m, "column", None)
        dtype = fields[column].dataType if column in fields else None
        built = _state_expressions(m, dtype)
        if built is None:
            return None
        member_states, member_split = built
        try:
            input_type = None if dtype is None else to_arrow_type(dtype)
        except TypeError:
            return None
        if member_split is not None:
            if split_sum is not None and column != split_column:
                return None
            if split_sum is not None:  # the same long column's sum again: its halves are there
                copies.append(_prefix(i, member_split))
                member_states = [st for st in member_states if st[0] not in (SUM_HIGH_COL, SUM_LOW_COL)]
            else:
                split_sum, split_column = _prefix(i, member_split), column
        for name, aggregate, buffer in member_states:
            states.append((name if name in (SUM_HIGH_COL, SUM_LOW_COL) else _prefix(i, name), aggregate, buffer))
        checks += [(_prefix(i, state), _prefix(i, count), column) for state, count, column
                   in _overflow_checks(member_states, column)]
        halves += [(_prefix(i, state), _prefix(i, high), _prefix(i, low), column) for state, high, low, column
                   in _decimal_halves(member_states, column)]
        state_types.update({_prefix(i, n): t for n, t in _state_arrow_types(m, input_type).items()})
        if type(m) is Count and m.column is None and weight_from is None:
            weight_from = _prefix(i, "count")
    schema = pa.schema([pa.field(k, t) for k, t in zip(key_columns, key_types)]
                       + [pa.field(n, t) for n, t in state_types.items()] + [pa.field(WEIGHT_COL, pa.int64())])
    finish = PartialFinish(schema, split_sum, split_column, WEIGHT_COL, split_copies=tuple(copies),
                           overflow_checks=tuple(checks), decimal_halves=tuple(halves))
    frame = _map_side_frame(df, key_columns, states, weight_from, fields)
    if frame is not None:
        return frame, replace(finish, weight_from=weight_from)
    grouping = [F.spark_partition_id().alias(PARTITION_COL), *(_col(k) for k in key_columns)]
    aggregates = [aggregate.alias(name) for name, aggregate, _ in states]
    frame = df.groupBy(*grouping).agg(*aggregates, F.count(F.lit(1)).alias(WEIGHT_COL)).drop(PARTITION_COL)
    return frame, finish


def precombined(df: DataFrame, key_columns: list[str], reducer: Any) -> DataFrame:
    """``df`` pre-aggregated per Spark partition into dpa partial states, in Spark's Python.

    The fallback of :func:`native_partials` (Spark SQL aggregates,
    several times faster) for the reducers and column types it does not cover, and
    ``precombine="arrow"``. Each Spark task runs the reducer's own map-side combine
    (``reducer.partial_from_batch(partition, key_columns, WEIGHT_COL)``) on its partition
    as Arrow (``mapInArrow``): the same step a dpa mapper would do on a block, done where
    the data already is, so only one partial row per key and partition leaves Spark.
    Key columns keep their Spark types; state columns and the record count are typed from
    the partial table's Arrow schema.
    """
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_type, to_arrow_schema
    from pyspark.sql.types import StructField, StructType

    from dpa.aggregates.requested import requested
    from dpa.input.records import WEIGHT_COL

    inner = requested(reducer).aggregate
    needed = [*key_columns, *[c for c in (inner.input_columns() or []) if c not in key_columns]]
    narrow = df.select(*needed)
    proto = inner.partial_from_batch(to_arrow_schema(narrow.schema).empty_table(), key_columns, WEIGHT_COL)
    spark_fields = {f.name: f for f in narrow.schema.fields}
    fields = [spark_fields[c] for c in key_columns]
    fields += [StructField(f.name, from_arrow_type(f.type), True) for f in proto.schema if f.name not in key_columns]

    def combine(batches: Any) -> Any:
        tables = [pa.Table.from_batches([b]) for b in batches]
        if tables:
            yield from inner.partial_from_batch(pa.concat_tables(tables), key_columns, WEIGHT_COL).to_batches()

    return narrow.mapInArrow(combine, StructType(fields))
