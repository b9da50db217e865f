"""What the state machines of :mod:`dpa.logic` tell their runtime to do.

The mapper, reducer and balancer logic never send anything themselves: they return these
instructions, and each runtime (Ray actors, or the in-process simulation) carries them out
its own way. Tests feed events to the logic and check the instructions that come back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import pyarrow as pa


class Push(NamedTuple):
    """Mapper -> reducer ``dest``: a batch routed there (counts against its queue bound)."""

    dest: int
    batch: pa.Table


class Forward(NamedTuple):
    """Reducer -> reducer ``dest``: queued records whose key the sender no longer owns
    (always accepted: they are already inside the bounded system), of input ``epoch``
    (:mod:`dpa.epochs`)."""

    dest: int
    batch: pa.Table
    epoch: int = 0


@dataclass(frozen=True)
class Publish:
    """Balancer -> every mapper and reducer: adopt this routing snapshot."""

    snapshot: Any
