"""The default width of a job: how many mappers and reducers a job that leaves them unset
runs with, and the period of its control plane (the reducers' report clock and the
balancer's tick) when that is left unset, both resolved when the job is planned
(:meth:`dpa.JobConfig.resolved`)."""

from __future__ import annotations

import logging
import os
import sys

logger = logging.getLogger(__name__)

#: The local runtime's default shape (virtual time: no processes, so not tied to the machine).
LOCAL_DEFAULT_WIDTH = 4
#: The report clock's period and the balancer's tick interval of a job of up to
#: :data:`CONTROL_WIDTH` reducers (``FlowConfig.report_interval_s`` and
#: ``BalanceConfig.lb_interval_s`` left None).
CONTROL_PERIOD_S = 0.05
#: Reducers up to which the control period is :data:`CONTROL_PERIOD_S`; a wider job's
#: grows in proportion to its reducers (:func:`control_period`).
CONTROL_WIDTH = 128


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


def control_period(reducers: int) -> float:
    """The report clock's period and the balancer's tick interval of a job of ``reducers``
    reducers (slots) that leaves them unset: :data:`CONTROL_PERIOD_S` up to
    :data:`CONTROL_WIDTH` reducers, ``CONTROL_PERIOD_S x reducers / CONTROL_WIDTH`` beyond.

    What reaches the balancer each period grows with the reducers (a report from each busy
    one, a tick that reads every reducer's figures): a period that grows with them keeps
    the balancer's busy fraction bounded at any width (the law in ``docs/scale.md``,
    "Simulator"), while a job of a few reducers is looked at as often as before.
    """
    return CONTROL_PERIOD_S * max(1.0, int(reducers) / CONTROL_WIDTH)
