"""Partitioning policies from the literature, registered with :func:`dpa.policy.register_policy`.

Importing this package registers (see each module for the algorithms and the choices
this implementation makes where the papers leave room):

* :mod:`dpa.partitioners.grouping` — ``shuffle``, ``potc``, ``on-greedy``, ``off-greedy`` and
  ``pkg`` (Partial Key Grouping, Nasir et al.);
* :mod:`dpa.partitioners.dkg` — ``dkg`` (Dynamic Key Grouping, Dalabasmaz & Can);
* :mod:`dpa.partitioners.fang` — ``mintable``, ``minmig``, ``mixed`` (Fang et al.'s routing
  table over a hash);
* :mod:`dpa.partitioners.gedik` — ``gedik-scan``, ``gedik-redist``, ``gedik-readj`` (Gedik:
  consistent hash plus an explicit hash for frequent keys, rebuilt from sliding lossy counters);
* :mod:`dpa.partitioners.hybrid` — ``hybrid``, dpa's own: the DPA ring for the tail and
  hot keys split over several reducers.

Use them by name: ``dpa.JobConfig(policy="pkg", policy_options={"d": 3})``. They can be
replayed without Ray, on a key stream, with :func:`dpa.simulate.simulate`.
"""

from dpa.partitioners.common import candidates, seeded_hash32
from dpa.partitioners.dkg import DKGPolicy, dkg_max_machines, dkg_threshold
from dpa.partitioners.fang import FangPolicy, plan_table
from dpa.partitioners.gedik import GedikPolicy, PartitionFunction, build_partition, construct
from dpa.partitioners.grouping import (
    OffGreedyPolicy,
    OnGreedyPolicy,
    PKGPolicy,
    PoTCPolicy,
    ShufflePolicy,
    lpt_assignment,
)
from dpa.partitioners.hybrid import HybridPolicy

__all__ = [
    "DKGPolicy",
    "FangPolicy",
    "GedikPolicy",
    "HybridPolicy",
    "OffGreedyPolicy",
    "OnGreedyPolicy",
    "PKGPolicy",
    "PartitionFunction",
    "PoTCPolicy",
    "ShufflePolicy",
    "build_partition",
    "candidates",
    "construct",
    "dkg_max_machines",
    "dkg_threshold",
    "lpt_assignment",
    "plan_table",
    "seeded_hash32",
]
