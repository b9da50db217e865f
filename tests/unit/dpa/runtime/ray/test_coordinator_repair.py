"""PoolMembers.repair (a CoordinatorActor's) on fake members (no Ray): dead members are replaced, a
replacement that dies before it answers (its node went away too) is replaced again, the
members of a lost host are replaced together, and the balancer (run by the coordinator
itself) is never pinged nor replaced."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

import dpa.runtime.ray.coordinator as ray_coordinator
import dpa.runtime.ray.members as ray_members
from dpa.errors import JobFailedError


class Lost(Exception):
    """Stands for Ray's ActorDiedError."""


def fake(name: str, alive: bool, host: str | None = None) -> SimpleNamespace:
    """A member running in the process ``host`` (default: one of its own)."""
    async def ping() -> str:
        if not alive:
            raise Lost(f"{name} died")
        return f"node-of-{name}"

    process = host or name
    return SimpleNamespace(name=name, ping=SimpleNamespace(remote=ping),
                           _actor_id=SimpleNamespace(hex=lambda: f"id-{process}"))


def one_each(make):
    """A ``_create_together`` that starts each role with ``make(role)``."""
    return lambda roles: {role: make(role) for role in roles}


@pytest.fixture(autouse=True)
def killed(monkeypatch) -> list[str]:
    names: list[str] = []
    monkeypatch.setattr(ray_coordinator.ray, "kill", lambda actor, no_restart: names.append(actor.name))
    return names


def coordinator(reducer_alive: bool = True) -> object:
    cls = ray_coordinator.CoordinatorActor.__ray_metadata__.modified_class
    members = ([fake("reducer-0", reducer_alive)], [fake("mapper-0", True)])
    return cls("pool", 1, 1, None, 0.0, members)


def test_a_replacement_that_dies_before_it_answers_is_replaced_again(killed):
    coord = coordinator(reducer_alive=False)
    fresh = iter([fake("reducer-0.1", False), fake("reducer-0.2", True)])
    coord.team.create_together = one_each(lambda role: next(fresh))
    balancer, reducers, mappers, replaced = asyncio.run(coord.team.repair())
    assert [r.name for r in reducers] == ["reducer-0.2"] and replaced == ["reducer-0"]
    assert [m.name for m in mappers] == ["mapper-0"] and balancer.role == "balancer"
    assert coord.team.generation == 2 and coord.team.nodes["reducer-0"] == "node-of-reducer-0.2"
    assert killed == ["reducer-0", "reducer-0.1"]


def test_replacements_that_keep_dying_fail_the_job_naming_the_member():
    coord = coordinator(reducer_alive=False)
    coord.team.create_together = one_each(lambda role: fake(role, False))
    with pytest.raises(JobFailedError, match=r"reducer-0 died 4 times in a row while starting .*reducer-0 died"):
        asyncio.run(coord.team.repair())
    assert coord.team.generation == ray_members.REPAIR_ATTEMPTS


def test_live_members_are_left_alone_and_the_balancer_is_not_pinged():
    coord = coordinator()
    coord.team.create_together = lambda roles: pytest.fail(f"{roles} replaced")
    balancer, *_, replaced = asyncio.run(coord.team.repair())
    assert replaced == [] and coord.team.answered == {"reducer-0", "mapper-0"}
    # The balancer runs in the coordinator's process: its ref names the coordinator as host.
    assert balancer.role == "balancer" and balancer.host_key == "id-coordinator"
    assert set(coord.members) == {"balancer"}


def test_the_members_of_a_lost_host_are_replaced_together_in_one_host(killed):
    cls = ray_coordinator.CoordinatorActor.__ray_metadata__.modified_class
    # reducer-0 died with its host; mapper-1 shares that host (alive until the host is killed).
    members = ([fake("reducer-0", False, "h1"), fake("reducer-1", True, "h0")],
               [fake("mapper-0", True, "h0"), fake("mapper-1", True, "h1")])
    coord = cls("pool", 2, 2, None, 0.0, members)
    started: list[list[str]] = []

    def together(roles):
        started.append(list(roles))
        return {role: fake(f"{role}.1", True, "h2") for role in roles}

    coord.team.create_together = together
    balancer, reducers, mappers, replaced = asyncio.run(coord.team.repair())
    assert started == [["reducer-0", "mapper-1"]] and replaced == ["reducer-0", "mapper-1"]
    assert [r.name for r in reducers] == ["reducer-0.1", "reducer-1"]
    assert [m.name for m in mappers] == ["mapper-0", "mapper-1.1"] and balancer.role == "balancer"
    assert killed == ["reducer-0"]  # (the host h1, once, through one of its members)
