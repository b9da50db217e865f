"""What Ray exports for the coordinator's actor class: a thin class over an importable one."""

import pickle

from ray import cloudpickle

from dpa.runtime.ray import coordinator as ray_coordinator


def test_the_actor_class_defines_no_methods_of_its_own():
    raw = ray_coordinator.CoordinatorActor.__ray_metadata__.modified_class.__ray_actor_class__
    assert raw.__bases__ == (ray_coordinator.Coordinator,)
    assert [name for name, value in vars(raw).items() if callable(value)] == []


def test_the_coordinators_methods_cross_by_reference():
    body = cloudpickle.dumps(ray_coordinator.Coordinator)
    assert pickle.loads(body) is ray_coordinator.Coordinator
    assert len(body) < 200  # a module and a name, not the methods' code


def test_ray_still_names_every_coordinator_method():
    names = set(ray_coordinator.CoordinatorActor.__ray_metadata__.method_meta.methods)
    assert {"prepare_job", "run_job", "offer", "next_block", "cancel_job", "progress"} <= names
