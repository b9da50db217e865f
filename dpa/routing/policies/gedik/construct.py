"""Gedik's constructions ``scan``, ``redist`` and ``readj`` (Algorithms 2-4) with their
balance and migration penalties and utilities (section 4.3). Pure functions, no runtime.

Choices where the paper is vague (details in ``docs/policies/gedik.md``): readj follows
the pseudo-code (the best-gain readjustment among those that strictly lower ``rho``, even
with a negative gain; ``readj_requires_gain=True`` also asks ``U`` to drop) and measures
the gain per frequency moved; values within ``1e-12`` (relative) of the best are ties;
ties go to the more frequent item, then the lowest channel, moves before swaps.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpa.errors import ConfigError
from dpa.routing.policies.common import check_int_option
from dpa.routing.policies.gedik.model import (
    UTILITIES,
    GedikParams,
    PartitionFunction,
    consistent_hash,
    frequency_threshold,
    refined_threshold,
    theta,
)

__all__ = ["ALGORITHMS", "BuildInfo", "build_partition", "construct", "select_tracked", "utility"]

ALGORITHMS = ("scan", "redist", "readj")
_IMPROVE_TOL = 1e-12

logger = logging.getLogger(__name__)


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
