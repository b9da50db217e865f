"""Inputs: every source ``dpa.run`` accepts, normalised to a stream of Arrow blocks (:class:`Source`)."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from dpa.errors import ConfigError, DPAError, JobFailedError, SchemaError
from dpa.input.records import (
    IntegerRangeError,
    record_kind_of,
    records_to_table,
)
from dpa.keys.encoding import key_type_class

logger = logging.getLogger(__name__)

#: Rows per input block of a streamed source (an iterable or generator), and the fewest of
#: a sized one (``JobConfig.batch_size=None``, :func:`block_rows`).
DEFAULT_BATCH_SIZE = 1_048_576
#: A sized source (an in-memory table, parquet files) is cut into this many blocks per
#: mapper when ``JobConfig.batch_size`` is None (one: every block costs calls and a
#: combine of its own, and a second one per mapper did not even out the mappers' work
#: enough to pay for that)...
AUTO_BLOCKS_PER_MAPPER = 1
#: ...or into more, as many per mapper, when a block would be larger than this (a block
#: of a few wide rows may still be larger: never fewer than :data:`DEFAULT_BATCH_SIZE` rows).
#: Ray Data's default target for its blocks is the same.
AUTO_MAX_BLOCK_BYTES = 128 << 20


def block_rows(batch_size: int | None, num_rows: int | None = None, nbytes: int | None = None,
               num_mappers: int = 1) -> int:
    """Rows per input block: ``batch_size`` if given, else sized from the input.

    Every block costs a job calls (hand-out, pushes, reports) and map-side combines its
    keys on its own, so fewer, larger blocks are cheaper: a source of known size is cut
    into :data:`AUTO_BLOCKS_PER_MAPPER` blocks per mapper or, if such a block would pass
    :data:`AUTO_MAX_BLOCK_BYTES` (memory: a few blocks per mapper wait in the object
    store), into the fewest blocks under it that are a whole number per mapper (so that
    no mapper gets a block more than another; parquet pieces also end where a file or a
    row group does, :meth:`ParquetFiles.pieces`); never into blocks of fewer than
    :data:`DEFAULT_BATCH_SIZE` rows. A source of unknown size gets the latter.

    Args:
        batch_size: ``JobConfig.batch_size`` (None = sized from the input).
        num_rows: The input's rows, if known.
        nbytes: Its size in memory (Arrow buffers), if known.
        num_mappers: ``JobConfig.num_mappers``.
    """
    if batch_size is not None:
        return batch_size
    if not num_rows:
        return DEFAULT_BATCH_SIZE
    rows = -(-num_rows // _auto_blocks(nbytes or 0, num_mappers))
    return max(DEFAULT_BATCH_SIZE, rows)


def _auto_blocks(nbytes: int, num_mappers: int) -> int:
    """Blocks of an input of ``nbytes`` sized from the input, before the row floor:
    :data:`AUTO_BLOCKS_PER_MAPPER` per mapper, or as many more per mapper as keep each
    under :data:`AUTO_MAX_BLOCK_BYTES`."""
    mappers = max(1, num_mappers)
    return mappers * max(AUTO_BLOCKS_PER_MAPPER, -(-nbytes // (AUTO_MAX_BLOCK_BYTES * mappers)))


def group_blocks(sizes: list[tuple[int, int]], num_mappers: int, batch_size: int | None = None,
                 breaks: list[bool] | None = None) -> list[range]:
    """Runs of consecutive blocks of a source that come in blocks of their own (a
    materialized Ray Dataset), each run read by one mapper as one input block.

    A Ray Dataset's blocks are sized for Ray Data's tasks, often many small ones; each
    input block costs a job calls and a map-side combine of its own (whose partial states
    are about one row per distinct key of the block), so runs are sized like the blocks
    of an in-memory table (:func:`block_rows`): with ``batch_size`` None, the runs' bytes
    are about equal, :data:`AUTO_BLOCKS_PER_MAPPER` per mapper or more so that none passes
    :data:`AUTO_MAX_BLOCK_BYTES`, but no more runs than blocks of :data:`DEFAULT_BATCH_SIZE`
    rows would be; with ``batch_size``, runs of about that many rows. A run
    ends before a block that would carry it more than halfway past its target, or past
    the byte cap; a block larger than the target is a run of its own; empty blocks join
    the run after them.

    Args:
        sizes: ``(rows, bytes)`` of each block, in order (bytes 0 where unknown).
        num_mappers: ``JobConfig.num_mappers``.
        batch_size: ``JobConfig.batch_size`` (None = sized from the blocks).
        breaks: Per block, True if it may not join the run before it (its schema differs).

    Returns:
        The runs, as ranges of block positions covering every block in order.
    """
    if not sizes:
        return []
    total_rows = sum(rows for rows, _ in sizes)
    total_bytes = sum(nbytes for _, nbytes in sizes)
    by_bytes = batch_size is None and total_bytes > 0 and all(nbytes > 0 or not rows for rows, nbytes in sizes)
    if batch_size is not None:
        target = float(max(1, batch_size))
    else:
        runs = max(1, min(_auto_blocks(total_bytes, num_mappers), -(-total_rows // DEFAULT_BATCH_SIZE)))
        target = (total_bytes if by_bytes else total_rows) / runs
    out: list[range] = []
    start, acc, acc_bytes = 0, 0.0, 0
    for i, (rows, nbytes) in enumerate(sizes):
        size = nbytes if by_bytes else rows
        if i > start and acc > 0 and ((breaks is not None and breaks[i]) or acc + size / 2 > target
                          or (by_bytes and acc_bytes + nbytes > AUTO_MAX_BLOCK_BYTES)):
            out.append(range(start, i))
            start, acc, acc_bytes = i, 0.0, 0
        acc += size
        acc_bytes += nbytes
    out.append(range(start, len(sizes)))
    return out


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
    block_rows: int = DEFAULT_BATCH_SIZE  # rows per input block (the last may have fewer)
    table: pa.Table | None = None  # an in-memory table whose blocks are sized from the input (cut_table)


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

    @property
    def nbytes(self) -> int:
        """Uncompressed bytes of the columns read, in all files (from their footers)."""
        names = self.schema.names
        total = 0
        for meta in self._metas:  # type: ignore[attr-defined]
            for i in range(meta.num_row_groups):
                group = meta.row_group(i)
                for j in range(group.num_columns):
                    column = group.column(j)
                    if column.path_in_schema.split(".")[0] in names:
                        total += column.total_uncompressed_size
        return total

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


def cut_table(source: Source, columns: set[str] | None, num_mappers: int) -> None:
    """Sizes the blocks of an in-memory table (``source.table``) by the bytes of the columns
    the job reads (``columns``; None: all), which are all that reach the object store: a
    column the job does not read must not make its blocks smaller (:func:`block_rows`)."""
    table = source.table
    if table is None:
        return
    read = table if columns is None else table.select([c for c in table.column_names if c in columns])
    source.block_rows = block_rows(None, table.num_rows, read.nbytes, num_mappers)
    source.blocks = _table_blocks(table, source.block_rows)


def _table_blocks(table: pa.Table, batch_size: int) -> Iterator[pa.Table]:
    for start in range(0, table.num_rows, batch_size):
        yield table.slice(start, batch_size)


def _record_blocks(rest: Iterator[Any], kind: str, batch_size: int, schema: pa.Schema | None, source: Source,
                   offset: int) -> Iterator[pa.Table]:
    """Blocks of records after the first, each converted on its own (types are never cast to
    the first block's; ``schema`` only fixes the columns). Key columns are those
    ``source.key_hint`` names once :func:`build_plan` has set it."""
    while True:
        chunk = _take(rest, batch_size)
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


def _dataset_probe(dataset: Any, rows: int = 64) -> pa.Table | None:
    """Up to ``rows`` rows of a Ray Dataset (None if it is empty).

    A materialized dataset's blocks are in the object store already: the rows are read from
    its first non-empty block, so no Ray Data job runs (each costs about a second on a
    small machine). Any other dataset runs ``take_batch`` once.
    """
    from ray.data.dataset import MaterializedDataset

    if isinstance(dataset, MaterializedDataset):
        try:
            return _first_block_rows(dataset, rows)
        except Exception:  # (another Ray version's bundles) -> the generic way below
            logger.debug("reading a probe from the dataset's blocks failed", exc_info=True)
    try:
        return _as_arrow(dataset.take_batch(rows, batch_format="pyarrow"))
    except ValueError:  # an empty dataset
        return None


def _first_block_rows(dataset: Any, rows: int) -> pa.Table | None:
    import ray

    for bundle in dataset.iter_internal_ref_bundles():
        for entry, ref, piece in zip(bundle.blocks, bundle.block_refs, bundle.slices):
            if entry.metadata.num_rows == 0:
                continue
            table = _as_arrow(ray.get(ref))
            if piece is not None:
                table = table.slice(piece.start_offset, piece.end_offset - piece.start_offset)
            if table.num_rows:
                return table.slice(0, rows)
    return None


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


def _take(it: Iterator[Any], n: int) -> list[Any]:
    """Up to ``n`` items of the user's iterable, an exception it raises (not dpa's own) turned
    into :class:`~dpa.errors.JobFailedError` wherever dpa reads it: at planning, on the driver
    or in the in-process runtime. One ``try`` per batch, not per record."""
    try:
        return list(itertools.islice(it, n))
    except DPAError:
        raise
    except Exception as exc:
        raise JobFailedError(f"reading the input failed: {type(exc).__name__}: {exc}") from exc


def _tables(it: Iterator[Any]) -> Iterator[Any]:
    """The rest of a stream of tables, read one at a time through :func:`_take`."""
    while item := _take(it, 1):
        yield item[0]


def pandas_table(frame: Any) -> pa.Table:
    """``frame`` (a ``pandas.DataFrame``) as Arrow, its index left out.

    pyarrow types an ``object`` column by its values, so an empty frame's string columns
    would come out as ``null``: they are typed ``string`` instead (what ``object`` columns
    hold, and what the same frame with rows gives), so that a result keyed by one keeps
    its key type.
    """
    table = pa.Table.from_pandas(frame, preserve_index=False)
    if table.num_rows:
        return table
    for index, column in enumerate(table.schema):
        if (pa.types.is_null(column.type) and list(frame.columns).count(column.name) == 1
                and frame[column.name].dtype == object):
            table = table.set_column(index, column.with_type(pa.string()), pa.array([], pa.string()))
    return table


def normalize_source(source: Any, batch_size: int | None, num_mappers: int = 1) -> Source:
    """Wraps any supported input as a :class:`Source`.

    Supported: ``pyarrow.Table``, ``pyarrow.RecordBatch``, ``pandas.DataFrame``,
    ``ray.data.Dataset``, :class:`ArrowRefs`, :class:`ParquetFiles`, an iterable (e.g. a generator) of Arrow tables, record batches or
    DataFrames (streamed, re-cut into blocks), and any iterable of records (dicts, tuples
    or scalars). Blocks have ``batch_size`` rows, or as :func:`block_rows` sizes them from
    the input if it is None (:attr:`Source.block_rows` says how many).
    """
    if isinstance(source, pa.RecordBatch):
        source = pa.Table.from_batches([source])
    try:
        import pandas as pd

        if isinstance(source, pd.DataFrame):
            source = pandas_table(source)
    except ImportError:  # pragma: no cover
        pass
    if isinstance(source, pa.Table):
        rows = block_rows(batch_size, source.num_rows, source.nbytes, num_mappers)
        return Source("dict", source.schema, _table_blocks(source, rows), source.num_rows, block_rows=rows,
                      table=source if batch_size is None else None)
    if isinstance(source, ArrowRefs):
        return Source("dict", source.schema, None, None, ray_dataset=source)
    if isinstance(source, ParquetFiles):
        rows = block_rows(batch_size, source.num_rows, source.nbytes, num_mappers)
        pieces = tuple(source.pieces(rows))
        return Source("dict", source.schema, (p.read() for p in pieces), source.num_rows, pieces=pieces,
                      block_rows=rows)
    batch_size = block_rows(batch_size)
    if _is_ray_dataset(source):
        probe = _dataset_probe(source)
        schema = probe.schema if probe is not None else _dataset_schema(source)
        return Source("dict", schema, None, None, ray_dataset=source, probe=probe)
    if isinstance(source, (str, bytes, dict)) or not isinstance(source, Iterable):
        raise ConfigError(
            f"source must be a pyarrow Table, pandas DataFrame, ray.data.Dataset, Spark DataFrame or an "
            f"iterable of records; got {type(source).__name__}"
        )
    it = iter(source)
    first = _take(it, 1)
    if first and _is_arrow_block(first[0]):
        # A stream of Arrow tables / record batches / DataFrames: consumed lazily, block by
        # block, so the input never has to fit in memory.
        head = first[0]
        head = pa.Table.from_batches([head]) if isinstance(head, pa.RecordBatch) else _as_arrow(head)
        return Source("dict", head.schema, _arrow_stream(head, _tables(it), batch_size), None, block_rows=batch_size)
    first += _take(it, batch_size - 1)
    if not first:
        return Source("scalar", None, iter(()), 0)
    kind = record_kind_of(first[0])
    num_rows = len(source) if hasattr(source, "__len__") else None
    try:
        head = records_to_table(first, kind)
    except IntegerRangeError as exc:  # a key error or a value error: build_plan knows which
        return Source(kind, None, iter(()), num_rows, deferred=exc)
    schema = head.schema
    src = Source(kind, schema, None, num_rows, head_records=first, block_rows=batch_size)

    def blocks() -> Iterator[pa.Table]:
        yield head
        yield from _record_blocks(it, kind, batch_size, schema, src, len(first))

    src.blocks = blocks()
    return src
