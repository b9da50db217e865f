"""Gedik's partitioning functions for stateful data parallelism, as dpa policies.

Registered as ``gedik-scan``, ``gedik-redist`` and ``gedik-readj`` (B. Gedik, "Partitioning
functions for stateful data parallelism in stream processing", VLDB Journal; equation and
algorithm numbers below are the paper's).

**Structure** (section 4.1). A partitioning function is a pair ``p = <H_p, H_c>``: an
explicit hash ``H_p`` (item -> channel) for the items whose relative frequency is at least
``delta``, and a consistent hash ``H_c`` for all other items (Algorithm 1: explicit hit,
else consistent hash). ``H_c`` is dpa's MurmurHash3 ring (:class:`dpa.ring.RingSnapshot`)
with ``replicas`` tokens per channel (default 1000, the paper's setting); channel ``i``'s
tokens are at the same positions whatever the number of channels, so growing ``N`` only
moves items to the new channel. Items are dpa's 32-bit key hashes: the explicit hash is
a sorted ``uint32`` array with a destination array, looked up with ``searchsorted``
(:class:`PartitionFunction`, also the policy's snapshot).

**Loads and metrics** (section 3). Resource functions ``beta_k`` for state ``s``,
computation ``c`` and communication ``n`` are Constant (1), Linear (x) or Quadratic
(x^2), written ``"LCL"`` = (beta_s, beta_c, beta_n); ``beta_n`` is always Linear, as in the
paper. The load of channel ``i`` for resource ``k`` is ``L_k(i) = sum_{p(d)=i} beta_k(f(d))``.
*Choice:* eq. 3 writes the computation load as ``f(d) * beta_c(f(d))``, but the paper's own
toy example (Figure 1: quadratic computation costs 39 and 35 are sums of squared
frequencies), its delta derivation (eq. 17 uses ``L_k = sum beta_k(f)``) and section 4.4
("constant resource functions ... balanced without the explicit hash") all use
``beta_c(f(d))``; so does this module. The metrics (:func:`relative_imbalance`,
:func:`relative_migration_cost`) are:

* relative imbalance ``b = (prod_k b_k)^(1/3)``, ``b_k = r_k / alpha_k``,
  ``r_k = max_i L_k(i) / min_i L_k(i)`` (eqs. 2, 4, 6, 11; ``inf`` if some channel has no
  load while another has);
* relative migration cost ``m = M / L_s_bar`` with
  ``M = sum_d beta_s(f(d)) * 1(p_old(d) != p_new(d))`` (eq. 9) and the ideal
  ``L_s_bar = sum_d beta_s(f(d)) / N_new`` (eqs. 10, 12; ``N`` of the new function).

**delta** (section 4.1.3). ``theta_k = (alpha_k - 1) / (1 + alpha_k / (N - 1))`` (eq. 15);
``delta_k`` = 1, ``sigma theta_k / N`` or ``sqrt(sigma theta_k / (|D| N))`` for constant,
linear and quadratic ``beta_k`` (eq. 17) and ``delta = min_k delta_k``. Quadratic
post-processing: with ``I`` the items with ``f >= delta``, ``L_k_bar`` is re-estimated as
``(sum_{I} beta_k(f) + (|D| - |I|) beta_k((1 - sum_I f) / (|D| - |I|))) / N`` and
``delta'_k = sqrt(sigma theta_k L_k_bar)`` (eq. 16 solved for ``delta_k``). *Choices:* the
paper's expression for ``L_k_bar`` lacks the ``/ N``; dividing by ``N`` is what makes it reduce
to eq. 17 when ``I`` is empty, so it is done here. ``delta' = min_k`` of the refined
quadratic and the unchanged constant / linear ``delta_k`` and never below ``delta`` (the
paper notes it is higher). With ``N = 1`` (``theta = 0``) there is nothing to balance: no
item is tracked (``delta = inf``). ``|D|`` is the option ``domain_size`` (the paper's default
10^6), since a stream's domain is not known. ``alpha_k > 1`` is required (``alpha = 1``
would make ``delta = 0``: track everything).

**Penalties** (section 4.2.1). Migration penalty ``gamma`` (eq. 18): the migration of
the items no longer tracked (``D_o``, old location vs the new consistent hash) plus that
of the items placed so far, over ``m_bar = sum_{D_a} beta_s(f) / N_new``. Balance penalty
``rho`` (eqs. 19-20): per resource ``(max_i L_k - min_i L_k) / (theta_k * mean_i L_k)`` over
the *explicit items placed so far only*, and their geometric mean; as section 4.4 says,
resources with a constant ``beta`` are left out of ``rho`` (``beta_n`` is linear, so at least
one remains). An empty placement has ``rho = 0``; ``m_bar = 0`` gives ``gamma = 0``.
Utilities (section 4.3, lower is better; ``log`` is natural): ``A = rho``,
``APM = rho + gamma`` (default), ``APLM = rho + log(1 + gamma)``, ``ATM = rho (1 + gamma)``,
``ATLM = rho (1 + log(1 + gamma))``.

**Algorithms** (section 4.2). All three build ``H_c`` for ``N_new`` channels, start with the
migration ``m`` of ``D_o`` and give every tracked item an explicit entry.

* ``scan`` (Algorithm 2): items by decreasing frequency (ties: smaller hash); each one
  goes to the channel with the lowest ``U(rho, gamma)`` (ties: lowest channel).
* ``redist`` (Algorithm 3): at every step, over all unplaced items and all channels, the
  placement with the lowest ``U(rho, gamma) / f(item)`` (ties: the more frequent item,
  then the lowest channel) is made.
* ``readj`` (Algorithm 4): starts from the old placement of every tracked item
  (``p_old(d)``; for an old channel that no longer exists, ``H_c`` of the new function),
  then repeatedly applies the move ``<i, d1, j, -->`` or swap ``<i, d1, j, d2>`` with the best
  gain ``(u - u') / |f(d1) - f(d2)|`` among those that strictly lower ``rho``, where ``u`` is
  the utility of the current placement (*choice:* the pseudo-code's ``u <- 0`` and its
  update of ``u`` inside the candidate loop contradict the text, "the reduction in the
  utility function value per frequency moved", which is followed here) and the
  migration change is eq. 22. *Choice:* the paper is ambiguous about when readj stops.
  Its pseudo-code (``g <- -inf``, stop when no candidate is left) and section 5.3 ("it
  only considers readjustments that reduce the imbalance, and only uses the utility
  function for picking the best among those") apply the best-gain candidate even when
  its gain is negative, stopping only when no readjustment lowers ``rho``; section 4.2.4
  also says "until there are no readjustments that improve the utility". The default
  (``readj_requires_gain=False``) follows the pseudo-code, which also reproduces the
  paper's observation that readj balances best at a slightly higher migration cost;
  ``readj_requires_gain=True`` additionally requires ``U`` to drop. Each item moves at
  most ``max_moves`` times (the paper's ``c = 5``, which it reports made no difference);
  "strictly lower" means by more than ``1e-12`` relative, so floating-point noise cannot
  make the search cycle. Each unordered swap is tried once (the pseudo-code's ordered
  pairs ``(i, j)`` and ``(j, i)`` give the same swap); ties go to the first candidate,
  moves (by item, then channel) before swaps.

In all three algorithms values within ``1e-12`` (relative) of the best count as ties, so
floating-point noise does not decide between equivalent placements.

**Frequencies** (section 4.1.2). The planner feeds every reducer's key report
(:meth:`dpa.policy.Planner.observe_keys`) into a :class:`dpa.sketches.SlidingLossyCounter`
(3 lossy counters, window ``window`` records, default ``period``) with
``epsilon = eps_ratio * delta`` (the paper's "typical epsilon 0.1", read as relative to the
threshold; ``delta`` from eq. 17 for the job's ``R``). Every ``period`` records observed it
asks the counter for the items with estimated frequency ``>= delta - epsilon`` (the
lossy-counting output), runs the construction with ``old`` = the current function and
``N = R`` and publishes the result (version + 1) if its explicit table differs (see the
option ``rho_threshold`` to damp republishing caused by estimation noise). The
event's reducer is the one with the longest reported queue and ``tokens_after`` holds the
number of explicit entries per reducer. Items of ``D_o`` whose frequency is no longer
known count with frequency 0 in the migration penalty.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from dpa.errors import ConfigError
from dpa.partitioners.common import check_int_option
from dpa.policy import Decision, Planner, PolicySpec, RebalanceEvent, Router, register_policy
from dpa.ring import RingSnapshot
from dpa.sketches import SlidingLossyCounter

if TYPE_CHECKING:
    from dpa.config import JobConfig

__all__ = [
    "ALGORITHMS",
    "UTILITIES",
    "BuildInfo",
    "GedikParams",
    "GedikPlanner",
    "GedikPolicy",
    "PartitionFunction",
    "build_partition",
    "construct",
    "consistent_hash",
    "frequency_threshold",
    "migration_cost",
    "refined_threshold",
    "relative_imbalance",
    "relative_migration_cost",
    "resource_loads",
    "theta",
    "utility",
]

logger = logging.getLogger(__name__)

ALGORITHMS = ("scan", "redist", "readj")
UTILITIES = ("A", "APM", "APLM", "ATM", "ATLM")
_KINDS = "CLQ"
_IMPROVE_TOL = 1e-12


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


# ---------------------------------------------------------------------------- penalties
def utility(name: str, rho: np.ndarray | float, gamma: np.ndarray | float) -> np.ndarray:
    """The utility functions of section 4.3 (lower is better), vectorised."""
    rho = np.asarray(rho, dtype=np.float64)
    gamma = np.asarray(gamma, dtype=np.float64)
    if name == "A":
        return rho + 0.0 * gamma
    if name == "APM":
        return rho + gamma
    if name == "APLM":
        return rho + np.log1p(gamma)
    if name == "ATM":
        return rho * (1.0 + gamma)
    if name == "ATLM":
        return rho * (1.0 + np.log1p(gamma))
    raise ConfigError(f"utility must be one of {', '.join(UTILITIES)}, got {name!r}")


class _Balance:
    """Loads of the explicit items placed so far, for the resources in ``rho`` (eq. 19-20)."""

    def __init__(self, params: GedikParams, num_channels: int, weights: np.ndarray) -> None:
        self.ks = params.balanced_resources
        self.N = num_channels
        self.theta = np.array([theta(params.alphas[k], num_channels) for k in self.ks])
        self.w = weights[list(self.ks)]  # (r, items)
        self.loads = np.zeros((len(self.ks), num_channels))

    def _combine(self, spread: np.ndarray, mean: np.ndarray) -> np.ndarray:
        """Geometric mean over resources of ``spread / (theta * mean)``; axis 0 = resource."""
        shape = (-1,) + (1,) * (spread.ndim - 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            rk = np.where(mean > 0, spread / (self.theta.reshape(shape) * mean), 0.0)
        return np.prod(rk, axis=0) ** (1.0 / len(self.ks))

    def rho(self) -> float:
        L = self.loads
        return float(self._combine(L.max(axis=1) - L.min(axis=1), L.mean(axis=1)))

    def rho_after_add(self, items: np.ndarray) -> np.ndarray:
        """``rho`` after adding each item to each channel: ``(len(items), N)``."""
        L, N = self.loads, self.N
        w = self.w[:, items]  # (r, C)
        spreads, means = [], []
        ch = np.arange(N)
        for r in range(len(self.ks)):
            Lr = L[r]
            order = np.argsort(-Lr, kind="stable")
            top1, top2 = Lr[order[0]], (Lr[order[1]] if N > 1 else -np.inf)
            max_other = np.where(ch == order[0], top2, top1)
            order = np.argsort(Lr, kind="stable")
            bot1, bot2 = Lr[order[0]], (Lr[order[1]] if N > 1 else np.inf)
            min_other = np.where(ch == order[0], bot2, bot1)
            new = Lr[None, :] + w[r][:, None]  # (C, N)
            spreads.append(np.maximum(new, max_other[None, :]) - np.minimum(new, min_other[None, :]))
            means.append(np.broadcast_to(((Lr.sum() + w[r]) / N)[:, None], new.shape))
        return self._combine(np.stack(spreads), np.stack(means))

    def rho_after_transfer(self, src: np.ndarray, dst: np.ndarray, dw: np.ndarray) -> np.ndarray:
        """``rho`` after moving load ``dw`` (``(r, C)``) from channel ``src`` to ``dst``, per candidate."""
        L = self.loads
        spreads = []
        for r in range(len(self.ks)):
            Lr = L[r]
            new_s = Lr[src] - dw[r]
            new_d = Lr[dst] + dw[r]
            mx = np.maximum(new_s, new_d)
            mn = np.minimum(new_s, new_d)
            desc = np.argsort(-Lr, kind="stable")[:3]
            asc = np.argsort(Lr, kind="stable")[:3]
            other_max = np.full(len(src), -np.inf)
            other_min = np.full(len(src), np.inf)
            for t in range(len(desc) - 1, -1, -1):  # first valid of the top-3 wins
                ok = (desc[t] != src) & (desc[t] != dst)
                other_max = np.where(ok, Lr[desc[t]], other_max)
                ok = (asc[t] != src) & (asc[t] != dst)
                other_min = np.where(ok, Lr[asc[t]], other_min)
            spreads.append(np.maximum(mx, other_max) - np.minimum(mn, other_min))
        means = np.broadcast_to(L.mean(axis=1)[:, None], (len(self.ks), len(src)))
        return self._combine(np.stack(spreads), means)

    def add(self, item: int, channel: int) -> None:
        self.loads[:, channel] += self.w[:, item]

    def transfer(self, item: int, src: int, dst: int) -> None:
        self.loads[:, src] -= self.w[:, item]
        self.loads[:, dst] += self.w[:, item]


# ---------------------------------------------------------------------------- construction
def _first_best(values: np.ndarray, lowest: bool = True) -> int:
    """Flat index of the first value within ``1e-12`` (relative) of the best one.

    Ties are broken by position, and floating-point noise (e.g. ``0.35 + 0.05 != 0.4``)
    does not count as a difference.
    """
    flat = values.ravel()
    if not lowest:
        flat = -flat
    best = float(flat.min())
    return int(np.argmax(flat <= best + _IMPROVE_TOL * max(1.0, abs(best))))


@dataclass
class BuildInfo:
    """What one construction did.

    Attributes:
        algorithm: ``scan``, ``redist`` or ``readj``.
        num_channels: ``N`` of the new function.
        delta: eq. 17's threshold.
        delta_refined: Threshold used to select the explicit items (after post-processing).
        tracked: Explicit items ``|D_p^(t+1)|``.
        dropped: Items no longer tracked ``|D_o^(t+1)|``.
        steps: Placements (scan, redist) or readjustments applied (readj).
        migration: Final ``m`` (the numerator of eq. 18, in ``beta_s`` units).
        ideal_migration: ``m_bar``.
        rho: Final balance penalty of the explicit items.
        rho_start: Balance penalty of the same items where the old function put them
            (channels that no longer exist replaced by the new consistent hash).
        utility: Final utility.
        seconds: Wall time of the construction.
        trace: The steps in order, as item hashes and channels: ``(item, channel)`` per
            placement (scan, redist) or ``(item1, from, to, item2 or None)`` per
            readjustment (readj).
    """

    algorithm: str
    num_channels: int
    delta: float
    delta_refined: float
    tracked: int
    dropped: int
    steps: int = 0
    migration: float = 0.0
    ideal_migration: float = 0.0
    rho: float = 0.0
    rho_start: float = 0.0
    utility: float = 0.0
    seconds: float = 0.0
    trace: list[tuple[Any, ...]] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The info as a JSON-friendly dict (without the trace)."""
        return {k: v for k, v in self.__dict__.items() if k != "trace"}


