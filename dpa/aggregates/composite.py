"""Several aggregates in one job: ``dpa.run(source, key, reducer=[dpa.Sum("x"), dpa.Count()])``.

A list of reducers becomes one composite reducer (:func:`combine`): the job routes each
record once, and every key gets one result row with one column per aggregate. The
composite follows the same combine contract as a single reducer, member by member, so
the load balancer may split a hot key over several reducers and the final state merge
combines each member's partial state with that member's own merge:

* :class:`Aggregates` when every member is a columnar built-in: a batch is pre-aggregated
  with one group-by (:func:`~dpa.aggregates.dense.group_aggregate`: by key value for a
  dense integer key, Arrow's hash group-by otherwise) holding every member whose partial
  state is plain Arrow aggregates (count, sum, min, max, mean, variance), each (column, function) computed once
  however many members ask for it (``Mean("x")`` and ``Std("x")`` count ``x`` once);
  members with their own Arrow code (lists, sets, sketches, NaN-ordered float min/max)
  run on the same groups, aligned by a group id. Partial states merge the same way; a
  member with its own merge by group id (:meth:`~dpa.aggregates.contract.ColumnarReducer.merge_groups`,
  e.g. :class:`~dpa.aggregates.moments.Var`'s parallel combination) takes the composite's
  group ids rather than grouping again;
* :class:`RecordAggregates` when a member is user-defined: a tuple of the members'
  accumulators per key, through the scalar contract.

Output columns are named as Spark names them (:func:`spark_name`: ``count(1)``,
``sum(amount)``, ``avg(latency)``, ``count(DISTINCT session)``, ...) unless a member was
named (``dpa.Sum("amount", name="total")``, ``dpa.Sum("amount").alias("total")``); two
members with one name are a :class:`~dpa.errors.ConfigError`. A member wrapped in
:class:`~dpa.aggregates.contract.WithCost` adds its cost per record to the job's.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from dpa._internal.arrays import from_numpy, one_array, to_numpy
from dpa.aggregates.builtins import Count, Mean, Min, Sum, bind_reducer
from dpa.aggregates.contract import GROUP_ID_COL as GID_COL
from dpa.aggregates.contract import (
    ColumnarReducer,
    Reducer,
    WithCost,
    by_group_id,
    what_it_is,
)
from dpa.aggregates.dense import dense_keys, group_aggregate
from dpa.aggregates.int_sums import sum_may_overflow
from dpa.aggregates.requested import requested
from dpa.errors import ConfigError
from dpa.input.records import HASH_COL

logger = logging.getLogger(__name__)

__all__ = ["Aggregates", "RecordAggregates", "combine", "output_names", "spark_name"]

ROW_COL = "__dpa_row"

_SPARK_NAMES = {"sum": "sum({c})", "mean": "avg({c})", "min": "min({c})", "max": "max({c})",
                "collect": "collect_list({c})"}


def spark_name(reducer: Reducer) -> str:
    """The output name Spark would give ``reducer``'s aggregate (``sum(amount)``), or the
    reducer's own name where it was named by the user or Spark has no such aggregate."""
    if getattr(reducer, "_aliased", False):
        return reducer.name
    own = getattr(reducer, "spark_name", None)
    if callable(own):
        return own()
    if isinstance(reducer, Count) and type(reducer) is Count:
        if reducer.name != Count.default_name:
            return reducer.name
        return "count(1)" if reducer.column is None else f"count({reducer.column})"
    template = _SPARK_NAMES.get(reducer.kind)
    default = getattr(type(reducer), "default_name", None)
    if template is not None and reducer.name == default and reducer.column is not None:
        return template.format(c=reducer.column)
    if reducer.kind == "top_k" and reducer.name == default and reducer.column is not None:
        return f"top_k({reducer.column}, {reducer.k})"
    return reducer.name


def output_names(reducer: Reducer) -> list[str]:
    """The output columns an aggregate (possibly a composite; no cost wrapper, e.g. a job
    plan's :attr:`~dpa.engine.plan.JobPlan.aggregate`) adds after the key columns."""
    if isinstance(reducer, (Aggregates, RecordAggregates)):
        return [m.name for m in reducer.members]
    return [reducer.name]


