"""Typed policy settings, the registry table and where validation happens."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import dpa
from dpa.errors import ConfigError
from dpa.routing.policies.grouping import PKGPolicy, PoTCPolicy, ShufflePolicy
from dpa.routing.policies.hashing import HashPolicy, ModRouter, ModSnapshot
from dpa.routing.policies.hybrid.policy import HybridPolicy
from dpa.routing.policies.ring.policy import DPAPolicy
from dpa.routing.registry import BUILTINS, job_shape, make_policy, policy_settings


def local(**kw):
    return dpa.JobConfig(runtime="local", **kw)


def test_every_builtin_has_settings_factory_and_description():
    assert set(BUILTINS) <= set(dpa.policies())
    for name, entry in BUILTINS.items():
        assert issubclass(entry.settings, dpa.PolicySettings) and entry.description
        settings = entry.settings(**entry.preset)
        assert settings.name == name
        assert make_policy(local(policy=name)).name == name


@pytest.mark.parametrize("name,settings", [
    ("pkg", dpa.PKGSettings(d=3)),
    ("halving", dpa.RingSettings("halving", patience=3, min_gap=0)),
    ("mixed", dpa.FangSettings(mode="mixed", interval=100)),
    ("gedik-scan", dpa.GedikSettings(algorithm="scan", period=100)),
    ("dkg", dpa.DKGSettings(expected_keys=10)),
    ("hybrid", dpa.HybridSettings(theta=0.1, max_rounds=0)),
])
def test_a_settings_object_builds_the_same_policy_as_name_and_options(name, settings):
    options = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)
               if f.init and f.name not in BUILTINS[name].preset and f.name not in ("tau", "max_rounds",
                                                                                       "initial_tokens")}
    shortcuts = {k: getattr(settings, k) for k in ("tau", "max_rounds", "initial_tokens") if hasattr(settings, k)}
    by_object = make_policy(local(policy=settings, num_mappers=3, num_reducers=5))
    by_name = make_policy(local(policy=name, policy_options=options, num_mappers=3, num_reducers=5, **shortcuts))
    assert by_object == by_name and by_object.name == name


def test_settings_validate_themselves_with_actionable_errors():
    with pytest.raises(ConfigError, match="d must be an integer >= 1"):
        dpa.PKGSettings(d=0)
    with pytest.raises(ConfigError, match="power of two .* try 8 or 16"):
        dpa.RingSettings(initial_tokens=12)
    with pytest.raises(ConfigError, match="'halving' or 'doubling'"):
        dpa.RingSettings(method="tripling")
    with pytest.raises(ConfigError, match="theta"):
        dpa.HybridSettings(theta=2.0)


def test_unknown_option_lists_the_valid_ones():
    with pytest.raises(ConfigError, match=r"unknown option\(s\) choices; valid options: d"):
        make_policy(local(policy="pkg", policy_options={"choices": 2}))
    with pytest.raises(ConfigError, match="valid options: .*patience.*min_gap"):
        make_policy(local(policy="halving", policy_options={"bogus": 1}))
    with pytest.raises(ConfigError, match="method is fixed by the policy name"):
        make_policy(local(policy="halving", policy_options={"method": "doubling"}))
    with pytest.raises(ConfigError, match="JobConfig.tau"):
        make_policy(local(policy="halving", policy_options={"tau": 0.5}))


def test_jobconfig_checks_the_name_only_and_build_plan_the_settings():
    with pytest.raises(ConfigError, match="valid policies: .*doubling.*halving"):
        local(policy="nope")
    with pytest.raises(ConfigError, match="policy name .* or a policy settings object"):
        local(policy=3)
    cfg = local(policy="pkg", policy_options={"d": 0})  # not built here
    assert cfg.policy_name == "pkg" and local(policy=dpa.PKGSettings()).policy_name == "pkg"
    with pytest.raises(ConfigError, match="d must be an integer >= 1"):
        dpa.run(["a", "b"], config=cfg)


def test_shortcuts_feed_the_ring_settings_and_conflicts_are_reported():
    s = policy_settings(local(policy="halving", tau=0.5, max_rounds=3, initial_tokens=8))
    assert (s.tau, s.max_rounds, s.initial_tokens) == (0.5, 3, 8)
    assert policy_settings(local(policy="pkg", tau=0.5)) == dpa.PKGSettings()
    with pytest.raises(ConfigError, match="conflicts"):
        make_policy(local(policy=dpa.RingSettings(tau=0.1), tau=0.3))
    with pytest.raises(ConfigError, match="policy_options"):
        make_policy(local(policy=dpa.PKGSettings(), policy_options={"d": 3}))


def test_factories_get_the_job_shape():
    cfg = local(policy="doubling", num_mappers=3, num_reducers=4, batch_size=100, seed=7)
    shape = job_shape(cfg)
    assert shape == dpa.JobShape(3, 4, 100, 7) and shape.block_share == 75
    assert make_policy(cfg).min_gap == 75
    assert make_policy(local(policy=dpa.RingSettings(min_gap=0), num_mappers=3)).min_gap == 0
    shuffle = make_policy(local(policy="shuffle", seed=7))
    assert shuffle == ShufflePolicy(dpa.ShuffleSettings(), job_shape(local(policy="shuffle", seed=7)))
    assert shuffle.seed == 7 and shuffle.settings == dpa.ShuffleSettings() and shuffle.shape.seed == 7
    potc = make_policy(local(policy="potc", num_mappers=3))
    assert isinstance(potc, PoTCPolicy) and potc.settings == dpa.PoTCSettings() and potc.shape.num_mappers == 3 and potc.splits_keys
    assert make_policy(local(policy="hybrid", num_mappers=3, batch_size=8)).num_mappers == 3
    assert isinstance(make_policy(local(policy="hybrid")), HybridPolicy)
    assert isinstance(make_policy(local(policy=dpa.PKGSettings(d=4))), PKGPolicy)


@dataclasses.dataclass(frozen=True)
class EchoPolicy(dpa.PolicySpec):
    """A registered-from-outside policy: routes by key hash modulo the reducers."""

    reducers: int = 1

    def initial_snapshot(self, num_reducers):
        return ModSnapshot(num_reducers)

    def make_router(self, mapper_id, num_reducers):
        return ModRouter()


def test_external_registration():
    @dataclasses.dataclass(frozen=True)
    class EchoSettings(dpa.PolicySettings):
        name = "test-echo"
        modulo: int = 1

    dpa.register_policy("test-echo", lambda s, shape: EchoPolicy(shape.num_reducers), "echo", EchoSettings)
    try:
        assert dpa.policies()["test-echo"] == "echo"
        spec = make_policy(local(policy="test-echo", num_reducers=3, policy_options={"modulo": 2}))
        assert spec == EchoPolicy(3)
        assert make_policy(local(policy=EchoSettings(modulo=5), num_reducers=2)) == EchoPolicy(2)
        with pytest.raises(ConfigError, match="valid options: modulo"):
            make_policy(local(policy="test-echo", policy_options={"x": 1}))
        res = dpa.run(["a", "b", "a"], config=local(policy="test-echo", num_reducers=2))
        assert res.to_dict() == {"a": 2, "b": 1}
    finally:
        import dpa.routing.registry as registry

        registry._REGISTRY.pop("test-echo", None)


@dataclasses.dataclass(frozen=True)
class OffsetSettings(dpa.PolicySettings):
    name = "test-offset"
    offset: int = 0


@dataclasses.dataclass(frozen=True)
class OffsetPolicy(dpa.PolicySpec):
    """A policy of one's own built from its settings: the class is its own factory."""

    settings: OffsetSettings
    shape: dpa.JobShape

    routes_by_key = True

    def initial_snapshot(self, num_reducers):
        return ModSnapshot(num_reducers)

    def make_router(self, mapper_id, num_reducers):
        return ModRouter()


