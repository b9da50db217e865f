"""CoordinatorActor.repair on fake members (no Ray): dead members are replaced, and a
replacement that dies before it answers (its node went away too) is replaced again."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

import dpa.runtime.ray.coordinator as ray_coordinator
import dpa.runtime.ray.members as ray_members
from dpa.errors import JobFailedError


class Lost(Exception):
    """Stands for Ray's ActorDiedError."""


def fake(name: str, alive: bool) -> SimpleNamespace:
    async def ping() -> str:
        if not alive:
            raise Lost(f"{name} died")
        return f"node-of-{name}"

    return SimpleNamespace(name=name, ping=SimpleNamespace(remote=ping))


@pytest.fixture(autouse=True)
def killed(monkeypatch) -> list[str]:
    names: list[str] = []
    monkeypatch.setattr(ray_coordinator.ray, "kill", lambda actor, no_restart: names.append(actor.name))
    return names


def coordinator(balancer_alive: bool = True) -> object:
    cls = ray_coordinator.CoordinatorActor.__ray_metadata__.modified_class
    members = (fake("balancer", balancer_alive), [fake("reducer-0", True)], [fake("mapper-0", True)])
    return cls("pool", 1, 1, None, 0.0, members)


def test_a_replacement_that_dies_before_it_answers_is_replaced_again(killed):
    coord = coordinator(balancer_alive=False)
    fresh = iter([fake("balancer.1", False), fake("balancer.2", True)])
    coord._create = lambda role: next(fresh)
    balancer, reducers, mappers, replaced = asyncio.run(coord.repair())
    assert balancer.name == "balancer.2" and replaced == ["balancer"]
    assert [r.name for r in reducers] == ["reducer-0"] and [m.name for m in mappers] == ["mapper-0"]
    assert coord.generation == 2 and coord.nodes["balancer"] == "node-of-balancer.2"
    assert killed == ["balancer", "balancer.1"]


def test_replacements_that_keep_dying_fail_the_job_naming_the_member():
    coord = coordinator(balancer_alive=False)
    coord._create = lambda role: fake(role, False)
    with pytest.raises(JobFailedError, match=r"balancer died 4 times in a row while starting .*balancer died"):
        asyncio.run(coord.repair())
    assert coord.generation == ray_members.REPAIR_ATTEMPTS


def test_live_members_are_left_alone():
    coord = coordinator()
    coord._create = lambda role: pytest.fail(f"{role} replaced")
    *_, replaced = asyncio.run(coord.repair())
    assert replaced == [] and coord.answered == {"balancer", "reducer-0", "mapper-0"}
