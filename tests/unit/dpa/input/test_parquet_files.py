"""``dpa.ParquetFiles``: footers read on the driver, row-group pieces, errors, local runtime."""

from __future__ import annotations

import collections

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dpa


@pytest.fixture()
def files(tmp_path):
    paths = []
    for i, n in enumerate((1000, 250, 0)):
        table = pa.table({"k": pa.array([f"w{j % 13}" for j in range(n)], pa.string()),
                          "v": pa.array(range(n), pa.int64())})
        path = tmp_path / f"part-{i}.parquet"
        pq.write_table(table, path, row_group_size=100)
        paths.append(str(path))
    return paths


def test_pieces_are_runs_of_row_groups_of_about_batch_size(files):
    src = dpa.ParquetFiles(files, ["k"])
    assert src.num_rows == 1250 and src.schema.names == ["k"]
    pieces = src.pieces(300)
    assert [p.num_rows for p in pieces] == [300, 300, 300, 100, 250]
    assert [p.row_groups for p in pieces[:4]] == [(0, 1, 2), (3, 4, 5), (6, 7, 8), (9,)]
    assert pieces[-1].path == files[1] and pieces[0].read().column_names == ["k"]
    # a row group larger than batch_size is one piece on its own
    assert [p.num_rows for p in src.pieces(50)] == [100] * 10 + [100, 100, 50]
    assert sum(p.read().num_rows for p in src.pieces(50)) == 1250


def test_local_runtime_reads_the_files(files):
    src = dpa.ParquetFiles(files)
    want = collections.Counter()
    totals = collections.Counter()
    for path in files:
        t = pq.read_table(path)
        for k, v in zip(t["k"].to_pylist(), t["v"].to_pylist()):
            want[k] += 1
            totals[k] += v
    res = dpa.run(src, key="k", reducer=dpa.Sum("v"), config=dpa.JobConfig(runtime="local", batch_size=200))
    assert res.to_dict() == dict(totals)
    assert sum(res.stats.processed) == 1250


def test_bad_input_is_refused_with_what_to_do(files, tmp_path):
    with pytest.raises(dpa.ConfigError, match="at least one"):
        dpa.ParquetFiles([])
    with pytest.raises(dpa.ConfigError, match="not a file"):
        dpa.ParquetFiles([files[0], str(tmp_path / "missing.parquet")])
    with pytest.raises(dpa.ConfigError, match="not a file"):
        dpa.ParquetFiles([str(tmp_path)])  # a directory
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    with pytest.raises(dpa.ConfigError, match="not a readable parquet file"):
        dpa.ParquetFiles([str(junk)])
    with pytest.raises(dpa.SchemaError, match=r"\['nope'\]"):
        dpa.ParquetFiles(files, ["k", "nope"])
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"k": [1, 2]}), other)  # k is an int here, a string in the others
    with pytest.raises(dpa.SchemaError, match="schema"):
        dpa.ParquetFiles([files[0], str(other)], ["k"])
    with pytest.raises(dpa.SchemaError, match="nope"):
        dpa.run(dpa.ParquetFiles(files), key="nope", config=dpa.JobConfig(runtime="local"))


def test_nbytes_counts_the_columns_read(files):
    both, keys = dpa.ParquetFiles(files), dpa.ParquetFiles(files, ["k"])
    values = dpa.ParquetFiles(files, ["v"])
    assert both.nbytes == keys.nbytes + values.nbytes > 0
    assert values.nbytes >= 8 * 1250  # (int64 values, uncompressed)
