"""Shared building blocks of the literature's policies: seeded hash choices, snapshot routing.

Every policy in :mod:`dpa.routing.policies` routes on the 32-bit key hash ``h`` that dpa already
computes for each record (:func:`dpa.keys.encoding.hash_key_columns`). Policies that need ``d``
independent hash functions ``H_1 .. H_d`` (PoTC, PKG) derive them from ``h`` without
touching the key again:

    ``H_i(key) = murmur3_x86_32(le32(h), seed=i - 1) % R``  for ``i = 1 .. d``

where ``le32(h)`` is the 4-byte little-endian encoding of ``h``. This is exactly
``mmh3.hash(struct.pack("<I", h), i - 1, signed=False)``; :func:`seeded_hash32` computes
it for a whole batch with numpy. (:func:`dpa.keys.encoding.murmur3_32_batch` has no seed
argument, so a 4-byte, any-seed specialisation of the same algorithm lives here; for
seed 0 both agree bit for bit, which the tests check.) Seeds are independent murmur
functions, so ``H_1`` and ``H_2`` are independent: they may coincide for a key (with
probability ``1/R``), exactly as in the PKG paper.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field
from typing import Any

import numpy as np

from dpa.errors import ConfigError
from dpa.keys.murmur3 import fmix32, mix_h, mix_k  # the one murmur3 implementation's steps
from dpa.routing.policy import JobShape, Planner, PolicySettings, PolicySpec, Router

__all__ = [
    "BuiltPolicy",
    "KeyStatsPolicy",
    "LatestQueuesPlanner",
    "SnapshotRouter",
    "candidates",
    "check_int_option",
    "least_loaded_of_two",
    "seeded_hash32",
]

_LEN4 = np.uint32(4)


def _mixed_block(hashes: np.ndarray) -> np.ndarray:
    """The seed-independent part of murmur3 on one 4-byte block: ``rotl(k*c1, 15)*c2``."""
    with np.errstate(over="ignore"):
        return mix_k(np.array(hashes, dtype=np.uint32, copy=True))


def _finish(k: np.ndarray, seed: int) -> np.ndarray:
    """The seed-dependent rest: one body round from ``h = seed``, then the finalisation."""
    with np.errstate(over="ignore"):
        return fmix32(mix_h(np.uint32(seed & 0xFFFFFFFF), k), _LEN4)


def seeded_hash32(hashes: np.ndarray, seed: int) -> np.ndarray:
    """MurmurHash3 x86_32 with ``seed`` of the 4-byte little-endian encoding of each hash.

    Args:
        hashes: 32-bit key hashes (any integer dtype; taken modulo ``2**32``).
        seed: The murmur seed (``0 <= seed < 2**32``).

    Returns:
        ``uint32`` array, ``out[j] == mmh3.hash(struct.pack("<I", hashes[j]), seed, signed=False)``.
    """
    return _finish(_mixed_block(np.asarray(hashes).astype(np.uint32, copy=False)), seed)


def candidates(hashes: np.ndarray, d: int, num_reducers: int) -> np.ndarray:
    """The ``d`` hash choices ``H_1 .. H_d`` of each key, vectorised.

    Args:
        hashes: ``uint32`` key hashes, shape ``(n,)``.
        d: Number of choices (``>= 1``).
        num_reducers: ``R``; choices are in ``[0, R)``.

    Returns:
        ``int64`` array of shape ``(d, n)``; row ``i`` is ``H_{i+1}`` (murmur seed ``i``).
    """
    k = _mixed_block(np.asarray(hashes).astype(np.uint32, copy=False))
    out = np.empty((d, len(k)), dtype=np.int64)
    r = np.uint32(num_reducers)
    for i in range(d):
        out[i] = _finish(k, i) % r
    return out


def least_loaded_of_two(first: np.ndarray, second: np.ndarray, load: list[int]) -> np.ndarray:
    """Sends each record to the less loaded of its two choices, updating ``load`` in place.

    Decisions are sequential (each one sees the loads left by the previous), so this is a
    tight Python loop over the batch. Ties go to the first choice.
    """
    out: list[int] = []
    append = out.append
    for a, b in zip(first.tolist(), second.tolist(), strict=True):
        x = load[a]
        y = load[b]
        if y < x:
            load[b] = y + 1
            append(b)
        else:
            load[a] = x + 1
            append(a)
    return np.array(out, dtype=np.int64)


def check_int_option(name: str, value: object, minimum: int, policy: str) -> int:
    """Validates an integer policy option.

    Args:
        name: Option name (for the message).
        value: The given value.
        minimum: Smallest allowed value.
        policy: Policy name (for the message).

    Returns:
        The value as ``int``.

    Raises:
        ConfigError: If the value is not an integer ``>= minimum``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(
            f"policy {policy!r}: option {name} must be an integer >= {minimum}, got {value!r}"
        )
    return int(value)


