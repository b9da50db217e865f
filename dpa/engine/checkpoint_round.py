"""One checkpoint, three phases, as a state machine: :class:`CheckpointRound`.

Phase one asks every reducer of the job to hold its forwards of the epochs up to ``epoch``
and to count those it sent to each peer; phase two asks each for its share once the
forwards counted for it have arrived (a consistent cut, no barrier: :mod:`dpa.engine.epochs`);
phase three lets the held forwards go, whatever came of the round. The
:class:`~dpa.engine.coordinator_machine.CoordinatorMachine` starts a round when a checkpoint
is due and passes its ``Ask*`` instructions to the runtime, which hands back the answers;
the round's verdict is one of :class:`~dpa.engine.instructions.CheckpointTaken`,
:class:`~dpa.engine.instructions.CheckpointGivenUp` or
:class:`~dpa.engine.instructions.CheckpointFailed`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.flow import weight
from dpa.engine.machine import Machine, handles


class CheckpointRound(Machine):
    """The checkpoint of the epochs up to ``epoch`` over the reducer ``slots`` of a job.

    Args:
        epoch: The last epoch the checkpoint holds.
        slots: The job's reducer slots now (an elastic job's may be fewer than all).
    """

    role = "checkpoint round"

    def __init__(self, epoch: int, slots: Sequence[int]) -> None:
        self.epoch = epoch
        self.slots = list(slots)
        self.sent: dict[int, list[int] | None] = {}
        self.shares: dict[int, Any] = {}
        self.verdict: Any = None

    def start(self) -> list[Any]:
        """Phase one, for every slot."""
        return [op.AskPrepare(slot, self.epoch) for slot in self.slots]

    @handles(ev.Prepared)
    def _on_prepared(self, event: ev.Prepared) -> list[Any]:
        self.sent[event.slot] = event.sent
        return self._cut() if len(self.sent) == len(self.slots) else []

    @handles(ev.CutTaken)
    def _on_cut(self, event: ev.CutTaken) -> list[Any]:
        self.shares[event.slot] = event.share
        return self._end() if len(self.shares) == len(self.slots) else []

    def _cut(self) -> list[Any]:
        if any(sent is None for sent in self.sent.values()):
            return self._finish(op.CheckpointGivenUp(self.epoch, "the run ended"))
        # What reducer r waits for: the records of these epochs every reducer forwarded to it.
        return [op.AskCut(slot, self.epoch, sum(sent[slot] for sent in self.sent.values())) for slot in self.slots]

    def _end(self) -> list[Any]:
        errors = [s for s in self.shares.values() if isinstance(s, BaseException)]
        if errors:
            return self._finish(op.CheckpointFailed(self.epoch, errors[0]))
        if any(s is None for s in self.shares.values()):
            return self._finish(op.CheckpointGivenUp(
                self.epoch, "a reducer did not receive the forwards counted for it in time"))
        absorbed = sum(share[1] for share in self.shares.values())
        pending = sum(weight(batch) for share in self.shares.values() for batch, _ in share[2])
        return self._finish(op.CheckpointTaken(self.epoch, dict(self.shares), absorbed, pending))

    def _finish(self, verdict: Any) -> list[Any]:
        """Phase three for every slot (the held forwards go out whatever the verdict), then the verdict."""
        self.verdict = verdict
        return [*(op.AskRelease(slot) for slot in self.slots), verdict]
