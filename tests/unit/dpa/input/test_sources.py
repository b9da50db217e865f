"""Input blocks: how many rows each block of a source gets (``dpa.input.sources.block_rows``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import dpa
from dpa.engine.planning import build_plan
from dpa.errors import ConfigError
from dpa.input.sources import (
    AUTO_BLOCKS_PER_MAPPER,
    AUTO_MAX_BLOCK_BYTES,
    DEFAULT_BATCH_SIZE,
    block_rows,
    group_blocks,
    normalize_source,
)


def test_block_rows_rule():
    # Given: as set. Unknown size: the default. Known: one block per mapper or, past the
    # byte cap, the fewest blocks under it that are a whole number per mapper; never below
    # the default.
    assert block_rows(300, 10**9, 10**12, 8) == 300
    assert block_rows(None) == block_rows(None, 0, 0, 4) == DEFAULT_BATCH_SIZE
    assert block_rows(None, 10_000, 80_000, 2) == DEFAULT_BATCH_SIZE
    assert block_rows(None, 10_000_000, 80_000_000, 2) == 5_000_000
    assert block_rows(None, 10_000_001, 80_000_008, 2) == 5_000_001  # (rounded up: no tiny last block)
    assert block_rows(None, 10**8, 10**12, 2) == DEFAULT_BATCH_SIZE  # wide rows: the default, not fewer
    assert AUTO_BLOCKS_PER_MAPPER == 1
    cap_rows = AUTO_MAX_BLOCK_BYTES // 8  # int64 rows of a block at the cap
    for rows, mappers, blocks in [(10**9, 2, 60), (5 * cap_rows, 2, 6), (5 * cap_rows, 5, 5),
                                  (5 * cap_rows + 1, 5, 10), (3 * cap_rows, 4, 4)]:
        got = block_rows(None, rows, 8 * rows, mappers)
        assert got <= cap_rows and -(-rows // got) == blocks, (rows, mappers)  # under the cap, even


def _runs(sizes, mappers, batch_size=None, breaks=None):
    return [list(run) for run in group_blocks(sizes, mappers, batch_size, breaks)]


def test_a_datasets_blocks_go_in_runs_sized_like_a_tables_blocks():
    mb = 1 << 20
    # 16 blocks of 625k rows (10 MB): a run of 8 per mapper, as a table's 2 blocks.
    assert _runs([(625_000, 10 * mb)] * 16, 2) == [list(range(8)), list(range(8, 16))]
    # 17: the runs end where the next block would pass its target by more than half.
    assert [len(r) for r in _runs([(625_000, 10 * mb)] * 17, 2)] == [9, 8]
    # No more runs than blocks of DEFAULT_BATCH_SIZE rows would be: small datasets are one run.
    assert _runs([(1000, 8000)] * 12, 4) == [list(range(12))]
    assert _runs([(500_000, 4 * mb)] * 3, 2) == [[0, 1], [2]]  # (1.5M rows: 2 runs, as a table's 2 blocks)
    # Past the byte cap, runs under it, a whole number per mapper where the blocks allow.
    big = [(4_000_000, 32 * mb)] * 16  # 512 MB over 2 mappers: 4 runs of 128 MB
    runs = _runs(big, 2)
    assert [len(r) for r in runs] == [4] * 4
    assert all(sum(big[i][1] for i in r) <= AUTO_MAX_BLOCK_BYTES for r in runs)
    # A block larger than the target (or the cap) is a run of its own.
    assert _runs([(2_000_000, 16 * mb), (8_000_000, 300 * mb), (2_000_000, 16 * mb)], 2) == [[0], [1], [2]]
    # Unknown bytes: sized by rows.
    assert _runs([(1_000_000, 0)] * 4, 2) == [[0, 1], [2, 3]]
    assert group_blocks([], 2) == []


def test_given_batch_size_the_runs_are_about_that_many_rows():
    assert _runs([(250, 4000)] * 12, 2, batch_size=1000) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert _runs([(5000, 80_000)] * 3, 2, batch_size=1000) == [[0], [1], [2]]  # larger blocks stay whole


def test_a_run_never_spans_a_change_of_schema_and_empty_blocks_join_the_next():
    sizes = [(2_000_000, 16 << 20)] * 4
    assert _runs(sizes, 1, breaks=[False, False, True, False]) == [[0, 1], [2, 3]]
    assert _runs([(0, 0), (0, 0), (10, 80), (10, 80)], 2) == [[0, 1, 2, 3]]
    runs = _runs([(0, 0)] + [(2_000_000, 16 << 20)] * 2, 2)
    assert runs == [[0, 1], [2]]


@pytest.mark.parametrize("as_pandas", [False, True])
def test_tables_are_cut_by_their_size(as_pandas):
    table = pa.table({"key": np.arange(5_000_000, dtype=np.int64)})
    source = table.to_pandas() if as_pandas else table
    src = normalize_source(source, None, num_mappers=2)
    assert src.block_rows == 2_500_000
    assert [b.num_rows for b in src.blocks] == [2_500_000] * 2
    given = normalize_source(table, 1_000_000, num_mappers=2)
    assert given.block_rows == 1_000_000 and len(list(given.blocks)) == 5


def test_streams_keep_the_default_block():
    src = normalize_source(({"k": i % 3} for i in range(10)), None, num_mappers=2)
    assert src.block_rows == DEFAULT_BATCH_SIZE
    tables = normalize_source(iter([pa.table({"k": [1, 2]})] * 3), None)
    assert tables.block_rows == DEFAULT_BATCH_SIZE


def test_config_default_is_sized_from_the_input_and_the_plan_knows_it():
    assert dpa.JobConfig().batch_size is None
    with pytest.raises(ConfigError, match="batch_size"):
        dpa.JobConfig(batch_size=0)
    table = pa.table({"key": np.arange(3_000_000, dtype=np.int64) % 7})
    config = dpa.JobConfig(runtime="local", num_mappers=1, policy="doubling")
    plan, _ = build_plan(normalize_source(table, None, 1), "key", dpa.Count(), None, config)
    assert plan.policy.min_gap == 3_000_000 // config.resolved().num_reducers  # (M * block rows // R)
    out = dpa.run(table, key="key", config=config).to_pandas().sort_values("key")
    assert out["count"].tolist() == pd.Series(np.arange(3_000_000) % 7).value_counts().sort_index().tolist()
