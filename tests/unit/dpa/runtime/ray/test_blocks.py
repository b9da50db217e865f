"""A Ray Dataset's input items: block sizes read from bundles, and runs of blocks fetched as one table."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pyarrow as pa

from dpa.runtime.ray.blocks import BlockRun, _entries, fetch_block


def _bundle(blocks, slices, schema="s"):
    entries = tuple(SimpleNamespace(metadata=SimpleNamespace(num_rows=rows, size_bytes=nbytes))
                    for _, rows, nbytes in blocks)
    return SimpleNamespace(blocks=entries, block_refs=[ref for ref, _, _ in blocks], slices=slices, schema=schema)


def test_entries_read_rows_and_bytes_from_the_metadata_and_scale_them_to_a_slice():
    dataset = SimpleNamespace(iter_internal_ref_bundles=lambda: iter([
        _bundle([("a", 100, 800), ("b", 100, 800)], [None, SimpleNamespace(start_offset=25, end_offset=75)]),
        _bundle([("c", None, None)], [None], schema=None),
    ]))
    assert list(_entries(dataset)) == [("a", None, 100, 800, "s"), ("b", (25, 75), 50, 400, "s"),
                                       ("c", None, None, 0, None)]


def _ready(value):
    future = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


def _fetch(blocks, slices):
    async def go():
        return await fetch_block((BlockRun(tuple(_ready(b) for b in blocks), tuple(slices)), None))

    return asyncio.run(go())


def test_a_run_is_its_blocks_tables_in_order_sliced_and_as_arrow():
    a = pa.table({"k": [1, 2, 3], "v": [10, 20, 30]})
    b = pa.table({"k": [4.5, 5.5], "v": [40, 50]})  # (the mapper checks each block's types)
    got = _fetch([a, b.slice(0, 0), b], [(1, 3), None, None])
    assert [t.to_pydict() for t in got] == [{"k": [2, 3], "v": [20, 30]}, {"k": [], "v": []},
                                            {"k": [4.5, 5.5], "v": [40, 50]}]
    pandas = _fetch([a.to_pandas(), b.to_pandas()], [None, (1, 2)])  # (pandas blocks become Arrow)
    assert [t.to_pydict() for t in pandas] == [a.to_pydict(), {"k": [5.5], "v": [50]}]
    assert all(isinstance(t, pa.Table) for t in pandas)
