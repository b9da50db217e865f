"""Gedik's model: parameters (Table 1), frequency thresholds (eqs. 17-18), the
partitioning function ``<H_p, H_c>`` (explicit over consistent hash) and the load and
migration metrics (section 3). Pure functions, no runtime; see ``docs/policies/gedik.md``.

Choices where the paper is vague (details in the doc): the refined threshold is computed
for linear and quadratic ``beta_k`` and ``delta = min_k delta_k``; with one channel nothing
is tracked (``delta = inf``); ``H_c`` keeps channel ``i``'s tokens at the same positions
whatever the number of channels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from dpa.errors import ConfigError
from dpa.routing.policies.common import check_int_option
from dpa.routing.ring import RingSnapshot

__all__ = [
    "UTILITIES",
    "GedikParams",
    "PartitionFunction",
    "consistent_hash",
    "frequency_threshold",
    "migration_cost",
    "refined_threshold",
    "relative_imbalance",
    "relative_migration_cost",
    "resource_loads",
    "theta",
]

UTILITIES = ("A", "APM", "APLM", "ATM", "ATLM")
_KINDS = "CLQ"


# ---------------------------------------------------------------------------- parameters
def _beta(kind: str, f: np.ndarray) -> np.ndarray:
    f = np.asarray(f, dtype=np.float64)
    if kind == "C":
        return np.ones_like(f)
    if kind == "L":
        return f.copy()
    return f * f


@dataclass(frozen=True)
class GedikParams:
    """The paper's parameters (Table 1 defaults).

    Args:
        alpha: Imbalance tolerance ``alpha_k > 1``: one number for all resources or a
            3-sequence ``(alpha_s, alpha_c, alpha_n)``.
        sigma: Frequency threshold scaler in ``(0, 1]``.
        resources: Resource functions ``beta_s beta_c beta_n`` as three letters of
            ``C``/``L``/``Q``; the last must be ``L``.
        utility: ``A``, ``APM``, ``APLM``, ``ATM`` or ``ATLM``.
        replicas: Consistent-hash tokens per channel.
        domain_size: ``|D|`` for quadratic resource functions.
        max_moves: readj's limit of moves per item (``c``).
        readj_requires_gain: readj applies only readjustments that also lower the utility
            (default False: the pseudo-code, best gain among those lowering ``rho``).
    """

    alpha: float | tuple[float, float, float] = 1.2
    sigma: float = 0.1
    resources: str = "LCL"
    utility: str = "APM"
    replicas: int = 1000
    domain_size: int = 1_000_000
    max_moves: int = 5
    readj_requires_gain: bool = False
    alphas: tuple[float, float, float] = field(init=False, repr=False, default=(1.2, 1.2, 1.2))

    def __post_init__(self) -> None:
        a = self.alpha
        if isinstance(a, (list, tuple)):
            if len(a) != 3:
                raise ConfigError(f"alpha must be a number or 3 numbers (alpha_s, alpha_c, alpha_n), got {a!r}")
            alphas = tuple(a)
        else:
            alphas = (a, a, a)
        for x in alphas:
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not (x > 1 and math.isfinite(x)):
                raise ConfigError(
                    f"alpha (imbalance tolerance) must be > 1, e.g. 1.2 (channels at >= 83% of the busiest), got {a!r}"
                )
        object.__setattr__(self, "alphas", tuple(float(x) for x in alphas))
        if isinstance(self.alpha, list):
            object.__setattr__(self, "alpha", tuple(self.alpha))
        s = self.sigma
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0 < s <= 1:
            raise ConfigError(f"sigma must be in (0, 1] (the paper's default is 0.1), got {s!r}")
        r = self.resources
        if not isinstance(r, str) or len(r) != 3 or any(ch not in _KINDS for ch in r.upper()):
            raise ConfigError(
                f"resources must be 3 letters of C/L/Q for (state, computation, communication), "
                f"e.g. 'LCL', 'LLL', 'LQL', got {r!r}"
            )
        if r.upper()[2] != "L":
            raise ConfigError(f"the communication resource function is always linear: use {r[:2].upper()}L, not {r!r}")
        object.__setattr__(self, "resources", r.upper())
        u = self.utility
        if not isinstance(u, str) or u.upper() not in UTILITIES:
            raise ConfigError(f"utility must be one of {', '.join(UTILITIES)}, got {u!r}")
        object.__setattr__(self, "utility", u.upper())
        check_int_option("replicas", self.replicas, 1, "gedik")
        check_int_option("domain_size", self.domain_size, 1, "gedik")
        check_int_option("max_moves", self.max_moves, 1, "gedik")
        if not isinstance(self.readj_requires_gain, bool):
            raise ConfigError(f"readj_requires_gain must be True or False, got {self.readj_requires_gain!r}")

    def beta(self, k: int, f: np.ndarray) -> np.ndarray:
        """``beta_k(f)`` for resource ``k`` (0 = state, 1 = computation, 2 = communication)."""
        return _beta(self.resources[k], f)

    def weights(self, f: np.ndarray) -> np.ndarray:
        """``(3, n)`` array of ``beta_k(f)`` for every resource."""
        return np.stack([self.beta(k, f) for k in range(3)])

    @property
    def balanced_resources(self) -> tuple[int, ...]:
        """Resources in the balance penalty ``rho``: the non-constant ones (section 4.4)."""
        return tuple(k for k in range(3) if self.resources[k] != "C")


# ---------------------------------------------------------------------------- delta
def theta(alpha: float, num_channels: int) -> float:
    """Eq. 15: ``(alpha - 1) / (1 + alpha / (N - 1))``; 0 for a single channel."""
    if num_channels <= 1:
        return 0.0
    return (alpha - 1.0) / (1.0 + alpha / (num_channels - 1))


def _delta_k(kind: str, sigma: float, th: float, num_channels: int, domain_size: int) -> float:
    if kind == "C":
        return 1.0
    if kind == "L":
        return sigma * th / num_channels
    return math.sqrt(sigma * th / (domain_size * num_channels))


def frequency_threshold(params: GedikParams, num_channels: int) -> float:
    """``delta = min_k delta_k`` of eq. 17 (``inf`` for one channel)."""
    if num_channels <= 1:
        return math.inf
    return min(_delta_k(params.resources[k], params.sigma, theta(params.alphas[k], num_channels),
                        num_channels, params.domain_size) for k in range(3))


def refined_threshold(params: GedikParams, num_channels: int, tracked: np.ndarray) -> float:
    """``delta'`` after the quadratic post-processing step (section 4.1.3).

    Args:
        params: Parameters.
        num_channels: ``N``.
        tracked: Frequencies of the items ``I`` with ``f >= delta``.

    Returns:
        ``max(delta, min_k delta'_k)``; equals :func:`frequency_threshold` without
        quadratic resources.
    """
    delta = frequency_threshold(params, num_channels)
    if num_channels <= 1 or "Q" not in params.resources:
        return delta
    f = np.asarray(tracked, dtype=np.float64)
    rest = params.domain_size - len(f)
    out = []
    for k in range(3):
        kind, th = params.resources[k], theta(params.alphas[k], num_channels)
        if kind != "Q":
            out.append(_delta_k(kind, params.sigma, th, num_channels, params.domain_size))
            continue
        total = float(np.sum(f * f))
        if rest > 0:
            total += rest * (max(0.0, 1.0 - float(f.sum())) / rest) ** 2
        out.append(math.sqrt(params.sigma * th * total / num_channels))
    return max(delta, min(out))


# ---------------------------------------------------------------------------- the function
@lru_cache(maxsize=256)
def consistent_hash(num_channels: int, replicas: int) -> RingSnapshot:
    """``H_c``: dpa's MurmurHash3 ring with ``replicas`` tokens per channel (cached)."""
    return RingSnapshot.build([int(replicas)] * int(num_channels))


@dataclass(frozen=True, eq=False)
class PartitionFunction:
    """``p = <H_p, H_c>``: explicit hash for frequent items, consistent hash otherwise.

    Also the policy's routing snapshot (picklable; it ships the ring's arrays).

    Attributes:
        num_channels: ``N``.
        replicas: Consistent-hash tokens per channel.
        explicit_hashes: Sorted, distinct ``uint32`` item hashes of ``H_p``.
        explicit_dest: ``int32`` channel of each explicit item.
        version: Routing version.
    """

    num_channels: int
    replicas: int = 1000
    explicit_hashes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint32), repr=False)
    explicit_dest: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32), repr=False)
    version: int = 0
    ring: RingSnapshot = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.num_channels, bool) or not isinstance(self.num_channels, (int, np.integer)) \
                or self.num_channels < 1:
            raise ConfigError(f"a partitioning function needs >= 1 channel, got {self.num_channels!r}")
        h = np.ascontiguousarray(self.explicit_hashes, dtype=np.uint32)
        d = np.ascontiguousarray(self.explicit_dest, dtype=np.int32)
        if h.shape != d.shape or h.ndim != 1:
            raise ConfigError("explicit_hashes and explicit_dest must be aligned 1-d arrays")
        if len(h) > 1 and not (np.diff(h.astype(np.int64)) > 0).all():
            order = np.argsort(h, kind="stable")
            h, d = h[order], d[order]
            if not (np.diff(h.astype(np.int64)) > 0).all():
                raise ConfigError("explicit_hashes must be distinct")
        if len(d) and (d.min() < 0 or d.max() >= self.num_channels):
            raise ConfigError(f"explicit destinations must be in [0, {self.num_channels})")
        object.__setattr__(self, "explicit_hashes", h)
        object.__setattr__(self, "explicit_dest", d)
        object.__setattr__(self, "ring", consistent_hash(int(self.num_channels), int(self.replicas)))

    def __getstate__(self) -> dict[str, Any]:
        return {"num_channels": self.num_channels, "replicas": self.replicas,
                "explicit_hashes": self.explicit_hashes, "explicit_dest": self.explicit_dest,
                "version": self.version}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "ring", consistent_hash(int(self.num_channels), int(self.replicas)))

    @property
    def num_reducers(self) -> int:
        """Alias of :attr:`num_channels` (dpa's word)."""
        return int(self.num_channels)

    @property
    def explicit(self) -> dict[int, int]:
        """``H_p`` as a dict."""
        return dict(zip(self.explicit_hashes.tolist(), self.explicit_dest.tolist()))

    def lookup_batch(self, hashes: np.ndarray) -> np.ndarray:
        """Algorithm 1, vectorised: explicit hash if present, else the consistent hash.

        Args:
            hashes: Key hashes (``uint32`` or integers in ``[0, 2**32)``).

        Returns:
            ``int32`` channel of each hash.
        """
        h = np.asarray(hashes)
        if h.dtype != np.uint32:
            h = h.astype(np.uint32)
        out = np.array(self.ring.lookup_batch(h), dtype=np.int32)
        eh = self.explicit_hashes
        if len(eh) and len(h):
            idx = np.searchsorted(eh, h)
            np.minimum(idx, len(eh) - 1, out=idx)
            hit = eh[idx] == h
            out[hit] = self.explicit_dest[idx[hit]]
        return out

    def same_mapping(self, other: PartitionFunction) -> bool:
        """Whether both have the same ``N``, ring and explicit table."""
        return (self.num_channels == other.num_channels and self.replicas == other.replicas
                and np.array_equal(self.explicit_hashes, other.explicit_hashes)
                and np.array_equal(self.explicit_dest, other.explicit_dest))

    def explicit_counts(self) -> tuple[int, ...]:
        """Explicit entries per channel."""
        return tuple(np.bincount(self.explicit_dest, minlength=self.num_channels).tolist())


