"""dpa — Data Parallel Actors: skew-aware keyed aggregation on Ray actors.

Start here: :func:`dpa.run` (in :mod:`dpa.api`) takes a source, a key and a reducer and
returns a :class:`dpa.Result`. Then read, in this order:

* :mod:`dpa.routing.ring` — the MurmurHash3 consistent-hash ring with token halving/doubling;
* :mod:`dpa.routing.policy` — the partitioning-policy contract; :mod:`dpa.routing.registry` — the table of
  policies (name -> settings, factory, description);
* :mod:`dpa.engine` — mapper / reducer / balancer / coordinator state machines (no Ray);
* :mod:`dpa.runtime.ray.driver` — the driver side of a Ray job (deadlines, feeding, result);
  :mod:`dpa.runtime.ray` and :mod:`dpa.runtime.ray.coordinator` — the thin actor shells;
  :mod:`dpa.runtime.ray.pool` — warm actor pools, one per running job; :mod:`dpa.runtime.ray.session` —
  starting Ray from any thread; :mod:`dpa.runtime.local` — the same logic in-process (the
  correctness oracle and simulator); :mod:`dpa.engine.epochs` — epochs, checkpoints and replay
  (fault recovery); :mod:`dpa.engine.elastic` — when an elastic job adds or retires a reducer;
* :mod:`dpa.aggregates` and :mod:`dpa.aggregates.state` — the combine contract and keyed state;
  :mod:`dpa.aggregates` — several aggregates per job and the aggregates beyond the
  built-ins (distinct counts, sketches, variance); :mod:`dpa.keys.types` — key encodings of
  dates, times, timestamps, durations and decimals;
* :mod:`dpa.routing.policies` — the DPA ring policies, the literature's and dpa's own ``hybrid``;
  :mod:`dpa.routing.sketches` — lossy counting and SpaceSaving; :mod:`dpa.tools.simulate` — replay a key
  stream through any policy without Ray;
* :mod:`dpa.groupby` — ``dpa.groupby(ds, key).sum("v")``: Ray Data's groupby, returning a
  ``ray.data.Dataset`` built by :mod:`dpa.runtime.ray.dataset` from the reducers' result blocks.
"""

from dpa.aggregates import (
    All,
    Any,
    ApproxCountDistinct,
    ApproxQuantile,
    CollectSet,
    CountDistinct,
    CountIf,
    Median,
    Std,
    Var,
)
from dpa.aggregates.builtins import Collect, Count, Max, Mean, Min, Sum, TopK
from dpa.aggregates.contract import Reducer, WithCost
from dpa.api import run
from dpa.config import JobConfig
from dpa.engine.elastic import ScalingEvent
from dpa.engine.epochs import Recovery
from dpa.errors import (
    ArithmeticOverflowError,
    ConfigError,
    DPAError,
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
    "run", "groupby", "GroupedDataset", "Result", "Stats", "Recovery", "ScalingEvent", "JobConfig", "BatchMap", "ArrowRefs", "ParquetFiles",
    "Reducer", "Count", "Sum", "Min", "Max", "Mean", "Collect", "TopK", "WithCost",
    "CountDistinct", "CollectSet", "ApproxCountDistinct", "ApproxQuantile", "Median", "Var", "Std",
    "CountIf", "Any", "All",
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
