"""State migration (``JobConfig(migrate="state")``) in the logic and the in-process runtime."""

from __future__ import annotations

import collections

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpa
from dpa.engine.planning import build_plan
from dpa.input.records import HASH_COL
from dpa.input.sources import normalize_source
from dpa.keys.columns import hash_key_columns
from dpa.routing.hash_ring import HashRing
from dpa.runtime.local import run_local

_RNG = np.random.default_rng(11)
KEYS = (_RNG.zipf(1.1, 30_000) % 3000).astype(np.int64)
EXPECTED = collections.Counter(KEYS.tolist())


def _run(policy, migrate, reducer=None, faults=(), interval=0.0, batch_size=1 << 20):
    # The ring policies without their forecast: its first ring would leave nothing to move.
    options = {"lookahead": False} if policy in ("doubling", "halving") else None
    config = dpa.JobConfig(num_reducers=6, policy=policy, runtime="local", migrate=migrate,
                           checkpoint_interval_s=interval, batch_size=batch_size, policy_options=options)
    plan, blocks = build_plan(normalize_source(pa.table({"k": KEYS}), batch_size), "k",
                              reducer or dpa.WithCost(dpa.Count(), 1e-3), None, config)
    return run_local(plan, blocks, faults=faults)


def _keys_per_table(out, column="k"):
    return [set(t[column].to_pylist()) for t in out.tables if t is not None]


def _counts(out, value="count"):
    got = collections.Counter()
    for table in out.tables:
        if table is not None:
            for k, c in zip(table["k"].to_pylist(), table[value].to_pylist()):
                got[k] += c
    return got


@pytest.mark.parametrize("policy", ["doubling", "halving"])
def test_ring_policies_end_with_every_key_on_one_reducer_and_no_merge(policy):
    out = _run(policy, "state")
    assert out.rebalances, "the workload must rebalance for the test to mean anything"
    assert _counts(out) == EXPECTED
    assert not out.merged and out.merged_keys == 0
    assert out.state_moves > 0
    tables = _keys_per_table(out)
    assert sum(len(t) for t in tables) == len(set().union(*tables)) == len(EXPECTED)  # no key twice
    # every key sits where the final ring routes it
    for r, table in enumerate(out.tables):
        if table is not None and table.num_rows:
            assert (out.final_snapshot.lookup_batch(hash_key_columns(table, ["k"])) == r).all()


def test_records_mode_merges_the_keys_it_moved_and_counts_them():
    records = _run("doubling", "records")
    state = _run("doubling", "state")
    assert _counts(records) == _counts(state) == EXPECTED
    assert records.merged and records.merged_keys > 0 and records.state_moves == 0
    assert records.processed == state.processed  # same routing, same records absorbed
    assert records.virtual_time_s == pytest.approx(state.virtual_time_s)


@pytest.mark.parametrize("theta", [None, 1 / 12])
def test_hybrid_merges_only_its_split_hot_keys(theta):
    policy = dpa.HybridSettings(theta=theta)
    out = _run(policy, "state")
    assert _counts(out) == EXPECTED
    hot = out.final_snapshot.table_size
    assert out.merged == (hot > 0)
    assert out.merged_keys <= hot
    records = _run(policy, "records")
    assert records.merged_keys >= out.merged_keys
    if theta is not None:  # few hot keys: ring rounds move tail keys, which records mode merges
        assert any(e.action in ("halve", "double") for e in records.rebalances)
        assert records.merged_keys > out.merged_keys


def test_a_user_defined_reducer_migrates_its_accumulators(tally):
    out = _run("doubling", "state", reducer=dpa.WithCost(tally(name="total"), 1e-3))
    assert _counts(out, "total") == EXPECTED
    assert out.merged_keys == 0 and out.state_moves > 0


@pytest.mark.parametrize("policy", ["doubling", "hybrid"])
def test_state_migration_with_checkpoints_and_failures_stays_exact(policy):
    out = _run(policy, "state", faults=[(1.5, "reducer-2"), (3.0, "balancer")], interval=0.5, batch_size=400)
    assert _counts(out) == EXPECTED
    assert out.recoveries and out.checkpoints >= 1
    if policy == "doubling":
        assert out.merged_keys == 0


def _reducers(n, snapshot, plan):
    from dpa.engine.reducer import ReducerLogic

    return [ReducerLogic(i, plan, snapshot) for i in range(n)]