# ---------------------------------------------------------------------------- metrics
def resource_loads(freqs: np.ndarray, assignment: np.ndarray, num_channels: int,
                   resources: str | GedikParams = "LCL") -> np.ndarray:
    """``L_k(i) = sum_{p(d)=i} beta_k(f(d))`` for the three resources.

    Args:
        freqs: Relative frequency of every item of the domain.
        assignment: Channel of every item.
        num_channels: ``N``.
        resources: Resource letters or :class:`GedikParams`.

    Returns:
        ``(3, N)`` loads (rows: state, computation, communication).
    """
    res = resources.resources if isinstance(resources, GedikParams) else GedikParams(resources=resources).resources
    f = np.asarray(freqs, dtype=np.float64)
    a = np.asarray(assignment, dtype=np.int64)
    return np.stack([np.bincount(a, weights=_beta(res[k], f), minlength=num_channels)[:num_channels]
                     for k in range(3)])


def relative_imbalance(loads: np.ndarray, alpha: float | Sequence[float] = 1.2) -> tuple[float, np.ndarray]:
    """Eq. 11: ``b = (prod_k r_k / alpha_k)^(1/3)`` with ``r_k = max_i L_k(i) / min_i L_k(i)``.

    Args:
        loads: ``(3, N)`` loads (:func:`resource_loads`).
        alpha: Imbalance tolerance, one number or one per resource.

    Returns:
        ``(b, array of the three b_k)``; ``r_k = inf`` if a channel has no load while
        another has, ``1`` if all are empty.
    """
    L = np.asarray(loads, dtype=np.float64)
    alphas = np.broadcast_to(np.asarray(alpha, dtype=np.float64), (L.shape[0],))
    mx, mn = L.max(axis=1), L.min(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(mn > 0, mx / np.where(mn > 0, mn, 1.0), np.where(mx > 0, np.inf, 1.0))
    bk = r / alphas
    return float(np.prod(bk) ** (1.0 / len(bk))), bk


def migration_cost(freqs: np.ndarray, old_assignment: np.ndarray, new_assignment: np.ndarray,
                   resources: str | GedikParams = "LCL") -> float:
    """Eq. 9: ``M = sum_d beta_s(f(d)) * 1(p_old(d) != p_new(d))``."""
    res = resources.resources if isinstance(resources, GedikParams) else GedikParams(resources=resources).resources
    f = np.asarray(freqs, dtype=np.float64)
    moved = np.asarray(old_assignment) != np.asarray(new_assignment)
    return float(_beta(res[0], f[moved]).sum())


def relative_migration_cost(freqs: np.ndarray, old_assignment: np.ndarray, new_assignment: np.ndarray,
                            num_channels: int, resources: str | GedikParams = "LCL") -> float:
    """Eq. 12: ``m = M / L_s_bar`` with ``L_s_bar = sum_d beta_s(f(d)) / N`` (eq. 10, new ``N``)."""
    res = resources.resources if isinstance(resources, GedikParams) else GedikParams(resources=resources).resources
    ideal = float(_beta(res[0], np.asarray(freqs, dtype=np.float64)).sum()) / num_channels
    M = migration_cost(freqs, old_assignment, new_assignment, res)
    return M / ideal if ideal > 0 else 0.0