def combine(reducers: Sequence[Reducer]) -> Reducer:
    """The composite reducer of a list of reducers (see the module docstring).

    Raises:
        ConfigError: the list is empty, holds something that is not a ``dpa.Reducer``, or
            two members have one output name.
    """
    if not reducers:
        raise ConfigError("reducer is an empty list; give at least one aggregate, e.g. [dpa.Count()]")
    members: list[Reducer] = []
    cost, mode = 0.0, "sleep"
    for i, r in enumerate(reducers):
        if not isinstance(r, Reducer):
            raise ConfigError(
                f"reducer[{i}] must be a dpa.Reducer (e.g. dpa.Count(), dpa.Sum('x')), {what_it_is(r)}")
        asked = requested(r)
        inner = asked.aggregate
        if isinstance(inner, (Aggregates, RecordAggregates)):
            raise ConfigError(f"reducer[{i}] is a list of aggregates itself; give one flat list")
        if asked.cost.seconds_per_record:
            cost, mode = cost + asked.cost.seconds_per_record, asked.cost.mode
        member = copy.copy(inner)
        member.name = spark_name(inner)
        members.append(member)
    names = [m.name for m in members]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(
            f"two aggregates are both named {duplicates[0]!r}; name one of them, e.g. "
            f"dpa.Sum('x').alias('total') or dpa.Sum('x', name='total')")
    if all(isinstance(m, ColumnarReducer) for m in members):
        out: Reducer = Aggregates(members)
    else:
        out = RecordAggregates(members)
    return WithCost(out, cost, mode=mode) if cost else out


def _check_names(members: list[Reducer], key_cols: Sequence[str]) -> None:
    for m in members:
        if m.name in key_cols:
            raise ConfigError(
                f"the aggregate {m!r} is named {m.name!r} like a key column; name it otherwise, e.g. .alias('{m.name}_out')")


class _Members:
    """What both composites share: members, names, validation, merge capability."""

    members: list[Reducer]

    def _init_members(self, members: list[Reducer]) -> None:
        self.members = members
        self.name = ", ".join(m.name for m in members)
        self.column = None
        self.kind = "aggregates"

    @property
    def can_merge(self) -> bool:
        return all(m.can_merge for m in self.members)

    def input_columns(self) -> list[str] | None:
        cols: list[str] = []
        for m in self.members:
            need = m.input_columns()
            if need is None:
                return None
            cols += [c for c in need if c not in cols]
        return cols

    def validate(self, schema: pa.Schema | None) -> None:
        for m in self.members:
            m.validate(schema)

    def spark_types(self, input_schema: pa.Schema | None = None) -> Reducer:
        """The composite with each member's :meth:`~dpa.aggregates.contract.Reducer.spark_types`."""
        members = [m.spark_types(input_schema) for m in self.members]
        if all(a is b for a, b in zip(members, self.members)):
            return self  # type: ignore[return-value]
        out = copy.copy(self)
        out.members = members
        return out  # type: ignore[return-value]

    def bind(self, record_kind: str) -> None:
        """Resolves each member's default column (see :func:`dpa.aggregates.builtins.bind_reducer`)."""
        self.members = [bind_reducer(m, record_kind) for m in self.members]

    def check_key_names(self, key_cols: Sequence[str]) -> None:
        """Raises :class:`ConfigError` if an output column is named like a key column."""
        _check_names(self.members, key_cols)

    def output_fields(self, input_schema: pa.Schema | None) -> list[pa.Field | None]:
        """Each member's output field (None where it is known only from the result)."""
        return [m.output_field(input_schema) for m in self.members]

    def __repr__(self) -> str:
        return "[" + ", ".join(repr(m) for m in self.members) + "]"


def _prefix(i: int, state: str) -> str:
    return f"__a{i}_{state}"


_FLOAT_BITS = {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}


