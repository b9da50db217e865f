"""Experiment 1 of the DPA paper (Table 1): skew ``S`` without and with one round of LB.

For each workload WL1..WL5 (:mod:`workloads.paper`, 100 letters, count per letter) and
each method (token halving, token doubling) the job runs with 4 mappers, 4 reducers and
``tau = 0.2`` without load balancing (``max_rounds=0``, the paper's "No LB") and with it
(``max_rounds=1``: every reducer may trigger at most one redistribution), ``--runs``
times (3, as in the paper); the table shows the mean ``S`` (eq. 2, ``res.stats.skew``)
next to the paper's numbers. Every result is checked to equal
``collections.Counter(letters)`` exactly.

Usage::

    python -m workloads.table1                      # real Ray actors, 3 runs
    python -m workloads.table1 --runtime local      # in-process simulator, seconds
    python -m workloads.table1 --runs 1 --out results/table1.json

Outputs: the table on stdout, ``--out`` (JSON: settings, every run's ``stats.to_dict()``,
means, checks) and the same path with ``.md`` (a markdown table).

Checks printed per row:

* No LB: our ``S`` equals the paper's within 0.01. This holds by construction (the
  letters of :mod:`workloads.paper` were chosen for it), and since without LB every
  letter is processed by its initial owner it does not depend on timing.
* With LB, on the rows where the paper shows an improvement (``Δ > 0``): our ``S`` is
  no worse than the paper's (``<= paper + 0.005``, the paper rounds to 2 decimals).

The ``t0`` column is :func:`workloads.experiment.instant_lb`: the ``S`` the balancer
would reach if it acted at time 0 with all 100 records still queued (the limit of a
balancer much faster than the reducers). FAIL rows get a note from
:func:`workloads.experiment.hot_relief` saying how many of the hot reducer's records
one round on it moves (see "Why some rows cannot match" below).

Inexact results are never hidden: the job's diagnostics are printed and stored in the
JSON (``"inexact"`` of the cell), the job is rerun (at most ``--retries`` times per
cell) and the exit code is 1.

Settings (:class:`workloads.experiment.Settings`) and why
-----------------------------------------------------------
The paper's reducers are compute heavy and its LB acts on queue lengths while work
remains; 100 letters are nothing to map. The defaults reproduce that regime:

* ``seconds_per_record = 0.01`` (``dpa.WithCost(..., mode="sleep")``): the hot reducer
  of WL3 works 1 s, the balanced workloads 0.25 s, so queues exist for hundreds of
  milliseconds - much longer than a balancer period or an actor round trip (1-40 ms on
  a loaded 2-core machine) - while a whole Table 1 (60 jobs) still runs in 2-3 minutes
  on Ray there (about 1 s per job plus ~50 s of Ray and actor start-up).
  Sleep mode keeps the 4 reducers off the 2 CPUs.
* ``batch_size = 5``: 20 input blocks, 5 per mapper, so input arrives as a stream of
  small pushes (as in the paper, where mappers emit items one by one) instead of four
  25-record dumps; on Ray the driver hands a block out every few tens of ms, so records
  keep arriving during the first ~0.5 s, i.e. while the hot reducer is working.
* ``chunk_size = 1``: a reducer takes one record at a time, so a new ring takes effect
  after at most one record (10 ms) and the queue length it reports is exact. (Queued
  records that move are forwarded as soon as the ring is adopted anyway.)
* ``lb_interval_s = report_interval_s = 0.005``: the balancer and the reports run at
  half a record's cost, i.e. the balancer reacts within one record of an imbalance.
  This is "checks the condition on a regular basis" taken literally; it makes the LB
  act early, on the first queues it sees - which is exactly the behaviour the paper
  reports for WL1/WL2 (LB triggered "at a point where certain reducers are behind",
  adding a little skew to balanced workloads).
* ``queue_capacity`` unbounded: the paper's queues are unbounded actors; a small bound
  adds head-of-line blocking at the mappers that the paper does not have.

The in-process runtime (``--runtime local``) runs the same state machines in virtual
time with infinitely fast mappers (all blocks are queued at t=0), so it is
deterministic (the runs are identical) and shows the "balancer much faster than the
reducers" limit; the Ray runtime adds real arrival times and message delays.

The letters and the With-LB column
----------------------------------
The paper publishes each workload's *No-LB* skew and the skew after one round of LB,
not its letters. Which keys move when a reducer is halved or doubled depends on the
letters as much as on the balancer, so :mod:`workloads.paper` constructs letters that
reproduce both on our ring (MurmurHash3, ``"token-{i}-{j}"``): the No-LB S within 0.01,
and for every row where the paper improves, the real planner acting at t=0 (the ``t0``
column) and a drain model of it (rounds triggered as the queues run down,
:func:`workloads.paper_lb.lb_drain`) reach at most the paper's With-LB S, aimed 0.05 below
it; rows where the paper shows no change cannot get worse whatever rounds happen
(WL2/WL3/WL5 halving) or at least not at t0 (WL1 halving, WL2 doubling).

What remains is timing:

* WL3 doubling: one letter moves as a whole (to another reducer, as in the paper), so S
  only drops by the share its first owner processed before the move (the paper's 0.75
  means ~19 of 100). The balancer here reacts within a record (``lb_interval_s``), so
  that share is 1-4 records and S stays at 0.96-0.99.
* On Ray, records arrive in blocks of 5 over the first ~0.5 s, and a reducer that just
  received a block is a "straggler" against empty queues: rounds on other reducers are
  triggered on small, noisy queues, in an order that changes from run to run, and the
  ring they reach decides the result (the letters keep the rounds on the straggler
  effective; they cannot make every order of the other rounds harmless). Rows within
  ~0.02 of the paper (e.g. WL4 doubling) then PASS or FAIL from one set of 3 runs to
  the next, and the balanced rows show larger increases than the paper's 0.08.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from workloads.experiment import (
    Settings,
    add_common_args,
    hot_relief,
    instant_lb,
    report_inexact,
    run_cell,
    settings_from_args,
)
from workloads.harness import Experiment, Log
from workloads.paper import METHODS, PAPER_TABLE1, WORKLOAD_NAMES

__all__ = ["LB_TOLERANCE", "NO_LB_TOLERANCE", "EXPERIMENT", "check_row", "main", "markdown", "render", "run_table1"]

NO_LB_TOLERANCE = 0.01
"""Our No-LB ``S`` must equal the paper's within this."""
LB_TOLERANCE = 0.005
"""Our With-LB ``S`` may exceed the paper's (rounded to 2 decimals) by at most this."""


