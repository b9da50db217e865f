"""The calls that end a job (no Ray): the coordinator actor, carrying out its machine's
instructions, tells the reducers once that every input record is queued (their progress protocol is tested on the machine:
``tests/unit/dpa/engine/test_reducer_machine.py``); a mapper's finished block may ride on
its next ``next_block`` request or on ``mapper_done``; a reducer's loop finalizes as it
ends when nothing can reach the reducer after that."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace

import pyarrow as pa

import dpa
import dpa.runtime.ray.coordinator as ray_coordinator
import dpa.runtime.ray.reducer as ray_reducer
from dpa.engine import events as ev
from dpa.engine.coordinator_machine import CoordinatorMachine
from dpa.engine.mapper import MapperLogic
from dpa.engine.output import finalize_at_stop
from dpa.engine.planning import build_plan
from dpa.input.sources import normalize_source


class Recorder:
    """A fake actor handle: ``handle.method.remote(*args)`` is recorded."""

    def __init__(self, name: str) -> None:
        self.name, self.calls = name, []
        self._actor_id = SimpleNamespace(hex=lambda: f"id-{name}")

    def __getattr__(self, method: str) -> SimpleNamespace:
        return SimpleNamespace(remote=lambda *args: self.calls.append((method, *args)))


def coordinator() -> object:
    """A coordinator actor without Ray, its job prepared and its first run started."""
    cls = ray_coordinator.CoordinatorActor.__ray_metadata__.modified_class
    coord = cls("pool", 2, 2, None, 0.0, ([Recorder("r0"), Recorder("r1")], [Recorder("m0"), Recorder("m1")]))
    coord.team.balancer = Recorder("balancer")  # (a stand-in for the ref to the balancer it runs)
    config = dpa.JobConfig(runtime="local", num_mappers=2, num_reducers=2)
    plan, _ = build_plan(normalize_source(pa.table({"k": [1, 2]}), None), "k", dpa.Count(), None, config)
    coord._take_job(CoordinatorMachine(dataclasses.replace(plan, job_id="run"), lambda: 0.0, max_pending=4))
    coord.job.handle(ev.JobStarted(None), ev.RunStarted(0.0))
    coord.opened.set()
    return coord


def test_the_reducers_hear_once_that_every_record_is_queued():
    async def scenario() -> None:
        coord = coordinator()
        assert await coord.offer("run", ["block"])
        await coord.input_done("run")
        taken = asyncio.ensure_future(coord.next_block("run", 0))
        assert (await taken)[0] == "block"
        assert await coord.next_block("run", 1) is None  # (the input is exhausted)
        await coord.mapper_done("run", 1)  # (mapper 0 is still at work)
        assert all(not r.calls for r in coord.team.reducers)
        await coord.mapper_done("run", 0, (0, 10))  # the last block's end rides along
        await asyncio.sleep(0)  # (posted calls leave at the end of the loop's step)
        assert [r.calls for r in coord.team.reducers] == [[("input_mapped", "run")]] * 2
        assert ("input_done", "run") in coord.team.balancer.calls
        await coord.progress("run", 0, 4)  # (later calls do not repeat it)
        await asyncio.sleep(0)
        assert [len(r.calls) for r in coord.team.reducers] == [1, 1] and not coord.job.done.is_set()
        await coord.progress("run", 1, 6)
        assert coord.job.done.is_set()  # every record absorbed: the run ends

    asyncio.run(scenario())


def test_next_block_takes_the_last_blocks_end_along():
    async def scenario() -> None:
        coord = coordinator()
        await coord.offer("run", ["b0", "b1"])
        epoch, _ = (await coord.next_block("run", 0))[1:]
        got = await coord.next_block("run", 0, (epoch, 4))
        assert got[0] == "b1" and coord.job.machine.logic.ledger.blocks_done == 1
        assert await coord.next_block("old run", 0, (epoch, 4)) is None  # a lost run's news is dropped
        assert coord.job.machine.logic.ledger.blocks_done == 1

    asyncio.run(scenario())


def test_a_mapper_waiting_for_a_block_gets_the_next_one_offered_or_none_when_the_run_stops():
    async def scenario() -> None:
        coord = coordinator()
        waiting = asyncio.ensure_future(coord.next_block("run", 0))
        await asyncio.sleep(0)
        assert not waiting.done()
        await coord.offer("run", ["b0"])
        assert (await waiting)[0] == "b0"
        waiting = asyncio.ensure_future(coord.next_block("run", 1))
        await asyncio.sleep(0)
        await coord._stop_members("run", {})  # (a lost run, a cancelled job)
        assert await waiting is None

    asyncio.run(scenario())


def reducer() -> object:
    """A reducer member without Ray (as its host builds it)."""
    r = ray_reducer.ReducerActor(0, "reducer-0")
    r.coordinator = Recorder("coordinator")
    return r


def served(finalize: bool) -> tuple[object, dict]:
    """A reducer that queues two batches, then is stopped (``finalize`` or not) and its
    loop ends: the reducer and what the loop returned."""
    config = dpa.JobConfig(runtime="local", num_mappers=1, num_reducers=1)
    plan, _ = build_plan(normalize_source(pa.table({"k": [1, 2]}), None), "k", dpa.Count(), None, config)
    r = reducer()
    snapshot = plan.policy.initial_snapshot(1)
    (push,) = MapperLogic(0, plan, snapshot).map_block(pa.table({"k": [1, 2, 2]}))  # what a mapper pushes
    batch = push.batch

    async def scenario() -> dict:
        await r.start_job(plan, snapshot, ([r], Recorder("balancer"), r.coordinator), "job")
        loop = asyncio.ensure_future(r.serve("job"))
        for _ in range(2):
            await r.push("job", batch, snapshot.version)
        await r.stop("job", None, finalize)  # (the loop drains its queue before it ends)
        return await loop

    return r, asyncio.run(scenario())


def test_a_reducers_loop_finalizes_at_its_end_only_when_stop_says_so():
    r, counters = served(finalize=True)
    assert counters["processed"] == 6 and counters["merged_keys"] == 0
    assert sorted(r.result.to_pylist(), key=lambda row: row["k"]) == [{"k": 1, "count": 2}, {"k": 2, "count": 4}]
    r, counters = served(finalize=False)
    assert counters["processed"] == 6 and "merged_keys" not in counters and r.result is None
    asyncio.run(r.finalize("job"))  # (the coordinator's own call)
    assert r.result.num_rows == 2


def test_reducers_finalize_at_stop_only_if_nothing_reaches_them_later():
    plan = SimpleNamespace(migrate="records", active_reducers=0, applies_groups=False)
    assert finalize_at_stop(plan, merged=False)
    assert not finalize_at_stop(plan, merged=True)  # partial states are exchanged first
    assert not finalize_at_stop(SimpleNamespace(migrate="state", active_reducers=0, applies_groups=False),
                                merged=False)
    assert not finalize_at_stop(SimpleNamespace(migrate="records", active_reducers=4, applies_groups=False),
                                merged=False)
    # a per-group function's apply phase is scheduled over every reducer after the loops end
    assert not finalize_at_stop(SimpleNamespace(migrate="records", active_reducers=0, applies_groups=True),
                                merged=False)
