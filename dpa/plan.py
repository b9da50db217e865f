"""Turning ``dpa.run``'s arguments into a validated, picklable :class:`JobPlan`.

Everything that can be checked without running the job is checked here, before any
actor starts: the policy, the key (columns exist, types encodable), the reducer (fits the
column types, can merge if the policy moves keys), and ``map_fn`` (dry-run on the first
record to learn its output shape), and a callable ``key`` (run on a sample: a list, dict or
set key fails here).

What can only be seen while the job runs is checked block by block, on the driver for
sources read there (:func:`_checked_blocks`, whose messages give the block and its
records) and on the mappers (:meth:`JobPlan.prepare`): blocks are typed one by one and
never cast to the first block's types, so a value column that changes type is promoted
exactly and a key column that changes key class raises :class:`SchemaError`
(:class:`BlockTypes`); ``map_fn`` results that are not iterables of records and bad keys
returned by a key function raise :class:`UserCodeError` / :class:`KeyEncodingError`.
"""

from __future__ import annotations

import functools
import itertools
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from dpa.config import JobConfig
from dpa.errors import ConfigError, DPAError, KeyEncodingError, SchemaError
from dpa.keys import encode_key, int_key_out_of_range, key_type_class
from dpa.policy import PolicySpec, make_policy
from dpa.records import (
    FLOAT_EXACT_INT,
    SCALAR_COLUMN,
    IntegerRangeError,
    check_float_keys,
    key_classes_of,
    record_kind_of,
    records_to_table,
    table_to_records,
    tuple_columns,
)
from dpa.reducers import HASH_COL, WEIGHT_COL, ColumnarReducer, Reducer, bind_reducer, unwrap

logger = logging.getLogger(__name__)

KEY_COLUMN = "key"


class UserCodeError(DPAError, RuntimeError):
    """A user function (``map_fn``, ``key``, reducer) raised; wraps the original exception."""

    def __init__(self, message: str, *, key: Any = None, record: Any = None):
        super().__init__(message)
        self.key = key
        self.record = record

    def __reduce__(self):
        return (_rebuild_user_error, (str(self), self.key, self.record))


def _rebuild_user_error(message: str, key: Any, record: Any) -> UserCodeError:
    return UserCodeError(message, key=key, record=record)


class BatchMap:
    """Marks a ``map_fn`` that maps whole batches instead of single records.

    Args:
        fn: ``fn(batch) -> batch`` where batch is a ``pyarrow.Table`` (``format="arrow"``)
            or a ``pandas.DataFrame`` (``format="pandas"``).
        format: ``"arrow"`` or ``"pandas"``.
    """

    def __init__(self, fn: Callable[[Any], Any], format: str = "arrow") -> None:
        if not callable(fn):
            raise ConfigError(f"BatchMap needs a callable, got {type(fn).__name__}")
        if format not in ("arrow", "pandas"):
            raise ConfigError(f"BatchMap format must be 'arrow' or 'pandas', got {format!r}")
        self.fn = fn
        self.format = format

    def __call__(self, table: pa.Table) -> pa.Table:
        if self.format == "pandas":
            out = self.fn(table.to_pandas())
            return pa.Table.from_pandas(out, preserve_index=False)
        out = self.fn(table)
        if not isinstance(out, pa.Table):
            try:
                import pandas as pd

                if isinstance(out, pd.DataFrame):
                    return pa.Table.from_pandas(out, preserve_index=False)
            except ImportError:  # pragma: no cover - pandas is a dependency
                pass
            raise TypeError(f"BatchMap function must return a pyarrow.Table, got {type(out).__name__}")
        return out


# --------------------------------------------------------------------------- sources
@dataclass
class Source:
    """A normalised input: Arrow blocks of user records of one kind."""

    kind: str
    schema: pa.Schema | None
    blocks: Iterator[pa.Table] | None
    num_rows: int | None = None
    ray_dataset: Any = None
    probe: pa.Table | None = None  # a few rows to validate against when blocks stream later
    pieces: tuple[ParquetPiece, ...] | None = None  # blocks the Ray runtime's mappers read themselves
    # Records sources: the key columns, once build_plan knows them (later blocks check their
    # keys while converting), the raw records of the first block (checked by build_plan),
    # and an int beyond int64 found in the first block (a key or a value error: build_plan
    # tells which).
    key_hint: list[str] = field(default_factory=list)
    head_records: list[Any] | None = None
    deferred: IntegerRangeError | None = None


@dataclass(frozen=True)
class ArrowRefs:
    """A source of Arrow tables already in Ray's object store, one block per ref.

    Cheaper than a ``ray.data.Dataset`` when the refs exist anyway (no Ray Data metadata
    pass): mappers fetch each block straight from the object store. The Spark bridge uses
    it for the partitions Spark put there.

    Attributes:
        refs: ``ray.ObjectRef`` s, each resolving to a ``pyarrow.Table``.
        schema: The tables' schema (the job is validated against it before it starts).
    """

    refs: tuple[Any, ...]
    schema: pa.Schema

    def __post_init__(self) -> None:
        if not isinstance(self.schema, pa.Schema):
            raise ConfigError(f"ArrowRefs.schema must be a pyarrow.Schema, got {type(self.schema).__name__}")
        object.__setattr__(self, "refs", tuple(self.refs))


@dataclass(frozen=True)
class ParquetPiece:
    """Row groups of one parquet file: one input block, read by the mapper that takes it."""

    path: str
    row_groups: tuple[int, ...]
    columns: tuple[str, ...] | None
    num_rows: int

    def read(self) -> pa.Table:
        """Reads the piece (only :attr:`columns`)."""
        import pyarrow.parquet as pq

        cols = None if self.columns is None else list(self.columns)
        return pq.ParquetFile(self.path).read_row_groups(list(self.row_groups), columns=cols, use_threads=False)


