"""A new pool's first job, started by the driver while the coordinator's process starts
(no Ray): the driver's hand-out of the first items, the order of its calls (every member
started before any loop), and the coordinator, which holds the members' early calls until
it has taken the job over."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

import dpa
import dpa.runtime.ray.coordinator as ray_coordinator
import dpa.runtime.ray.driver as ray_driver
import dpa.runtime.ray.job as ray_job
from dpa.engine import events as ev
from dpa.engine.coordinator_machine import CoordinatorMachine
from dpa.engine.planning import build_plan
from dpa.input.sources import normalize_source


def plan(num_mappers: int = 2, num_reducers: int = 2) -> Any:
    table = pa.table({"k": list(range(100))})
    config = dpa.JobConfig(runtime="local", num_mappers=num_mappers, num_reducers=num_reducers)
    return build_plan(normalize_source(table, 100), "k", dpa.Count(), None, config)[0]


class Member:
    """A member ref whose calls are written to ``log`` as ``(name, method, args)``; with a
    ``host``, it runs in that fake process (:class:`Host`), which its calls reach."""

    def __init__(self, name: str, log: list[Any], host: Any = None) -> None:
        self.name, self.log, self.host = name, log, host
        self._actor_id = SimpleNamespace(hex=lambda: f"id-{name}")

    def dpa_route(self) -> tuple[Any, str, str]:
        return self.host, self.name, self.host.name

    def __getattr__(self, method: str) -> Any:
        def remote(*args: Any) -> str:
            self.log.append((self.name, method, args))
            return f"ref:{self.name}.{method}"
        return SimpleNamespace(remote=remote)


class Host(Member):
    """A fake process running members: its calls are logged as a member's are."""

    def dpa_route(self) -> tuple[Any, None, str]:
        return self, None, self.name


@pytest.fixture
def log(monkeypatch) -> list[Any]:
    calls: list[Any] = []
    monkeypatch.setattr(ray_driver, "_get", lambda refs, deadline, phase: calls.append(("driver", "waits", refs)))
    return calls


def fresh_pool(log: list[Any], p: Any) -> SimpleNamespace:
    """Members dealt over two fake hosts, as a pool's are (``host-0``: even indices)."""
    hosts = [Host(f"host-{i}", log) for i in range(2)]
    return SimpleNamespace(
        coordinator=Member("coordinator", log), balancer=Member("balancer", log),
        reducers=[Member(f"reducer-{i}", log, hosts[i % 2]) for i in range(p.num_reducers)],
        mappers=[Member(f"mapper-{i}", log, hosts[i % 2]) for i in range(p.num_mappers)],
        reducer_num_cpus=0.0, fresh=True, members_key=lambda: ("known",))


def starts(log: list[Any]) -> dict[str, tuple]:
    """The ``start_job`` arguments each member was sent, from its host's batched call."""
    return {role: args for _, method, (batch,) in (c for c in log if c[1] == "call_all")
            for role, call, args in batch if call == "start_job"}


