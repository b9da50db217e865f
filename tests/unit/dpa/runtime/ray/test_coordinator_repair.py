"""CoordinatorActor.repair on fake members (no Ray): dead members are replaced, a
replacement that dies before it answers (its node went away too) is replaced again, and the
members of a lost host are replaced together."""

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


def coordinator(balancer_alive: bool = True) -> object:
    cls = ray_coordinator.CoordinatorActor.__ray_metadata__.modified_class
    members = (fake("balancer", balancer_alive), [fake("reducer-0", True)], [fake("mapper-0", True)])
    return cls("pool", 1, 1, None, 0.0, members)


def test_a_replacement_that_dies_before_it_answers_is_replaced_again(killed):
    coord = coordinator(balancer_alive=False)
    fresh = iter([fake("balancer.1", False), fake("balancer.2", True)])
    coord._create_together = one_each(lambda role: next(fresh))
    balancer, reducers, mappers, replaced = asyncio.run(coord.repair())
    assert balancer.name == "balancer.2" and replaced == ["balancer"]
    assert [r.name for r in reducers] == ["reducer-0"] and [m.name for m in mappers] == ["mapper-0"]
    assert coord.generation == 2 and coord.nodes["balancer"] == "node-of-balancer.2"
    assert killed == ["balancer", "balancer.1"]


def test_replacements_that_keep_dying_fail_the_job_naming_the_member():
    coord = coordinator(balancer_alive=False)
    coord._create_together = one_each(lambda role: fake(role, False))
    with pytest.raises(JobFailedError, match=r"balancer died 4 times in a row while starting .*balancer died"):
        asyncio.run(coord.repair())
    assert coord.generation == ray_members.REPAIR_ATTEMPTS


def test_live_members_are_left_alone():
    coord = coordinator()
    coord._create_together = lambda roles: pytest.fail(f"{roles} replaced")
    *_, replaced = asyncio.run(coord.repair())
    assert replaced == [] and coord.answered == {"balancer", "reducer-0", "mapper-0"}


def test_the_members_of_a_lost_host_are_replaced_together_in_one_host(killed):
    cls = ray_coordinator.CoordinatorActor.__ray_metadata__.modified_class
    # reducer-0 died with its host; mapper-1 shares that host (alive until the host is killed).
    members = (fake("balancer", True, "h0"), [fake("reducer-0", False, "h1"), fake("reducer-1", True, "h0")],
               [fake("mapper-0", True, "h0"), fake("mapper-1", True, "h1")])
    coord = cls("pool", 2, 2, None, 0.0, members)
    started: list[list[str]] = []

    def together(roles):
        started.append(list(roles))
        return {role: fake(f"{role}.1", True, "h2") for role in roles}

    coord._create_together = together
    balancer, reducers, mappers, replaced = asyncio.run(coord.repair())
    assert started == [["reducer-0", "mapper-1"]] and replaced == ["reducer-0", "mapper-1"]
    assert [r.name for r in reducers] == ["reducer-0.1", "reducer-1"]
    assert [m.name for m in mappers] == ["mapper-0", "mapper-1.1"] and balancer.name == "balancer"
    assert killed == ["reducer-0"]  # (the host h1, once, through one of its members)
