"""Building a :class:`~dpa.engine.plan.JobPlan` from ``dpa.run``'s arguments, in named steps.

:func:`build_plan` reads as the list of its steps, each a function here:

1. **validate** (:func:`validate_config`): the config, the policy's settings, ``map_fn`` and an
   input the source could not read;
2. **probe** (:class:`BlockProbe`, :func:`probe_records`): the first blocks are read ahead
   (and re-chained in front of the input) to learn what records ``map_fn`` emits;
3. **fit** (:func:`fit_policy`): the reducer argument taken apart once
   (:func:`~dpa.aggregates.requested.requested`: the bare aggregate and its per-record cost,
   which the plan carries as :attr:`JobPlan.aggregate` and :attr:`JobPlan.cost`), then the
   aggregate against the policy (merge, elastic reducers, checkpoints), with the fall-back of
   the default policy to ``hash``;
4. **route** (:func:`resolve_key`): the key columns and their types, a key function run on a
   sample;
5. **type** (:func:`type_reducer`): output names, the reducer against the column types,
   partial-state input;
6. **cost** (:func:`assemble`): the plan itself, with what the reducer's cost and shape
   decide (map-side combine, checkpoints).

Every step raises :class:`~dpa.errors.ConfigError`, :class:`~dpa.errors.SchemaError` or
:class:`~dpa.errors.KeyEncodingError` saying what is wrong and how to fix it, before any actor
starts.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from dpa.aggregates.builtins import bind_reducer
from dpa.aggregates.contract import ColumnarReducer, Cost, Reducer
from dpa.aggregates.group_apply import GroupApply
from dpa.aggregates.requested import Requested, requested
from dpa.config import DefaultPolicyName, JobConfig
from dpa.engine.block_types import (
    check_head_keys,
    checked_blocks,
    classify_range_error,
    key_columns_for,
)
from dpa.engine.plan import KEY_COLUMN, JobPlan, records_sample
from dpa.errors import ConfigError, SchemaError, UserCodeError
from dpa.input.records import (
    HASH_COL,
    SCALAR_COLUMN,
    WEIGHT_COL,
    IntegerRangeError,
    record_kind_of,
    records_to_table,
    table_to_records,
    tuple_columns,
)
from dpa.input.sources import Source, cut_table
from dpa.input.user_code import BatchMap
from dpa.keys.columns import check_key_type, decoded_schema
from dpa.routing.policy import PolicySpec
from dpa.routing.registry import make_policy

logger = logging.getLogger(__name__)

#: Most blocks read at plan time to find the first records ``map_fn`` emits (it may filter
#: whole blocks out); each probe reads a few records of a block.
PROBE_BLOCKS = 8


def read_columns(key: Any, reducer: Reducer, map_fn: Any, config: JobConfig) -> set[str] | None:
    """The source columns a job reads, from its arguments: what its plan's
    :attr:`JobPlan.source_columns` will say (None: every column)."""
    if map_fn is not None or config.input_combined or not (
            isinstance(key, str) or (isinstance(key, (list, tuple)) and key and all(isinstance(k, str) for k in key))):
        return None
    need = reducer.input_columns()
    return None if need is None else {*([key] if isinstance(key, str) else key), *need}


def build_plan(source: Source, key: Any, reducer: Reducer, map_fn: Any,
               config: JobConfig) -> tuple[JobPlan, Iterator[pa.Table] | None]:
    """Validates the job and returns the plan plus the (possibly re-chained) block iterator.

    Raises:
        ConfigError, SchemaError, KeyEncodingError: what is wrong and how to fix it.
    """
    config, policy = validate_config(source, key, reducer, map_fn, config)
    probe = BlockProbe(source)
    record_kind, schema = probe_records(probe, map_fn, key)
    asked = requested(reducer)  # the aggregate and its cost, apart from here on
    fitted = fit_policy(asked, bind_reducer(asked.aggregate, record_kind), config, policy)
    key_fn, key_cols, key_types = resolve_key(probe, key, map_fn, record_kind, schema)
    schema = type_reducer(fitted, map_fn, key_fn, key_cols, schema)
    plan = assemble(fitted, probe.source, map_fn, record_kind, key_fn, key_cols, key_types, schema)
    blocks = probe.blocks
    if blocks is not None and map_fn is None and not fitted.config.input_combined:
        # Blocks read on the driver are checked against each other as they are handed out,
        # with their position in the input for the messages.
        plan.checked_upstream = key_fn is None and source.pieces is None
        blocks = checked_blocks(blocks, plan)
    return plan, blocks


# -- 1. validate ----------------------------------------------------------------------------

def validate_config(source: Source, key: Any, reducer: Reducer, map_fn: Any,
                    config: JobConfig) -> tuple[JobConfig, PolicySpec]:
    """The resolved config (default width, batch size from the input) and the policy it
    names, with ``map_fn`` checked and an error the source deferred raised."""
    if not isinstance(config, JobConfig):
        raise ConfigError(f"config must be a dpa.JobConfig, got {type(config).__name__}")
    config = config.resolved()  # the default width, as of now
    if config.batch_size is None:  # sized from the input (the policy's record-based defaults use it)
        cut_table(source, read_columns(key, reducer, map_fn, config), config.num_mappers)
        config = config.with_options(batch_size=source.block_rows)
    policy = make_policy(config)  # the policy's settings are validated here, once per job
    if map_fn is not None and not callable(map_fn):
        raise ConfigError(f"map_fn must be callable (record -> iterable of records) or dpa.BatchMap, got {type(map_fn).__name__}")
    if source.deferred is not None:
        exc = source.deferred
        error = exc if map_fn is not None else classify_range_error(exc, source.kind, key)
        raise error from (None if error is exc else exc)
    return config, policy


# -- 2. probe -------------------------------------------------------------------------------

class BlockProbe:
    """The source's first blocks, read ahead for dry runs and put back in front of its
    iterator (:attr:`blocks`); a source without an iterator (a Ray Dataset) offers its probe
    block instead."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.blocks: Iterator[pa.Table] | None = source.blocks

    def peek(self) -> pa.Table | None:
        """The first block (None for an empty input)."""
        if self.blocks is None:
            return self.source.probe
        first = next(self.blocks, None)
        if first is not None:
            self.blocks = itertools.chain([first], self.blocks)
        return first

    def until(self, probe: Callable[[pa.Table], list[Any]], limit: int = PROBE_BLOCKS) -> list[Any]:
        """``probe(block)`` on the first blocks in turn, up to ``limit`` of them, until it
        returns something (a ``map_fn`` may filter whole blocks out)."""
        if self.blocks is None:
            return probe(self.source.probe) if self.source.probe is not None else []
        taken: list[pa.Table] = []
        found: list[Any] = []
        while not found and len(taken) < limit:
            block = next(self.blocks, None)
            if block is None:
                break
            taken.append(block)
            found = probe(block)
        self.blocks = itertools.chain(taken, self.blocks)
        return found