def _plan(n, reducer=None):
    config = dpa.JobConfig(num_reducers=n, policy="doubling", migrate="state", runtime="local",
                           checkpoint_interval_s=0)
    plan, _ = build_plan(normalize_source(pa.table({"k": [1]}), 10), "k", reducer or dpa.Count(), None, config)
    return plan


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5)), min_size=1, max_size=8),
       st.integers(0, 2 ** 16))
def test_after_every_hand_off_each_key_is_on_its_owner_only(changes, seed):
    """Random token moves: after each snapshot and the hand-offs it causes, no key is on
    two reducers, each sits on its owner, and no count is lost."""
    n = 4
    plan = _plan(n)
    counts = [4] * n
    ring = HashRing(counts)
    reducers = _reducers(n, ring.snapshot(), plan)
    rng = np.random.default_rng(seed)
    hashes = rng.integers(0, 2 ** 32, 300, dtype=np.uint64).astype(np.uint32)
    keys = np.arange(300)
    total = collections.Counter()
    for step, (node, tokens) in enumerate(changes):
        # some records arrive, routed by the current ring, and are absorbed
        pick = rng.integers(0, 300, 200)
        batch = pa.table({"k": keys[pick], HASH_COL: pa.array(hashes[pick], pa.uint32())})
        owners = ring.snapshot().lookup_batch(hashes[pick])
        for r, red in enumerate(reducers):
            part = batch.filter(pa.array(owners == r))
            red.enqueue(part, version=ring.snapshot().version)
            while (chunk := red.take_chunk()) is not None:
                assert not chunk.forwards
                red.apply(chunk)
        total.update(keys[pick].tolist())
        counts[node] = tokens
        if sum(counts) == 0:
            counts[node] = 1
        ring = HashRing(counts)
        ring._version = step + 1  # each change is a new version
        snapshot = ring.snapshot()
        for red in reducers:
            red.on_snapshot(snapshot)
        for red in reducers:
            for move in red.state_moves():
                assert move.dest != red.reducer_id
                reducers[move.dest].accept_state(move)
        seen: dict[int, int] = {}
        for r, red in enumerate(reducers):
            table = red.state.export()
            if table is None:
                continue
            for k, h in zip(table["k"].to_pylist(), table[HASH_COL].to_pylist()):
                assert k not in seen, f"key {k} on reducers {seen[k]} and {r}"
                seen[k] = r
                assert snapshot.lookup_hash(h) == r
    got = collections.Counter()
    for red in reducers:
        table = red.finalize()
        if table is not None:
            got.update(dict(zip(table["k"].to_pylist(), table["count"].to_pylist())))
    assert got == total


def test_merged_hashes_counts_keys_found_on_several_reducers():
    from dpa.aggregates.state import merged_hashes

    parts = [np.array([1, 2, 3], np.uint32), np.array([3, 4], np.uint32), np.array([3, 2, 9], np.uint32)]
    assert merged_hashes(parts) == 2  # 2 (twice) and 3 (three times)
    assert merged_hashes(parts[:1]) == 0 and merged_hashes([]) == 0
    assert merged_hashes([np.array([5, 5], np.uint32), np.array([6], np.uint32)]) == 0  # one part: no merge


def _finalized_counts(reducers, hashes, owner_ring=None) -> collections.Counter:
    """The reducers' final counts (key k's hash is ``hashes[k]``), checking that no key comes
    out of two reducers and, given ``owner_ring``, that each comes out of its owner under it."""
    got: collections.Counter = collections.Counter()
    where: dict[int, int] = {}
    for r, red in enumerate(reducers):
        table = red.finalize()
        if table is None:
            continue
        for k, c in zip(table["k"].to_pylist(), table["count"].to_pylist()):
            assert k not in where, f"key {k} on reducers {where[k]} and {r}"
            where[k], got[k] = r, c
            if owner_ring is not None:
                assert owner_ring.lookup_hash(int(hashes[k])) == r
    return got


@pytest.mark.parametrize("columnar", [True, False], ids=["columnar", "user-defined"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5)), min_size=1, max_size=6),
       st.integers(0, 2 ** 16))
