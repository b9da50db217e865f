"""Live job metrics exported through ``ray.util.metrics`` (Ray dashboard / Prometheus).

Ray exports each metric with a ``ray_`` prefix on every node's metrics endpoint (the
port in ``ray.nodes()[i]["MetricsExportPort"]``), which the dashboard's Grafana charts
read through Prometheus. Ray silently drops metric names with dots or dashes, so every
name here uses underscores (a unit test checks this).

Every metric is tagged with ``job_id``; per-actor metrics also with ``reducer`` or
``mapper``. This module imports Ray and is used only by the actor shells.
"""

from __future__ import annotations

import re
from typing import Any

from ray.util.metrics import Counter, Gauge

#: name -> (kind, description, tag keys)
METRICS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "dpa_queue_length": ("gauge", "Records waiting in a reducer's queue", ("job_id", "reducer")),
    "dpa_records_processed": ("counter", "Records processed by a reducer", ("job_id", "reducer")),
    "dpa_records_forwarded": ("counter", "Records a reducer forwarded to the key's new owner", ("job_id", "reducer")),
    "dpa_tokens_owned": ("gauge", "Ring tokens owned by a reducer", ("job_id", "reducer")),
    "dpa_ring_version": ("gauge", "Routing-state version seen by the balancer", ("job_id",)),
    "dpa_rebalances": ("counter", "Balancer actions", ("job_id", "policy", "action")),
    "dpa_records_emitted": ("counter", "Records emitted by a mapper", ("job_id", "mapper")),
    "dpa_job_records_processed": ("gauge", "Records processed by all reducers so far", ("job_id",)),
    "dpa_reducers": ("gauge", "Reducers taking part in an elastic job now", ("job_id",)),
    "dpa_checkpoints": ("counter", "Checkpoints of a job's reducer states", ("job_id",)),
    "dpa_recoveries": ("counter", "Failures a job recovered from (dead actors or nodes)", ("job_id",)),
    "dpa_group_units_moved": ("counter", "Units of groups a per-group function ran away from their reducer",
                              ("job_id",)),
    "dpa_job_progress": ("gauge", "Fraction of input blocks handed to mappers (1.0 when all taken)", ("job_id",)),
}

_VALID = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_objects: dict[str, Any] = {}


def metric(name: str) -> Any:
    """The process-wide metric object for ``name`` (created on first use)."""
    obj = _objects.get(name)
    if obj is None:
        kind, description, tags = METRICS[name]
        if not _VALID.match(name):  # pragma: no cover - guarded by a unit test
            raise ValueError(f"invalid metric name {name!r}")
        cls = Counter if kind == "counter" else Gauge
        obj = _objects[name] = cls(name, description=description, tag_keys=tags)
    return obj


class ReducerTelemetry:
    """Publishes a reducer's counters as deltas since the last call."""

    def __init__(self, job_id: str, reducer: int) -> None:
        self.tags = {"job_id": job_id, "reducer": str(reducer)}
        self.processed = 0
        self.forwarded = 0

    def update(self, queued: int, processed: int, forwarded: int, tokens: int | None) -> None:
        metric("dpa_queue_length").set(queued, tags=self.tags)
        if processed > self.processed:
            metric("dpa_records_processed").inc(processed - self.processed, tags=self.tags)
            self.processed = processed
        if forwarded > self.forwarded:
            metric("dpa_records_forwarded").inc(forwarded - self.forwarded, tags=self.tags)
            self.forwarded = forwarded
        if tokens is not None:
            metric("dpa_tokens_owned").set(tokens, tags=self.tags)
