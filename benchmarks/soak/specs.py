"""The soak's job mix: what a job is (:class:`JobSpec`), how good and bad jobs are drawn
from a seed, and the jobs that once found a bug (:func:`regression_specs`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

import dpa

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

    config = dpa.JobConfig().with_options(policy=policy, max_rounds=max_rounds, num_mappers=num_mappers,
                                          num_reducers=num_reducers)
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

