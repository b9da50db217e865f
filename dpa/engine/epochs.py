"""Epochs, checkpoints and replay: the bookkeeping of fault recovery, plain Python.

The coordinator hands input blocks out in *epochs* of ``checkpoint_interval_s`` seconds:
every block carries the epoch it was handed out in, and so does every record routed or
forwarded from it. Reducers keep one partial state per open epoch. A checkpoint of epoch
``e`` may be taken once no block is handed out in it any more and every block of it (and
of the epochs before) was mapped and pushed: then every record of those epochs is at a
reducer — absorbed, queued, being applied — or travelling between two reducers (a
forward). The checkpoint is *unaligned* (like Flink's unaligned checkpoints: records in
queues are part of it, so it does not wait for the queues to drain) and takes two
phases. First every reducer holds back its forwards of epochs ``<= e`` and says how many
records of them it forwarded to each peer; then each reducer, once it has received that
many, hands over its share: its base state with the epochs up to ``e`` folded in, and
its pending records of those epochs (queued, being applied, held back) as batches. The
coordinator checks that the shares add up to every record the epochs' blocks emitted.

An epoch is finer than a block: a mapper still routing a block when its epoch's time is
up hands the rest back (:class:`Rest`: the mapped, combined and hashed rows not routed
yet), and the rest becomes an item of its own in the current epoch; the block counts as
done with what it pushed. Without that one big block would keep its epoch, and every
epoch after it, open until it is all routed, and a failure would replay it whole.

After a failure every member rolls back to the last checkpoint: reducers restart from
their checkpointed base states with its pending records queued again, and the blocks of the epochs after it — the coordinator
kept their refs — are handed out again. A rest whose block is replayed is dropped (the
block yields it again); a rest whose block is checkpointed is replayed itself. Every
record is then counted exactly once.

:class:`EpochLedger` is that bookkeeping; :class:`Checkpoint` one checkpoint and
:class:`Recovery` one entry of a job's recovery log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple


class Rest(NamedTuple):
    """The rows of an input block a mapper had not routed when its epoch's time was up:
    mapped, map-side combined and hashed (``HASH_COL``), to route as they are.

    Attributes:
        table: The rows (on Ray an object ref the coordinator owns).
    """

    table: Any


@dataclass
class Checkpoint:
    """A consistent cut of a job: every record of the input blocks of epochs ``<= epoch``.

    Attributes:
        epoch: The last epoch it holds (-1 = the empty start of the job).
        states: Per reducer, its base state (on Ray an object ref owned by the
            coordinator; None = no key).
        processed: Per reducer, the records its base state holds.
        snapshot: The routing snapshot published when it was taken.
        blocks: Input blocks it holds.
        pending: Per reducer, its records of those epochs not absorbed yet:
            ``(batch, epoch)`` pairs (on Ray object refs the coordinator owns; None =
            none).
    """

    epoch: int
    states: list[Any]
    processed: list[int]
    snapshot: Any
    blocks: int = 0
    pending: list[Any] | None = None


@dataclass
class Recovery:
    """One failure a job recovered from (``Stats.recoveries``).

    Attributes:
        at_s: Seconds from the job's start to the failure's detection.
        actors: The members found dead and replaced (``reducer-3``, ``mapper-0``, ...).
        nodes: The Ray node ids the dead members ran on (where known).
        error: What the failure looked like.
        epoch: The checkpoint the job rolled back to (-1 = the start).
        replayed_blocks: Input blocks handed out again.
        replayed_records: Records processed after the checkpoint, processed again.
        recover_s: Seconds from the detection until the job ran again.
    """

    at_s: float
    actors: list[str]
    nodes: list[str]
    error: str
    epoch: int
    replayed_blocks: int
    replayed_records: int
    recover_s: float

    def as_dict(self) -> dict[str, Any]:
        return {"at_s": self.at_s, "actors": list(self.actors), "nodes": list(self.nodes), "error": self.error,
                "epoch": self.epoch, "replayed_blocks": self.replayed_blocks,
                "replayed_records": self.replayed_records, "recover_s": self.recover_s}


@dataclass
class _Epoch:
    items: list[Any] = field(default_factory=list)  # what was handed out, for replay
    tokens: list[int] = field(default_factory=list)  # ... their tokens
    parents: list[int | None] = field(default_factory=list)  # ... a rest's block's token
    done: int = 0  # blocks mapped and pushed
    emitted: int = 0  # records those blocks emitted
    emitted_by: dict[int, int] = field(default_factory=dict)  # ... per mapper

    @property
    def rests(self) -> int:
        """Rests among the items."""
        return sum(isinstance(item, Rest) for item in self.items)


class EpochLedger:
    """Which blocks went out in which epoch, and when an epoch may be checkpointed.

    Args:
        interval_s: Seconds an epoch stays open for new blocks (0 = one epoch for the
            whole job: no checkpoint, and a failure replays the whole input).
    """

    def __init__(self, interval_s: float) -> None:
        self.interval_s = float(interval_s)
        self.epoch = 0  # the epoch blocks are handed out in now
        self.opened_at: float | None = None
        self.closed = -1  # the last checkpointed epoch
        self.closing: int | None = None  # a checkpoint being taken
        self.closed_at: float | None = None  # when the last one began
        self.started_at: float | None = None  # the first hand-out (of this run)
        self.blocks_closed = 0  # blocks in the checkpoint
        self._emitted_closed: dict[int, int] = {}  # records of the checkpointed blocks, per mapper
        self._open: dict[int, _Epoch] = {}
        self._tokens = 0

    # -- events ---------------------------------------------------------------------
    def hand_out(self, item: Any, now: float, parent: int | None = None) -> tuple[int, int]:
        """Records an item handed out at ``now``: an input block, or the :class:`Rest` of
        the block (or rest) whose token is ``parent``.

        Returns:
            ``(epoch, token)``: its epoch (a new one when the current one has been open for
            ``interval_s`` and holds items) and the token that names it as a parent.
        """
        if self.started_at is None:
            self.started_at = now
        if self.opened_at is None:
            self.opened_at = now
        elif (self.interval_s > 0 and now - self.opened_at >= self.interval_s
              and self.epoch in self._open):
            self.epoch += 1
            self.opened_at = now
        slot = self._open.setdefault(self.epoch, _Epoch())
        self._tokens += 1
        slot.items.append(item)
        slot.tokens.append(self._tokens)
        slot.parents.append(parent)
        return self.epoch, self._tokens

    def split(self, epoch: int, emitted: int, mapper: int, rest: Any, parent: int,
              now: float) -> tuple[int, int]:
        """``mapper`` pushed ``emitted`` records of the item ``parent`` (of ``epoch``) and
        hands its unrouted ``rest`` back: the item is done, the rest is handed out anew
        (returns its ``(epoch, token)``)."""
        self.block_done(epoch, emitted, mapper)
        return self.hand_out(rest, now, parent)

    def block_done(self, epoch: int, emitted: int, mapper: int = 0) -> None:
        """``mapper`` has pushed every record of a block of ``epoch`` (``emitted`` records)."""
        slot = self._open.get(epoch)
        if slot is not None:  # (a rolled-back epoch's late news is dropped)
            slot.done += 1
            slot.emitted += int(emitted)
            slot.emitted_by[mapper] = slot.emitted_by.get(mapper, 0) + int(emitted)

    # -- queries --------------------------------------------------------------------
    def _complete(self, epoch: int) -> bool:
        slot = self._open[epoch]
        return slot.done == len(slot.items)

    @property
    def all_done(self) -> bool:
        """Whether every item handed out was mapped and pushed."""
        return all(self._complete(e) for e in self._open)

    def emitted_upto(self, epoch: int) -> int:
        """Records emitted by the blocks of the epochs up to ``epoch`` (the checkpointed
        ones included): what a checkpoint of ``epoch`` must hold."""
        return (sum(self._emitted_closed.values())
                + sum(slot.emitted for e, slot in self._open.items() if e <= epoch))

    @property
    def open_blocks(self) -> int:
        """Blocks handed out after the last checkpoint."""
        return sum(len(s.items) for s in self._open.values())

    @property
    def blocks_done(self) -> int:
        """Input blocks mapped and pushed, the checkpointed ones included (rests not
        counted: exact once every item handed out is done)."""
        return self.blocks_closed + sum(s.done - s.rests for s in self._open.values())

    def emitted_by_mapper(self, num_mappers: int) -> list[int]:
        """Records emitted per mapper by the blocks pushed, the checkpointed ones included
        (a block replayed after a rollback counts once)."""
        out = [self._emitted_closed.get(m, 0) for m in range(num_mappers)]
        for slot in self._open.values():
            for m, n in slot.emitted_by.items():
                out[m] += n
        return out

    def closable(self, now: float) -> int | None:
        """The epoch a checkpoint may be taken of at ``now``, or None.

        One checkpoint every ``interval_s`` at most, never two at a time. It is of the
        newest epoch whose items, and all earlier ones, are mapped and pushed — the current
        epoch included (taking the checkpoint starts a new one). If there is none after the
        last checkpoint, of the last checkpoint's epoch again: its records absorbed since
        are then no longer pending.
        """
        if self.interval_s <= 0 or self.closing is not None:
            return None
        last = self.closed_at if self.closed_at is not None else self.started_at
        if last is None or now - last < self.interval_s:
            return None
        best = None
        for epoch in sorted(self._open):
            if not self._complete(epoch):
                break
            best = epoch
        if best is None and self.closed >= 0:
            return self.closed
        return best

    # -- checkpoints and rollback -----------------------------------------------------
    def begin_close(self, epoch: int, now: float) -> None:
        """A checkpoint of ``epoch`` is being taken at ``now`` (items handed out from now on
        belong to a later epoch)."""
        self.closing = epoch
        self.closed_at = now
        if epoch >= self.epoch:
            self.epoch = epoch + 1
            self.opened_at = now

    def end_close(self, epoch: int) -> None:
        """The checkpoint of ``epoch`` is stored: its blocks need no replay any more."""
        self.closing = None
        for e in [e for e in self._open if e <= epoch]:
            slot = self._open.pop(e)
            self.blocks_closed += len(slot.items) - slot.rests
            for m, n in slot.emitted_by.items():
                self._emitted_closed[m] = self._emitted_closed.get(m, 0) + n
        self.closed = max(self.closed, epoch)

    def abandon_close(self) -> None:
        """The checkpoint being taken was lost (a member failed meanwhile)."""
        self.closing = None

    def forget_items(self) -> None:
        """Drops the items kept for a replay (on Ray, refs that hold input blocks in the
        object store), keeping every count: once the job is over nothing is replayed."""
        for slot in self._open.values():
            slot.items.clear()
            slot.tokens.clear()
            slot.parents.clear()

    def rollback(self) -> list[Any]:
        """Forgets everything after the last checkpoint; returns the items to hand out
        again, in the order they first went out: every block, and every rest whose block
        is checkpointed (a replayed block yields its rest again). Later items get a new
        epoch."""
        slots = [self._open[e] for e in sorted(self._open)]
        replayed = {token for slot in slots for token in slot.tokens}
        items = [item for slot in slots for item, parent in zip(slot.items, slot.parents)
                 if parent not in replayed]
        self._open = {}
        self.closing = self.closed_at = self.started_at = None
        self.epoch += 1
        self.opened_at = None
        return items
