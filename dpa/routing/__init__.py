"""Routing: where a key's records go, and how that changes while a job runs.

* :mod:`dpa.routing.policy` — the policy contract (settings, router, planner, snapshot);
* :mod:`dpa.routing.registry` — the table of policies by name;
* :mod:`dpa.routing.ring` — the MurmurHash3 consistent-hash ring with token halving and doubling;
* :mod:`dpa.routing.sketches` — frequent-item sketches the planners count keys with;
* :mod:`dpa.routing.policies` — the built-in policies, one module or folder per family.

Routing knows nothing of the engine or the runtimes that use it.
"""
