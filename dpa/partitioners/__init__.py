"""The built-in partitioning policies, one module per family, each with its typed settings.

* :mod:`dpa.partitioners.ring_policy` — ``halving``, ``doubling``: the DPA ring
  (:class:`RingSettings`);
* :mod:`dpa.partitioners.hashing` — ``hash`` (key grouping) and the static ``hash % R``
  snapshot;
* :mod:`dpa.partitioners.grouping` — ``shuffle``, ``potc``, ``on-greedy``, ``off-greedy`` and
  ``pkg`` (Partial Key Grouping, Nasir et al.);
* :mod:`dpa.partitioners.dkg` — ``dkg`` (Dynamic Key Grouping, Dalabasmaz & Can);
* :mod:`dpa.partitioners.fang` (policy) and :mod:`dpa.partitioners.fang_plan` (planning) —
  ``mintable``, ``minmig``, ``mixed`` (Fang et al.'s routing table over a hash);
* :mod:`dpa.partitioners.gedik` (policy), :mod:`dpa.partitioners.gedik_model` and
  :mod:`dpa.partitioners.gedik_construct` — ``gedik-scan``, ``gedik-redist``,
  ``gedik-readj`` (Gedik: consistent hash plus an explicit hash for frequent keys);
* :mod:`dpa.partitioners.hybrid` — ``hybrid``, dpa's own: the DPA ring for the tail and
  hot keys split over several reducers.

Importing this package registers nothing: the table of names is :mod:`dpa.registry`. Use
a policy by name (``dpa.JobConfig(policy="pkg", policy_options={"d": 3})``) or by its
settings (``dpa.JobConfig(policy=dpa.PKGSettings(d=3))``). The algorithms and the choices
made where the papers are vague are in ``docs/policies/``. Policies can be replayed
without Ray, on a key stream, with :func:`dpa.simulate.simulate`.
"""

from dpa.partitioners.common import candidates, seeded_hash32
from dpa.partitioners.dkg import DKGPolicy, DKGSettings, dkg_max_machines, dkg_threshold
from dpa.partitioners.fang import FangPolicy, FangSettings
from dpa.partitioners.fang_plan import plan_table
from dpa.partitioners.gedik import GedikPolicy, GedikSettings
from dpa.partitioners.gedik_construct import build_partition, construct
from dpa.partitioners.gedik_model import PartitionFunction
from dpa.partitioners.grouping import (
    OffGreedyPolicy,
    OffGreedySettings,
    OnGreedyPolicy,
    OnGreedySettings,
    PKGPolicy,
    PKGSettings,
    PoTCPolicy,
    PoTCSettings,
    ShufflePolicy,
    ShuffleSettings,
    lpt_assignment,
)
from dpa.partitioners.hashing import HashPolicy, HashSettings, ModSnapshot
from dpa.partitioners.hybrid import HybridPolicy, HybridSettings
from dpa.partitioners.ring_policy import DPAPlanner, DPAPolicy, RingSettings

__all__ = [  # by module, in the order of the imports above
    "candidates", "seeded_hash32",
    "DKGPolicy", "DKGSettings", "dkg_max_machines", "dkg_threshold",
    "FangPolicy", "FangSettings", "plan_table",
    "GedikPolicy", "GedikSettings", "build_partition", "construct", "PartitionFunction",
    "OffGreedyPolicy", "OffGreedySettings", "OnGreedyPolicy", "OnGreedySettings", "PKGPolicy", "PKGSettings",
    "PoTCPolicy", "PoTCSettings", "ShufflePolicy", "ShuffleSettings", "lpt_assignment",
    "HashPolicy", "HashSettings", "ModSnapshot",
    "HybridPolicy", "HybridSettings",
    "DPAPlanner", "DPAPolicy", "RingSettings",
]