def probe_records(probe: BlockProbe, map_fn: Any, key: Any) -> tuple[str, pa.Schema | None]:
    """The kind and schema of the records the key and reducer see: the source's, or those of
    the first records ``map_fn`` emits (None: not known yet, e.g. an empty input)."""
    source = probe.source
    if map_fn is None:
        return source.kind, source.schema
    first = probe.peek()
    if isinstance(map_fn, BatchMap):
        if first is None:
            return "dict", None
        try:
            return "dict", map_fn(first.slice(0, 64)).schema
        except Exception as exc:
            raise UserCodeError(f"map_fn raised {type(exc).__name__}: {exc} on the first batch") from exc
    sample = probe.until(lambda block: _map_sample(block, map_fn, source.kind)) if first is not None else []
    if not sample:
        return source.kind, None
    record_kind = record_kind_of(sample[0])
    try:
        return record_kind, records_to_table(sample, record_kind).schema
    except IntegerRangeError as exc:
        error = classify_range_error(exc, record_kind, key)
        raise error from (None if error is exc else exc)


def _map_sample(block: pa.Table, map_fn: Any, input_kind: str) -> list[Any]:
    """The first records ``map_fn`` emits for a block's first 64 records."""
    produced_all: list[Any] = []
    for record in table_to_records(block.slice(0, 64), input_kind):
        try:
            produced = map_fn(record)
        except Exception as exc:
            raise UserCodeError(f"map_fn raised {type(exc).__name__}: {exc} on record {record!r}", record=record) from exc
        if (produced is not None and not isinstance(produced, Iterable)) or isinstance(produced, (str, bytes, dict)):
            raise ConfigError(
                f"map_fn must return an iterable of records (e.g. a list), got {type(produced).__name__} "
                f"for record {record!r}; wrap a single record as [record]"
            )
        produced_all.extend(produced or ())
        if produced_all:
            break
    return produced_all


