"""A Ray Dataset's input items: block sizes read from bundles, and runs of blocks fetched as one table."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pyarrow as pa
import pytest

from dpa.errors import SchemaError
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
                                       ("c", None, 0, 0, None)]


def _ready(value):
    future = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


def _fetch(blocks, slices):
    async def go():
        return await fetch_block((BlockRun(tuple(_ready(b) for b in blocks), tuple(slices)), None))

    return asyncio.run(go())


def test_a_run_is_one_table_of_its_blocks_rows_in_order():
    a = pa.table({"k": [1, 2, 3], "v": [10, 20, 30]})
    b = pa.table({"k": [4, 5], "v": [40, 50]})
    got = _fetch([a, b.slice(0, 0), b], [(1, 3), None, None])
    assert got.to_pydict() == {"k": [2, 3, 4, 5], "v": [20, 30, 40, 50]}
    pandas = _fetch([a.to_pandas(), b.to_pandas()], [None, (1, 2)])  # (pandas blocks become Arrow)
    assert pandas.to_pydict() == {"k": [1, 2, 3, 5], "v": [10, 20, 30, 50]}
    empty = _fetch([a.slice(0, 0), b.slice(0, 0)], [None, None])
    assert empty.num_rows == 0 and empty.schema == a.schema


def test_a_column_of_nulls_takes_the_other_blocks_type_and_other_differences_fail_clearly():
    nulls = pa.table({"k": [1], "v": pa.nulls(1)})
    ints = pa.table({"k": [2], "v": [2]})
    got = _fetch([nulls, ints], [None, None])
    assert got.schema.field("v").type == pa.int64() and got["v"].to_pylist() == [None, 2]
    floats = pa.table({"k": [3.0], "v": [3]})  # (a float key 3.0 is not the int key 3)
    with pytest.raises(SchemaError, match="different column types.*cast the dataset to one schema"):
        _fetch([ints, floats], [None, None])
