"""What the state machines of :mod:`dpa.engine` tell their runtime to do.

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
    (:mod:`dpa.engine.epochs`)."""

    dest: int
    batch: pa.Table
    epoch: int = 0


class StateMove(NamedTuple):
    """Reducer -> reducer ``dest`` (``JobConfig.migrate="state"``): the partial states of
    ``keys`` keys the sender no longer owns, accumulated from records of input epochs up
    to ``epoch`` (:mod:`dpa.engine.epochs`), under the sender's snapshot ``version``; the receiver
    merges them into its state, and passes on those it no longer owns if its own snapshot
    is newer."""

    dest: int
    partial: Any
    epoch: int
    keys: int
    version: int = -1


@dataclass(frozen=True)
class Publish:
    """Balancer -> every mapper and reducer: adopt this routing snapshot."""

    snapshot: Any


@dataclass(frozen=True)
class ScaleOut:
    """Balancer -> runtime (elastic reducers): start reducers in these free ``slots``, give
    them the peers' handles, then report back (:meth:`dpa.engine.balancer.BalancerLogic.scaled_out`)
    so the balancer gives them tokens and publishes the new routing."""

    slots: tuple[int, ...]
