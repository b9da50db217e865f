"""The coordinator's bookkeeping: block hand-out, epochs and termination by conservation,
plain Python (the protocol over it is :class:`~dpa.engine.coordinator_machine.CoordinatorMachine`'s).
"""

from __future__ import annotations

import logging
from typing import Any

from dpa.engine.epochs import EpochLedger, Rest

logger = logging.getLogger(__name__)


class CoordinatorLogic:
    """Block hand-out bookkeeping and termination by conservation.

    The job is complete when the input is exhausted, every mapper has finished, every
    item handed out was mapped and pushed (:class:`~dpa.engine.epochs.EpochLedger`), and the
    records the reducers absorbed equal the records those items emitted (a forwarded
    record is counted once, by the reducer that absorbs it).
    """

    def __init__(self, num_mappers: int, num_reducers: int, checkpoint_interval_s: float = 0.0) -> None:
        self.num_mappers = num_mappers
        self.num_reducers = num_reducers
        self.input_done = False
        self.blocks_offered = 0
        self.mappers_done: set[int] = set()
        self.blocks_per_mapper = [0] * num_mappers
        self.processed = [0] * num_reducers  # records each reducer holds (its checkpoint included)
        self.ledger = EpochLedger(checkpoint_interval_s)
        self._pending_at_close = 0

    def on_block_taken(self, mapper: int, item: Any = None, now: float = 0.0) -> tuple[int, int]:
        """A mapper took an item (a block or a :class:`~dpa.engine.epochs.Rest`, kept for replay)
        at ``now``; returns its ``(epoch, token)``."""
        if not isinstance(item, Rest):
            self.blocks_per_mapper[mapper] += 1
        return self.ledger.hand_out(item, now)

    def on_block_split(self, mapper: int, epoch: int, emitted: int, rest: Any, parent: int,
                       now: float) -> tuple[int, int]:
        """A mapper pushed ``emitted`` records of item ``parent`` (of ``epoch``) and goes on
        routing its ``rest`` (a :class:`~dpa.engine.epochs.Rest`, kept for replay) in the epoch
        returned with its token."""
        return self.ledger.split(epoch, emitted, mapper, rest, parent, now)

    def on_block_done(self, mapper: int, epoch: int, emitted: int) -> None:
        """A mapper pushed every record of a block of ``epoch``: ``emitted`` records."""
        self.ledger.block_done(epoch, emitted, mapper)

    def on_mapper_done(self, mapper: int) -> None:
        self.mappers_done.add(mapper)

    def on_progress(self, reducer: int, processed: int) -> None:
        """A reducer's records absorbed so far (its checkpoint's included; reports may
        arrive out of order, so the count only grows)."""
        self.processed[reducer] = max(self.processed[reducer], processed)

    @property
    def emitted(self) -> list[int]:
        """Records emitted per mapper by the blocks the result holds (replays not counted twice)."""
        return self.ledger.emitted_by_mapper(self.num_mappers)

    def checkpoint_due(self, now: float) -> int | None:
        """The epoch to take a checkpoint of at ``now`` (:meth:`EpochLedger.closable`), or
        None; not one that would hold nothing new. The caller takes it (begun here)."""
        ledger = self.ledger
        epoch = ledger.closable(now)
        if epoch is None or (epoch == ledger.closed and not self._pending_at_close):
            return None  # (the last checkpoint again, and it had nothing pending: the same)
        ledger.begin_close(epoch, now)
        return epoch

    def on_checkpoint(self, epoch: int, absorbed: int, pending: int) -> bool:
        """The reducers' shares of a checkpoint of ``epoch`` arrived, holding ``absorbed``
        records in their states and ``pending`` ones not absorbed yet. True if that is
        every record the epochs' blocks emitted: the checkpoint is stored. Otherwise it is
        dropped (a bug; logged)."""
        expected, held = self.ledger.emitted_upto(epoch), absorbed + pending
        if held != expected:
            logger.error("dpa checkpoint of epoch %d dropped: it holds %d records, its blocks emitted %d",
                         epoch, held, expected)
            self.ledger.abandon_close()
            return False
        self.ledger.end_close(epoch)
        self._pending_at_close = pending
        return True

    def rollback(self, processed: list[int]) -> list[Any]:
        """Rolls back to the last checkpoint, whose reducers hold ``processed`` records;
        returns the blocks to hand out again (in their first order)."""
        self.mappers_done = set()
        self.processed = list(processed)
        self._pending_at_close = 0
        return self.ledger.rollback()

    @property
    def mapping_done(self) -> bool:
        return self.input_done and len(self.mappers_done) == self.num_mappers

    def complete(self) -> bool:
        """Conservation: all mappers done and every record their blocks emitted absorbed."""
        return self.mapping_done and self.ledger.all_done and sum(self.processed) == sum(self.emitted)
