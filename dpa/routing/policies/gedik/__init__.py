"""Gedik's partitioning functions: the policy (:mod:`.policy`), the model (:mod:`.model`) and
the constructions ``scan``, ``redist`` and ``readj`` (:mod:`.construct`)."""
