"""Stream groupings from the Partial Key Grouping paper (Nasir et al.) as dpa policies.

Registered names (``dpa.run(..., policy=...)`` with a name and ``policy_options={...}``, or a
settings object such as ``PKGSettings(d=3)``):

* ``shuffle`` — shuffle grouping (SG): each mapper sends its records round-robin over the
  reducers, irrespective of the key. Every key may end up on every reducer.
* ``potc`` — static power of ``d`` choices (default ``d = 2``) *without* key splitting:
  the first time a mapper sees a key it binds it to the less loaded of the key's choices
  ``H_1(k), H_2(k)`` and sends every later record of that key to the same reducer.
* ``on-greedy`` — online greedy: a key never seen before by the mapper is bound to the
  least loaded reducer (of all ``R``) and remembered.
* ``off-greedy`` — offline greedy: keys sorted by decreasing frequency are bound in that
  order to the least loaded reducer (longest-processing-time-first). It needs the key
  frequencies in advance, see :class:`OffGreedyPolicy`.
* ``pkg`` — Partial Key Grouping: power of ``d`` choices (default ``d = 2``) *with* key
  splitting and local load estimation. Every record goes to the currently less loaded of
  the key's ``d`` choices, so a key is spread over at most ``d`` reducers.

Common conventions:

* **Load** is always *local load estimation* (PKG paper, section 3.2): each mapper's router
  counts the records it has itself sent to each reducer. Routers never talk to each other.
* **Hash choices** ``H_1 .. H_d`` come from :func:`dpa.routing.policies.common.candidates` (murmur3
  with seeds ``0 .. d-1`` over the 4-byte little-endian key hash), computed per batch.
* **Ties** go to the earlier choice (``H_1`` before ``H_2`` ...) resp. the lowest reducer id.
* **Key identity** inside a router is the 32-bit key hash; two keys with the same hash share
  a binding, which never affects correctness (reducers group by the real key).
* **Splitting.** ``pkg`` and ``shuffle`` split keys by design. The binding policies
  (``potc``, ``on-greedy``, ``off-greedy``) give a key one reducer *per mapper*, but
  mappers decide independently, so with several mappers one key may reach up to
  ``min(M, d)`` (potc) resp. ``M`` (greedy) reducers; they therefore declare
  ``splits_keys`` (final merge) unless the job has exactly one mapper. The PKG paper notes
  the same: keeping static PoTC consistent across sources would need coordination.
* **Speed.** ``shuffle`` and ``off-greedy`` with known frequencies are fully vectorised.
  ``pkg`` and the binding policies decide record by record (a decision depends on the
  loads left by the previous one); the per-record loop runs over Python ints produced by
  ``ndarray.tolist()`` with the choices computed vectorised beforehand. Measured on one
  core: ``pkg`` (``d = 2``) routes 4-5M records/s; the binding policies, which also look
  the key up in their table, about 1M records/s on streams with many distinct keys.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpa.errors import ConfigError
from dpa.routing.policies.common import (
    BuiltPolicy,
    candidates,
    check_int_option,
    least_loaded_of_two,
)
from dpa.routing.policies.hashing import StaticSnapshotMixin
from dpa.routing.policy import JobShape, PolicySettings, Router

__all__ = [
    "OffGreedyPolicy",
    "OffGreedySettings",
    "OnGreedyPolicy",
    "OnGreedySettings",
    "PKGPolicy",
    "PKGSettings",
    "PoTCPolicy",
    "PoTCSettings",
    "ShufflePolicy",
    "ShuffleSettings",
    "build_off_greedy",
    "build_on_greedy",
    "build_pkg",
    "build_potc",
    "build_shuffle",
    "lpt_assignment",
]


def _as_hashes(hashes: np.ndarray) -> np.ndarray:
    return np.asarray(hashes).astype(np.uint32, copy=False)


# ---------------------------------------------------------------------------- shuffle
class ShuffleRouter(Router):
    """Round-robin over the reducers, starting at ``start`` (vectorised)."""

    def __init__(self, start: int, num_reducers: int) -> None:
        self.num_reducers = num_reducers
        self.next = start % num_reducers

    def route(self, hashes: np.ndarray, snapshot: Any) -> np.ndarray:
        n = len(hashes)
        out = (self.next + np.arange(n, dtype=np.int64)) % self.num_reducers
        self.next = (self.next + n) % self.num_reducers
        return out


@dataclass(frozen=True)
class ShuffleSettings(PolicySettings):
    """Settings of ``shuffle``.

    Args:
        seed: Offsets the starting reducer of every mapper; None = ``JobConfig.seed``.
    """

    name = "shuffle"

    seed: int | None = None

    def __post_init__(self) -> None:
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ConfigError(f"policy 'shuffle': option seed must be an integer or None, got {self.seed!r}")


@dataclass(frozen=True)
class ShufflePolicy(StaticSnapshotMixin, BuiltPolicy):
    """Shuffle grouping: round-robin per mapper; mapper ``m`` starts at ``(m + seed) % R``
    (built from :class:`ShuffleSettings` and the job's shape, whose seed is the default)."""

    settings: ShuffleSettings = field(default_factory=ShuffleSettings)
    splits_keys = True

    @property
    def seed(self) -> int:
        """The offset in effect: the settings' ``seed``, else the job's (``JobShape.seed``)."""
        return self.shape.seed if self.settings.seed is None else self.settings.seed

    def make_router(self, mapper_id: int, num_reducers: int) -> Router:
        return ShuffleRouter(mapper_id + self.seed, num_reducers)


# ---------------------------------------------------------------------------- PKG
class PKGRouter(Router):
    """Power of ``d`` choices with key splitting and local load estimation.

    Attributes:
        loads: Records this router has sent to each reducer (its local load estimate).
    """

    def __init__(self, d: int, num_reducers: int) -> None:
        self.d = d
        self.num_reducers = num_reducers
        self.loads = [0] * num_reducers

    def route(self, hashes: np.ndarray, snapshot: Any) -> np.ndarray:
        hs = _as_hashes(hashes)
        if len(hs) == 0:
            return np.zeros(0, dtype=np.int64)
        c = candidates(hs, self.d, self.num_reducers)
        load = self.loads
        if self.d == 1:
            counts = np.bincount(c[0], minlength=self.num_reducers)
            for r, x in enumerate(counts.tolist()):
                load[r] += x
            return c[0]
        if self.d == 2:
            return least_loaded_of_two(c[0], c[1], load)
        out: list[int] = []
        append = out.append
        get = load.__getitem__
        for choice in zip(*c.tolist(), strict=True):
            w = min(choice, key=get)  # first minimum = earliest choice on ties
            load[w] += 1
            append(w)
        return np.array(out, dtype=np.int64)


@dataclass(frozen=True)
class PKGSettings(PolicySettings):
    """Settings of ``pkg``.

    Args:
        d: Number of hash choices per key (the paper's default and Storm's is 2; larger
            ``d`` copes with stronger skew at ``d``-fold state per key, paper Figure 9).
    """

    name = "pkg"

    d: int = 2

    def __post_init__(self) -> None:
        check_int_option("d", self.d, 1, "pkg")


@dataclass(frozen=True)
class PKGPolicy(StaticSnapshotMixin, BuiltPolicy):
    """Partial Key Grouping (Nasir et al.): greedy-``d`` with key splitting (built from
    :class:`PKGSettings`)."""

    settings: PKGSettings = field(default_factory=PKGSettings)
    splits_keys = True

    def make_router(self, mapper_id: int, num_reducers: int) -> Router:
        return PKGRouter(self.settings.d, num_reducers)


# ---------------------------------------------------------------------------- binding policies
class BindingRouter(Router):
    """Base of routers that bind each new key to one reducer and remember it.

    Attributes:
        table: Key hash -> bound reducer, for every key this router has seen.
        loads: Records this router has sent to each reducer.
    """

    def __init__(self, num_reducers: int) -> None:
        self.num_reducers = num_reducers
        self.table: dict[int, int] = {}
        self.loads = [0] * num_reducers

    def _route_greedy(self, hs: np.ndarray, preset: list[int]) -> np.ndarray:
        """Online greedy for every record whose ``preset`` reducer is negative.

        A record with ``preset[j] >= 0`` goes there; any other goes to its key's bound
        reducer, a new key being bound to the least loaded reducer (lowest id on ties).
        """
        table, load = self.table, self.loads
        get = table.get
        out: list[int] = []
        append = out.append
        for h, w in zip(hs.tolist(), preset, strict=True):
            if w < 0:
                w = get(h)
                if w is None:
                    w = load.index(min(load))
                    table[h] = w
            load[w] += 1
            append(w)
        return np.array(out, dtype=np.int64)


class PoTCRouter(BindingRouter):
    """Static power of ``d`` choices: bind a new key to its least loaded choice."""

    def __init__(self, d: int, num_reducers: int) -> None:
        super().__init__(num_reducers)
        self.d = d

    def route(self, hashes: np.ndarray, snapshot: Any) -> np.ndarray:
        hs = _as_hashes(hashes)
        if len(hs) == 0:
            return np.zeros(0, dtype=np.int64)
        c = candidates(hs, self.d, self.num_reducers)
        table, load = self.table, self.loads
        get = table.get
        out: list[int] = []
        append = out.append
        if self.d == 2:
            for h, a, b in zip(hs.tolist(), c[0].tolist(), c[1].tolist(), strict=True):
                w = get(h)
                if w is None:
                    w = b if load[b] < load[a] else a
                    table[h] = w
                load[w] += 1
                append(w)
        else:
            loadget = load.__getitem__
            for h, choice in zip(hs.tolist(), zip(*c.tolist(), strict=True), strict=True):
                w = get(h)
                if w is None:
                    w = min(choice, key=loadget)  # first minimum = earliest choice on ties
                    table[h] = w
                load[w] += 1
                append(w)
        return np.array(out, dtype=np.int64)


class OnGreedyRouter(BindingRouter):
    """Online greedy: bind a new key to the least loaded reducer (lowest id on ties)."""

    def route(self, hashes: np.ndarray, snapshot: Any) -> np.ndarray:
        hs = _as_hashes(hashes)
        return self._route_greedy(hs, [-1] * len(hs))


def lpt_assignment(hashes: np.ndarray, counts: np.ndarray, num_reducers: int) -> np.ndarray:
    """Offline greedy (longest processing time first) binding of keys to reducers.

    Keys are taken by decreasing count (ties: increasing hash) and each is bound to the
    reducer with the least total count so far (ties: lowest reducer id).

    Args:
        hashes: Distinct key hashes.
        counts: Frequency of each key.
        num_reducers: ``R``.

    Returns:
        ``int64`` reducer id per key, aligned with ``hashes``.
    """
    hashes = np.asarray(hashes, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    order = np.lexsort((hashes, -counts))
    heap = [(0, r) for r in range(num_reducers)]
    out = np.empty(len(hashes), dtype=np.int64)
    assigned: list[int] = []
    append = assigned.append
    replace = heapq.heapreplace
    for c in counts[order].tolist():
        load, r = heap[0]
        append(r)
        replace(heap, (load + c, r))
    out[order] = assigned
    return out


class OffGreedyRouter(BindingRouter):
    """Offline greedy: keys of a known frequency table are pre-bound by LPT.

    Keys missing from the table fall back to online greedy on this router's local loads.
    Without a table, the router's first batch serves as the frequency sample.
    """

    def __init__(self, num_reducers: int, table: tuple[np.ndarray, np.ndarray] | None) -> None:
        super().__init__(num_reducers)
        self.known: tuple[np.ndarray, np.ndarray] | None = table

    def _lookup(self, hs: np.ndarray) -> np.ndarray:
        assert self.known is not None
        keys, dest = self.known
        if len(keys) == 0:
            return np.full(len(hs), -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(keys, hs), len(keys) - 1)
        return np.where(keys[pos] == hs, dest[pos], -1)

    def route(self, hashes: np.ndarray, snapshot: Any) -> np.ndarray:
        hs = _as_hashes(hashes)
        if len(hs) == 0:
            return np.zeros(0, dtype=np.int64)
        if self.known is None:
            uniq, counts = np.unique(hs, return_counts=True)
            self.known = (uniq, lpt_assignment(uniq, counts, self.num_reducers))
        pre = self._lookup(hs)
        load = self.loads
        if (pre >= 0).all():
            for r, x in enumerate(np.bincount(pre, minlength=self.num_reducers).tolist()):
                load[r] += x
            return pre
        return self._route_greedy(hs, pre.tolist())


@dataclass(frozen=True)
class _BindingPolicy(StaticSnapshotMixin, BuiltPolicy):
    """Common part of the binding policies (see the module docstring on splitting): with
    one mapper (``JobShape.num_mappers``) no key is ever split."""

    @property
    def splits_keys(self) -> bool:  # type: ignore[override]
        return self.shape.num_mappers != 1

    #: Within one mapper, every record of a key goes to the same reducer.
    binds_keys = True


@dataclass(frozen=True)
class PoTCSettings(PolicySettings):
    """Settings of ``potc``.

    Args:
        d: Number of hash choices (default 2).
    """

    name = "potc"

    d: int = 2

    def __post_init__(self) -> None:
        check_int_option("d", self.d, 1, "potc")


@dataclass(frozen=True)
class PoTCPolicy(_BindingPolicy):
    """Static power of ``d`` choices without key splitting (the PKG paper's PoTC baseline),
    built from :class:`PoTCSettings` and the job's shape (its number of mappers)."""

    settings: PoTCSettings = field(default_factory=PoTCSettings)

    def make_router(self, mapper_id: int, num_reducers: int) -> Router:
        return PoTCRouter(self.settings.d, num_reducers)


@dataclass(frozen=True)
class OnGreedySettings(PolicySettings):
    """Settings of ``on-greedy`` (it has none)."""

    name = "on-greedy"


@dataclass(frozen=True)
class OnGreedyPolicy(_BindingPolicy):
    """Online greedy (PKG paper's On-Greedy): a new key goes to the least loaded reducer
    (built from :class:`OnGreedySettings` and the job's shape)."""

    settings: OnGreedySettings = field(default_factory=OnGreedySettings)

    def make_router(self, mapper_id: int, num_reducers: int) -> Router:
        return OnGreedyRouter(num_reducers)


def _frequency_arrays(frequencies: Any) -> tuple[np.ndarray, np.ndarray]:
    """Normalises a frequency table to (sorted distinct uint32 hashes, int64 counts)."""
    if isinstance(frequencies, Mapping):
        hashes = np.fromiter(frequencies.keys(), dtype=np.int64, count=len(frequencies))
        counts = np.fromiter(frequencies.values(), dtype=np.int64, count=len(frequencies))
    else:
        try:
            hashes, counts = frequencies
        except (TypeError, ValueError):
            raise ConfigError(
                "policy 'off-greedy': frequencies must be a mapping {key hash: count} or a "
                f"pair (hashes, counts), got {type(frequencies).__name__}"
            ) from None
        hashes = np.asarray(hashes, dtype=np.int64)
        counts = np.asarray(counts, dtype=np.int64)
    if hashes.shape != counts.shape or hashes.ndim != 1:
        raise ConfigError("policy 'off-greedy': frequencies hashes and counts must be 1-D and equally long")
    if len(hashes) and (hashes.min() < 0 or hashes.max() >= 2**32):
        raise ConfigError("policy 'off-greedy': frequency keys must be 32-bit key hashes (dpa.hash_key)")
    if len(counts) and counts.min() < 0:
        raise ConfigError("policy 'off-greedy': frequency counts must be >= 0")
    uniq, inverse = np.unique(hashes.astype(np.uint32), return_inverse=True)
    return uniq, np.bincount(inverse, weights=counts, minlength=len(uniq)).astype(np.int64)


@dataclass(frozen=True)
class OffGreedySettings(PolicySettings):
    """Settings of ``off-greedy``.

    Args:
        frequencies: Optional key frequency table, ``{key hash: count}`` or a pair
            ``(hashes, counts)`` (see :class:`OffGreedyPolicy`); None = each mapper's
            first batch.
    """

    name = "off-greedy"

    frequencies: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.frequencies is not None:
            _frequency_arrays(self.frequencies)


@dataclass(frozen=True)
class OffGreedyPolicy(_BindingPolicy):
    """Offline greedy (PKG paper's Off-Greedy): LPT binding on known key frequencies.

    The paper's Off-Greedy knows the whole key distribution in advance ("an unfair
    comparison for online algorithms"). In dpa it uses, per mapper:

    * ``frequencies`` if given — ``{key hash: count}`` (hashes as :func:`dpa.hash_key`
      computes them) or a pair ``(hashes, counts)``, e.g. from a first pass over the data;
      :func:`dpa.tools.simulate.simulate` passes the exact frequencies of the simulated stream.
      All mappers then share one table, so known keys are never split.
    * otherwise the mapper's **first batch** as the frequency sample: the keys of that
      batch are bound by LPT on their counts in the batch before it is routed.

    Keys not in the table are bound by online greedy on the mapper's local loads. It is
    built from :class:`OffGreedySettings` (``frequencies``) and the job's shape.
    """

    settings: OffGreedySettings = field(default_factory=OffGreedySettings)
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.settings.frequencies is not None:
            self._cache["freq"] = _frequency_arrays(self.settings.frequencies)

    def _table(self, num_reducers: int) -> tuple[np.ndarray, np.ndarray] | None:
        if self.settings.frequencies is None:
            return None
        key = ("table", num_reducers)
        if key not in self._cache:
            uniq, counts = self._cache["freq"]
            self._cache[key] = (uniq, lpt_assignment(uniq, counts, num_reducers))
        return self._cache[key]

    def make_router(self, mapper_id: int, num_reducers: int) -> Router:
        return OffGreedyRouter(num_reducers, self._table(num_reducers))


# ---------------------------------------------------------------------------- factories
def build_shuffle(settings: ShuffleSettings, shape: JobShape) -> ShufflePolicy:
    """The registry factory of ``shuffle`` (the seed defaults to the job's)."""
    return ShufflePolicy(settings, shape)


def build_pkg(settings: PKGSettings, shape: JobShape) -> PKGPolicy:
    """The registry factory of ``pkg``."""
    return PKGPolicy(settings, shape)


def build_potc(settings: PoTCSettings, shape: JobShape) -> PoTCPolicy:
    """The registry factory of ``potc``."""
    return PoTCPolicy(settings, shape)


def build_on_greedy(settings: OnGreedySettings, shape: JobShape) -> OnGreedyPolicy:
    """The registry factory of ``on-greedy``."""
    return OnGreedyPolicy(settings, shape)


def build_off_greedy(settings: OffGreedySettings, shape: JobShape) -> OffGreedyPolicy:
    """The registry factory of ``off-greedy``."""
    return OffGreedyPolicy(settings, shape)
