"""The input blocks of a Ray Dataset as mappers take them: one block ref, or a run of them.

A materialized dataset's blocks are sized for Ray Data's tasks, often many small ones (a
dataset made from a list of tables, or read from many files). Each input block of a job
costs calls and a map-side combine of its own, whose partial states hold about one row per
distinct key of the block, so a dataset of 16 blocks routes and merges several times the
partial states of the same rows in 2. The driver hands the mappers runs of consecutive
blocks instead (:class:`BlockRun`, sized by :func:`~dpa.input.sources.group_blocks` from
the blocks' metadata, without reading them); a mapper fetches a run's blocks, maps each
and checks its types as a block of its own, and combines them as one. A dataset still
being computed streams its blocks one by one, as they come.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from dpa.input.sources import group_blocks
from dpa.runtime.ray.member import as_table

__all__ = ["BlockRun", "dataset_items", "fetch_block"]


@dataclass(frozen=True)
class BlockRun:
    """Consecutive blocks of a dataset that one mapper reads as one input block.

    Attributes:
        refs: The blocks' object refs, in order.
        slices: Per block, the ``(start, end)`` rows to read, or None for all of it.
    """

    refs: tuple[Any, ...]
    slices: tuple[tuple[int, int] | None, ...]


def _entries(dataset: Any) -> Iterator[tuple[Any, tuple[int, int] | None, int | None, int, Any]]:
    """``(ref, row slice, rows or None where unknown, bytes, schema)`` of each block of
    ``dataset``, in order."""
    for bundle in dataset.iter_internal_ref_bundles():
        for entry, ref, piece in zip(bundle.blocks, bundle.block_refs, bundle.slices):
            meta = entry.metadata
            rows, nbytes = meta.num_rows, meta.size_bytes or 0
            row_slice = None
            if piece is not None:
                row_slice = (piece.start_offset, piece.end_offset)
                part = piece.end_offset - piece.start_offset
                nbytes = nbytes * part // rows if rows else nbytes
                rows = part
            yield ref, row_slice, rows, nbytes, bundle.schema


def _same_schema(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # (schemas of different kinds)
        return False


def dataset_items(dataset: Any, num_mappers: int, batch_size: int | None) -> Iterator[tuple[Any, Any]]:
    """The job's input items, ``(block ref or BlockRun, row slice or None)``, of a Ray Dataset.

    A materialized dataset's blocks go in runs (:func:`~dpa.input.sources.group_blocks`
    on their rows and bytes; a run never spans a change of schema); a lazy one's, one by one
    as its execution yields them, as do a materialized one's whose metadata lack rows.
    """
    from ray.data.dataset import MaterializedDataset

    if not isinstance(dataset, MaterializedDataset):
        yield from ((ref, row_slice) for ref, row_slice, *_ in _entries(dataset))
        return
    entries = list(_entries(dataset))
    if any(rows is None for _, _, rows, _, _ in entries):
        yield from ((ref, row_slice) for ref, row_slice, *_ in entries)
        return
    breaks = [i > 0 and not _same_schema(entries[i - 1][4], e[4]) for i, e in enumerate(entries)]
    for run in group_blocks([(rows, nbytes) for _, _, rows, nbytes, _ in entries], num_mappers, batch_size, breaks):
        if len(run) == 1:
            ref, row_slice, *_ = entries[run[0]]
            yield ref, row_slice
        else:
            yield BlockRun(tuple(entries[i][0] for i in run), tuple(entries[i][1] for i in run)), None


def _sliced(table: pa.Table, row_slice: tuple[int, int] | None) -> pa.Table:
    return table if row_slice is None else table.slice(row_slice[0], row_slice[1] - row_slice[0])


async def fetch_block(item: tuple[Any, Any]) -> pa.Table | tuple[pa.Table, ...]:
    """The table of an input item, fetched from the object store; for a run, its blocks'
    tables in order (the mapper maps each on its own and joins them,
    :func:`~dpa.engine.mapper.join_blocks`)."""
    ref, row_slice = item
    if not isinstance(ref, BlockRun):
        return _sliced(as_table(await ref), row_slice)
    blocks = await asyncio.gather(*ref.refs)
    return tuple(_sliced(as_table(b), s) for b, s in zip(blocks, ref.slices))