# -- 3. fit the reducer to the policy -------------------------------------------------------

@dataclass
class Fitted:
    """A bound aggregate and its cost, with the config and policy they run under."""

    aggregate: Reducer
    cost: Cost
    wrapped: bool  # the user's reducer was wrapped in WithCost
    config: JobConfig
    policy: PolicySpec
    checkpoint_interval_s: float


def fit_policy(asked: Requested, bound: Reducer, config: JobConfig, policy: PolicySpec) -> Fitted:
    """Checks that the aggregate ``bound`` (``asked``'s, its default column resolved) can run
    under the policy and the shape the config asks for.

    A reducer without ``merge`` under the *default* policy falls back to ``hash``; under a
    policy the user named, it is an error. Without ``merge`` a job takes no checkpoints.
    """
    if policy.needs_merge and not bound.can_merge and isinstance(config.policy, DefaultPolicyName):
        logger.info("%r does not implement merge(): the default policy %r falls back to 'hash' (each key on "
                    "one reducer, no load balancing); implement merge() to balance", bound, str(config.policy))
        config = config.with_options(policy="hash", policy_options={})
        policy = make_policy(config)
    if config.elastic and not bound.can_merge:
        raise ConfigError(
            f"{bound!r} does not implement merge(), but elastic reducers (max_reducers/min_reducers) hand "
            "keys' partial states from reducer to reducer; implement merge() or use a fixed width")
    if config.elastic and not policy.supports_elastic:
        raise ConfigError(
            f"policy {policy.name!r} cannot change the number of reducers during a job (max_reducers="
            f"{config.max_reducers}, min_reducers={config.min_reducers}); use a ring policy ('hybrid', "
            "'halving' or 'doubling') or leave max_reducers and min_reducers unset")
    if policy.needs_merge and not bound.can_merge:
        raise ConfigError(
            f"{bound!r} does not implement merge(), but policy {policy.name!r}"
            f"{f' with max_rounds={policy.settings.max_rounds}' if policy.name in ('halving', 'doubling') else ''} "
            "may process one key on several reducers; implement merge() or use a policy that keeps "
            "each key on one reducer (policy='hash', or max_rounds=0)"
        )
    checkpoint_interval_s = float(config.checkpoint_interval_s)
    if checkpoint_interval_s > 0 and not bound.can_merge:
        # A checkpoint keeps one partial state per input epoch and folds them into the base
        # state with merge(); without it a key's state cannot be cut at an epoch. Such a job
        # takes no checkpoints: a failure replays its whole input (docs/fault_recovery.md).
        logger.info("%r does not implement merge(): the job takes no checkpoints (checkpoint_interval_s=%s "
                    "ignored), so a failure replays the whole input; implement merge() to checkpoint",
                    bound, config.checkpoint_interval_s)
        checkpoint_interval_s = 0.0
    return Fitted(bound, asked.cost, asked.wrapped, config, policy, checkpoint_interval_s)


# -- 4. route: the key ----------------------------------------------------------------------

