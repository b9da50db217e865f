"""Members' peer handles are sent once (no Ray): a ``start_job`` whose member already has
the same peers gets ``PEERS_UNCHANGED``, and the driver gets handles only when its own
are out of date."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import dpa.runtime.ray.coordinator as ray_coordinator
from dpa.runtime.ray.member import PEERS_UNCHANGED, handles_key
from dpa.runtime.ray.member import JobMember as JobMember


def fake(name: str) -> SimpleNamespace:
    return SimpleNamespace(name=name, _actor_id=SimpleNamespace(hex=lambda: f"id-{name}"))


def coordinator() -> object:
    cls = ray_coordinator.CoordinatorActor.__ray_metadata__.modified_class
    coord = cls("pool", 2, 2, None, 0.0, ([fake("reducer-0"), None], [fake("m0"), fake("m1")]))
    coord.team.balancer = fake("balancer")  # (a stand-in for the ref to the balancer it runs)
    return coord


def test_a_member_gets_its_peers_once_until_they_change():
    coord = coordinator()
    me, mapper = fake("coordinator"), coord.team.mappers[0]
    peers = (me, coord.team.reducers, coord.team.balancer)
    assert coord.team.peers_for(mapper, peers) is peers
    assert coord.team.peers_for(mapper, peers) == PEERS_UNCHANGED
    assert coord.team.peers_for(coord.team.mappers[1], peers) is peers  # another member: its own record
    coord.team.reducers[1] = fake("reducer-1")  # an elastic job's new reducer: the peers changed
    changed = (me, coord.team.reducers, coord.team.balancer)
    assert coord.team.peers_for(mapper, changed) is changed
    assert coord.team.peers_for(mapper, changed) == PEERS_UNCHANGED
    coord.team.mappers[0] = fake("m0.1")  # a replacement is a new actor: it never got any
    assert coord.team.peers_for(coord.team.mappers[0], changed) is changed
    coord.team.peers_sent.clear()  # what a failed start does
    assert coord.team.peers_for(coord.team.mappers[1], changed) is changed


def test_the_driver_gets_handles_only_when_its_own_are_out_of_date():
    coord = coordinator()
    assert coord.team.for_driver(None) == (coord.team.balancer, coord.team.reducers, coord.team.mappers)
    known = handles_key(coord.team.balancer, coord.team.reducers, coord.team.mappers)
    assert coord.team.for_driver(known) == (None, None, None)
    coord.team.balancer = fake("balancer.1")
    assert coord.team.for_driver(known)[0].name == "balancer.1"


def test_handles_key_keeps_the_groups_apart():
    a, b, c = fake("a"), fake("b"), fake("c")
    assert handles_key([a, b], [c]) != handles_key([a], [b, c])
    assert handles_key(a, [None, b]) == ("id-a", (None, "id-b"))


def test_a_member_keeps_the_peers_it_was_sent():
    member = JobMember()
    with pytest.raises(RuntimeError, match="peers are unchanged, but it has none"):
        member._peers(PEERS_UNCHANGED)
    reducers = [fake("r0")]
    coordinator_, got, balancer = member._peers((fake("c"), reducers, fake("b")))
    assert got == reducers and got is not reducers  # its own copy
    reducers.append(fake("r1"))
    assert member._peers(PEERS_UNCHANGED)[1] == [got[0]]
