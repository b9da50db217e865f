"""One job on the Ray coordinator: its :class:`~dpa.engine.coordinator_machine.CoordinatorMachine`
and what carries the machine's instructions out.

:class:`JobShell` hands the machine the events its calls bring (a member's through
:class:`~dpa.engine.events.FromRun`, which the machine drops when that run no longer serves
the job) and carries out what comes back: the answers the mappers and the driver wait for
(each call that waits holds a future under a request id the machine's answer names), the
messages to the balancer and the reducers, a checkpoint's store. A checkpoint round and a
scale-out are its :class:`~dpa.runtime.ray.checkpoints.CheckpointRounds` and
:class:`~dpa.runtime.ray.scale_out.ElasticReducers`. It decides nothing: every protocol
decision is the machine's.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import ray

from dpa.engine import events as ev
from dpa.engine import instructions as op
from dpa.engine.coordinator_machine import CoordinatorMachine
from dpa.runtime.ray.checkpoints import CheckpointRounds
from dpa.runtime.ray.members import PoolMembers
from dpa.runtime.ray.outbox import post
from dpa.runtime.ray.scale_out import ElasticReducers
from dpa.runtime.ray.telemetry import metric


class JobShell:
    """The coordinator's hold of one job (see the module docstring).

    Args:
        machine: The job's protocol.
        team: The pool's members.
    """

    def __init__(self, machine: CoordinatorMachine, team: PoolMembers) -> None:
        self.machine = machine
        self.team = team
        self.job_id = machine.plan.job_id
        self.tags = {"job_id": self.job_id}
        self.member_run = self.job_id  # the run the members were last started with
        self.ids = itertools.count()
        self.waiters: dict[int, asyncio.Future] = {}  # a mapper's next_block or split_block, by request
        self.offers: dict[int, asyncio.Future] = {}  # the driver's offers, by id
        self.done = asyncio.Event()  # every record is absorbed: the run ends (StopBalancer)
        self.members_changed = asyncio.Event()  # (a run's own, from its start)
        self.checkpoint_error: BaseException | None = None  # user code raised in a checkpoint
        self.tasks: dict[asyncio.Future, str] = {}  # the run's member loops (a scale-out adds its own)
        self.scale_lock = asyncio.Lock()  # a scale-out and a checkpoint never overlap
        self.rounds = CheckpointRounds(self)
        self.elastic = ElasticReducers(self)
        metric("dpa_job_progress").set(0.0, tags=self.tags)

    @property
    def job_slots(self) -> list[int]:
        """The reducer slots serving the job."""
        return self.machine.job_slots

    @property
    def reducers(self) -> list[Any]:
        """The reducers serving the job."""
        return self.team.reducers_of(self.job_slots)

    def expect(self, futures: dict[int, asyncio.Future]) -> tuple[int, asyncio.Future]:
        """A new request id and the future its answer sets."""
        request = next(self.ids)
        futures[request] = asyncio.get_running_loop().create_future()
        return request, futures[request]

    def handle(self, *events: Any) -> None:
        """Hands the machine ``events`` and carries out what it says at once."""
        for ins in self.machine.handle(*events):
            self.do(ins)

    def do(self, ins: Any) -> None:
        """Carries out an instruction that needs no waiting."""
        if isinstance(ins, op.GiveBlock):
            _answer(self.waiters, ins.request, [ins.item, ins.epoch, ins.token])
        elif isinstance(ins, op.NoMoreBlocks):
            _answer(self.waiters, ins.request, None)
        elif isinstance(ins, op.AnswerSplit):
            _answer(self.waiters, ins.request, ins.split)
        elif isinstance(ins, op.AnswerOffer):
            _answer(self.offers, ins.offer, ins.accepted)
        elif isinstance(ins, op.InputProgress):
            metric("dpa_job_progress").set(ins.fraction, tags=self.tags)
        elif isinstance(ins, op.TellBalancerMapped):
            post(self.team.balancer, "input_done", self.machine.run_id)
        elif isinstance(ins, op.TellReducersMapped):
            for slot in ins.slots:  # (an idle one reports its progress at once from now on)
                post(self.team.reducers[slot], "input_mapped", self.machine.run_id)
        elif isinstance(ins, op.StartCheckpoint):
            asyncio.ensure_future(self.rounds.run(self.machine.run_id))
        elif isinstance(ins, op.StoreCheckpoint):
            ck = ins.checkpoint  # (its states go into this actor's object store: it outlives the reducers)
            ck.states = [None if state is None else ray.put(state) for state in ck.states]
            ck.pending = [ray.put(held) if held else None for held in ck.pending]
            metric("dpa_checkpoints").inc(1, tags=self.tags)
            self.handle(ev.CheckpointStored(ck), ev.Tick())
        elif isinstance(ins, op.CheckpointFailed):
            self.checkpoint_error = ins.error
            self.members_changed.set()
        elif isinstance(ins, op.StopBalancer):
            self.done.set()
        elif not isinstance(ins, op.ReadInput):  # (the driver offers its blocks ahead)
            raise TypeError(f"the Ray coordinator cannot carry out {ins!r} here")

    def release_waiters(self) -> None:
        """The mappers waiting for an item get none (the run ended)."""
        for request in list(self.waiters):
            _answer(self.waiters, request, None)


def _answer(futures: dict[int, asyncio.Future], request: int | None, value: Any) -> None:
    fut = futures.pop(request, None)
    if fut is not None and not fut.done():
        fut.set_result(value)


def raise_failure(instructions: list[Any]) -> list[Any]:
    """Raises the error of a :class:`~dpa.engine.instructions.FailJob` among ``instructions``;
    returns the others."""
    for ins in instructions:
        if isinstance(ins, op.FailJob):
            raise ins.error
    return list(instructions)