def _same_values(a: pa.ChunkedArray, b: pa.ChunkedArray) -> bool:
    """Whether two columns hold the same values, bit for bit: the same buffers (a view that
    changed nothing), or equal values of one type (floats compared as their bits, so that
    -0.0 is not 0.0 and NaNs are told apart as a member's view may tell them)."""
    if not a.type.equals(b.type) or len(a) != len(b) or a.null_count != b.null_count:
        return False
    if a.num_chunks == b.num_chunks and all(
            x.offset == y.offset and [buf and buf.address for buf in x.buffers()] == [buf and buf.address for buf in y.buffers()]
            for x, y in zip(a.chunks, b.chunks)):
        return True
    if pa.types.is_floating(a.type):
        bits = _FLOAT_BITS[a.type.bit_width]
        return pa.chunked_array([c.view(bits) for c in a.chunks], bits).equals(
            pa.chunked_array([c.view(bits) for c in b.chunks], bits))
    return a.equals(b)


def group_ids(table: pa.Table, key_cols: Sequence[str]) -> tuple[np.ndarray, int]:
    """``(id per row, number of groups)``: rows with equal key tuples share an id in ``[0, n)``.

    :data:`~dpa.input.records.HASH_COL` among ``key_cols`` beside key columns is left out
    (a key's hash is the same on each of its rows), so a step's group columns may be passed
    as they are.
    """
    from dpa.keys.columns import _codes

    key_cols = [c for c in key_cols if c != HASH_COL] or list(key_cols)

    if list(key_cols) == [GID_COL]:  # numbered by a composite already: every id in [0, n) is used
        gid = to_numpy(table[GID_COL]).astype(np.int64, copy=False)
        return gid, int(gid.max()) + 1 if len(gid) else 0

    if len(key_cols) == 1:
        dense = dense_keys(table[key_cols[0]])
        if dense is not None:
            return dense.group_ids()
    codes, values = _codes(one_array(table[key_cols[0]]))
    combined, size = codes, len(values)
    for name in key_cols[1:]:
        c, v = _codes(one_array(table[name]))
        joint = combined * len(v) + c
        uniq, combined = np.unique(joint, return_inverse=True)
        size = len(uniq)
    return combined.astype(np.int64), size


def _shared_groups(table: pa.Table, base: pa.Table, group_cols: list[str], aggs: list[Any],
                   names: list[str]) -> tuple[np.ndarray, int, pa.Table, dict[str, Any]]:
    """Numbers ``table``'s groups once and computes ``aggs`` (over ``base``: ``table`` and
    any extra columns) by that number, for the members with a step of their own to align with.

    Returns:
        ``(group id per row, number of groups, the key columns of each group's first row,
        {name: the aggregate's column, row g for group g})``.
    """
    gid, size = group_ids(table, group_cols)
    base = base.append_column(GID_COL, from_numpy(gid)).append_column(ROW_COL, from_numpy(np.arange(table.num_rows)))
    fused = group_aggregate(base, [GID_COL], aggs + [(ROW_COL, "min")])
    fused = by_group_id(fused.rename_columns([GID_COL, *names, ROW_COL]), size)
    keys = table.select(group_cols).take(fused[ROW_COL])
    return gid, size, keys, {n: fused[n] for n in names}


