"""Ray silently drops metric names with dots or dashes: every dpa metric must be valid."""

import re

from dpa.runtime.ray.telemetry import METRICS


def test_metric_names_are_prometheus_safe():
    for name, (kind, description, tags) in METRICS.items():
        assert re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", name), name
        assert name.startswith("dpa_") and kind in ("gauge", "counter") and description
        assert "job_id" in tags and all(re.fullmatch(r"[a-z_]+", t) for t in tags)
