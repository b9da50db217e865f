"""Turning ``dpa.run``'s arguments into a validated, picklable :class:`JobPlan`.

Everything that can be checked without running the job is checked here, before any
actor starts: the policy, the key (columns exist, types encodable), the reducer (fits the
column types, can merge if the policy moves keys), and ``map_fn`` (dry-run on the first
record to learn its output shape), and a callable ``key`` (run on a sample: a list, dict or
set key fails here).

What can only be seen while the job runs is checked block by block, on the driver for
sources read there (:func:`checked_blocks`, whose messages give the block and its
records) and on the mappers (:meth:`JobPlan.prepare`): blocks are typed one by one and
never cast to the first block's types, so a value column that changes type is promoted
exactly and a key column that changes key class raises :class:`SchemaError`
(:class:`BlockTypes`); ``map_fn`` results that are not iterables of records and bad keys
returned by a key function raise :class:`UserCodeError` / :class:`KeyEncodingError`.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from dpa.aggregates.builtins import bind_reducer
from dpa.aggregates.contract import ColumnarReducer, Reducer, unwrap
from dpa.aggregates.group_apply import GroupApply
from dpa.config import DefaultPolicyName, JobConfig
from dpa.engine.block_types import (
    BlockTypes,
    add_key_columns,
    bad_map_output,
    check_head_keys,
    checked_blocks,
    classify_range_error,
    is_record_iterable,
    key_columns_for,
)
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
from dpa.keys.columns import (
    canonical_float_keys,
    check_key_type,
    decode_dictionaries,
    decoded_schema,
)
from dpa.routing.policy import PolicySpec
from dpa.routing.registry import make_policy

logger = logging.getLogger(__name__)

KEY_COLUMN = "key"


@dataclass
class JobPlan:
    """Everything the actors need to run one job (picklable)."""

    key_cols: list[str]
    key_fn: Callable[[Any], Any] | None
    map_fn: Callable[[Any], Any] | None
    record_kind: str  # kind of the records the key and reducer see (after map_fn)
    input_kind: str  # kind of the source records (what map_fn sees)
    keep_cols: list[str] | None  # columns shipped to reducers besides key + hash; None = all
    reducer: Reducer
    policy: PolicySpec
    num_mappers: int
    num_reducers: int
    queue_capacity: int
    chunk_size: int
    lb_interval_s: float
    report_interval_s: float
    output_schema: pa.Schema | None = None  # of mapped records, when known
    input_schema: pa.Schema | None = None  # of the records reducers see, when known
    job_id: str = ""  # short id tagging metrics and logs
    combine: bool = False  # mappers ship per-key partial states with a WEIGHT_COL
    input_combined: bool = False  # source blocks are partial states already (JobConfig.input_combined)
    # Arrow type of each key column as far as known when planning (None: unknown yet, e.g.
    # all null in the sample). A key column keeps its key class for the whole job.
    key_types: list[pa.DataType | None] | None = None
    # Target seconds of work per reducer step (JobConfig.step_time_s).
    step_time_s: float = 0.1
    # Bound of each reducer's queue in estimated seconds of work (JobConfig.queue_time_s).
    queue_time_s: float = 1.0
    # Seconds per input epoch; 0 = no checkpoints (JobConfig.checkpoint_interval_s).
    checkpoint_interval_s: float = 0.0
    # Failures a job recovers from (JobConfig.max_recoveries).
    max_recoveries: int = 0
    # The driver already checked the types of every block against each other (a source
    # read on the driver, no map_fn, no key function): mappers only re-check the keys.
    checked_upstream: bool = False
    # How a moved key follows its new owner: "records" or "state" (JobConfig.migrate).
    migrate: str = "records"
    # Elastic reducers: ``num_reducers`` is the number of reducer slots; the job starts
    # with ``active_reducers`` of them (0 = all) and keeps at least ``min_reducers``.
    active_reducers: int = 0
    min_reducers: int = 0
    scale_out_backlog_s: float = 0.25
    reducer_num_cpus: float = 0.0
    _tracker: Any = field(default=None, init=False, repr=False, compare=False)  # per process, not pickled

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_tracker"] = None
        return state

    @property
    def source_columns(self) -> set[str] | None:
        """The source columns the job reads (its key and reducer columns), or None for
        every column (a ``map_fn`` or key function sees whole records, and so does a
        reducer that reads records)."""
        if self.map_fn is not None or self.key_fn is not None or self.keep_cols is None:
            return None
        return set(self.key_cols) | set(self.keep_cols)

    @property
    def applies_groups(self) -> bool:
        """Whether the job runs a per-group function (:class:`~dpa.aggregates.group_apply.GroupApply`):
        its reducers collect rows, and an apply phase runs the function."""
        return isinstance(unwrap(self.reducer)[0], GroupApply)

    def apply_map(self, block: pa.Table) -> pa.Table:
        """Runs ``map_fn`` over a block of source records.

        Raises:
            UserCodeError: ``map_fn`` raised, or returned something that is not an iterable
                of records (a ``str``, ``bytes`` or ``dict`` would be iterated character by
                character or key by key; an int is not iterable).
            SchemaError, KeyEncodingError: the records it returned cannot form a table.
        """
        if self.map_fn is None:
            return block
        if isinstance(self.map_fn, BatchMap):
            try:
                return self.map_fn(block)
            except Exception as exc:
                raise UserCodeError(f"map_fn raised {type(exc).__name__}: {exc} on a batch of {block.num_rows} records") from exc
        out: list[Any] = []
        for record in table_to_records(block, self.input_kind):
            try:
                produced = self.map_fn(record)
            except Exception as exc:
                raise UserCodeError(f"map_fn raised {type(exc).__name__}: {exc} on record {record!r}", record=record) from exc
            if produced is None:
                continue
            if not is_record_iterable(produced):
                raise UserCodeError(bad_map_output(produced, record), record=record)
            try:
                out.extend(produced)
            except Exception as exc:
                raise UserCodeError(
                    f"map_fn's result for record {record!r} raised {type(exc).__name__} while being iterated: {exc}",
                    record=record,
                ) from exc
        # The sample's columns (so a field no record of this block has is null, not absent);
        # the types are this block's own.
        keys = self.key_cols if self.key_fn is None else ()
        return records_to_table(out, self.record_kind, self.output_schema or self.input_schema, key_cols=keys)

    def apply_key(self, table: pa.Table) -> pa.Table:
        """Adds the key column(s) computed by a callable ``key``."""
        if self.key_fn is None:
            return table
        records = table_to_records(table, self.record_kind)
        keys = []
        for record in records:
            try:
                keys.append(self.key_fn(record))
            except Exception as exc:
                raise UserCodeError(f"key function raised {type(exc).__name__}: {exc} on record {record!r}", record=record) from exc
        return add_key_columns(table, keys, self.key_cols, records)

    def prepare(self, block: pa.Table) -> pa.Table:
        """Source block -> mapped records with key columns, projected to what reducers need.

        Raises:
            SchemaError: a key column changed its key class, or a value column changed to a
                type dpa cannot promote to exactly (see :class:`BlockTypes`).
        """
        table = self.apply_key(self.apply_map(block))
        wanted = self.key_cols + [c for c in self.keep_cols or () if c not in self.key_cols]
        missing = [c for c in wanted if c not in table.column_names]
        if missing:
            if not table.num_rows:
                # map_fn emitted no record for this block (and no job-wide schema names the
                # columns it would have): nothing to route.
                return table
            what = "map_fn's records" if self.map_fn is not None else "the records"
            raise SchemaError(
                f"{what} lack the column(s) {missing} that the key and reducer read (a block of "
                f"{table.num_rows} records has only {table.column_names}); emit every one of {wanted} "
                "in each record (None for a missing value)")
        if self.keep_cols is not None:
            table = table.select(wanted)
        table = decode_dictionaries(table)
        table = canonical_float_keys(table, self.key_cols)  # -0.0/0.0 one key, every NaN one key
        if table.num_rows:
            if self._tracker is None:
                self._tracker = BlockTypes(self, values=not self.checked_upstream)
            what = "records after map_fn" if self.map_fn is not None else "records"
            self._tracker.check(table, lambda: f"a block of {table.num_rows} {what}")
        return table


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


def build_plan(source: Source, key: Any, reducer: Reducer, map_fn: Any, config: JobConfig) -> tuple[JobPlan, Iterator[pa.Table] | None]:
    """Validates the job and returns the plan plus the (possibly re-chained) block iterator.

    Raises:
        ConfigError, SchemaError, KeyEncodingError: what is wrong and how to fix it.
    """
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

    blocks = source.blocks

    def peek() -> pa.Table | None:
        """The first block, for dry runs (the iterator is re-chained; a Ray Dataset's probe)."""
        nonlocal blocks
        if blocks is None:
            return source.probe
        first = next(blocks, None)
        if first is not None:
            blocks = itertools.chain([first], blocks)
        return first

    def probe_until(probe: Callable[[pa.Table], list[Any]], limit: int) -> list[Any]:
        """``probe(block)`` on the first blocks in turn, up to ``limit`` of them, until it
        returns something (a ``map_fn`` may filter whole blocks out); the blocks read are
        re-chained in front of the iterator."""
        nonlocal blocks
        if blocks is None:
            return probe(source.probe) if source.probe is not None else []
        taken: list[pa.Table] = []
        found: list[Any] = []
        while not found and len(taken) < limit:
            block = next(blocks, None)
            if block is None:
                break
            taken.append(block)
            found = probe(block)
        blocks = itertools.chain(taken, blocks)
        return found

    record_kind, schema, output_schema = source.kind, source.schema, None
    if map_fn is not None:
        first = peek()
        if isinstance(map_fn, BatchMap):
            record_kind, schema = "dict", None
            if first is not None:
                try:
                    schema = map_fn(first.slice(0, 64)).schema
                except Exception as exc:
                    raise UserCodeError(f"map_fn raised {type(exc).__name__}: {exc} on the first batch") from exc
        else:
            schema = None

            def map_sample(block: pa.Table) -> list[Any]:
                produced_all: list[Any] = []
                for record in table_to_records(block.slice(0, 64), source.kind):
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

            # The first records map_fn emits, from the first blocks it emits any for.
            sample: list[Any] = probe_until(map_sample, PROBE_BLOCKS) if first is not None else []
            if sample:
                record_kind = record_kind_of(sample[0])
                try:
                    schema = records_to_table(sample, record_kind).schema
                except IntegerRangeError as exc:
                    error = classify_range_error(exc, record_kind, key)
                    raise error from (None if error is exc else exc)

    bound = bind_reducer(reducer, record_kind)
    inner, _, _ = unwrap(bound)
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

    # Key.
    key_fn = None
    key_types: list[pa.DataType | None] = []
    if callable(key) and not isinstance(key, (str, list, tuple)):
        key_fn = key
        key_cols = [KEY_COLUMN]
        first = peek() if schema is not None else None
        probe = records_sample(first, map_fn, source.kind, record_kind) if first is not None else []
        if not probe and first is not None and map_fn is not None:
            # map_fn emitted nothing for the first block: the key's shape (a tuple is several
            # key columns) comes from the first later block it emits records for.
            probe = probe_until(lambda b: records_sample(b, map_fn, source.kind, record_kind), PROBE_BLOCKS)
        if probe:
            probe_keys = []
            for record in probe:
                try:
                    probe_keys.append(key_fn(record))
                except Exception as exc:
                    raise UserCodeError(f"key function raised {type(exc).__name__}: {exc} on record {record!r}") from exc
            if isinstance(probe_keys[0], tuple):
                key_cols = [f"{KEY_COLUMN}_{i}" for i in range(len(probe_keys[0]))]
            # Checked like key columns are: a list, dict or set key fails now, before any actor starts.
            key_types = [arr.type for arr in key_columns_for(probe_keys, key_cols, probe)]
    else:
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
    if isinstance(inner, GroupApply):
        _check_group_apply(config, bound, inner)
    elif hasattr(inner, "check_key_names"):  # several aggregates: one output column each
        inner.check_key_names(key_cols)
    elif bound.name in key_cols:
        raise ConfigError(
            f"the reducer's output column {bound.name!r} has the same name as a key column; "
            f"give the reducer another name, e.g. {type(unwrap(bound)[0]).__name__}(..., name='{bound.name}_out')"
        )
    if config.input_combined:
        _check_combined_input(config, policy, bound, map_fn, key_fn, key_cols, schema)
    elif schema is not None:
        # The columns as reducers see them (dictionaries decoded: JobPlan.prepare); key_types
        # above keep a dictionary key's type for the result.
        schema = decoded_schema(schema)
        bound.validate(schema)

    needed = None if config.input_combined else bound.input_columns()
    keep = None if needed is None else [c for c in needed if c not in key_cols]
    plan = JobPlan(
        key_cols=key_cols, key_fn=key_fn, map_fn=map_fn, record_kind=record_kind, input_kind=source.kind,
        keep_cols=keep, reducer=bound, policy=policy, num_mappers=config.num_mappers,
        num_reducers=config.slots, queue_capacity=config.queue_capacity, chunk_size=config.chunk_size,
        lb_interval_s=config.lb_interval_s, report_interval_s=config.report_interval_s,
        step_time_s=float(config.step_time_s), queue_time_s=float(config.queue_time_s),
        checkpoint_interval_s=checkpoint_interval_s, max_recoveries=int(config.max_recoveries),
        output_schema=output_schema, input_schema=schema, job_id=uuid.uuid4().hex[:8],
        combine=(bool(config.map_side_combine) and policy.combinable and isinstance(inner, ColumnarReducer)
                 and unwrap(bound)[1] == 0 and not config.input_combined),
        input_combined=bool(config.input_combined), migrate=config.migrate,
        active_reducers=config.num_reducers if config.elastic else 0,
        min_reducers=(config.min_reducers or config.num_reducers) if config.elastic else 0,
        scale_out_backlog_s=float(config.scale_out_backlog_s), reducer_num_cpus=float(config.reducer_num_cpus),
        key_types=[t if t is not None and not pa.types.is_null(t) else None for t in key_types] or None,
    )
    if blocks is not None and map_fn is None and not config.input_combined:
        # Blocks read on the driver are checked against each other as they are handed out,
        # with their position in the input for the messages.
        plan.checked_upstream = key_fn is None and source.pieces is None
        blocks = checked_blocks(blocks, plan)
    return plan, blocks


def _check_group_apply(config: JobConfig, bound: Reducer, inner: GroupApply) -> None:
    """Rejects what a per-group function cannot run with."""
    if bound is not inner:
        raise ConfigError(f"{inner!r} cannot be wrapped (e.g. in WithCost): the cost of a per-group function is "
                          "in the function itself; pass GroupApply(fn) as the reducer")
    if config.input_combined:
        raise ConfigError("GroupApply needs the input's rows; it cannot run on partial states (input_combined=True)")


def _check_combined_input(config: JobConfig, policy: Any, bound: Reducer, map_fn: Any, key_fn: Any,
                          key_cols: list[str], schema: pa.Schema | None) -> None:
    """Validates a job whose source holds partial states (``JobConfig.input_combined``)."""
    inner, cost, _ = unwrap(bound)
    problems = []
    if not isinstance(inner, ColumnarReducer) or cost:
        problems.append(f"a built-in reducer without cost (got {bound!r})")
    if map_fn is not None or key_fn is not None:
        problems.append("no map_fn and a column key")
    if not policy.combinable:
        problems.append(f"a policy that accepts map-side combined rows, e.g. hybrid, doubling, halving or hash (got {policy.name!r})")
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


def records_sample(block: pa.Table, map_fn: Any, input_kind: str, record_kind: str) -> list[Any]:
    """A few records as the key function will see them (after ``map_fn``)."""
    records = table_to_records(block.slice(0, 16), input_kind)
    if map_fn is None:
        return records
    if isinstance(map_fn, BatchMap):
        return table_to_records(map_fn(block.slice(0, 16)), "dict")
    out: list[Any] = []
    for r in records:
        out.extend(map_fn(r) or ())
    return out


def empty_input_table(plan: JobPlan) -> pa.Table:
    """An empty table shaped like the records reducers receive (for empty-result schemas)."""
    schema = plan.input_schema
    if plan.input_combined and schema is not None:  # partial states: their own columns
        base = schema if HASH_COL in schema.names else schema.append(pa.field(HASH_COL, pa.uint32()))
        return base.empty_table()
    fields = []
    for c in plan.key_cols:
        key_field = schema.field(c) if schema is not None and c in schema.names else pa.field(c, pa.null())
        if pa.types.is_dictionary(key_field.type):  # decoded by JobPlan.prepare
            key_field = key_field.with_type(key_field.type.value_type)
        fields.append(key_field)
    for c in plan.keep_cols or []:
        fields.append(schema.field(c) if schema is not None and c in schema.names else pa.field(c, pa.null()))
    fields.append(pa.field(HASH_COL, pa.uint32()))
    return pa.schema(fields).empty_table()
