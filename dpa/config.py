"""Job configuration.

:class:`JobConfig` is a plain dataclass validated in ``__post_init__`` so that every
mistake is reported before a single actor starts.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field, replace
from typing import Any

from dpa.errors import ConfigError
from dpa.routing.policy import PolicySettings
from dpa.routing.registry import check_policy_name, policy_name
from dpa.routing.ring import is_power_of_two

logger = logging.getLogger(__name__)


class DefaultPolicyName(str):
    """The policy name ``JobConfig`` uses when none is given (a ``str`` that remembers it).

    A job whose reducer cannot merge partial states runs the default policy's fallback
    (``hash``: keys stay whole) instead of failing; a policy the user named is never
    replaced.
    """

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, ...]:
        return (DefaultPolicyName, (str(self),))


#: ``JobConfig.policy`` when not given: balances by default (see docs/configuration.md).
DEFAULT_POLICY = DefaultPolicyName("hybrid")


#: ``JobConfig.migrate`` values.
MIGRATE_MODES = ("records", "state")


#: Widest default job: the default shape never starts more mappers (or reducers) than this.
MAX_DEFAULT_WIDTH = 16
#: The local runtime's default shape (virtual time: no processes, so not tied to the machine).
LOCAL_DEFAULT_WIDTH = 4


def available_cpus() -> int:
    """CPUs dpa's actors can use: the connected Ray cluster's when Ray is up in this
    process, else this machine's (those this process may run on), as the local Ray that
    ``dpa.run`` starts would see them. Never imports Ray."""
    ray = sys.modules.get("ray")
    if ray is not None and getattr(ray, "is_initialized", lambda: False)():
        try:
            cpus = int(ray.cluster_resources().get("CPU", 0))
            if cpus >= 1:
                return cpus
        except Exception:  # a cluster that cannot answer: this machine's CPUs then
            logger.debug("could not read the Ray cluster's CPUs", exc_info=True)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # (not Linux)
        return max(1, os.cpu_count() or 1)


def default_width(runtime: str) -> int:
    """Mappers (and reducers) of a job that leaves them unset: one per available CPU
    (:func:`available_cpus`), at most :data:`MAX_DEFAULT_WIDTH`; the local runtime's
    simulation uses :data:`LOCAL_DEFAULT_WIDTH` on every machine."""
    if runtime == "local":
        return LOCAL_DEFAULT_WIDTH
    return min(MAX_DEFAULT_WIDTH, available_cpus())


@dataclass
class JobConfig:
    """Everything that shapes one dpa job.

    Args:
        num_mappers: Mapper actors (each pulls input blocks from the coordinator). None
            (the default) = one per CPU dpa can use (:func:`available_cpus`: the Ray
            cluster's if Ray is up when the job is planned, else this machine's), at most
            16; 4 with ``runtime="local"``. The field stays None: :meth:`resolved` gives
            the width a job would run with now. Every actor is a process, so more actors than
            CPUs cost start-up time and CPU without adding throughput
            (docs/configuration.md, "Default shape").
        num_reducers: Reducer actors, each with its own bounded input queue. None (the
            default) = like ``num_mappers``, but at least 2 (and within
            ``min_reducers``..``max_reducers`` when those are set).
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
            reports came in).
        report_interval_s: How often a busy reducer reports its queue length (an idle one
            reports at once). Every report is an actor call: on a 2-core machine with 8
            reducers, 5 ms reports took about a third of the CPU and made a 1 ms-per-record
            job 1.33x its ideal time against 1.18x with 50 ms (``benchmarks.stragglers``).
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
            where such a block would pass 64 MiB, but never below 1,048,576 rows, which
            is also the block of a streamed input (an iterable). Every block costs calls
            and is combined on its own, so fewer, larger blocks are cheaper.
        step_time_s: Target seconds of work of one reducer step. A reducer takes off its
            queue the rows that fit this time at its measured cost per row (any reducer,
            user-defined ones included): an expensive reducer takes a few records at a
            time, so the rest stay queued and can be forwarded when the balancer moves
            their key, and a cheap one (Count over map-side combined batches) takes large
            steps. It also sets the balancer's default ``min_gap_s``.
        chunk_size: Most rows a reducer takes from its queue in one step, whatever their
            cost (the time-based step size is capped by it; 1 = one record at a time).
        runtime: ``"ray"`` (actors) or ``"local"`` (the same logic in-process, no Ray;
            the correctness oracle and a deterministic simulator).
        reuse_actors: Keep the job's actors warm for the next job of this driver
            (actor start-up costs seconds); ``dpa.shutdown()`` releases them. They are
            always torn down when a job fails.
        timeout_s: Fail the job if it has not finished after this many seconds.
        checkpoint_interval_s: Fault recovery (Ray runtime): input blocks are handed out
            in epochs of this many seconds, and this often the reducers' states and
            pending records of the epochs pushed so far are checkpointed into the
            coordinator's object store, without pausing the job (1 s: every 0.5 s cost
            7-12% on a skewed 7 s job, ``benchmarks.recovery --only overhead``). When a member actor (or its node) dies, the job rolls back to the
            last checkpoint on replaced actors and replays the blocks after it: the
            result stays exact. ``0`` turns checkpoints off (a failure then replays the
            whole input). See ``docs/fault_recovery.md``.
        max_recoveries: Failures a job recovers from before it fails with
            :class:`~dpa.errors.JobFailedError` naming every one (``0`` = fail at the
            first). Errors in user code are never retried.
        seed: Seed for any randomised policy.
        policy_options: Options of a policy given by name: the fields of its settings
            class (e.g. ``{"d": 3}`` for ``pkg``, ``{"patience": 3}`` for ``halving``);
            an unknown option is a :class:`ConfigError` listing the valid ones.
        map_side_combine: Let mappers pre-aggregate each block per key and ship partial
            states weighted by their record counts (queue lengths and all counters stay in
            records). Applies to built-in reducers without a :class:`~dpa.aggregates.contract.WithCost`
            cost under policies that accept combined rows (``hybrid``, ``doubling``,
            ``halving``, ``hash``, ...: :attr:`dpa.routing.policy.PolicySpec.combinable`);
            load-aware routers (PKG, shuffle, DKG) always see every record.
        migrate: How a key's records follow it when the balancer moves it to another
            reducer. ``"records"`` (the default, the DPA paper's mechanism): its queued
            records are forwarded, and the partial states it left behind are merged at the
            end. ``"state"`` (the paper's Discussion): its accumulated state is handed to
            the new owner as well, at the old owner's next step boundary, so each key ends
            on one reducer and needs no final merge (keys a policy splits over several
            reducers on purpose, like ``hybrid``'s hot keys, are still merged;
            ``res.stats.merged_keys`` counts them).
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
        input_combined: The source already holds map-side partial states: the key
            columns, the reducer's state columns and a record-count column
            ``dpa.input.records.WEIGHT_COL``, as made by ``reducer.partial_from_batch(table,
            key_columns, WEIGHT_COL)`` (e.g. inside Spark tasks by :mod:`spark_bridge`).
            Mappers then only hash and route; counters stay in records. Needs a built-in
            reducer without cost, a column key, no ``map_fn`` and a policy that routes by
            key alone.
    """

    num_mappers: int | None = None
    num_reducers: int | None = None
    policy: str | PolicySettings = DEFAULT_POLICY
    tau: float = 0.2
    max_rounds: int = 1
    initial_tokens: int = 16
    lb_interval_s: float = 0.05
    report_interval_s: float = 0.05
    queue_capacity: int = 1_000_000
    queue_time_s: float = 1.0
    batch_size: int | None = None
    step_time_s: float = 0.1
    chunk_size: int = 65_536
    runtime: str = "ray"
    reuse_actors: bool = True
    timeout_s: float | None = None
    checkpoint_interval_s: float = 1.0
    max_recoveries: int = 3
    seed: int = 0
    policy_options: dict[str, Any] = field(default_factory=dict)
    map_side_combine: bool = True
    input_combined: bool = False
    migrate: str = "records"
    max_reducers: int | None = None
    min_reducers: int | None = None
    scale_out_backlog_s: float = 0.25
    reducer_num_cpus: float = 0.0

    def __post_init__(self) -> None:
        for name in ("num_mappers", "num_reducers", "batch_size", "chunk_size", "queue_capacity"):
            value = getattr(self, name)
            if value is None and name in ("batch_size", "num_mappers", "num_reducers"):
                continue  # sized from the input; one actor per CPU when the job is planned
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"JobConfig.{name} must be an integer >= 1, got {value!r}")
        if isinstance(self.max_rounds, bool) or not isinstance(self.max_rounds, int) or self.max_rounds < 0:
            raise ConfigError(
                f"JobConfig.max_rounds must be an integer >= 0 (0 = no load balancing), got {self.max_rounds!r}"
            )
        if not isinstance(self.tau, (int, float)) or isinstance(self.tau, bool) or not self.tau >= 0:
            raise ConfigError(f"JobConfig.tau must be a number >= 0, got {self.tau!r}")
        tokens = self.initial_tokens
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not is_power_of_two(tokens):
            lower = 1 << max(0, int(tokens).bit_length() - 1) if isinstance(tokens, int) and tokens > 0 else 1
            raise ConfigError(
                f"JobConfig.initial_tokens must be a power of two >= 1 (halving halves it), got "
                f"{tokens!r}; try {lower} or {lower * 2}"
            )
        for name in ("lb_interval_s", "report_interval_s", "step_time_s", "queue_time_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value > 0:
                raise ConfigError(f"JobConfig.{name} must be a positive number of seconds, got {value!r}")
        if self.runtime not in ("ray", "local"):
            raise ConfigError(f"JobConfig.runtime must be 'ray' or 'local', got {self.runtime!r}")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ConfigError(f"JobConfig.timeout_s must be > 0 or None, got {self.timeout_s!r}")
        value = self.checkpoint_interval_s
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ConfigError(
                f"JobConfig.checkpoint_interval_s must be a number of seconds >= 0 (0 = no checkpoints), got {value!r}")
        value = self.max_recoveries
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(
                f"JobConfig.max_recoveries must be an integer >= 0 (0 = fail at the first failure), got {value!r}")
        if self.migrate not in MIGRATE_MODES:
            raise ConfigError(
                f"JobConfig.migrate must be one of {MIGRATE_MODES} (forward a moved key's records and merge at "
                f"the end, or hand its state over too), got {self.migrate!r}")
        for name in ("max_reducers", "min_reducers"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigError(f"JobConfig.{name} must be an integer >= 1 or None, got {value!r}")
        if (self.max_reducers is not None and self.min_reducers is not None
                and self.min_reducers > self.max_reducers):
            raise ConfigError(f"JobConfig.min_reducers={self.min_reducers} is above max_reducers={self.max_reducers}; "
                              "lower min_reducers or raise max_reducers")
        if self.num_reducers is not None and self.max_reducers is not None and self.max_reducers < self.num_reducers:
            raise ConfigError(
                f"JobConfig.max_reducers={self.max_reducers} is below num_reducers={self.num_reducers} (the "
                f"starting width); raise it or leave it None for a fixed width")
        if self.num_reducers is not None and self.min_reducers is not None and self.min_reducers > self.num_reducers:
            raise ConfigError(
                f"JobConfig.min_reducers={self.min_reducers} is above num_reducers={self.num_reducers} (the "
                f"starting width); lower it or leave it None")
        value = self.scale_out_backlog_s
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ConfigError(f"JobConfig.scale_out_backlog_s must be a positive number of seconds, got {value!r}")
        value = self.reducer_num_cpus
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ConfigError(f"JobConfig.reducer_num_cpus must be a number >= 0, got {value!r}")
        if self.policy_options is None:
            self.policy_options = {}
        if not isinstance(self.policy_options, dict):
            raise ConfigError(f"JobConfig.policy_options must be a dict, got {self.policy_options!r}")
        # The name only (the message lists the valid ones); the policy's own settings are
        # validated once, where the plan is built.
        check_policy_name(self.policy)

    def resolved(self) -> JobConfig:
        """This config with ``num_mappers`` / ``num_reducers`` left None filled in as a job
        planned now gets them (:func:`default_width`: the Ray cluster's CPUs if Ray is up,
        else this machine's); itself if both are set. :func:`dpa.run` resolves its config
        first, so ``JobConfig()`` made before ``ray.init`` runs at the cluster's width."""
        if self.num_mappers is not None and self.num_reducers is not None:
            return self
        mappers, reducers = self._width()
        return replace(self, num_mappers=mappers, num_reducers=reducers)

    def _width(self) -> tuple[int, int]:
        """``(num_mappers, num_reducers)``, the ones left None at their defaults now."""
        if self.num_mappers is not None and self.num_reducers is not None:
            return self.num_mappers, self.num_reducers
        width = default_width(self.runtime)
        reducers = self.num_reducers
        if reducers is None:
            reducers = max(2, width)
            for bound, pick in ((self.max_reducers, min), (self.min_reducers, max)):
                if isinstance(bound, int) and not isinstance(bound, bool) and bound >= 1:
                    reducers = pick(reducers, bound)
        return (width if self.num_mappers is None else self.num_mappers), reducers

    @property
    def slots(self) -> int:
        """Reducer ids the job may use: ``max_reducers`` if elastic, else ``num_reducers``
        (its default width now, if unset)."""
        return self._width()[1] if self.max_reducers is None else self.max_reducers

    @property
    def elastic(self) -> bool:
        """Whether the job's width may change (``max_reducers`` or ``min_reducers`` set
        to something other than ``num_reducers``)."""
        reducers = self._width()[1]
        return self.slots > reducers or (self.min_reducers or reducers) < reducers

    @property
    def policy_name(self) -> str:
        """The registered name of :attr:`policy` (a name, or a settings object's ``name``)."""
        return policy_name(self.policy)
