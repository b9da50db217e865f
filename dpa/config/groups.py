"""The groups of a job's configuration, one frozen dataclass per concern.

:class:`~dpa.config.job.JobConfig` holds one of each: :class:`ShapeConfig` (how many
actors, elastic reducers), :class:`BalanceConfig` (the partitioning policy and the
balancer), :class:`FlowConfig` (blocks, queues, reports and steps), :class:`RecoveryConfig`
(checkpoints, retries, the deadline) and :class:`SemanticsConfig` (how records and states
travel). Each validates its fields when made, so every mistake is reported before a
single actor starts.
"""

from __future__ import annotations

import numbers
from dataclasses import MISSING, dataclass, field
from dataclasses import fields as dataclass_fields
from typing import Any

from dpa.errors import ConfigError
from dpa.routing.policy import PolicySettings
from dpa.routing.registry import check_policy_name
from dpa.routing.ring import is_power_of_two


class DefaultPolicyName(str):
    """The policy name ``BalanceConfig`` uses when none is given (a ``str`` that remembers it).

    A job whose reducer cannot merge partial states runs the default policy's fallback
    (``hash``: keys stay whole) instead of failing; a policy the user named is never
    replaced.
    """

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return (DefaultPolicyName, (str(self),))


#: ``BalanceConfig.policy`` when not given: balances by default (see docs/configuration.md).
DEFAULT_POLICY = DefaultPolicyName("hybrid")

#: ``SemanticsConfig.migrate`` values.
MIGRATE_MODES = ("records", "state")


def field_default(cls: type, name: str) -> Any:
    """The default of field ``name`` of dataclass ``cls`` (a fresh one for a factory)."""
    for f in dataclass_fields(cls):
        if f.name == name:
            return f.default_factory() if f.default is MISSING else f.default  # type: ignore[misc]
    raise KeyError(name)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_int(owner: str, name: str, value: Any, low: int, none_ok: bool = False, why: str = "") -> None:
    if value is None and none_ok:
        return
    if not _is_int(value) or value < low:
        extra = " or None" if none_ok else ""
        raise ConfigError(f"{owner}.{name} must be an integer >= {low}{extra}{why}, got {value!r}")


def _check_seconds(owner: str, name: str, value: Any, zero_ok: bool = False, why: str = "") -> None:
    if not _is_number(value) or not (value >= 0 if zero_ok else value > 0):
        kind = "a number of seconds >= 0" if zero_ok else "a positive number of seconds"
        raise ConfigError(f"{owner}.{name} must be {kind}{why}, got {value!r}")


@dataclass(frozen=True)
class ShapeConfig:
    """How many actors a job runs, and whether its reducers may grow or shrink.

    Args:
        num_mappers: Mapper actors (each pulls input blocks from the coordinator). None
            (the default) = one per CPU dpa can use (:func:`dpa.config.available_cpus`:
            the Ray cluster's if Ray is up when the job is planned, else this machine's),
            at most 16; 4 with ``runtime="local"``. The field stays None:
            :meth:`dpa.JobConfig.resolved` gives the width a job would run with now. Every
            actor is a process, so more actors than CPUs cost start-up time and CPU
            without adding throughput (docs/configuration.md, "Default shape").
        num_reducers: Reducer actors, each with its own bounded input queue. None (the
            default) = like ``num_mappers``, but at least 2 (and within
            ``min_reducers``..``max_reducers`` when those are set).
        max_reducers: Elastic reducers: the job may grow to this many reducers (None =
            ``num_reducers``, fixed width). It starts with ``num_reducers``; the balancer
            adds one when every reducer is backlogged by more than ``scale_out_backlog_s``
            of work, and retires idle ones down to ``min_reducers`` (their keys move to the
            others with their state). Needs a ring policy (``hybrid``, ``halving``,
            ``doubling``). See ``res.stats.scaling``.
        min_reducers: Fewest reducers an elastic job shrinks to (None = ``num_reducers``:
            grown reducers may retire, the first ones stay).
        scale_out_backlog_s: Seconds of queued work every reducer must hold before an
            elastic job adds a reducer.
        reducer_num_cpus: CPUs each reducer actor reserves from Ray (0 = none, the
            default: reducers share the machine). With more than 0, a scale-out that finds
            no free CPU is refused and the job carries on at its width.
    """

    num_mappers: int | None = None
    num_reducers: int | None = None
    max_reducers: int | None = None
    min_reducers: int | None = None
    scale_out_backlog_s: float = 0.25
    reducer_num_cpus: float = 0.0

    def __post_init__(self) -> None:
        for name in ("num_mappers", "num_reducers", "max_reducers", "min_reducers"):
            _check_int("ShapeConfig", name, getattr(self, name), 1, none_ok=True)
        lo, hi, start = self.min_reducers, self.max_reducers, self.num_reducers
        if lo is not None and hi is not None and lo > hi:
            raise ConfigError(f"ShapeConfig.min_reducers={lo} is above max_reducers={hi}; "
                              "lower min_reducers or raise max_reducers")
        if start is not None and hi is not None and hi < start:
            raise ConfigError(f"ShapeConfig.max_reducers={hi} is below num_reducers={start} (the starting "
                              "width); raise it or leave it None for a fixed width")
        if start is not None and lo is not None and lo > start:
            raise ConfigError(f"ShapeConfig.min_reducers={lo} is above num_reducers={start} (the starting "
                              "width); lower it or leave it None")
        _check_seconds("ShapeConfig", "scale_out_backlog_s", self.scale_out_backlog_s)
        if not _is_number(self.reducer_num_cpus) or not self.reducer_num_cpus >= 0:
            raise ConfigError(f"ShapeConfig.reducer_num_cpus must be a number >= 0, got {self.reducer_num_cpus!r}")


