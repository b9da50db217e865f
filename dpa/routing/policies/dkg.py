"""Dynamic Key Grouping (Dalabasmaz & Can) as a dpa policy, registered as ``dkg``.

DKG extends PKG: a key normally has two consecutive candidate reducers ``i = h % R`` and
``i + 1`` (no second hash function, so the two are always different), and a *hot* key
may scale out to ``i + 2, i + 3, ...`` and back down. Everything happens in the
per-mapper router with local load estimation, as in PKG: the paper's algorithms only use
the loads a source has generated, and its Key Space is a per-source structure.

The paper's algorithms, as implemented here (Algorithm numbers from the paper):

* **Key Space** (section 4.1.2): three spaces of Key Items (occurrence count, last local
  message index). With ``E = expected_keys`` (the paper's example: 100), the Old Space
  holds at most 10% of ``E`` items and the Teenage Space 40%; the Baby Space (50%) is
  unbounded between cycles. A record's key is looked up in Old, then Teenage, then Baby;
  unknown keys enter the Baby Space.
* **Promotion cycles** (Algorithms 1-3): every ``promote_every`` records (the paper's
  15-second cycle) Baby -> Teenage, every ``old_every`` records (the paper's 60 s;
  default ``4 * promote_every``) Teenage -> Old. Both spaces are sorted by decreasing count,
  then Algorithm 3 repeatedly compares the most frequent item of the source space with
  the least frequent item of the destination and swaps them unless the latter is strictly
  more frequent, at most ``|destination|`` times (so promotion is bidirectional: swapped
  out items are demoted to the tail of the source space). Two places where the paper is
  silent: (a) while the destination space is below capacity, the most frequent source
  items simply move in (otherwise an empty space could never fill, since Algorithm 3
  loops over the destination's items); (b) "truncate BS to discard quite new items" is
  read as keeping only the ``50% * E`` most frequent Baby items before promoting (the tail
  holds the keys seen least, typically the newest), which bounds the router's memory.
  When both cycles fall on the same record, Baby -> Teenage runs first.
* **Cycles are counted in records routed by the mapper**, not seconds, so a run is
  deterministic and independent of machine speed. Warm-up (Algorithm 5's ``isWarmUp``,
  15 s in the paper) is ``warmup`` records, by default one promotion cycle.
* **Threshold** (eqs. 3-4): ``L_i = 100 / R`` percent, ``L_s = L_i + sqrt(L_i)``. Loads
  are percentages of the records this mapper has sent so far (``0`` before the first).
* **Most machines per key** (Table 1 of the paper, not given as a formula there): the
  table's values are exactly ``floor(100 / L_s) + 1`` (5 -> 5, 10 -> 8, 20 -> 14,
  50 -> 30, 100 -> 51), capped at ``R``; see :func:`dkg_max_machines`.
* **chooseBestTask** (Algorithm 4 with 5 and 6): the key's ``N`` candidates (2 by
  default; only keys with ``N > 2`` are remembered) are ``i .. i + N - 1 (mod R)``. Find the
  least loaded (first one on ties) and count those below ``L_s``. Scale out if warmed up,
  the minimum load is ``>= L_s``, the key is in the Old Space and ``N`` is below the
  maximum: the candidate ``i + N`` is taken, and ``N`` incremented, only if it is less
  loaded than the current minimum. Otherwise scale down if ``N > 2`` and at least two
  candidates are below ``L_s``: ``N`` is decremented and the choice is made again.

The paper's Key Item also stores "the last time Scale Out is checked", which none of its
algorithms reads; it is omitted.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpa.errors import ConfigError
from dpa.routing.policies.common import BuiltPolicy, check_int_option, least_loaded_of_two
from dpa.routing.policies.hashing import StaticSnapshotMixin
from dpa.routing.policy import JobShape, PolicySettings, Router

__all__ = [
    "DKGPolicy",
    "DKGRouter",
    "DKGSettings",
    "KeySpace",
    "build_dkg",
    "dkg_ideal_load",
    "dkg_max_machines",
    "dkg_threshold",
]


def dkg_ideal_load(num_machines: int) -> float:
    """The ideal load ``L_i = 100 / m`` in percent (paper eq. 3)."""
    return 100.0 / num_machines


def dkg_threshold(num_machines: int) -> float:
    """The scale-out threshold ``L_s = L_i + sqrt(L_i)`` in percent (paper eq. 4)."""
    ideal = dkg_ideal_load(num_machines)
    return ideal + math.sqrt(ideal)


def dkg_max_machines(num_machines: int) -> int:
    """Most reducers one key may use: ``floor(100 / L_s) + 1``, capped at ``m`` (Table 1)."""
    return min(num_machines, math.floor(100.0 / dkg_threshold(num_machines)) + 1)


class KeySpace:
    """The Baby / Teenage / Old spaces of Key Items (paper section 4.1.2).

    Each space maps a key hash to its Key Item ``[count, last]`` (total occurrences, local
    index of the last record with that key). Dicts keep insertion order, which breaks
    ties between equal counts deterministically when a space is sorted.

    Args:
        expected_keys: The administrator's estimate of distinct keys (``>= 1``).
    """

    def __init__(self, expected_keys: int) -> None:
        self.old_capacity = max(1, round(0.1 * expected_keys))
        self.teenage_capacity = max(1, round(0.4 * expected_keys))
        self.baby_capacity = max(1, expected_keys - self.old_capacity - self.teenage_capacity)
        self.old: dict[int, list[int]] = {}
        self.teenage: dict[int, list[int]] = {}
        self.baby: dict[int, list[int]] = {}

    def item(self, h: int) -> list[int] | None:
        """The Key Item of ``h`` (looked up in Old, Teenage, then Baby), or None."""
        item = self.old.get(h)
        if item is None:
            item = self.teenage.get(h)
            if item is None:
                item = self.baby.get(h)
        return item

    def space_of(self, h: int) -> str | None:
        """``"old"``, ``"teenage"``, ``"baby"`` or None."""
        for name in ("old", "teenage", "baby"):
            if h in getattr(self, name):
                return name
        return None

    def observe(self, hashes: np.ndarray, counts: np.ndarray, last: np.ndarray) -> None:
        """Adds occurrences of distinct keys (new keys enter the Baby Space)."""
        old, teen, baby = self.old.get, self.teenage.get, self.baby
        for h, c, t in zip(hashes.tolist(), counts.tolist(), last.tolist(), strict=True):
            item = old(h)
            if item is None:
                item = teen(h)
                if item is None:
                    item = baby.get(h)
                    if item is None:
                        baby[h] = [c, t]
                        continue
            item[0] += c
            item[1] = t

    @staticmethod
    def _sorted(space: dict[int, list[int]]) -> list[int]:
        return sorted(space, key=lambda h: -space[h][0])

    @staticmethod
    def promote(source: dict[int, list[int]], dest: dict[int, list[int]], capacity: int,
                source_order: list[int] | None = None) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
        """Algorithm 3 (promoteToNextSpace) on sorted spaces; returns (new source, new dest).

        Args:
            source: The lower space.
            dest: The higher space.
            capacity: Most items ``dest`` may hold.
            source_order: The source keys already sorted (and possibly truncated).
        """
        items = {**source, **dest}
        ss = deque(source_order if source_order is not None else KeySpace._sorted(source))
        ds = deque(KeySpace._sorted(dest))
        while ss and len(ds) < capacity:  # free room: the most frequent move in
            ds.appendleft(ss.popleft())
        for _ in range(len(ds)):
            if not ss:
                break
            first, last = ss[0], ds[-1]
            if items[last][0] > items[first][0]:
                break  # transition completed
            ds.appendleft(ss.popleft())
            ss.append(ds.pop())
        return {h: items[h] for h in ss}, {h: items[h] for h in ds}

    def promote_to_teenage(self) -> None:
        """Algorithm 1: sort, truncate the Baby Space to its capacity, promote to Teenage."""
        order = self._sorted(self.baby)[: self.baby_capacity]
        self.baby, self.teenage = self.promote(self.baby, self.teenage, self.teenage_capacity, order)

    def promote_to_old(self) -> None:
        """Algorithm 2: sort, promote from Teenage to Old."""
        self.teenage, self.old = self.promote(self.teenage, self.old, self.old_capacity)


class DKGRouter(Router):
    """Per-mapper DKG state: local loads, the Key Space and the widened keys.

    Attributes:
        loads: Records this router has sent to each reducer.
        seen: Records routed so far.
        key_space: The :class:`KeySpace`.
        widths: Key hash -> number of candidate reducers, for keys using more than
            ``width`` (the default) reducers.
        scale_outs: Number of scale-out decisions taken.
        scale_downs: Number of scale-down decisions taken.

    Args:
        settings: The policy's :class:`DKGSettings`.
        num_reducers: ``R``.
    """

    def __init__(self, settings: DKGSettings, num_reducers: int) -> None:
        self.num_reducers = num_reducers
        self.width = min(settings.width, num_reducers)
        self.threshold = dkg_threshold(num_reducers)
        self.max_machines = (
            min(settings.max_machines, num_reducers)
            if settings.max_machines is not None
            else dkg_max_machines(num_reducers)
        )
        self.promote_every = settings.promote_every
        self.old_every = settings.old_every if settings.old_every is not None else 4 * settings.promote_every
        self.warmup = settings.warmup if settings.warmup is not None else settings.promote_every
        self.key_space = KeySpace(settings.expected_keys)
        self.loads = [0] * num_reducers
        self.seen = 0
        self.widths: dict[int, int] = {}
        self.scale_outs = 0
        self.scale_downs = 0

    # -- one record, full algorithm -------------------------------------------------
    def choose(self, h: int, index: int, total: int, warm: bool) -> int:
        """Algorithm 4 (chooseBestTask) for one record; updates the key's width.

        Args:
            h: Key hash.
            index: ``h % R``.
            total: Records this router sent before this one (for load percentages).
            warm: Whether warm-up is over.

        Returns:
            The reducer for the record (the caller adds it to the loads).
        """
        load, R = self.loads, self.num_reducers
        # cl = 100 * load / total < L_s  <=>  load < L_s * total / 100 (all loads are 0% at first)
        limit = self.threshold * total / 100.0 if total else math.inf
        n = self.widths.get(h, self.width)
        while True:
            chosen = index
            best = load[index]
            below = 1 if best < limit else 0
            for j in range(1, n):
                m = index + j
                if m >= R:
                    m -= R
                x = load[m]
                if x < limit:
                    below += 1
                if x < best:
                    best = x
                    chosen = m
            if warm and best >= limit and n < self.max_machines and h in self.key_space.old:
                candidate = (index + n) % R
                if load[candidate] < best:
                    chosen = candidate
                    n += 1
                    self.scale_outs += 1
                break
            if n > self.width and below >= 2:
                n -= 1
                self.scale_downs += 1
                continue
            break
        if n > self.width:
            self.widths[h] = n
        else:
            self.widths.pop(h, None)
        return chosen

    # -- batches --------------------------------------------------------------------
    def _route_chunk(self, hs: np.ndarray, warm: bool) -> np.ndarray:
        R = self.num_reducers
        first = (hs % np.uint32(R)).astype(np.int64)
        second = (first + 1) % R if self.width >= 2 else first
        special_keys = set(self.key_space.old) | set(self.widths)
        load = self.loads
        out: list[int] = []
        append = out.append
        if special_keys:
            special = np.isin(hs, np.fromiter(special_keys, dtype=np.uint32, count=len(special_keys)))
        if not special_keys or not special.any():
            return least_loaded_of_two(first, second, load)
        choose = self.choose
        total = self.seen
        for h, a, b, sp in zip(hs.tolist(), first.tolist(), second.tolist(), special.tolist(), strict=True):
            # a special key chooses among its candidates; any other key takes the less
            # loaded of its two (the first on ties), as least_loaded_of_two does
            w = choose(h, a, total, warm) if sp else (b if load[b] < load[a] else a)
            load[w] += 1
            append(w)
            total += 1
        return np.array(out, dtype=np.int64)

    def _observe(self, hs: np.ndarray) -> None:
        uniq, rev_first, counts = np.unique(hs[::-1], return_index=True, return_counts=True)
        last = self.seen + (len(hs) - 1 - rev_first)
        self.key_space.observe(uniq, counts, last)

    def route(self, hashes: np.ndarray, snapshot: Any) -> np.ndarray:
        hs = np.asarray(hashes).astype(np.uint32, copy=False)
        parts: list[np.ndarray] = []
        pos, n = 0, len(hs)
        while pos < n:
            s = self.seen
            step = min(
                n - pos,
                self.promote_every - s % self.promote_every,
                self.old_every - s % self.old_every,
                self.warmup - s if s < self.warmup else n,
            )
            chunk = hs[pos : pos + step]
            parts.append(self._route_chunk(chunk, s >= self.warmup))
            self._observe(chunk)
            self.seen += step
            pos += step
            if self.seen % self.promote_every == 0:
                self.key_space.promote_to_teenage()
            if self.seen % self.old_every == 0:
                self.key_space.promote_to_old()
        if not parts:
            return np.zeros(0, dtype=np.int64)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


@dataclass(frozen=True)
class DKGSettings(PolicySettings):
    """Settings of ``dkg`` (see the module docstring for the algorithm).

    Args:
        expected_keys: Estimated number of distinct keys; sizes the Key Space (Old 10%,
            Teenage 40%, Baby 50%). The paper uses 100.
        promote_every: Records (per mapper) between Baby -> Teenage promotions.
        old_every: Records between Teenage -> Old promotions (default ``4 * promote_every``,
            the paper's 60 s / 15 s).
        warmup: Records before any scale-out (default ``promote_every``).
        width: Default number of candidate reducers per key (2).
        max_machines: Most reducers per key (default: Table 1's ``floor(100 / L_s) + 1``).
    """

    expected_keys: int = 100
    promote_every: int = 10_000
    old_every: int | None = None
    warmup: int | None = None
    width: int = 2
    max_machines: int | None = None

    name = "dkg"

    def __post_init__(self) -> None:
        check_int_option("expected_keys", self.expected_keys, 1, "dkg")
        check_int_option("promote_every", self.promote_every, 1, "dkg")
        check_int_option("width", self.width, 1, "dkg")
        for opt in ("old_every", "warmup", "max_machines"):
            value = getattr(self, opt)
            if value is not None:
                check_int_option(opt, value, 0 if opt == "warmup" else 1, "dkg")
        if self.max_machines is not None and self.max_machines < self.width:
            raise ConfigError(f"policy 'dkg': max_machines ({self.max_machines}) < width ({self.width})")


@dataclass(frozen=True)
class DKGPolicy(StaticSnapshotMixin, BuiltPolicy):
    """Dynamic Key Grouping: the policy built from :class:`DKGSettings` (it reads nothing
    of the job's shape)."""

    settings: DKGSettings = field(default_factory=DKGSettings)
    splits_keys = True

    def make_router(self, mapper_id: int, num_reducers: int) -> Router:
        return DKGRouter(self.settings, num_reducers)


def build_dkg(settings: DKGSettings, shape: JobShape) -> DKGPolicy:
    """The registry factory of ``dkg``."""
    return DKGPolicy(settings, shape)
