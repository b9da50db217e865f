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
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import contextlib
import gc
import heapq
import logging
import math
import os
import random
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import ray

import dpa
from benchmarks.common import job_processes, mb, print_table, role_of, write_json

# ----------------------------------------------------------------------------- job mix
#: Record counts a job draws from (clamped to ``--max-records``), and their weights.
SIZES = (0, 1, 10, 100, 1_000, 5_000, 20_000, 50_000, 200_000)
SIZE_WEIGHTS = (3, 3, 5, 10, 12, 9, 6, 3, 2)
#: Source kinds, and the kind of record each holds.
SOURCES = ("arrow", "pandas", "dicts", "tuples", "scalars", "arrow_gen")
RECORD_KIND = {"arrow": "dict", "pandas": "dict", "dicts": "dict", "arrow_gen": "dict",
               "tuples": "tuple", "scalars": "scalar"}
#: A value no generated record holds: the poisoned record of the bad jobs that raise.
POISON = 987_654_321
POISON_STR = "POISON"
#: Per-record cost of the ``WithCost`` jobs (seconds), and their largest size.
COST_S = 2e-5
COST_MAX_RECORDS = 20_000
#: About how long a long job lasts (seconds of reducer work): several default
#: ``checkpoint_interval_s``; and the record counts long jobs draw from.
LONG_JOB_S = 3.0
LONG_SIZES = (1_000, 5_000, 20_000)

#: Bad-input kinds -> the dpa exception classes accepted for them.
BAD_KINDS: dict[str, tuple[type[BaseException], ...]] = {
    "missing_key_column": (dpa.SchemaError,),
    "no_merge_split": (dpa.ConfigError,),
    "map_raises": (dpa.JobFailedError, dpa.UserCodeError),
    "reducer_add_raises": (dpa.JobFailedError,),
    "finalize_raises": (dpa.JobFailedError,),
    "unknown_policy": (dpa.ConfigError,),
    "bad_config": (dpa.ConfigError,),
    "unknown_config_field": (dpa.ConfigError,),
    "key_returns_list": (dpa.KeyEncodingError, dpa.JobFailedError),
    "generator_raises": (dpa.JobFailedError,),
    "sum_of_strings": (dpa.SchemaError,),
}
#: Invalid JobConfig fields for the ``bad_config`` jobs.
BAD_CONFIG_VALUES: tuple[dict[str, Any], ...] = (
    {"num_mappers": 0}, {"num_reducers": -1}, {"tau": -0.5}, {"initial_tokens": 3},
    {"timeout_s": -1.0}, {"batch_size": 0}, {"max_rounds": -1}, {"chunk_size": "many"},
    {"runtime": "gpu"}, {"lb_interval_s": 0},
)

OUTCOMES = ("ok", "expected_error", "wrong_result", "unexpected_error", "hang", "runtime_mismatch",
            "harness_error")


@dataclass
class JobSpec:
    """One job of the soak, drawn up front from ``--seed`` (the data from :attr:`seed`).

    Attributes:
        index: Position in the soak.
        seed: Seed of the job's data.
        size: Source records.
        source: One of :data:`SOURCES`.
        scalar_type: ``"str"`` or ``"int"``: what a ``scalars`` source holds.
        vocab: Distinct key values drawn from (Zipf-like).
        nulls: Whether some keys and values are null.
        key: ``column``, ``column_int`` (tuple field index), ``multi``, ``callable``,
            ``callable_tuple``, ``default`` (scalars), or a bad kind's ``missing`` / ``list``.
        map: ``none``, ``explode``, ``batch_arrow``, ``batch_pandas`` or ``poison``.
        reducer: ``count``, ``sum``, ``min``, ``max``, ``mean``, ``collect``, ``topk``,
            ``user``, ``nomerge``, ``cost``, or a bad kind's ``bomb_add`` / ``bomb_finalize``.
        column: Logical input column of the reducer: ``v`` (int), ``f`` (float), ``k`` (str).
        policy: Policy name.
        num_mappers: Mapper actors.
        num_reducers: Reducer actors.
        max_rounds: ``JobConfig.max_rounds``.
        tau: ``JobConfig.tau``.
        batch_size: ``JobConfig.batch_size`` (None = dpa's default).
        chunk_size: ``JobConfig.chunk_size`` (None = dpa's default).
        reuse_actors: ``JobConfig.reuse_actors``.
        progress: Whether ``dpa.run`` gets a progress callback.
        topk_k: ``k`` of TopK.
        bad: The bad-input kind (a key of :data:`BAD_KINDS`), or None for a good job.
        bad_config: The invalid config fields of a ``bad_config`` job.
        kill_before: Whether an actor is killed right before this job.
        long: Whether the reducer is wrapped in ``WithCost`` so that the job lasts about
            :data:`LONG_JOB_S` seconds (several checkpoint intervals).
        checkpoint_interval_s: ``JobConfig.checkpoint_interval_s`` (None = dpa's default).
    """

    index: int
    seed: int
    size: int
    source: str
    scalar_type: str
    vocab: int
    nulls: bool
    key: str
    map: str
    reducer: str
    column: str | None
    policy: str
    num_mappers: int
    num_reducers: int
    max_rounds: int
    tau: float
    batch_size: int | None
    chunk_size: int | None
    reuse_actors: bool
    progress: bool
    topk_k: int = 3
    bad: str | None = None
    bad_config: dict[str, Any] = field(default_factory=dict)
    kill_before: bool = False
    long: bool = False
    checkpoint_interval_s: float | None = None

    @property
    def cost_s(self) -> float:
        """Per-record cost of a long job's ``WithCost`` (0 for the others): about
        :data:`LONG_JOB_S` seconds of work per reducer."""
        if not self.long:
            return 0.0
        return LONG_JOB_S * self.num_reducers / max(1, self.size)

    @property
    def kind(self) -> str:
        """The record kind of the source (``dict``, ``tuple`` or ``scalar``)."""
        return RECORD_KIND[self.source]

    def describe(self) -> str:
        """A one-line description of the job."""
        src = f"scalars[{self.scalar_type}]" if self.source == "scalars" else self.source
        red = self.reducer if self.column is None or self.reducer in ("count", "cost") else f"{self.reducer}({self.column})"
        parts = [f"#{self.index}", src, f"n={self.size}", f"key={self.key}", f"map={self.map}", f"red={red}",
                 f"pol={self.policy}", f"m{self.num_mappers}r{self.num_reducers}", f"rounds={self.max_rounds}",
                 f"bs={self.batch_size or '-'}", f"cs={self.chunk_size or '-'}"]
        if self.nulls:
            parts.append("nulls")
        if not self.reuse_actors:
            parts.append("no-reuse")
        if self.bad:
            parts.append(f"BAD={self.bad}{self.bad_config or ''}")
        if self.long:
            parts.append(f"long(cost={self.cost_s:.2g}s)")
        if self.checkpoint_interval_s is not None:
            parts.append(f"ckpt={self.checkpoint_interval_s}")
        if self.kill_before:
            parts.append("after-kill")
        return " ".join(parts)


