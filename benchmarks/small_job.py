"""Latency of a small job: 1,000 records, dpa's default shape, once Ray is up.

Prints the cold time (the first job of a driver starts the actor pool) and the warm times
(later jobs reuse the pooled actors). Run: ``python -m benchmarks.small_job [--records N]``.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import time

import dpa
from benchmarks.common import write_json
from dpa.runtime.ray.session import ensure_ray


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--policy", default=None, help="JobConfig.policy (default: dpa's)")
    parser.add_argument("--mappers", type=int, default=None, help="JobConfig.num_mappers (default: dpa's)")
    parser.add_argument("--reducers", type=int, default=None, help="JobConfig.num_reducers (default: dpa's)")
    parser.add_argument("--out", default=None, help="write the figures as JSON to this file")
    args = parser.parse_args(argv)
    words = [f"w{i % 37}" for i in range(args.records)]
    t = time.perf_counter()
    ensure_ray(logging_level="ERROR")
    init_s = time.perf_counter() - t
    print(f"ray.init: {init_s:.2f}s  (load average {os.getloadavg()[0]:.1f})")
    cfg = dpa.JobConfig().with_options(num_mappers=args.mappers, num_reducers=args.reducers,
                                      **({} if args.policy is None else {"policy": args.policy})).resolved()
    t = time.perf_counter()
    res = dpa.run(words, config=cfg)
    cold_s = time.perf_counter() - t
    print(f"cold job ({cfg.num_mappers} mappers x {cfg.num_reducers} reducers: starts the pool): {cold_s:.2f}s")
    times = []
    for _ in range(args.reps):
        t = time.perf_counter()
        res = dpa.run(words, config=cfg)
        times.append(time.perf_counter() - t)
        assert res.to_dict() == dict(collections.Counter(words))
    print(f"warm job, {args.records:,} records: median {statistics.median(times):.3f}s, "
          f"min {min(times):.3f}s, max {max(times):.3f}s over {args.reps} runs")
    write_json(args.out, {
        "records": args.records, "reps": args.reps, "mappers": cfg.num_mappers, "reducers": cfg.num_reducers,
        "results": [
            {"what": "ray.init", "median_s": init_s, "runs": 1},
            {"what": "cold first job (starts the pool)", "median_s": cold_s, "runs": 1},
            {"what": f"warm {args.records:,}-record job", "median_s": statistics.median(times),
             "min_s": min(times), "max_s": max(times), "runs": len(times)},
        ]})
    dpa.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
