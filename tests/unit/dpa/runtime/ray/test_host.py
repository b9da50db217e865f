"""Hosts without Ray: how members are packed into hosts, and how a member ref calls its host."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

from dpa.runtime.ray.host import MemberRef, host_cpus, host_id, pack
from dpa.runtime.ray.member import handles_key, member_id


class FakeMethod:
    def __init__(self, name: str, options: dict | None = None) -> None:
        self.name, self.opts = name, options or {}

    def remote(self, *args):
        return (self.name, self.opts, args)

    def options(self, **options):
        return FakeMethod(self.name, options)


class FakeHost:
    """Stands for a HostActor's handle (pickles by value, as Ray pickles handles)."""

    def __init__(self, hex_id: str) -> None:
        self._actor_id = SimpleNamespace(hex=lambda: hex_id)
        self.hex_id = hex_id
        self.call, self.call_traced = FakeMethod("call"), FakeMethod("call_traced")

    def __reduce__(self):
        return (FakeHost, (self.hex_id,))


def test_members_are_dealt_round_robin_so_every_host_gets_reducers_and_mappers():
    roles = ["balancer", *[f"reducer-{i}" for i in range(8)], *[f"mapper-{i}" for i in range(4)]]
    hosts = pack(roles, 2)
    assert hosts == [["balancer", "reducer-1", "reducer-3", "reducer-5", "reducer-7", "mapper-1", "mapper-3"],
                     ["reducer-0", "reducer-2", "reducer-4", "reducer-6", "mapper-0", "mapper-2"]]
    assert pack(roles, 99) == [[r] for r in roles]  # at most one host per member
    assert pack(["reducer-5"], 4) == [["reducer-5"]]


def test_hosts_are_one_per_cpu_but_no_more_than_the_cores_of_a_node_on_this_machine():
    here = {"NodeManagerAddress": "10.0.0.1", "Alive": True, "Resources": {"CPU": 8.0}}
    # Ray started with 8 logical CPUs on 2 cores: 2 hosts, not 8
    assert host_cpus([here], "10.0.0.1", cores_here=2) == 2
    assert host_cpus([here], "10.0.0.1", cores_here=16) == 8
    # nodes elsewhere count their CPUs; dead ones nothing
    others = [{"NodeManagerAddress": f"10.0.0.{i}", "Alive": True, "Resources": {"CPU": 16.0}} for i in (2, 3)]
    dead = {"NodeManagerAddress": "10.0.0.9", "Alive": False, "Resources": {"CPU": 64.0}}
    assert host_cpus([here, *others, dead], "10.0.0.1", cores_here=2) == 2 + 32
    # a 64-CPU cluster of 8 nodes: 64 hosts, 8 per node (a default job's 64 reducers and
    # 64 mappers in 8 processes per node)
    nodes = [{"NodeManagerAddress": f"10.1.0.{i}", "Alive": True, "Resources": {"CPU": 8.0}} for i in range(8)]
    assert host_cpus(nodes, "10.9.9.9", cores_here=4) == 64
    assert host_cpus([{"NodeManagerAddress": "x", "Alive": True, "Resources": {}}], "y", cores_here=2) == 1


def test_reducers_that_reserve_cpus_get_a_host_each():
    roles = ["balancer", "reducer-0", "reducer-1", "mapper-0", "mapper-1"]
    assert pack(roles, 2, reducer_num_cpus=1.0) == [["balancer", "mapper-1"], ["mapper-0"], ["reducer-0"], ["reducer-1"]]


def test_a_member_ref_calls_its_host_quietly_for_frequent_calls():
    ref = MemberRef(FakeHost("h1"), "reducer-3")
    assert ref.push.remote("job", "batch") == ("call", {}, ("reducer-3", "push", "job", "batch"))
    assert ref.start_job.remote("plan") == ("call_traced", {}, ("reducer-3", "start_job", "plan"))
    assert ref.result.options(num_returns=2).remote("run") == (
        "call_traced", {"num_returns": 2}, ("reducer-3", "result", "run"))


def test_a_member_ref_keeps_its_id_across_pickling_and_names_its_host():
    ref = MemberRef(FakeHost("h1"), "mapper-0")
    again = pickle.loads(pickle.dumps(ref))
    assert member_id(again) == member_id(ref) == "h1/mapper-0" and host_id(again) == "h1"
    other = MemberRef(FakeHost("h1"), "mapper-1")
    assert handles_key(ref, [other, None]) == ("h1/mapper-0", ("h1/mapper-1", None))
    assert host_id(other) == host_id(ref) and member_id(other) != member_id(ref)


class RecordingReducer:
    """Stands for a reducer object in this process: records the pushes it is called with."""

    def __init__(self) -> None:
        self.pushes: list[tuple] = []

    async def push(self, job_id, batch, version, forwarded=False, epoch=0):
        self.pushes.append((job_id, batch, version, forwarded, epoch))
        return ("queued", 10)


def test_a_mapper_calls_a_reducer_of_its_own_process_and_sends_to_the_others(monkeypatch):
    import asyncio

    import pyarrow as pa

    from dpa.runtime.ray import member as ray_member
    from dpa.runtime.ray.mapper import MapperActor

    monkeypatch.setattr(ray_member, "_HOSTED", {})
    local = RecordingReducer()
    ray_member.host_members("h1", {"reducer-0": local})
    here, there = MemberRef(FakeHost("h1"), "reducer-0"), MemberRef(FakeHost("h2"), "reducer-1")
    assert ray_member.hosted_member(here) is local and ray_member.hosted_member(there) is None
    assert ray_member.hosted_member(SimpleNamespace(_actor_id=None)) is None  # (a plain actor handle)

    from dpa.engine.instructions import Push, SendPushes

    sent = []

    class Slicing(FakeHost):
        def __getattr__(self, method):
            if method != "call_sliced":
                raise AttributeError(method)

            def remote(roles, method, head, tail, rows, table):
                sent.append((roles, method, head, tail, rows, table))
                fut = asyncio.get_running_loop().create_future()
                fut.set_result([("remote", n) for n in rows])
                return fut
            return SimpleNamespace(remote=remote)

    there, further = MemberRef(Slicing("h2"), "reducer-1"), MemberRef(Slicing("h2"), "reducer-2")
    mapper = MapperActor(0, "mapper-0")
    mapper.reducers = [here, there, further]
    batch, other = pa.table({"k": [1, 2]}), pa.table({"k": [3, 4, 5]})
    pushes = SendPushes([Push(1, batch), Push(0, batch), Push(2, other)], 3, 1)
    answers = asyncio.run(mapper._pushes("job", pushes))
    assert answers == [("remote", 2), ("queued", 10), ("remote", 3)]  # (in the pushes' order)
    assert local.pushes == [("job", batch, 3, False, 1)] and local.pushes[0][1] is batch  # (not copied)
    # the two pushes to the other host's reducers went as one call, their batches as one table
    (roles, method, head, tail, rows, table), = sent
    assert (roles, method, head, tail, rows) == (["reducer-1", "reducer-2"], "push", ("job",), (3, False, 1), [2, 3])
    assert table.column("k").to_pylist() == [1, 2, 3, 4, 5] and table.column("k").num_chunks == 1
