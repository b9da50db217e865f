"""The validated, picklable :class:`JobPlan` a job runs by, and what it does to each block.

:func:`dpa.engine.planning.build_plan` builds it from ``dpa.run``'s arguments, checking
everything that can be checked before any actor starts. What can only be seen while the job
runs is checked block by block, on the driver for sources read there
(:func:`~dpa.engine.block_types.checked_blocks`, whose messages give the block and its
records) and on the mappers (:meth:`JobPlan.prepare`): blocks are typed one by one and
never cast to the first block's types, so a value column that changes type is promoted
exactly and a key column that changes key class raises :class:`SchemaError`
(:class:`BlockTypes`); ``map_fn`` results that are not iterables of records and bad keys
returned by a key function raise :class:`UserCodeError` / :class:`KeyEncodingError`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from dpa.aggregates.contract import Cost, Reducer
from dpa.aggregates.group_apply import GroupApply
from dpa.engine.block_types import (
    BlockTypes,
    add_key_columns,
    bad_map_output,
    is_record_iterable,
)
from dpa.errors import SchemaError, UserCodeError
from dpa.input.records import (
    HASH_COL,
    records_to_table,
    table_to_records,
)
from dpa.input.user_code import BatchMap
from dpa.keys.columns import (
    canonical_float_keys,
    decode_dictionaries,
)
from dpa.routing.policy import PolicySpec

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
    # The reducer each key's records go through, bare (a cost wrapper taken off at plan time:
    # dpa.aggregates.requested): an aggregate, a composite of several, or a GroupApply.
    aggregate: Reducer
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
    # What the reducers pay per record they process (dpa.WithCost's; zero by default).
    cost: Cost = Cost()
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
    def group_apply(self) -> GroupApply | None:
        """The per-group function the job runs (its :attr:`aggregate`), or None for an aggregation."""
        return self.aggregate if isinstance(self.aggregate, GroupApply) else None

    @property
    def applies_groups(self) -> bool:
        """Whether the job runs a per-group function (:class:`~dpa.aggregates.group_apply.GroupApply`):
        its reducers collect rows, and an apply phase runs the function."""
        return self.group_apply is not None

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
