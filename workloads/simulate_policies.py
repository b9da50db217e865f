"""Compare partitioning policies on a seeded Zipf stream, without Ray (:func:`dpa.tools.simulate.simulate`).

The PKG paper's simulation set-up: ``--messages`` Zipf keys over ``--num-keys`` distinct
keys, split round-robin over ``--sources`` routers that send to ``--workers`` workers.
One row per policy: the imbalance ``I/avg`` and ``I/n``, the skew ``S``, max/avg, the
standard deviation in percent (DKG), the replication (DistCost, max), and the speed (best
of ``--repeat`` runs)::

    python -m workloads.simulate_policies --policies hash,pkg,dkg --zipf 1.2 \\
        --num-keys 1000000 --messages 1000000 --workers 10 --sources 5

Also ``dpa experiment simulate_policies ARGS...`` (the ``dpa.experiments`` entry point).
"""

from __future__ import annotations

import argparse
import logging

from dpa.tools.simulate import simulate
from workloads.generators import zipf

logger = logging.getLogger(__name__)

DEFAULT_POLICIES = "hash,shuffle,potc,on-greedy,off-greedy,pkg,dkg"


def main(argv: list[str] | None = None) -> int:
    """Command line: one row per policy (see the module docstring); returns 0."""
    parser = argparse.ArgumentParser(prog="python -m workloads.simulate_policies",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default=DEFAULT_POLICIES, help=f"comma-separated (default {DEFAULT_POLICIES})")
    parser.add_argument("--zipf", type=float, default=1.2, help="Zipf exponent z")
    parser.add_argument("--num-keys", type=int, default=1_000_000)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=10)
    parser.add_argument("--sources", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--shared-router", action="store_true",
                        help="one router for all sources (global load and key tables)")
    args = parser.parse_args(argv)
    keys = zipf(args.zipf, args.num_keys, args.messages, seed=args.seed)["key"].to_numpy()
    simulate(keys[:1000], "hash")  # warm up (pyarrow kernels)
    print(f"zipf z={args.zipf} K={args.num_keys} n={args.messages} W={args.workers} "
          f"S={args.sources} seed={args.seed}{' shared router' if args.shared_router else ''}")
    print(f"{'policy':<11} {'I/avg':>8} {'I/n':>9} {'S':>7} {'max/avg':>7} {'sd%':>6} "
          f"{'DistCost':>8} {'repmax':>6} {'Mmsg/s':>7}")
    for name in args.policies.split(","):
        runs = [simulate(keys, name, num_sources=args.sources, num_workers=args.workers,
                         seed=args.seed, shared_router=args.shared_router)
                for _ in range(max(1, args.repeat))]
        r = runs[0]
        speed = max(x.messages_per_s for x in runs) / 1e6
        print(f"{name:<11} {r.imbalance_fraction:8.4f} {r.imbalance_per_message:9.2e} {r.skew:7.4f} "
              f"{r.max_over_avg:7.3f} {r.stddev_pct:6.2f} {r.dist_cost:8.3f} "
              f"{r.replication_max:6d} {speed:7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
