"""Running the soak: each job on Ray (and again in-process), its outcome, random actor
kills, memory samples, two driver threads at a time (:class:`Soak`).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import contextlib
import gc
import os
import random
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

import ray

import dpa
from benchmarks.common import job_processes, mb, role_of
from benchmarks.soak.jobs import compare, oracle, prepare
from benchmarks.soak.specs import BAD_KINDS, OUTCOMES, JobSpec


@dataclass
class Outcome:
    """What happened to one job."""

    index: int
    outcome: str
    detail: str
    seconds: float
    job: str
    bad: str | None = None
    error_type: str | None = None
    raw_ray_error: bool = False
    after_kill: bool = False
    thread: str = ""
    long: bool = False
    checkpoints: int | None = None


@dataclass
class _Running:
    """A submitted job: its spec and when a driver thread started it."""

    spec: JobSpec
    started: float | None = None


def _error_name(exc: BaseException) -> str:
    return f"{type(exc).__module__}.{type(exc).__qualname__}"


def _is_raw_ray(exc: BaseException) -> bool:
    return type(exc).__module__.split(".")[0] == "ray"


def _config(spec: JobSpec, timeout_s: float, runtime: str) -> dpa.JobConfig:
    fields: dict[str, Any] = {"runtime": runtime, "num_mappers": spec.num_mappers, "num_reducers": spec.num_reducers,
                              "policy": spec.policy, "max_rounds": spec.max_rounds, "tau": spec.tau,
                              "reuse_actors": spec.reuse_actors, "timeout_s": timeout_s}
    if spec.batch_size is not None:
        fields["batch_size"] = spec.batch_size
    if spec.chunk_size is not None:
        fields["chunk_size"] = spec.chunk_size
    if spec.checkpoint_interval_s is not None:
        fields["checkpoint_interval_s"] = spec.checkpoint_interval_s
    fields.update(spec.bad_config)
    return dpa.JobConfig().with_options(**fields)


def _attempt(spec: JobSpec, timeout_s: float, runtime: str) -> tuple[str, str, BaseException | None, int | None]:
    """Runs ``spec`` once on ``runtime`` and judges it against the oracle.

    Returns:
        ``(outcome, detail, exception, checkpoints)``: an :data:`OUTCOMES` name (not
        ``runtime_mismatch``), what happened, the exception raised (None if none) and the
        checkpoints the job took (None if it failed).
    """
    try:
        prep = prepare(spec)
        want, want_records = oracle(spec, prep) if spec.bad is None else ({}, 0)
    except Exception as exc:
        return "harness_error", f"building the job failed: {traceback.format_exc(limit=3)}", exc, None
    seen: list[int] = []
    try:
        config = _config(spec, timeout_s, runtime)
        extra: dict[str, Any] = {"nmappers": 3} if spec.bad == "unknown_config_field" else {}
        if spec.progress:
            extra["progress"] = lambda done, total: seen.append(done)
        res = dpa.run(prep.source, key=prep.key, reducer=prep.reducer, map_fn=prep.map_fn, config=config, **extra)
        got = res.to_dict()
        processed = sum(res.stats.processed)
        checkpoints = int(getattr(res.stats, "checkpoints", 0) or 0)
    except BaseException as exc:  # judged below; KeyboardInterrupt too, so the soak reports it
        message = f"{_error_name(exc)}: {str(exc)[:400]}"
        if isinstance(exc, dpa.JobFailedError) and "timeout_s=" in str(exc):
            return "hang", f"dpa's own timeout fired: {message}", exc, None
        if spec.bad is not None:
            accepted = BAD_KINDS[spec.bad]
            if isinstance(exc, accepted):
                return "expected_error", message, exc, None
            names = "/".join(c.__name__ for c in accepted)
            return "unexpected_error", f"expected {names} for {spec.bad}, got {message}", exc, None
        return "unexpected_error", message, exc, None

    if spec.bad is not None:
        names = "/".join(c.__name__ for c in BAD_KINDS[spec.bad])
        return ("unexpected_error", f"expected {names} for {spec.bad}, but the job succeeded with {len(got)} keys",
                None, checkpoints)
    diff = compare(spec, got, want)
    if diff is not None:
        return "wrong_result", diff, None, checkpoints
    if processed != want_records:
        return ("wrong_result", f"result right, but stats.processed sums to {processed}, not {want_records} records",
                None, checkpoints)
    return "ok", f"{len(got)} keys, {want_records} records", None, checkpoints


def _disagreement(ray_out: tuple[str, str, BaseException | None, int | None],
                  local_out: tuple[str, str, BaseException | None, int | None]) -> str | None:
    """What differs between the Ray and the local runtime's run of one job, or None. Both
    must succeed with the oracle's answer, or both raise the same exception class."""
    (r_kind, r_detail, r_exc, _), (l_kind, l_detail, l_exc, _) = ray_out, local_out
    r_err = None if r_exc is None else _error_name(r_exc)
    l_err = None if l_exc is None else _error_name(l_exc)
    if r_kind == l_kind and r_err == l_err:
        return None
    return (f"Ray: {r_kind} ({r_err or r_detail[:120]}); local: {l_kind} "
            f"({l_err or l_detail[:120]}): {l_detail[:200]}")