@dataclass(frozen=True)
class ParquetFiles:
    """A source of local parquet files that dpa's mappers read themselves.

    The driver reads only the files' footers (schema, row groups); each input block is a
    run of row groups (:class:`ParquetPiece`) of about ``JobConfig.batch_size`` rows that
    the mapper taking it reads from disk, so the data never passes through the driver or
    the object store. On a Ray cluster every node needs the paths (a shared file system).
    The Spark bridge uses it for a DataFrame that is a plain parquet scan.

    Args:
        paths: Parquet file paths (not directories).
        columns: Columns to read (default: all). Reading only the key and value columns
            saves most of the I/O.

    Raises:
        ConfigError: No paths, a path that is not a file, or a file that is not parquet.
        SchemaError: A column is missing, or the files' schemas differ.
    """

    paths: tuple[str, ...]
    columns: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        import os

        import pyarrow.parquet as pq

        paths = (self.paths,) if isinstance(self.paths, str) else tuple(self.paths)
        if not paths:
            raise ConfigError("ParquetFiles needs at least one file path")
        missing = [p for p in paths if not isinstance(p, str) or not os.path.isfile(p)]
        if missing:
            raise ConfigError(f"ParquetFiles: not a file: {missing[:5]}; pass the paths of existing .parquet files")
        object.__setattr__(self, "paths", paths)
        if self.columns is not None:
            object.__setattr__(self, "columns", tuple(self.columns))
        metas = []
        for path in paths:
            try:
                metas.append(pq.ParquetFile(path).metadata)
            except (pa.ArrowInvalid, OSError) as exc:
                raise ConfigError(f"ParquetFiles: {path} is not a readable parquet file: {exc}") from exc
        schema = metas[0].schema.to_arrow_schema()
        if self.columns is not None:
            absent = [c for c in self.columns if c not in schema.names]
            if absent:
                raise SchemaError(f"ParquetFiles: column(s) {absent} not in {paths[0]}; it has {schema.names}")
            schema = pa.schema([schema.field(c) for c in self.columns])
        for path, meta in zip(paths[1:], metas[1:]):
            other = meta.schema.to_arrow_schema()
            if any(f.name not in other.names or other.field(f.name).type != f.type for f in schema):
                raise SchemaError(f"ParquetFiles: {path} has schema {other}, but {paths[0]} has {schema}")
        object.__setattr__(self, "_schema", schema)
        object.__setattr__(self, "_metas", tuple(metas))

    @property
    def schema(self) -> pa.Schema:
        """The schema of the columns read."""
        return self._schema  # type: ignore[attr-defined]

    @property
    def num_rows(self) -> int:
        """Rows in all files (from their footers)."""
        return sum(m.num_rows for m in self._metas)  # type: ignore[attr-defined]

    def pieces(self, batch_size: int) -> list[ParquetPiece]:
        """The input blocks: consecutive row groups of a file, about ``batch_size`` rows each
        (one row group may be larger); files without rows give none."""
        out: list[ParquetPiece] = []
        for path, meta in zip(self.paths, self._metas):  # type: ignore[attr-defined]
            group: list[int] = []
            rows = 0
            for i in range(meta.num_row_groups):
                n = meta.row_group(i).num_rows
                if group and rows + n > batch_size:
                    out.append(ParquetPiece(path, tuple(group), self.columns, rows))
                    group, rows = [], 0
                group.append(i)
                rows += n
            if rows:
                out.append(ParquetPiece(path, tuple(group), self.columns, rows))
        return out


def _is_ray_dataset(obj: Any) -> bool:
    return type(obj).__module__.startswith("ray.data") and type(obj).__name__ in ("Dataset", "MaterializedDataset")


def _is_spark_dataframe(obj: Any) -> bool:
    return type(obj).__module__.startswith("pyspark.sql") and type(obj).__name__ == "DataFrame"


def _table_blocks(table: pa.Table, batch_size: int) -> Iterator[pa.Table]:
    for start in range(0, table.num_rows, batch_size):
        yield table.slice(start, batch_size)


def _record_blocks(rest: Iterator[Any], kind: str, batch_size: int, schema: pa.Schema | None, source: Source,
                   offset: int) -> Iterator[pa.Table]:
    """Blocks of records after the first, each converted on its own (types are never cast to
    the first block's; ``schema`` only fixes the columns). Key columns are those
    ``source.key_hint`` names once :func:`build_plan` has set it."""
    while True:
        chunk = list(itertools.islice(rest, batch_size))
        if not chunk:
            return
        yield records_to_table(chunk, kind, schema, key_cols=source.key_hint, first_index=offset)
        offset += len(chunk)


def _castable_within_class(have: pa.DataType, want: pa.DataType) -> bool:
    """Whether a column of type ``have`` may be cast to ``want`` without changing any value or
    key: null to anything; ints, strings and binaries among themselves (Arrow's safe cast
    refuses values that do not fit); floats only to a type at least as wide."""
    if pa.types.is_null(have):
        return True
    cls = key_type_class(have)
    if cls != key_type_class(want):
        return False
    if cls in ("int", "str", "bytes"):
        return True
    if cls == "float":
        return want.bit_width >= have.bit_width
    return False


