"""Workloads for dpa experiments: the DPA paper's WL1..WL5 and synthetic generators."""

from __future__ import annotations