def resolve_key(probe: BlockProbe, key: Any, map_fn: Any, record_kind: str,
                schema: pa.Schema | None) -> tuple[Any, list[str], list[pa.DataType | None]]:
    """The key function (None for key columns), the key column names and their types as far
    as known; a key column must exist and be of an encodable type, and a key function's keys
    on a sample must be encodable (a list, dict or set key fails here)."""
    source = probe.source
    if callable(key) and not isinstance(key, (str, list, tuple)):
        key_cols, key_types = _probe_key_function(probe, key, map_fn, record_kind, schema)
        key_fn = key
    else:
        key_fn, key_cols, key_types = None, _key_columns(key, record_kind, schema), []
        if schema is not None:
            missing = [k for k in key_cols if k not in schema.names]
            if missing:
                raise SchemaError(
                    f"key column(s) {missing} not found; available columns: {', '.join(schema.names)}"
                )
            for k in key_cols:
                check_key_type(k, schema.field(k).type)
            key_types = [schema.field(k).type for k in key_cols]
        if map_fn is None:
            # The key columns are source columns: later record blocks check their keys while
            # converting (ints beyond int64, ints mixed with floats); the first block is
            # checked here.
            source.key_hint[:] = key_cols
            check_head_keys(source, key_cols)
    source.head_records = None
    if HASH_COL in key_cols:
        raise ConfigError(f"{HASH_COL!r} is reserved by dpa")
    return key_fn, key_cols, key_types


def _key_columns(key: Any, record_kind: str, schema: pa.Schema | None) -> list[str]:
    """The key columns a column key (a name, names or a tuple index) names."""
    if key is None:
        if record_kind != "scalar":
            raise ConfigError("key is required: a column name, a list of column names or a callable")
        key = SCALAR_COLUMN
    if isinstance(key, int) and not isinstance(key, bool):
        if record_kind != "tuple" and schema is not None:  # (an empty input has no kind)
            raise ConfigError(f"an integer key ({key}) selects a tuple field, but records are {record_kind}s")
        key = tuple_columns(key + 1)[key]
    key_cols = [key] if isinstance(key, str) else list(key)
    if not key_cols or not all(isinstance(k, str) for k in key_cols):
        raise ConfigError(f"key must be a column name, a list of column names or a callable, got {key!r}")
    if len(set(key_cols)) != len(key_cols):
        raise ConfigError(f"key lists a column twice: {key_cols}")
    return key_cols


def _probe_key_function(probe: BlockProbe, key_fn: Callable[[Any], Any], map_fn: Any, record_kind: str,
                        schema: pa.Schema | None) -> tuple[list[str], list[pa.DataType | None]]:
    """A key function's columns (several for a tuple key) and types, from a sample."""
    source = probe.source
    key_cols = [KEY_COLUMN]
    first = probe.peek() if schema is not None else None
    sample = records_sample(first, map_fn, source.kind, record_kind) if first is not None else []
    if not sample and first is not None and map_fn is not None:
        # map_fn emitted nothing for the first block: the key's shape (a tuple is several
        # key columns) comes from the first later block it emits records for.
        sample = probe.until(lambda b: records_sample(b, map_fn, source.kind, record_kind))
    if not sample:
        return key_cols, []
    keys = []
    for record in sample:
        try:
            keys.append(key_fn(record))
        except Exception as exc:
            raise UserCodeError(f"key function raised {type(exc).__name__}: {exc} on record {record!r}") from exc
    if isinstance(keys[0], tuple):
        key_cols = [f"{KEY_COLUMN}_{i}" for i in range(len(keys[0]))]
    # Checked like key columns are: a list, dict or set key fails now, before any actor starts.
    return key_cols, [arr.type for arr in key_columns_for(keys, key_cols, sample)]


# -- 5. type: the reducer against the columns ------------------------------------------------

def type_reducer(fitted: Fitted, map_fn: Any, key_fn: Any, key_cols: list[str],
                 schema: pa.Schema | None) -> pa.Schema | None:
    """Checks the reducer's output names against the key's and its input columns against
    their types; returns the schema reducers see (dictionaries decoded)."""
    bound, config = fitted.aggregate, fitted.config
    if isinstance(bound, GroupApply):
        _check_group_apply(config, fitted.wrapped, bound)
    elif hasattr(bound, "check_key_names"):  # several aggregates: one output column each
        bound.check_key_names(key_cols)
    elif bound.name in key_cols:
        raise ConfigError(
            f"the reducer's output column {bound.name!r} has the same name as a key column; "
            f"give the reducer another name, e.g. {type(bound).__name__}(..., name='{bound.name}_out')"
        )
    if config.input_combined:
        _check_combined_input(fitted, map_fn, key_fn, key_cols, schema)
        return schema
    if schema is None:
        return None
    # The columns as reducers see them (dictionaries decoded: JobPlan.prepare); the key
    # types keep a dictionary key's type for the result.
    schema = decoded_schema(schema)
    bound.validate(schema)
    return schema