def test_moves_that_arrive_late_still_end_on_the_owner(columnar, tally, changes, seed):
    """As on Ray: each reducer adopts the ring versions on its own time, moves arrive in any
    order and late (a move made under an older ring than the receiver's, after the
    receiver's sweep of its ring), and records keep arriving at whoever owns their key
    under its own ring. In the end each key is on its final owner only, nothing lost."""
    n = 4
    plan = _plan(n, dpa.Count() if columnar else tally(name="count"))
    counts = [4] * n
    versions = [HashRing(counts).snapshot()]
    for step, (node, tokens) in enumerate(changes):
        counts[node] = tokens
        if sum(counts) == 0:
            counts[node] = 1
        ring = HashRing(counts)
        ring._version = step + 1
        versions.append(ring.snapshot())
    reducers = _reducers(n, versions[0], plan)
    at = [0] * n  # each reducer's version
    rng = np.random.default_rng(seed)
    hashes = rng.integers(0, 2 ** 32, 300, dtype=np.uint64).astype(np.uint32)
    pending: list = []  # moves in flight
    total = collections.Counter()
    while any(v < len(versions) - 1 for v in at) or pending:
        event = rng.integers(0, 3)
        if event == 0 and pending:  # a move arrives (any of those in flight)
            move = pending.pop(int(rng.integers(0, len(pending))))
            pending.extend(reducers[move.dest].accept_state(move))
        elif event == 1 and any(v < len(versions) - 1 for v in at):  # a reducer adopts its next version
            r = int(rng.choice([i for i in range(n) if at[i] < len(versions) - 1]))
            at[r] += 1
            assert not reducers[r].on_snapshot(versions[at[r]])  # (nothing queued)
            pending.extend(reducers[r].state_moves())
        else:  # records arrive at a reducer, for keys it owns under its ring
            r = int(rng.integers(0, n))
            pick = rng.integers(0, 300, 50)
            owners = versions[at[r]].lookup_batch(hashes[pick])
            pick = pick[owners == r]
            if not len(pick):
                continue
            red = reducers[r]
            red.enqueue(pa.table({"k": pick, HASH_COL: pa.array(hashes[pick], pa.uint32())}),
                        version=versions[at[r]].version)
            while (chunk := red.take_chunk()) is not None:
                assert not chunk.forwards
                red.apply(chunk)
            total.update(pick.tolist())
    assert _finalized_counts(reducers, hashes, versions[-1]) == total



@pytest.mark.parametrize("checkpoint", [False, True])
def test_a_late_move_is_passed_on_at_once_or_after_a_checkpoint(checkpoint):
    """A move made under an older ring than the receiver's, arriving after the receiver's
    sweep: the keys the receiver does not own go on to their owner at once; while a
    checkpoint holds forwards (no move may cross it) they are merged, and leave at the
    next sweep once it is over."""
    from dpa.engine.instructions import StateMove

    plan = _plan(2)
    ring = HashRing([4, 0])  # version 1: reducer 0 owns every key
    ring._version = 1
    sender, receiver = _reducers(2, HashRing([4, 4]).snapshot(), plan)
    hashes = np.arange(1, 2 ** 32, 2 ** 26, dtype=np.uint64).astype(np.uint32)
    sender.enqueue(pa.table({"k": np.arange(len(hashes)), HASH_COL: pa.array(hashes, pa.uint32())}))
    sender.apply(sender.take_chunk())
    state = sender.state.export()
    receiver.on_snapshot(ring.snapshot())
    assert receiver.state_moves() == []  # swept version 1 (it holds nothing)
    late = StateMove(1, state, -1, state.num_rows, 0)  # made under version 0
    if checkpoint:
        receiver.prepare_checkpoint(0)
        assert receiver.accept_state(late) == []
        receiver.release_held()
        onward = receiver.state_moves()
    else:
        onward = receiver.accept_state(late)
    assert [(m.dest, m.keys, m.version) for m in onward] == [(0, state.num_rows, 1)]
    assert receiver.state.export() is None or receiver.state.export().num_rows == 0


@pytest.mark.parametrize("migrate,end", [("records", "merge"), ("records", "handover"), ("state", None)])
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 6)), min_size=1, max_size=5),
       st.integers(0, 2 ** 16))