def needs_merge(policy: str, max_rounds: int, num_mappers: int, num_reducers: int) -> bool:
    """Whether ``policy`` may process one key on several reducers (so reducers need ``merge``)."""
    from dpa.routing.registry import make_policy

    config = dpa.JobConfig(policy=policy, max_rounds=max_rounds, num_mappers=num_mappers, num_reducers=num_reducers)
    return bool(make_policy(config).needs_merge)


def _good_spec(rng: random.Random, index: int, shape: tuple[int, int], policies: list[str],
               max_records: int, long: bool = False) -> JobSpec:
    """A random valid job; a ``long`` one lasts several checkpoint intervals (its reducer,
    a user one without ``merge`` half of the time, is wrapped in ``WithCost``)."""
    size = min(rng.choices(SIZES, SIZE_WEIGHTS)[0], max_records)
    if long:
        size = min(rng.choice(LONG_SIZES), max(1, max_records))
    source = rng.choice(SOURCES)
    kind = RECORD_KIND[source]
    scalar_type = rng.choice(("str", "int"))
    nulls = source != "pandas" and rng.random() < 0.2
    if kind == "dict":
        mapping = rng.choices(("none", "explode", "batch_arrow", "batch_pandas"), (55, 20, 15, 10))[0]
    else:
        mapping = rng.choices(("none", "explode"), (70, 30))[0]
    if mapping == "batch_pandas":
        nulls = False  # pandas turns null ints into NaN floats: a different job, not this one
    key = rng.choice(KEYS[kind])
    numeric = kind != "scalar" or scalar_type == "int"
    reducers = ["count", "min", "max", "collect", "topk", "user", "nomerge", "cost"]
    if numeric:
        reducers += ["sum", "sum", "mean"]
    reducer = rng.choice(reducers)
    if long:
        reducer = "nomerge" if rng.random() < 0.5 else rng.choice([r for r in reducers if r != "cost"])
    if reducer == "cost" and size > COST_MAX_RECORDS:
        reducer = "count"
    column: str | None = None
    if kind != "scalar" and reducer not in ("count", "cost"):
        column = rng.choice({"sum": ("v", "f"), "mean": ("v", "f"), "min": ("v", "f", "k"), "max": ("v", "f", "k"),
                             "collect": ("v", "k"), "topk": ("v", "f", "k"), "user": ("v", "k"),
                             "nomerge": ("v", "k")}[reducer])
    policy = rng.choice(policies)
    max_rounds = rng.choice((0, 1, 1, 2))
    if reducer == "nomerge" and needs_merge(policy, max_rounds, *shape):
        policy, max_rounds = rng.choice((("hash", 0), ("hash", 1), ("halving", 0), ("doubling", 0)))
    batch_size = None
    if rng.random() < 0.7:
        batch_size = rng.choice((max(1, size // rng.randint(2, 10)), 100, 1_000, 20_000))
        batch_size = max(batch_size, math.ceil(size / 200))  # at most ~200 blocks
    chunk_size = None
    if rng.random() < 0.5:
        chunk_size = max(rng.choice((16, 256, 4_096)), math.ceil(size / 300))
    return JobSpec(
        index=index, seed=rng.randrange(1 << 30), size=size, source=source, scalar_type=scalar_type,
        vocab=rng.choice((1, 5, 100, 10_000)), nulls=nulls, key=key, map=mapping, reducer=reducer,
        column=column, policy=policy, num_mappers=shape[0], num_reducers=shape[1], max_rounds=max_rounds,
        tau=rng.choice((0.0, 0.2, 1.0)), batch_size=batch_size, chunk_size=chunk_size,
        reuse_actors=rng.random() >= 0.05, progress=rng.random() < 0.1, topk_k=rng.randint(1, 5),
        long=long,
    )


def _make_bad(spec: JobSpec, bad: str, rng: random.Random, policies: list[str]) -> JobSpec:
    """Turns a valid job into one with the mistake ``bad``."""
    spec.bad = bad
    dict_sources = ("arrow", "pandas", "dicts", "arrow_gen")
    if bad == "missing_key_column":
        spec.source = rng.choice(dict_sources)
        spec.size, spec.key, spec.map = max(spec.size, 10), "missing", "none"
    elif bad == "no_merge_split":
        spec.reducer, spec.column = "nomerge", ("v" if spec.kind != "scalar" else None)
        splitting = [(p, r) for p in policies for r in (1, 2)
                     if needs_merge(p, r, spec.num_mappers, spec.num_reducers)]
        spec.policy, spec.max_rounds = rng.choice(splitting)
    elif bad == "map_raises":
        spec.size, spec.map = max(spec.size, 100), "poison"
    elif bad == "reducer_add_raises":
        spec.size, spec.reducer = max(spec.size, 10), "bomb_add"
        spec.column = "v" if spec.kind != "scalar" else None
    elif bad == "finalize_raises":
        spec.size, spec.reducer = max(spec.size, 10), "bomb_finalize"
        spec.column = "v" if spec.kind != "scalar" else None
    elif bad == "unknown_policy":
        spec.policy = "no-such-policy"
    elif bad == "bad_config":
        spec.bad_config = dict(rng.choice(BAD_CONFIG_VALUES))
    elif bad == "key_returns_list":
        spec.source = rng.choice(dict_sources)
        spec.size, spec.key, spec.map = max(spec.size, 10), "list", "none"
    elif bad == "generator_raises":
        spec.source, spec.size = "arrow_gen", max(spec.size, 200)
        spec.batch_size = max(1, spec.size // 10)
    elif bad == "sum_of_strings":
        spec.source = rng.choice(dict_sources)
        spec.size, spec.reducer, spec.column, spec.map = max(spec.size, 1), "sum", "k", "none"
    return _fit_to_kind(spec)


#: Valid key choices per record kind.
KEYS = {"dict": ("column", "multi", "callable", "callable_tuple"),
        "tuple": ("column", "column_int", "multi", "callable", "callable_tuple"),
        "scalar": ("default", "callable")}


def _fit_to_kind(spec: JobSpec) -> JobSpec:
    """Makes the key, reducer column and ``map_fn`` of a job fit its (possibly changed) source."""
    kind = spec.kind
    if spec.key not in KEYS[kind] and not (kind == "dict" and spec.key in ("missing", "list")):
        spec.key = KEYS[kind][0]
    if kind == "scalar":
        spec.column = None
        if spec.reducer in ("sum", "mean"):
            spec.scalar_type = "int"
    elif spec.column is None and spec.reducer not in ("count", "cost"):
        spec.column = "v"
    if kind != "dict" and spec.map in ("batch_arrow", "batch_pandas"):
        spec.map = "none"
    if spec.source == "pandas" or spec.map == "batch_pandas":
        spec.nulls = False
    return spec


def make_specs(jobs: int, seed: int, kill_rate: float, bad_rate: float, max_records: int,
               shape_change_rate: float, max_width: int = 4, long_every: int = 10) -> list[JobSpec]:
    """Draws the whole soak up front (deterministic in ``seed``).

    The mapper/reducer shape changes with probability ``shape_change_rate`` per job, so
    that warm pools are both reused and replaced. A job right after an actor kill is
    always a valid one (it must succeed). Job ``i`` is a long, valid one when
    ``i % long_every == long_every // 2`` (none with ``long_every=0``), so that even a
    short soak has one.
    """
    rng = random.Random(seed)
    policies = sorted(dpa.policies())
    shape = (rng.randint(1, max_width), rng.randint(1, max_width))
    specs = []
    for i in range(jobs):
        if rng.random() < shape_change_rate:
            shape = (rng.randint(1, max_width), rng.randint(1, max_width))
        kill = i > 0 and rng.random() < kill_rate
        long = long_every > 0 and i % long_every == long_every // 2
        bad = None if kill or long or rng.random() >= bad_rate else rng.choice(sorted(BAD_KINDS))
        spec = _good_spec(rng, i, shape, policies, max_records, long)
        if bad is not None:
            spec = _make_bad(spec, bad, rng, policies)
        spec.kill_before = kill
        specs.append(spec)
    return specs


def regression_specs() -> dict[int, JobSpec]:
    """Jobs that once failed, by their index in the soak that found them (seed 33), for
    the regression tests:

    * ``#31 arrow n=5000 key=multi map=none red=nomerge(v) pol=hash m3r2 rounds=0 bs=100 cs=256``
    * ``#74 arrow_gen n=100000 key=callable_tuple map=batch_arrow red=nomerge(k) pol=hash m3r3
      rounds=0 bs=1000 cs=334``
    * ``#100 pandas n=1 key=callable map=explode red=sum(v) pol=potc m1r3 rounds=2 bs=1000 cs=16``
    * ``#127 pandas n=1 key=callable map=explode red=min(k) pol=mixed m2r3 rounds=1 bs=1000``

    The merge-less ones (#31, #74) failed once a checkpoint was taken: they run with a
    short ``checkpoint_interval_s`` so that they outlive several intervals. The one-record
    ones (#100, #127) have a record that ``explode`` drops (seed 11): the map output is empty.
    """
    common: dict[str, Any] = dict(scalar_type="str", nulls=False, tau=0.0, reuse_actors=True, progress=False)
    return {
        31: JobSpec(index=31, seed=31, size=5000, source="arrow", vocab=100, key="multi", map="none",
                    reducer="nomerge", column="v", policy="hash", num_mappers=3, num_reducers=2,
                    max_rounds=0, batch_size=100, chunk_size=256, checkpoint_interval_s=0.05, **common),
        74: JobSpec(index=74, seed=74, size=100_000, source="arrow_gen", vocab=10_000, key="callable_tuple",
                    map="batch_arrow", reducer="nomerge", column="k", policy="hash", num_mappers=3,
                    num_reducers=3, max_rounds=0, batch_size=1000, chunk_size=334, **common),
        100: JobSpec(index=100, seed=11, size=1, source="pandas", vocab=5, key="callable", map="explode",
                    reducer="sum", column="v", policy="potc", num_mappers=1, num_reducers=3, max_rounds=2,
                    batch_size=1000, chunk_size=16, **common),
        127: JobSpec(index=127, seed=11, size=1, source="pandas", vocab=5, key="callable", map="explode",
                    reducer="min", column="k", policy="mixed", num_mappers=2, num_reducers=3, max_rounds=1,
                    batch_size=1000, chunk_size=None, **common),
    }


# ----------------------------------------------------------------------------- user code
# Module-level so that Ray can pickle them (by value: see _pickle_by_value).

def _value_of(record: Any) -> Any:
    """The ``v`` field of a dict/tuple record, or the scalar itself."""
    if isinstance(record, dict):
        return record["v"]
    if isinstance(record, tuple):
        return record[2]
    return record


def explode(record: Any) -> list[Any]:
    """A per-record ``map_fn``: drops about a fifth of the records and doubles another fifth."""
    v = _value_of(record)
    if v is None:
        return [record]
    if isinstance(v, str):
        last = v[-1]
        if last in "05":
            return []
        return [record, v + "x"] if last in "16" else [record]
    m = v % 5
    if m == 0:
        return []
    if m != 1:
        return [record]
    if isinstance(record, dict):
        return [record, {**record, "v": v + 1}]
    if isinstance(record, tuple):
        return [record, (record[0], record[1], v + 1, record[3])]
    return [record, v + 1]


def map_poison(record: Any) -> list[Any]:
    """A ``map_fn`` that raises on the poisoned record."""
    if _value_of(record) in (POISON, POISON_STR):
        raise ValueError(f"map_fn refuses the poisoned record {record!r}")
    return [record]


def batch_filter_arrow(table: pa.Table) -> pa.Table:
    """A ``BatchMap`` function: keeps the rows whose ``v`` is not a multiple of 4 (nor null)."""
    return table.filter(pc.not_equal(pc.bit_wise_and(table["v"], 3), 0))


def batch_filter_pandas(df: Any) -> Any:
    """:func:`batch_filter_arrow` on a pandas DataFrame (no nulls)."""
    return df[df["v"] % 4 != 0]


def _keep_batch_filtered(record: dict[str, Any]) -> list[dict[str, Any]]:
    """What the batch filters do to one record (the oracle's view)."""
    v = record["v"]
    return [record] if v is not None and v % 4 != 0 else []


def key_upper(record: dict[str, Any]) -> Any:
    """A callable key over dict records."""
    k = record["k"]
    return None if k is None else k.upper()


def key_pair(record: Any) -> tuple[Any, ...]:
    """A callable key returning a tuple (a composite key)."""
    if isinstance(record, dict):
        return (record["k2"], (record["k"] or "")[:3])
    return (record[1], record[0])


def key_tuple_field(record: tuple[Any, ...]) -> int:
    """A callable key over tuple records."""
    return record[1] - 2


def key_scalar(value: Any) -> Any:
    """A callable key over scalar records."""
    if value is None:
        return None
    return value[:2] if isinstance(value, str) else value % 7


def key_as_list(record: dict[str, Any]) -> list[Any]:
    """A bad key function: a list cannot be a key."""
    return [record["k"]]


def _span_add(acc: list[Any], value: Any) -> list[Any]:
    acc = list(acc)
    acc[0] += 1
    if value is not None:
        if acc[1] is None or value < acc[1]:
            acc[1] = value
        if acc[2] is None or value > acc[2]:
            acc[2] = value
    return acc


def _span_merge(a: list[Any], b: list[Any]) -> list[Any]:
    lows = [x for x in (a[1], b[1]) if x is not None]
    highs = [x for x in (a[2], b[2]) if x is not None]
    return [a[0] + b[0], min(lows) if lows else None, max(highs) if highs else None]


def span_text(count: int, low: Any, high: Any) -> str:
    """The output of :class:`Span`: records, smallest and largest non-null value."""
    return f"{count}|{low!r}|{high!r}"


class Span(dpa.Reducer):
    """A user reducer: ``"count|min|max"`` per key (nulls counted, not compared)."""

    def create(self) -> list[Any]:
        return [0, None, None]

    def add(self, acc: list[Any], value: Any) -> list[Any]:
        return _span_add(acc, value)

    def merge(self, a: list[Any], b: list[Any]) -> list[Any]:
        return _span_merge(a, b)

    def finalize(self, acc: list[Any]) -> str:
        return span_text(*acc)


class SpanNoMerge(dpa.Reducer):
    """:class:`Span` without ``merge``: valid only under policies that keep keys in place."""

    def create(self) -> list[Any]:
        return [0, None, None]

    def add(self, acc: list[Any], value: Any) -> list[Any]:
        return _span_add(acc, value)

    def finalize(self, acc: list[Any]) -> str:
        return span_text(*acc)


class BombOnAdd(Span):
    """A user reducer whose ``add`` raises on the poisoned value."""

    def add(self, acc: list[Any], value: Any) -> list[Any]:
        if value in (POISON, POISON_STR):
            raise ArithmeticError(f"add refuses the poisoned value {value!r}")
        return _span_add(acc, value)


class BombOnFinalize(Span):
    """A user reducer whose ``finalize`` raises."""

    def finalize(self, acc: list[Any]) -> str:
        raise ArithmeticError(f"finalize refuses {acc!r}")


# ----------------------------------------------------------------------------- data
SCHEMA = pa.schema([("k", pa.string()), ("k2", pa.int64()), ("v", pa.int64()), ("f", pa.float64())])
TUPLE_FIELD = {"k": "f0", "v": "f2", "f": "f3"}
TUPLE_INDEX = {"k": 0, "v": 2, "f": 3}


@dataclass
class Prepared:
    """A job's dpa arguments and the records its oracle sees."""

    source: Any
    key: Any
    reducer: dpa.Reducer
    map_fn: Any
    records: list[Any]
    py_key: Callable[[Any], Any]
    py_value: Callable[[Any], Any]
    py_map: Callable[[Any], list[Any]] | None


def _columns(spec: JobSpec) -> dict[str, list[Any]]:
    rng = random.Random(spec.seed)
    n = spec.size
    k = [f"k{int(rng.paretovariate(1.2)) % spec.vocab}" for _ in range(n)]
    k2 = [rng.randrange(4) for _ in range(n)]
    v = [rng.randint(-1000, 1000) for _ in range(n)]
    f = [round(rng.uniform(-100.0, 100.0), 3) for _ in range(n)]
    if spec.nulls:
        for col, p in ((k, 0.02), (v, 0.05), (f, 0.05)):
            for i in range(n):
                if rng.random() < p:
                    col[i] = None
    if n and (spec.map == "poison" or spec.reducer == "bomb_add"):
        v[-1] = POISON
        if spec.source == "scalars" and spec.scalar_type == "str":
            k[-1] = POISON_STR
    return {"k": k, "k2": k2, "v": v, "f": f}


def _arrow_chunks(table: pa.Table, rng: random.Random, raise_after: int | None) -> Iterator[pa.Table]:
    """A generator of Arrow tables of random sizes (some empty) covering ``table``."""
    start, emitted = 0, 0
    while start < table.num_rows or emitted == 0:
        if raise_after is not None and emitted >= raise_after:
            raise RuntimeError(f"the input generator broke after {emitted} tables")
        length = rng.choice((0, 1, max(1, table.num_rows // 8), max(1, table.num_rows // 3)))
        yield table.slice(start, length)
        start += length
        emitted += 1
    if raise_after is not None:
        raise RuntimeError(f"the input generator broke after {emitted} tables")


def prepare(spec: JobSpec) -> Prepared:
    """Builds the job's source, key, reducer and ``map_fn``, and the oracle's records."""
    cols = _columns(spec)
    kind = spec.kind
    if kind == "dict":
        records: list[Any] = [dict(zip(cols, row)) for row in zip(*cols.values())]
    elif kind == "tuple":
        records = list(zip(cols["k"], cols["k2"], cols["v"], cols["f"]))
    else:
        records = list(cols["k"] if spec.scalar_type == "str" else cols["v"])

    if spec.source == "arrow":
        source: Any = pa.table(cols, schema=SCHEMA)
    elif spec.source == "pandas":
        source = pa.table(cols, schema=SCHEMA).to_pandas()
    elif spec.source == "arrow_gen":
        raise_after = 2 if spec.bad == "generator_raises" else None
        source = _arrow_chunks(pa.table(cols, schema=SCHEMA), random.Random(spec.seed + 1), raise_after)
    else:
        source = list(records)

    # Key: dpa's argument and the oracle's function.
    py_key: Callable[[Any], Any]
    if spec.key == "missing":
        key: Any = "no_such_column"
        py_key = key_upper
    elif spec.key == "list":
        key = py_key = key_as_list
    elif kind == "dict":
        key, py_key = {
            "column": ("k", lambda r: r["k"]),
            "multi": (["k", "k2"], lambda r: (r["k"], r["k2"])),
            "callable": (key_upper, key_upper),
            "callable_tuple": (key_pair, key_pair),
        }[spec.key]
    elif kind == "tuple":
        key, py_key = {
            "column": ("f0", lambda r: r[0]),
            "column_int": (0, lambda r: r[0]),
            "multi": (["f0", "f1"], lambda r: (r[0], r[1])),
            "callable": (key_tuple_field, key_tuple_field),
            "callable_tuple": (key_pair, key_pair),
        }[spec.key]
    else:
        key, py_key = (None, lambda r: r) if spec.key == "default" else (key_scalar, key_scalar)

    # Reducer column: dpa's name and the oracle's accessor.
    col = spec.column
    if kind == "dict" and col is not None:
        dpa_col: str | None = col
        py_value: Callable[[Any], Any] = lambda r: r[col]  # noqa: E731
    elif kind == "tuple" and col is not None:
        dpa_col, idx = TUPLE_FIELD[col], TUPLE_INDEX[col]
        py_value = lambda r: r[idx]  # noqa: E731
    else:
        dpa_col, py_value = None, lambda r: r  # noqa: E731
    reducer: dpa.Reducer = {
        "count": lambda: dpa.Count(),
        "sum": lambda: dpa.Sum(dpa_col),
        "min": lambda: dpa.Min(dpa_col),
        "max": lambda: dpa.Max(dpa_col),
        "mean": lambda: dpa.Mean(dpa_col),
        "collect": lambda: dpa.Collect(dpa_col),
        "topk": lambda: dpa.TopK(dpa_col, k=spec.topk_k),
        "user": lambda: Span(dpa_col, name="span"),
        "nomerge": lambda: SpanNoMerge(dpa_col, name="span"),
        "cost": lambda: dpa.WithCost(dpa.Count(), COST_S),
        "bomb_add": lambda: BombOnAdd(dpa_col, name="span"),
        "bomb_finalize": lambda: BombOnFinalize(dpa_col, name="span"),
    }[spec.reducer]()
    if spec.long:
        reducer = dpa.WithCost(reducer, spec.cost_s)

    map_fn: Any = None
    py_map: Callable[[Any], list[Any]] | None = None
    if spec.map == "explode":
        map_fn = py_map = explode
    elif spec.map == "poison":
        map_fn = py_map = map_poison
    elif spec.map == "batch_arrow":
        map_fn, py_map = dpa.BatchMap(batch_filter_arrow), _keep_batch_filtered
    elif spec.map == "batch_pandas":
        map_fn, py_map = dpa.BatchMap(batch_filter_pandas, format="pandas"), _keep_batch_filtered
    return Prepared(source, key, reducer, map_fn, records, py_key, py_value, py_map)


# ----------------------------------------------------------------------------- oracle
def oracle(spec: JobSpec, prep: Prepared) -> tuple[dict[Any, Any], int]:
    """The expected ``{key: value}`` in pure Python, and the records the reducers should see."""
    records = prep.records
    if prep.py_map is not None:
        records = [out for r in records for out in prep.py_map(r)]
    keys = [prep.py_key(r) for r in records]
    if spec.reducer in ("count", "cost"):
        return dict(collections.Counter(keys)), len(records)
    groups: dict[Any, list[Any]] = {}
    for key, record in zip(keys, records):
        groups.setdefault(key, []).append(prep.py_value(record))
    out: dict[Any, Any] = {}
    for key, values in groups.items():
        present = [x for x in values if x is not None]
        if spec.reducer == "sum":
            out[key] = (math.fsum(present) if isinstance(present[0], float) else sum(present)) if present else None
        elif spec.reducer == "min":
            out[key] = min(present) if present else None
        elif spec.reducer == "max":
            out[key] = max(present) if present else None
        elif spec.reducer == "mean":
            out[key] = math.fsum(present) / len(present) if present else None
        elif spec.reducer == "collect":
            out[key] = values
        elif spec.reducer == "topk":
            out[key] = heapq.nlargest(spec.topk_k, present)
        else:  # Span, SpanNoMerge
            out[key] = span_text(len(values), min(present) if present else None, max(present) if present else None)
    return out, len(records)


def _same(reducer: str, got: Any, want: Any) -> bool:
    if reducer == "collect":
        return got is not None and collections.Counter(got) == collections.Counter(want)
    if isinstance(want, float) or isinstance(got, float):
        if got is None or want is None:
            return got is want
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-6)
    return got == want


def compare(spec: JobSpec, got: dict[Any, Any], want: dict[Any, Any]) -> str | None:
    """None if ``got`` equals the oracle's ``want``, else what differs (a few examples)."""
    problems = []
    missing = [k for k in want if k not in got]
    extra = [k for k in got if k not in want]
    if missing:
        problems.append(f"{len(missing)} keys missing, e.g. {missing[:3]!r}")
    if extra:
        problems.append(f"{len(extra)} unexpected keys, e.g. {extra[:3]!r}")
    wrong = [(k, got[k], want[k]) for k in want if k in got and not _same(spec.reducer, got[k], want[k])]
    if wrong:
        shown = "; ".join(f"{k!r}: got {str(g)[:60]} want {str(w)[:60]}" for k, g, w in wrong[:3])
        problems.append(f"{len(wrong)} of {len(want)} values differ, e.g. {shown}")
    return "; ".join(problems) or None


# ----------------------------------------------------------------------------- one job
@dataclass
class Outcome:
    """What happened to one job."""

    index: int
    outcome: str
    detail: str
    seconds: float
    job: str
    bad: str | None = None
    error_type: str | None = None
    raw_ray_error: bool = False
    after_kill: bool = False
    thread: str = ""
    long: bool = False
    checkpoints: int | None = None


@dataclass
class _Running:
    """A submitted job: its spec and when a driver thread started it."""

    spec: JobSpec
    started: float | None = None


def _error_name(exc: BaseException) -> str:
    return f"{type(exc).__module__}.{type(exc).__qualname__}"


def _is_raw_ray(exc: BaseException) -> bool:
    return type(exc).__module__.split(".")[0] == "ray"


def _config(spec: JobSpec, timeout_s: float, runtime: str) -> dpa.JobConfig:
    fields: dict[str, Any] = {"runtime": runtime, "num_mappers": spec.num_mappers, "num_reducers": spec.num_reducers,
                              "policy": spec.policy, "max_rounds": spec.max_rounds, "tau": spec.tau,
                              "reuse_actors": spec.reuse_actors, "timeout_s": timeout_s}
    if spec.batch_size is not None:
        fields["batch_size"] = spec.batch_size
    if spec.chunk_size is not None:
        fields["chunk_size"] = spec.chunk_size
    if spec.checkpoint_interval_s is not None:
        fields["checkpoint_interval_s"] = spec.checkpoint_interval_s
    fields.update(spec.bad_config)
    return dpa.JobConfig(**fields)


def _attempt(spec: JobSpec, timeout_s: float, runtime: str) -> tuple[str, str, BaseException | None, int | None]:
    """Runs ``spec`` once on ``runtime`` and judges it against the oracle.

    Returns:
        ``(outcome, detail, exception, checkpoints)``: an :data:`OUTCOMES` name (not
        ``runtime_mismatch``), what happened, the exception raised (None if none) and the
        checkpoints the job took (None if it failed).
    """
    try:
        prep = prepare(spec)
        want, want_records = oracle(spec, prep) if spec.bad is None else ({}, 0)
    except Exception as exc:
        return "harness_error", f"building the job failed: {traceback.format_exc(limit=3)}", exc, None
    seen: list[int] = []
    try:
        config = _config(spec, timeout_s, runtime)
        extra: dict[str, Any] = {"nmappers": 3} if spec.bad == "unknown_config_field" else {}
        if spec.progress:
            extra["progress"] = lambda done, total: seen.append(done)
        res = dpa.run(prep.source, key=prep.key, reducer=prep.reducer, map_fn=prep.map_fn, config=config, **extra)
        got = res.to_dict()
        processed = sum(res.stats.processed)
        checkpoints = int(getattr(res.stats, "checkpoints", 0) or 0)
    except BaseException as exc:  # judged below; KeyboardInterrupt too, so the soak reports it
        message = f"{_error_name(exc)}: {str(exc)[:400]}"
        if isinstance(exc, dpa.JobFailedError) and "timeout_s=" in str(exc):
            return "hang", f"dpa's own timeout fired: {message}", exc, None
        if spec.bad is not None:
            accepted = BAD_KINDS[spec.bad]
            if isinstance(exc, accepted):
                return "expected_error", message, exc, None
            names = "/".join(c.__name__ for c in accepted)
            return "unexpected_error", f"expected {names} for {spec.bad}, got {message}", exc, None
        return "unexpected_error", message, exc, None

    if spec.bad is not None:
        names = "/".join(c.__name__ for c in BAD_KINDS[spec.bad])
        return ("unexpected_error", f"expected {names} for {spec.bad}, but the job succeeded with {len(got)} keys",
                None, checkpoints)
    diff = compare(spec, got, want)
    if diff is not None:
        return "wrong_result", diff, None, checkpoints
    if processed != want_records:
        return ("wrong_result", f"result right, but stats.processed sums to {processed}, not {want_records} records",
                None, checkpoints)
    return "ok", f"{len(got)} keys, {want_records} records", None, checkpoints


def _disagreement(ray_out: tuple[str, str, BaseException | None, int | None],
                  local_out: tuple[str, str, BaseException | None, int | None]) -> str | None:
    """What differs between the Ray and the local runtime's run of one job, or None. Both
    must succeed with the oracle's answer, or both raise the same exception class."""
    (r_kind, r_detail, r_exc, _), (l_kind, l_detail, l_exc, _) = ray_out, local_out
    r_err = None if r_exc is None else _error_name(r_exc)
    l_err = None if l_exc is None else _error_name(l_exc)
    if r_kind == l_kind and r_err == l_err:
        return None
    return (f"Ray: {r_kind} ({r_err or r_detail[:120]}); local: {l_kind} "
            f"({l_err or l_detail[:120]}): {l_detail[:200]}")


def run_job(running: _Running, timeout_s: float, runtime: str = "ray", local_check: bool = False) -> Outcome:
    """Runs one job on a driver thread and judges it; never raises. With ``local_check``
    (and ``runtime="ray"``) the job then runs on ``runtime="local"`` too, which must agree."""
    spec = running.spec
    running.started = time.monotonic()
    thread = threading.current_thread().name
    kind, detail, exc, checkpoints = first = _attempt(spec, timeout_s, runtime)
    seconds = time.monotonic() - running.started
    if local_check and runtime == "ray" and kind not in ("hang", "harness_error"):
        diff = _disagreement(first, _attempt(spec, timeout_s, "local"))
        if diff is not None and kind in ("ok", "expected_error"):
            kind, detail = "runtime_mismatch", diff
        elif diff is not None:
            detail = f"{detail} [runtimes disagree: {diff}]"
    return Outcome(spec.index, kind, " ".join(detail.split()), seconds, spec.describe(),
                   bad=spec.bad, error_type=None if exc is None else _error_name(exc),
                   raw_ray_error=exc is not None and _is_raw_ray(exc), after_kill=spec.kill_before,
                   thread=thread, long=spec.long, checkpoints=checkpoints)


# ----------------------------------------------------------------------------- actors
class ActorWatch:
    """Lists live ``dpa:`` actors: Ray's state API when the dashboard runs, else the GCS's
    named-actor list (the state API needs the dashboard, which dpa does not start)."""

    def __init__(self) -> None:
        self.state_api: bool | None = None

    def live(self) -> list[str]:
        """Names of the live dpa actors."""
        if not ray.is_initialized():
            return []
        if self.state_api is not False:
            try:
                from ray.util.state import list_actors

                actors = list_actors(filters=[("state", "=", "ALIVE")], limit=10_000, timeout=10,
                                     raise_on_missing_output=False)
                self.state_api = True
                names = [getattr(a, "name", None) or "" for a in actors]
                return sorted(n for n in names if n.startswith("dpa:"))
            except Exception:
                self.state_api = False
        named = ray.util.list_named_actors(all_namespaces=True)
        return sorted(a["name"] for a in named if a["name"].startswith("dpa:"))

    def wait_none(self, timeout_s: float) -> list[str]:
        """Waits until no dpa actor is alive; returns those still alive at the deadline."""
        deadline = time.monotonic() + timeout_s
        alive = self.live()
        while alive and time.monotonic() < deadline:
            time.sleep(0.5)
            alive = self.live()
        return alive


def kill_random_actor(rng: random.Random) -> str | None:
    """Kills a random live ``dpa:`` actor in namespace ``dpa``; returns its name (None if none)."""
    if not ray.is_initialized():
        return None
    names = sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                   if a["name"].startswith("dpa:") and a.get("namespace") == "dpa")
    rng.shuffle(names)
    for name in names:
        try:
            handle = ray.get_actor(name, namespace="dpa")
        except ValueError:  # died meanwhile
            continue
        ray.kill(handle, no_restart=True)
        return name
    return None


def kill_actors(names: list[str]) -> None:
    """Kills the named dpa actors (cleans up after a leak)."""
    for name in names:
        with contextlib.suppress(Exception):
            ray.kill(ray.get_actor(name, namespace="dpa"), no_restart=True)


# ----------------------------------------------------------------------------- memory
DPA_ROLES = ("coordinator", "balancer", "mapper", "reducer")


def memory_sample(after_job: int) -> dict[str, Any]:
    """Driver RSS and the summed RSS of the dpa actor processes (children of this driver)."""
    gc.collect()
    me = os.getpid()
    driver = actors = procs = 0
    for proc in job_processes():
        try:
            role = role_of(proc, me)
            if role == "driver":
                driver = proc.memory_info().rss
            elif role in DPA_ROLES:
                actors += proc.memory_info().rss
                procs += 1
        except Exception:  # the process went away
            continue
    return {"after_job": after_job, "driver_rss_mb": round(mb(driver), 1), "actors_rss_mb": round(mb(actors), 1),
            "actor_procs": procs, "rss_per_actor_mb": round(mb(actors / procs), 1) if procs else 0.0}


def memory_verdict(samples: list[dict[str, Any]], warmup: int, bound: float) -> dict[str, Any]:
    """First, after-warm-up and last samples, and whether memory grew beyond ``bound``.

    Actor memory is judged per process: the number of pooled actors changes with the job
    shapes, the memory of one should not keep growing.
    """
    if not samples:
        return {"samples": [], "growth": False, "note": "no samples"}
    warm = next((s for s in samples if s["after_job"] >= warmup), samples[-1])
    last = samples[-1]
    flags = []
    if last["driver_rss_mb"] > bound * warm["driver_rss_mb"]:
        flags.append(f"driver RSS {warm['driver_rss_mb']} -> {last['driver_rss_mb']} MB")
    # Actors: the first sample after warm-up that saw some (a failed job may have just torn a pool down).
    warm_actors = next((s for s in samples if s["after_job"] >= warmup and s["actor_procs"]), None)
    if warm_actors and last["actor_procs"] and last["rss_per_actor_mb"] > bound * warm_actors["rss_per_actor_mb"]:
        flags.append(f"RSS per dpa actor {warm_actors['rss_per_actor_mb']} -> {last['rss_per_actor_mb']} MB")
    return {"first": samples[0], "warm": warm, "warm_actors": warm_actors or warm, "last": last, "bound": bound,
            "max_actor_procs": max(s["actor_procs"] for s in samples),
            "growth": bool(flags), "flags": flags, "samples": samples}


# ----------------------------------------------------------------------------- the soak
def _pickle_by_value() -> None:
    """Ships this module's functions and reducers to Ray by value when it is imported (as
    by the tests), so workers need not import ``benchmarks``."""
    if __name__ != "__main__":
        with contextlib.suppress(Exception):
            import ray.cloudpickle

            ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class Soak:
    """Runs the jobs on a thread pool, guards them, injects kills and keeps the tally."""

    def __init__(self, opts: argparse.Namespace) -> None:
        self.opts = opts
        self.guard_s = opts.timeout_s + max(30.0, 0.25 * opts.timeout_s)
        self.outcomes: list[Outcome] = []
        self.inflight: dict[cf.Future[Outcome], _Running] = {}
        self.hung: list[tuple[cf.Future[Outcome], _Running]] = []
        self.kills: list[dict[str, Any]] = []
        self.kills_skipped = 0
        self.samples: list[dict[str, Any]] = []
        self.not_run = 0
        self.t0 = time.monotonic()

    # -- bookkeeping ----------------------------------------------------------------
    def _record(self, out: Outcome) -> None:
        self.outcomes.append(out)
        if self.opts.verbose or out.outcome not in ("ok", "expected_error"):
            tag = out.outcome.upper() if out.outcome not in ("ok", "expected_error") else out.outcome
            print(f"  [{tag}] {out.job} ({out.seconds:.1f}s): {out.detail[:300]}", flush=True)
        done = len(self.outcomes)
        if done % max(1, self.opts.jobs // 10) == 0:
            counts = collections.Counter(o.outcome for o in self.outcomes)
            print(f"[{done:>4}/{self.opts.jobs}] " + "  ".join(f"{k}={counts.get(k, 0)}" for k in OUTCOMES)
                  + f"  ({time.monotonic() - self.t0:.0f}s)", flush=True)

    def _busy_hung(self) -> int:
        return sum(1 for fut, _ in self.hung if not fut.done())

    def _wait(self, target: int) -> None:
        """Waits until at most ``target`` jobs are in flight (finished, or declared hung)."""
        while len(self.inflight) > target:
            done, _ = cf.wait(list(self.inflight), timeout=0.5, return_when=cf.FIRST_COMPLETED)
            for fut in done:
                running = self.inflight.pop(fut)
                try:
                    self._record(fut.result(timeout=0))
                except Exception as exc:  # run_job never raises; a bug of the soak itself
                    self._record(Outcome(running.spec.index, "harness_error", repr(exc), 0.0, running.spec.describe()))
            now = time.monotonic()
            for fut, running in list(self.inflight.items()):
                if running.started is not None and now - running.started > self.guard_s:
                    self.inflight.pop(fut)
                    self.hung.append((fut, running))
                    self._record(Outcome(running.spec.index, "hang",
                                         f"no result after {self.guard_s:.0f}s (driver guard; timeout_s="
                                         f"{self.opts.timeout_s}); its thread is abandoned",
                                         now - running.started, running.spec.describe(),
                                         bad=running.spec.bad, after_kill=running.spec.kill_before))
            if self._busy_hung() >= self.opts.threads and self.inflight:
                # Every driver thread is stuck: the queued jobs would never start.
                for fut, running in list(self.inflight.items()):
                    if running.started is None and fut.cancel():
                        self.inflight.pop(fut)
                        self.not_run += 1

    def _sample_memory(self, after_job: int) -> None:
        self._wait(0)
        if ray.is_initialized():
            self.samples.append(memory_sample(after_job))

    # -- the run ----------------------------------------------------------------------
    def run(self, specs: list[JobSpec]) -> None:
        """Submits every job, at most ``--threads`` at a time; kills actors between jobs."""
        kill_rng = random.Random(self.opts.seed + 7)
        pool = cf.ThreadPoolExecutor(self.opts.threads, thread_name_prefix="soak")
        try:
            for spec in specs:
                if spec.index and spec.index % self.opts.mem_every == 0:
                    self._sample_memory(spec.index)
                if spec.kill_before and self.opts.runtime == "ray":
                    self._wait(0)  # between jobs: nothing running
                    name = kill_random_actor(kill_rng)
                    if name is None:
                        self.kills_skipped += 1
                    else:
                        self.kills.append({"before_job": spec.index, "actor": name})
                        if self.opts.verbose:
                            print(f"  killed {name} before job #{spec.index}", flush=True)
                self._wait(max(0, self.opts.threads - self._busy_hung() - 1))
                if self._busy_hung() >= self.opts.threads:
                    print("every driver thread is hung: stopping the soak", flush=True)
                    self.not_run += len(specs) - spec.index
                    break
                running = _Running(spec)
                self.inflight[pool.submit(run_job, running, self.opts.timeout_s, self.opts.runtime,
                                         self.opts.local_check)] = running
            self._wait(0)
            self._sample_memory(len(specs))
        finally:
            pool.shutdown(wait=not self._busy_hung(), cancel_futures=True)


def _pid() -> int:
    return os.getpid()


def start_ray_from_short_lived_thread(timeout_s: float) -> None:
    """Lets a first ``dpa.run`` start Ray on a thread that then exits, and checks Ray
    survived it (Ray's head processes must not be tied to that thread).

    Raises:
        RuntimeError: Ray is not usable after the thread ended.
    """
    errors: list[BaseException] = []

    def first_job() -> None:
        try:
            dpa.run(["a", "b", "a"], config=dpa.JobConfig(timeout_s=timeout_s)).to_dict()
        except BaseException as exc:  # handed to the main thread
            errors.append(exc)

    print("starting Ray from a short-lived driver thread (if this process now dies, Ray's head "
          "processes died with that thread)", flush=True)
    thread = threading.Thread(target=first_job, name="soak-ray-starter")
    thread.start()
    thread.join(timeout_s + 60)
    if thread.is_alive() or errors:
        raise RuntimeError(f"the first dpa.run on a driver thread failed: {errors or 'it hung'}")
    time.sleep(2.0)  # time for a parent-death signal to take Ray's processes down
    check = ray.remote(num_cpus=0)(_pid).remote()
    ready, _ = ray.wait([check], timeout=60)
    if not ready:
        raise RuntimeError("Ray does not run tasks after the thread that started it ended")
    ray.get(check)


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
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
