"""A job's checkpoint rounds, carried out by the Ray coordinator as its machine decides
(:class:`~dpa.engine.checkpoint_round.CheckpointRound`)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.runtime.ray.members import member_lost

#: How long a reducer waits for the forwards a checkpoint counts before it gives it up.
CHECKPOINT_WAIT_S = 10.0
#: What one step of a checkpoint round asks of the members.
ROUND_ASKS = (op.AskPrepare, op.AskCut, op.AskRelease, op.FetchCheckpointSnapshot)


class CheckpointRounds:
    """A job's checkpoint rounds on the Ray coordinator: the asks of each phase go out
    together, their answers go back to the job's machine as events (from the run that
    asked: the machine drops a lost run's)."""

    def __init__(self, job: Any) -> None:
        self.job = job  # the JobShell (dpa.runtime.ray.job)

    async def run(self, run_id: str) -> None:
        """Carries out the checkpoint round the machine started in run ``run_id``, over the
        job's reducers (:class:`~dpa.engine.checkpoint_round.CheckpointRound`); the shares go
        into this actor's object store. A member lost meanwhile abandons it (the run is
        recovered from the previous one)."""
        job = self.job
        async with job.scale_lock:  # (the job's reducers do not change meanwhile)
            todo = job.machine.handle(ev.FromRun(run_id, (ev.CheckpointOpened(),)))
            try:
                while todo:
                    answers: list[Any] = []
                    for kind, group in itertools.groupby(todo, key=type):
                        if kind in ROUND_ASKS:  # (one phase's asks go out together)
                            answers += await self._round_asks(run_id, list(group))
                        else:
                            for ins in group:
                                job.do(ins)
                    todo = job.machine.handle(ev.FromRun(run_id, tuple(answers))) if answers else []
            except Exception:  # a member died: the run is recovered from the previous checkpoint
                job.handle(ev.FromRun(run_id, (ev.CheckpointLost(),)))

    async def _round_asks(self, run_id: str, asks: list[Any]) -> list[Any]:
        """Carries out one step of a checkpoint round (the asks of one phase, together);
        returns the answers as events."""
        reducers = self.job.team.reducers
        if isinstance(asks[0], op.AskPrepare):
            sent = await asyncio.gather(*[reducers[a.slot].prepare_checkpoint.remote(run_id, a.epoch) for a in asks])
            return [ev.Prepared(a.slot, s) for a, s in zip(asks, sent)]
        if isinstance(asks[0], op.AskCut):
            shares = await asyncio.gather(*[reducers[a.slot].checkpoint.remote(
                run_id, a.epoch, a.expected, CHECKPOINT_WAIT_S) for a in asks], return_exceptions=True)
            lost = next((s for s in shares if isinstance(s, Exception) and member_lost(s)), None)
            if lost is not None:
                raise lost
            return [ev.CutTaken(a.slot, s) for a, s in zip(asks, shares)]
        if isinstance(asks[0], op.AskRelease):
            await asyncio.gather(*[reducers[a.slot].release_checkpoint.remote(run_id) for a in asks])
            return []
        return [ev.CheckpointSnapshot(await self.job.team.balancer.snapshot.remote(run_id))]  # FetchCheckpointSnapshot
