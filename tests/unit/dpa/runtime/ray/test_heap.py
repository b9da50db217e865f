"""The hosts' heap thresholds: a freed block-sized array is reused, not faulted in again."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dpa.runtime.ray.heap import MMAP_THRESHOLD, TRIM_THRESHOLD, keep_freed_memory

# Groups one block (1M rows, 100k keys) by key with several aggregates, as a mapper's
# map-side combine does, twice; prints the page faults of the second time.
_PROBE = """
import resource, sys
import numpy as np, pyarrow as pa
if sys.argv[1] == "keep":
    from dpa.runtime.ray.heap import keep_freed_memory
    assert keep_freed_memory()
from dpa.aggregates.dense import group_aggregate
rng = np.random.default_rng(1)
rows = 1 << 20
block = pa.table({"key": rng.integers(0, 100_000, rows), "x": rng.random(rows), "n": rng.integers(0, 9, rows)})
aggs = [([], "count_all"), ("x", "sum"), ("x", "variance"), ("n", "sum"), ("n", "max")]
group_aggregate(block, ["key"], aggs)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
group_aggregate(block, ["key"], aggs)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""

glibc = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's")


def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def test_thresholds_cover_a_block_column() -> None:
    # A column of a default-sized block (1.7M rows of 8 bytes) comes from the heap.
    assert MMAP_THRESHOLD >= 1_700_000 * 8
    assert TRIM_THRESHOLD >= MMAP_THRESHOLD


@glibc
def test_freed_array_is_reused_without_faults() -> None:
    # Per-group arrays of 100k values (800 KB each) are above glibc's first mmap threshold:
    # by default each is a fresh mapping, faulted in page by page every time.
    per_group_array = 100_000 * 8 // 4096
    assert _faults("default") > 4 * per_group_array
    assert _faults("keep") < per_group_array // 4  # kept in the heap: the same pages again


@glibc
def test_keep_freed_memory_reports_success() -> None:
    assert keep_freed_memory() is True
