"""The mapper's protocol: one entry point, :meth:`MapperMachine.handle`, events in, instructions out.

A mapper asks for an item ahead (so the next one is on its way while it routes this one),
maps it, sends the first block's forecast to the balancer and routes under the answer,
pushes push by push (each under the newest snapshot, sized by the reducers' answers), cuts
the block at an epoch boundary so that what was pushed can be checkpointed, and tells the
coordinator when a block and when all its input is done. The data operations (mapping,
hashing, routing, the push window) are :class:`~dpa.engine.mapper.MapperLogic`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.flow import PUSH_KEEP
from dpa.engine.machine import Machine, handles
from dpa.engine.mapper import MapperLogic
from dpa.engine.plan import JobPlan


class MapperMachine(Machine):
    """A mapper's protocol over its :class:`~dpa.engine.mapper.MapperLogic`.

    Args:
        mapper_id: The mapper's index.
        plan: The job.
        snapshot: The routing snapshot it starts under.
        clock: Seconds, monotonic (wall time on Ray, virtual time in-process): it times
            the epochs of a block (``plan.checkpoint_interval_s``).
        await_forecast: Whether the first block waits for the balancer's answer to its
            forecast before its first push. False when the mapper starts while the
            balancer's process is still starting: it routes under ``snapshot`` at once and
            takes the forecast's outcome when the balancer publishes it.
    """

    role = "mapper"

    def __init__(self, mapper_id: int, plan: JobPlan, snapshot: Any, clock: Callable[[], float],
                 await_forecast: bool = True) -> None:
        self.logic = MapperLogic(mapper_id, plan, snapshot)
        self.clock = clock
        self.await_forecast = await_forecast
        self.interval = plan.checkpoint_interval_s
        self.epoch = 0  # of the item being routed
        self.token = 0  # its ledger token
        self.before = 0  # records emitted before it
        self.since = 0.0  # when its epoch began here
        self.pushes: list[op.Push] = []  # the push waiting for its answers
        self.split_records = 0  # records of the rest a SplitBlock hands over

    @property
    def routing(self) -> bool:
        """Whether the mapper is routing a block now."""
        return self.logic.routing

    @property
    def emitted(self) -> int:
        """Records this mapper emitted so far."""
        return self.logic.emitted

    @handles(ev.MapperStarted)
    def _on_started(self, event: ev.MapperStarted) -> list[Any]:
        return [op.RequestBlock(), op.AwaitBlock()]

    @handles(ev.BlockArrived)
    def _on_block(self, event: ev.BlockArrived) -> list[Any]:
        self.epoch, self.token, self.before = event.epoch, event.token, self.logic.emitted
        self.logic.start_block(event.table, prepared=event.prepared)
        out: list[Any] = [op.RequestBlock()]  # the next item travels while this one is routed
        forecast = self.logic.take_forecast()
        if forecast is not None and self.await_forecast:
            # The first block's key counts: its first push goes out under what the balancer
            # makes of them (a key hot from the start is split already).
            return [*out, op.SendForecast(*forecast)]
        if forecast is not None:
            out.append(op.SendForecast(*forecast, wait=False))
        self.since = self.clock()
        return out + self._route()

    @handles(ev.ForecastAnswered)
    def _on_forecast(self, event: ev.ForecastAnswered) -> list[Any]:
        if event.snapshot is not None:
            self.logic.on_snapshot(event.snapshot)
        self.since = self.clock()
        return self._route()

    def _route(self) -> list[Any]:
        """The next push of the block, or the block's end."""
        logic = self.logic
        if not logic.routing:
            # Every record of the block is in a reducer's queue: the coordinator may count
            # the block's epoch as mapped.
            return [op.BlockDone(self.epoch, logic.emitted - self.before), op.AwaitBlock()]
        if self.interval > 0 and self.clock() - self.since >= self.interval:
            # The epoch's time is up: the rest of the block becomes an item of its own, so
            # that what was pushed can be checkpointed (dpa.engine.epochs).
            rest, self.split_records = logic.rest()
            return [op.SplitBlock(self.epoch, logic.emitted - self.before - self.split_records, rest, self.token)]
        self.pushes = logic.next_pushes()
        return [op.SendPushes(self.pushes, logic.snapshot.version, self.epoch)]

    @handles(ev.BlockSplit)
    def _on_split(self, event: ev.BlockSplit) -> list[Any]:
        if event.split is None:  # the run is over
            return [op.BlockDone(self.epoch, self.logic.emitted - self.before), op.AwaitBlock()]
        (self.epoch, self.token), self.since = event.split, self.clock()
        self.before = self.logic.emitted - self.split_records
        return self._route()

    @handles(ev.PushesAnswered)
    def _on_answered(self, event: ev.PushesAnswered) -> list[Any]:
        outcome = max((o for o, _ in event.answers), default=PUSH_KEEP)
        self.logic.on_pushed(outcome, {p.dest: capacity for p, (_, capacity) in zip(self.pushes, event.answers)})
        self.pushes = []
        return self._route()

    @handles(ev.NoMoreBlocks)
    def _on_no_more(self, event: ev.NoMoreBlocks) -> list[Any]:
        return [op.MapperDone(self.logic.first_routed, self.logic.emitted)]

    @handles(ev.SnapshotArrived)
    def _on_snapshot(self, event: ev.SnapshotArrived) -> list[Any]:
        self.logic.on_snapshot(event.snapshot)
        return []


