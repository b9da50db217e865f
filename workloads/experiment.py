"""Shared helpers of the paper reproduction scripts (:mod:`workloads.table1`, :mod:`workloads.figure3`).

One *job* is one :func:`dpa.run` of a paper workload (WL1..WL5, 100 letters, counted per
letter) with 4 mappers, 4 reducers and ``tau = 0.2`` as in all of the paper's
experiments, a per-record reducer cost (the paper's reducers are compute heavy) and a
method (``"halving"`` / ``"doubling"``) and ``max_rounds`` (0 = the paper's "No LB").
Every job's result is checked against ``collections.Counter(letters)`` exactly.

The knobs that decide *when* the balancer sees a queue imbalance (the paper leaves them
open) are grouped in :class:`Settings`; see the module docstring of
:mod:`workloads.table1` for why the defaults are what they are.

:func:`instant_lb` predicts the outcome of the balancer if it acted at time 0 with all
100 records still queued (queue length = records owned under the current ring), by
driving the real :class:`dpa.routing.policies.ring.policy.DPAPlanner` on those lengths until it stops. It is
what the balancer converges to when it is much faster than the reducers, and it shows
which rows of Table 1 cannot improve with the given letters whatever the timing (e.g.
when one round does not move any key of the overloaded reducer).
:func:`workloads.paper_lb.lb_at_t0` is the same analysis for any list of items; the
letters of :mod:`workloads.paper` are constructed so that it reaches the paper's With-LB
S on every row where the paper shows an improvement.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import statistics
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import dpa
from dpa.routing.hash_ring import HashRing
from workloads.paper import (
    METHODS,
    NUM_REDUCERS,
    PAPER_NUM_MAPPERS,
    PAPER_TAU,
    WORKLOAD_NAMES,
    workload,
)
from workloads.paper_lb import lb_at_t0

__all__ = [
    "DEFAULT_SETTINGS",
    "METHODS",
    "RUNTIMES",
    "ResultMismatchError",
    "Settings",
    "add_common_args",
    "hot_relief",
    "instant_lb",
    "job_config",
    "report_inexact",
    "mean",
    "run_cell",
    "run_job",
    "runtime_session",
    "settings_from_args",
]

RUNTIMES = ("ray", "local")
#: The paper's policies: Table 1 runs them with its straggler rule exactly (records, ``min_gap=0``).
RING_POLICIES = ("halving", "doubling")

logger = logging.getLogger(__name__)


class ResultMismatchError(AssertionError):
    """A job's counts differ from ``collections.Counter(letters)``."""


@dataclass(frozen=True)
class Settings:
    """The timing knobs of the reproduction jobs (see :mod:`workloads.table1`).

    Attributes:
        seconds_per_record: Reducer cost per processed record (``dpa.WithCost``, sleep
            mode: it does not use a CPU, so 4 reducers fit on a 2-core machine).
        batch_size: Records per input block (100 records -> ``ceil(100 / batch_size)``
            blocks shared by the 4 mappers).
        chunk_size: Records a reducer takes off its queue per step (1 = the reducer
            adopts a new ring between any two records).
        lb_interval_s: Period of the balancer's check of eq. 1.
        report_interval_s: Period of a busy reducer's queue-length report.
        queue_capacity: Bound of each reducer queue (records); mappers wait while full.
        num_mappers: Mappers (4 in the paper).
        num_reducers: Reducers (4 in the paper).
        tau: Threshold of eq. 1 (0.2 in the paper).
    """

    seconds_per_record: float = 0.01
    batch_size: int = 5
    chunk_size: int = 1
    lb_interval_s: float = 0.005
    report_interval_s: float = 0.005
    queue_capacity: int = 1_000_000
    num_mappers: int = PAPER_NUM_MAPPERS
    num_reducers: int = NUM_REDUCERS
    tau: float = PAPER_TAU

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


DEFAULT_SETTINGS = Settings()
#: The paper's ring and rule: records compared with no gap, hashed tokens, no lookahead.
PAPER_RING_OPTIONS: dict[str, Any] = {"min_gap": 0, "balance_on": "records", "token_spacing": "hashed",
                                      "lookahead": False}