def _align(item: pa.Table, schema: pa.Schema) -> pa.Table:
    """``item`` with ``schema``'s columns, each cast to ``schema``'s type where that changes
    no value (:func:`_castable_within_class`), else keeping its own type."""
    fields, columns = [], []
    for f in schema:
        col = item[f.name]
        if col.type != f.type and _castable_within_class(col.type, f.type):
            try:
                col = col.cast(f.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                pass  # e.g. int64 values beyond the first table's int32: promoted later
        fields.append(f if col.type == f.type else pa.field(f.name, col.type))
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=schema.metadata))


def _arrow_stream(head: pa.Table, rest: Iterator[Any], batch_size: int) -> Iterator[pa.Table]:
    """Blocks of ``batch_size`` rows from a stream of Arrow tables/record batches (or pandas
    DataFrames). Small tables are coalesced, large ones cut; the last block may be
    shorter, and so may a block followed by a change of column types.

    Every table needs the first one's columns (extra ones are dropped). Types are never
    cast in a way that could change a value: a column is cast to the first table's type
    only within its key class (int32 -> int64, string -> dictionary<string>; see
    :func:`_align`); otherwise the table keeps its own type and the job promotes the
    column or rejects the change (:func:`build_plan`). Tables of different types are
    never coalesced into one block.
    """
    schema = head.schema
    pending: list[pa.Table] = []
    pending_types: list[pa.DataType] | None = None
    rows = 0
    for i, item in enumerate(itertools.chain([head], rest)):
        if isinstance(item, pa.RecordBatch):
            item = pa.Table.from_batches([item])
        elif not isinstance(item, pa.Table):
            try:
                item = _as_arrow(item)
            except Exception as exc:
                raise SchemaError(f"a stream of Arrow tables yielded a {type(item).__name__} at position {i}") from exc
        if item.schema != schema:
            missing = [n for n in schema.names if n not in item.column_names]
            if missing:
                raise SchemaError(
                    f"table {i} of the stream lacks column(s) {missing}: it has {item.column_names}, the first "
                    f"table {schema.names}; every table of a stream needs the first one's columns"
                )
            item = _align(item, schema)
        types = item.schema.types
        if pending and types != pending_types:
            yield from _table_blocks(pa.concat_tables(pending, promote_options="permissive"), batch_size)
            pending, rows = [], 0
        pending_types = types
        pending.append(item)
        rows += item.num_rows
        if rows >= batch_size:
            table = pa.concat_tables(pending, promote_options="permissive")
            full = (rows // batch_size) * batch_size
            yield from _table_blocks(table.slice(0, full), batch_size)
            pending = [table.slice(full)] if rows > full else []
            rows -= full
    if rows:
        yield pa.concat_tables(pending, promote_options="permissive")


def _as_arrow(batch: Any) -> pa.Table:
    if isinstance(batch, pa.Table):
        return batch
    if isinstance(batch, dict):
        return pa.table(batch)
    return pa.Table.from_pandas(batch, preserve_index=False)


def _nonempty(dataset: Any) -> bool:
    try:
        return dataset.limit(1).count() > 0
    except Exception:  # pragma: no cover - a dataset that cannot count is treated as unknown
        return False


def _dataset_schema(dataset: Any) -> pa.Schema | None:
    schema = dataset.schema()
    if schema is None:
        return None
    base = getattr(schema, "base_schema", schema)
    return base if isinstance(base, pa.Schema) else None


def _is_arrow_block(obj: Any) -> bool:
    if isinstance(obj, (pa.Table, pa.RecordBatch)):
        return True
    return type(obj).__module__.startswith("pandas") and type(obj).__name__ == "DataFrame"


def normalize_source(source: Any, batch_size: int) -> Source:
    """Wraps any supported input as a :class:`Source`.

    Supported: ``pyarrow.Table``, ``pyarrow.RecordBatch``, ``pandas.DataFrame``,
    ``ray.data.Dataset``, :class:`ArrowRefs`, :class:`ParquetFiles`, an iterable (e.g. a generator) of Arrow tables, record batches or
    DataFrames (streamed, re-cut into ``batch_size`` blocks), and any iterable of records
    (dicts, tuples or scalars).
    """
    if isinstance(source, pa.RecordBatch):
        source = pa.Table.from_batches([source])
    if isinstance(source, pa.Table):
        return Source("dict", source.schema, _table_blocks(source, batch_size), source.num_rows)
    try:
        import pandas as pd

        if isinstance(source, pd.DataFrame):
            table = pa.Table.from_pandas(source, preserve_index=False)
            return Source("dict", table.schema, _table_blocks(table, batch_size), table.num_rows)
    except ImportError:  # pragma: no cover
        pass
    if isinstance(source, ArrowRefs):
        return Source("dict", source.schema, None, None, ray_dataset=source)
    if isinstance(source, ParquetFiles):
        pieces = tuple(source.pieces(batch_size))
        return Source("dict", source.schema, (p.read() for p in pieces), source.num_rows, pieces=pieces)
    if _is_ray_dataset(source):
        probe = _as_arrow(source.take_batch(64, batch_format="pyarrow")) if _nonempty(source) else None
        schema = probe.schema if probe is not None else _dataset_schema(source)
        return Source("dict", schema, None, None, ray_dataset=source, probe=probe)
    if isinstance(source, (str, bytes, dict)) or not isinstance(source, Iterable):
        raise ConfigError(
            f"source must be a pyarrow Table, pandas DataFrame, ray.data.Dataset, Spark DataFrame or an "
            f"iterable of records; got {type(source).__name__}"
        )
    it = iter(source)
    first = list(itertools.islice(it, 1))
    if first and _is_arrow_block(first[0]):
        # A stream of Arrow tables / record batches / DataFrames: consumed lazily, block by
        # block, so the input never has to fit in memory.
        head = first[0]
        head = pa.Table.from_batches([head]) if isinstance(head, pa.RecordBatch) else _as_arrow(head)
        return Source("dict", head.schema, _arrow_stream(head, it, batch_size), None)
    first += list(itertools.islice(it, batch_size - 1))
    if not first:
        return Source("scalar", None, iter(()), 0)
    kind = record_kind_of(first[0])
    num_rows = len(source) if hasattr(source, "__len__") else None
    try:
        head = records_to_table(first, kind)
    except IntegerRangeError as exc:  # a key error or a value error: build_plan knows which
        return Source(kind, None, iter(()), num_rows, deferred=exc)
    schema = head.schema
    src = Source(kind, schema, None, num_rows, head_records=first)

    def blocks() -> Iterator[pa.Table]:
        yield head
        yield from _record_blocks(it, kind, batch_size, schema, src, len(first))

    src.blocks = blocks()
    return src


# --------------------------------------------------------------------------- plan
@dataclass
class JobPlan:
    """Everything the actors need to run one job (picklable)."""

    key_cols: list[str]
    key_fn: Callable[[Any], Any] | None
    map_fn: Callable[[Any], Any] | None
    record_kind: str  # kind of the records the key and reducer see (after map_fn)
    input_kind: str  # kind of the source records (what map_fn sees)
    keep_cols: list[str] | None  # columns shipped to reducers besides key + hash; None = all
    reducer: Reducer
    policy: PolicySpec
    num_mappers: int
    num_reducers: int
    queue_capacity: int
    chunk_size: int
    lb_interval_s: float
    report_interval_s: float
    output_schema: pa.Schema | None = None  # of mapped records, when known
    input_schema: pa.Schema | None = None  # of the records reducers see, when known
    job_id: str = ""  # short id tagging metrics and logs
    combine: bool = False  # mappers ship per-key partial states with a WEIGHT_COL
    input_combined: bool = False  # source blocks are partial states already (JobConfig.input_combined)
    # Arrow type of each key column as far as known when planning (None: unknown yet, e.g.
    # all null in the sample). A key column keeps its key class for the whole job.
    key_types: list[pa.DataType | None] | None = None
    # The driver already checked the types of every block against each other (a source
    # read on the driver, no map_fn, no key function): mappers only re-check the keys.
    checked_upstream: bool = False
    _tracker: Any = field(default=None, init=False, repr=False, compare=False)  # per process, not pickled

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_tracker"] = None
        return state

    def apply_map(self, block: pa.Table) -> pa.Table:
        """Runs ``map_fn`` over a block of source records.

        Raises:
            UserCodeError: ``map_fn`` raised, or returned something that is not an iterable
                of records (a ``str``, ``bytes`` or ``dict`` would be iterated character by
                character or key by key; an int is not iterable).
            SchemaError, KeyEncodingError: the records it returned cannot form a table.
        """
        if self.map_fn is None:
            return block
        if isinstance(self.map_fn, BatchMap):
            try:
                return self.map_fn(block)
            except Exception as exc:
                raise UserCodeError(f"map_fn raised {type(exc).__name__}: {exc} on a batch of {block.num_rows} records") from exc
        out: list[Any] = []
        for record in table_to_records(block, self.input_kind):
            try:
                produced = self.map_fn(record)
            except Exception as exc:
                raise UserCodeError(f"map_fn raised {type(exc).__name__}: {exc} on record {record!r}", record=record) from exc
            if produced is None:
                continue
            if not _is_record_iterable(produced):
                raise UserCodeError(_bad_map_output(produced, record), record=record)
            try:
                out.extend(produced)
            except Exception as exc:
                raise UserCodeError(
                    f"map_fn's result for record {record!r} raised {type(exc).__name__} while being iterated: {exc}",
                    record=record,
                ) from exc
        # The sample's columns (so a field no record of this block has is null, not absent);
        # the types are this block's own.
        keys = self.key_cols if self.key_fn is None else ()
        return records_to_table(out, self.record_kind, self.output_schema or self.input_schema, key_cols=keys)

    def apply_key(self, table: pa.Table) -> pa.Table:
        """Adds the key column(s) computed by a callable ``key``."""
        if self.key_fn is None:
            return table
        records = table_to_records(table, self.record_kind)
        keys = []
        for record in records:
            try:
                keys.append(self.key_fn(record))
            except Exception as exc:
                raise UserCodeError(f"key function raised {type(exc).__name__}: {exc} on record {record!r}", record=record) from exc
        return add_key_columns(table, keys, self.key_cols, records)

    def prepare(self, block: pa.Table) -> pa.Table:
        """Source block -> mapped records with key columns, projected to what reducers need.

        Raises:
            SchemaError: a key column changed its key class, or a value column changed to a
                type dpa cannot promote to exactly (see :class:`BlockTypes`).
        """
        table = self.apply_key(self.apply_map(block))
        if self.keep_cols is not None:
            table = table.select(self.key_cols + [c for c in self.keep_cols if c not in self.key_cols])
        if table.num_rows:
            if self._tracker is None:
                self._tracker = BlockTypes(self, values=not self.checked_upstream)
            what = "records after map_fn" if self.map_fn is not None else "records"
            self._tracker.check(table, lambda: f"a block of {table.num_rows} {what}")
        return table


def _is_record_iterable(produced: Any) -> bool:
    """Whether ``map_fn``'s result is an iterable of records (not a str, bytes or mapping)."""
    if isinstance(produced, (str, bytes, bytearray, memoryview, Mapping)):
        return False
    return isinstance(produced, Iterable)


def _bad_map_output(produced: Any, record: Any) -> str:
    name = type(produced).__name__
    why = ("it would be iterated character by character" if isinstance(produced, str)
           else "it would be iterated byte by byte" if isinstance(produced, (bytes, bytearray, memoryview))
           else "it would be iterated key by key" if isinstance(produced, Mapping)
           else "it is not iterable")
    return (f"map_fn returned {_short(produced)} (type {name}) for record {_short(record)}: {why}; map_fn must return "
            "an iterable of records (e.g. a list) or None; wrap a single record as [record]")


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _example(column: pa.ChunkedArray | pa.Array) -> Any:
    """The first non-null value of a column (None if there is none)."""
    valid = pc.drop_null(column)
    return valid[0].as_py() if len(valid) else None


class BlockTypes:
    """Follows the column types of a job's blocks and rejects changes dpa cannot handle exactly.

    Blocks are typed one by one (:mod:`dpa.records`), so a column may change type between
    blocks. Rules:

    * a key column keeps its key class (:func:`dpa.keys.key_type_class`): int32 then
      int64 is fine, int then float is a :class:`SchemaError`, since ``1`` and ``1.0`` are
      different keys;
    * a value column may change to a type it promotes to exactly
      (``pa.unify_schemas(promote_options="permissive")``: null -> any, int -> wider int or
      float, float32 -> float64, ``list<int64>`` -> ``list<double>``); the reducer is
      re-validated against the promoted type (a ``Sum`` of a column that turns to strings
      fails here). Any other change is a :class:`SchemaError`;
    * for reducers that keep input values (all but ``Sum`` and ``Mean``), a column with
      both ints and floats must have every int exactly representable as float64
      (``|x| <= 2**53``), else :class:`SchemaError`: promoting it would change values.

    Args:
        plan: The job.
        values: Check value columns too (else only keys).
    """

    def __init__(self, plan: JobPlan, values: bool = True) -> None:
        self.plan = plan
        self.key_cols = list(plan.key_cols)
        self.key_types: dict[str, pa.DataType | None] = dict(zip(self.key_cols, plan.key_types or [None] * len(self.key_cols)))
        self.values = values
        self.value_types: dict[str, pa.DataType] = {}
        inner = unwrap(plan.reducer)[0]
        self.exact = not (isinstance(inner, ColumnarReducer) and inner.float_rounding)
        self.int_peak: dict[str, tuple[int, str]] = {}  # column -> (max |int| seen, where)
        self.float_at: dict[str, str] = {}  # column -> where floats were first seen
        self._last: list[pa.DataType] | None = None

    def check(self, table: pa.Table, where: Callable[[], str]) -> None:
        """Checks one block.

        Args:
            table: The block (key columns and the columns the reducer reads).
            where: Describes the block for messages, e.g. ``"block 3 (records 12-15)"``.

        Raises:
            SchemaError: what changed where, and how to fix it.
        """
        types = table.schema.types
        same = types == self._last
        self._last = types
        if same and not (self.values and self.exact):
            return
        if not same:
            self._check_keys(table, where)
        if not self.values:
            return
        value_cols = [c for c in table.column_names if c not in self.key_cols and c != HASH_COL]
        changed = False
        for name in value_cols:
            dtype = table.schema.field(name).type
            prev = self.value_types.get(name)
            if prev is None:
                self.value_types[name] = dtype
            elif prev != dtype:
                self.value_types[name] = self._promote(name, prev, dtype, table, where)
                changed = changed or self.value_types[name] != prev
            if self.exact:
                self._track_exactness(name, table[name], where)
        if changed:
            schema = pa.schema([(n, t) for n, t in self.value_types.items()])
            try:
                self.plan.reducer.validate(schema)
            except SchemaError as exc:
                raise SchemaError(f"{exc} (after the column types changed in {where()})") from exc

    def _check_keys(self, table: pa.Table, where: Callable[[], str]) -> None:
        for name in self.key_cols:
            if name not in table.column_names:
                continue
            dtype = table.schema.field(name).type
            if pa.types.is_null(dtype):
                continue
            expected = self.key_types.get(name)
            if expected is None or pa.types.is_null(expected):
                self.key_types[name] = dtype
            elif expected != dtype and key_type_class(expected) != key_type_class(dtype):
                raise SchemaError(
                    f"key column {name!r} changes type: {expected} keys before, {dtype} keys in {where()} "
                    f"(e.g. {_short(_example(table[name]), 60)}). dpa treats 1, 1.0 and True as different keys "
                    "(see dpa.keys), so a key column keeps one type for the whole job: give all keys one type, "
                    "e.g. convert them with float(), int() or str() (or cast the column) before the job"
                )

    def _promote(self, name: str, prev: pa.DataType, dtype: pa.DataType, table: pa.Table,
                 where: Callable[[], str]) -> pa.DataType:
        try:
            return pa.unify_schemas([pa.schema([(name, prev)]), pa.schema([(name, dtype)])],
                                    promote_options="permissive").field(name).type
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise SchemaError(
                f"column {name!r} changes type from {prev} to {dtype} in {where()} (e.g. "
                f"{_short(_example(table[name]), 60)}), and the two do not combine ({exc}). dpa promotes a value "
                "column only where no value changes (null -> any type, int -> wider int or float64, float32 -> "
                "float64); give the column one type in every record or table, e.g. cast it to float64 or str "
                "before the job"
            ) from exc

    def _track_exactness(self, name: str, column: pa.ChunkedArray, where: Callable[[], str]) -> None:
        dtype = column.type
        if pa.types.is_integer(dtype) and len(column) > column.null_count:
            low, high = pc.min_max(column).as_py().values()
            peak = max(abs(low), abs(high))
            if peak > self.int_peak.get(name, (0, ""))[0]:
                self.int_peak[name] = (peak, where() if peak > FLOAT_EXACT_INT else "")
        elif pa.types.is_floating(dtype) and name not in self.float_at:
            self.float_at[name] = where()
        peak, at = self.int_peak.get(name, (0, ""))
        if peak > FLOAT_EXACT_INT and name in self.float_at:
            raise SchemaError(
                f"column {name!r} holds both floats (first in {self.float_at[name]}) and integers beyond 2**53 "
                f"(up to {peak}, in {at}); float64 cannot hold such integers exactly, so promoting the column "
                f"would change values {self.plan.reducer!r} keeps. Cast the column to float64 yourself to accept "
                "the rounding, or to decimal, or give it one type"
            )


def key_columns_for(keys: list[Any], key_cols: list[str], records: list[Any]) -> list[pa.Array]:
    """The key columns for the keys a key function returned (a tuple -> several columns).

    Args:
        keys: One key per record.
        key_cols: The key column names (several when the keys are tuples).
        records: The records, for messages.

    Returns:
        One Arrow array per key column.

    Raises:
        KeyEncodingError: a key of a type dpa cannot encode (a list, dict, set, ...), an
            element of a tuple key that is a tuple itself, or an int beyond int64.
        SchemaError: tuple keys of the wrong width, or keys of different types at one
            position (an int and a float, say: Arrow would make both floats).
    """
    for key, record in zip(keys, records):
        try:
            encode_key(key)
        except KeyEncodingError as exc:
            raise KeyEncodingError(f"key function returned a {type(key).__name__} for record {_short(record)}: {exc}") from exc
    if len(key_cols) == 1:
        columns = [keys]
    else:
        for key, record in zip(keys, records):
            if not isinstance(key, tuple) or len(key) != len(key_cols):
                raise SchemaError(
                    f"key function returned {_short(key)} for record {_short(record)}; expected a tuple of "
                    f"{len(key_cols)} values like the first record's key"
                )
        columns = [list(c) for c in zip(*keys)] if keys else [[] for _ in key_cols]
    arrays = []
    for pos, values in enumerate(columns):
        what = "key function's key" if len(key_cols) == 1 else f"element {pos} of the key function's tuple keys"
        classes = key_classes_of(values)
        if len(classes) > 1:
            (a, i), (b, j) = list(classes.items())[:2]
            raise SchemaError(
                f"the {what} has different types: {a} {_short(values[i], 60)} for record {_short(records[i])} and "
                f"{b} {_short(values[j], 60)} for record {_short(records[j])}; a key column holds one type and dpa "
                "treats 1, 1.0 and True as different keys: return one type, e.g. str(k) or float(k)"
            )
        if "tuple" in classes:
            i = classes["tuple"]
            raise KeyEncodingError(
                f"the {what} is a tuple, {_short(values[i], 60)}, for record {_short(records[i])}; keys of a job "
                "are flat: return a flat tuple of str, bytes, int, float, bool or None (e.g. (a, b, c), not (a, (b, c)))"
            )
        try:
            arrays.append(pa.array(values))
        except OverflowError:
            i = next(i for i, v in enumerate(values) if isinstance(v, int) and not -(2**63) <= v < 2**63)
            raise int_key_out_of_range(values[i], f"returned by the key function for record {_short(records[i])}") from None
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise SchemaError(
                f"the {what} could not be stored as an Arrow column ({exc}); return one type per key position. "
                f"First keys: {_short(values[:3])}"
            ) from exc
    return arrays


def add_key_columns(table: pa.Table, keys: list[Any], key_cols: list[str], records: list[Any]) -> pa.Table:
    """Appends key values returned by a key function as columns (tuples -> several).

    Raises:
        KeyEncodingError, SchemaError: see :func:`key_columns_for`.
    """
    for name, arr in zip(key_cols, key_columns_for(keys, key_cols, records)):
        table = table.append_column(name, arr)
    return table


_BAD_KEY_TYPES = (pa.types.is_list, pa.types.is_large_list, pa.types.is_struct, pa.types.is_map,
                  pa.types.is_fixed_size_list, pa.types.is_dictionary)


def build_plan(source: Source, key: Any, reducer: Reducer, map_fn: Any, config: JobConfig) -> tuple[JobPlan, Iterator[pa.Table] | None]:
    """Validates the job and returns the plan plus the (possibly re-chained) block iterator.

    Raises:
        ConfigError, SchemaError, KeyEncodingError: what is wrong and how to fix it.
    """
    if not isinstance(config, JobConfig):
        raise ConfigError(f"config must be a dpa.JobConfig, got {type(config).__name__}")
    policy = make_policy(config)
    if map_fn is not None and not callable(map_fn):
        raise ConfigError(f"map_fn must be callable (record -> iterable of records) or dpa.BatchMap, got {type(map_fn).__name__}")
    if source.deferred is not None:
        exc = source.deferred
        error = exc if map_fn is not None else _classify_range_error(exc, source.kind, key)
        raise error from (None if error is exc else exc)

    blocks = source.blocks

    def peek() -> pa.Table | None:
        """The first block, for dry runs (the iterator is re-chained; a Ray Dataset's probe)."""
        nonlocal blocks
        if blocks is None:
            return source.probe
        first = next(blocks, None)
        if first is not None:
            blocks = itertools.chain([first], blocks)
        return first

    record_kind, schema, output_schema = source.kind, source.schema, None
    if map_fn is not None:
        first = peek()
        if isinstance(map_fn, BatchMap):
            record_kind, schema = "dict", None
            if first is not None:
                try:
                    schema = map_fn(first.slice(0, 64)).schema
                except Exception as exc:
                    raise UserCodeError(f"map_fn raised {type(exc).__name__}: {exc} on the first batch") from exc
        else:
            schema = None
            sample: list[Any] = []
            for record in table_to_records(first.slice(0, 64), source.kind) if first is not None else ():
                try:
                    produced = map_fn(record)
                except Exception as exc:
                    raise UserCodeError(f"map_fn raised {type(exc).__name__}: {exc} on record {record!r}", record=record) from exc
                if (produced is not None and not isinstance(produced, Iterable)) or isinstance(produced, (str, bytes, dict)):
                    raise ConfigError(
                        f"map_fn must return an iterable of records (e.g. a list), got {type(produced).__name__} "
                        f"for record {record!r}; wrap a single record as [record]"
                    )
                sample.extend(produced or ())
                if sample:
                    break
            if sample:
                record_kind = record_kind_of(sample[0])
                try:
                    schema = records_to_table(sample, record_kind).schema
                except IntegerRangeError as exc:
                    error = _classify_range_error(exc, record_kind, key)
                    raise error from (None if error is exc else exc)

    bound = bind_reducer(reducer, record_kind)
    inner, _, _ = unwrap(bound)
    if policy.needs_merge and not bound.can_merge:
        raise ConfigError(
            f"{bound!r} does not implement merge(), but policy {config.policy!r}"
            f"{f' with max_rounds={config.max_rounds}' if config.policy in ('halving', 'doubling') else ''} "
            "may process one key on several reducers; implement merge() or use a policy that keeps "
            "each key on one reducer (policy='hash', or max_rounds=0)"
        )

    # Key.
    key_fn = None
    key_types: list[pa.DataType | None] = []
    if callable(key) and not isinstance(key, (str, list, tuple)):
        key_fn = key
        key_cols = [KEY_COLUMN]
        first = peek() if schema is not None else None
        probe = records_sample(first, map_fn, source.kind, record_kind) if first is not None else []
        if probe:
            probe_keys = []
            for record in probe:
                try:
                    probe_keys.append(key_fn(record))
                except Exception as exc:
                    raise UserCodeError(f"key function raised {type(exc).__name__}: {exc} on record {record!r}") from exc
            if isinstance(probe_keys[0], tuple):
                key_cols = [f"{KEY_COLUMN}_{i}" for i in range(len(probe_keys[0]))]
            # Checked like key columns are: a list, dict or set key fails now, before any actor starts.
            key_types = [arr.type for arr in key_columns_for(probe_keys, key_cols, probe)]
    else:
        if key is None:
            if record_kind != "scalar":
                raise ConfigError("key is required: a column name, a list of column names or a callable")
            key = SCALAR_COLUMN
        if isinstance(key, int) and not isinstance(key, bool):
            if record_kind != "tuple":
                raise ConfigError(f"an integer key ({key}) selects a tuple field, but records are {record_kind}s")
            key = tuple_columns(key + 1)[key]
        key_cols = [key] if isinstance(key, str) else list(key)
        if not key_cols or not all(isinstance(k, str) for k in key_cols):
            raise ConfigError(f"key must be a column name, a list of column names or a callable, got {key!r}")
        if len(set(key_cols)) != len(key_cols):
            raise ConfigError(f"key lists a column twice: {key_cols}")
        if schema is not None:
            missing = [k for k in key_cols if k not in schema.names]
            if missing:
                raise SchemaError(
                    f"key column(s) {missing} not found; available columns: {', '.join(schema.names)}"
                )
            for k in key_cols:
                dtype = schema.field(k).type
                if any(check(dtype) for check in _BAD_KEY_TYPES):
                    raise KeyEncodingError(
                        f"key column {k!r} has type {dtype}, which cannot be a key; keys must be strings, "
                        "binary, numbers, booleans or null (flatten or cast the column first)"
                    )
            key_types = [schema.field(k).type for k in key_cols]
        if map_fn is None:
            # The key columns are source columns: later record blocks check their keys while
            # converting (ints beyond int64, ints mixed with floats); the first block is
            # checked here.
            source.key_hint[:] = key_cols
            _check_head_keys(source, key_cols)
    source.head_records = None
    if HASH_COL in key_cols:
        raise ConfigError(f"{HASH_COL!r} is reserved by dpa")
    if bound.name in key_cols:
        raise ConfigError(
            f"the reducer's output column {bound.name!r} has the same name as a key column; "
            f"give the reducer another name, e.g. {type(unwrap(bound)[0]).__name__}(..., name='{bound.name}_out')"
        )
    if config.input_combined:
        _check_combined_input(config, policy, bound, map_fn, key_fn, key_cols, schema)
    elif schema is not None:
        bound.validate(schema)

    needed = None if config.input_combined else bound.input_columns()
    keep = None if needed is None else [c for c in needed if c not in key_cols]
    plan = JobPlan(
        key_cols=key_cols, key_fn=key_fn, map_fn=map_fn, record_kind=record_kind, input_kind=source.kind,
        keep_cols=keep, reducer=bound, policy=policy, num_mappers=config.num_mappers,
        num_reducers=config.num_reducers, queue_capacity=config.queue_capacity, chunk_size=config.chunk_size,
        lb_interval_s=config.lb_interval_s, report_interval_s=config.report_interval_s,
        output_schema=output_schema, input_schema=schema, job_id=uuid.uuid4().hex[:8],
        combine=(bool(config.map_side_combine) and policy.routes_by_key and isinstance(inner, ColumnarReducer)
                 and unwrap(bound)[1] == 0 and not config.input_combined),
        input_combined=bool(config.input_combined),
        key_types=[t if t is not None and not pa.types.is_null(t) else None for t in key_types] or None,
    )
    if blocks is not None and map_fn is None and not config.input_combined:
        # Blocks read on the driver are checked against each other as they are handed out,
        # with their position in the input for the messages.
        plan.checked_upstream = key_fn is None and source.pieces is None
        blocks = _checked_blocks(blocks, plan)
    return plan, blocks


def _checked_blocks(blocks: Iterator[pa.Table], plan: JobPlan) -> Iterator[pa.Table]:
    """``blocks``, each checked by a :class:`BlockTypes` (key columns keep their class, value
    columns promote exactly), with messages naming the block and its records."""
    tracker = BlockTypes(plan)
    if plan.key_fn is not None:  # the key columns do not exist yet
        tracker.key_cols = []
    wanted = None if plan.keep_cols is None else set(tracker.key_cols) | set(plan.keep_cols)
    offset = 0
    for i, block in enumerate(blocks):
        n = block.num_rows
        if n:
            table = block if wanted is None else block.select([c for c in block.column_names if c in wanted])
            tracker.check(table, functools.partial(_block_name, i, offset, n))
        offset += n
        yield block


def _block_name(index: int, offset: int, rows: int) -> str:
    return f"block {index} of the input (records {offset}-{offset + rows - 1})"


def _column_values(records: list[Any], kind: str, name: str) -> list[Any]:
    if kind == "dict":
        return [r.get(name) for r in records]
    if kind == "tuple":
        pos = int(name[1:])
        return [r[pos] for r in records]
    return list(records)


def _check_head_keys(source: Source, key_cols: list[str]) -> None:
    """Ints mixed with floats in a key column of the first block of records (Arrow made them
    all floats) raise :class:`SchemaError`."""
    if source.head_records is None or source.schema is None:
        return
    for name in key_cols:
        if name in source.schema.names and pa.types.is_floating(source.schema.field(name).type):
            values = _column_values(source.head_records, source.kind, name)
            check_float_keys(values, name, source.head_records, source.kind)


def _classify_range_error(exc: IntegerRangeError, kind: str, key: Any) -> DPAError:
    """The error for an int beyond int64 in records of ``kind``: a :class:`KeyEncodingError`
    if its field is a key column named by ``key``, else ``exc`` itself (a :class:`SchemaError`)."""
    names: list[Any] = []
    if key is None and kind == "scalar":
        names = [SCALAR_COLUMN]
    elif isinstance(key, int) and not isinstance(key, bool) and key >= 0:
        names = [tuple_columns(key + 1)[key]]
    elif isinstance(key, str):
        names = [key]
    elif isinstance(key, (list, tuple)):
        names = list(key)
    if exc.column in names:
        return int_key_out_of_range(exc.value, exc.where(kind))
    return exc


def _check_combined_input(config: JobConfig, policy: Any, bound: Reducer, map_fn: Any, key_fn: Any,
                          key_cols: list[str], schema: pa.Schema | None) -> None:
    """Validates a job whose source holds partial states (``JobConfig.input_combined``)."""
    inner, cost, _ = unwrap(bound)
    problems = []
    if not isinstance(inner, ColumnarReducer) or cost:
        problems.append(f"a built-in reducer without cost (got {bound!r})")
    if map_fn is not None or key_fn is not None:
        problems.append("no map_fn and a column key")
    if not policy.routes_by_key:
        problems.append(f"a policy that routes by key alone (got {config.policy!r})")
    if problems:
        raise ConfigError("input_combined=True needs " + "; ".join(problems))
    if schema is not None:
        want = [*key_cols, *inner.state_columns(), WEIGHT_COL]
        missing = [c for c in want if c not in schema.names]
        if missing:
            raise SchemaError(
                f"input_combined=True but the source lacks column(s) {missing}; partial states have "
                f"columns {want} (make them with reducer.partial_from_batch(table, keys, WEIGHT_COL))"
            )


def records_sample(block: pa.Table, map_fn: Any, input_kind: str, record_kind: str) -> list[Any]:
    """A few records as the key function will see them (after ``map_fn``)."""
    records = table_to_records(block.slice(0, 16), input_kind)
    if map_fn is None:
        return records
    if isinstance(map_fn, BatchMap):
        return table_to_records(map_fn(block.slice(0, 16)), "dict")
    out: list[Any] = []
    for r in records:
        out.extend(map_fn(r) or ())
    return out


def empty_input_table(plan: JobPlan) -> pa.Table:
    """An empty table shaped like the records reducers receive (for empty-result schemas)."""
    schema = plan.input_schema
    if plan.input_combined and schema is not None:  # partial states: their own columns
        base = schema if HASH_COL in schema.names else schema.append(pa.field(HASH_COL, pa.uint32()))
        return base.empty_table()
    fields = []
    for c in plan.key_cols:
        fields.append(schema.field(c) if schema is not None and c in schema.names else pa.field(c, pa.null()))
    for c in plan.keep_cols or []:
        fields.append(schema.field(c) if schema is not None and c in schema.names else pa.field(c, pa.null()))
    fields.append(pa.field(HASH_COL, pa.uint32()))
    return pa.schema(fields).empty_table()
