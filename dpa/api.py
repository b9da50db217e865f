"""The public entry point: :func:`run` (its :class:`~dpa.result.Result` is in :mod:`dpa.result`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from dpa.aggregates.contract import Reducer, what_it_is
from dpa.aggregates.state import make_state
from dpa.config import JobConfig
from dpa.engine.output import RunOutput
from dpa.engine.plan import empty_input_table
from dpa.engine.planning import build_plan
from dpa.errors import ConfigError, JobFailedError, KeyEncodingError, SchemaError
from dpa.input.adapters import find_source_adapter
from dpa.input.sources import normalize_source
from dpa.result import Result, Stats
from dpa.runtime.local import run_local
from dpa.runtime.ray.quiet import quiet_ray_data_reads

logger = logging.getLogger(__name__)


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
    """The config ``fields`` describe: groups (``shape=...``), ``runtime``, ``reuse_actors``
    and group fields by their own names (``num_reducers=8``), over the defaults.

    Raises:
        ConfigError: An unknown name (the message lists the valid ones) or a bad value.
    """
    return JobConfig().with_options(**fields)


def run(source: Any, key: Any = None, reducer: Reducer | None = None, map_fn: Any = None,
        config: JobConfig | None = None, *, progress: Callable[[int, int | None], None] | None = None,
        **overrides: Any) -> Any:
    """Runs a keyed aggregation with DPA load balancing.

    Args:
        source: A ``pyarrow.Table``, ``pandas.DataFrame``, ``ray.data.Dataset``, Spark
            DataFrame (through :mod:`spark_bridge`; :meth:`Result.to_spark` gives the result
            as a Spark DataFrame) or an iterable of records (dicts, tuples or scalars).
        key: A column/field name, a list of names (composite key), an int (tuple field)
            or a callable ``record -> key``. May be omitted for scalar records.
        reducer: A :class:`dpa.Reducer`, e.g. ``dpa.Count()`` (the default), or a list of
            them, computed in one pass with one output column each
            (:mod:`dpa.aggregates.composite`; names like Spark's, e.g. ``sum(amount)``),
            or a per-group function :class:`dpa.GroupApply` (the result is then the rows
            it returned, without key columns added).
        map_fn: Optional ``record -> iterable of records``, or ``dpa.BatchMap(fn)`` to map
            whole Arrow/pandas batches.
        config: A :class:`JobConfig` (or a dict of its fields, like ``overrides``).
        progress: Optional ``progress(records_processed, total)``, called on the driver
            about every 0.5 s while the job runs and once at the end. ``total`` is the
            number of input records when known (sized source, no ``map_fn``), else None.
            If it raises, the error is logged and it is not called again. Not used for
            Spark input.
        overrides: Shortcuts for the config's fields, by their own names: any group field
            (``num_reducers=8``, ``policy="hash"``, ``tau=0.3``, ``batch_size=...``,
            ``timeout_s=...``, ``migrate="state"``, ...), a whole group (``shape=dpa.ShapeConfig(...)``),
            ``runtime`` or ``reuse_actors``; they replace ``config``'s
            (:meth:`JobConfig.with_options`). An unknown name is a :class:`ConfigError`.

    Returns:
        A :class:`Result`, whatever the input.

    Raises:
        ConfigError, SchemaError, KeyEncodingError: bad input, before any actor starts.
        JobFailedError: the job failed while running; all its actors are gone.
    """
    from dpa.aggregates.builtins import Count

    if config is None:
        config = _config_from_dict(overrides)
    elif isinstance(config, dict):
        config = _config_from_dict({**config, **overrides})
    elif not isinstance(config, JobConfig):
        raise ConfigError(f"config must be a dpa.JobConfig or a dict of its fields, got {type(config).__name__}")
    elif overrides:
        config = config.with_options(**overrides)
    config = config.resolved()  # the default width: the CPUs dpa can use now
    reducer = Count() if reducer is None else reducer
    if isinstance(reducer, (list, tuple)):  # several aggregates in one pass
        from dpa.aggregates.composite import combine

        reducer = combine(list(reducer))
    adapter = find_source_adapter(source)
    if adapter is not None:  # e.g. a Spark DataFrame, through spark_bridge
        return adapter.run(source, key=key, reducer=reducer, map_fn=map_fn, config=config)
    if not isinstance(reducer, Reducer):
        raise ConfigError(f"reducer must be a dpa.Reducer such as dpa.Count(), {what_it_is(reducer)}")

    with quiet_ray_data_reads(source):  # reading a ray.data.Dataset prints nothing
        return _run_source(source, key, reducer, map_fn, config, progress)


def _run_source(source: Any, key: Any, reducer: Reducer, map_fn: Any, config: JobConfig,
                progress: Callable[[int, int | None], None] | None) -> Result:
    """:func:`run` for a source dpa reads itself, its arguments checked and resolved."""
    src = normalize_source(source, config.batch_size, config.num_mappers)
    if src.ray_dataset is not None and config.runtime == "local":
        raise ConfigError("a ray.data.Dataset or ArrowRefs source needs runtime='ray'")
    plan, blocks = build_plan(src, key, reducer, map_fn, config)
    empty = make_state(plan.aggregate, plan.key_cols, plan.record_kind).empty_result(empty_input_table(plan).schema)

    report = None if progress is None else _progress_reporter(progress, src.num_rows if map_fn is None else None)
    if config.runtime == "local" or src.num_rows == 0:
        # An input known to be empty has nothing for actors to do: its (empty) result is
        # computed in-process, without starting Ray.
        try:
            out: RunOutput = run_local(plan, blocks if blocks is not None else iter(()), progress=report)
        except (ConfigError, SchemaError, KeyEncodingError, JobFailedError):
            raise  # bad input found while reading it, or an already explained failure
        except Exception as exc:  # user code (map_fn, reducer) or the source raised
            raise JobFailedError(f"dpa job failed: {type(exc).__name__}: {exc}",
                                 key=getattr(exc, "key", None)) from exc
        tables = out.tables
    else:
        from dpa.runtime.ray.driver import run_ray

        # Parquet pieces go to the mappers as descriptions: each mapper reads its own.
        dataset = src.ray_dataset if src.pieces is None else src.pieces
        out = run_ray(plan, None if src.pieces is not None else blocks, dataset, config, progress=report)
        tables = None
    if report is not None:
        report(sum(out.processed))
    stats = Stats.from_output(out, runtime=config.runtime, policy=plan.policy.name, job_id=plan.job_id)
    dictionaries = {c: t for c, t in zip(plan.key_cols, plan.key_types or []) if t is not None and pa.types.is_dictionary(t)}
    from dpa.aggregates.composite import output_names

    if plan.applies_groups:  # fn's rows, as it returned them (no key columns added)
        result = Result(tables, empty, [], plan.aggregate.output_names(), stats, arrow_refs=out.arrow_refs,
                        result_meta=out.result_meta)
        stats.num_keys = (out.group_apply or {}).get("groups", 0)
        return result
    result = Result(tables, empty, plan.key_cols, output_names(plan.aggregate), stats, arrow_refs=out.arrow_refs,
                    key_types=dictionaries, result_meta=out.result_meta)
    if tables is not None:
        stats.num_keys = len(result)
    return result
