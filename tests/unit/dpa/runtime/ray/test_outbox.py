"""Posted calls without Ray: one Ray call per destination process and event-loop step, in
the order they were posted, and a direct member call never overtakes earlier posts."""

from __future__ import annotations

import asyncio
import logging
import pickle
from types import SimpleNamespace

import pytest

from dpa.engine.instructions import Publish
from dpa.runtime.ray.balancer import BalancerActor
from dpa.runtime.ray.host import MemberHost, MemberRef
from dpa.runtime.ray.outbox import flush, post, run_batch


class Host:
    """A fake process handle: every Ray call it is sent is recorded in ``sent``."""

    def __init__(self, name: str, sent: list) -> None:
        self._actor_id = SimpleNamespace(hex=lambda: f"id-{name}")
        self.name, self.sent = name, sent

    def __getattr__(self, method: str) -> SimpleNamespace:
        if method.startswith("_"):
            raise AttributeError(method)
        return SimpleNamespace(remote=lambda *args: self.sent.append((self.name, method, args)))


def test_calls_posted_in_one_step_go_out_as_one_call_per_process_in_order():
    sent: list = []
    a, b = Host("a", sent), Host("b", sent)

    async def scenario() -> None:
        post(MemberRef(a, "reducer-0"), "update_ring", "job", "ring")
        post(MemberRef(b, "reducer-1"), "update_ring", "job", "ring")
        post(MemberRef(a, "mapper-0"), "update_ring", "job", "ring")
        post(a, "progress", "job", 3)  # (the process's own method)
        assert not sent  # nothing leaves before the step ends
        await asyncio.sleep(0)
        assert sent == [
            ("a", "call_batch", ([("reducer-0", "update_ring", ("job", "ring")),
                                  ("mapper-0", "update_ring", ("job", "ring")),
                                  (None, "progress", ("job", 3))],)),
            ("b", "call", ("reducer-1", "update_ring", "job", "ring")),
        ]
        sent.clear()
        post(a, "progress", "job", 4)
        await asyncio.sleep(0)
        assert sent == [("a", "progress", ("job", 4))]  # one call alone goes as it is

    asyncio.run(scenario())


def test_a_direct_member_call_sends_the_posts_before_it():
    sent: list = []
    a = Host("a", sent)

    async def scenario() -> None:
        post(MemberRef(a, "balancer"), "report", "job", 0, 5)
        MemberRef(a, "reducer-1").push.remote("job", "batch")
        assert sent == [("a", "call", ("balancer", "report", "job", 0, 5)),
                        ("a", "call", ("reducer-1", "push", "job", "batch"))]
        await asyncio.sleep(0)
        flush()
        assert len(sent) == 2  # (sent once)

    asyncio.run(scenario())


def test_a_process_that_cannot_be_sent_to_does_not_stop_the_others(caplog: pytest.LogCaptureFixture):
    sent: list = []
    gone = SimpleNamespace(_actor_id=SimpleNamespace(hex=lambda: "id-gone"),
                           call=SimpleNamespace(remote=lambda *args: 1 / 0))

    async def scenario() -> None:
        post(MemberRef(gone, "reducer-0"), "update_ring", "job", "ring")
        post(MemberRef(Host("b", sent), "reducer-1"), "update_ring", "job", "ring")
        await asyncio.sleep(0)

    with caplog.at_level(logging.WARNING, logger="dpa.runtime.ray.outbox"):
        asyncio.run(scenario())
    assert sent == [("b", "call", ("reducer-1", "update_ring", "job", "ring"))]
    assert "could not send 1 posted call" in caplog.text


def test_a_post_outside_an_event_loop_goes_at_once():
    sent: list = []
    post(MemberRef(Host("a", sent), "reducer-0"), "update_ring", "job", "ring")
    assert sent == [("a", "call", ("reducer-0", "update_ring", "job", "ring"))]


def test_a_ring_posted_to_the_members_of_a_process_is_pickled_once():
    sent: list = []
    a = Host("a", sent)
    ring = list(range(10_000))

    async def scenario() -> None:
        for i in range(6):
            post(MemberRef(a, f"reducer-{i}"), "update_ring", "job", ring)
        await asyncio.sleep(0)

    asyncio.run(scenario())
    (_, method, (calls,)), = sent
    assert method == "call_batch" and len(calls) == 6
    assert len(pickle.dumps(calls)) < 1.1 * len(pickle.dumps(ring))


def test_the_balancer_publishes_a_ring_with_one_call_per_process():
    sent: list = []
    hosts = [Host("h0", sent), Host("h1", sent)]
    balancer = BalancerActor("balancer")
    balancer.job_id, balancer.plan = "job", SimpleNamespace(job_id="job", policy=SimpleNamespace(name="hybrid"))
    balancer.targets = [MemberRef(hosts[i % 2], f"reducer-{i}") for i in range(8)] + [
        MemberRef(hosts[i % 2], f"mapper-{i}") for i in range(4)]

    async def scenario() -> None:
        balancer._execute("job", [Publish("ring")])
        await asyncio.sleep(0)

    asyncio.run(scenario())
    assert [(name, method) for name, method, _ in sent] == [("h0", "call_batch"), ("h1", "call_batch")]
    assert sorted(role for _, _, (calls,) in sent for role, _, _ in calls) == sorted(
        [f"reducer-{i}" for i in range(8)] + [f"mapper-{i}" for i in range(4)])


class Members(MemberHost):
    def __init__(self) -> None:
        self.log: list = []
        self.members = {"reducer-0": self, "reducer-1": self}

    async def update_ring(self, job_id: str, ring: object) -> None:
        if ring == "bad":
            raise ValueError("a bad ring")
        self.log.append(("update_ring", ring))

    async def progress(self, job_id: str, processed: int) -> None:
        self.log.append(("progress", processed))


