"""dpa — Data Parallel Actors: skew-aware keyed aggregation on Ray actors.

Start here: :func:`dpa.run` (in :mod:`dpa.api`) takes a source, a key and a reducer and
returns a :class:`dpa.Result`. Then walk the rooms from the bottom up (each imports only
those below it):

* :mod:`dpa.keys` — canonical key encodings and their murmur3;
* :mod:`dpa.input` — every source as a stream of Arrow blocks;
* :mod:`dpa.aggregates` — the combine contract, the built-in aggregates, keyed state;
* :mod:`dpa.routing` — the policy contract, the ring, the registry and the policies;
* :mod:`dpa.engine` — the plan and one state machine per role, ``handle(event) ->
  instructions`` (:mod:`dpa.engine.mapper_machine`, :mod:`dpa.engine.reducer_machine`,
  :mod:`dpa.engine.balancer`, :mod:`dpa.engine.coordinator_machine`);
* :mod:`dpa.runtime` — the executors: :mod:`dpa.runtime.local` (virtual time, the oracle)
  and :mod:`dpa.runtime.ray` (actors, pools, the driver's side);
* :mod:`dpa.tools` — the ``dpa`` command line, reports, policy replay without Ray.

``docs/architecture.md`` shows how one job flows through the machines.
"""

from dpa.aggregates import (
    All,
    Any,
    ApproxCountDistinct,
    ApproxQuantile,
    CollectSet,
    CountDistinct,
    CountIf,
    MaxBy,
    Median,
    MinBy,
    Std,
    Var,
)
from dpa.aggregates.builtins import Collect, Count, Max, Mean, Min, Sum, TopK
from dpa.aggregates.contract import Reducer, WithCost
from dpa.aggregates.group_apply import GroupApply
from dpa.api import run
from dpa.config import (
    BalanceConfig,
    FlowConfig,
    JobConfig,
    RecoveryConfig,
    SemanticsConfig,
    ShapeConfig,
)
from dpa.engine.elastic import ScalingEvent
from dpa.engine.epochs import Recovery
from dpa.errors import (
    ArithmeticOverflowError,
    ConfigError,
    DPAError,
    GroupTooLargeError,
    JobFailedError,
    KeyEncodingError,
    SchemaError,
    UserCodeError,
)
from dpa.groupby import GroupedDataset, groupby
from dpa.input.sources import ArrowRefs, ParquetFiles
from dpa.input.user_code import BatchMap
from dpa.keys.encoding import encode_key, hash_key
from dpa.metrics import skew
from dpa.result import Result, Stats
from dpa.routing.hash_ring import HashRing
from dpa.routing.policies import (
    DKGSettings,
    FangSettings,
    GedikSettings,
    HashSettings,
    HybridSettings,
    OffGreedySettings,
    OnGreedySettings,
    PKGSettings,
    PoTCSettings,
    RingSettings,
    ShuffleSettings,
)
from dpa.routing.policy import JobShape, PolicySettings, PolicySpec, RebalanceEvent
from dpa.routing.registry import policies, register_policy
from dpa.routing.ring import RingSnapshot

__all__ = [
    "run", "groupby", "GroupedDataset", "Result", "Stats", "Recovery", "ScalingEvent", "JobConfig", "ShapeConfig", "BalanceConfig",
    "FlowConfig", "RecoveryConfig", "SemanticsConfig", "BatchMap", "ArrowRefs", "ParquetFiles",
    "Reducer", "Count", "Sum", "Min", "Max", "Mean", "Collect", "TopK", "WithCost",
    "CountDistinct", "CollectSet", "ApproxCountDistinct", "ApproxQuantile", "Median", "Var", "Std",
    "CountIf", "Any", "All", "MaxBy", "MinBy", "GroupApply", "GroupTooLargeError",
    "HashRing", "RingSnapshot", "PolicySpec", "RebalanceEvent", "policies", "register_policy",
    "PolicySettings", "JobShape", "RingSettings", "HashSettings", "ShuffleSettings", "PKGSettings",
    "PoTCSettings", "OnGreedySettings", "OffGreedySettings", "DKGSettings", "FangSettings", "GedikSettings",
    "HybridSettings",
    "encode_key", "hash_key", "skew", "shutdown",
    "DPAError", "ConfigError", "SchemaError", "KeyEncodingError", "JobFailedError", "UserCodeError",
    "ArithmeticOverflowError",
]


def shutdown() -> None:
    """Releases the warm actors kept by :func:`run` (no-op if there are none)."""
    import sys

    mod = sys.modules.get("dpa.runtime.ray.driver")
    if mod is not None:
        mod.shutdown_pool()