class Aggregates(_Members, ColumnarReducer):
    """Columnar composite of built-in (columnar) reducers; see the module docstring.

    Args:
        members: The reducers, already named (:func:`combine` names them).
    """

    def __init__(self, members: list[ColumnarReducer]) -> None:
        ColumnarReducer.__init__(self, None, "aggregates")
        self._init_members(members)

    @property
    def float_rounding(self) -> bool:  # type: ignore[override]
        return all(m.float_rounding for m in self.members)

    def state_aggregations(self) -> list[tuple[str | None, str, str]]:
        out = []
        for i, m in enumerate(self.members):
            out += [(col, fn, _prefix(i, s)) for col, fn, s in m.state_aggregations()]
        return out

    def state_columns(self) -> list[str]:
        return [_prefix(i, s) for i, m in enumerate(self.members) for s in m.state_columns()]

    def _plain(self, m: ColumnarReducer, table: pa.Table, merge: bool) -> bool:
        """Whether a member's step is plain Arrow aggregates (so it joins the shared group-by)."""
        if type(m) in (Sum, Mean):  # plain while no integer sum can overflow
            state = "sum" if type(m) is Sum else "msum"
            column = table[_prefix(self.members.index(m), state)] if merge else table[m.column]
            return not sum_may_overflow(column)
        if isinstance(m, Min):  # (and Max) plain Arrow min/max, unless NaN must be ordered
            column = table[_prefix(self.members.index(m), m.kind)] if merge else table[m.column]
            return not pa.types.is_floating(column.type)
        if not merge and hasattr(m, "fused_partial"):  # plain aggregates with options (distinct sets)
            return True
        method = "merge_partials" if merge else "partial_from_batch"
        return getattr(type(m), method) is getattr(ColumnarReducer, method)

    def partial_from_batch(self, table: pa.Table, group_cols: list[str], weight_col: str | None = None) -> pa.Table:
        aggs: list[tuple[Any, str]] = []
        names: list[str] = []
        special: list[int] = []
        extra: dict[str, Any] = {}
        seen: dict[tuple[str | None, str], str] = {}  # one aggregate computed once, whoever asks
        aliases: dict[str, str] = {}
        for i, m in enumerate(self.members):
            if not self._plain(m, table, merge=False):
                special.append(i)
                continue
            col = m.column
            if col is not None and type(m).prepare is not ColumnarReducer.prepare:
                # The member's own view of its column (a cast, -0.0 made 0.0, ...), beside the
                # column itself, which other members may read as it is. A view equal to the
                # column, or to another member's view, is read under that name, so that the
                # aggregates on it are computed once (Mean's and Std's count of one column).
                view = m.prepare(pa.table({col: table[col]}))[col]
                same = next((name for name, other in [(col, table[col]), *extra.items()] if _same_values(view, other)),
                            None)
                if same is None:
                    extra[same := f"__in{i}"] = view
                col = same
            fused = m.fused_partial() if hasattr(m, "fused_partial") else [(c, f, st, None) for c, f, st in
                                                                           m.state_aggregations()]
            for c, fn, s, options in fused:
                # A view keeps the column's nulls, so a count is of the column itself: one
                # count however the members view it (Mean's integers, Std's float64).
                read = m.column if fn == "count" and options is None else col
                spec = ([] if c is None else read, fn) if options is None else (col, fn, options)
                same = (None if c is None else read, fn)
                if options is None and same in seen:  # (Mean's and Std's count of one column, say)
                    aliases[_prefix(i, s)] = seen[same]
                    continue
                if options is None:
                    seen[same] = _prefix(i, s)
                aggs.append(spec)
                names.append(_prefix(i, s))
        if weight_col is not None and (None, "count_all") in seen:  # Count's state is the weight
            aliases[weight_col] = seen[(None, "count_all")]
        elif weight_col is not None:
            aggs.append(([], "count_all"))
            names.append(weight_col)
        base = table
        for name, column in extra.items():
            base = base.append_column(name, column)
        if not special:
            out = group_aggregate(base, group_cols, aggs).rename_columns(list(group_cols) + names)
            for name, same_as in aliases.items():
                out = out.append_column(name, out[same_as])
            return out.select(self._order(group_cols, weight_col))
        # Members with their own step run on the same groups, numbered once here.
        gid, size, keys, parts = _shared_groups(table, base, group_cols, aggs, names)
        parts.update({name: parts[same_as] for name, same_as in aliases.items()})
        with_gid = table.append_column(GID_COL, from_numpy(gid))
        for i in special:
            m = self.members[i]
            cols = [GID_COL] + [c for c in (m.input_columns() or []) if c != GID_COL]
            part = by_group_id(m.partial_from_batch(with_gid.select(cols), [GID_COL]), size)
            for s in m.state_columns():
                parts[_prefix(i, s)] = part[s]
        columns = [keys[c] for c in group_cols] + [parts[n] for n in self.state_columns()]
        out_names = list(group_cols) + self.state_columns()
        if weight_col is not None:
            columns.append(parts[weight_col])
            out_names.append(weight_col)
        return pa.table(columns, names=out_names)

    def _order(self, group_cols: list[str], weight_col: str | None) -> list[str]:
        return list(group_cols) + self.state_columns() + ([weight_col] if weight_col is not None else [])

    def merge_partials(self, table: pa.Table, group_cols: list[str]) -> pa.Table:
        aggs: list[tuple[str, str]] = []
        names: list[str] = []
        special: list[int] = []
        for i, m in enumerate(self.members):
            if not self._plain(m, table, merge=True):
                special.append(i)
                continue
            for s, fn in m.merge_aggregations():
                aggs.append((_prefix(i, s), fn))
                names.append(_prefix(i, s))
        if not special:
            out = group_aggregate(table, group_cols, aggs)
            return out.rename_columns(list(group_cols) + names).select(self._order(group_cols, None))
        gid, size, keys, parts = _shared_groups(table, table, group_cols, aggs, names)
        for i in special:
            m = self.members[i]
            states = m.state_columns()
            part = m.merge_groups(pa.table([table[_prefix(i, s)] for s in states], names=states), gid, size)
            for s in states:
                parts[_prefix(i, s)] = part[s]
        return pa.table([keys[c] for c in group_cols] + [parts[n] for n in self.state_columns()],
                        names=list(group_cols) + self.state_columns())

    def finalize_table(self, table: pa.Table, key_cols: list[str]) -> pa.Table:
        columns = [table[c] for c in key_cols]
        for i, m in enumerate(self.members):
            states = m.state_columns()
            sub = pa.table([table[c] for c in key_cols] + [table[_prefix(i, s)] for s in states],
                           names=[*key_cols, *states])
            columns.append(m.finalize_table(sub, list(key_cols))[m.name])
        return pa.table(columns, names=[*key_cols, *(m.name for m in self.members)])

    def output_field(self, input_schema: pa.Schema | None) -> pa.Field | None:
        return None  # several columns: see output_fields


