"""Job configuration: :class:`JobConfig` and its groups, one per concern.

* :mod:`dpa.config.groups`: :class:`ShapeConfig`, :class:`BalanceConfig`,
  :class:`FlowConfig`, :class:`RecoveryConfig`, :class:`SemanticsConfig` (frozen, each
  validated when made, so every mistake is reported before a single actor starts).
* :mod:`dpa.config.job`: :class:`JobConfig`, the groups plus the runtime, with every
  group field readable by its own name and the deprecated flat keywords.
* :mod:`dpa.config.width`: the default width and control period, resolved when a job is planned.
"""

from __future__ import annotations

from dpa.config.groups import (
    DEFAULT_POLICY,
    FLAT_FIELDS,
    GROUPS,
    MIGRATE_MODES,
    BalanceConfig,
    DefaultPolicyName,
    FlowConfig,
    RecoveryConfig,
    SemanticsConfig,
    ShapeConfig,
)
from dpa.config.job import JobConfig, known_fields
from dpa.config.width import LOCAL_DEFAULT_WIDTH, available_cpus, control_period, default_width

__all__ = [
    "DEFAULT_POLICY", "FLAT_FIELDS", "GROUPS", "LOCAL_DEFAULT_WIDTH", "MIGRATE_MODES",
    "BalanceConfig", "DefaultPolicyName", "FlowConfig", "JobConfig", "RecoveryConfig", "SemanticsConfig",
    "ShapeConfig", "available_cpus", "control_period", "default_width", "known_fields",
]