def run_job(running: _Running, timeout_s: float, runtime: str = "ray", local_check: bool = False) -> Outcome:
    """Runs one job on a driver thread and judges it; never raises. With ``local_check``
    (and ``runtime="ray"``) the job then runs on ``runtime="local"`` too, which must agree."""
    spec = running.spec
    running.started = time.monotonic()
    thread = threading.current_thread().name
    kind, detail, exc, checkpoints = first = _attempt(spec, timeout_s, runtime)
    seconds = time.monotonic() - running.started
    if local_check and runtime == "ray" and kind not in ("hang", "harness_error"):
        diff = _disagreement(first, _attempt(spec, timeout_s, "local"))
        if diff is not None and kind in ("ok", "expected_error"):
            kind, detail = "runtime_mismatch", diff
        elif diff is not None:
            detail = f"{detail} [runtimes disagree: {diff}]"
    return Outcome(spec.index, kind, " ".join(detail.split()), seconds, spec.describe(),
                   bad=spec.bad, error_type=None if exc is None else _error_name(exc),
                   raw_ray_error=exc is not None and _is_raw_ray(exc), after_kill=spec.kill_before,
                   thread=thread, long=spec.long, checkpoints=checkpoints)


# ----------------------------------------------------------------------------- actors
class ActorWatch:
    """Lists live ``dpa:`` actors: Ray's state API when the dashboard runs, else the GCS's
    named-actor list (the state API needs the dashboard, which dpa does not start)."""

    def __init__(self) -> None:
        self.state_api: bool | None = None

    def live(self) -> list[str]:
        """Names of the live dpa actors."""
        if not ray.is_initialized():
            return []
        if self.state_api is not False:
            try:
                from ray.util.state import list_actors

                actors = list_actors(filters=[("state", "=", "ALIVE")], limit=10_000, timeout=10,
                                     raise_on_missing_output=False)
                self.state_api = True
                names = [getattr(a, "name", None) or "" for a in actors]
                return sorted(n for n in names if n.startswith("dpa:"))
            except Exception:
                self.state_api = False
        named = ray.util.list_named_actors(all_namespaces=True)
        return sorted(a["name"] for a in named if a["name"].startswith("dpa:"))

    def wait_none(self, timeout_s: float) -> list[str]:
        """Waits until no dpa actor is alive; returns those still alive at the deadline."""
        deadline = time.monotonic() + timeout_s
        alive = self.live()
        while alive and time.monotonic() < deadline:
            time.sleep(0.5)
            alive = self.live()
        return alive


def kill_random_actor(rng: random.Random) -> str | None:
    """Kills a random live ``dpa:`` actor in namespace ``dpa``; returns its name (None if none)."""
    if not ray.is_initialized():
        return None
    names = sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                   if a["name"].startswith("dpa:") and a.get("namespace") == "dpa")
    rng.shuffle(names)
    for name in names:
        try:
            handle = ray.get_actor(name, namespace="dpa")
        except ValueError:  # died meanwhile
            continue
        ray.kill(handle, no_restart=True)
        return name
    return None


def kill_actors(names: list[str]) -> None:
    """Kills the named dpa actors (cleans up after a leak)."""
    for name in names:
        with contextlib.suppress(Exception):
            ray.kill(ray.get_actor(name, namespace="dpa"), no_restart=True)


# ----------------------------------------------------------------------------- memory
DPA_ROLES = ("coordinator", "host")


