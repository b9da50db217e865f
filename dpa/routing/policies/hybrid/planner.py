"""The ``hybrid`` policy's planner: the DPA ring's straggler rule for the tail, the
hot-key rule that splits keys holding a large share of the records by planned shares,
and, with no hot key, the levelling of the ring on the records each reducer holds
(:mod:`dpa.routing.policies.hybrid.level`).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from dpa.routing.policies.hybrid.level import plan_trims
from dpa.routing.policies.hybrid.settings import HybridSettings
from dpa.routing.policies.hybrid.shares import fill_array, fill_capped
from dpa.routing.policies.hybrid.snapshot import HybridSnapshot
from dpa.routing.policies.ring.lookahead import KeyLoads, arc_shares
from dpa.routing.policies.ring.policy import DPAPlanner, RingPolicy
from dpa.routing.policy import Decision, RebalanceEvent
from dpa.routing.ring import RingSnapshot
from dpa.routing.sketches import SpaceSaving

logger = logging.getLogger(__name__)


#: Fewest of a mapper's forecast keys (most frequent first) the hot-key rule keeps: at
#: any width it keeps at least these, and beyond them every key that holds half the hot
#: threshold (``theta / 2``) of the forecast's records, the lower threshold a hot key stays
#: hot at (:meth:`HybridPlanner.forecast_keys`). A key below that share in every mapper's
#: forecast is below it in their sum, so the keys left out could not make the forecast
#: call a key hot; they count as tail. At ``R`` reducers at most ``16 R`` keys pass.
FORECAST_KEYS = 64


#: Least predicted gain of a levelling (records above the bound) worth a ring change, in
#: mean shares of the records (:func:`~dpa.routing.policies.hybrid.level.plan_trims`).
LEVEL_MARGIN = 0.02


class HybridPlanner(DPAPlanner):
    """Hot-key detection and splitting on top of the DPA ring rule (see the module docstring).

    Elastic slots (:meth:`scale_out`, :meth:`scale_in`, see :class:`DPAPlanner` for the
    ring): the tail records counted per reducer follow the arcs of the ring that change
    hands (a reducer that loses a fraction of its hash space is assumed to lose that
    fraction of its tail), ``theta`` is recomputed for the new number of active reducers,
    and a retired slot leaves every hot key's candidates: the others' shares are scaled
    up to sum to 1, and a key left without candidates is kept whole by its new ring
    owner. The snapshot published hands over no queued records.

    Args:
        policy: The :class:`~dpa.routing.policies.hybrid.policy.HybridPolicy` it plans for
            (its settings, the ring it starts from and the resolved gaps).
        num_reducers: Reducers, or reducer slots of an elastic job.
    """

    def __init__(self, policy: RingPolicy, num_reducers: int) -> None:
        s = policy.settings
        if not isinstance(s, HybridSettings):
            raise TypeError(f"HybridPlanner plans for a policy built from HybridSettings, got {s!r}")
        super().__init__(s.method, s.tau, s.max_rounds, policy.ring(num_reducers), s.patience,
                         policy.min_gap, s.balance_on, policy.min_gap_s, s.lookahead)
        self.policy = policy
        self.settings: HybridSettings = s
        self.theta = self.threshold(self.num_active)
        self.sketch = SpaceSaving(s.capacity)
        self.tail = np.zeros(num_reducers)  # records of tail keys that arrived at each reducer
        self.hot: dict[int, list[int]] = {}  # hot key -> candidates (home first)
        self.shares: dict[int, np.ndarray] = {}  # hot key -> share of each candidate
        self.held = np.zeros(num_reducers)  # records processed or queued at each reducer
        self._shares: dict[int, np.ndarray] = {}  # the last plan's shares
        # Counts at the last publication: what arrives until the next one is expected to
        # look like what arrived since (the "future" the shares are planned for).
        self._base_counts: dict[int, int] = {}
        self._base_tail = np.zeros(num_reducers)
        self._version = 0
        self._moved_at: np.ndarray | None = None  # holdings when the last hand-over was planned
        self._last_excess: np.ndarray | None = None  # each reducer's excess at the previous check
        self._snapshot = policy.initial_snapshot(num_reducers)
        # The mappers' forecast (observe_forecast): key -> records announced, and their total.
        self.forecast: dict[int, int] = {}
        self.forecast_n = 0
        self.trims = [0] * num_reducers  # trims each reducer got (level_rounds)
        self._level_streak = 0  # consecutive fresh checks that saw an uneven holding
        self._based_at: float | None = None  # when _base_counts were taken (a publication)
        self._now = 0.0  # the time of the check being made

    def threshold(self, num_reducers: int) -> float:
        """``theta`` for ``R`` (active) reducers (default ``1 / (8 R)``)."""
        theta = self.settings.theta
        return float(theta) if theta is not None else 1.0 / (8 * num_reducers)

    def resume(self, snapshot: Any) -> bool:
        """Continues from a state it published: the ring, the hot keys, their candidates
        and shares (the key counts start afresh: a key stays hot while it is counted so)."""
        if not isinstance(snapshot, HybridSnapshot) or not super().resume(snapshot.ring):
            return False
        self.hot, self.shares = {}, {}
        for h, cands, cumw in zip(snapshot.hot.tolist(), snapshot.cands, snapshot.cumw):
            width = int((cands >= 0).sum())
            self.hot[h] = cands[:width].tolist()
            self.shares[h] = np.diff(np.concatenate([[0.0], cumw[:width]]))
        self._shares = dict(self.shares)
        self._version = snapshot.version
        self._snapshot = snapshot
        self.theta = self.threshold(self.num_active)
        return True

    def observe_keys(self, reducer: int, hashes: np.ndarray, counts: np.ndarray, total: int) -> None:
        self.sketch.update(hashes, counts, total=int(total))
        hot = np.fromiter((h in self.hot for h in hashes.tolist()), dtype=bool, count=len(hashes))
        self.tail[reducer] += int(total) - int(np.asarray(counts)[hot].sum())

    def observe_held(self, reducer: int, held: int) -> None:
        self.held[reducer] = held

    def forecast_keys(self, counts: np.ndarray, total: int) -> int:
        """How many of a forecast's keys (``counts``, most frequent first, of ``total``
        records) the hot-key rule keeps (see :data:`FORECAST_KEYS`)."""
        counts = np.asarray(counts)
        passing = int(np.count_nonzero(counts >= self.theta * int(total) / 2))
        return min(len(counts), max(FORECAST_KEYS, passing))

    def observe_forecast(self, mapper: int, hashes: np.ndarray, counts: np.ndarray, total: int) -> None:
        keep = self.forecast_keys(counts, total)  # (most frequent first; the rest is tail to the hot-key rule)
        for h, c in zip(np.asarray(hashes)[:keep].tolist(), np.asarray(counts)[:keep].tolist()):
            self.forecast[h] = self.forecast.get(h, 0) + int(c)
        self.forecast_n += int(total)

    def _forecast_weight(self) -> float:
        """How much the mappers' forecast still counts: fully before the reducers counted
        any record, not at all once they counted as many as it announced (it fades as
        the sketch fills)."""
        if not self.forecast_n:
            return 0.0
        return max(0.0, 1.0 - self.sketch.n / self.forecast_n)

    def _forecasting(self) -> bool:
        """Whether the forecast still names a key above the hot threshold."""
        w = self._forecast_weight()
        if w <= 0.0 or not self.forecast:
            return False
        n = self.sketch.n + w * self.forecast_n
        return max(self.forecast.values()) * w >= self.theta * n

    def key_loads(self) -> KeyLoads:
        """The ring lookahead's estimate, hot keys as loads no ring round moves: they are
        split over their candidates by the planned shares."""
        loads = super().key_loads()  # hot keys are named: they hold far more than a named key's share
        kept = np.fromiter((h not in self.hot for h in loads.hashes.tolist()), dtype=bool, count=len(loads.hashes))
        fixed = np.zeros(self.ring.num_reducers)
        for h, cands in self.hot.items():
            fixed[cands] += self.sketch.estimate(h) * self.shares.get(h, np.full(len(cands), 1.0 / len(cands)))
        return KeyLoads(loads.hashes[kept], loads.counts[kept], loads.tail, fixed)

    def _hot_set(self) -> dict[int, list[int]]:
        """Hot keys (threshold with hysteresis); a new one starts at its ring owner.

        Counts are the sketch's plus, while it fades, the mappers' forecast."""
        N = self.sketch.n
        hashes, counts = self.sketch.top()
        w = self._forecast_weight()
        if w > 0.0 and self.forecast:
            # The sketch's counts plus the weighted forecast, per hash (the sketch's count
            # first, as ``count + w * forecast``); only keys that may pass the lower
            # threshold are sorted (the sketch monitors thousands, a few are hot).
            size = len(self.forecast)
            named = np.concatenate([hashes, np.fromiter(self.forecast.keys(), dtype=np.uint32, count=size)])
            weighted = w * np.fromiter(self.forecast.values(), dtype=np.float64, count=size)
            hashes, slot = np.unique(named, return_inverse=True)
            merged = np.zeros(len(hashes))
            np.add.at(merged, slot, np.concatenate([counts.astype(np.float64), weighted]))
            N = N + w * self.forecast_n
            keep = merged >= self.theta * N / 2
            hashes, merged = hashes[keep], merged[keep]
            order = np.lexsort((hashes, -merged))  # most frequent first, ties by hash
            hashes, counts = hashes[order], merged[order]
        out: dict[int, list[int]] = {}
        for h, c in zip(hashes.tolist(), counts.tolist()):  # most frequent first
            if c < self.theta * N / 2:
                break  # below every key's threshold, and so are all that follow
            was = self.hot.get(h)
            limit = self.theta * N / 2 if was is not None else self.theta * N
            if c >= limit and c >= self.settings.min_count:
                out[h] = list(was) if was is not None else [int(self.ring.lookup_batch(np.array([h], np.uint32))[0])]
        return out

    def plan(self, hot: dict[int, list[int]]) -> dict[int, list[int]]:
        """Grows hot keys' candidate lists until the expected loads are balanced.

        The expected load of a reducer is its tail records plus, for each hot key it is a
        candidate of, the key's count divided by the number of candidates. While the most
        loaded reducer is above ``(1 + slack)`` times the mean, the hot key contributing
        most to it gains the least loaded reducer it does not have yet; a key has at least
        ``min_width`` candidates and at most ``R``. Only active slots count: ``R`` is
        their number, the mean is over them and keys grow only to them.
        """
        active = self._active
        slots = np.flatnonzero(active).tolist()
        R = len(slots)
        everyone = R == self.ring.num_reducers
        w = self._forecast_weight()
        counts = {h: self.sketch.estimate(h) + w * self.forecast.get(h, 0) for h in hot}
        tail = self._tail_after(hot)
        if w > 0.0:  # the forecast's tail, spread over the ring's arcs
            rest = self.forecast_n - sum(self.forecast.get(h, 0) for h in hot)
            tail = tail + w * max(0.0, rest) * arc_shares(self.ring.snapshot())
        load = tail.copy()
        for h, cands in hot.items():
            load[cands] += counts[h] / len(cands)
        # (each step is O(R + keys of one reducer) in numpy: a plan at a thousand reducers
        # grows hundreds of thousands of candidates)
        closed = ~active  # slots no key may grow to
        names = list(hot)  # key index -> hash
        count = np.array([counts[h] for h in names], dtype=np.float64)
        width = np.array([len(hot[h]) for h in names], dtype=np.int64)
        named = np.array(names, dtype=np.int64)
        at_of = [np.array(hot[h], dtype=np.int64) for h in names]
        keys_of: dict[int, list[int]] = {}  # reducer -> the hot keys (indices) it is a candidate of
        for i, h in enumerate(names):
            for r in hot[h]:
                keys_of.setdefault(r, []).append(i)

        def grow(i: int) -> None:
            h = names[i]
            at = at_of[i]
            c = counts[h]
            load[at] -= c / len(at)
            # the least loaded slot the key does not have yet, the lowest on ties
            blocked = closed.copy()
            blocked[at] = True
            r = int(np.argmin(np.where(blocked, np.inf, load)))
            hot[h].append(r)
            keys_of.setdefault(r, []).append(i)
            at = at_of[i] = np.append(at, r)
            width[i] = len(at)
            load[at] += c / len(at)

        for i in sorted(range(len(names)), key=lambda k: -counts[names[k]]):
            while len(hot[names[i]]) < min(R, self.settings.min_width):
                grow(i)
        mean = (load.sum() if everyone else load[active].sum()) / R
        for _ in range(len(hot) * R):
            x = int(np.argmax(load)) if everyone else slots[int(np.argmax(load[active]))]
            if load[x] <= mean * (1.0 + self.settings.slack):
                break
            idx = np.array(keys_of.get(x, ()), dtype=np.int64)
            idx = idx[width[idx] < R]
            if not len(idx):
                break
            # the key contributing most to x (the largest hash on ties)
            share = count[idx] / width[idx]
            tied = idx[share == share.max()]
            grow(int(tied[np.argmax(named[tied])]))
        # Shares, for the records still to come, expected to look like those that came
        # since the last publication ("the next interval looks like the last"): reducers
        # start from what they hold (processed or queued) plus that much tail again. A
        # newly hot key's home can still spread the unprocessed part of what it has of the
        # key (its FIFO queue's fraction of what it holds); that part is placed again too.
        # A few rounds of water filling, each key in turn refilling its candidates given
        # the others, level it.
        level = self.held + np.maximum(tail - self._base_tail, 0.0)
        amount: dict[int, float] = {}
        for h, cands in hot.items():
            c = float(counts[h])
            amount[h] = max(1.0, c - self._base_counts.get(h, 0))
            home = cands[0]
            if h not in self.hot and self.held[home] > 0:
                movable = c * min(1.0, self.queue_lengths[home] / self.held[home])
                level[home] -= movable
                amount[h] += movable
        # (a key's candidates are distinct, so updating them at once is updating them in turn)
        levels = np.maximum(level, 0.0)
        budget = self._interval_budget(np.maximum(tail - self._base_tail, 0.0))
        at = {h: np.array(cands) for h, cands in hot.items()}
        parts: dict[int, np.ndarray] = {}
        order = sorted(hot, key=lambda k: (-amount[k], k))
        for _ in range(8):
            for h in order:
                if h in parts:
                    levels[at[h]] -= parts[h]
                    if budget is not None:
                        budget[at[h]] += parts[h]
                if budget is None:
                    parts[h] = fill_array(levels[at[h]], amount[h])
                else:
                    parts[h] = fill_capped(h, hot, at, levels, budget, amount[h], closed)
                    budget[at[h]] -= parts[h]
                levels[at[h]] += parts[h]
        shares: dict[int, np.ndarray] = {}
        for h in order:
            got = parts[h]
            total = got.sum()
            shares[h] = got / total if total > 0 else np.full(len(hot[h]), 1.0 / len(hot[h]))
        self._shares = shares
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("hybrid plan: N=%d tail=%s expected=%s", self.sketch.n, tail.tolist(),
                         [round(x, 1) for x in levels.tolist()])
        return hot

    def _interval_budget(self, tail_inflow: np.ndarray) -> np.ndarray | None:
        """Hot-key records each reducer can take in the stretch the shares are planned
        for, or None when it is not known: before the first publication (the counts so far
        are the whole job's), before the reducers reported their cost per record, or with
        queues bounded in records only.

        The shares are planned for records that arrive as many as since the last
        publication, over as long a stretch (``elapsed``). A reducer takes what it
        processes in that stretch plus the room its queue has left (``queue_time_s`` of
        work minus its backlog), less the tail records expected to reach it
        (``tail_inflow``, as many as since the last publication). Hot-key records planned
        beyond that would fill its queue before the balancer looks again: a full queue
        makes the pushes to it wait, and a mapper's round waits for every reducer it
        pushed to, so one full queue holds up the input.
        """
        bound = float(self.policy.shape.queue_time_s)
        if self._based_at is None or not np.isfinite(bound):
            return None
        known = [(b, q) for b, q, a in zip(self.backlogs, self.queue_lengths, self._active.tolist())
                 if a and b is not None and q > 0]
        if not known:
            return None
        rate = sum(b / q for b, q in known) / len(known)  # seconds per record
        if rate <= 0:
            return None
        elapsed = max(self._now - self._based_at, 0.0)
        backlog = np.array([0.0 if b is None else b for b in self.backlogs])
        seconds = elapsed + np.maximum(bound - backlog, 0.0)
        return np.where(self._active, np.maximum(seconds / rate - tail_inflow, 0.0), 0.0)

    def _shares_moved(self) -> bool:
        """Whether the last plan moved some key's share by more than ``share_step``."""
        step = self.settings.share_step
        return any(h not in self.shares or len(w) != len(self.shares[h])
                   or float(np.abs(w - self.shares[h]).max()) > step for h, w in self._shares.items())

    def _tail_after(self, hot: dict[int, list[int]]) -> np.ndarray:
        """Tail loads if ``hot`` replaced the current hot set.

        A key that becomes hot was counted as tail at its home so far; one that stops
        being hot goes back to the tail of its ring owner (its count so far, estimated).
        """
        tail = self.tail.copy()
        for h, cands in hot.items():
            if h not in self.hot:
                tail[cands[0]] -= self.sketch.estimate(h)
        for h in self.hot:
            if h not in hot:
                tail[int(self.ring.lookup_batch(np.array([h], np.uint32))[0])] += self.sketch.estimate(h)
        return np.maximum(tail, 0.0)

    def _transfers(self, wanted: dict[int, list[int]]) -> np.ndarray | None:
        """Hand-overs of queued hot-key records that level what the reducers hold.

        The ``N`` records that arrived so far should end up evenly spread: a reducer's
        target is ``N // R``, plus one for the ``N % R`` that hold most. A reducer holding
        more than its target hands the excess, up to its queue length, to reducers below
        theirs that it shares a hot key with. Records a reducer holds (processed, being
        processed or queued) do not change by processing them, so these figures are exact
        however stale the report, except for forwarded records still in flight: they are
        counted by no one yet (``N`` minus the holdings), and since any reducer may be
        about to receive them, each receiver's deficit is reduced by that many. A sender's
        holdings already exclude what it sent. Excesses within ``slack`` of the mean (and
        below one record) are left alone.

        Published together with a change of the hot set (``wanted``), records move only
        between candidates of keys that stay hot, and never from or to a reducer whose
        holdings that change alters on its own: the home of a newly hot key (it spreads
        its queue) and that key's candidates, or the candidates of a key that stops being
        hot and its ring owner (its records go back there).

        Elastic jobs level the active slots only (``R`` = their number; records a
        retired slot still holds count as in flight): no record moves to or from an
        inactive slot.

        Returns:
            ``moves`` (see :class:`HybridSnapshot`) or None when nothing should move.
        """
        slots = np.flatnonzero(self._active)
        local = np.full(self.ring.num_reducers, -1, dtype=np.int64)  # slot -> index among the active
        local[slots] = np.arange(len(slots))
        held = np.rint(self.held).astype(np.int64)[slots]
        total = int(self.sketch.n)
        in_flight = total - int(held.sum())
        R = len(held)
        kept = [h for h in wanted if h in self.hot]
        if not kept or in_flight < 0 or total < R:
            self._last_excess = None
            return None
        if self._moved_at is not None and np.array_equal(held, self._moved_at):
            self._last_excess = None
            return None  # the last hand-over moved nothing: nothing movable is left
        order = np.argsort(-held, kind="stable")
        target = np.full(R, total // R, dtype=np.int64)
        target[order[: total % R]] += 1
        excess = np.minimum(held - target, np.asarray(self.queue_lengths, dtype=np.int64)[slots])
        # Only an excess seen at two checks in a row moves (the smaller of the two): the
        # reports of a push that reached some reducers before others show a passing one.
        last, self._last_excess = self._last_excess, excess
        if last is None or len(last) != len(excess):
            return None
        excess = np.minimum(excess, last)
        if excess.max() <= max(0.0, self.settings.slack * total / R):
            return None
        deficit = np.maximum(target - held - in_flight, 0)

        def ix(reducers: list[int] | int) -> np.ndarray:
            i = local[np.atleast_1d(np.asarray(reducers, dtype=np.int64))]
            return i[i >= 0]

        shared = np.zeros((R, R), dtype=bool)
        for h in kept:
            shared[np.ix_(ix(wanted[h]), ix(wanted[h]))] = True
        for h in wanted.keys() - self.hot.keys():
            shared[ix(wanted[h][0]), :] = False
            shared[:, ix(wanted[h])] = False
        for h in self.hot.keys() - wanted.keys():
            shared[ix(self.hot[h]), :] = False
            shared[:, ix(int(self.ring.lookup_batch(np.array([h], np.uint32))[0]))] = False
        moves = np.zeros((R, R), dtype=np.int64)
        for s in order.tolist():
            if excess[s] <= 0:
                continue  # (nothing to hand over: no sort of the receivers, O(R log R) each)
            for d in np.argsort(-deficit, kind="stable").tolist():
                if excess[s] <= 0:
                    break
                if d == s or deficit[d] <= 0 or not shared[s, d]:
                    continue
                n = int(min(excess[s], deficit[d]))
                moves[s, d] += n
                excess[s] -= n
                deficit[d] -= n
        if not moves.any():
            return None
        self._moved_at = held
        if R == self.ring.num_reducers:
            return moves
        out = np.zeros((self.ring.num_reducers, self.ring.num_reducers), dtype=np.int64)
        out[np.ix_(slots, slots)] = moves
        return out

    def _ring_changed(self, moves: np.ndarray | None = None) -> HybridSnapshot:
        self._version += 1
        R = self.ring.num_reducers
        hot = np.array(sorted(self.hot), dtype=np.uint32)
        cands = np.full((len(hot), R), -1, dtype=np.int64)
        cumw = np.ones((len(hot), R))
        for i, h in enumerate(hot.tolist()):
            cands[i, : len(self.hot[h])] = self.hot[h]
            cumw[i, : len(self.hot[h])] = np.cumsum(self.shares[h])
        return HybridSnapshot(self.ring.snapshot(), hot, cands, cumw, self._version, moves)

    def _slot_changed(self, slot: int, before: RingSnapshot) -> None:
        """Tail counts follow the arcs that changed hands; a retired slot leaves the hot
        keys' candidates (see the class docstring)."""
        after = self.ring.snapshot()
        self.trims[slot] = 0
        if self._active[slot]:  # scale out: every reducer hands the slot the part of its tail its arcs held
            lost = self.arc_moved(before, after)
            for tail in (self.tail, self._base_tail):
                moved = tail * lost
                moved[slot] = 0.0
                tail -= moved
                tail[slot] = moved.sum()
        else:  # scale in: the slot's tail goes where its arcs went
            gain = np.maximum(arc_shares(after) - arc_shares(before), 0.0)
            gain[slot] = 0.0
            for tail in (self.tail, self._base_tail):
                if gain.sum() > 0:
                    tail += tail[slot] * gain / gain.sum()
                tail[slot] = 0.0
            for h in [h for h, cands in self.hot.items() if slot in cands]:
                cands = self.hot[h]
                keep = [j for j, r in enumerate(cands) if r != slot]
                if keep:
                    w = self.shares[h][keep]
                    self.hot[h] = [cands[j] for j in keep]
                    self.shares[h] = w / w.sum() if w.sum() > 0 else np.full(len(keep), 1.0 / len(keep))
                else:
                    self.hot[h] = [int(after.lookup_batch(np.array([h], np.uint32))[0])]
                    self.shares[h] = np.ones(1)
            self._shares = dict(self.shares)
        self.theta = self.threshold(self.num_active)
        self._moved_at = None

    def _busiest(self, seen: tuple[int, ...]) -> int:
        """The active slot with the longest queue (the lowest on ties)."""
        slots = np.flatnonzero(self._active)
        return int(np.argmax(seen)) if len(slots) == len(seen) else int(slots[int(np.argmax(np.asarray(seen)[slots]))])

    def check(self, now: float) -> list[Decision]:
        if not self._fresh():
            return []
        loads, gap = self.loads()
        forecasting = self._forecasting()
        if max(loads) <= gap and not self.hot and not forecasting:
            return []  # no backlog worth moving (a cheap job): splitting cannot pay off
        self._now = now
        wanted = self.plan(self._hot_set()) if self.sketch.n or forecasting else {}
        # New shares, a new hot set and hand-overs of queued records go out together.
        moves = self._transfers(wanted)
        changed = wanted != self.hot
        if changed or self._shares_moved() or moves is not None:
            self.tail = self._tail_after(wanted)
            self.hot = wanted
            self.shares = self._shares
            self._base_counts = {h: self.sketch.estimate(h) for h in wanted}
            self._based_at = now
            self._base_tail = self.tail.copy()
            self._snapshot = self._ring_changed(moves)
            seen = tuple(self.queue_lengths)
            action = "split" if changed or moves is None else "handover"
            event = RebalanceEvent(now, self._busiest(seen), action, seen, self.ring.token_counts,
                                   self._snapshot.version)
            logger.info("hybrid: %d hot keys, widths %s, %d queued records handed over (v%d)", len(self.hot),
                        sorted(len(c) for c in self.hot.values()), 0 if moves is None else int(moves.sum()),
                        self._snapshot.version)
            return [Decision(self._snapshot, event)]
        return super().check(now) or self._level(now)

    def final_loads(self) -> tuple[np.ndarray, np.ndarray, float]:
        """What each active reducer is predicted to end with, the part of it that moves with
        its hash space, and the mean over the active reducers (records; 0 for inactive
        slots; see :mod:`dpa.routing.policies.hybrid.level`).

        The records a reducer holds (processed, being processed or queued) are a lower
        bound of what it ends with: pushes made to wait by a full queue are not counted
        yet, and they wait at the busiest reducers. The mean is that of every record
        known: the mappers' forecast announced them, or the reducers counted them. A
        reducer is predicted to end with what it holds or, below the mean, with as many
        of the records not counted yet as bring it to the mean (it may be waiting for
        them): a trim is planned only for reducers that hold more than the mean already,
        and gives no reducer more than it could take with all it may be waiting for.
        Movable: the queued records of tail keys (hot keys are placed by their shares, not
        by the ring), counted as the tail's fraction of what arrived there.
        """
        held = np.where(self._active, self.held, 0.0)
        known = max(float(self.sketch.n), float(self.forecast_n), float(held.sum()))
        mean = known / self.num_active
        waiting = known - float(held.sum())
        final = np.where(self._active, np.maximum(held, np.minimum(mean, held + waiting)), 0.0)
        queued = np.minimum(np.asarray(self.queue_lengths, dtype=np.float64), held)
        tail = np.divide(self.tail, held, out=np.ones_like(held), where=held > 0) if self.hot else 1.0
        return final, queued * np.clip(tail, 0.0, 1.0), mean

    def _level(self, now: float) -> list[Decision]:
        """Trims the tokens of the reducers predicted to end with the most records
        (:mod:`dpa.routing.policies.hybrid.level`; see :class:`HybridSettings`).

        Acts when no key is hot (hot keys are levelled by their shares and hand-overs),
        the job is not elastic (reducers that joined later hold less for it: what they
        hold is not comparable), the most loaded reducer is predicted to end above the
        mean of the active reducers by ``level_tau`` and by ``min_gap_s`` seconds of work
        (on two fresh checks in a row while forwarded records are in flight: a push or a
        trim that reached some reducers before others shows for a moment) and
        :func:`~dpa.routing.policies.hybrid.level.plan_trims` predicts a gain; each
        reducer is trimmed ``level_rounds`` times at most.
        """
        s = self.settings
        if (not s.level_rounds or not s.max_rounds or self.policy.elastic or self.hot or self._forecasting()
                or self.num_active < 2):
            self._level_streak = 0
            return []
        final, movable, mean = self.final_loads()
        known = [(b, q) for b, q, a in zip(self.backlogs, self.queue_lengths, self._active.tolist())
                 if a and b is not None and q > 0]
        rate = sum(b / q for b, q in known) / len(known) if known else 0.0  # seconds per record
        excess = float(final.max()) - mean
        if mean <= 0 or excess <= s.level_tau * mean or excess * rate <= self.min_gap_s:
            self._level_streak = 0
            return []
        self._level_streak += 1
        settled = float(np.where(self._active, self.held, 0.0).sum()) >= self.sketch.n  # nothing in flight
        if self._level_streak < 2 and not settled:
            return []
        left = [s.level_rounds - t if a else 0 for t, a in zip(self.trims, self._active.tolist())]
        plan = plan_trims(self.ring, final, movable, left, mean, s.level_tau * mean, LEVEL_MARGIN * mean)
        if not plan.trimmed:
            return []
        self._level_streak = 0
        seen = tuple(self.queue_lengths)
        steps = []
        for r, tokens in plan.trimmed:
            self.trims[r] += 1
            self.ring.set_tokens(r, tokens)
            steps.append((r, self.ring.token_counts))
        self._snapshot = self._ring_changed()
        version = self._snapshot.version
        events = [RebalanceEvent(now, r, "trim", seen, t, version) for r, t in steps]
        logger.info("hybrid: trimmed %d reducer(s), largest predicted holding %.2f -> %.2f of the mean (v%d)",
                    len(steps), plan.before, plan.after, version)
        return [Decision(None, e) for e in events[:-1]] + [Decision(self._snapshot, events[-1])]


