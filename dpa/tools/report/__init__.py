"""Run reports: ``stats.json`` plus PNG plots of what the load balancer did.

:func:`write_report` takes a :class:`dpa.Result`, a :class:`dpa.Stats` or the dict of
``Stats.to_dict()`` (e.g. a ``stats.json`` read back) and writes into a directory:

* ``stats.json`` — everything in ``stats.to_dict()`` (and ``baseline_stats.json``);
* ``queues.png`` — queue length per reducer over time (``stats.timeline``), with every
  rebalance event marked by a vertical line labelled with its action and reducer;
* ``records.png`` — records processed per reducer with load balancing, beside the same
  job without it (``baseline_stats``, e.g. a second run with ``max_rounds=0``);
* ``tokens.png`` — ring tokens per reducer over time, rebuilt from the initial tokens and
  each event's ``tokens_after`` (ring policies only);
* ``report.md`` — the key numbers and the event log, linking the images.

:func:`write_experiment_report` plots the skew ``S`` per workload and method of a Table 1
run beside published reference values that the caller passes (``paper=``: e.g.
``workloads.paper.PAPER_TABLE1``, which ``dpa``'s command line gets through the
``dpa.references`` entry point group); without them only the measured values are shown.

The data preparation functions (``queue_series``, ``token_steps``, ...) are plain Python on
the stats dict; the plotting uses matplotlib's object API with the Agg canvas, so it never
changes the process-wide backend and needs no display. Nothing here imports Ray.

Modules: :mod:`dpa.tools.report.runs` (run reports), :mod:`dpa.tools.report.table1` (Table 1
reports) and :mod:`dpa.tools.report.figures` (the shared figure and JSON plumbing); everything
public is importable from :mod:`dpa.tools.report`.
"""

from __future__ import annotations

from dpa.tools.report.runs import (
    DEFAULT_HALVING_TOKENS,
    MAX_EVENT_LABELS,
    end_time,
    event_markers,
    initial_token_counts,
    load_stats,
    plot_queues,
    plot_records,
    plot_tokens,
    queue_series,
    records_comparison,
    stats_dict,
    token_steps,
    write_report,
)
from dpa.tools.report.table1 import (
    PaperTable,
    Table1Row,
    plot_table1,
    table1_rows,
    write_experiment_report,
)

__all__ = [
    "DEFAULT_HALVING_TOKENS",
    "MAX_EVENT_LABELS",
    "PaperTable",
    "Table1Row",
    "end_time",
    "event_markers",
    "initial_token_counts",
    "load_stats",
    "plot_queues",
    "plot_records",
    "plot_table1",
    "plot_tokens",
    "queue_series",
    "records_comparison",
    "stats_dict",
    "table1_rows",
    "token_steps",
    "write_experiment_report",
    "write_report",
]
