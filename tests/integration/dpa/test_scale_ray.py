"""Many logical reducers on a few CPUs: 64 reducers on the session's Ray, exact against
DuckDB, with skewed keys (rebalances, split hot keys and the partitioned final merge)."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import dpa

pytestmark = pytest.mark.usefixtures("ray_session")


def skewed(records: int, seed: int = 5) -> pa.Table:
    rng = np.random.default_rng(seed)
    keys = np.minimum(rng.zipf(1.3, records), 2_000).astype(np.int64)
    return pa.table({"k": keys, "v": rng.integers(-50, 50, records)})


def reference(table: pa.Table) -> dict[int, tuple[int, int]]:
    con = duckdb.connect()
    con.register("t", table)
    rows = con.execute("SELECT k, count(*), sum(v) FROM t GROUP BY k").fetchall()
    con.close()
    return {int(k): (int(n), int(s)) for k, n, s in rows}


def test_64_logical_reducers_are_exact_with_the_defaults_but_the_width():
    table = skewed(64 * 40)
    res = dpa.run(table, key="k", reducer=dpa.WithCost(dpa.Sum("v"), 1e-3), num_reducers=64)
    out = res.to_arrow()
    got = dict(zip(out.column("k").to_pylist(), out.column(1).to_pylist()))
    assert got == {k: s for k, (_, s) in reference(table).items()}
    assert len(res.stats.processed) == 64 and sum(res.stats.processed) == table.num_rows
    assert res.stats.merged_keys > 0  # (the hot key was split: the final merge went through the hosts)
    assert sum(1 for p in res.stats.processed if p) > 32  # (the records went over the reducers)


def test_a_user_merge_that_raises_in_the_final_merge_fails_the_job_at_width():
    class Bad(dpa.Reducer):
        def create(self):
            return 0

        def add(self, acc, value):
            return acc + 1

        def merge(self, a, b):
            raise ValueError("no merging here")

        def finalize(self, acc):
            return acc

    table = pa.table({"k": np.zeros(2_000, np.int64), "v": np.ones(2_000, np.int64)})  # one hot key: split
    with pytest.raises(dpa.JobFailedError, match="no merging here"):
        dpa.run(table, key="k", reducer=dpa.WithCost(Bad("v"), 1e-3), num_reducers=16, policy="pkg")
