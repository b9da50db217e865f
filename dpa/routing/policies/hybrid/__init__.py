"""dpa's own policy, ``hybrid``: the DPA ring for the long tail, hot keys split.

The DPA load balancer can only *move* a key, so one key that holds more than a reducer's
fair share keeps its reducer a straggler whatever the ring does. ``hybrid`` keeps the DPA
ring (:class:`~dpa.routing.policies.ring.policy.DPAPlanner`, with forwarding) for the tail and
splits each *hot* key over several reducers by planned shares; the final merge makes the
result exact. How it works (detection from the reducers' key reports into a SpaceSaving
sketch, widths grown from load, water-filled shares, hand-overs of queued records) is in
``docs/policies/hybrid.md``. Choices: a key is hot at ``theta * N`` records (default
``1 / (8 R)``) and stays hot down to half that (hysteresis); hot-set changes are checked
before ring changes and, like them, wait for every reducer to report under the newest
version; a hot key's mappers interleave on one golden-ratio sequence per key.

Elastic jobs: only active reducer slots (those with tokens on the ring) are candidates
of hot keys, count for the mean load, ``theta`` and the hand-overs' targets. A slot that
is activated (:meth:`HybridPlanner.scale_out`) joins the ring and becomes a candidate
when a later plan grows a key to it; a slot that is retired
(:meth:`HybridPlanner.scale_in`) leaves the ring and every hot key's candidates at once.

Its parts: :mod:`.settings` (the user's options), :mod:`.snapshot` (snapshot and router),
:mod:`.planner` and :mod:`.policy` (the policy, built from the settings and the job's
shape).
"""
