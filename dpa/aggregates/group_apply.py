"""Per-group functions: :class:`GroupApply`, dpa's answer to ``applyInPandas`` and ``map_groups``.

``GroupApply(fn)`` as a job's reducer runs ``fn`` once on *all* rows of each key and
concatenates what it returns. It is not an aggregate: it cannot be decomposed, so a key's
rows are never split between two calls of ``fn``. A job runs it in two phases:

1. **Collect.** Rows travel to reducers under the job's routing, like any job's records.
   Collecting rows *is* mergeable (two partial row sets of a key concatenate), so every
   policy may move or split keys while rows arrive; the final merge brings each key's rows
   together on one reducer (:class:`dpa.aggregates.rows.RowsState`, rows held in Arrow).
2. **Apply.** Each reducer packs its groups into *units* (one per large group, several
   small groups per unit) and a scheduler (:class:`dpa.engine.group_schedule.GroupScheduler`)
   hands units to workers by estimated cost: largest first, and a worker that runs dry
   takes units still waiting at another reducer (their rows move). The makespan tends to
   ``max(total / workers, largest group)``.

Rows of one group reach ``fn`` in no particular order (as in Spark): sort inside ``fn``
when order matters.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from dpa.aggregates.contract import Reducer
from dpa.aggregates.rows import GroupUnit, RowsState, shown_key
from dpa.errors import ConfigError, SchemaError, UserCodeError
from dpa.input.records import unify

logger = logging.getLogger(__name__)

#: Default bound of one group's rows in memory, in bytes (``GroupApply(max_group_bytes=...)``).
DEFAULT_MAX_GROUP_BYTES = 2 << 30

BATCH_FORMATS = ("pandas", "arrow", "numpy")


@dataclass
class UnitResult:
    """What running one unit gave: the rows ``fn`` returned and how long it took."""

    table: pa.Table | None
    rows: int
    groups: int
    seconds: float


def _takes_key(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is ``fn(key, group)`` (two positional parameters) rather than ``fn(group)``."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: one argument
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                  and p.default is p.empty]
    return len(positional) >= 2 or (len(positional) == 1 and any(p.kind == p.VAR_POSITIONAL for p in params))


class GroupApply(Reducer):
    """Runs ``fn`` on all rows of each key; the result is the concatenation of its outputs.

    Args:
        fn: ``fn(group)`` or ``fn(key, group)``: ``group`` holds every row of one key (a
            ``pandas.DataFrame``, a ``pyarrow.Table`` or a dict of column name ->
            ``numpy.ndarray``, see ``batch_format``) with all of the input's columns; ``key``
            is a tuple of the key's values (as in Spark's ``applyInPandas``). It returns any
            number of rows: a ``pandas.DataFrame``, a ``pyarrow.Table`` or ``RecordBatch``,
            a dict of column name -> array (as Ray Data's ``map_groups``), or None for none.
        schema: The output's ``pyarrow.Schema``. Every returned frame must have exactly
            its columns (matched by name) and is cast to its types; None infers the
            output's types from what ``fn`` returns.
        batch_format: ``"pandas"`` (default), ``"arrow"`` or ``"numpy"``: what ``group`` is.
        max_group_bytes: Bound of one group's rows in memory (default 2 GiB). A larger
            group fails the job with an error naming the key, its rows and bytes, before
            ``fn`` sees it.
        name: Label of the job's output in messages.

    Raises:
        ConfigError: ``fn`` is not callable, or another argument is invalid.
    """

    kind = "group_apply"

    def __init__(self, fn: Callable[..., Any], schema: pa.Schema | None = None, batch_format: str = "pandas",
                 max_group_bytes: int = DEFAULT_MAX_GROUP_BYTES, name: str = "group_apply") -> None:
        if not callable(fn):
            raise ConfigError(f"GroupApply needs a function fn(group) or fn(key, group), got {type(fn).__name__}")
        if schema is not None and not isinstance(schema, pa.Schema):
            raise ConfigError(
                f"GroupApply schema must be a pyarrow.Schema or None, got {type(schema).__name__}; "
                "e.g. pa.schema([('key', pa.int64()), ('n', pa.int64())]) (spark_bridge.apply_in_pandas takes "
                "Spark's DDL strings)")
        if batch_format not in BATCH_FORMATS:
            raise ConfigError(f"GroupApply batch_format must be one of {BATCH_FORMATS}, got {batch_format!r}")
        if not isinstance(max_group_bytes, int) or isinstance(max_group_bytes, bool) or max_group_bytes <= 0:
            raise ConfigError(f"GroupApply max_group_bytes must be a positive int, got {max_group_bytes!r}")
        super().__init__(None, name)
        self.fn = fn
        self.schema = schema
        self.batch_format = batch_format
        self.max_group_bytes = max_group_bytes
        self.with_key = _takes_key(fn)

    # Collecting rows merges by concatenation: keys may move and split while rows arrive.
    @property
    def can_merge(self) -> bool:
        return True

    def new_state(self, key_cols: list[str]) -> Any:
        """The row store of this reducer's keys (:class:`~dpa.aggregates.rows.RowsState`)."""
        return RowsState(self, key_cols)

    def output_names(self) -> list[str]:
        """The output's columns, when the schema is given (else none are known up front)."""
        return [] if self.schema is None else list(self.schema.names)

    def empty_output(self) -> pa.Table:
        """The output of a job that saw no rows."""
        return (self.schema or pa.schema([])).empty_table()

    # -- running fn -------------------------------------------------------------------
    def apply(self, unit: GroupUnit, key_cols: list[str]) -> UnitResult:
        """Runs ``fn`` on every group of ``unit``.

        Raises:
            UserCodeError: ``fn`` raised, or returned something that is not rows; the
                message names the key.
            SchemaError: a returned frame does not fit :attr:`schema`; the message names the
                key and both schemas.
        """
        started = time.perf_counter()
        offsets = unit.offsets.tolist()
        firsts = unit.table.select(key_cols).take(pa.array(offsets[:-1], pa.int64())) if unit.groups else None
        keys = list(zip(*(firsts.column(c).to_pylist() for c in key_cols))) if firsts is not None else []
        outputs: list[tuple[tuple[Any, ...], Any]] = []
        for key, group in zip(keys, self._groups(unit.table, offsets)):
            try:
                out = self.fn(key, group) if self.with_key else self.fn(group)
            except Exception as exc:
                raise UserCodeError(f"GroupApply fn raised {type(exc).__name__}: {exc} on the group of key "
                                    f"{_show(key)} ({_rows(group)} rows)", key=shown_key(key)) from exc
            outputs.append((key, out))
        table = self._concat_frames(outputs)
        if table is None:
            tables = [t for t in (self._as_table(out, key) for key, out in outputs) if t is not None and t.num_rows]
            table = (tables[0] if len(tables) == 1 else unify(tables)) if tables else None
        return UnitResult(table, unit.rows, unit.groups, time.perf_counter() - started)

    def _groups(self, table: pa.Table, offsets: list[int]) -> Iterator[Any]:
        """The groups of a unit (its ``table``, cut at ``offsets``) in :attr:`batch_format`, in order.

        pandas: the unit becomes one frame (one Arrow conversion per unit, not per group) and
        each group is a row slice of it, its index ``0..rows-1``: the frame pandas'
        ``DataFrame.groupby(...).apply`` hands out, made as pandas' own splitter makes it
        (a slice of the frame's block manager), without a group-by over the unit.
        """
        if self.batch_format == "pandas":
            yield from _frame_slices(table.to_pandas(), offsets)
            return
        for a, b in zip(offsets[:-1], offsets[1:]):
            piece = table.slice(a, b - a)
            if self.batch_format == "arrow":
                yield piece
            else:
                yield {name: col.to_numpy() for name, col in zip(piece.column_names, piece.columns)}

    def _concat_frames(self, outputs: list[tuple[tuple[Any, ...], Any]]) -> pa.Table | None:
        """The unit's output in one conversion, when every group returned a pandas frame with
        the same columns and dtypes: each column's arrays concatenated once, then one Arrow
        table (what ``pandas.concat`` of the frames gives, without its per-frame cost).

        None when that does not apply (other kinds of output, different columns or dtypes
        between groups, or a frame Arrow does not convert): the
        caller converts each group's output on its own, which names the key of a bad one.
        An empty unit output is an empty table of the first frame's columns.
        """
        import pandas as pd

        if len(outputs) < 2 or not all(isinstance(out, pd.DataFrame) for _, out in outputs):
            return None
        first = outputs[0][1]
        names = list(first.columns)
        if not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
            return None
        if self.schema is not None:
            for key, out in outputs:
                self._check_names([str(c) for c in out.columns], key)
        if any(list(out.columns) != names for _, out in outputs[1:]):
            return None
        # pandas promotes dtypes it concatenates (bool + int -> int, int + float -> float); the
        # per-group path promotes them as Arrow does (or refuses), so it decides those cases.
        dtypes: tuple[Any, ...] | None = None
        columns: list[list[Any]] = [[] for _ in names]
        for _, out in outputs:
            if not len(out):
                continue
            got, arrays = _frame_columns(out)
            if dtypes is None:
                dtypes = got
            elif got != dtypes:
                return None
            for i, array in enumerate(arrays):
                columns[i].append(array)
        if dtypes is None:
            return None
        try:
            whole = pd.DataFrame({name: _concat_arrays(parts) for name, parts in zip(names, columns)},
                                 copy=False)
            if self.schema is not None:
                return pa.Table.from_pandas(whole[self.schema.names], schema=self.schema, preserve_index=False)
            return pa.Table.from_pandas(whole, preserve_index=False)
        except (pa.ArrowException, TypeError, ValueError):
            return None

    def _as_table(self, out: Any, key: tuple[Any, ...]) -> pa.Table | None:
        """``fn``'s output as an Arrow table (cast to :attr:`schema`), or None for no rows."""
        if out is None:
            return None
        if isinstance(out, pa.RecordBatch):
            out = pa.Table.from_batches([out])
        elif isinstance(out, dict):
            try:
                out = pa.table(out)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
                raise UserCodeError(f"GroupApply fn returned a dict Arrow cannot make a table of for the group of "
                                    f"key {_show(key)}: {exc}", key=shown_key(key)) from exc
        if not isinstance(out, pa.Table):
            import pandas as pd

            if not isinstance(out, pd.DataFrame):
                raise UserCodeError(
                    f"GroupApply fn must return a pandas.DataFrame, a pyarrow.Table, a dict of columns or None; "
                    f"for the group of key "
                    f"{_show(key)} it returned {type(out).__name__}", key=shown_key(key))
            if self.schema is not None:
                self._check_names([str(c) for c in out.columns], key)
                try:
                    return pa.Table.from_pandas(out[self.schema.names], schema=self.schema, preserve_index=False)
                except (pa.ArrowException, TypeError, ValueError) as exc:
                    raise SchemaError(self._mismatch(key, pa.Schema.from_pandas(out, preserve_index=False), exc)) from exc
            try:
                return pa.Table.from_pandas(out, preserve_index=False)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise UserCodeError(f"GroupApply fn returned a frame Arrow cannot convert for the group of key "
                                    f"{_show(key)}: {exc}", key=shown_key(key)) from exc
        if self.schema is None:
            return out
        self._check_names(out.column_names, key)
        try:
            return out.select(self.schema.names).cast(self.schema)
        except (pa.ArrowException, ValueError) as exc:
            raise SchemaError(self._mismatch(key, out.schema, exc)) from exc

    def _check_names(self, names: list[str], key: tuple[Any, ...]) -> None:
        if sorted(names) != sorted(self.schema.names):
            raise SchemaError(
                f"GroupApply fn returned columns {names} for the group of key {_show(key)}, but the schema has "
                f"{self.schema.names}; return exactly the schema's columns (or pass schema=None to infer it). "
                f"schema: {_one_line(self.schema)}")

    def _mismatch(self, key: tuple[Any, ...], got: pa.Schema, exc: BaseException) -> str:
        return (f"GroupApply fn's output for the group of key {_show(key)} does not fit the schema: {exc}; "
                f"returned: {_one_line(got)}; schema: {_one_line(self.schema)}")

    def __repr__(self) -> str:
        return f"GroupApply({getattr(self.fn, '__name__', type(self.fn).__name__)})"


def warm_up() -> None:
    """Runs the per-group path once on a tiny unit of two groups, in this process: the
    imports and first calls it makes (pandas, Arrow's group-by and its pandas conversions,
    a frame's slicing, assignment and concatenation) are paid here, not by a job's first
    unit. A pool's hosts call it as they start (``dpa.runtime.ray.host``)."""
    import pandas as pd

    table = pa.table({"k": pa.array([0, 0, 1], pa.int64()), "v": pa.array([0.5, 1.5, 2.0])})
    table.group_by(["k"], use_threads=False).aggregate([("v", "list")])
    unit = GroupUnit(table, np.array([0, 2, 3], dtype=np.int64))
    for fn in (lambda pdf: pdf.assign(x=pdf.v - pdf.v.mean()),
               lambda pdf: pd.DataFrame({"k": pdf["k"].to_numpy()[:1], "n": [len(pdf)]})):
        GroupApply(fn).apply(unit, ["k"])


def _frame_slices(frame: Any, offsets: list[int]) -> Iterator[Any]:
    """Row slices ``offsets[i]:offsets[i + 1]`` of the pandas ``frame``, each indexed ``0..rows-1``.

    A slice is made from a slice of the frame's block manager (views of its arrays), as
    pandas' group-by splitter makes the groups it hands ``apply``; with a pandas whose
    internals differ, from ``DataFrame.iloc``.
    """
    import pandas as pd

    mgr = getattr(frame, "_mgr", None)
    make = getattr(frame, "_constructor_from_mgr", None)
    if mgr is None or make is None or not hasattr(mgr, "get_slice") or not hasattr(mgr, "set_axis"):
        for a, b in zip(offsets[:-1], offsets[1:]):
            group = frame.iloc[a:b]
            group.index = pd.RangeIndex(b - a)
            yield group
        return
    for a, b in zip(offsets[:-1], offsets[1:]):
        part = mgr.get_slice(slice(a, b), axis=1)
        part.set_axis(1, pd.RangeIndex(b - a))
        yield make(part, axes=part.axes)


def _frame_columns(frame: Any) -> tuple[tuple[Any, ...], list[Any]]:
    """``frame``'s column dtypes and arrays (numpy arrays, or pandas extension arrays).

    Read from the frame's blocks where pandas offers it (a frame's ``dtypes`` builds a Series
    each time, which costs more than a small group's share of the concatenation).
    """
    if hasattr(frame, "_iter_column_arrays"):
        arrays = list(frame._iter_column_arrays())
    else:
        arrays = [col.to_numpy() if isinstance(col.dtype, np.dtype) else col.array for _, col in frame.items()]
    return tuple(array.dtype for array in arrays), arrays


def _concat_arrays(parts: list[Any]) -> Any:
    """One column from its parts, all of one dtype: numpy arrays, or extension arrays
    (concatenated by their own type, as ``pandas.concat`` does)."""
    if isinstance(parts[0], np.ndarray):
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
    return type(parts[0])._concat_same_type(parts)


def _rows(group: Any) -> int:
    """Rows of a group in any batch format."""
    if isinstance(group, dict):
        return len(next(iter(group.values()), ()))
    return len(group)


def _one_line(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


def _show(key: tuple[Any, ...]) -> str:
    return repr(shown_key(key))