# ---------------------------------------------------------------------------- built policies
@dataclass(frozen=True)
class BuiltPolicy(PolicySpec):
    """Base of the built-in policies: a policy built from its settings and the job's shape.

    A registry factory ``factory(settings, shape)`` builds the policy, which holds both
    and reads its options as ``self.settings.<option>``; what depends on the job (e.g. a
    default resolved against the number of mappers) it derives from ``self.shape``. The
    settings stay the user's option holder: no policy class subclasses a settings class.
    Policies are frozen dataclasses, so they pickle (they travel to the actors) and
    compare equal when built from equal settings and shapes.

    Attributes:
        settings: The policy's :class:`~dpa.routing.policy.PolicySettings` (its subclass
            for the policy, e.g. :class:`~dpa.routing.policies.grouping.PKGSettings`).
        shape: The job's :class:`~dpa.routing.policy.JobShape` (default: one mapper, one
            reducer).

    Raises:
        TypeError: ``settings`` is not an instance of the policy's settings class (the
            class its ``settings`` field defaults to) or ``shape`` not a
            :class:`~dpa.routing.policy.JobShape`.
    """

    settings: PolicySettings
    shape: JobShape = field(default_factory=JobShape)

    def __post_init__(self) -> None:
        expected = self.__dataclass_fields__["settings"].default_factory  # type: ignore[attr-defined]
        if not isinstance(expected, type) or expected is MISSING:
            expected = PolicySettings
        if not isinstance(self.settings, expected):
            raise TypeError(f"{type(self).__name__} is built from {expected.__name__}, got {self.settings!r}")
        if not isinstance(self.shape, JobShape):
            raise TypeError(f"{type(self).__name__}.shape must be a JobShape, got {self.shape!r}")

    @property
    def name(self) -> str:  # type: ignore[override]
        """The registered name, as the settings say."""
        return self.settings.name


# ---------------------------------------------------------------------------- snapshot routing
class SnapshotRouter(Router):
    """Routes by the snapshot's ``lookup_batch``: the snapshot is the whole routing state."""

    def route(self, hashes: np.ndarray, snapshot: Any) -> np.ndarray:
        return snapshot.lookup_batch(hashes)


class LatestQueuesPlanner(Planner):
    """Base of planners that publish ``_snapshot`` and keep each reducer's latest queue length.

    Subclasses set ``queue_lengths`` (one entry per reducer) and ``_snapshot``; reports
    of reducers outside ``[0, R)`` are ignored.
    """

    queue_lengths: list[int]
    _snapshot: Any

    @property
    def snapshot(self) -> Any:
        return self._snapshot

    def observe(self, reducer: int, queue_length: int, version: int) -> None:
        if 0 <= reducer < len(self.queue_lengths):
            self.queue_lengths[reducer] = int(queue_length)


@dataclass(frozen=True)
class KeyStatsPolicy(BuiltPolicy):
    """Base of the policies whose planner rebuilds a lookup snapshot from key statistics.

    Routers and owners look each hash up in the snapshot (``lookup_batch``), keys move
    when a new snapshot is published, and reducers report their keys to the planner.
    """

    routes_by_key = True
    moves_keys = True
    wants_key_stats = True

    def make_router(self, mapper_id: int, num_reducers: int) -> Router:
        return SnapshotRouter()

    def owners(self, snapshot: Any, hashes: np.ndarray) -> np.ndarray:
        return snapshot.lookup_batch(hashes)