def check_row(row: dict[str, Any]) -> dict[str, Any]:
    """Adds the per-row checks to a row of :func:`run_table1` (in place) and returns it."""
    ours_no, ours_lb = row["no_lb"]["skew_mean"], row["with_lb"]["skew_mean"]
    paper_no, paper_lb = row["paper_no_lb"], row["paper_with_lb"]
    row["delta"] = ours_no - ours_lb
    row["paper_delta"] = paper_no - paper_lb
    row["no_lb_ok"] = abs(ours_no - paper_no) <= NO_LB_TOLERANCE
    if row["paper_delta"] > 0:
        row["lb_check"] = "PASS" if ours_lb <= paper_lb + LB_TOLERANCE else "FAIL"
    else:
        row["lb_check"] = "-"
    row["note"] = ""
    if row["lb_check"] == "FAIL":
        hot = row.get("hot_relief")
        if hot is not None and hot["moved"] == 0:
            row["note"] = (f"one {row['method']} round on the hot reducer {hot['hot']} moves none of its "
                           f"{hot['records']} records (these letters, our ring); only a round on another "
                           f"reducer first could move them; LB at t=0: S={row['t0_skew']:.2f}")
        else:
            moved = f"moves {hot['moved']} of its {hot['records']} records -> {hot['loads_after']}; " if hot else ""
            row["note"] = (f"one round on the hot reducer {moved}LB at t=0: S={row['t0_skew']:.2f}; "
                           "lower S needs another order/timing of the rounds")
    return row


def run_table1(runtime: str = "local", runs: int = 3, settings: Settings | None = None,
               workloads: list[str] | None = None, methods: list[str] | None = None,
               log: Log = print, retries: int = 0) -> list[dict[str, Any]]:
    """Runs Experiment 1 and returns one checked row per (workload, method).

    Must be called inside :func:`workloads.experiment.runtime_session` for Ray.

    Returns:
        Rows with ``workload``, ``method``, ``paper_no_lb``, ``paper_with_lb``,
        ``no_lb`` and ``with_lb`` (:func:`workloads.experiment.run_cell` results),
        ``t0_skew``/``t0_loads``/``t0_actions`` (:func:`instant_lb`), ``delta``,
        ``paper_delta``, ``no_lb_ok``, ``lb_check`` and ``note``.
    """
    settings = settings or Settings()
    rows = []
    for name in workloads or WORKLOAD_NAMES:
        for method in methods or METHODS:
            started = time.perf_counter()
            no_lb = run_cell(name, method, 0, runs, runtime, settings, retries)
            with_lb = run_cell(name, method, 1, runs, runtime, settings, retries)
            t0 = instant_lb(name, method, 1, settings)
            relief = hot_relief(name, method, settings)
            paper_no, paper_lb = PAPER_TABLE1[(name, method)]
            row = check_row({
                "workload": name, "method": method,
                "paper_no_lb": paper_no, "paper_with_lb": paper_lb,
                "no_lb": no_lb, "with_lb": with_lb,
                "t0_skew": t0["skew"], "t0_loads": t0["loads"], "t0_actions": t0["actions"],
                "hot_relief": relief,
            })
            rows.append(row)
            if log is not None:
                log(f"  {name} {method:8s} S no LB {_f(no_lb['skew_mean'])}  with LB "
                    f"{_f(with_lb['skew_mean'])} (runs {', '.join(_f(s) for s in with_lb['skews'])})"
                    f"  [{time.perf_counter() - started:.1f}s]")
    return rows


