"""The default width of a job: how many mappers and reducers a job that leaves them unset
runs with, resolved when the job is planned (:meth:`dpa.JobConfig.resolved`)."""

from __future__ import annotations

import logging
import os
import sys

logger = logging.getLogger(__name__)

#: The local runtime's default shape (virtual time: no processes, so not tied to the machine).
LOCAL_DEFAULT_WIDTH = 4


def available_cpus() -> int:
    """CPUs dpa's actors can use: the connected Ray cluster's when Ray is up in this
    process, else this machine's (those this process may run on), as the local Ray that
    ``dpa.run`` starts would see them. Never imports Ray."""
    ray = sys.modules.get("ray")
    if ray is not None and getattr(ray, "is_initialized", lambda: False)():
        try:
            cpus = int(ray.cluster_resources().get("CPU", 0))
            if cpus >= 1:
                return cpus
        except Exception:  # a cluster that cannot answer: this machine's CPUs then
            logger.debug("could not read the Ray cluster's CPUs", exc_info=True)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # (not Linux)
        return max(1, os.cpu_count() or 1)


def default_width(runtime: str) -> int:
    """Mappers (and reducers) of a job that leaves them unset: one per available CPU
    (:func:`available_cpus`), however many (a 64-CPU cluster runs 64 reducers, in one host
    process per CPU: :func:`dpa.runtime.ray.host.default_width`); the local runtime's
    simulation uses :data:`LOCAL_DEFAULT_WIDTH` on every machine."""
    if runtime == "local":
        return LOCAL_DEFAULT_WIDTH
    return available_cpus()