def memory_sample(after_job: int) -> dict[str, Any]:
    """Driver RSS and the summed RSS of the dpa actor processes (children of this driver)."""
    gc.collect()
    me = os.getpid()
    driver = actors = procs = 0
    for proc in job_processes():
        try:
            role = role_of(proc, me)
            if role == "driver":
                driver = proc.memory_info().rss
            elif role in DPA_ROLES:
                actors += proc.memory_info().rss
                procs += 1
        except Exception:  # the process went away
            continue
    return {"after_job": after_job, "driver_rss_mb": round(mb(driver), 1), "actors_rss_mb": round(mb(actors), 1),
            "actor_procs": procs, "rss_per_actor_mb": round(mb(actors / procs), 1) if procs else 0.0}


def memory_verdict(samples: list[dict[str, Any]], warmup: int, bound: float) -> dict[str, Any]:
    """First, after-warm-up and last samples, and whether memory grew beyond ``bound``.

    Actor memory is judged per process: the number of pooled actors changes with the job
    shapes, the memory of one should not keep growing.
    """
    if not samples:
        return {"samples": [], "growth": False, "note": "no samples"}
    warm = next((s for s in samples if s["after_job"] >= warmup), samples[-1])
    last = samples[-1]
    flags = []
    if last["driver_rss_mb"] > bound * warm["driver_rss_mb"]:
        flags.append(f"driver RSS {warm['driver_rss_mb']} -> {last['driver_rss_mb']} MB")
    # Actors: the first sample after warm-up that saw some (a failed job may have just torn a pool down).
    warm_actors = next((s for s in samples if s["after_job"] >= warmup and s["actor_procs"]), None)
    if warm_actors and last["actor_procs"] and last["rss_per_actor_mb"] > bound * warm_actors["rss_per_actor_mb"]:
        flags.append(f"RSS per dpa actor {warm_actors['rss_per_actor_mb']} -> {last['rss_per_actor_mb']} MB")
    return {"first": samples[0], "warm": warm, "warm_actors": warm_actors or warm, "last": last, "bound": bound,
            "max_actor_procs": max(s["actor_procs"] for s in samples),
            "growth": bool(flags), "flags": flags, "samples": samples}


# ----------------------------------------------------------------------------- the soak
def _pickle_by_value() -> None:
    """Ships the jobs' functions and reducers (:mod:`benchmarks.soak.jobs`) to Ray by
    value, so workers need not import ``benchmarks``."""
    with contextlib.suppress(Exception):
        import ray.cloudpickle

        from benchmarks.soak import jobs

        ray.cloudpickle.register_pickle_by_value(jobs)