def _as_freqs(freqs: Mapping[int, float] | tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(freqs, Mapping):
        h = np.fromiter((int(k) for k in freqs), dtype=np.uint32, count=len(freqs))
        f = np.fromiter((float(v) for v in freqs.values()), dtype=np.float64, count=len(freqs))
    else:
        h = np.asarray(freqs[0]).astype(np.uint32)
        f = np.asarray(freqs[1], dtype=np.float64)
    if h.shape != f.shape:
        raise ConfigError("item hashes and frequencies must be aligned")
    if len(np.unique(h)) != len(h):
        raise ConfigError("item hashes must be distinct (sum the frequencies of repeated hashes)")
    if len(f) and (not np.isfinite(f).all() or f.min() < 0):
        raise ConfigError("item frequencies must be finite and >= 0")
    return h, f


def select_tracked(params: GedikParams, num_channels: int, f: np.ndarray, eps: float = 0.0) -> tuple[np.ndarray, float, float]:
    """``D_p``: the items with ``f >= delta' - eps`` (``eps`` = lossy-counting slack).

    Returns:
        ``(boolean mask over f, delta, delta')``.
    """
    delta = frequency_threshold(params, num_channels)
    if not math.isfinite(delta):
        return np.zeros(len(f), bool), delta, delta
    first = f >= delta - eps
    refined = refined_threshold(params, num_channels, f[first])
    mask = (f >= refined - eps) & (f > 0)
    return mask, delta, refined


def construct(freqs: Mapping[int, float] | tuple[np.ndarray, np.ndarray], old: PartitionFunction | None,
              num_channels: int, algorithm: str = "readj", params: GedikParams | None = None,
              eps: float = 0.0, version: int | None = None) -> tuple[PartitionFunction, BuildInfo]:
    """Builds ``p^(t+1)`` from ``p^(t)`` and item frequencies (section 4.2).

    Args:
        freqs: Relative frequencies of the candidate items (``{hash: f}`` or
            ``(hashes, f)``), e.g. the lossy counter's output. Items of the old explicit
            hash missing here count with ``f = 0``.
        old: ``p^(t)`` (None: a plain consistent hash with ``num_channels`` channels, i.e.
            no previous explicit hash).
        num_channels: ``N^(t+1)``.
        algorithm: ``scan``, ``redist`` or ``readj``.
        params: Parameters (default :class:`GedikParams`).
        eps: Items with ``f >= delta' - eps`` are tracked (0 for exact frequencies).
        version: Version of the result (default ``old.version + 1``, or 0).

    Returns:
        ``(the new function, BuildInfo)``.

    Raises:
        ConfigError: On an unknown algorithm or malformed input.
    """
    started = time.perf_counter()
    params = params or GedikParams()
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"unknown Gedik algorithm {algorithm!r}; use one of {', '.join(ALGORITHMS)}")
    N = check_int_option("num_channels", num_channels, 1, "gedik")
    if version is None:
        version = old.version + 1 if old is not None else 0
    if old is None:
        old = PartitionFunction(N, params.replicas)
    h_all, f_all = _as_freqs(freqs)
    mask, delta, refined = select_tracked(params, N, f_all, eps)
    new_h, new_f = h_all[mask], f_all[mask]
    order = np.lexsort((new_h, -new_f))  # decreasing frequency, ties by hash
    new_h, new_f = new_h[order], new_f[order]
    # D_o: old explicit items not tracked any more, with their known frequency (else 0)
    o_h = old.explicit_hashes[~np.isin(old.explicit_hashes, new_h)]
    o_f = np.zeros(len(o_h))
    if len(h_all) and len(o_h):
        srt = np.argsort(h_all)
        pos = np.minimum(np.searchsorted(h_all[srt], o_h), len(h_all) - 1)
        known = h_all[srt][pos] == o_h
        o_f[known] = f_all[srt[pos[known]]]
    new_fn_ring = consistent_hash(N, params.replicas)
    bs_o = params.beta(0, o_f)
    m = float(np.sum(bs_o * (old.lookup_batch(o_h) != new_fn_ring.lookup_batch(o_h))))
    bs = params.beta(0, new_f)
    mbar = (float(bs.sum()) + float(bs_o.sum())) / N
    prev = old.lookup_batch(new_h).astype(np.int64)  # p^(t)(d)
    info = BuildInfo(algorithm, N, delta, refined, len(new_h), len(o_h), ideal_migration=mbar)
    bal = _Balance(params, N, params.weights(new_f))
    U = params.utility
    inv_mbar = 1.0 / mbar if mbar > 0 else 0.0
    start = np.where(prev < N, prev, new_fn_ring.lookup_batch(new_h)).astype(np.int64)
    before = _Balance(params, N, params.weights(new_f))
    for i, ch in enumerate(start.tolist()):
        before.add(i, ch)
    info.rho_start = before.rho()
    trace: list[tuple[int, ...]] = []
    if algorithm == "scan":
        assign, m = _scan(bal, U, bs, prev, m, inv_mbar, trace)
    elif algorithm == "redist":
        assign, m = _redist(bal, U, bs, new_f, prev, m, inv_mbar, trace)
    else:
        bal = before
        m += float(np.sum(bs * (start != prev)))
        assign, m = _readj(bal, U, bs, new_f, prev, start, m, inv_mbar, params.max_moves,
                           params.readj_requires_gain, trace)
    hl = new_h.tolist()
    info.trace = [(hl[t[0]], *t[1:3], hl[t[3]] if t[3] >= 0 else None) if len(t) == 4 else (hl[t[0]], t[1])
                  for t in trace]
    steps = len(trace)
    pf = PartitionFunction(N, params.replicas, new_h, assign.astype(np.int32), version)
    info.steps = steps  # placements (scan, redist) or readjustments (readj)
    info.migration = m
    info.rho = bal.rho()
    info.utility = float(utility(U, info.rho, m * inv_mbar))
    info.seconds = time.perf_counter() - started
    logger.debug("gedik %s: N=%d tracked=%d delta=%.3g steps=%d rho=%.3f gamma=%.3f (%.3fs)", algorithm, N,
                 info.tracked, refined, steps, info.rho, m * inv_mbar, info.seconds)
    return pf, info


