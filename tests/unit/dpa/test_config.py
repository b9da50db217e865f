"""JobConfig's default shape: one mapper and one reducer per available CPU (no Ray here)."""

from __future__ import annotations

import os
import sys

import pytest

import dpa
from dpa.config import LOCAL_DEFAULT_WIDTH, available_cpus, default_width
from dpa.config import width as config_module
from dpa.errors import ConfigError


@pytest.fixture
def cpus(monkeypatch):
    """Sets the CPUs the default shape sees."""

    def set_cpus(n: int) -> None:
        monkeypatch.setattr(config_module, "available_cpus", lambda: n)

    return set_cpus


@pytest.mark.parametrize(("n", "mappers", "reducers"), [
    (1, 1, 2),  # balancing needs two reducers
    (2, 2, 2),
    (8, 8, 8),
    (64, 64, 64),  # the width follows the cluster, however wide
    (1024, 1024, 1024),
])
def test_the_default_shape_is_one_actor_per_cpu(cpus, n, mappers, reducers):
    cpus(n)
    cfg = dpa.JobConfig().resolved()
    assert (cfg.num_mappers, cfg.num_reducers) == (mappers, reducers)


def test_explicit_shapes_are_kept_and_each_unset_side_is_filled_alone(cpus):
    cpus(8)
    both = dpa.JobConfig(num_mappers=3, num_reducers=5)
    assert (both.resolved().num_mappers, both.resolved().num_reducers) == (3, 5)
    everything = both.with_options(report_interval_s=0.05, lb_interval_s=0.05)
    assert everything.resolved() is everything
    assert dpa.JobConfig(num_mappers=3).resolved().num_reducers == 8
    assert dpa.JobConfig(num_reducers=3).resolved().num_mappers == 8


def test_the_local_runtime_simulates_the_same_shape_on_every_machine(cpus):
    for n in (1, 2, 32):
        cpus(n)
        cfg = dpa.JobConfig(runtime="local").resolved()
        assert (cfg.num_mappers, cfg.num_reducers) == (LOCAL_DEFAULT_WIDTH, LOCAL_DEFAULT_WIDTH)


def test_an_elastic_default_width_stays_within_its_bounds(cpus):
    cpus(8)
    assert dpa.JobConfig(max_reducers=3).resolved().num_reducers == 3
    assert dpa.JobConfig(max_reducers=3).elastic is False  # starts (and stays) at its widest
    cpus(2)
    assert dpa.JobConfig(min_reducers=5).resolved().num_reducers == 5
    cfg = dpa.JobConfig(max_reducers=8)
    assert (cfg.resolved().num_reducers, cfg.slots, cfg.elastic) == (2, 8, True)
    with pytest.raises(ConfigError, match="min_reducers=5 is above max_reducers=3"):
        dpa.JobConfig(min_reducers=5, max_reducers=3)


def test_bad_shapes_are_still_config_errors(cpus):
    cpus(2)
    for bad in ({"num_mappers": 0}, {"num_reducers": -1}, {"num_mappers": 2.0}, {"num_reducers": True}):
        with pytest.raises(ConfigError, match="must be an integer >= 1"):
            dpa.JobConfig(**bad)
    with pytest.raises(ConfigError, match="max_reducers must be an integer >= 1"):
        dpa.JobConfig(max_reducers=0)


def test_the_default_width_is_resolved_when_the_job_is_planned_not_when_the_config_is_made(cpus):
    import dataclasses
    import pickle

    cpus(6)
    cfg = dpa.JobConfig()  # e.g. made before ray.init
    assert (cfg.num_mappers, cfg.num_reducers) == (None, None)
    cpus(2)  # the cluster dpa runs on
    assert (cfg.resolved().num_mappers, cfg.resolved().num_reducers, cfg.slots) == (2, 2, 2)
    assert dataclasses.replace(cfg, policy="hash").num_reducers is None
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    explicit = dataclasses.replace(cfg.resolved(), policy="hash")
    cpus(8)
    assert explicit.resolved().num_reducers == 2  # a width once set stays


