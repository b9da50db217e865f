"""Peak memory of a streaming dpa job: does it stay flat as the input grows?

The same Count job (Zipf z=1.1, K=100k keys, 4 mappers x 4 reducers) streams 10M and
then 50M records; nothing holds the whole input. A background thread sums the memory of
every process of the job -- this driver and everything it started: GCS, raylet (which
holds the Plasma object store), the dpa actors, Ray Data workers -- every 0.2 s and keeps
the peak. The main figure is the sum of PSS (proportional set size: shared pages such as
the object store are split among the processes mapping them, so they count once); the
sum of RSS (shared pages counted once per process) is shown beside it. The target is a
50M/10M ratio of at most 1.3.

Sources (``--source``):

* ``dataset``: a ``ray.data.range(n)`` mapped to Zipf keys by ``map_batches`` in Ray Data
  workers (dpa consumes the block refs as the streaming executor produces them);
* ``generator``: a Python generator yielding ``pyarrow.Table`` blocks made in the driver.
  ``dpa.run`` does not accept a stream of Arrow tables (it treats an iterable as one of
  records); the run is then reported as unsupported.

Run (small)::

    python -m benchmarks.memory --sizes 1M 5M

Default::

    python -m benchmarks.memory --out memory.json
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.common import (
    CpuMeter,
    RssSampler,
    base_parser,
    config_overrides,
    init_ray,
    mb,
    parse_int,
    parse_shaped,
    print_table,
    role_of,
    stop_ray,
    write_json,
)


def zipf_cdf(z: float, num_keys: int) -> np.ndarray:
    w = 1.0 / np.arange(1, num_keys + 1, dtype=np.float64) ** z
    cdf = np.cumsum(w)
    return cdf / cdf[-1]


def keys_for(ids: np.ndarray, cdf: np.ndarray, perm: np.ndarray, seed: int) -> np.ndarray:
    """Zipf key ids for record ids ``ids`` (deterministic per first id and seed)."""
    rng = np.random.default_rng([seed, int(ids[0]) if len(ids) else 0])
    ranks = np.searchsorted(cdf, rng.random(len(ids)), side="right")
    return perm[np.minimum(ranks, len(perm) - 1)]


def make_dataset(n: int, block_rows: int, z: float, num_keys: int, seed: int) -> Any:
    import ray

    cdf = zipf_cdf(z, num_keys)
    perm = np.random.default_rng(seed).permutation(num_keys).astype(np.int64)
    cdf_ref, perm_ref = ray.put(cdf), ray.put(perm)

    # Defined here (not at module level) so that Ray pickles it by value: pyarrow ships
    # a top-level ``benchmarks`` package that Ray workers would import instead of ours.
    def to_keys(batch: dict[str, Any]) -> dict[str, Any]:
        import numpy

        ids = numpy.asarray(batch["id"])
        c, p = ray.get(cdf_ref), ray.get(perm_ref)
        rng = numpy.random.default_rng([seed, int(ids[0]) if len(ids) else 0])  # as keys_for()
        ranks = numpy.searchsorted(c, rng.random(len(ids)), side="right")
        return {"key": p[numpy.minimum(ranks, len(p) - 1)]}

    blocks = max(1, n // block_rows)
    return ray.data.range(n, override_num_blocks=blocks).map_batches(to_keys, batch_size=block_rows)


def make_generator(n: int, block_rows: int, z: float, num_keys: int, seed: int) -> Iterator[pa.Table]:
    cdf = zipf_cdf(z, num_keys)
    perm = np.random.default_rng(seed).permutation(num_keys).astype(np.int64)
    for start in range(0, n, block_rows):
        ids = np.arange(start, min(n, start + block_rows), dtype=np.int64)
        yield pa.table({"key": keys_for(ids, cdf, perm, seed)})


def quiet_ray_data() -> None:
    """No Ray Data progress bars or per-dataset INFO logs in the benchmark output."""
    import logging

    import ray

    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    if hasattr(ctx, "enable_operator_progress_bars"):
        ctx.enable_operator_progress_bars = False
    for name in ("ray.data", "ray.data._internal.execution.streaming_executor",
                 "ray.data._internal.progress"):
        logging.getLogger(name).setLevel(logging.WARNING)


def run_one(n: int, args: Any) -> dict[str, Any]:
    import dpa

    cfg = dpa.JobConfig().with_options(num_mappers=args.mappers, num_reducers=args.reducers,
                                       max_rounds=args.max_rounds, **({} if args.policy is None else {"policy": args.policy}), **config_overrides(args))
    if args.source == "dataset":
        source = make_dataset(n, args.block_rows, args.z, args.keys, args.seed)
    else:
        source = make_generator(n, args.block_rows, args.z, args.keys, args.seed)
    driver = os.getpid()
    gc.collect()
    before = RssSampler(lambda p: role_of(p, driver))
    before.sample()
    cpu = CpuMeter()
    cpu.start()
    row: dict[str, Any] = {"records": n, "source": args.source}
    t0 = time.perf_counter()
    with RssSampler(lambda p: role_of(p, driver), interval=args.interval) as sampler:
        try:
            res = dpa.run(source, key="key", reducer=dpa.Count(), config=cfg)
            out = res.to_arrow()
            total = int(pa.compute.sum(out["count"]).as_py())
            row["status"] = "ok" if total == n else f"MISMATCH total {total}"
            row["keys"] = out.num_rows
        except Exception as exc:  # an unsupported source type, typically
            first_line = (str(exc).splitlines() or [""])[0]
            row["status"] = f"failed: {type(exc).__name__}: {first_line[:90]}"
            row["error"] = str(exc)[:1000]
    row["wall_s"] = time.perf_counter() - t0
    row["cpu_s"] = cpu.stop()["total"]
    row.update({
        "baseline_pss_mb": mb(before.peak_pss), "peak_pss_mb": mb(sampler.peak_pss),
        "peak_rss_mb": mb(sampler.peak_rss), "procs": sampler.peak_procs, "samples": sampler.samples,
        "peak_pss_by_role_mb": {k: round(mb(v), 1) for k, v in sorted(sampler.peak_pss_by_role.items())},
    })
    return row


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = base_parser(__doc__.split("\n")[0], 10_000_000)
    p.add_argument("--sizes", nargs="+", type=parse_int, default=[10_000_000, 50_000_000],
                   help="records per run, in order (default 10M 50M); --rows is ignored")
    p.add_argument("--source", choices=["dataset", "generator"], default="dataset")
    p.add_argument("--block-rows", type=parse_int, default=1_000_000, help="records per source block")
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--z", type=float, default=1.1)
    p.add_argument("--policy", default=None, help="JobConfig.policy (default: dpa's)")
    p.add_argument("--max-rounds", type=int, default=1, help="JobConfig.max_rounds (0 = no LB)")
    p.add_argument("--interval", type=float, default=0.2, help="sampling period, seconds")
    args = parse_shaped(p, argv)

    import dpa

    startup = {"ray_init_s": init_ray()}
    quiet_ray_data()
    t0 = time.perf_counter()  # warm-up: start the pooled actors outside the measurements
    dpa.run(pa.table({"key": np.arange(1000, dtype=np.int64)}), key="key",
            config=dpa.JobConfig(shape=dpa.ShapeConfig(num_mappers=args.mappers, num_reducers=args.reducers)))
    startup["actor_start_s"] = time.perf_counter() - t0
    rows = []
    try:
        for n in args.sizes:
            rows.append(run_one(n, args))
            print_table([rows[-1]], ["records", "source", "status", "wall_s", "cpu_s", "baseline_pss_mb",
                                     "peak_pss_mb", "peak_rss_mb", "procs"])
    finally:
        stop_ray()
    first = rows[0]
    for r in rows:
        ok = r["status"] == "ok" and first["status"] == "ok"
        r["pss_ratio"] = r["peak_pss_mb"] / first["peak_pss_mb"] if ok else None
        r["rss_ratio"] = r["peak_rss_mb"] / first["peak_rss_mb"] if ok else None
        r["Mrec_per_s"] = r["records"] / r["wall_s"] / 1e6 if r["status"] == "ok" else None
    print_table(rows, ["records", "source", "status", "wall_s", "Mrec_per_s", "peak_pss_mb", "pss_ratio",
                       "peak_rss_mb", "rss_ratio", "procs"],
                title=f"peak memory of all job processes (ratio vs {first['records']:,}; target <= 1.3)")
    for r in rows:
        print(f"  {r['records']:>12,} peak PSS by role (MB): {r['peak_pss_by_role_mb']}")
    payload = {"source": args.source, "block_rows": args.block_rows, "config_overrides": config_overrides(args),
               "max_rounds": args.max_rounds, "startup": startup, "results": rows}
    write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