def test_a_policy_holding_its_settings_and_shape_is_its_own_factory():
    dpa.register_policy("test-offset", OffsetPolicy, "offset", OffsetSettings)
    try:
        spec = make_policy(local(policy="test-offset", num_reducers=3, policy_options={"offset": 2}))
        assert spec == OffsetPolicy(OffsetSettings(offset=2), job_shape(local(policy="test-offset", num_reducers=3)))
        assert spec.settings.offset == 2 and spec.shape.num_reducers == 3
    finally:
        import dpa.routing.registry as registry

        registry._REGISTRY.pop("test-offset", None)


def test_a_policy_registered_without_settings_is_selected_by_its_name():
    dpa.register_policy("test-plain", lambda s, shape: EchoPolicy(shape.num_reducers), "plain")
    try:
        assert make_policy(local(policy="test-plain", num_reducers=3)) == EchoPolicy(3)
        with pytest.raises(ConfigError, match="valid options: [(]none[)]"):
            make_policy(local(policy="test-plain", policy_options={"x": 1}))
        assert dpa.run(["a", "b", "a"], config=local(policy="test-plain", num_reducers=2)).to_dict() == {"a": 2, "b": 1}
    finally:
        import dpa.routing.registry as registry

        registry._REGISTRY.pop("test-plain", None)


def test_the_contract_module_names_no_implementation():
    import dpa.routing.policy as policy
    from dpa.routing.policies.hashing import ModSnapshot

    for name in ("make_policy", "DPAPolicy", "HashPolicy", "ModSnapshot", "register_policy"):
        assert not hasattr(policy, name), name  # implementations live in dpa.routing.registry / dpa.routing.policies
    assert make_policy.__module__ == "dpa.routing.registry" and DPAPolicy.__module__ == "dpa.routing.policies.ring.policy"
    assert HashPolicy.__module__ == "dpa.routing.policies.hashing"
    assert np.array_equal(ModSnapshot(4).lookup_batch(np.array([5], np.uint32)), [1])


def test_keyword_overrides_keep_a_policy_settings_object():
    cfg = dpa.JobConfig(runtime="local", policy=dpa.PKGSettings(d=3))
    res = dpa.run([1, 1, 2], config=cfg, num_reducers=2)
    assert res.to_dict() == {1: 2, 2: 1}
    assert res.stats.policy == "pkg" and len(res.stats.processed) == 2