def build_partition(freqs: Mapping[int, float] | tuple[np.ndarray, np.ndarray], old: PartitionFunction | None,
                    num_channels: int, algorithm: str = "readj", params: GedikParams | None = None,
                    eps: float = 0.0, version: int | None = None) -> PartitionFunction:
    """:func:`construct` without the :class:`BuildInfo`."""
    return construct(freqs, old, num_channels, algorithm, params, eps, version)[0]


def _scan(bal: _Balance, U: str, bs: np.ndarray, prev: np.ndarray, m: float,
          inv_mbar: float, trace: list[tuple[int, ...]]) -> tuple[np.ndarray, float]:
    """Algorithm 2 (items already sorted by decreasing frequency)."""
    n, N = len(bs), bal.N
    assign = np.zeros(n, dtype=np.int64)
    ch = np.arange(N)
    for i in range(n):
        rho = bal.rho_after_add(np.array([i]))[0]
        gamma = (m + bs[i] * (ch != prev[i])) * inv_mbar
        j = _first_best(utility(U, rho, gamma))
        m += float(bs[i]) * (j != prev[i])
        bal.add(i, j)
        assign[i] = j
        trace.append((i, j))
    return assign, m


def _redist(bal: _Balance, U: str, bs: np.ndarray, f: np.ndarray, prev: np.ndarray, m: float,
            inv_mbar: float, trace: list[tuple[int, ...]]) -> tuple[np.ndarray, float]:
    """Algorithm 3: best utility per frequency over all unplaced items and channels."""
    n, N = len(bs), bal.N
    assign = np.zeros(n, dtype=np.int64)
    left = np.arange(n)
    ch = np.arange(N)
    while len(left):
        rho = bal.rho_after_add(left)  # (C, N)
        gamma = (m + bs[left][:, None] * (ch[None, :] != prev[left][:, None])) * inv_mbar
        u = utility(U, rho, gamma) / f[left][:, None]
        c, j = divmod(_first_best(u), N)
        i = int(left[c])
        m += float(bs[i]) * (j != prev[i])
        bal.add(i, j)
        assign[i] = j
        trace.append((i, j))
        left = np.delete(left, c)
    return assign, m


