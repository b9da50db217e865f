"""The DPA ring policies ``halving`` and ``doubling`` (:mod:`.policy`), their first ring planned
on the mappers' forecast (:mod:`.forecast`) and the look-ahead before a round (:mod:`.lookahead`)."""
