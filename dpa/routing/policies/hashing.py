"""Key grouping: the static ``hash % R`` routing (policy ``hash``) and its snapshot.

:class:`ModSnapshot` is also the initial (and only) routing state of the policies that
route by load rather than by a snapshot (shuffle, PKG and its baselines, DKG).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dpa.routing.policies.common import BuiltPolicy, SnapshotRouter
from dpa.routing.policy import JobShape, PolicySettings, Router

__all__ = ["HashPolicy", "HashSettings", "ModRouter", "ModSnapshot", "StaticSnapshotMixin", "build_hash_policy"]


@dataclass(frozen=True)
class ModSnapshot:
    """Static routing ``hash % R`` (key grouping)."""

    num_reducers: int
    version: int = 0

    def lookup_batch(self, hashes: np.ndarray) -> np.ndarray:
        return (np.asarray(hashes, dtype=np.uint32) % np.uint32(self.num_reducers)).astype(np.int32)


ModRouter = SnapshotRouter
"""Routes by :class:`ModSnapshot` (``hash % R``)."""


class StaticSnapshotMixin:
    """Policies whose routing state lives in the routers (or is fixed): the snapshot never changes."""

    def initial_snapshot(self, num_reducers: int) -> ModSnapshot:
        return ModSnapshot(num_reducers)


@dataclass(frozen=True)
class HashSettings(PolicySettings):
    """Settings of ``hash`` (it has none)."""

    name = "hash"


@dataclass(frozen=True)
class HashPolicy(StaticSnapshotMixin, BuiltPolicy):
    """Key grouping: ``murmur3(key) % R``, never rebalanced (built from :class:`HashSettings`)."""

    settings: HashSettings = field(default_factory=HashSettings)
    routes_by_key = True

    def make_router(self, mapper_id: int, num_reducers: int) -> Router:
        return ModRouter()


def build_hash_policy(settings: HashSettings, shape: JobShape) -> HashPolicy:
    """The registry factory of ``hash``."""
    return HashPolicy(settings, shape)