def test_a_planned_job_runs_at_the_width_resolved_then(cpus):
    from dpa.engine.planning import build_plan
    from dpa.input.sources import normalize_source

    cfg = dpa.JobConfig(runtime="ray")
    cpus(3)
    plan, _ = build_plan(normalize_source([1, 2, 3], None, 3), None, dpa.Count(), None, cfg.resolved())
    assert (plan.num_mappers, plan.num_reducers) == (3, 3)


def test_available_cpus_without_ray_is_this_process_s_cpus(monkeypatch):
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    expected = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert available_cpus() == expected
    assert "ray" not in sys.modules  # never imports Ray


def test_available_cpus_asks_a_running_ray_for_the_cluster_s_cpus(monkeypatch):
    class FakeRay:
        @staticmethod
        def is_initialized() -> bool:
            return True

        @staticmethod
        def cluster_resources() -> dict[str, float]:
            return {"CPU": 48.0, "memory": 1e9}

    monkeypatch.setitem(sys.modules, "ray", FakeRay)
    assert available_cpus() == 48
    assert default_width("ray") == 48
    assert default_width("local") == LOCAL_DEFAULT_WIDTH


def test_a_default_job_on_a_64_cpu_ray_runs_64_reducers(monkeypatch):
    class Ray64:
        @staticmethod
        def is_initialized() -> bool:
            return True

        @staticmethod
        def cluster_resources() -> dict[str, float]:
            return {"CPU": 64.0, "memory": 1e12}

    monkeypatch.setitem(sys.modules, "ray", Ray64)
    cfg = dpa.JobConfig().resolved()
    assert (cfg.num_mappers, cfg.num_reducers) == (64, 64)


def test_a_ray_that_cannot_answer_falls_back_to_this_machine(monkeypatch):
    class BrokenRay:
        @staticmethod
        def is_initialized() -> bool:
            return True

        @staticmethod
        def cluster_resources() -> dict[str, float]:
            raise ConnectionError("GCS gone")

    monkeypatch.setitem(sys.modules, "ray", BrokenRay)
    assert available_cpus() >= 1


@pytest.mark.parametrize("reducers, period", [(2, 0.05), (16, 0.05), (128, 0.05), (256, 0.1), (1024, 0.4), (4096, 1.6)])
def test_the_control_period_is_sized_by_the_width(reducers, period):
    """Left unset, the report clock's period and the balancer's tick interval are 0.05 s up
    to CONTROL_WIDTH reducers and grow in proportion beyond (docs/scale.md, "Simulator")."""
    cfg = dpa.JobConfig(num_reducers=reducers, runtime="local").resolved()
    assert cfg.report_interval_s == pytest.approx(period) and cfg.lb_interval_s == pytest.approx(period)
    assert dpa.config.control_period(reducers) == pytest.approx(period)


def test_a_control_period_given_is_kept_at_any_width():
    cfg = dpa.JobConfig(num_reducers=4096, report_interval_s=0.01, lb_interval_s=0.02, runtime="local").resolved()
    assert (cfg.report_interval_s, cfg.lb_interval_s) == (0.01, 0.02)
    elastic = dpa.JobConfig(num_reducers=256, max_reducers=1024, runtime="local").resolved()
    assert elastic.report_interval_s == pytest.approx(0.4)  # (sized by the slots it may grow to)


def test_the_plan_carries_the_resolved_period():
    import pyarrow as pa

    from dpa.engine.planning import build_plan
    from dpa.input.sources import normalize_source

    table = pa.table({"k": list(range(100))})
    cfg = dpa.JobConfig(num_mappers=1, num_reducers=1024, runtime="local")
    plan, _ = build_plan(normalize_source(table, 100), "k", dpa.Count(), None, cfg)
    assert plan.report_interval_s == pytest.approx(0.4) and plan.lb_interval_s == pytest.approx(0.4)