def _readj(bal: _Balance, U: str, bs: np.ndarray, f: np.ndarray, prev: np.ndarray, start: np.ndarray,
           m: float, inv_mbar: float, max_moves: int, requires_gain: bool,
           trace: list[tuple[int, ...]]) -> tuple[np.ndarray, float]:
    """Algorithm 4: best-gain moves and swaps that lower ``rho``, from the old placement."""
    n, N = len(bs), bal.N
    assign = start.copy()
    moved = np.zeros(n, dtype=np.int64)
    if n == 0 or N == 1:
        return assign, m
    ch = np.arange(N)
    while True:
        rho_cur = bal.rho()
        u_cur = float(utility(U, rho_cur, m * inv_mbar))
        free = np.nonzero(moved < max_moves)[0]
        if len(free) == 0:
            break
        # moves <i = assign[a], a, j, -->
        ma = np.repeat(free, N)
        mj = np.tile(ch, len(free))
        keep = mj != assign[ma]
        ma, mj = ma[keep], mj[keep]
        # swaps <i = assign[a], a, j = assign[b], b>, a < b
        if len(free) > 1:
            sa, sb = np.triu_indices(len(free), k=1)
            sa, sb = free[sa], free[sb]
            keep = assign[sa] != assign[sb]
            sa, sb = sa[keep], sb[keep]
        else:
            sa = sb = np.zeros(0, dtype=np.int64)
        a = np.concatenate([ma, sa])
        src = assign[a]
        dst = np.concatenate([mj, assign[sb]])
        has_b = np.concatenate([np.zeros(len(ma), bool), np.ones(len(sb), bool)])
        b = np.concatenate([np.zeros(len(ma), np.int64), sb])
        if len(a) == 0:
            break
        dw = bal.w[:, a] - np.where(has_b, bal.w[:, b], 0.0)
        rho_new = bal.rho_after_transfer(src, dst, dw)
        ok = rho_new < rho_cur - _IMPROVE_TOL * max(1.0, rho_cur)
        df = np.abs(f[a] - np.where(has_b, f[b], 0.0))
        ok &= df > 0
        if not ok.any():
            break
        # eq. 22: migration change
        mig = bs[a] * ((prev[a] == src).astype(float) - (prev[a] == dst))
        mig += np.where(has_b, bs[b] * ((prev[b] == dst).astype(float) - (prev[b] == src)), 0.0)
        u_new = utility(U, rho_new, (m + mig) * inv_mbar)
        if requires_gain:
            ok &= u_new < u_cur - _IMPROVE_TOL * max(1.0, abs(u_cur))
            if not ok.any():
                break
        with np.errstate(divide="ignore", invalid="ignore"):
            gain = np.where(ok, (u_cur - u_new) / np.where(ok, df, 1.0), -np.inf)
        best = _first_best(gain, lowest=False)
        x, i, j = int(a[best]), int(src[best]), int(dst[best])
        bal.transfer(x, i, j)
        assign[x] = j
        moved[x] += 1
        y = -1
        if has_b[best]:
            y = int(b[best])
            bal.transfer(y, j, i)
            assign[y] = i
            moved[y] += 1
        m += float(mig[best])
        trace.append((x, i, j, y))
    return assign, m


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


