"""Policies are built from their settings, never made of them: a factory turns
``(settings, shape)`` into a policy that holds both, and no policy class subclasses a
:class:`~dpa.routing.policy.PolicySettings` (settings stay the user's option holders)."""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil

import pytest

import dpa.routing.policies
from dpa.routing.policy import JobShape, PolicySettings, PolicySpec
from dpa.routing.registry import BUILTINS

SHAPE = JobShape(num_mappers=2, num_reducers=4, batch_size=8, seed=3, step_time_s=0.05)


def policy_modules() -> list[str]:
    """Every module of :mod:`dpa.routing.policies`."""
    package = dpa.routing.policies
    return [package.__name__] + [
        m.name for m in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}.")
    ]


def policy_classes() -> list[type]:
    """Every policy class defined in :mod:`dpa.routing.policies`."""
    found: dict[str, type] = {}
    for name in policy_modules():
        module = importlib.import_module(name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, PolicySpec) and obj.__module__.startswith("dpa.routing.policies"):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [found[k] for k in sorted(found)]


def test_the_policy_modules_define_policies():
    names = {cls.__name__ for cls in policy_classes()}
    assert {"DPAPolicy", "HybridPolicy", "PKGPolicy", "DKGPolicy", "FangPolicy", "GedikPolicy"} <= names


@pytest.mark.parametrize("cls", policy_classes(), ids=lambda c: c.__name__)
def test_no_policy_class_subclasses_a_settings_class(cls):
    settings_bases = [base.__name__ for base in cls.__mro__ if issubclass(base, PolicySettings)]
    assert not settings_bases, (
        f"{cls.__name__} inherits the settings class(es) {settings_bases}; a policy holds its settings "
        "(self.settings) instead"
    )


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_every_builtin_policy_is_built_from_its_settings_and_shape(name):
    entry = BUILTINS[name]
    settings = entry.settings(**entry.preset)
    policy = entry.factory(settings, SHAPE)
    assert isinstance(policy, PolicySpec) and not isinstance(policy, PolicySettings)
    assert not any(issubclass(base, PolicySettings) for base in type(policy).__mro__)
    assert policy.settings == settings and isinstance(policy.settings, entry.settings)
    assert policy.shape == SHAPE
    assert policy.name == name == settings.name
    again = pickle.loads(pickle.dumps(policy))  # policies travel to the actors
    assert again == policy and type(again) is type(policy)


def test_a_policy_refuses_another_policys_settings():
    from dpa.routing.policies import DKGSettings, HybridPolicy, PKGPolicy, RingSettings

    with pytest.raises(TypeError, match="PKGSettings"):
        PKGPolicy(DKGSettings())
    with pytest.raises(TypeError, match="HybridSettings"):
        HybridPolicy(RingSettings())
    with pytest.raises(TypeError, match="JobShape"):
        PKGPolicy(shape=(1, 4))
