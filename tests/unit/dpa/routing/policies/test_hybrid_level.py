"""``hybrid``'s levelling of the ring on the records each reducer holds (:mod:`dpa.routing.policies.hybrid.level`)."""

from __future__ import annotations

import numpy as np
import pytest

from dpa.errors import ConfigError
from dpa.routing.policies.hybrid.level import plan_trims
from dpa.routing.policies.hybrid.policy import HybridPolicy
from dpa.routing.policies.hybrid.settings import HybridSettings
from dpa.routing.policies.ring.policy import DPAPolicy, RingSettings
from dpa.routing.policy import JobShape

RATE = 0.01  # seconds of work per record in the reports below


def _report(planner, held, queued, version=0):
    """Every reducer reports what it holds, its queue and its backlog (``RATE`` per record);
    each counts its holding as arrivals once."""
    for r, (h, q) in enumerate(zip(held, queued)):
        planner.observe_held(r, int(h))
        planner.observe(r, int(q), version)
        planner.observe_work(r, q * RATE, version)


def _count_arrivals(planner, held):
    for r, h in enumerate(held):
        planner.observe_keys(r, np.zeros(0, np.uint32), np.zeros(0, np.int64), int(h))


def _trims(ring, final, movable, left):
    mean = float(np.mean(final))
    return plan_trims(ring, final, movable, left, mean, 0.05 * mean, 0.02 * mean)


def test_plan_trims_lowers_the_busiest_and_keeps_everyone_below_it():
    ring = HybridPolicy().ring(8)
    final = np.array([1300.0] + [1000.0] * 7)
    plan = _trims(ring, final, final * 0.8, [4] * 8)
    assert plan.trimmed and plan.trimmed[0][0] == 0
    assert plan.token_counts[0] < 16 and plan.token_counts[1:] == ring.token_counts[1:]  # only its tokens go
    assert plan.before == pytest.approx(1300 / (sum(final) / 8))
    assert plan.after < plan.before - 0.02


def test_plan_trims_keeps_an_even_ring_and_a_reducer_without_trims_left():
    ring = HybridPolicy().ring(8)
    even = np.full(8, 1000.0)
    assert _trims(ring, even, even, [4] * 8).trimmed == ()
    final = np.array([1300.0] + [1000.0] * 7)
    assert _trims(ring, final, final, [0] + [4] * 7).trimmed == ()
    assert _trims(ring, final, np.zeros(8), [4] * 8).trimmed == ()  # nothing queued: nothing moves


def test_plan_trims_waits_for_a_loaded_successor():
    """A reducer whose removed arcs would all go to a reducer about as loaded is trimmed
    only after that one (the run starts again from the most loaded after each trim)."""
    ring = HybridPolicy().ring(8)
    snap = ring.snapshot()
    last = int(np.flatnonzero((snap.positions == ring.token_positions(0, 16)[-1]) & (snap.owners == 0))[0])
    heir = int(snap.owners[(last + 1) % len(snap.owners)])  # who gets the arc of reducer 0's last token
    final = np.full(8, 1000.0)
    final[0], final[heir] = 1300.0, 1290.0
    plan = _trims(ring, final, final, [4] * 8)
    order = [r for r, _ in plan.trimmed]
    assert heir in order and (0 not in order or order.index(heir) < order.index(0))


def test_planner_trims_when_every_queue_is_full_but_holdings_are_uneven():
    planner = HybridPolicy().make_planner(16)
    held = [1400] + [1000] * 15
    queued = [500] * 16  # every queue full: the two longest are equal, the ring's rule cannot fire
    _count_arrivals(planner, held)
    _report(planner, held, queued)
    decisions = planner.check(1.0)
    assert decisions and {d.event.action for d in decisions} == {"trim"}
    assert decisions[0].event.reducer == 0
    snap = decisions[-1].snapshot
    assert snap.version == 1 and snap.ring.token_counts[0] < 16
    assert all(d.snapshot is None for d in decisions[:-1])  # one publication
    assert planner.check(1.05) == []  # nobody reported under it yet


def test_planner_leaves_even_holdings_alone():
    planner = HybridPolicy().make_planner(16)
    held = [1030, 1000, 990, 1010] * 4  # within level_tau (5%) of the mean
    _count_arrivals(planner, held)
    for t in range(10):
        _report(planner, held, [500] * 16)
        assert planner.check(1.0 + 0.05 * t) == []


def test_a_push_seen_at_one_check_only_trims_nothing():
    planner = HybridPolicy().make_planner(16)
    held = [1400] + [1000] * 15
    _count_arrivals(planner, held)
    _count_arrivals(planner, [0] * 15 + [400])  # reducer 15 counted 400 more and forwarded them: in flight
    _report(planner, held, [500] * 16)
    assert planner.check(1.0) == []  # 400 records still in flight: wait for the next check
    _report(planner, held, [500] * 16)
    assert planner.check(1.05)


def test_the_paper_rings_keep_their_rule():
    shape = JobShape(num_reducers=16)
    planner = DPAPolicy(RingSettings(method="halving"), shape).make_planner(16)
    held = [1400] + [1000] * 15
    _count_arrivals(planner, held)
    _report(planner, held, [500] * 16)
    assert planner.check(1.0) == []
    off = HybridPolicy(HybridSettings(level_rounds=0)).make_planner(16)
    _count_arrivals(off, held)
    _report(off, held, [500] * 16)
    assert off.check(1.0) == []


def test_a_steady_run_converges_without_flapping():
    """Keys of random sizes on a ring of 32 reducers, every record queued: each check sees
    what each reducer holds under the published ring. The trims lower the busiest, stop
    once the holdings are level and never come back."""
    rng = np.random.default_rng(3)
    hashes = rng.integers(0, 1 << 32, 3200, dtype=np.uint64).astype(np.uint32)
    counts = rng.poisson(10, 3200) + 1
    R = 32
    planner = HybridPolicy().make_planner(R)
    snap = planner.snapshot.ring if hasattr(planner.snapshot, "ring") else planner.snapshot

    def holdings(ring_snapshot):
        return np.bincount(ring_snapshot.lookup_batch(hashes), weights=counts, minlength=R)

    held = holdings(snap)
    _count_arrivals(planner, held)
    first = held.max() / held.mean()
    assert first > 1.15
    published, version = [], 0
    for step in range(40):
        _report(planner, held, held, version)
        decisions = planner.check(1.0 + 0.05 * step)
        if decisions:
            snap = decisions[-1].snapshot.ring
            version = decisions[-1].snapshot.version
            held = holdings(snap)  # the trimmed reducers forwarded the records of the keys they lost
            published.append(step)
    assert 1 <= len(published) <= 6
    assert published[-1] < 30  # quiet for the last ten checks at least
    assert held.max() / held.mean() < min(first - 0.1, 1.12)
    assert max(planner.trims) <= planner.settings.level_rounds


def test_bad_level_options_are_config_errors():
    with pytest.raises(ConfigError, match="level_tau"):
        HybridSettings(level_tau=-0.1)
    with pytest.raises(ConfigError, match="level_rounds"):
        HybridSettings(level_rounds=-1)


def test_an_elastic_job_is_not_levelled():
    # reducers that joined later hold less for it: what they hold is not comparable
    planner = HybridPolicy(HybridSettings(), JobShape(num_reducers=16, elastic=True)).make_planner(16)
    held = [1400] + [1000] * 15
    _count_arrivals(planner, held)
    _report(planner, held, [500] * 16)
    assert planner.check(1.0) == []
