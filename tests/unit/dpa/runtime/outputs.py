"""What the in-process runtime's tests read off a run's output."""

from __future__ import annotations

import collections
from typing import Any


def key_counts(out: Any) -> collections.Counter:
    """The ``count`` per key ``k`` over every reducer's table of a ``run_local`` output."""
    got: collections.Counter = collections.Counter()
    for table in out.tables:
        if table is not None:
            for k, c in zip(table["k"].to_pylist(), table["count"].to_pylist()):
                got[k] += c
    return got
