"""How much Ray's GCS grows per dpa job (issue: its task-event buffer fills with dpa's calls).

Runs ``--jobs`` small jobs on warm actors and samples the resident memory of Ray's
``gcs_server`` process every ``--every`` jobs, after a warm-up; prints the growth per job
(least-squares slope over the samples).

    python -m benchmarks.gcs_growth --jobs 300 --records 20000
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import psutil
import pyarrow as pa

import dpa
from benchmarks.common import write_json
from dpa.runtime.ray.session import ensure_ray


def gcs_rss_mb() -> float:
    """Resident memory of this machine's ``gcs_server`` process(es), in MB."""
    total = 0
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] == "gcs_server":
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                continue
    return total / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gcs_growth", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--every", type=int, default=25, help="sample every N jobs")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--policy", default=None, help="JobConfig.policy (default: dpa's)")
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args(argv)

    ensure_ray(logging_level="ERROR")
    rng = np.random.default_rng(0)
    table = pa.table({"key": rng.zipf(1.3, args.records) % 1000})
    config = dpa.JobConfig().with_options(batch_size=2_000, chunk_size=1_000,
                                          **({} if args.policy is None else {"policy": args.policy}))
    for _ in range(args.warmup):
        dpa.run(table, key="key", config=config)
    samples: list[tuple[int, float]] = [(0, gcs_rss_mb())]
    started = time.perf_counter()
    for i in range(1, args.jobs + 1):
        dpa.run(table, key="key", config=config)
        if i % args.every == 0:
            samples.append((i, gcs_rss_mb()))
    elapsed = time.perf_counter() - started
    jobs, rss = np.array(samples).T
    slope = float(np.polyfit(jobs, rss, 1)[0]) if len(samples) > 1 else 0.0
    print(f"{args.jobs} jobs of {args.records:,} records in {elapsed:.1f} s; gcs_server RSS "
          f"{rss[0]:.0f} MB -> {rss[-1]:.0f} MB, {slope * 1000:.0f} KB per job")
    for n, mb in samples:
        print(f"  after {n:>4} jobs: {mb:7.1f} MB")
    write_json(args.out, {"jobs": args.jobs, "records": args.records, "policy": args.policy,
                          "kb_per_job": slope * 1000, "seconds": elapsed,
                          "results": [{"after jobs": n, "gcs_server RSS MB": mb} for n, mb in samples]})
    dpa.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
