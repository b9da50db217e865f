"""The built-in partitioning policies, one module per family, each with its typed settings.

* :mod:`dpa.routing.policies.ring.policy` — ``halving``, ``doubling``: the DPA ring
  (:class:`RingSettings`);
* :mod:`dpa.routing.policies.hashing` — ``hash`` (key grouping) and the static ``hash % R``
  snapshot;
* :mod:`dpa.routing.policies.grouping` — ``shuffle``, ``potc``, ``on-greedy``, ``off-greedy`` and
  ``pkg`` (Partial Key Grouping, Nasir et al.);
* :mod:`dpa.routing.policies.dkg` — ``dkg`` (Dynamic Key Grouping, Dalabasmaz & Can);
* :mod:`dpa.routing.policies.fang.policy` (policy) and :mod:`dpa.routing.policies.fang.plan` (planning) —
  ``mintable``, ``minmig``, ``mixed`` (Fang et al.'s routing table over a hash);
* :mod:`dpa.routing.policies.gedik.policy` (policy), :mod:`dpa.routing.policies.gedik.model` and
  :mod:`dpa.routing.policies.gedik.construct` — ``gedik-scan``, ``gedik-redist``,
  ``gedik-readj`` (Gedik: consistent hash plus an explicit hash for frequent keys);
* :mod:`dpa.routing.policies.hybrid` — ``hybrid``, dpa's own: the DPA ring for the tail and
  hot keys split over several reducers.

Each family pairs a settings class (the user's options, e.g. :class:`PKGSettings`) with a
policy class and a factory (e.g. ``build_pkg``) that builds the policy from the settings and
the job's :class:`~dpa.routing.policy.JobShape`; the policy holds both (``policy.settings``,
``policy.shape``, see :class:`~dpa.routing.policies.common.BuiltPolicy`) and subclasses no
settings class.

Importing this package registers nothing: the table of names is :mod:`dpa.routing.registry`. Use
a policy by name (``dpa.run(..., policy="pkg", policy_options={"d": 3})``) or by its
settings (``dpa.run(..., policy=dpa.PKGSettings(d=3))``). The algorithms and the choices
made where the papers are vague are in ``docs/policies/``. Policies can be replayed
without Ray, on a key stream, with :func:`dpa.tools.simulate.simulate`.
"""

from dpa.routing.policies.common import candidates, seeded_hash32
from dpa.routing.policies.dkg import DKGPolicy, DKGSettings, dkg_max_machines, dkg_threshold
from dpa.routing.policies.fang.plan import plan_table
from dpa.routing.policies.fang.policy import FangPolicy, FangSettings
from dpa.routing.policies.gedik.construct import build_partition, construct
from dpa.routing.policies.gedik.model import PartitionFunction
from dpa.routing.policies.gedik.policy import GedikPolicy, GedikSettings
from dpa.routing.policies.grouping import (
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
from dpa.routing.policies.hashing import HashPolicy, HashSettings, ModSnapshot
from dpa.routing.policies.hybrid.policy import HybridPolicy
from dpa.routing.policies.hybrid.settings import HybridSettings
from dpa.routing.policies.ring.policy import DPAPlanner, DPAPolicy, RingSettings

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
