"""The soak's command line: options, the run, the summary and its exit code.
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import sys
import threading
import time
from dataclasses import asdict
from typing import Any

import ray

import dpa
from benchmarks.common import print_table, write_json
from benchmarks.soak.runner import (
    ActorWatch,
    Soak,
    _pickle_by_value,
    kill_actors,
    memory_verdict,
    start_ray_from_short_lived_thread,
)
from benchmarks.soak.specs import OUTCOMES, make_specs

#: The numeric options, in ``--help`` order: flag, type, default, help.
NUMBER_OPTIONS: tuple[tuple[str, type, float | None, str], ...] = (
    ("--jobs", int, 300, "jobs to run (default 300; --quick: 30)"),
    ("--seed", int, 0, "seed of the job mix and the data"),
    ("--threads", int, 2, "driver threads running jobs (default 2)"),
    ("--kill-rate", float, 0.05, "chance of killing an actor before a job"),
    ("--bad-rate", float, 0.1, "share of jobs with a bad input"),
    ("--max-records", int, 200_000, "largest job (default 200,000; --quick: 5,000)"),
    ("--timeout-s", float, 120.0, "JobConfig.timeout_s of each job (default 120)"),
    ("--shape-change-rate", float, 0.25, "chance a job has another mapper/reducer count than the previous one"),
    ("--max-width", int, 4, "largest num_mappers / num_reducers (default 4)"),
    ("--mem-every", int, None, "sample memory every N jobs (default jobs/15)"),
    ("--mem-bound", float, 1.5, "allowed memory growth after warm-up (x)"),
    ("--warmup", int, None, "jobs before the memory baseline (default jobs/5)"),
    ("--long-every", int, 10, "every N-th job is a long one, lasting several checkpoint intervals (0: none)"),
)


def build_parser() -> argparse.ArgumentParser:
    """The command-line options."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.splitlines()[0])
    for flag, kind, default, text in NUMBER_OPTIONS:
        p.add_argument(flag, type=kind, default=default, help=text)
    p.add_argument("--quick", action="store_true", help="30 jobs of at most 5,000 records (CI smoke)")
    p.add_argument("--init-from-thread", action="store_true",
                   help="let the first dpa.run start Ray from a driver thread (default: the main thread)")
    p.add_argument("--runtime", choices=("ray", "local"), default="ray",
                   help="'local' runs the same jobs in-process without Ray (checks the soak's oracle)")
    p.add_argument("--no-local-check", dest="local_check", action="store_false",
                   help="do not run every job on runtime='local' too (by default both runtimes must agree)")
    p.add_argument("--only", default=None, metavar="I,J",
                   help="run only these jobs of the mix (indices, comma-separated): replays them")
    p.add_argument("--print-specs", action="store_true", help="print the jobs of the mix and exit")
    p.add_argument("--out", "--json", dest="json", default=None, metavar="PATH",
                   help="write the summary as JSON")
    p.add_argument("--verbose", action="store_true", help="print every job and Ray's worker logs")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parses ``argv`` and fills in the defaults that depend on other options."""
    p = build_parser()
    opts = p.parse_args(argv)
    if opts.quick:
        explicit = set(argv if argv is not None else sys.argv[1:])
        if "--jobs" not in explicit:
            opts.jobs = 30
        if "--max-records" not in explicit:
            opts.max_records = 5_000
        if "--timeout-s" not in explicit:
            opts.timeout_s = 60.0
    if opts.jobs < 1 or opts.threads < 1 or opts.max_width < 1 or opts.long_every < 0:
        p.error("--jobs, --threads and --max-width must be >= 1, --long-every >= 0")
    try:
        opts.only = None if opts.only is None else sorted({int(i) for i in opts.only.split(",") if i.strip()})
    except ValueError:
        p.error(f"--only takes job indices separated by commas, got {opts.only!r}")
    opts.mem_every = opts.mem_every or max(1, opts.jobs // 15)
    opts.warmup = opts.warmup if opts.warmup is not None else max(opts.mem_every, opts.jobs // 5)
    return opts


def run_soak(opts: argparse.Namespace) -> dict[str, Any]:
    """Runs the soak described by ``opts``; returns the summary (see :func:`main`)."""
    _pickle_by_value()
    quiet = [(logging.getLogger(name), logging.getLogger(name).level) for name in ("dpa", "ray")]
    if not opts.verbose:
        for lg, _ in quiet:
            lg.setLevel(logging.ERROR)
    started_ray = not ray.is_initialized()
    watch = ActorWatch()
    try:
        if started_ray and opts.runtime == "ray":
            if opts.init_from_thread:
                start_ray_from_short_lived_thread(opts.timeout_s)
            else:
                from dpa.runtime.ray.driver import ensure_ray

                ensure_ray(logging_level="ERROR", log_to_driver=opts.verbose)
        specs = make_specs(opts.jobs, opts.seed, opts.kill_rate, opts.bad_rate, opts.max_records,
                           opts.shape_change_rate, opts.max_width, opts.long_every)
        if opts.only is not None:
            specs = [s for s in specs if s.index in opts.only]
        print(f"soak: {opts.jobs} jobs, seed {opts.seed}, {opts.threads} threads, kill rate {opts.kill_rate}, "
              f"bad rate {opts.bad_rate}, up to {opts.max_records:,} records, timeout_s {opts.timeout_s}",
              flush=True)
        soak = Soak(opts)
        soak.run(specs)

        alive_before = watch.live()
        pools_before = sorted({n.split(":")[1] for n in alive_before})
        dpa.shutdown()
        leaked = watch.wait_none(20.0)
        kill_actors(leaked)
    finally:
        for lg, level in quiet:
            lg.setLevel(level)
        if started_ray and ray.is_initialized():
            ray.shutdown()

    counts = collections.Counter(o.outcome for o in soak.outcomes)
    long_jobs = [o for o in soak.outcomes if o.long]
    bad_table: dict[str, dict[str, int]] = {}
    for o in soak.outcomes:
        if o.bad is not None:
            cell = o.error_type.rsplit(".", 1)[-1] if o.error_type else o.outcome
            bad_table.setdefault(o.bad, collections.Counter())[f"{o.outcome}:{cell}"] += 1
    after_kill = [o for o in soak.outcomes if o.after_kill]
    memory = memory_verdict(soak.samples, opts.warmup, opts.mem_bound)
    failures = [asdict(o) for o in soak.outcomes if o.outcome not in ("ok", "expected_error")]
    summary: dict[str, Any] = {
        "options": vars(opts),
        "jobs_planned": len(specs),
        "jobs_run": len(soak.outcomes),
        "jobs_not_run": soak.not_run,
        "outcomes": {k: counts.get(k, 0) for k in OUTCOMES},
        "raw_ray_errors": sum(o.raw_ray_error for o in soak.outcomes),
        "bad_inputs": sum(s.bad is not None for s in specs),
        "bad_kinds": {k: dict(v) for k, v in sorted(bad_table.items())},
        "kills_injected": len(soak.kills),
        "kills_skipped_no_actor": soak.kills_skipped,
        "kills": soak.kills,
        "jobs_after_kill": len(after_kill),
        "jobs_after_kill_failed": sum(o.outcome != "ok" for o in after_kill),
        "actors_alive_before_shutdown": len(alive_before),
        "pools_before_shutdown": len(pools_before),
        "leaked_actors": leaked,
        "actor_list_via": "state API" if watch.state_api else "list_named_actors",
        "memory": memory,
        "local_check": bool(opts.local_check and opts.runtime == "ray"),
        "long_jobs_run": len(long_jobs),
        "long_job_seconds": sorted(round(o.seconds, 1) for o in long_jobs),
        "longest_job_s": round(max((o.seconds for o in soak.outcomes), default=0.0), 1),
        "checkpoints": sum(o.checkpoints or 0 for o in soak.outcomes),
        "failures": failures,
        "wall_s": round(time.monotonic() - soak.t0, 1),
    }
    summary["passed"] = not (counts.get("wrong_result") or counts.get("unexpected_error") or counts.get("hang")
                             or counts.get("runtime_mismatch") or counts.get("harness_error") or leaked
                             or memory["growth"])
    return summary


def print_summary(summary: dict[str, Any]) -> None:
    """Prints the summary tables."""
    if summary["failures"]:
        print_table([{"job": f["index"], "outcome": f["outcome"], "s": round(f["seconds"], 1),
                      "detail": f["detail"].replace("\n", " ")[:150]} for f in summary["failures"]],
                    title="failures")
    if summary["bad_kinds"]:
        print_table([{"bad input": k, "outcomes": ", ".join(f"{c}x {o}" for o, c in sorted(v.items()))}
                     for k, v in summary["bad_kinds"].items()], title="bad inputs: outcome:exception")
    out = summary["outcomes"]
    mem = summary["memory"]
    rows = [
        ("jobs run", f"{summary['jobs_run']} of {summary['jobs_planned']}"
                     + (f" ({summary['jobs_not_run']} not run)" if summary["jobs_not_run"] else "")),
        ("ok", out["ok"]),
        ("expected error", f"{out['expected_error']} of {summary['bad_inputs']} bad inputs"),
        ("wrong result", out["wrong_result"]),
        ("unexpected error", f"{out['unexpected_error']} ({summary['raw_ray_errors']} raw Ray exceptions)"),
        ("hang", out["hang"]),
        ("Ray and local disagree", out["runtime_mismatch"] if summary["local_check"] else "not checked"),
        ("harness error", out["harness_error"]),
        ("long jobs: run / Ray seconds (min-max)",
         f"{summary['long_jobs_run']} / {min(summary['long_job_seconds'], default=0)}-"
         f"{max(summary['long_job_seconds'], default=0)} s"),
        ("checkpoints taken (Ray)", summary["checkpoints"]),
        ("actor kills injected", f"{summary['kills_injected']} (skipped, none alive: "
                                 f"{summary['kills_skipped_no_actor']})"),
        ("jobs right after a kill failed", f"{summary['jobs_after_kill_failed']} of {summary['jobs_after_kill']}"),
        ("dpa actors before dpa.shutdown()", f"{summary['actors_alive_before_shutdown']} "
                                             f"({summary['pools_before_shutdown']} pools)"),
        ("leaked actors after dpa.shutdown()", len(summary["leaked_actors"])),
    ]
    if mem.get("first"):
        for label, key, warm in (("driver RSS MB", "driver_rss_mb", "warm"),
                                 ("dpa actors RSS MB", "actors_rss_mb", "warm_actors"),
                                 ("dpa actor processes", "actor_procs", "warm_actors"),
                                 ("RSS per dpa actor MB", "rss_per_actor_mb", "warm_actors")):
            rows.append((f"{label}: first / warm / last", f"{mem['first'][key]} / {mem[warm][key]} / {mem['last'][key]}"))
        rows.append(("memory growth > bound", f"{'YES: ' + '; '.join(mem['flags']) if mem['growth'] else 'no'} "
                                              f"(bound {mem['bound']}x after job {mem['warm']['after_job']})"))
    rows.append(("wall time", f"{summary['wall_s']} s"))
    rows.append(("verdict", "PASS" if summary["passed"] else "FAIL"))
    print_table([{"": k, "value": v} for k, v in rows], title="soak summary")
    if summary["leaked_actors"]:
        print("leaked:", ", ".join(summary["leaked_actors"]))


def main(argv: list[str] | None = None) -> int:
    """Runs the soak; returns 1 on any wrong result, unexpected error, hang, disagreement of
    the runtimes, leak or memory growth beyond the bound, else 0."""
    opts = parse_args(argv)
    if opts.print_specs:
        for spec in make_specs(opts.jobs, opts.seed, opts.kill_rate, opts.bad_rate, opts.max_records,
                               opts.shape_change_rate, opts.max_width, opts.long_every):
            if opts.only is None or spec.index in opts.only:
                print(spec.describe())
        return 0
    summary = run_soak(opts)
    print_summary(summary)
    write_json(opts.json, summary)
    return 0 if summary["passed"] else 1


def _cli() -> None:
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        os._exit(code)  # a hung driver thread would block the interpreter's exit
    raise SystemExit(code)



if __name__ == "__main__":
    _cli()