def test_a_batch_runs_in_order_and_a_failing_call_does_not_stop_the_others(caplog: pytest.LogCaptureFixture):
    host = Members()
    calls = [("reducer-0", "update_ring", ("job", 1)), ("reducer-1", "update_ring", ("job", "bad")),
             (None, "progress", ("job", 7)), ("reducer-1", "update_ring", ("job", 2))]
    with caplog.at_level(logging.WARNING, logger="dpa.runtime.ray.outbox"):
        asyncio.run(host.call_batch(calls))
    assert host.log == [("update_ring", 1), ("progress", 7), ("update_ring", 2)]
    assert "reducer-1.update_ring failed" in caplog.text
    asyncio.run(run_batch(host, [("reducer-0", "update_ring", ("job", 3))]))
    assert host.log[-1] == ("update_ring", 3)


def test_calls_per_process_go_as_one_call_each_and_answer_in_the_callers_order():
    from dpa.runtime.ray.outbox import call_per_process, send_together

    sent: list = []

    class Gathering:
        def __init__(self, name: str) -> None:
            self._actor_id = SimpleNamespace(hex=lambda: f"id-{name}")
            self.name = name

        def __getattr__(self, method: str) -> SimpleNamespace:
            if method.startswith("_"):
                raise AttributeError(method)

            def remote(*args):
                sent.append((self.name, method, args))
                fut = asyncio.get_running_loop().create_future()
                fut.set_result([f"{self.name}:{role}" for role, _, _ in args[0]] if method == "call_gather" else None)
                return fut
            return SimpleNamespace(remote=remote)

    a, b = Gathering("a"), Gathering("b")
    refs = [MemberRef(a, "reducer-0"), MemberRef(b, "reducer-1"), MemberRef(a, "reducer-2")]

    async def scenario() -> None:
        got = await call_per_process([(r, "finalize", ("job",)) for r in refs])
        assert got == ["a:reducer-0", "b:reducer-1", "a:reducer-2"]
        assert sent == [
            ("a", "call_gather", ([("reducer-0", "finalize", ("job",)), ("reducer-2", "finalize", ("job",))],)),
            ("b", "call_gather", ([("reducer-1", "finalize", ("job",))],))]
        sent.clear()
        assert len(send_together([(r, "accept_partial", ("job", i)) for i, r in enumerate(refs)])) == 2
        assert [(host, method) for host, method, _ in sent] == [("a", "call_all"), ("b", "call")]

    asyncio.run(scenario())


def test_tables_bound_for_one_process_travel_as_one_table_that_the_process_slices():
    import pyarrow as pa

    from dpa.runtime.ray.outbox import call_tables

    class Parts(MemberHost):
        """Members that record the tables they are handed, and one that raises."""

        def __init__(self) -> None:
            self.members = {f"reducer-{i}": self.Member(f"reducer-{i}") for i in range(3)}

        class Member:
            def __init__(self, name: str) -> None:
                self.name, self.got = name, []

            async def accept(self, job: str, part: pa.Table, tag: int) -> int:
                if self.name == "reducer-2" and part.num_rows == 0:
                    raise ValueError("empty part")
                self.got.append((job, part.column("k").to_pylist(), tag))
                return part.num_rows

    hosts = {"a": Parts(), "b": Parts()}
    sent: list = []

    class Handle:
        def __init__(self, name: str) -> None:
            self.name = name
            self._actor_id = SimpleNamespace(hex=lambda: f"id-{name}")

        def __getattr__(self, method: str) -> SimpleNamespace:
            if method.startswith("_"):
                raise AttributeError(method)

            def remote(*args):
                sent.append((self.name, method))
                return asyncio.ensure_future(getattr(hosts[self.name], method)(*pickle.loads(pickle.dumps(args))))
            return SimpleNamespace(remote=remote)

    a, b = Handle("a"), Handle("b")
    one, two, three = pa.table({"k": [1, 2]}), pa.table({"k": [3]}), pa.table({"k": [4, 5, 6]})

    async def scenario() -> None:
        calls = [(MemberRef(a, "reducer-0"), "accept", ("job",), one, (7,)),
                 (MemberRef(b, "reducer-0"), "accept", ("job",), two, (8,)),
                 (MemberRef(a, "reducer-1"), "accept", ("job",), three, (7,))]
        assert await call_tables(calls) == [2, 1, 3]  # (in the calls' order)
        assert sent == [("a", "call_sliced"), ("b", "call_gather")]  # (one call per process)
        assert hosts["a"].members["reducer-0"].got == [("job", [1, 2], 7)]
        assert hosts["a"].members["reducer-1"].got == [("job", [4, 5, 6], 7)]
        assert hosts["b"].members["reducer-0"].got == [("job", [3], 8)]
        sent.clear()
        # Tables of different schemas go as they are, in one call per process all the same.
        other = pa.table({"k": pa.array([9], pa.int32())})
        assert await call_tables([(MemberRef(a, "reducer-0"), "accept", ("job",), one, (1,)),
                                  (MemberRef(a, "reducer-1"), "accept", ("job",), other, (1,))]) == [2, 1]
        assert sent == [("a", "call_gather")]
        # A member that raises fails the process's call, once the others have run.
        with pytest.raises(ValueError, match="empty part"):
            await call_tables([(MemberRef(a, "reducer-2"), "accept", ("job",), one.slice(0, 0), (1,)),
                               (MemberRef(a, "reducer-1"), "accept", ("job",), two, (2,))])
        assert hosts["a"].members["reducer-1"].got[-1] == ("job", [3], 2)

    asyncio.run(scenario())
