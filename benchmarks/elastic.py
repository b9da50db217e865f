"""Elastic reducers and state migration, on one local Ray.

Two parts, every job with the default ``JobConfig`` except what is named:

* **scale** (16k uniform records, 4k keys, 1 ms of sleep per record): ``num_reducers=2``
  fixed against ``num_reducers=2, max_reducers=8`` (the default policy), alternating,
  ``--reps`` each after one warm-up run of each (the warm-up also starts the elastic
  pool's extra reducers: later jobs find them warm). Printed: makespan, the ratio of the
  medians (target <= 0.45), exactness against pyarrow's ``group_by``, and the scaling
  log of the last elastic run.
* **first** (the scale part's jobs, each on a pool started for it: ``dpa.shutdown()``
  before every run, Ray stays up): what a first elastic job of a driver gets, its pool's
  start included, against a first fixed job, alternating, ``--reps`` each. Target: elastic
  <= 0.5x fixed.
* **migrate** (the straggler workload of ``benchmarks.stragglers``: 40k records,
  Zipf(1.1) over 10k keys, 1 ms per record, 8 reducers, ``policy="doubling"``):
  ``migrate="records"`` against ``migrate="state"``, alternating, ``--reps`` each.
  Printed: makespan, ratio of medians (target within 10%), ``merged_keys`` (target 0 for
  ``"state"``), keys handed over, exactness.

Run::

    python -m benchmarks.elastic --reps 3      # ~5 minutes
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import numpy as np
import pyarrow as pa

import dpa

COST_S = 1e-3
#: Summary rows of the parts run, written by ``--out``.
RESULTS: list[dict[str, Any]] = []


def reference(table: pa.Table) -> dict[Any, int]:
    out = table.group_by("key").aggregate([([], "count_all")])
    return dict(zip(out["key"].to_pylist(), out["count_all"].to_pylist()))


def run(table: pa.Table, config: dpa.JobConfig, ref: dict[Any, int]) -> tuple[float, dpa.Result, bool]:
    started = time.perf_counter()
    res = dpa.run(table, key="key", reducer=dpa.WithCost(dpa.Count(), COST_S), config=config)
    out = res.to_arrow()
    took = time.perf_counter() - started
    got = dict(zip(out["key"].to_pylist(), out["count"].to_pylist()))
    return took, res, got == ref and len(got) == out.num_rows


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"


def compare(name: str, table: pa.Table, configs: dict[str, dpa.JobConfig], reps: int,
            describe: Any) -> tuple[dict[str, list[float]], dpa.Result]:
    ref = reference(table)
    times: dict[str, list[float]] = {label: [] for label in configs}
    for label, config in configs.items():  # warm-up: pools (and an elastic pool's spare slots) start
        took, res, ok = run(table, config, ref)
        print(f"  warm-up {label:>10}: {took:6.2f} s exact={ok} {describe(res)}", flush=True)
    for rep in range(reps):
        for label, config in configs.items():
            took, res, ok = run(table, config, ref)
            times[label].append(took)
            print(f"  rep {rep} {label:>10}: {took:6.2f} s exact={ok} {describe(res)}", flush=True)
            if not ok:
                raise SystemExit(f"{name}: {label} gave a wrong result")
            last = res
    for label, values in times.items():
        print(f"  {name} {label}: makespan median {spread(values)}")
        RESULTS.append({"part": name, "run": label, "median_s": statistics.median(values),
                        "min_s": min(values), "max_s": max(values), "runs": len(values)})
    return times, last


def scale(args: argparse.Namespace) -> None:
    keys = np.arange(args.scale_rows) % 4000
    table = pa.table({"key": np.random.default_rng(3).permutation(keys)})
    configs = {"fixed-2": dpa.JobConfig(shape=dpa.ShapeConfig(num_reducers=2)),
               "elastic": dpa.JobConfig(shape=dpa.ShapeConfig(num_reducers=2, max_reducers=8))}
    print(f"## scale: {args.scale_rows} uniform records x {COST_S * 1e3:g} ms, 2 reducers fixed vs "
          f"max_reducers=8 (ideal 2 / 8 reducers: {args.scale_rows * COST_S / 2:.1f} / "
          f"{args.scale_rows * COST_S / 8:.1f} s)", flush=True)

    def describe(res: dpa.Result) -> str:
        widths = [e.width for e in res.stats.scaling if e.action == "scale_out"]
        return f"reducers {len(res.stats.processed)} widths {widths} keys_moved {res.stats.state_moves}"

    times, last = compare("scale", table, configs, args.reps, describe)
    ratio = statistics.median(times["elastic"]) / statistics.median(times["fixed-2"])
    print(f"  elastic / fixed-2 = {ratio:.3f} (target <= 0.45)")
    RESULTS[-1]["ratio_of_medians"] = ratio
    for event in last.stats.scaling:
        print(f"    {event.time_s:6.2f} s {event.action:>9} {list(event.reducers)} -> width {event.width}: "
              f"{event.reason}")


def first(args: argparse.Namespace) -> None:
    keys = np.arange(args.scale_rows) % 4000
    table = pa.table({"key": np.random.default_rng(3).permutation(keys)})
    ref = reference(table)
    configs = {"fixed-2": dpa.JobConfig(shape=dpa.ShapeConfig(num_reducers=2)),
               "elastic": dpa.JobConfig(shape=dpa.ShapeConfig(num_reducers=2, max_reducers=8))}
    print(f"## first: the scale part's jobs, each on a new pool ({args.scale_rows} uniform records x "
          f"{COST_S * 1e3:g} ms)", flush=True)
    times: dict[str, list[float]] = {label: [] for label in configs}
    for rep in range(args.reps):
        for label, config in configs.items():
            dpa.shutdown()
            took, res, ok = run(table, config, ref)
            widths = [e.width for e in res.stats.scaling if e.action == "scale_out"]
            first_out = next((e.time_s for e in res.stats.scaling if e.action == "scale_out"), None)
            print(f"  rep {rep} {label:>10}: {took:6.2f} s exact={ok} widths {widths} first scale-out at "
                  f"{'-' if first_out is None else f'{first_out:.2f} s'}", flush=True)
            if not ok:
                raise SystemExit(f"first: {label} gave a wrong result")
            times[label].append(took)
    for label, values in times.items():
        print(f"  first {label}: makespan median {spread(values)}")
        RESULTS.append({"part": "first", "run": label, "median_s": statistics.median(values),
                        "min_s": min(values), "max_s": max(values), "runs": len(values)})
    ratio = statistics.median(times["elastic"]) / statistics.median(times["fixed-2"])
    print(f"  first elastic / first fixed-2 = {ratio:.3f} (target <= 0.5)")
    RESULTS[-1]["ratio_of_medians"] = ratio


def migrate(args: argparse.Namespace) -> None:
    from workloads.generators import zipf

    table = zipf(1.1, 10_000, args.rows, seed=1)
    configs = {mode: dpa.JobConfig(shape=dpa.ShapeConfig(num_reducers=8), balance=dpa.BalanceConfig(policy="doubling"),
                                   semantics=dpa.SemanticsConfig(migrate=mode)) for mode in ("records", "state")}
    print(f"## migrate: {args.rows} Zipf(1.1) records over 10k keys x {COST_S * 1e3:g} ms, 8 reducers, doubling",
          flush=True)

    def describe(res: dpa.Result) -> str:
        s = res.stats
        return f"merged_keys {s.merged_keys} keys_moved {s.state_moves} rebalances {len(s.rebalances)}"

    times, _ = compare("migrate", table, configs, args.reps, describe)
    ratio = statistics.median(times["state"]) / statistics.median(times["records"])
    print(f"  state / records = {ratio:.3f} (target <= 1.10)")
    RESULTS[-1]["ratio_of_medians"] = ratio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rows", type=int, default=40_000, help="records of the migrate part")
    parser.add_argument("--scale-rows", type=int, default=16_000, help="records of the scale part")
    parser.add_argument("--only", choices=["scale", "first", "migrate"], default=None)
    parser.add_argument("--out", default=None, help="write the figures as JSON to this file")
    args = parser.parse_args(argv)
    print(f"# {' '.join([sys.executable, '-m', 'benchmarks.elastic', *(argv or sys.argv[1:])])}  "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    from benchmarks.common import init_ray

    init_ray()
    if args.only in (None, "scale"):
        scale(args)
    if args.only in (None, "first"):
        first(args)
    if args.only in (None, "migrate"):
        migrate(args)
    from benchmarks.common import write_json

    write_json(args.out, {"reps": args.reps, "rows": args.rows, "scale_rows": args.scale_rows, "results": RESULTS})
    return 0


if __name__ == "__main__":
    sys.exit(main())
