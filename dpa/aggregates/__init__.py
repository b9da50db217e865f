"""Aggregates beyond the built-in reducers of :mod:`dpa.aggregates`, and several per job.

* :mod:`dpa.aggregates.composite` — a list of reducers as one reducer (one pass, one row
  per key, one column per aggregate, Spark's output names);
* :mod:`dpa.aggregates.distinct` — exact :class:`CountDistinct` and :class:`CollectSet`;
* :mod:`dpa.aggregates.approx` — :class:`ApproxCountDistinct` (HyperLogLog,
  :mod:`dpa.aggregates.hll`) and :class:`ApproxQuantile` / :class:`Median` (KLL,
  :mod:`dpa.aggregates.kll`);
* :mod:`dpa.aggregates.moments` — :class:`Var` and :class:`Std` (Chan et al.'s merge);
* :mod:`dpa.aggregates.conditional` — :class:`CountIf`, :class:`Any`, :class:`All`;
* :mod:`dpa.aggregates.extremes` — :class:`MaxBy` and :class:`MinBy` (the value at a key's
  largest or smallest ordering value, e.g. the latest status per order).

Every one is columnar (vectorised on Arrow) and mergeable, so hot keys may be split.
"""

from dpa.aggregates.approx import ApproxCountDistinct, ApproxQuantile, Median
from dpa.aggregates.composite import combine, output_names, spark_name
from dpa.aggregates.conditional import All, Any, CountIf
from dpa.aggregates.distinct import CollectSet, CountDistinct
from dpa.aggregates.extremes import MaxBy, MinBy
from dpa.aggregates.moments import Std, Var

__all__ = ["All", "Any", "ApproxCountDistinct", "ApproxQuantile", "CollectSet", "CountDistinct", "CountIf",
           "MaxBy", "Median", "MinBy", "Std", "Var", "combine", "output_names", "spark_name"]