def _f(x: float) -> str:
    return f"{x:.2f}"


def _d(x: float) -> str:
    return f"{x:+.2f}"


HEADER = ("WL", "Method", "NoLB ours", "NoLB paper", "LB ours", "LB paper", "Δ ours", "Δ paper",
          "LB−paper", "t0", "NoLB chk", "LB chk")


def _cells(row: dict[str, Any]) -> list[str]:
    ours_no, ours_lb = row["no_lb"]["skew_mean"], row["with_lb"]["skew_mean"]
    return [
        row["workload"], row["method"].capitalize(),
        _f(ours_no), _f(row["paper_no_lb"]), _f(ours_lb), _f(row["paper_with_lb"]),
        _d(row["delta"]), _d(row["paper_delta"]), _d(ours_lb - row["paper_with_lb"]),
        _f(row["t0_skew"]), "ok" if row["no_lb_ok"] else "FAIL", row["lb_check"],
    ]


def render(rows: list[dict[str, Any]]) -> str:
    """The table as aligned plain text (with the notes of failing rows below)."""
    table = [list(HEADER)] + [_cells(r) for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(HEADER))]
    lines = ["  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths)))
             for line in table]
    lines.insert(1, "-" * len(lines[0]))
    notes = [f"  {r['workload']} {r['method']}: {r['note']}" for r in rows if r["note"]]
    return "\n".join(lines + (["", "FAIL rows:"] + notes if notes else []))


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The table as markdown, with the settings used."""
    s = meta["settings"]
    out = [
        f"# Table 1 (Experiment 1) — runtime `{meta['runtime']}`, {meta['runs']} run(s), mean S",
        "",
        f"4 mappers, 4 reducers, tau={s['tau']}, cost {s['seconds_per_record'] * 1000:g} ms/record, "
        f"batch_size={s['batch_size']}, chunk_size={s['chunk_size']}, lb_interval_s={s['lb_interval_s']}, "
        f"report_interval_s={s['report_interval_s']}, queue_capacity={s['queue_capacity']}. "
        "Δ = S(No LB) − S(With LB); t0 = S if the balancer acted at t=0 with every record queued.",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "|".join(["---", "---"] + ["---:"] * (len(HEADER) - 2)) + "|",
    ]
    out += ["| " + " | ".join(_cells(r)) + " |" for r in rows]
    notes = [f"- {r['workload']} {r['method']}: {r['note']}" for r in rows if r["note"]]
    if notes:
        out += ["", "FAIL rows:", *notes]
    out += ["", f"Elapsed {meta['elapsed_s']:.1f} s."]
    return "\n".join(out) + "\n"


def _arguments(parser: argparse.ArgumentParser) -> None:
    add_common_args(parser)
    parser.add_argument("--strict", action="store_true", help="exit 1 if any With-LB check fails")


def _run(args: argparse.Namespace, log: Log) -> dict[str, Any]:
    settings = settings_from_args(args)
    if log:
        log(f"Table 1: runtime={args.runtime} runs={args.runs} {settings}")
    rows = run_table1(args.runtime, args.runs, settings, args.workloads, args.methods, log=log, retries=args.retries)
    n_checked = sum(r["lb_check"] != "-" for r in rows)
    n_pass = sum(r["lb_check"] == "PASS" for r in rows)
    inexact = [m for r in rows for cell in (r["no_lb"], r["with_lb"]) for m in cell["inexact"]]
    summary = {"no_lb_all_match": all(r["no_lb_ok"] for r in rows), "lb_pass": n_pass, "lb_checked": n_checked,
               "inexact_jobs": len(inexact)}
    return {"summary": summary, "rows": rows}


def _verdict(results: dict[str, Any], args: argparse.Namespace) -> int:
    rows, summary = results["rows"], results["summary"]
    print()
    print(render(rows))
    no_lb_ok = summary["no_lb_all_match"]
    inexact = [m for r in rows for cell in (r["no_lb"], r["with_lb"]) for m in cell["inexact"]]
    print(f"\nNo-LB S equals the paper within {NO_LB_TOLERANCE}: {'PASS' if no_lb_ok else 'FAIL'}; "
          f"With-LB no worse than the paper: {summary['lb_pass']}/{summary['lb_checked']} improvement rows PASS")
    report_inexact(inexact, 2 * len(rows) * args.runs)
    return int(not no_lb_ok or bool(inexact) or (args.strict and summary["lb_pass"] < summary["lb_checked"]))


EXPERIMENT = Experiment(
    module="workloads.table1", description=__doc__ or "", out="results/table1.json",
    add_arguments=_arguments, run=_run, verdict=_verdict,
    markdown=lambda res: markdown(res["rows"], res["meta"]),
    meta=lambda args: {"settings": settings_from_args(args).to_dict()},
    runtime="ray", runs=3, quick=("--runtime", "local", "--runs", "1", "--workloads", "WL1", "WL4"),
)
main = EXPERIMENT.main


if __name__ == "__main__":
    sys.exit(main())