def test_the_driver_hands_each_mapper_a_first_item_and_starts_every_member_before_any_loop(log):
    p = plan()
    pool = fresh_pool(log, p)
    snapshot = p.policy.initial_snapshot(p.num_reducers)
    items = iter([("block-0", None), ("block-1", None), ("block-2", None)])
    job = ray_driver.open_job(pool, p, snapshot, items, deadline=None)
    assert job == "ref:coordinator.run_job" and pool.fresh is False
    assert next(items) == ("block-2", None)  # (read as far as there are mappers: the rest is fed)
    kinds = [(name, method) for name, method, _ in log]
    waits = kinds.index(("driver", "waits"))
    # One start call per host, carrying the start of each member it runs.
    assert kinds[:waits] == [("host-0", "call_all"), ("host-1", "call_all")]
    assert sorted(starts(log)) == ["mapper-0", "mapper-1", "reducer-0", "reducer-1"]
    assert log[waits][2] == ["ref:host-0.call_all", "ref:host-1.call_all"]
    # Then one call per host runs its members' loops.
    assert kinds[waits + 1:] == [("host-0", "run_loops"), ("host-1", "run_loops"), ("coordinator", "run_job")]
    assert [args for name, method, args in log if method == "run_loops"] == [
        (p.job_id, ["reducer-0", "mapper-0"]), (p.job_id, ["reducer-1", "mapper-1"])]
    firsts = {name: args[4] for name, args in starts(log).items() if name.startswith("mapper")}
    assert firsts["mapper-0"][0] == ("block-0", None) and firsts["mapper-1"][0] == ("block-1", None)
    assert {f[1] for f in firsts.values()} == {0}  # epoch 0
    assert firsts["mapper-0"][2] != firsts["mapper-1"][2]  # each its own ledger token
    assert starts(log)["mapper-0"][2] == (pool.coordinator, pool.reducers, pool.balancer)
    (_, _, (_, _, known, (machine, loops))), = [c for c in log if c[1] == "run_job"]
    assert known == ("known",) and machine.max_pending == ray_driver.MAX_PENDING * p.num_mappers
    assert loops == [(("reducer-0", "mapper-0"), "ref:host-0.run_loops"),
                     (("reducer-1", "mapper-1"), "ref:host-1.run_loops")]
    assert machine.live and machine.queued == 0 and machine.blocks_per_mapper == [1, 1]


def test_a_mapper_without_a_first_item_asks_the_coordinator(log):
    p = plan(num_mappers=3)
    pool = fresh_pool(log, p)
    ray_driver.open_job(pool, p, p.policy.initial_snapshot(p.num_reducers), iter([("only", None)]), deadline=None)
    firsts = {name: args[4] for name, args in starts(log).items() if name.startswith("mapper")}
    assert firsts["mapper-0"][0] == ("only", None) and firsts["mapper-1"] is None and firsts["mapper-2"] is None


@pytest.fixture
def coordinator(monkeypatch) -> Any:
    for module in (ray_coordinator, ray_job):
        monkeypatch.setattr(module, "metric", lambda name: SimpleNamespace(set=lambda *a, **k: None))
    cls = ray_coordinator.CoordinatorActor.__ray_metadata__.modified_class
    log: list[Any] = []
    return cls("pool", 1, 1, None, 0.0, ([Member("reducer-0", log)], [Member("mapper-0", log)]))


def opened_machine(p: Any) -> CoordinatorMachine:
    machine = CoordinatorMachine(p, time.monotonic, range(p.num_reducers))
    machine.handle(ev.JobStarted(p.policy.initial_snapshot(p.num_reducers)), ev.RunStarted(0.0))
    machine.handle(ev.BlocksOffered([("block-0", None)]), ev.BlockWanted(0))
    return machine


def test_members_calls_wait_until_the_coordinator_has_taken_the_job_over(coordinator):
    p = plan(num_mappers=1, num_reducers=1)
    machine = opened_machine(p)

    async def main() -> None:
        done = asyncio.ensure_future(coordinator.block_done(p.job_id, 0, 0, 100))
        progress = asyncio.ensure_future(coordinator.progress(p.job_id, 0, 100))
        report = asyncio.ensure_future(coordinator._invoke("balancer", "report", (p.job_id, 0, 5, 0)))
        await asyncio.sleep(0.05)
        assert not (done.done() or progress.done() or report.done())
        coordinator._take_job(machine)
        coordinator.opened.set()
        await asyncio.wait_for(asyncio.gather(done, progress, report), 1.0)
        assert machine.emitted == [100] and machine.processed == 100
        # Later calls go straight through.
        await asyncio.wait_for(coordinator.block_done(p.job_id, 0, 0, 0), 0.1)

    asyncio.run(main())


def test_a_coordinator_that_prepared_a_job_lets_calls_in_at_once(coordinator):
    p = plan(num_mappers=1, num_reducers=1)

    async def main() -> None:
        async def repair() -> tuple:
            return coordinator.team.balancer, coordinator.team.reducers, coordinator.team.mappers, []

        coordinator.team.repair = repair
        await coordinator.prepare_job(p, 2)
        assert coordinator.opened.is_set()
        await asyncio.wait_for(coordinator.block_done("another job", 0, 0, 1), 0.1)  # (dropped: not this job)

    asyncio.run(main())
