"""Turning ``dpa.run``'s arguments into a validated, picklable :class:`JobPlan`.

Everything that can be checked without running the job is checked here, before any
actor starts: the policy, the key (columns exist, types encodable), the reducer (fits the
column types, can merge if the policy moves keys), and ``map_fn`` (dry-run on the first
record to learn its output shape).
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from dpa.config import JobConfig
from dpa.errors import ConfigError, DPAError, KeyEncodingError, SchemaError
from dpa.keys import encode_key
from dpa.policy import PolicySpec, make_policy
from dpa.records import (
    SCALAR_COLUMN,
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


def _record_blocks(first: list[Any], rest: Iterator[Any], kind: str, batch_size: int, schema: pa.Schema | None) -> Iterator[pa.Table]:
    it = itertools.chain(first, rest)
    while True:
        chunk = list(itertools.islice(it, batch_size))
        if not chunk:
            return
        yield records_to_table(chunk, kind, schema)


def _arrow_stream(head: pa.Table, rest: Iterator[Any], batch_size: int) -> Iterator[pa.Table]:
    """Blocks of ``batch_size`` rows (the last may be shorter) from a stream of Arrow
    tables/record batches (or pandas DataFrames), all cast to the first one's schema.
    Small tables are coalesced, large ones cut."""
    schema = head.schema
    pending: list[pa.Table] = []
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
            try:
                item = item.select(schema.names).cast(schema)
            except (KeyError, pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as exc:
                raise SchemaError(f"table {i} of the stream has schema {item.schema}, the first one {schema}") from exc
        pending.append(item)
        rows += item.num_rows
        if rows >= batch_size:
            table = pa.concat_tables(pending)
            full = (rows // batch_size) * batch_size
            yield from _table_blocks(table.slice(0, full), batch_size)
            pending = [table.slice(full)] if rows > full else []
            rows -= full
    if rows:
        yield pa.concat_tables(pending)


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
    head = records_to_table(first, kind)
    schema = head.schema
    num_rows = len(source) if hasattr(source, "__len__") else None

    def blocks() -> Iterator[pa.Table]:
        yield head
        yield from _record_blocks([], it, kind, batch_size, schema)

    return Source(kind, schema, blocks(), num_rows)


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

    def apply_map(self, block: pa.Table) -> pa.Table:
        """Runs ``map_fn`` over a block of source records."""
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
                if produced is not None:
                    out.extend(produced)
            except Exception as exc:
                raise UserCodeError(f"map_fn raised {type(exc).__name__}: {exc} on record {record!r}", record=record) from exc
        return records_to_table(out, self.record_kind, self.output_schema)

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
        """Source block -> mapped records with key columns, projected to what reducers need."""
        table = self.apply_key(self.apply_map(block))
        if self.keep_cols is not None:
            table = table.select(self.key_cols + [c for c in self.keep_cols if c not in self.key_cols])
        return table


def add_key_columns(table: pa.Table, keys: list[Any], key_cols: list[str], records: list[Any]) -> pa.Table:
    """Appends key values returned by a key function as columns (tuples -> several)."""
    for key, record in zip(keys, records):
        try:
            encode_key(key)
        except KeyEncodingError as exc:
            raise KeyEncodingError(f"{exc} (key of record {record!r})") from exc
    if len(key_cols) == 1:
        columns = [keys]
    else:
        for key, record in zip(keys, records):
            if not isinstance(key, tuple) or len(key) != len(key_cols):
                raise SchemaError(f"key function returned {key!r} for record {record!r}; expected a tuple of {len(key_cols)} values like the first record's key")
        columns = [list(c) for c in zip(*keys)] if keys else [[] for _ in key_cols]
    for name, values in zip(key_cols, columns):
        try:
            arr = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise SchemaError(f"key function returned values of mixed types for {name!r} ({exc}); return one type per key position") from exc
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
                schema = records_to_table(sample, record_kind).schema

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
    if callable(key) and not isinstance(key, (str, list, tuple)):
        key_fn = key
        key_cols = [KEY_COLUMN]
        first = peek() if schema is not None else None
        probe = records_sample(first, map_fn, source.kind, record_kind) if first is not None else []
        if probe:
            try:
                k0 = key_fn(probe[0])
            except Exception as exc:
                raise UserCodeError(f"key function raised {type(exc).__name__}: {exc} on record {probe[0]!r}") from exc
            if isinstance(k0, tuple):
                key_cols = [f"{KEY_COLUMN}_{i}" for i in range(len(k0))]
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
    )
    return plan, blocks


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