def job_config(method: str, max_rounds: int, runtime: str, settings: Settings,
               policy_options: dict[str, Any] | None = None) -> dpa.JobConfig:
    """The :class:`dpa.JobConfig` of one reproduction job (``policy_options`` added to the policy's)."""
    return dpa.JobConfig(
        shape=dpa.ShapeConfig(num_mappers=settings.num_mappers, num_reducers=settings.num_reducers),
        balance=dpa.BalanceConfig(
            policy=method,
            # The paper's straggler rule exactly (eq. 1, no minimum gap between queues), on its
            # hashed ring, one round per trigger.
            policy_options={**(PAPER_RING_OPTIONS if method in RING_POLICIES else {}), **(policy_options or {})},
            tau=settings.tau,
            max_rounds=max_rounds,
            initial_tokens=1 if method == "doubling" else 16,  # the paper's first rings
            lb_interval_s=settings.lb_interval_s,
        ),
        flow=dpa.FlowConfig(
            batch_size=settings.batch_size,
            chunk_size=settings.chunk_size,
            report_interval_s=settings.report_interval_s,
            queue_capacity=settings.queue_capacity,
            queue_time_s=math.inf,  # the paper's queues: bounded in records only
        ),
        recovery=dpa.RecoveryConfig(timeout_s=120.0 if runtime == "ray" else None),
        runtime=runtime,
    )


