"""The public entry point: :func:`run` and its :class:`Result`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from dpa.config import JobConfig
from dpa.errors import ConfigError, JobFailedError, KeyEncodingError, SchemaError
from dpa.metrics import skew
from dpa.plan import build_plan, empty_input_table, normalize_source
from dpa.reducers import Reducer, unwrap
from dpa.runtime_local import RunOutput, run_local
from dpa.source_adapters import find_source_adapter
from dpa.state import concat_results, make_state

logger = logging.getLogger(__name__)


@dataclass
class Stats:
    """What happened in a job.

    Attributes:
        processed: Records processed by each reducer (``M_i``; forwarded ones not counted).
        forwarded: Records each reducer forwarded to the key's new owner.
        emitted: Records each mapper emitted (after ``map_fn``).
        blocks_per_mapper: Input blocks each mapper pulled.
        rebalances: The balancer's event log (:class:`dpa.policy.RebalanceEvent`).
        final_tokens: Tokens per reducer at the end (ring policies), else None.
        ring_version: Routing-state version at the end (0 = never changed).
        merged: Whether a final state merge across reducers was needed.
        wall_time_s: Seconds from the start of ``run`` to the result.
        virtual_time_s: Simulated seconds (in-process runtime only).
        peak_queue: Largest queue length seen per reducer, in records.
        runtime: ``"ray"`` or ``"local"``.
        policy: Policy name.
    """

    processed: list[int]
    forwarded: list[int]
    emitted: list[int]
    blocks_per_mapper: list[int]
    rebalances: list[Any]
    final_tokens: list[int] | None
    ring_version: int
    merged: bool
    wall_time_s: float
    virtual_time_s: float | None
    peak_queue: list[int]
    runtime: str
    policy: str
    num_keys: int = 0
    job_id: str = ""
    timeline: list[Any] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def skew(self) -> float:
        """The DPA paper's skew ``S = (W - U) / (M - U)`` over :attr:`processed` (eq. 2)."""
        return skew(self.processed)

    @property
    def total_processed(self) -> int:
        return sum(self.processed)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict of every field plus ``skew``."""
        return {
            "processed": list(self.processed),
            "forwarded": list(self.forwarded),
            "emitted": list(self.emitted),
            "blocks_per_mapper": list(self.blocks_per_mapper),
            "rebalances": [e.to_dict() for e in self.rebalances],
            "final_tokens": self.final_tokens,
            "ring_version": self.ring_version,
            "merged": self.merged,
            "wall_time_s": self.wall_time_s,
            "virtual_time_s": self.virtual_time_s,
            "peak_queue": list(self.peak_queue),
            "runtime": self.runtime,
            "policy": self.policy,
            "num_keys": self.num_keys,
            "job_id": self.job_id,
            "skew": self.skew,
            "timeline": [{"time_s": t, "queue_lengths": list(q), "version": v} for t, q, v in self.timeline],
            **self.extra,
        }


class Result:
    """The merged result of a job, with its :class:`Stats`.

    The result has the key column(s) followed by the reducer's output column. On the Ray
    runtime the per-reducer parts stay in the object store (:attr:`arrow_refs`) until
    asked for, so the Spark bridge can hand them on without collecting on the driver.
    """

    def __init__(self, tables: list[pa.Table] | None, empty: pa.Table, key_cols: list[str],
                 value_col: str, stats: Stats, arrow_refs: list[Any] | None = None) -> None:
        self._tables = tables
        self._empty = empty
        self._table: pa.Table | None = None
        self.key_columns = key_cols
        self.value_column = value_col
        self.stats = stats
        self.arrow_refs = arrow_refs

    @property
    def schema(self) -> pa.Schema:
        """Schema of the result table."""
        return self.to_arrow().schema if self._tables is not None or self.arrow_refs is None else self._empty.schema

    def to_arrow(self) -> pa.Table:
        """The result as one ``pyarrow.Table``."""
        if self._table is None:
            tables = self._tables
            if tables is None:
                import ray

                tables = ray.get(list(self.arrow_refs or []))
                self._tables = tables
            self._table = concat_results(tables, self._empty)
        return self._table

    def to_pandas(self) -> Any:
        """The result as a ``pandas.DataFrame``."""
        return self.to_arrow().to_pandas()

    def to_dict(self) -> dict[Any, Any]:
        """``{key: value}``; multi-column keys become tuples."""
        table = self.to_arrow()
        values = table[self.value_column].to_pylist()
        if len(self.key_columns) == 1:
            keys = table[self.key_columns[0]].to_pylist()
        else:
            keys = list(zip(*(table[c].to_pylist() for c in self.key_columns)))
        return dict(zip(keys, values))

    def __len__(self) -> int:
        return self.to_arrow().num_rows

    def __repr__(self) -> str:
        return f"Result({len(self)} keys, S={self.stats.skew:.3f}, {len(self.stats.rebalances)} rebalances)"


def _progress_reporter(progress: Callable[[int, int | None], None], total: int | None) -> Callable[[int], None]:
    """``done -> progress(done, total)``; a callback that raises is logged once and dropped."""
    broken = False

    def report(done: int) -> None:
        nonlocal broken
        if broken:
            return
        try:
            progress(int(done), total)
        except Exception as exc:  # a broken progress bar must not fail the job
            broken = True
            logger.warning("progress callback raised %s: %s; not calling it again", type(exc).__name__, exc)

    return report


def _config_from_dict(fields: dict[str, Any]) -> JobConfig:
    """``JobConfig(**fields)``, with unknown field names reported as :class:`ConfigError`."""
    from dataclasses import fields as dataclass_fields

    known = {f.name for f in dataclass_fields(JobConfig)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ConfigError(f"unknown JobConfig field(s) {unknown}; valid fields: {', '.join(sorted(known))}")
    return JobConfig(**fields)


def run(source: Any, key: Any = None, reducer: Reducer | None = None, map_fn: Any = None,
        config: JobConfig | None = None, *, progress: Callable[[int, int | None], None] | None = None,
        **overrides: Any) -> Any:
    """Runs a keyed aggregation with DPA load balancing.

    Args:
        source: A ``pyarrow.Table``, ``pandas.DataFrame``, ``ray.data.Dataset``, Spark
            DataFrame (returns a Spark DataFrame; see :mod:`spark_bridge`) or an iterable
            of records (dicts, tuples or scalars).
        key: A column/field name, a list of names (composite key), an int (tuple field)
            or a callable ``record -> key``. May be omitted for scalar records.
        reducer: A :class:`dpa.Reducer`, e.g. ``dpa.Count()`` (the default).
        map_fn: Optional ``record -> iterable of records``, or ``dpa.BatchMap(fn)`` to map
            whole Arrow/pandas batches.
        config: A :class:`JobConfig` (or a dict of its fields); keyword ``overrides``
            replace its fields.
        progress: Optional ``progress(records_processed, total)``, called on the driver
            about every 0.5 s while the job runs and once at the end. ``total`` is the
            number of input records when known (sized source, no ``map_fn``), else None.
            If it raises, the error is logged and it is not called again. Not used for
            Spark input.

    Returns:
        A :class:`Result` (a Spark DataFrame for Spark input).

    Raises:
        ConfigError, SchemaError, KeyEncodingError: bad input, before any actor starts.
        JobFailedError: the job failed while running; all its actors are gone.
    """
    from dpa.reducers import Count

    if config is None:
        config = _config_from_dict(overrides)
    elif isinstance(config, dict):
        config = _config_from_dict({**config, **overrides})
    elif not isinstance(config, JobConfig):
        raise ConfigError(f"config must be a dpa.JobConfig or a dict of its fields, got {type(config).__name__}")
    elif overrides:
        from dataclasses import asdict

        config = _config_from_dict({**asdict(config), **overrides})
    reducer = Count() if reducer is None else reducer
    adapter = find_source_adapter(source)
    if adapter is not None:  # e.g. a Spark DataFrame, through spark_bridge
        return adapter.run(source, key=key, reducer=reducer, map_fn=map_fn, config=config)
    if not isinstance(reducer, Reducer):
        raise ConfigError(f"reducer must be a dpa.Reducer such as dpa.Count(), got {type(reducer).__name__}")

    src = normalize_source(source, config.batch_size)
    if src.ray_dataset is not None and config.runtime == "local":
        raise ConfigError("a ray.data.Dataset or ArrowRefs source needs runtime='ray'")
    plan, blocks = build_plan(src, key, reducer, map_fn, config)
    inner, _, _ = unwrap(plan.reducer)
    empty = make_state(inner, plan.key_cols, plan.record_kind).empty_result(empty_input_table(plan).schema)

    report = None if progress is None else _progress_reporter(progress, src.num_rows if map_fn is None else None)
    if config.runtime == "local":
        try:
            out: RunOutput = run_local(plan, blocks if blocks is not None else iter(()), progress=report)
        except (ConfigError, SchemaError, KeyEncodingError, JobFailedError):
            raise  # bad input found while reading it, or an already explained failure
        except Exception as exc:  # user code (map_fn, reducer) or the source raised
            raise JobFailedError(f"dpa job failed: {type(exc).__name__}: {exc}",
                                 key=getattr(exc, "key", None)) from exc
        tables = out.tables
    else:
        from dpa.runtime_ray import run_ray

        # Parquet pieces go to the mappers as descriptions: each mapper reads its own.
        dataset = src.ray_dataset if src.pieces is None else src.pieces
        out = run_ray(plan, None if src.pieces is not None else blocks, dataset, config, progress=report)
        tables = None
    if report is not None:
        report(sum(out.processed))
    snap = out.final_snapshot
    stats = Stats(
        processed=out.processed, forwarded=out.forwarded, emitted=out.emitted,
        blocks_per_mapper=out.blocks_per_mapper, rebalances=out.events,
        final_tokens=list(snap.token_counts) if hasattr(snap, "token_counts") else None,
        ring_version=snap.version, merged=out.merged, wall_time_s=out.wall_time_s,
        virtual_time_s=out.virtual_time_s, peak_queue=out.peak_queue, runtime=config.runtime,
        policy=config.policy, job_id=plan.job_id, timeline=out.timeline,
    )
    result = Result(tables, empty, plan.key_cols, plan.reducer.name, stats, arrow_refs=out.arrow_refs)
    if tables is not None:
        stats.num_keys = len(result)
    return result