@dataclass(frozen=True)
class BalanceConfig:
    """The partitioning policy and how often its balancer looks.

    Args:
        policy: The partitioning policy: a registered name (see :func:`dpa.policies`), e.g.
            ``"hybrid"`` (the default: the DPA ring for the tail of the keys, hot keys split
            over several reducers, both driven by the backlogs in seconds of work; with a
            reducer that cannot ``merge``, the default falls back to ``"hash"``),
            ``"doubling"``, ``"halving"``, ``"hash"`` or ``"pkg"``, or a policy settings
            object such as ``dpa.PKGSettings(d=3)`` or ``dpa.RingSettings("halving",
            patience=3)``. Only the name is checked here; the settings are validated once,
            when the job's plan is built (:func:`dpa.routing.registry.make_policy`).
        tau: Shortcut for the ring policies' (``halving``, ``doubling``, ``hybrid``) straggler
            threshold when ``policy`` is a name: rebalance when
            ``Q_max > Q_second * (1 + tau)``. Must be ``>= 0``.
        max_rounds: Shortcut, like ``tau``: maximum rebalances per reducer (the paper's
            Experiment 2 "rounds"). ``0`` is the paper's "No LB" baseline with the method's
            initial ring.
        initial_tokens: Shortcut, like ``tau``: tokens per reducer on the ring policies'
            first ring (a power of two). Default 16; the paper's doubling starts from 1.
        lb_interval_s: How often the balancer evaluates the straggler predicate (when new
            reports came in). None (the default) = sized by the job's width when it is
            planned (:func:`dpa.config.control_period`): 0.05 s up to
            :data:`~dpa.config.width.CONTROL_WIDTH` reducers, growing in proportion beyond,
            so that the balancer's work per second stays bounded (``docs/scale.md``).
            :meth:`dpa.JobConfig.resolved` gives the value a job runs with.
        policy_options: Options of a policy given by name: the fields of its settings
            class (e.g. ``{"d": 3}`` for ``pkg``, ``{"patience": 3}`` for ``halving``);
            an unknown option is a :class:`~dpa.errors.ConfigError` listing the valid ones.
        seed: Seed for any randomised policy.
    """

    policy: str | PolicySettings = DEFAULT_POLICY
    tau: float = 0.2
    max_rounds: int = 1
    initial_tokens: int = 16
    lb_interval_s: float | None = None
    policy_options: dict[str, Any] = field(default_factory=dict)
    seed: int = 0

    def __post_init__(self) -> None:
        _check_int("BalanceConfig", "max_rounds", self.max_rounds, 0, why=" (0 = no load balancing)")
        if not _is_number(self.tau) or not self.tau >= 0:
            raise ConfigError(f"BalanceConfig.tau must be a number >= 0, got {self.tau!r}")
        tokens = self.initial_tokens
        if not _is_int(tokens) or not is_power_of_two(tokens):
            lower = 1 << max(0, int(tokens).bit_length() - 1) if _is_int(tokens) and tokens > 0 else 1
            raise ConfigError(f"BalanceConfig.initial_tokens must be a power of two >= 1 (halving halves it), "
                              f"got {tokens!r}; try {lower} or {lower * 2}")
        if self.lb_interval_s is not None:
            _check_seconds("BalanceConfig", "lb_interval_s", self.lb_interval_s, why=" or None (sized by the width)")
        if self.policy_options is None:
            object.__setattr__(self, "policy_options", {})
        if not isinstance(self.policy_options, dict):
            raise ConfigError(f"BalanceConfig.policy_options must be a dict, got {self.policy_options!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral):
            raise ConfigError(f"BalanceConfig.seed must be an integer, got {self.seed!r}")
        # The name only (the message lists the valid ones); the policy's own settings are
        # validated once, where the plan is built.
        check_policy_name(self.policy)


@dataclass(frozen=True)
class FlowConfig:
    """How records flow: input blocks, reducer queues, reports and reducer steps.

    Args:
        report_interval_s: The period of the reducers' report clock. A reducer whose
            queue moved by a step's rows or more (or that has a new snapshot or key counts)
            reports at the clock's next tick; the reducers of a host tick together, so their
            reports leave the host as one message per tick, and a reducer with nothing new
            sends nothing (``docs/scale.md``). None (the default) = sized by the job's width
            when it is planned, as ``BalanceConfig.lb_interval_s`` is
            (:func:`dpa.config.control_period`: 0.05 s up to
            :data:`~dpa.config.width.CONTROL_WIDTH` reducers).
        queue_capacity: Bound of each reducer's input queue, in records. Mappers wait
            (backpressure) while the target queue is full.
        queue_time_s: Bound of each reducer's input queue in estimated seconds of work
            (its rows at the reducer's measured cost per row). Mappers wait while a queue
            holds more, and route a block in pushes that start small and grow while no
            queue makes them wait (like TCP's slow start), each with the newest routing
            snapshot: the input the balancer has not seen yet stays unrouted, so a
            rebalance applies to it without forwarding, and a job never queues more than
            this much work on a reducer. A cheap reducer never reaches it. ``math.inf``:
            no bound in time, only ``queue_capacity`` records, and a queue takes pushes
            before its reducer has measured a cost (the paper's queues: the reproduction
            scripts use it, so that the paper's tables do not move with this default).
        batch_size: Records per input block handed to mappers. None (the default): sized
            from the input (:func:`dpa.input.sources.block_rows`): an in-memory table or parquet
            files are cut into one block per mapper, or into more (as many per mapper)
            where such a block of the columns the job reads would pass 128 MiB (Ray
            Data's target block size), but never below 1,048,576 rows, which
            is also the block of a streamed input (an iterable); a materialized Ray
            Dataset's blocks go to mappers in runs sized the same way
            (:func:`dpa.input.sources.group_blocks`). Every block costs calls and is
            combined on its own, so fewer, larger blocks are cheaper. Given, a table is cut
            into blocks of this many rows and a materialized dataset's blocks go in runs of
            about this many rows.
        step_time_s: Target seconds of work of one reducer step. A reducer takes off its
            queue the rows that fit this time at its measured cost per row (any reducer,
            user-defined ones included): an expensive reducer takes a few records at a
            time, so the rest stay queued and can be forwarded when the balancer moves
            their key, and a cheap one (Count over map-side combined batches) takes large
            steps. It also sets the balancer's default ``min_gap_s``.
        chunk_size: Most rows a reducer takes from its queue in one step, whatever their
            cost (the time-based step size is capped by it; 1 = one record at a time).
    """

    report_interval_s: float | None = None
    queue_capacity: int = 1_000_000
    queue_time_s: float = 1.0
    batch_size: int | None = None
    step_time_s: float = 0.1
    chunk_size: int = 65_536

    def __post_init__(self) -> None:
        _check_int("FlowConfig", "batch_size", self.batch_size, 1, none_ok=True, why=" (None = sized from the input)")
        _check_int("FlowConfig", "chunk_size", self.chunk_size, 1)
        _check_int("FlowConfig", "queue_capacity", self.queue_capacity, 1)
        for name in ("step_time_s", "queue_time_s"):
            _check_seconds("FlowConfig", name, getattr(self, name))
        if self.report_interval_s is not None:
            _check_seconds("FlowConfig", "report_interval_s", self.report_interval_s,
                           why=" or None (sized by the width)")


@dataclass(frozen=True)
class RecoveryConfig:
    """What a job does about failures, and how long it may run.

    Args:
        checkpoint_interval_s: Fault recovery (Ray runtime): input blocks are handed out
            in epochs of this many seconds, and this often the reducers' states and
            pending records of the epochs pushed so far are checkpointed into the
            coordinator's object store, without pausing the job (1 s: every 0.5 s cost
            7-12% on a skewed 7 s job, ``benchmarks.recovery --only overhead``). When a
            member actor (or its node) dies, the job rolls back to the last checkpoint on
            replaced actors and replays the blocks after it: the result stays exact.
            ``0`` turns checkpoints off (a failure then replays the whole input). See
            ``docs/fault_recovery.md``.
        max_recoveries: Failures a job recovers from before it fails with
            :class:`~dpa.errors.JobFailedError` naming every one (``0`` = fail at the
            first). Errors in user code are never retried.
        timeout_s: Fail the job if it has not finished after this many seconds (None = no
            deadline).
    """

    checkpoint_interval_s: float = 1.0
    max_recoveries: int = 3
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        _check_seconds("RecoveryConfig", "checkpoint_interval_s", self.checkpoint_interval_s, zero_ok=True,
                       why=" (0 = no checkpoints)")
        _check_int("RecoveryConfig", "max_recoveries", self.max_recoveries, 0,
                   why=" (0 = fail at the first failure)")
        if self.timeout_s is not None and not (_is_number(self.timeout_s) and self.timeout_s > 0):
            raise ConfigError(f"RecoveryConfig.timeout_s must be a positive number of seconds or None, "
                              f"got {self.timeout_s!r}")


@dataclass(frozen=True)
class SemanticsConfig:
    """How records and partial states travel between the job's actors.

    Args:
        map_side_combine: Let mappers pre-aggregate each block per key and ship partial
            states weighted by their record counts (queue lengths and all counters stay in
            records). Applies to built-in reducers without a :class:`~dpa.aggregates.contract.WithCost`
            cost under policies that accept combined rows (``hybrid``, ``doubling``,
            ``halving``, ``hash``, ...: :attr:`dpa.routing.policy.PolicySpec.combinable`);
            load-aware routers (PKG, shuffle, DKG) always see every record.
        input_combined: The source already holds map-side partial states: the key
            columns, the reducer's state columns and a record-count column
            ``dpa.input.records.WEIGHT_COL``, as made by ``reducer.partial_from_batch(table,
            key_columns, WEIGHT_COL)`` (e.g. inside Spark tasks by :mod:`spark_bridge`).
            Mappers then only hash and route; counters stay in records. Needs a built-in
            reducer without cost, a column key, no ``map_fn`` and a policy that routes by
            key alone.
        migrate: How a key's records follow it when the balancer moves it to another
            reducer. ``"records"`` (the default, the DPA paper's mechanism): its queued
            records are forwarded, and the partial states it left behind are merged at the
            end. ``"state"`` (the paper's Discussion): its accumulated state is handed to
            the new owner as well, at the old owner's next step boundary, so each key ends
            on one reducer and needs no final merge (keys a policy splits over several
            reducers on purpose, like ``hybrid``'s hot keys, are still merged;
            ``res.stats.merged_keys`` counts them).
    """

    map_side_combine: bool = True
    input_combined: bool = False
    migrate: str = "records"

    def __post_init__(self) -> None:
        for name in ("map_side_combine", "input_combined"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"SemanticsConfig.{name} must be True or False, got {getattr(self, name)!r}")
        if self.migrate not in MIGRATE_MODES:
            raise ConfigError(
                f"SemanticsConfig.migrate must be one of {MIGRATE_MODES} (forward a moved key's records and "
                f"merge at the end, or hand its state over too), got {self.migrate!r}")


#: The groups of a ``JobConfig``: its field name -> the group's class.
GROUPS: dict[str, type] = {
    "shape": ShapeConfig, "balance": BalanceConfig, "flow": FlowConfig,
    "recovery": RecoveryConfig, "semantics": SemanticsConfig,
}

#: Every group field by its own (flat) name -> the group holding it, e.g.
#: ``"num_reducers" -> "shape"``: ``JobConfig.num_reducers`` reads ``shape.num_reducers``.
FLAT_FIELDS: dict[str, str] = {f.name: group for group, cls in GROUPS.items() for f in dataclass_fields(cls)}