def run_job(name: str, method: str, max_rounds: int, runtime: str,
            settings: Settings = DEFAULT_SETTINGS, policy_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Runs one job and returns its ``stats.to_dict()``.

    Raises:
        ResultMismatchError: The counts are not exactly ``Counter(letters)``.
    """
    letters = workload(name)
    reducer = dpa.WithCost(dpa.Count(), settings.seconds_per_record, mode="sleep")
    res = dpa.run(letters, reducer=reducer, config=job_config(method, max_rounds, runtime, settings, policy_options))
    got = res.to_dict()
    want = dict(Counter(letters))
    stats = res.stats.to_dict()
    if got != want or len(res) != len(want) or sum(stats["processed"]) != len(letters):
        missing = {k: want.get(k, 0) - got.get(k, 0) for k in set(want) | set(got) if want.get(k, 0) != got.get(k, 0)}
        raise ResultMismatchError(
            f"{name} {method} max_rounds={max_rounds} ({runtime}) is not exact: expected - got = "
            f"{missing}; result rows {len(res)} for {len(want)} keys; processed {stats['processed']}, "
            f"forwarded {stats['forwarded']}, emitted {stats['emitted']}, blocks per mapper "
            f"{stats['blocks_per_mapper']}, merged {stats['merged']}, "
            f"ring version {stats['ring_version']}, rebalances {stats['rebalances']}; {settings}"
        )
    return stats


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else math.nan


def run_cell(name: str, method: str, max_rounds: int, runs: int, runtime: str,
             settings: Settings = DEFAULT_SETTINGS, retries: int = 0,
             policy_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Runs one (workload, method, max_rounds) cell ``runs`` times.

    Args:
        retries: How many inexact jobs (:class:`ResultMismatchError`) to tolerate in this
            cell: each one is logged, recorded under ``"inexact"`` and run again. With 0
            the first inexact job raises.

    Returns:
        ``{"workload", "method", "max_rounds", "skew_mean", "skew_std", "skews",
        "rebalances_mean", "wall_time_s", "runs": [stats dicts], "inexact": [messages]}``.

    Raises:
        ResultMismatchError: More than ``retries`` inexact jobs.
    """
    all_stats: list[dict[str, Any]] = []
    inexact: list[str] = []
    while len(all_stats) < runs:
        try:
            all_stats.append(run_job(name, method, max_rounds, runtime, settings, policy_options))
        except ResultMismatchError as exc:
            inexact.append(str(exc))
            give_up = len(inexact) > retries
            print(f"  !! INEXACT RESULT ({'giving up' if give_up else 'job rerun'}): {exc}",
                  file=sys.stderr, flush=True)
            if give_up:
                raise
    skews = [s["skew"] for s in all_stats]
    return {
        "workload": name,
        "method": method,
        "max_rounds": max_rounds,
        "skew_mean": mean(skews),
        "skew_std": statistics.pstdev(skews) if skews else math.nan,
        "skews": skews,
        "rebalances_mean": mean([len(s["rebalances"]) for s in all_stats]),
        "wall_time_s": sum(s["wall_time_s"] for s in all_stats),
        "runs": all_stats,
        "inexact": inexact,
    }


def instant_lb(name: str, method: str, max_rounds: int,
               settings: Settings = DEFAULT_SETTINGS) -> dict[str, Any]:
    """The balancer's outcome if it acted at time 0 with every record still queued.

    Feeds the owned-record counts under the current ring to a real
    :class:`~dpa.routing.policies.ring.policy.DPAPlanner` as queue lengths, applies its decisions and repeats
    until it stops (all reducers have reported after each change, as the planner needs):
    :func:`workloads.paper_lb.lb_at_t0` on the workload.

    Returns:
        ``{"loads": per-reducer records under the final ring, "skew": S of those loads,
        "actions": [(reducer, action), ...]}``.
    """
    result = lb_at_t0(workload(name), method, max_rounds, num_reducers=settings.num_reducers, tau=settings.tau)
    return {k: result[k] for k in ("loads", "skew", "actions")}


def hot_relief(name: str, method: str, settings: Settings = DEFAULT_SETTINGS) -> dict[str, Any]:
    """What one round on the initially most loaded reducer does to its letters.

    Returns:
        ``{"hot": reducer id, "records": its records under the initial ring, "moved":
        how many of them another reducer owns after ``redistribute(hot, method)``,
        "loads_after": per-reducer records under that ring}``.
    """
    letters = workload(name)
    ring = HashRing.for_method(method, settings.num_reducers)
    before = ring.snapshot()
    counts = [0] * settings.num_reducers
    for letter in letters:
        counts[before.key_lookup(letter)] += 1
    hot = max(range(len(counts)), key=lambda i: (counts[i], -i))
    ring.redistribute(hot, method)
    after = ring.snapshot()
    loads_after = [0] * settings.num_reducers
    moved = 0
    for letter in letters:
        owner = after.key_lookup(letter)
        loads_after[owner] += 1
        moved += before.key_lookup(letter) == hot and owner != hot
    return {"hot": hot, "records": counts[hot], "moved": moved, "loads_after": loads_after}


# ------------------------------------------------------------------------- sessions
@contextlib.contextmanager
def runtime_session(runtime: str) -> Iterator[None]:
    """Starts Ray for ``runtime="ray"`` (if not running) and stops what it started.

    The dpa actors are pooled across the jobs of the session (``reuse_actors``) and
    released at the end with :func:`dpa.shutdown`.
    """
    if runtime != "ray":
        yield
        return
    import ray

    from dpa.runtime.ray.session import ensure_ray

    started = ensure_ray(configure_logging=True, log_to_driver=False) is not None
    try:
        yield
    finally:
        dpa.shutdown()
        if started:
            ray.shutdown()


# ---------------------------------------------------------------------------- CLI
def add_common_args(parser: argparse.ArgumentParser) -> None:
    """Adds ``--workloads``, ``--methods``, ``--retries`` and the timing knobs of Table 1 and Figure 3.

    (``--runtime`` and ``--runs`` are the harness's, :class:`workloads.harness.Experiment`.)
    """
    d = DEFAULT_SETTINGS
    parser.add_argument("--workloads", nargs="+", choices=WORKLOAD_NAMES, default=list(WORKLOAD_NAMES))
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--retries", type=int, default=2,
                        help="inexact jobs tolerated per cell: each is reported, stored in the JSON and "
                             "rerun; the exit code is 1 if there was any (default 2; 0 = stop at the first)")
    g = parser.add_argument_group("timing knobs (defaults explained in workloads/table1.py)")
    g.add_argument("--cost", type=float, default=d.seconds_per_record, help="reducer seconds per record")
    g.add_argument("--batch-size", type=int, default=d.batch_size)
    g.add_argument("--chunk-size", type=int, default=d.chunk_size)
    g.add_argument("--lb-interval", type=float, default=d.lb_interval_s)
    g.add_argument("--report-interval", type=float, default=d.report_interval_s)
    g.add_argument("--queue-capacity", type=int, default=d.queue_capacity)


def settings_from_args(args: argparse.Namespace) -> Settings:
    return Settings(
        seconds_per_record=args.cost,
        batch_size=args.batch_size,
        chunk_size=args.chunk_size,
        lb_interval_s=args.lb_interval,
        report_interval_s=args.report_interval,
        queue_capacity=args.queue_capacity,
    )


def report_inexact(inexact: list[str], exact_jobs: int) -> None:
    """Prints the inexact jobs of a run (each was rerun) and how many jobs were exact."""
    if inexact:
        print(f"!! {len(inexact)} job(s) returned an INEXACT result and were rerun (details in the JSON):")
        for m in inexact:
            print(f"   {m}")
    print(f"Results exact (Counter(letters)) in {exact_jobs} of {exact_jobs + len(inexact)} jobs.")
