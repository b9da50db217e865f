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
from dpa.engine.mapper import MapperLogic
from dpa.engine.plan import JobPlan


class MapperMachine:
    """A mapper's protocol over its :class:`~dpa.engine.mapper.MapperLogic`.

    Args:
        mapper_id: The mapper's index.
        plan: The job.
        snapshot: The routing snapshot it starts under.
        clock: Seconds, monotonic (wall time on Ray, virtual time in-process): it times
            the epochs of a block (``plan.checkpoint_interval_s``).
    """

    def __init__(self, mapper_id: int, plan: JobPlan, snapshot: Any, clock: Callable[[], float]) -> None:
        self.logic = MapperLogic(mapper_id, plan, snapshot)
        self.clock = clock
        self.interval = plan.checkpoint_interval_s
        self.epoch = 0  # of the item being routed
        self.token = 0  # its ledger token
        self.before = 0  # records emitted before it
        self.since = 0.0  # when its epoch began here
        self.pushes: list[op.Push] = []  # the push waiting for its answers
        self.split_records = 0  # records of the rest a SplitBlock hands over
        self.done = False

    def handle(self, *events: Any) -> list[Any]:
        """Takes events; returns the instructions for the runtime, in order.

        Raises:
            Exception: What ``map_fn`` or the key raised on a block.
        """
        out: list[Any] = []
        for event in events:
            handler = _HANDLERS.get(type(event))
            if handler is None:
                raise TypeError(f"a mapper takes no {type(event).__name__} event")
            out += handler(self, event)
        return out

    @property
    def routing(self) -> bool:
        """Whether the mapper is routing a block now."""
        return self.logic.routing

    @property
    def emitted(self) -> int:
        """Records this mapper emitted so far."""
        return self.logic.emitted

    def _on_started(self, ev: ev.MapperStarted) -> list[Any]:
        return [op.RequestBlock(), op.AwaitBlock()]

    def _on_block(self, ev: ev.BlockArrived) -> list[Any]:
        self.epoch, self.token, self.before = ev.epoch, ev.token, self.logic.emitted
        self.logic.start_block(ev.table, prepared=ev.prepared)
        out: list[Any] = [op.RequestBlock()]  # the next item travels while this one is routed
        forecast = self.logic.take_forecast()
        if forecast is not None:
            # The first block's key counts: its first push goes out under what the balancer
            # makes of them (a key hot from the start is split already).
            return [*out, op.SendForecast(*forecast)]
        self.since = self.clock()
        return out + self._route()

    def _on_forecast(self, ev: ev.ForecastAnswered) -> list[Any]:
        if ev.snapshot is not None:
            self.logic.on_snapshot(ev.snapshot)
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

    def _on_split(self, ev: ev.BlockSplit) -> list[Any]:
        if ev.split is None:  # the run is over
            return [op.BlockDone(self.epoch, self.logic.emitted - self.before), op.AwaitBlock()]
        (self.epoch, self.token), self.since = ev.split, self.clock()
        self.before = self.logic.emitted - self.split_records
        return self._route()

    def _on_answered(self, ev: ev.PushesAnswered) -> list[Any]:
        outcome = max((o for o, _ in ev.answers), default=PUSH_KEEP)
        self.logic.on_pushed(outcome, {p.dest: capacity for p, (_, capacity) in zip(self.pushes, ev.answers)})
        self.pushes = []
        return self._route()

    def _on_no_more(self, ev: ev.NoMoreBlocks) -> list[Any]:
        self.done = True
        return [op.MapperDone(self.logic.first_routed, self.logic.emitted)]

    def _on_snapshot(self, ev: ev.SnapshotArrived) -> list[Any]:
        self.logic.on_snapshot(ev.snapshot)
        return []


_HANDLERS: dict[type, Callable[[MapperMachine, Any], list[Any]]] = {
    ev.MapperStarted: MapperMachine._on_started,
    ev.BlockArrived: MapperMachine._on_block,
    ev.ForecastAnswered: MapperMachine._on_forecast,
    ev.BlockSplit: MapperMachine._on_split,
    ev.PushesAnswered: MapperMachine._on_answered,
    ev.NoMoreBlocks: MapperMachine._on_no_more,
    ev.SnapshotArrived: MapperMachine._on_snapshot,
}
