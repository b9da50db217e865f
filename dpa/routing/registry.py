"""The table of partitioning policies: name -> (settings class, factory, description).

:data:`BUILTINS` lists the built-in policies; :func:`register_policy` adds more (also from
outside dpa). :func:`make_policy` turns a :class:`~dpa.config.JobConfig` into a
:class:`~dpa.routing.policy.PolicySpec` in three steps, each validated once:

1. :func:`policy_settings`: the policy's typed settings, either the object given as
   ``JobConfig.policy`` or, for a name, the name's settings class built from
   ``policy_options`` (unknown options are a :class:`~dpa.errors.ConfigError` listing the
   valid ones) and, for settings that have them, the ``JobConfig.tau`` / ``max_rounds`` /
   ``initial_tokens`` shortcuts;
2. :func:`job_shape`: the :class:`~dpa.routing.policy.JobShape` (mappers, reducers, block size, seed);
3. the entry's factory, ``factory(settings, shape)``.

:func:`dpa.engine.planning.build_plan` calls it once per job; ``JobConfig`` itself only checks that
the policy name is registered (:func:`check_policy_name`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from dpa.errors import ConfigError
from dpa.input.sources import DEFAULT_BATCH_SIZE
from dpa.routing.policies.dkg import DKGSettings, build_dkg
from dpa.routing.policies.fang.policy import FangSettings, build_fang
from dpa.routing.policies.gedik.policy import GedikSettings, build_gedik
from dpa.routing.policies.grouping import (
    OffGreedySettings,
    OnGreedySettings,
    PKGSettings,
    PoTCSettings,
    ShuffleSettings,
    build_off_greedy,
    build_on_greedy,
    build_pkg,
    build_potc,
    build_shuffle,
)
from dpa.routing.policies.hashing import HashSettings, build_hash_policy
from dpa.routing.policies.hybrid.policy import build_hybrid
from dpa.routing.policies.hybrid.settings import HybridSettings
from dpa.routing.policies.ring.policy import RingSettings, build_ring_policy
from dpa.routing.policy import JobShape, PolicyFactory, PolicySettings, PolicySpec


class PolicyConfig(Protocol):
    """What the registry reads of a job's configuration (:class:`dpa.config.JobConfig` is
    one): the policy and its options, the shortcuts, and the job's shape, each by its own
    name. A dataclass whose fields (or whose dataclass-valued fields' fields, like
    ``JobConfig``'s groups) hold the defaults."""

    policy: Any
    policy_options: dict[str, Any] | None
    tau: float
    max_rounds: int
    initial_tokens: int
    num_mappers: int
    num_reducers: int
    batch_size: int | None
    seed: int
    step_time_s: float

    @property
    def slots(self) -> int: ...

    @property
    def elastic(self) -> bool: ...


__all__ = [
    "BUILTINS", "PolicyEntry", "check_policy_name", "default_min_gap", "job_shape", "make_policy", "policies",
    "policy_name", "policy_settings", "register_policy",
]

#: ``JobConfig`` fields that feed the settings of a policy given by name, when its settings
#: class has a field of the same name (the ring policies and ``hybrid``).
SHORTCUTS = ("tau", "max_rounds", "initial_tokens")


@dataclass(frozen=True)
class PolicyEntry:
    """One registered policy.

    Attributes:
        settings: Its :class:`~dpa.routing.policy.PolicySettings` subclass (``policy_options`` are
            its fields).
        factory: ``factory(settings, shape) -> PolicySpec``.
        description: One line for ``dpa.policies()`` / ``dpa policies``.
        preset: Settings fields fixed by the name (e.g. ``{"method": "halving"}`` when one
            settings class serves several names); not accepted as options.
    """

    settings: type[PolicySettings]
    factory: PolicyFactory
    description: str = ""
    preset: dict[str, Any] = field(default_factory=dict)

    def options(self) -> list[str]:
        """The option names ``policy_options`` accepts for this policy."""
        return [f.name for f in dataclasses.fields(self.settings) if f.init and f.name not in self.preset]


_GEDIK = "Gedik: consistent + explicit hash for frequent keys"
_FANG = "Fang et al.: routing table over hash"

#: The built-in policies.
BUILTINS: dict[str, PolicyEntry] = {
    "doubling": PolicyEntry(RingSettings, build_ring_policy, "DPA ring, token doubling on all but the straggler",
                            {"method": "doubling"}),
    "halving": PolicyEntry(RingSettings, build_ring_policy, "DPA ring, token halving on the straggler",
                           {"method": "halving"}),
    "hash": PolicyEntry(HashSettings, build_hash_policy, "key grouping: murmur3 % R, static"),
    "shuffle": PolicyEntry(ShuffleSettings, build_shuffle, "shuffle grouping: round-robin per mapper (splits every key)"),
    "potc": PolicyEntry(PoTCSettings, build_potc,
                        "static power of two choices: a key is bound to its less loaded choice (per mapper)"),
    "on-greedy": PolicyEntry(OnGreedySettings, build_on_greedy,
                             "online greedy: a new key is bound to the least loaded reducer (per mapper)"),
    "off-greedy": PolicyEntry(OffGreedySettings, build_off_greedy,
                              "offline greedy: LPT binding on key frequencies (option or first batch)"),
    "pkg": PolicyEntry(PKGSettings, build_pkg, "partial key grouping: power of d choices with key splitting (d=2)"),
    "dkg": PolicyEntry(DKGSettings, build_dkg, "dynamic key grouping: PKG whose hot keys scale out over more reducers"),
    "mintable": PolicyEntry(FangSettings, build_fang, f"{_FANG}, rebuilt from scratch (MinTable)",
                            {"mode": "mintable"}),
    "minmig": PolicyEntry(FangSettings, build_fang, f"{_FANG}, least migration first (MinMig)", {"mode": "minmig"}),
    "mixed": PolicyEntry(FangSettings, build_fang, f"{_FANG}, bounded table with least migration (Mixed)",
                         {"mode": "mixed"}),
    "gedik-scan": PolicyEntry(GedikSettings, build_gedik, f"{_GEDIK}, scan construction", {"algorithm": "scan"}),
    "gedik-redist": PolicyEntry(GedikSettings, build_gedik, f"{_GEDIK}, redist construction",
                                {"algorithm": "redist"}),
    "gedik-readj": PolicyEntry(GedikSettings, build_gedik, f"{_GEDIK}, readj (moves and swaps) construction",
                               {"algorithm": "readj"}),
    "hybrid": PolicyEntry(HybridSettings, build_hybrid,
                          "dpa's own: DPA ring for the tail, hot keys split over several reducers"),
}

_REGISTRY: dict[str, PolicyEntry] = dict(BUILTINS)


def register_policy(name: str, factory: Callable[[Any, JobShape], PolicySpec], description: str = "",
                    settings: type[PolicySettings] = PolicySettings, preset: dict[str, Any] | None = None) -> None:
    """Registers (or replaces) a policy under ``name``.

    Args:
        name: The name ``policy=...`` (of ``dpa.run`` or ``dpa.BalanceConfig``) selects it by.
        factory: ``factory(settings, shape) -> PolicySpec``: ``settings`` is an instance of
            ``settings``, ``shape`` the job's :class:`~dpa.routing.policy.JobShape`.
        description: One line for :func:`policies`.
        settings: The policy's frozen-dataclass :class:`~dpa.routing.policy.PolicySettings`
            subclass; its fields are the accepted ``policy_options`` (default: none).
        preset: Settings fields fixed by ``name`` (see :class:`PolicyEntry`).
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"a policy name must be a non-empty string, got {name!r}")
    if not (isinstance(settings, type) and issubclass(settings, PolicySettings) and dataclasses.is_dataclass(settings)):
        raise ConfigError(f"register_policy({name!r}): settings must be a dataclass subclass of dpa.PolicySettings")
    _REGISTRY[name] = PolicyEntry(settings, factory, description, dict(preset or {}))


def policies() -> dict[str, str]:
    """Registered policy names with one-line descriptions."""
    return {name: e.description for name, e in sorted(_REGISTRY.items())}


def policy_name(policy: Any) -> str:
    """The registered name selected by ``JobConfig.policy`` (a name or a settings object)."""
    return policy if isinstance(policy, str) else str(getattr(policy, "name", ""))


def _entry(name: str) -> PolicyEntry:
    entry = _REGISTRY.get(name)
    if entry is None:
        raise ConfigError(f"unknown policy {name!r}; valid policies: {', '.join(sorted(_REGISTRY))}")
    return entry


def check_policy_name(policy: Any) -> None:
    """Checks that ``JobConfig.policy`` is a registered name or a settings object of one.

    Raises:
        ConfigError: Unknown name (the message lists the valid ones) or not a policy.
    """
    if isinstance(policy, str):
        _entry(policy)
        return
    if not isinstance(policy, PolicySettings):
        raise ConfigError(
            f"JobConfig.policy must be a policy name (str) or a policy settings object such as "
            f"dpa.PKGSettings(d=3), got {policy!r}"
        )
    entry = _entry(policy.name)
    if not isinstance(policy, entry.settings):
        raise ConfigError(f"policy {policy.name!r} takes {entry.settings.__name__}, got {type(policy).__name__}")


def policy_settings(config: PolicyConfig) -> PolicySettings:
    """The typed settings of ``config``'s policy (see the module docstring).

    Raises:
        ConfigError: Unknown policy, unknown or invalid option, or a shortcut given twice.
    """
    check_policy_name(config.policy)
    policy, options = config.policy, dict(config.policy_options or {})
    if not isinstance(policy, str):
        if options:
            raise ConfigError(
                f"policy_options {sorted(options)} are for a policy given by name; set them on the "
                f"{type(policy).__name__} object instead"
            )
        for name in SHORTCUTS:
            value = getattr(config, name)
            if hasattr(policy, name) and value != _default(config, name) and value != getattr(policy, name):
                raise ConfigError(
                    f"JobConfig.{name}={value!r} conflicts with {type(policy).__name__}.{name}="
                    f"{getattr(policy, name)!r}; set it in one place"
                )
        return policy
    entry = _entry(policy)
    valid = entry.options()
    fixed = sorted(set(options) & set(entry.preset))
    if fixed:
        raise ConfigError(f"bad policy_options for {policy!r}: {', '.join(fixed)} is fixed by the policy name")
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ConfigError(
            f"bad policy_options for {policy!r}: unknown option(s) {', '.join(unknown)}; "
            f"valid options: {', '.join(valid) or '(none)'}"
        )
    twice = sorted(set(options) & set(SHORTCUTS))
    if twice:
        raise ConfigError(
            f"bad policy_options for {policy!r}: set {', '.join(twice)} with JobConfig.{twice[0]}, "
            "not in policy_options"
        )
    shortcuts = {name: getattr(config, name) for name in SHORTCUTS if name in valid}
    try:
        return entry.settings(**entry.preset, **shortcuts, **options)
    except TypeError as exc:  # a settings class with required fields
        raise ConfigError(f"bad policy_options for {policy!r}: {exc}") from exc


def _default(config: PolicyConfig, name: str) -> Any:
    """The default of ``config``'s field ``name``: a field of the config dataclass itself,
    or of one of its dataclass-valued fields (:class:`dpa.config.JobConfig`'s groups)."""
    for f in dataclasses.fields(config):  # type: ignore[arg-type]
        if f.name == name:
            return f.default
    for f in dataclasses.fields(config):  # type: ignore[arg-type]
        group = getattr(config, f.name)
        if dataclasses.is_dataclass(group) and not isinstance(group, (type, PolicySettings)):
            for inner in dataclasses.fields(group):
                if inner.name == name:
                    return inner.default
    raise KeyError(f"{type(config).__name__} has no field {name!r}")


def job_shape(config: PolicyConfig) -> JobShape:
    """The job's shape as policy factories see it.

    ``num_reducers`` is the number of reducer slots (``config.slots``); an elastic job
    starts with ``active_reducers = config.num_reducers`` of them (0, all, when the width
    is fixed). A width left unset is taken as the config resolves it now.
    """
    resolve = getattr(config, "resolved", None)
    if resolve is not None:
        config = resolve()
    elastic = bool(config.elastic)
    return JobShape(num_mappers=int(config.num_mappers), num_reducers=int(config.slots),
                    batch_size=int(config.batch_size or DEFAULT_BATCH_SIZE), seed=int(config.seed),
                    step_time_s=float(config.step_time_s),
                    active_reducers=int(config.num_reducers) if elastic else 0, elastic=elastic,
                    queue_time_s=float(getattr(config, "queue_time_s", 1.0)))


def make_policy(config: PolicyConfig) -> PolicySpec:
    """Builds ``config``'s policy: its settings, the job's shape, then the factory.

    Raises:
        ConfigError: Unknown name (the message lists the valid ones) or bad options.
    """
    settings = policy_settings(config)
    # By the name the config gives: a policy registered without a settings class of its
    # own (``PolicySettings``, no options) has settings that name no policy.
    return _entry(policy_name(config.policy)).factory(settings, job_shape(config))


def default_min_gap(config: PolicyConfig) -> int:
    """The straggler rule's default ``min_gap``: one block's share per reducer from each mapper."""
    return job_shape(config).block_share