class Soak:
    """Runs the jobs on a thread pool, guards them, injects kills and keeps the tally."""

    def __init__(self, opts: argparse.Namespace) -> None:
        self.opts = opts
        self.guard_s = opts.timeout_s + max(30.0, 0.25 * opts.timeout_s)
        self.outcomes: list[Outcome] = []
        self.inflight: dict[cf.Future[Outcome], _Running] = {}
        self.hung: list[tuple[cf.Future[Outcome], _Running]] = []
        self.kills: list[dict[str, Any]] = []
        self.kills_skipped = 0
        self.samples: list[dict[str, Any]] = []
        self.not_run = 0
        self.t0 = time.monotonic()

    # -- bookkeeping ----------------------------------------------------------------
    def _record(self, out: Outcome) -> None:
        self.outcomes.append(out)
        if self.opts.verbose or out.outcome not in ("ok", "expected_error"):
            tag = out.outcome.upper() if out.outcome not in ("ok", "expected_error") else out.outcome
            print(f"  [{tag}] {out.job} ({out.seconds:.1f}s): {out.detail[:300]}", flush=True)
        done = len(self.outcomes)
        if done % max(1, self.opts.jobs // 10) == 0:
            counts = collections.Counter(o.outcome for o in self.outcomes)
            print(f"[{done:>4}/{self.opts.jobs}] " + "  ".join(f"{k}={counts.get(k, 0)}" for k in OUTCOMES)
                  + f"  ({time.monotonic() - self.t0:.0f}s)", flush=True)

    def _busy_hung(self) -> int:
        return sum(1 for fut, _ in self.hung if not fut.done())

    def _wait(self, target: int) -> None:
        """Waits until at most ``target`` jobs are in flight (finished, or declared hung)."""
        while len(self.inflight) > target:
            done, _ = cf.wait(list(self.inflight), timeout=0.5, return_when=cf.FIRST_COMPLETED)
            for fut in done:
                running = self.inflight.pop(fut)
                try:
                    self._record(fut.result(timeout=0))
                except Exception as exc:  # run_job never raises; a bug of the soak itself
                    self._record(Outcome(running.spec.index, "harness_error", repr(exc), 0.0, running.spec.describe()))
            now = time.monotonic()
            for fut, running in list(self.inflight.items()):
                if running.started is not None and now - running.started > self.guard_s:
                    self.inflight.pop(fut)
                    self.hung.append((fut, running))
                    self._record(Outcome(running.spec.index, "hang",
                                         f"no result after {self.guard_s:.0f}s (driver guard; timeout_s="
                                         f"{self.opts.timeout_s}); its thread is abandoned",
                                         now - running.started, running.spec.describe(),
                                         bad=running.spec.bad, after_kill=running.spec.kill_before))
            if self._busy_hung() >= self.opts.threads and self.inflight:
                # Every driver thread is stuck: the queued jobs would never start.
                for fut, running in list(self.inflight.items()):
                    if running.started is None and fut.cancel():
                        self.inflight.pop(fut)
                        self.not_run += 1

    def _sample_memory(self, after_job: int) -> None:
        self._wait(0)
        if ray.is_initialized():
            self.samples.append(memory_sample(after_job))

    # -- the run ----------------------------------------------------------------------
    def run(self, specs: list[JobSpec]) -> None:
        """Submits every job, at most ``--threads`` at a time; kills actors between jobs."""
        kill_rng = random.Random(self.opts.seed + 7)
        pool = cf.ThreadPoolExecutor(self.opts.threads, thread_name_prefix="soak")
        try:
            for spec in specs:
                if spec.index and spec.index % self.opts.mem_every == 0:
                    self._sample_memory(spec.index)
                if spec.kill_before and self.opts.runtime == "ray":
                    self._wait(0)  # between jobs: nothing running
                    name = kill_random_actor(kill_rng)
                    if name is None:
                        self.kills_skipped += 1
                    else:
                        self.kills.append({"before_job": spec.index, "actor": name})
                        if self.opts.verbose:
                            print(f"  killed {name} before job #{spec.index}", flush=True)
                self._wait(max(0, self.opts.threads - self._busy_hung() - 1))
                if self._busy_hung() >= self.opts.threads:
                    print("every driver thread is hung: stopping the soak", flush=True)
                    self.not_run += len(specs) - spec.index
                    break
                running = _Running(spec)
                self.inflight[pool.submit(run_job, running, self.opts.timeout_s, self.opts.runtime,
                                         self.opts.local_check)] = running
            self._wait(0)
            self._sample_memory(len(specs))
        finally:
            pool.shutdown(wait=not self._busy_hung(), cancel_futures=True)


def _pid() -> int:
    return os.getpid()


def start_ray_from_short_lived_thread(timeout_s: float) -> None:
    """Lets a first ``dpa.run`` start Ray on a thread that then exits, and checks Ray
    survived it (Ray's head processes must not be tied to that thread).

    Raises:
        RuntimeError: Ray is not usable after the thread ended.
    """
    errors: list[BaseException] = []

    def first_job() -> None:
        try:
            dpa.run(["a", "b", "a"], config=dpa.JobConfig().with_options(timeout_s=timeout_s)).to_dict()
        except BaseException as exc:  # handed to the main thread
            errors.append(exc)

    print("starting Ray from a short-lived driver thread (if this process now dies, Ray's head "
          "processes died with that thread)", flush=True)
    thread = threading.Thread(target=first_job, name="soak-ray-starter")
    thread.start()
    thread.join(timeout_s + 60)
    if thread.is_alive() or errors:
        raise RuntimeError(f"the first dpa.run on a driver thread failed: {errors or 'it hung'}")
    time.sleep(2.0)  # time for a parent-death signal to take Ray's processes down
    check = ray.remote(num_cpus=0)(_pid).remote()
    ready, _ = ray.wait([check], timeout=60)
    if not ready:
        raise RuntimeError("Ray does not run tasks after the thread that started it ended")
    ray.get(check)

