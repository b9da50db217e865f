"""Replay a key stream through a partitioning policy, without Ray, and measure balance.

:func:`simulate` reproduces the simulation set-up of the PKG paper (Nasir et al., section
6.1): a stream of keys is split round-robin over ``S`` sources (mappers), each source
routes its sub-stream to ``W`` workers (reducers) with its own router, and the load of
every worker is tracked over time. It uses the *same* policy objects as the dpa runtimes
(:meth:`~dpa.routing.policy.PolicySpec.make_router` per source, the planner and snapshots), so what
it measures is what a job would do, minus the data movement.

dpa has one simulator of its own jobs: the in-process runtime (``JobConfig(runtime="local")``,
:mod:`dpa.runtime.local`), which runs the real machines in virtual time with what each
message costs its receiver. This module is not a second one: it models the one thing the
runtime cannot, the papers' abstract time, counted in messages (message ``i`` arrives at
``i``, a worker serves ``service_rate`` messages per unit), under which the PKG, DKG and
Fang et al. figures are defined (their loads and imbalance sampled message by message,
any policy including those dpa's reducers do not run, no records processed), so that
those figures can be reproduced as published. For how a dpa job behaves (seconds, the
balancer's and coordinator's load, stragglers), use the in-process runtime.

Model:

* Time is counted in messages: message ``i`` (0-based) of the stream arrives at time
  ``i``; it belongs to source ``i % S``. Each source routes its sub-stream in batches of
  ``batch_size`` records (the runtime's input blocks). With ``shared_router=True`` one
  router routes the whole stream in arrival order instead (global knowledge).
* **Load** ``L_w(t)`` is the number of messages that arrived before ``t`` and are handled
  by worker ``w`` (the PKG paper's definition). With a rebalancing policy a message that is
  forwarded counts for the worker that finally processes it.
* **Queues** (only with ``service_rate``): every worker processes ``service_rate`` messages
  per unit of time (so ``W * service_rate`` is the system's capacity relative to the
  arrival rate), first in first out. The simulation advances one round at a time: every
  source routes one batch under the current snapshot, workers serve, report their queue
  lengths to the policy's planner (``observe``), which is checked every
  ``rebalance_interval`` messages (``check(now)`` with ``now`` in messages); a new snapshot
  is adopted at once by all routers and, for policies with owners, queued messages that
  changed owner are forwarded to the tail of their new owner's queue (like the
  reducers' eager forwarding in :mod:`dpa.engine`). Without ``service_rate`` no planner
  runs and every batch is routed under the initial snapshot.

Metrics (:class:`SimResult`):

* PKG: imbalance ``I(t) = max_w L_w(t) - mean_w L_w(t)`` sampled at ``num_samples`` evenly
  spaced times; ``imbalance_fraction = mean_t I(t) / mean_t mean_w L_w(t)`` (average imbalance
  as a fraction of the average load) and ``imbalance_per_message = mean_t I(t) / n``. The
  PKG paper's Table II and Figure 4 values are ``final_imbalance / n`` (``I(n) / n``): its
  unbalanced cells equal ``p1 / d - 1 / W``, twice ``imbalance_per_message`` for a linearly
  growing imbalance (see ``docs/experiments/pkg.md``).
* DPA: ``skew`` = the paper's ``S`` (:func:`dpa.metrics.skew`) of the final loads.
* DKG: ``stddev_pct``, the population standard deviation of the final loads in percent of
  all messages (eq. 7, the unit of its Table 3), and ``dist_cost = N_k / N_dk`` (eq. 8): the
  number of (key, worker) pairs holding state divided by the number of distinct keys
  (1 for key grouping, up to ``W`` for shuffle grouping).
* Fang et al.: ``max_over_avg`` of the final loads.
* Replication: workers holding each key, ``replication_mean`` (``= dist_cost``, the memory
  overhead of splitting) and ``replication_max``.

Keys are hashed exactly as a dpa job hashes a key column: integer ids as an ``int64``
column, strings as a string column (:func:`dpa.keys.encoding.hash_key_columns`), or passed as
ready-made 32-bit hashes with ``keys_are_hashes=True``. The whole simulation is
deterministic for given inputs and ``seed`` (passed to the policy as ``JobConfig.seed``).

Example (any integer or string key array will do; here a Zipf-like stream from numpy)::

    import numpy as np
    from dpa.tools.simulate import simulate
    keys = np.random.default_rng(0).zipf(1.2, 1_000_000) % 100_000
    print(simulate(keys, "pkg", num_sources=5, num_workers=10).summary())

Comparing policies from the command line: ``dpa simulate zipf --records 1M --z 1.2
--policy hash,pkg,dkg``, or ``python -m workloads.simulate_policies`` (the PKG paper's
set-up, one row per policy with its speed).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dpa.config import JobConfig
from dpa.engine.flow import top_key_counts
from dpa.errors import ConfigError
from dpa.keys.columns import hash_key_columns
from dpa.metrics import max_over_avg, skew
from dpa.routing.policy import PolicySettings, PolicySpec, RebalanceEvent
from dpa.routing.registry import make_policy

__all__ = ["SimResult", "simulate"]

#: ``simulate`` keyword arguments that are ``JobConfig`` fields rather than policy options.
_CONFIG_OPTIONS = ("tau", "max_rounds", "initial_tokens")


@dataclass
class SimResult:
    """What :func:`simulate` measured (see the module docstring for definitions).

    Attributes:
        policy: Policy name.
        num_messages: Messages replayed (``n``).
        num_sources: Sources ``S``.
        num_workers: Workers ``W``.
        loads: Final load of each worker.
        destinations: Worker that handled each message, in stream order.
        sample_times: Times ``t`` (messages so far) at which ``I(t)`` was sampled.
        imbalance_series: ``I(t)`` at each sample time.
        avg_imbalance: Mean of ``I(t)`` over the samples.
        imbalance_fraction: ``avg_imbalance`` / mean average load over the samples.
        imbalance_per_message: ``avg_imbalance / n`` (the PKG paper's Table II is
            ``final_imbalance / n``).
        final_imbalance: ``I(n)``.
        skew: DPA's ``S`` of the final loads.
        max_over_avg: Fang et al.'s ``max / mean`` of the final loads.
        stddev: Population standard deviation of the final loads (messages).
        stddev_pct: The same in percent of all messages (DKG's StdDev).
        dist_cost: DKG's DistCost ``N_k / N_dk``.
        replication_mean: Mean number of workers per key (equals ``dist_cost``).
        replication_max: Most workers holding one key.
        num_keys: Distinct keys.
        forwarded: Messages moved between queues after rebalances.
        events: The planner's rebalance events.
        peak_queue: Longest queue of each worker (with ``service_rate``).
        makespan: Time at which the last message is processed (with ``service_rate``).
        router_stats: Policy-specific counters summed over the routers (e.g. DKG's
            ``scale_outs`` and ``scale_downs``).
        migrated_keys: Keys already seen whose owner changed, summed over snapshot changes
            (the state a key-moving policy migrates; with ``service_rate``).
        migrated_load: The same weighted by each key's messages so far (state size when
            state grows with the messages of a key, e.g. Gedik's and Fang's migration cost).
        table_size: Entries of the final snapshot's explicit routing table, for policies
            whose snapshot has a ``table_size`` (Gedik's explicit hash, Fang's table,
            hybrid's hot keys).
        wall_time_s: Wall-clock time of the simulation.
    """

    policy: str
    num_messages: int
    num_sources: int
    num_workers: int
    loads: np.ndarray
    destinations: np.ndarray
    sample_times: np.ndarray
    imbalance_series: np.ndarray
    avg_imbalance: float
    imbalance_fraction: float
    imbalance_per_message: float
    final_imbalance: float
    skew: float
    max_over_avg: float
    stddev: float
    stddev_pct: float
    dist_cost: float
    replication_mean: float
    replication_max: int
    num_keys: int
    forwarded: int = 0
    events: list[RebalanceEvent] = field(default_factory=list)
    peak_queue: list[int] | None = None
    makespan: float | None = None
    router_stats: dict[str, int] = field(default_factory=dict)
    migrated_keys: int = 0
    migrated_load: int = 0
    table_size: int = 0
    wall_time_s: float = 0.0

    @property
    def messages_per_s(self) -> float:
        """Simulation speed (messages per wall-clock second)."""
        return self.num_messages / self.wall_time_s if self.wall_time_s > 0 else float("inf")

    def summary(self) -> dict[str, Any]:
        """Scalar metrics as a JSON-friendly dict (no per-message arrays)."""
        out: dict[str, Any] = {
            "policy": self.policy,
            "messages": self.num_messages,
            "sources": self.num_sources,
            "workers": self.num_workers,
            "keys": self.num_keys,
            "imbalance_fraction": self.imbalance_fraction,
            "imbalance_per_message": self.imbalance_per_message,
            "final_imbalance": self.final_imbalance,
            "skew": self.skew,
            "max_over_avg": self.max_over_avg,
            "stddev_pct": self.stddev_pct,
            "dist_cost": self.dist_cost,
            "replication_max": self.replication_max,
            "forwarded": self.forwarded,
            "rebalances": len(self.events),
            "migrated_keys": self.migrated_keys,
            "migrated_load": self.migrated_load,
            "table_size": self.table_size,
            "messages_per_s": self.messages_per_s,
        }
        if self.makespan is not None:
            out["makespan"] = self.makespan
        out.update(self.router_stats)
        return out


# ---------------------------------------------------------------------------- inputs
def _hash_and_code(keys: np.ndarray, keys_are_hashes: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """Returns (uint32 hash per message, int64 key code per message, number of keys)."""
    if keys_are_hashes:
        if keys.dtype.kind not in "iu":
            raise ConfigError(f"keys_are_hashes=True needs an integer array, got dtype {keys.dtype}")
        if len(keys) and (keys.min() < 0 or keys.max() >= 2**32):
            raise ConfigError("keys_are_hashes=True needs 32-bit hashes in [0, 2**32)")
        hashes = keys.astype(np.uint32)
        encoded = pc.dictionary_encode(pa.array(hashes))
        return hashes, np.asarray(encoded.indices, dtype=np.int64), len(encoded.dictionary)
    if keys.dtype.kind in "iu":
        if keys.dtype == np.uint64 and len(keys) and keys.max() > np.iinfo(np.int64).max:
            raise ConfigError("integer key ids must fit in int64")
        ids = keys.astype(np.int64)
        if len(ids) and int(ids.max()) - int(ids.min()) < max(4 * len(ids), 1 << 20):
            # Dense ids (the usual generated workloads): codes by a presence bitmap.
            low = int(ids.min())
            present = np.zeros(int(ids.max()) - low + 1, dtype=bool)
            present[ids - low] = True
            codes = (np.cumsum(present) - 1)[ids - low]
            distinct = np.flatnonzero(present) + low
            hashed = hash_key_columns(pa.table({"key": pa.array(distinct)}), ["key"])
            return hashed[codes], codes, len(distinct)
        arr = pa.array(ids)
    elif keys.dtype.kind in "UO":
        try:
            arr = pa.array(keys.tolist())
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise ConfigError(f"cannot convert keys to an Arrow column: {exc}") from exc
    else:
        raise ConfigError(f"keys must be integer ids, strings or hashes, got dtype {keys.dtype}")
    # Encode once; hash only the distinct keys (hash_key_columns would encode again).
    encoded = pc.dictionary_encode(arr, null_encoding="encode")
    codes = np.asarray(encoded.indices, dtype=np.int64)
    distinct = hash_key_columns(pa.table({"key": encoded.dictionary}), ["key"])
    return distinct[codes], codes, len(encoded.dictionary)


def _build_policy(policy: str | PolicySettings | PolicySpec, num_sources: int, num_workers: int, seed: int,
                  options: dict[str, Any], hashes: np.ndarray, batch_size: int) -> PolicySpec:
    if isinstance(policy, PolicySpec):
        if options:
            raise ConfigError("policy options are only accepted with a policy name, not a PolicySpec")
        return policy
    if not isinstance(policy, (str, PolicySettings)):
        raise ConfigError(f"policy must be a registered name, a policy settings object or a PolicySpec, got {policy!r}")
    opts = dict(options)
    cfg_kw = {k: opts.pop(k) for k in _CONFIG_OPTIONS if k in opts}
    if policy == "off-greedy" and "frequencies" not in opts:
        # The paper's Off-Greedy knows the key distribution of the whole stream.
        opts["frequencies"] = tuple(np.unique(hashes, return_counts=True))
    cfg = JobConfig(runtime="local").with_options(
        num_mappers=num_sources, num_reducers=num_workers, policy=policy, seed=seed, policy_options=opts,
        batch_size=batch_size, **cfg_kw)
    return make_policy(cfg)


def _check_positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"simulate: {name} must be an integer >= 1, got {value!r}")
    return int(value)


# ---------------------------------------------------------------------------- replay
def _replay_static(spec: PolicySpec, routers: list[Any], hashes: np.ndarray, S: int,
                   batch_size: int, W: int, probe_every: int | None = None) -> np.ndarray:
    """Routes every source's sub-stream under the initial snapshot (with optional probes)."""
    snapshot = spec.initial_snapshot(W)
    dest = np.empty(len(hashes), dtype=np.int64)
    if probe_every is None:
        for s, router in enumerate(routers):
            sub = hashes[s::S]
            out = np.empty(len(sub), dtype=np.int64)
            for i in range(0, len(sub), batch_size):
                out[i : i + batch_size] = router.route(sub[i : i + batch_size], snapshot)
            dest[s::S] = out
        return dest
    n = len(hashes)
    totals = np.zeros(W, dtype=np.int64)
    for a in range(0, n, probe_every):
        b = min(n, a + probe_every)
        for s, router in enumerate(routers):
            idx = np.arange(a + (s - a) % S, b, S)
            for i in range(0, len(idx), batch_size):
                sel = idx[i : i + batch_size]
                dest[sel] = router.route(hashes[sel], snapshot)
        totals += np.bincount(dest[a:b], minlength=W)
        for router in routers:  # the probe: every source's estimate := the true loads
            if hasattr(router, "loads"):
                router.loads = totals.copy() if isinstance(router.loads, np.ndarray) else totals.tolist()
    return dest


@dataclass
class _Queues:
    """FIFO queues of message indices per worker, with fractional service budgets."""

    num_workers: int
    queues: list[deque[np.ndarray]] = field(default_factory=list)
    lengths: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    budget: np.ndarray = field(default_factory=lambda: np.zeros(0))
    peak: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __post_init__(self) -> None:
        self.queues = [deque() for _ in range(self.num_workers)]
        self.lengths = np.zeros(self.num_workers, dtype=np.int64)
        self.budget = np.zeros(self.num_workers)
        self.peak = np.zeros(self.num_workers, dtype=np.int64)

    def push(self, w: int, items: np.ndarray) -> None:
        if len(items):
            self.queues[w].append(items)
            self.lengths[w] += len(items)

    def note_peaks(self) -> None:
        np.maximum(self.peak, self.lengths, out=self.peak)

    def serve(self, capacity: float) -> None:
        """Each worker processes up to its budget (``capacity`` plus the carried fraction)."""
        for w in range(self.num_workers):
            cap = self.budget[w] + capacity
            take = min(int(cap), int(self.lengths[w]))
            self.budget[w] = cap - int(cap) if self.lengths[w] > take else 0.0
            self.lengths[w] -= take
            q = self.queues[w]
            while take:
                head = q[0]
                if len(head) <= take:
                    q.popleft()
                    take -= len(head)
                else:
                    q[0] = head[take:]
                    take = 0

    def drain(self, w: int) -> np.ndarray:
        q = self.queues[w]
        items = np.concatenate(list(q)) if q else np.zeros(0, dtype=np.int64)
        q.clear()
        self.lengths[w] = 0
        return items


@dataclass
class _Migration:
    """State moved by snapshot changes: keys seen so far whose owner changed."""

    moved_keys: int = 0
    moved_load: int = 0
    changes: int = 0

    def account(self, spec: PolicySpec, old: Any, new: Any, seen: np.ndarray, W: int) -> None:
        """Counts the keys among the first messages ``seen`` whose owner differs between snapshots."""
        if not len(seen):
            return
        keys, counts = np.unique(seen, return_counts=True)
        before, after = spec.owners(old, keys), spec.owners(new, keys)
        if before is None or after is None:
            return
        moved = np.asarray(before) != np.asarray(after)
        self.changes += 1
        self.moved_keys += int(moved.sum())
        self.moved_load += int(counts[moved].sum())


def _replay_queued(spec: PolicySpec, routers: list[Any], hashes: np.ndarray, S: int,
                   batch_size: int, W: int, service_rate: float,
                   rebalance_interval: int) -> tuple[np.ndarray, int, list[RebalanceEvent], list[int], float, Any, _Migration]:
    """Round-by-round replay with queues, planner and forwarding (see the module docstring)."""
    n = len(hashes)
    snapshot = spec.initial_snapshot(W)
    planner = spec.make_planner(W)
    if planner is not None:
        snapshot = planner.snapshot
    has_owners = spec.owners(snapshot, np.zeros(0, dtype=np.uint32)) is not None
    key_stats = planner is not None and spec.wants_key_stats
    held = np.zeros(W, dtype=np.int64)  # messages routed to each worker, after forwarding
    dest = np.empty(n, dtype=np.int64)
    queues = _Queues(W)
    events: list[RebalanceEvent] = []
    migration = _Migration()
    forwarded = 0
    round_size = S * batch_size
    last_check = 0
    t = 0
    while t < n:
        end = min(n, t + round_size)
        positions = np.arange(t, end, dtype=np.int64)
        for s, router in enumerate(routers):
            pos = positions[(positions % S) == s]
            if len(pos):
                dest[pos] = router.route(hashes[pos], snapshot)
        step_dest = dest[t:end]
        order = np.argsort(step_dest, kind="stable")
        bounds = np.searchsorted(step_dest[order], np.arange(W + 1))
        for w in range(W):
            items = positions[order[bounds[w] : bounds[w + 1]]]
            queues.push(w, items)
            if key_stats and len(items):
                planner.observe_keys(w, *top_key_counts(hashes[items], None, spec.key_stats_top))
                held[w] += len(items)
                planner.observe_held(w, int(held[w]))
        queues.note_peaks()
        queues.serve(service_rate * (end - t))
        t = end
        if planner is None:
            continue
        for w in range(W):
            planner.observe(w, int(queues.lengths[w]), snapshot.version)
        if t - last_check < rebalance_interval:
            continue
        last_check = t
        for decision in planner.check(float(t)):
            events.append(decision.event)
            if decision.snapshot is None:
                continue
            if has_owners:
                migration.account(spec, snapshot, decision.snapshot, hashes[:t], W)
            previous, snapshot = snapshot, decision.snapshot
            if has_owners:
                for w in range(W):
                    items = queues.drain(w)
                    if not len(items):
                        continue
                    target = spec.destinations(snapshot, hashes[items], w, True, previous)
                    owner = np.full(len(items), w, np.int64) if target is None else np.asarray(target, np.int64)
                    if target is not None:
                        owner = spec.handover(snapshot, hashes[items], owner, w)
                    moved = owner != w
                    forwarded += int(moved.sum())
                    dest[items[moved]] = owner[moved]
                    held[w] -= int(moved.sum())
                    held += np.bincount(owner[moved], minlength=W)
                    queues.push(w, items[~moved])
                    for r in np.unique(owner[moved]).tolist():
                        queues.push(r, items[moved & (owner == r)])
                queues.note_peaks()
            for w in range(W):
                planner.observe(w, int(queues.lengths[w]), snapshot.version)
    makespan = float(n) + float(queues.lengths.max()) / service_rate if W else float(n)
    return dest, forwarded, events, queues.peak.tolist(), makespan, snapshot, migration


# ---------------------------------------------------------------------------- metrics
def _imbalance_series(dest: np.ndarray, W: int, num_samples: int) -> tuple[np.ndarray, np.ndarray]:
    n = len(dest)
    k = max(1, min(num_samples, n))
    ends = np.unique(np.ceil(np.arange(1, k + 1) * (n / k)).astype(np.int64))
    seg = np.repeat(np.arange(len(ends)), np.diff(np.concatenate(([0], ends))))
    counts = np.bincount(seg * W + dest, minlength=len(ends) * W).reshape(len(ends), W)
    loads = np.cumsum(counts, axis=0)
    return ends, loads.max(axis=1) - ends / W


def _replication(codes: np.ndarray, dest: np.ndarray, num_keys: int, W: int) -> np.ndarray:
    """Number of distinct workers that handled each key."""
    if num_keys * W <= 20_000_000:
        held = np.zeros((num_keys, W), dtype=bool)
        held[codes, dest] = True
        return held.sum(axis=1)
    pairs = np.unique(codes * W + dest)
    return np.bincount(pairs // W, minlength=num_keys)


def simulate(keys: Any, policy: str | PolicySettings | PolicySpec, num_sources: int = 1, num_workers: int = 10,
             seed: int = 0, service_rate: float | None = None, rebalance_interval: int | None = None,
             *, batch_size: int = 4096, num_samples: int = 1000, keys_are_hashes: bool = False,
             shared_router: bool = False, probe_every: int | None = None, **policy_options: Any) -> SimResult:
    """Replays ``keys`` through ``num_sources`` routers of ``policy`` to ``num_workers`` workers.

    Args:
        keys: The key stream in arrival order: integer key ids, strings, or 32-bit hashes
            with ``keys_are_hashes=True`` (array-like).
        policy: A registered policy name (:func:`dpa.policies`), a policy settings object
            (e.g. ``dpa.PKGSettings(d=3)``) or a :class:`PolicySpec`.
        num_sources: Sources ``S`` (mappers); message ``i`` goes to source ``i % S``.
        num_workers: Workers ``W`` (reducers).
        seed: ``JobConfig.seed`` for the policy (e.g. shuffle's start offsets).
        service_rate: Messages each worker processes per arrival; enables the queue model
            and the policy's planner (e.g. ``halving``/``doubling``). None = no queues.
        rebalance_interval: Messages between planner checks (default: every round of
            ``num_sources * batch_size`` messages).
        batch_size: Records per routed batch of each source.
        num_samples: Number of times ``I(t)`` is sampled.
        keys_are_hashes: Treat ``keys`` as ready-made 32-bit key hashes.
        shared_router: All sources share one router that sees the whole stream in arrival
            order: global knowledge instead of per-source state. This is the PKG paper's
            global load oracle ("G") for ``pkg``, and the coordinated key tables its
            simulations assume for ``potc`` and ``on-greedy`` (which a dpa job, whose
            mappers decide independently, cannot have).
        **policy_options: Policy options (``policy_options`` of the ``JobConfig``), plus the
            ``JobConfig`` fields ``tau``, ``max_rounds`` and ``initial_tokens``. For
            ``off-greedy`` without ``frequencies`` the exact frequencies of ``keys`` are
            passed (the paper's offline oracle).

    Returns:
        A :class:`SimResult`.

    Raises:
        ConfigError: Bad arguments or policy options.
    """
    started = time.perf_counter()
    S = _check_positive_int("num_sources", num_sources)
    W = _check_positive_int("num_workers", num_workers)
    batch_size = _check_positive_int("batch_size", batch_size)
    num_samples = _check_positive_int("num_samples", num_samples)
    if service_rate is not None and not (isinstance(service_rate, (int, float)) and service_rate > 0):
        raise ConfigError(f"simulate: service_rate must be a number > 0 or None, got {service_rate!r}")
    if probe_every is not None:
        probe_every = _check_positive_int("probe_every", probe_every)
        if service_rate is not None:
            raise ConfigError("simulate: probe_every applies without service_rate (no queue model) only")
    interval = S * batch_size if rebalance_interval is None else _check_positive_int(
        "rebalance_interval", rebalance_interval)
    keys = np.asarray(keys)
    if keys.ndim != 1:
        raise ConfigError(f"simulate: keys must be one-dimensional, got shape {keys.shape}")
    hashes, codes, num_keys = _hash_and_code(keys, keys_are_hashes)
    spec = _build_policy(policy, S, W, seed, policy_options, hashes, batch_size)
    if shared_router:  # global knowledge: one router sees the whole stream in order
        routers, S_route, batch_route = [spec.make_router(0, W)], 1, S * batch_size
    else:
        routers = [spec.make_router(s, W) for s in range(S)]
        S_route, batch_route = S, batch_size
    n = len(hashes)

    events: list[RebalanceEvent] = []
    forwarded, peak, makespan = 0, None, None
    final_snapshot, migration = spec.initial_snapshot(W), _Migration()
    if service_rate is None:
        dest = _replay_static(spec, routers, hashes, S_route, batch_route, W, probe_every)
    else:
        dest, forwarded, events, peak, makespan, final_snapshot, migration = _replay_queued(
            spec, routers, hashes, S_route, batch_route, W, float(service_rate), interval)

    if len(dest) and (dest.min() < 0 or dest.max() >= W):
        raise RuntimeError(f"policy {spec.name!r} routed outside [0, {W})")  # contract violation
    loads = np.bincount(dest, minlength=W)
    if n:
        times, series = _imbalance_series(dest, W, num_samples)
        avg_imb = float(series.mean())
        fraction = avg_imb / float((times / W).mean())
        per_msg = avg_imb / n
        final = float(series[-1])
        rep = _replication(codes, dest, num_keys, W)
        rep_mean, rep_max = float(rep.mean()), int(rep.max())
    else:
        times, series = np.zeros(0, np.int64), np.zeros(0)
        avg_imb = fraction = per_msg = final = rep_mean = 0.0
        rep_max = 0
    pct = loads * (100.0 / n) if n else loads.astype(float)
    stats: dict[str, int] = {}
    for name in ("scale_outs", "scale_downs"):
        if all(hasattr(r, name) for r in routers):
            stats[name] = int(sum(getattr(r, name) for r in routers))
    return SimResult(
        policy=spec.name, num_messages=n, num_sources=S, num_workers=W,
        loads=loads, destinations=dest.astype(np.int32), sample_times=times,
        imbalance_series=series, avg_imbalance=avg_imb, imbalance_fraction=fraction,
        imbalance_per_message=per_msg, final_imbalance=final,
        skew=skew(loads.tolist()), max_over_avg=max_over_avg(loads.tolist()),
        stddev=float(loads.std()), stddev_pct=float(pct.std()),
        dist_cost=rep_mean, replication_mean=rep_mean, replication_max=rep_max,
        num_keys=num_keys, forwarded=forwarded, events=events, peak_queue=peak,
        makespan=makespan, router_stats=stats, migrated_keys=migration.moved_keys,
        migrated_load=migration.moved_load, table_size=int(getattr(final_snapshot, "table_size", 0)),
        wall_time_s=time.perf_counter() - started,
    )