def _check_group_apply(config: JobConfig, wrapped: bool, inner: GroupApply) -> None:
    """Rejects what a per-group function cannot run with."""
    if wrapped:
        raise ConfigError(f"{inner!r} cannot be wrapped (e.g. in WithCost): the cost of a per-group function is "
                          "in the function itself; pass GroupApply(fn) as the reducer")
    if config.input_combined:
        raise ConfigError("GroupApply needs the input's rows; it cannot run on partial states (input_combined=True)")


def _check_combined_input(fitted: Fitted, map_fn: Any, key_fn: Any, key_cols: list[str],
                          schema: pa.Schema | None) -> None:
    """Validates a job whose source holds partial states (``JobConfig.input_combined``)."""
    inner, cost = fitted.aggregate, fitted.cost.seconds_per_record
    problems = []
    if not isinstance(inner, ColumnarReducer) or cost:
        got = f"{inner!r} at {cost} s per record" if cost else repr(inner)
        problems.append(f"a built-in reducer without cost (got {got})")
    if map_fn is not None or key_fn is not None:
        problems.append("no map_fn and a column key")
    if not fitted.policy.combinable:
        problems.append("a policy that accepts map-side combined rows, e.g. hybrid, doubling, halving or hash "
                        f"(got {fitted.policy.name!r})")
    if problems:
        raise ConfigError("input_combined=True needs " + "; ".join(problems))
    if schema is not None:
        want = [*key_cols, *inner.state_columns(), WEIGHT_COL]
        missing = [c for c in want if c not in schema.names]
        if missing:
            raise SchemaError(
                f"input_combined=True but the source lacks column(s) {missing}; partial states have "
                f"columns {want} (make them with reducer.partial_from_batch(table, keys, WEIGHT_COL))"
            )


# -- 6. cost: the plan ----------------------------------------------------------------------

def assemble(fitted: Fitted, source: Source, map_fn: Any, record_kind: str, key_fn: Any, key_cols: list[str],
             key_types: list[pa.DataType | None], schema: pa.Schema | None) -> JobPlan:
    """The plan: the shape and pacing from the config, map-side combine where the reducer is
    a built-in one without per-record cost and the policy accepts combined rows."""
    bound, config, policy = fitted.aggregate, fitted.config, fitted.policy
    needed = None if config.input_combined else bound.input_columns()
    keep = None if needed is None else [c for c in needed if c not in key_cols]
    return JobPlan(
        key_cols=key_cols, key_fn=key_fn, map_fn=map_fn, record_kind=record_kind, input_kind=source.kind,
        keep_cols=keep, aggregate=bound, cost=fitted.cost, policy=policy, num_mappers=config.num_mappers,
        num_reducers=config.slots, queue_capacity=config.queue_capacity, chunk_size=config.chunk_size,
        lb_interval_s=config.lb_interval_s, report_interval_s=config.report_interval_s,
        step_time_s=float(config.step_time_s), queue_time_s=float(config.queue_time_s),
        checkpoint_interval_s=fitted.checkpoint_interval_s, max_recoveries=int(config.max_recoveries),
        output_schema=None, input_schema=schema, job_id=uuid.uuid4().hex[:8],
        combine=(bool(config.map_side_combine) and policy.combinable and isinstance(bound, ColumnarReducer)
                 and fitted.cost.seconds_per_record == 0 and not config.input_combined),
        input_combined=bool(config.input_combined), migrate=config.migrate,
        active_reducers=config.num_reducers if config.elastic else 0,
        min_reducers=(config.min_reducers or config.num_reducers) if config.elastic else 0,
        scale_out_backlog_s=float(config.scale_out_backlog_s), reducer_num_cpus=float(config.reducer_num_cpus),
        key_types=[t if t is not None and not pa.types.is_null(t) else None for t in key_types] or None,
    )
