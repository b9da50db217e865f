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
        # map_fn emits nothing for more blocks than the plan probes: found while the job runs
        dpa.run(table, key="k", reducer=dpa.Sum("v"), map_fn=_drop_first(450, keep),
                config=dpa.JobConfig(runtime="local", batch_size=50))


@pytest.mark.parametrize("missing", ["v", "k"])
def test_records_lacking_a_column_in_the_probed_blocks_fail_at_plan_time(missing):
    from dpa.engine.planning import PROBE_BLOCKS

    table = pa.table({"k": [f"k{i % 3}" for i in range(500)], "v": list(range(500))})
    keep = tuple(c for c in ("k", "v") if c != missing)
    assert 300 // 50 < PROBE_BLOCKS
    with pytest.raises(dpa.SchemaError, match=f"'{missing}'.*not|not.*'{missing}'|\\['{missing}'\\] not found"):
        dpa.run(table, key="k", reducer=dpa.Sum("v"), map_fn=_drop_first(300, keep),
                config=dpa.JobConfig(runtime="local", batch_size=50))


@pytest.mark.parametrize("batch", [True, False], ids=["batch_map", "record_map"])
def test_a_tuple_key_whose_first_blocks_map_to_nothing_is_still_a_tuple_key(batch):
    """The key's shape is probed on the first block map_fn emits records for (seed 104, job
    #110 of the soak: one-record blocks, the first filtered out, a key function returning pairs)."""
    import pyarrow.compute as pc

    records = [{"k": f"k{i % 3}", "k2": i % 4, "v": i} for i in range(10)]
    if batch:
        map_fn = dpa.BatchMap(lambda t: t.filter(pc.greater(t["v"], 1)))
    else:
        map_fn = _drop_first(2, ("k", "k2", "v"))
    res = dpa.run(records, key=lambda r: (r["k2"], r["k"]), reducer=dpa.Sum("v"), map_fn=map_fn,
                  config=dpa.JobConfig(runtime="local", batch_size=1))
    want: dict = {}
    for r in records[2:]:
        want[(r["k2"], r["k"])] = want.get((r["k2"], r["k"]), 0) + r["v"]
    assert res.to_dict() == want
