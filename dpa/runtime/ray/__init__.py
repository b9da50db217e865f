"""The Ray runtime: the driver's side of a job and the actors that run it.

* :mod:`dpa.runtime.ray.driver` — ``dpa.run`` on Ray: deadlines, feeding blocks, the result;
* :mod:`dpa.runtime.ray.coordinator` — the coordinator actor; :mod:`dpa.runtime.ray.members`
  — starting and repairing a pool's members;
* :mod:`dpa.runtime.ray.mapper`, :mod:`dpa.runtime.ray.reducer`,
  :mod:`dpa.runtime.ray.balancer` — the member actors; :mod:`dpa.runtime.ray.member` — what
  they share;
* :mod:`dpa.runtime.ray.pool` — warm actor pools; :mod:`dpa.runtime.ray.session` — starting
  Ray from any thread; :mod:`dpa.runtime.ray.quiet` — a quiet console;
* :mod:`dpa.runtime.ray.dataset` — a result as a Ray Dataset; :mod:`dpa.runtime.ray.telemetry`
  — dashboard metrics.
"""
