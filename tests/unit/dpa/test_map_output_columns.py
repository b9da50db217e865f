"""A ``map_fn`` whose output for a block is empty, or lacks a column the key or the
reducer reads, when no sample record fixed the schema at plan time."""

from __future__ import annotations

import pyarrow as pa
import pytest

import dpa


def _drop_first(n: int, keep: tuple[str, ...]):
    """A map_fn emitting nothing for records ``v < n`` and, after them, only ``keep`` fields."""
    def fn(record):
        if record["v"] < n:
            return []
        return [{c: record[c] for c in keep}]
    return fn


@pytest.mark.parametrize("combine", [True, False])
@pytest.mark.parametrize("reducer", [dpa.Sum("v"), dpa.Min("k"), dpa.Count()], ids=["sum", "min", "count"])
def test_a_map_fn_that_emits_nothing_gives_the_empty_result(reducer, combine):
    table = pa.table({"k": ["a"], "v": [0]})
    for key in ("k", lambda r: r["k"]):
        res = dpa.run(table, key=key, reducer=reducer, map_fn=_drop_first(1, ("k", "v")),
                      config=dpa.JobConfig(runtime="local", map_side_combine=combine))
        assert res.to_dict() == {}


def test_blocks_emitting_nothing_before_the_first_record_still_give_the_answer():
    table = pa.table({"k": [f"k{i % 3}" for i in range(500)], "v": list(range(500))})
    res = dpa.run(table, key="k", reducer=dpa.Sum("v"), map_fn=_drop_first(300, ("k", "v")),
                  config=dpa.JobConfig(runtime="local", batch_size=50))
    want: dict[str, int] = {}
    for i in range(300, 500):
        want[f"k{i % 3}"] = want.get(f"k{i % 3}", 0) + i
    assert res.to_dict() == want


@pytest.mark.parametrize("missing", ["v", "k"])
def test_records_lacking_a_column_the_job_reads_are_a_schema_error(missing):
    table = pa.table({"k": [f"k{i % 3}" for i in range(500)], "v": list(range(500))})
    keep = tuple(c for c in ("k", "v") if c != missing)
    with pytest.raises(dpa.SchemaError, match=f"lack the column\\(s\\) \\['{missing}'\\]"):
        dpa.run(table, key="k", reducer=dpa.Sum("v"), map_fn=_drop_first(300, keep),
                config=dpa.JobConfig(runtime="local", batch_size=50))
