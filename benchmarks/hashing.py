"""Key hashing on a mapper's blocks: what ``hash_key_columns`` costs per block.

A mapper hashes every block it routes: with map-side combine (built-in reducers) the
block's distinct keys after the combine (with ``distinct=True``, as the mapper calls it),
else every raw row. Prints, per key type, the median time of ``hash_key_columns`` on a raw
block of Zipf keys and on the same block combined (one row per key), next to the
dictionary path (hash each distinct value once, then gather), the alternative the
vectorised row-by-row hash is measured against.

    python -m benchmarks.hashing [--rows 1048576] [--reps 9]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from statistics import median
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.common import print_table, write_json
from dpa.keys.columns import _codes, _encode_array, _hash_encoded, hash_key_columns


def _dictionary_path(table: pa.Table) -> np.ndarray:
    """The single-column path before numbers were hashed from their bits."""
    column = table.column("key")
    codes, distinct = _codes(column.combine_chunks() if column.num_chunks != 1 else column.chunk(0))
    return _hash_encoded(_encode_array(distinct))[codes]


def _time_ms(fn: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1 << 20, help="rows per block (default: a mapper's block)")
    parser.add_argument("--keys", type=int, default=100_000, help="Zipf key space")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--out", default=None, help="write the figures as JSON to this file")
    args = parser.parse_args(argv)
    from workloads.generators import zipf

    ints = zipf(1.1, args.keys, args.rows, seed=0)
    blocks = {
        "int64": ints,
        "float64": pa.table({"key": ints.column("key").cast(pa.float64())}),
        "string": pa.table({"key": pa.array([f"k{k}" for k in ints.column("key").to_pylist()])}),
    }
    rows = []
    for kind, raw in blocks.items():
        combined = raw.group_by(["key"], use_threads=False).aggregate([([], "count_all")])
        for name, table, distinct in (("raw block", raw, False), ("combined block", combined, True)):
            assert (hash_key_columns(table, ["key"], distinct=distinct) == _dictionary_path(table)).all()
            rows.append({
                "key type": kind, "block": name, "rows": table.num_rows,
                "hash_key_columns ms": round(_time_ms(
                    lambda t=table, d=distinct: hash_key_columns(t, ["key"], distinct=d), args.reps), 2),
                "dictionary path ms": round(_time_ms(lambda t=table: _dictionary_path(t), args.reps), 2),
            })
    print(f"{args.rows:,} Zipf(z=1.1, K={args.keys:,}) keys per block; median of {args.reps}; "
          f"load avg {os.getloadavg()[0]:.1f}")
    print_table(rows, ["key type", "block", "rows", "hash_key_columns ms", "dictionary path ms"])
    write_json(args.out, {"rows": args.rows, "keys": args.keys, "reps": args.reps, "results": rows})


if __name__ == "__main__":
    main()