class RecordAggregates(_Members, Reducer):
    """Composite through the scalar contract (some member is user-defined).

    The accumulator is a list with one accumulator per member; a member reading a column
    gets that field of each record, a member with ``record_fields`` (``MaxBy``'s value and
    ordering columns) a tuple of those fields, a member reading whole records
    (``column=None``) the record itself.
    """

    def __init__(self, members: list[Reducer]) -> None:
        Reducer.__init__(self, None, "aggregates")
        self._init_members(members)
        self.record_kind = "dict"

    def bind(self, record_kind: str) -> None:
        super().bind(record_kind)
        self.record_kind = record_kind

    def input_columns(self) -> list[str] | None:
        return None  # whole records: members pick their fields

    def _value(self, m: Reducer, record: Any) -> Any:
        if m.column is None:
            return record
        fields = getattr(m, "record_fields", None)
        if fields is not None:  # a member reading several fields gets a tuple of them
            return tuple(self._field(c, record) for c in fields)
        return self._field(m.column, record)

    def _field(self, column: str, record: Any) -> Any:
        if self.record_kind == "dict":
            return record.get(column)
        if self.record_kind == "tuple":
            return record[int(column[1:])] if column[:1] == "f" and column[1:].isdigit() else record
        return record

    def create(self) -> list[Any]:
        return [m.create() for m in self.members]

    def add(self, acc: list[Any], value: Any) -> list[Any]:
        return [m.add(a, self._value(m, value)) for m, a in zip(self.members, acc)]

    def add_batch(self, acc: list[Any], values: list[Any]) -> list[Any]:
        return [m.add_batch(a, [self._value(m, v) for v in values]) for m, a in zip(self.members, acc)]

    def merge(self, a: list[Any], b: list[Any]) -> list[Any]:
        return [m.merge(x, y) for m, x, y in zip(self.members, a, b)]

    def finalize(self, acc: list[Any]) -> tuple[Any, ...]:
        return tuple(m.finalize(a) for m, a in zip(self.members, acc))
