"""Soak test of dpa's Ray runtime: hundreds of mixed jobs, two at a time, over one Ray.

Each job draws a policy (every name in ``dpa.policies()``), a size (0 records to
``--max-records``), a source (Arrow table, pandas DataFrame, list of dicts / tuples /
scalars, a generator of Arrow tables), 1-4 mappers and 1-4 reducers, a ``map_fn`` (none,
a per-record one that explodes and filters records, a ``dpa.BatchMap`` over Arrow or
pandas batches), a reducer (Count, Sum, Min, Max, Mean, Collect, TopK, ``WithCost``, user
``dpa.Reducer`` subclasses with and without ``merge``) and a key (a column, several
columns, a callable, a callable returning a tuple). Every ``--long-every``-th job is a
*long* one: its reducer (often a user reducer without ``merge``) is wrapped in
``WithCost`` so that the job lasts about :data:`LONG_JOB_S` seconds, several default
checkpoint intervals, and the checkpoint path is exercised. Jobs run from a
``ThreadPoolExecutor(--threads)`` of driver threads, all over one ``ray.init``.

About ``--bad-rate`` of the jobs carry a mistake (a missing key column, a reducer without
``merge`` under a policy that splits keys, a ``map_fn``, reducer ``add`` or ``finalize``
that raises, an unknown policy, a bad or unknown config value, a key function returning a
list, a generator that raises mid-stream, ``Sum`` over strings) for which one dpa exception
class is expected: never a hang, never a raw Ray exception. About ``--kill-rate`` of the
time, between jobs (no job running), a random live ``dpa:`` actor is killed with
``ray.kill(no_restart=True)``; the next job must still succeed.

Checked:

* every successful result equals a pure-Python oracle over the same records
  (``collections.Counter`` for counts, plain dict aggregation for the others, floats with
  a tolerance), and the reducers processed as many records as the oracle saw;
* every bad input raises its expected dpa exception;
* the in-process ``runtime="local"`` runs every job too (unless ``--no-local-check``) and
  must agree with Ray: the same answer (both equal to the oracle) or the same exception
  class (a disagreement is a ``runtime_mismatch``);
* no job hangs: each has ``JobConfig.timeout_s`` and the driver guards each future with
  its own, longer, deadline (a hang is reported, the soak carries on with the threads
  left);
* after ``dpa.shutdown()`` no ``dpa:`` actor is alive (idle warm pools before it are fine);
* driver RSS and the RSS of dpa actor processes (sampled every ``--mem-every`` jobs, with
  no job running) do not grow beyond ``--mem-bound`` times their value after warm-up.

Run: ``python -m benchmarks.soak [--jobs 300] [--seed 0] [--quick] [--json PATH]``
(``--help`` lists the rest). ``--print-specs`` lists the jobs of a seed; ``--only 31,74``
replays some of them (same seed and mix options) without the others. ``--quick`` is a CI smoke run (30 jobs of at most 5,000
records); ``--init-from-thread`` lets a first ``dpa.run`` on a short-lived thread start Ray;
``--runtime local`` runs the same jobs without Ray, which checks the soak's own oracle.
The exit code is 1 if any result was wrong, any error unexpected, any job hung, any actor
leaked, the runtimes disagreed or memory grew beyond the bound; 0 otherwise.

The parts: :mod:`.specs` (the job mix), :mod:`.jobs` (what jobs run and their oracle),
:mod:`.runner` (running, killing, sampling memory) and :mod:`.cli` (options, summary).
"""

from benchmarks.soak.cli import main, parse_args, run_soak
from benchmarks.soak.jobs import compare, oracle, prepare
from benchmarks.soak.runner import _disagreement, _pickle_by_value, _Running, run_job
from benchmarks.soak.specs import JobSpec, make_specs, regression_specs

__all__ = ["JobSpec", "_Running", "_disagreement", "_pickle_by_value", "compare", "main", "make_specs", "oracle",
           "parse_args", "prepare", "regression_specs", "run_job", "run_soak"]