def test_any_interleaving_of_pushes_forwards_rings_and_moves_is_exact(migrate, end, changes, seed):
    """The reducers' logic under Ray's asynchrony, played out by a random scheduler: mappers
    push under whichever ring they hold, each message (push, forward, state move) arrives
    whenever, a reducer adopts the newest ring when a push routed under it arrives (as the
    actor does) or on its own time, and steps whenever. The end is the coordinator's: the
    final ring everywhere, every message delivered, every queue drained, then the partitioned
    final merge or the hand-over under the final ring (``records``: its moves arrive in any
    order; each key must sit on its final owner alone, and the merged keys are those whose
    partial states sat on several reducers) or none (``state``: each key must sit on its
    final owner alone)."""
    from dpa.engine.reducer import ReducerLogic

    n = 4
    config = dpa.JobConfig(num_reducers=n, policy="doubling", migrate=migrate, runtime="local",
                           checkpoint_interval_s=0)
    plan, _ = build_plan(normalize_source(pa.table({"k": [1]}), 10), "k", dpa.Count(), None, config)
    counts = [4] * n
    versions = [HashRing(counts).snapshot()]
    for step, (node, tokens) in enumerate(changes):
        counts[node] = tokens
        ring = HashRing(counts)
        ring._version = step + 1
        versions.append(ring.snapshot())
    reducers = [ReducerLogic(i, plan, versions[0]) for i in range(n)]
    at = [0] * n
    published = 0  # the balancer's newest ring
    rng = np.random.default_rng(seed)
    hashes = rng.integers(0, 2 ** 32, 200, dtype=np.uint64).astype(np.uint32)
    flight: list = []  # ("push" | "forward" | "move", dest, payload, version)
    total = collections.Counter()

    def adopt(r: int, v: int) -> None:
        red = reducers[r]
        if v <= at[r]:
            return
        at[r] = v
        send(r, red.on_snapshot(versions[v]))
        flight.extend(("move", m.dest, m, None) for m in red.state_moves())

    def send(r: int, forwards) -> None:
        flight.extend(("forward", f.dest, f.batch, at[r]) for f in forwards)

    def step(r: int) -> None:
        red = reducers[r]
        chunk = red.take_chunk()
        if chunk is None:
            return
        send(r, chunk.forwards)
        red.apply(chunk)
        flight.extend(("move", m.dest, m, None) for m in red.state_moves())

    def deliver(i: int) -> None:
        kind, dest, payload, version = flight.pop(i)
        red = reducers[dest]
        if kind == "move":
            flight.extend(("move", m.dest, m, None) for m in red.accept_state(payload))
            return
        if version > at[dest]:  # (the actor fetches the balancer's ring first)
            adopt(dest, published)
        send(dest, red.enqueue(payload, forwarded=kind == "forward", version=version))

    for _ in range(400):
        event = rng.integers(0, 6)
        if event == 0 and published < len(versions) - 1:
            published += 1
        elif event == 1:  # a mapper pushes 20 records under a ring it holds
            v = int(rng.integers(max(0, published - 1), published + 1))
            pick = rng.integers(0, len(hashes), 20)
            total.update(pick.tolist())
            batch = pa.table({"k": pick, HASH_COL: pa.array(hashes[pick], pa.uint32())})
            owners = versions[v].lookup_batch(hashes[pick])
            for r in range(n):
                part = batch.filter(pa.array(owners == r))
                if part.num_rows:
                    flight.append(("push", r, part, v))
        elif event == 2:
            r = int(rng.integers(0, n))
            adopt(r, published)
        elif event == 3:
            step(int(rng.integers(0, n)))
        elif flight:
            deliver(int(rng.integers(0, len(flight))))
    # The end: the final ring everywhere, then drain (messages and queues, any order).
    published = len(versions) - 1
    for r in range(n):
        adopt(r, published)
    while flight or any(red.queue for red in reducers):
        if flight and rng.integers(0, 2):
            deliver(int(rng.integers(0, len(flight))))
        else:
            step(int(rng.integers(0, n)))
    assert sum(red.processed for red in reducers) == total.total()
    from dpa.aggregates.state import merged_hashes

    shared = merged_hashes([red.state.hashes() for red in reducers])
    if end == "merge":
        parts = [red.partition_state() for red in reducers]
        for src in range(n):
            for dest in range(n):
                if parts[src][dest] is not None:
                    reducers[dest].merge_partial(parts[src][dest])
    elif end == "handover":
        from dpa.engine import handover
        from dpa.engine.output import handover_by_slot

        moves = []
        for red in reducers:
            red.handover = True
            moves += handover.take(red)
        assert all(m.final for m in moves)
        rng.shuffle(moves)
        for slot, partials in handover_by_slot(moves).items():
            handover.merge(reducers[slot], partials)
    assert _finalized_counts(reducers, hashes, None if end == "merge" else versions[-1]) == total
    if end is not None:
        assert sum(red.merged_keys for red in reducers) == shared
