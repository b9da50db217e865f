"""Job configuration: :class:`JobConfig`, one group per concern.

A job's configuration is a :class:`JobConfig` holding one frozen group per concern
(:mod:`dpa.config.groups`) plus the runtime::

    JobConfig(shape=ShapeConfig(num_reducers=8), flow=FlowConfig(batch_size=65_536), runtime="local")

Every group field also reads by its own name (``cfg.num_reducers`` is
``cfg.shape.num_reducers``), and :meth:`JobConfig.with_options` changes fields by those
names. The flat keywords (``JobConfig(num_reducers=8)``) still build the same config, with a
:class:`DeprecationWarning` naming the grouped spelling; ``dpa.run(..., num_reducers=8)``
takes them as shortcuts, without a warning.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from dpa.config import width
from dpa.config.groups import (
    FLAT_FIELDS,
    GROUPS,
    BalanceConfig,
    FlowConfig,
    RecoveryConfig,
    SemanticsConfig,
    ShapeConfig,
    field_default,
)
from dpa.errors import ConfigError
from dpa.routing.registry import policy_name

if TYPE_CHECKING:
    from dpa.routing.policy import PolicySettings

#: ``JobConfig.runtime`` values.
RUNTIMES = ("ray", "local")

#: The order in which the deprecated flat spelling takes positional arguments.
FLAT_ORDER = (
    "num_mappers", "num_reducers", "policy", "tau", "max_rounds", "initial_tokens", "lb_interval_s",
    "report_interval_s", "queue_capacity", "queue_time_s", "batch_size", "step_time_s", "chunk_size",
    "runtime", "reuse_actors", "timeout_s", "checkpoint_interval_s", "max_recoveries", "seed",
    "policy_options", "map_side_combine", "input_combined", "migrate", "max_reducers", "min_reducers",
    "scale_out_backlog_s", "reducer_num_cpus",
)

_CLASS_NAMES = {name: cls.__name__ for name, cls in GROUPS.items()}


def known_fields() -> list[str]:
    """Every name :meth:`JobConfig.with_options` (and ``dpa.run``'s keywords) accept: the
    groups, ``runtime``, ``reuse_actors`` and every group field by its own name."""
    return sorted([*GROUPS, "runtime", "reuse_actors", *FLAT_FIELDS])


def _check_known(names: Any) -> None:
    unknown = sorted(set(names) - set(known_fields()))
    if unknown:
        raise ConfigError(f"unknown JobConfig field(s) {unknown}; valid fields: {', '.join(known_fields())}")


def _check_groups(groups: dict[str, Any]) -> None:
    """Raises :class:`ConfigError` for a group given as something else than its class."""
    for name, group in groups.items():
        if not isinstance(group, GROUPS[name]):
            raise ConfigError(f"JobConfig.{name} must be a dpa.{_CLASS_NAMES[name]}, got {type(group).__name__}")


def _grouped_spelling(flat: dict[str, Any]) -> str:
    """``shape=dpa.ShapeConfig(num_reducers=...), balance=dpa.BalanceConfig(tau=...)``."""
    by_group: dict[str, list[str]] = {}
    for name in flat:
        by_group.setdefault(FLAT_FIELDS[name], []).append(f"{name}=...")
    return ", ".join(f"{group}=dpa.{_CLASS_NAMES[group]}({', '.join(names)})" for group, names in by_group.items())


def _fill_groups(groups: dict[str, Any], given: set[str], flat: dict[str, Any]) -> dict[str, Any]:
    """``groups`` with the ``flat`` field values put into their groups.

    A flat value for a field that a group in ``given`` (passed in the same call) sets to
    something else than its default and than the flat value is a conflict.

    Raises:
        ConfigError: A field set both flat and in its group.
    """
    by_group: dict[str, dict[str, Any]] = {}
    for name, value in flat.items():
        group = FLAT_FIELDS[name]
        if group in given:
            inside = getattr(groups[group], name)
            if inside != value and inside != field_default(GROUPS[group], name):
                raise ConfigError(
                    f"JobConfig: {name}={value!r} conflicts with {group}.{name}={inside!r}; set it in one "
                    f"place ({group}=dpa.{_CLASS_NAMES[group]}({name}=...); cfg.with_options({name}=...) "
                    "changes one field of a config)")
        by_group.setdefault(group, {})[name] = value
    out = dict(groups)
    for group, changes in by_group.items():
        out[group] = replace(out[group], **changes)
    return out


@dataclass(init=False)
class JobConfig:
    """Everything that shapes one dpa job: one group per concern, plus the runtime.

    Build one from the groups you change (each defaults to its defaults)::

        dpa.JobConfig(shape=dpa.ShapeConfig(num_reducers=8),
                      balance=dpa.BalanceConfig(policy="halving", tau=0.3), runtime="local")

    Every group field reads by its own name too (``cfg.num_reducers``, ``cfg.tau``, ...),
    and ``cfg.with_options(num_reducers=8)`` returns a copy with fields changed by those
    names. ``dpa.run(source, key, reducer, num_reducers=8, tau=0.3)`` takes the same names as
    shortcuts. The flat keywords ``JobConfig(num_reducers=8, tau=0.3)`` build the same config
    as the grouped spelling but are deprecated (one :class:`DeprecationWarning` per call).

    Args:
        shape: How many mappers and reducers, elastic bounds (:class:`ShapeConfig`).
        balance: The partitioning policy and the balancer (:class:`BalanceConfig`).
        flow: Input blocks, reducer queues, reports and steps (:class:`FlowConfig`).
        recovery: Checkpoints, failures recovered from, the deadline (:class:`RecoveryConfig`).
        semantics: Map-side combining, pre-combined input, how moved keys migrate
            (:class:`SemanticsConfig`).
        runtime: ``"ray"`` (actors) or ``"local"`` (the same logic in-process, no Ray;
            the correctness oracle and a deterministic simulator).
        reuse_actors: Keep the job's actors warm for the next job of this driver
            (actor start-up costs seconds); ``dpa.shutdown()`` releases them. They are
            always torn down when a job fails.
        *args, **flat: Deprecated: the group fields by their own names (positionally in
            the order of :data:`FLAT_ORDER`), e.g. ``num_reducers=8``.

    Raises:
        ConfigError: A bad value (the message names the group and the field), a field
            set both flat and in its group, or an unknown keyword.
    """

    shape: ShapeConfig = field(default_factory=ShapeConfig)
    balance: BalanceConfig = field(default_factory=BalanceConfig)
    flow: FlowConfig = field(default_factory=FlowConfig)
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)
    semantics: SemanticsConfig = field(default_factory=SemanticsConfig)
    runtime: str = "ray"
    reuse_actors: bool = True

    if TYPE_CHECKING:  # the group fields read by their own names (properties, set below)
        num_mappers: int | None
        num_reducers: int | None
        max_reducers: int | None
        min_reducers: int | None
        scale_out_backlog_s: float
        reducer_num_cpus: float
        policy: str | PolicySettings
        tau: float
        max_rounds: int
        initial_tokens: int
        lb_interval_s: float | None
        policy_options: dict[str, Any]
        seed: int
        report_interval_s: float | None
        queue_capacity: int
        queue_time_s: float
        batch_size: int | None
        step_time_s: float
        chunk_size: int
        checkpoint_interval_s: float
        max_recoveries: int
        timeout_s: float | None
        map_side_combine: bool
        input_combined: bool
        migrate: str

    def __init__(self, *args: Any, shape: ShapeConfig | None = None, balance: BalanceConfig | None = None,
                 flow: FlowConfig | None = None, recovery: RecoveryConfig | None = None,
                 semantics: SemanticsConfig | None = None, runtime: str = "ray", reuse_actors: bool = True,
                 **flat: Any) -> None:
        if args:
            if len(args) > len(FLAT_ORDER):
                raise ConfigError(f"JobConfig takes keyword arguments (shape=..., balance=..., ...), got "
                                  f"{len(args)} positional ones")
            for name, value in zip(FLAT_ORDER, args):
                if name in flat:
                    raise ConfigError(f"JobConfig got {name} both positionally and by keyword")
                flat[name] = value
            runtime = flat.pop("runtime", runtime)
            reuse_actors = flat.pop("reuse_actors", reuse_actors)
        _check_known(flat)
        given = {"shape": shape, "balance": balance, "flow": flow, "recovery": recovery, "semantics": semantics}
        _check_groups({name: group for name, group in given.items() if group is not None})
        groups = {name: GROUPS[name]() if group is None else group for name, group in given.items()}
        if flat:
            warnings.warn(
                f"JobConfig({', '.join(f'{n}=...' for n in flat)}) is deprecated: use "
                f"JobConfig({_grouped_spelling(flat)}), or pass them to dpa.run(...) as keywords",
                DeprecationWarning, stacklevel=2)
            groups = _fill_groups(groups, {n for n, g in given.items() if g is not None}, flat)
        if runtime not in RUNTIMES:
            raise ConfigError(f"JobConfig.runtime must be 'ray' or 'local', got {runtime!r}")
        if not isinstance(reuse_actors, bool):
            raise ConfigError(f"JobConfig.reuse_actors must be True or False, got {reuse_actors!r}")
        for name, group in groups.items():
            setattr(self, name, group)
        self.runtime = runtime
        self.reuse_actors = reuse_actors

    def with_options(self, **changes: Any) -> JobConfig:
        """A copy of this config with fields changed, by their own names
        (``cfg.with_options(num_reducers=8, batch_size=65_536)``), or whole groups
        (``shape=...``), ``runtime`` and ``reuse_actors``. Never warns: the names are the
        ones ``dpa.run`` takes as shortcuts.

        Raises:
            ConfigError: An unknown name, a bad value, or a field set both by its name and
                in its group given in the same call.
        """
        _check_known(changes)
        flat = {name: value for name, value in changes.items() if name in FLAT_FIELDS}
        given = {name for name in changes if name in GROUPS}
        groups = {name: changes[name] if name in given else getattr(self, name) for name in GROUPS}
        _check_groups({name: groups[name] for name in given})
        groups = _fill_groups(groups, given, flat)
        return JobConfig(**groups, runtime=changes.get("runtime", self.runtime),
                         reuse_actors=changes.get("reuse_actors", self.reuse_actors))

    def options(self) -> dict[str, Any]:
        """Every field by its own name (the group fields flattened, plus ``runtime`` and
        ``reuse_actors``): ``JobConfig().with_options(**cfg.options()) == cfg``."""
        out = {name: getattr(getattr(self, group), name) for name, group in FLAT_FIELDS.items()}
        return {**out, "runtime": self.runtime, "reuse_actors": self.reuse_actors}

    def resolved(self) -> JobConfig:
        """This config with ``num_mappers`` / ``num_reducers`` left None filled in as a job
        planned now gets them (:func:`dpa.config.default_width`: the Ray cluster's CPUs if
        Ray is up, else this machine's), and ``report_interval_s`` / ``lb_interval_s`` left
        None sized by that width (:func:`dpa.config.control_period`); itself if all are
        set. :func:`dpa.run` resolves its config first, so ``JobConfig()`` made before
        ``ray.init`` runs at the cluster's width."""
        out = self
        if self.shape.num_mappers is None or self.shape.num_reducers is None:
            mappers, reducers = self._width()
            out = replace(out, shape=replace(self.shape, num_mappers=mappers, num_reducers=reducers))
        if self.flow.report_interval_s is None or self.balance.lb_interval_s is None:
            period = width.control_period(out.slots)
            if self.flow.report_interval_s is None:
                out = replace(out, flow=replace(out.flow, report_interval_s=period))
            if self.balance.lb_interval_s is None:
                out = replace(out, balance=replace(out.balance, lb_interval_s=period))
        return out

    def _width(self) -> tuple[int, int]:
        """``(num_mappers, num_reducers)``, the ones left None at their defaults now."""
        shape = self.shape
        if shape.num_mappers is not None and shape.num_reducers is not None:
            return shape.num_mappers, shape.num_reducers
        wide = width.default_width(self.runtime)
        reducers = shape.num_reducers
        if reducers is None:
            reducers = max(2, wide)
            for bound, pick in ((shape.max_reducers, min), (shape.min_reducers, max)):
                if bound is not None:
                    reducers = pick(reducers, bound)
        return (wide if shape.num_mappers is None else shape.num_mappers), reducers

    @property
    def slots(self) -> int:
        """Reducer ids the job may use: ``max_reducers`` if elastic, else ``num_reducers``
        (its default width now, if unset)."""
        return self._width()[1] if self.shape.max_reducers is None else self.shape.max_reducers

    @property
    def elastic(self) -> bool:
        """Whether the job's width may change (``max_reducers`` or ``min_reducers`` set
        to something other than ``num_reducers``)."""
        reducers = self._width()[1]
        return self.slots > reducers or (self.shape.min_reducers or reducers) < reducers

    @property
    def policy_name(self) -> str:
        """The registered name of ``balance.policy`` (a name, or a settings object's ``name``)."""
        return policy_name(self.balance.policy)


def _flat_property(group: str, name: str) -> property:
    """``JobConfig.<name>``: reads ``<group>.<name>``; assigning it (deprecated) replaces
    the group with one whose field changed."""

    def read(self: JobConfig) -> Any:
        return getattr(getattr(self, group), name)

    def write(self: JobConfig, value: Any) -> None:
        warnings.warn(f"setting JobConfig.{name} is deprecated: use cfg.with_options({name}=...), or set "
                      f"cfg.{group} = dataclasses.replace(cfg.{group}, {name}=...)", DeprecationWarning, stacklevel=2)
        setattr(self, group, replace(getattr(self, group), **{name: value}))

    return property(read, write, doc=f"``{group}.{name}`` (:class:`{_CLASS_NAMES[group]}`), read by its own name.")


for _name, _group in FLAT_FIELDS.items():
    setattr(JobConfig, _name, _flat_property(_group, _name))
del _name, _group