# ---------------------------------------------------------------------------- the policy
class GedikRouter(Router):
    """Routes by the partition function snapshot (Algorithm 1, vectorised)."""

    def route(self, hashes: np.ndarray, snapshot: PartitionFunction) -> np.ndarray:
        return snapshot.lookup_batch(hashes)


class GedikPlanner(Planner):
    """Sliding lossy counters fed by key reports; rebuilds every ``period`` records.

    Attributes:
        counter: The :class:`~dpa.sketches.SlidingLossyCounter` (None with one reducer).
        builds: :class:`BuildInfo` of every construction run.
    """

    def __init__(self, policy: GedikPolicy, num_reducers: int) -> None:
        self.policy = policy
        self.params = policy.params
        self.N = int(num_reducers)
        self.queue_lengths = [0] * self.N
        self._snapshot = policy.initial_snapshot(self.N)
        self.delta = frequency_threshold(self.params, self.N)
        self.epsilon = policy.eps_ratio * self.delta if math.isfinite(self.delta) else 0.0
        self.counter = (SlidingLossyCounter(policy.window or policy.period, self.epsilon, policy.counters)
                        if math.isfinite(self.delta) else None)
        self.since_build = 0
        self.builds: list[BuildInfo] = []

    @property
    def snapshot(self) -> PartitionFunction:
        return self._snapshot

    def observe(self, reducer: int, queue_length: int, version: int) -> None:
        if 0 <= reducer < self.N:
            self.queue_lengths[reducer] = int(queue_length)

    def observe_keys(self, reducer: int, hashes: np.ndarray, counts: np.ndarray, total: int) -> None:
        total = int(total)
        if self.counter is not None:
            self.counter.update(hashes, counts, max(total, int(np.sum(counts))))
        self.since_build += total

    def rebuild(self) -> tuple[PartitionFunction, BuildInfo] | None:
        """Runs the construction on the current frequencies (None with one reducer)."""
        if self.counter is None or self.counter.active.n == 0:
            return None
        freqs = self.counter.frequencies(self.delta)
        pf, info = construct(freqs, self._snapshot, self.N, self.policy.algorithm, self.params,
                             eps=self.epsilon, version=self._snapshot.version + 1)
        self.builds.append(info)
        return pf, info

    def check(self, now: float) -> list[Decision]:
        if self.since_build < self.policy.period:
            return []
        self.since_build = 0
        built = self.rebuild()
        if built is None:
            return []
        pf, info = built
        if pf.same_mapping(self._snapshot):
            return []
        t = self.policy.rho_threshold
        same_items = np.array_equal(pf.explicit_hashes, self._snapshot.explicit_hashes)
        if t is not None and same_items and not (info.rho_start > t and info.rho < info.rho_start):
            return []  # same explicit items, still balanced enough: keep the current placement
        self._snapshot = pf
        seen = tuple(self.queue_lengths)
        reducer = int(np.argmax(seen)) if seen else 0
        event = RebalanceEvent(now, reducer, f"gedik-{self.policy.algorithm}", seen, pf.explicit_counts(),
                               pf.version)
        logger.info("gedik-%s: v%d, %d explicit items (delta=%.3g), rho=%.3f", self.policy.algorithm,
                    pf.version, info.tracked, info.delta_refined, info.rho)
        return [Decision(pf, event)]


