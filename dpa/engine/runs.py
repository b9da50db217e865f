"""The runs of a job: what each is called and which run's messages count.

A job's first run is called by the job's id; after ``n`` recoveries its run is
``<job id>.<n>``. Every message between the job's members and its coordinator names the run
it belongs to, and a message counts only where that run is the one served: the coordinator's
machine (:class:`~dpa.engine.events.FromRun`) and every member (which drops a message of a
run it does not serve) apply the same rule, :func:`serves`.
"""

from __future__ import annotations


def run_name(job_id: str, recoveries: int) -> str:
    """The id of a job's run after ``recoveries`` recoveries."""
    return job_id if recoveries == 0 else f"{job_id}.{recoveries}"


def serves(current: str | None, run: str | None) -> bool:
    """Whether a message of ``run`` belongs to the run ``current`` (None: no run is served)."""
    return current is not None and run == current