@dataclass(frozen=True)
class GedikPolicy(PolicySpec):
    """Gedik's consistent + explicit hash, rebuilt from sliding lossy counters.

    Args:
        algorithm: ``scan``, ``redist`` or ``readj``.
        alpha, sigma, resources, utility, replicas, domain_size, max_moves,
            readj_requires_gain: See :class:`GedikParams`.
        period: Records observed (via key reports) between constructions.
        window: Sliding window ``W`` of the lossy counters in records (default ``period``).
        counters: Lossy counters of the sliding window emulation (the paper's 3).
        eps_ratio: Lossy counting error as a fraction of ``delta`` (``0 < eps_ratio < 1``).
        rho_threshold: None (default): publish whenever the explicit table changes. A
            number ``t > 0``: when the explicit items are the same as before, publish a new
            placement only if the current one's balance penalty on the new frequencies
            (:attr:`BuildInfo.rho_start`) exceeds ``t`` and the new one is lower; ``t = 1``
            means "only when the explicit items break the eq. 14 tolerance". This keeps
            noise in the frequency estimates from moving keys back and forth every period
            (not in the paper, whose constructions run when the number of channels changes).
    """

    routes_by_key = True
    moves_keys = True
    wants_key_stats = True

    algorithm: str = "readj"
    alpha: float | tuple[float, float, float] = 1.2
    sigma: float = 0.1
    resources: str = "LCL"
    utility: str = "APM"
    replicas: int = 1000
    domain_size: int = 1_000_000
    max_moves: int = 5
    readj_requires_gain: bool = False
    period: int = 50_000
    window: int | None = None
    counters: int = 3
    eps_ratio: float = 0.1
    rho_threshold: float | None = None
    params: GedikParams = field(init=False, repr=False, compare=False, default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ConfigError(f"unknown Gedik algorithm {self.algorithm!r}; use one of {', '.join(ALGORITHMS)}")
        alpha = tuple(self.alpha) if isinstance(self.alpha, list) else self.alpha
        object.__setattr__(self, "alpha", alpha)
        object.__setattr__(self, "params", GedikParams(alpha, self.sigma, self.resources, self.utility,
                                                       self.replicas, self.domain_size, self.max_moves,
                                                       self.readj_requires_gain))
        check_int_option("period", self.period, 1, self.name)
        if self.window is not None:
            check_int_option("window", self.window, 1, self.name)
        check_int_option("counters", self.counters, 2, self.name)
        e = self.eps_ratio
        if isinstance(e, bool) or not isinstance(e, (int, float)) or not 0 < e < 1:
            raise ConfigError(f"policy {self.name!r}: eps_ratio must be in (0, 1) (the paper's 0.1), got {e!r}")
        t = self.rho_threshold
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0):
            raise ConfigError(f"policy {self.name!r}: rho_threshold must be None or > 0, e.g. 1.0, got {t!r}")

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"gedik-{self.algorithm}"

    def initial_snapshot(self, num_reducers: int) -> PartitionFunction:
        return PartitionFunction(num_reducers, self.replicas)

    def make_router(self, mapper_id: int, num_reducers: int) -> Router:
        return GedikRouter()

    def owners(self, snapshot: PartitionFunction, hashes: np.ndarray) -> np.ndarray:
        return snapshot.lookup_batch(hashes)

    def make_planner(self, num_reducers: int) -> GedikPlanner:
        return GedikPlanner(self, num_reducers)


def _factory(algorithm: str):
    def build(cfg: JobConfig) -> PolicySpec:
        return GedikPolicy(algorithm, **cfg.policy_options)

    return build


register_policy("gedik-scan", _factory("scan"),
                "Gedik: consistent + explicit hash for frequent keys, scan construction")
register_policy("gedik-redist", _factory("redist"),
                "Gedik: consistent + explicit hash for frequent keys, redist construction")
register_policy("gedik-readj", _factory("readj"),
                "Gedik: consistent + explicit hash for frequent keys, readj (moves and swaps) construction")
