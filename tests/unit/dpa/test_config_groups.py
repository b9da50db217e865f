"""JobConfig's groups: the grouped spelling, the deprecated flat one, reads by flat name,
changing fields, pickling, validation per group, and library paths that never warn."""

from __future__ import annotations

import dataclasses
import pickle
import warnings

import pytest

import dpa
from dpa.config import FLAT_FIELDS, GROUPS, DefaultPolicyName
from dpa.errors import ConfigError


@pytest.fixture
def no_deprecation():
    """Turns a DeprecationWarning into an error inside the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        yield


def grouped() -> dpa.JobConfig:
    return dpa.JobConfig(shape=dpa.ShapeConfig(num_reducers=8, max_reducers=12),
                         balance=dpa.BalanceConfig(policy="halving", tau=0.3),
                         flow=dpa.FlowConfig(batch_size=1000), recovery=dpa.RecoveryConfig(timeout_s=60.0),
                         semantics=dpa.SemanticsConfig(migrate="state"), runtime="local")


def test_the_grouped_spelling_builds_without_a_warning(no_deprecation):
    cfg = grouped()
    assert cfg.shape.num_reducers == 8 and cfg.balance.tau == 0.3 and cfg.flow.batch_size == 1000
    assert cfg.recovery.timeout_s == 60.0 and cfg.semantics.migrate == "state" and cfg.runtime == "local"
    assert dpa.JobConfig() == dpa.JobConfig(shape=dpa.ShapeConfig(), balance=dpa.BalanceConfig())
    assert [f.name for f in dataclasses.fields(dpa.JobConfig)] == [*GROUPS, "runtime", "reuse_actors"]


def test_every_group_field_reads_by_its_own_name_without_a_warning(no_deprecation):
    cfg = grouped()
    for name, group in FLAT_FIELDS.items():
        assert getattr(cfg, name) == getattr(getattr(cfg, group), name), name
    assert (cfg.num_reducers, cfg.tau, cfg.migrate, cfg.policy_name, cfg.slots, cfg.elastic) == (
        8, 0.3, "state", "halving", 12, True)
    assert len(FLAT_FIELDS) == 25  # with runtime and reuse_actors: every field of the flat spelling


def test_flat_keywords_warn_once_naming_the_grouped_spelling_and_build_the_same_config():
    with pytest.warns(DeprecationWarning) as caught:
        flat = dpa.JobConfig(num_reducers=8, max_reducers=12, policy="halving", tau=0.3, batch_size=1000,
                             timeout_s=60.0, migrate="state", runtime="local")
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "JobConfig(num_reducers=..., max_reducers=..., policy=..." in message
    assert "shape=dpa.ShapeConfig(num_reducers=..., max_reducers=...)" in message
    assert "balance=dpa.BalanceConfig(policy=..., tau=...)" in message and "dpa.run" in message
    assert caught[0].filename == __file__  # points at the caller's line
    assert flat == grouped()


def test_positional_arguments_follow_the_flat_order():
    with pytest.warns(DeprecationWarning):
        cfg = dpa.JobConfig(3, 5, "hash")
    assert (cfg.num_mappers, cfg.num_reducers, cfg.policy) == (3, 5, "hash")
    with pytest.raises(ConfigError, match="both positionally and by keyword"):
        dpa.JobConfig(3, num_mappers=4)


def test_a_field_set_flat_and_in_its_group_is_a_conflict():
    with pytest.raises(ConfigError, match=r"num_reducers=8 conflicts with shape.num_reducers=4"), \
            pytest.warns(DeprecationWarning):
        dpa.JobConfig(shape=dpa.ShapeConfig(num_reducers=4), num_reducers=8)
    with pytest.raises(ConfigError, match="conflicts with balance.tau"):
        dpa.JobConfig().with_options(balance=dpa.BalanceConfig(tau=0.5), tau=0.3)
    # The same value, or a group that leaves the field at its default, is no conflict.
    with pytest.warns(DeprecationWarning):
        same = dpa.JobConfig(shape=dpa.ShapeConfig(num_reducers=8), num_reducers=8, tau=0.3)
    assert (same.num_reducers, same.tau) == (8, 0.3)


def test_unknown_names_and_wrong_group_types_are_config_errors():
    with pytest.raises(ConfigError, match=r"unknown JobConfig field\(s\) \['reducers'\]; valid fields: .*num_reducers"):
        dpa.JobConfig(reducers=8)
    with pytest.raises(ConfigError, match="unknown JobConfig field"):
        dpa.JobConfig().with_options(reducers=8)
    with pytest.raises(ConfigError, match="JobConfig.shape must be a dpa.ShapeConfig, got FlowConfig"):
        dpa.JobConfig(shape=dpa.FlowConfig())
    with pytest.raises(ConfigError, match="JobConfig.flow must be a dpa.FlowConfig"):
        dpa.JobConfig().with_options(flow={"batch_size": 3})
    with pytest.raises(ConfigError, match="runtime must be 'ray' or 'local'"):
        dpa.JobConfig(runtime="spark")


def test_replace_and_with_options_change_fields(no_deprecation):
    cfg = grouped()
    wider = dataclasses.replace(cfg, shape=dataclasses.replace(cfg.shape, num_reducers=10))
    assert (wider.num_reducers, wider.max_reducers, wider.tau) == (10, 12, 0.3)
    changed = cfg.with_options(batch_size=64, policy="hash", policy_options={}, runtime="ray")
    assert (changed.batch_size, changed.policy, changed.runtime, changed.num_reducers) == (64, "hash", "ray", 8)
    assert cfg.batch_size == 1000  # a copy
    assert cfg.with_options(flow=dpa.FlowConfig(chunk_size=7)).flow == dpa.FlowConfig(chunk_size=7)
    assert dpa.JobConfig().with_options(**cfg.options()) == cfg
    with pytest.raises(ConfigError, match="FlowConfig.batch_size must be an integer >= 1"):
        cfg.with_options(batch_size=0)


def test_replace_by_a_flat_name_still_works_with_a_warning():
    cfg = grouped()
    with pytest.warns(DeprecationWarning):
        assert dataclasses.replace(cfg, chunk_size=64).chunk_size == 64  # left at its default in cfg
    with pytest.raises(ConfigError, match="cfg.with_options"), pytest.warns(DeprecationWarning):
        dataclasses.replace(cfg, num_reducers=4)  # the group given by replace sets it to 8


def test_assigning_a_flat_name_is_deprecated_and_replaces_the_group():
    cfg = grouped()
    shape = cfg.shape
    with pytest.warns(DeprecationWarning, match=r"cfg.with_options\(num_mappers=...\)"):
        cfg.num_mappers = 3
    assert cfg.num_mappers == 3 and cfg.shape is not shape and shape.num_mappers is None


def test_groups_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        dpa.ShapeConfig().num_reducers = 3  # type: ignore[misc]


def test_configs_pickle_and_compare(no_deprecation):
    cfg = grouped().with_options(policy=dpa.PKGSettings(d=3))
    back = pickle.loads(pickle.dumps(cfg))
    assert back == cfg and back.policy == dpa.PKGSettings(d=3) and back.num_reducers == 8
    default = pickle.loads(pickle.dumps(dpa.JobConfig()))
    assert isinstance(default.policy, DefaultPolicyName)  # the fallback to hash still applies
    assert default != dpa.JobConfig(runtime="local")


@pytest.mark.parametrize(("make", "message"), [
    (lambda: dpa.ShapeConfig(num_reducers=0), "ShapeConfig.num_reducers must be an integer >= 1 or None"),
    (lambda: dpa.ShapeConfig(num_mappers=2.0), "ShapeConfig.num_mappers must be an integer"),
    (lambda: dpa.ShapeConfig(min_reducers=5, max_reducers=3), "min_reducers=5 is above max_reducers=3"),
    (lambda: dpa.ShapeConfig(num_reducers=4, max_reducers=2), "max_reducers=2 is below num_reducers=4"),
    (lambda: dpa.ShapeConfig(scale_out_backlog_s=0), "scale_out_backlog_s must be a positive number"),
    (lambda: dpa.ShapeConfig(reducer_num_cpus=-1), "reducer_num_cpus must be a number >= 0"),
    (lambda: dpa.BalanceConfig(policy="nope"), "valid policies"),
    (lambda: dpa.BalanceConfig(tau=-0.1), "BalanceConfig.tau must be a number >= 0"),
    (lambda: dpa.BalanceConfig(max_rounds=-1), r"max_rounds must be an integer >= 0 \(0 = no load balancing\)"),
    (lambda: dpa.BalanceConfig(initial_tokens=12), "power of two .* try 8 or 16"),
    (lambda: dpa.BalanceConfig(lb_interval_s=0), "lb_interval_s must be a positive number of seconds"),
    (lambda: dpa.BalanceConfig(policy_options=[1]), "policy_options must be a dict"),
    (lambda: dpa.BalanceConfig(seed="1"), "BalanceConfig.seed must be an integer"),
    (lambda: dpa.FlowConfig(batch_size=0), "FlowConfig.batch_size must be an integer >= 1 or None"),
    (lambda: dpa.FlowConfig(chunk_size=None), "FlowConfig.chunk_size must be an integer >= 1"),
    (lambda: dpa.FlowConfig(queue_capacity=0), "queue_capacity must be an integer >= 1"),
    (lambda: dpa.FlowConfig(step_time_s=0), "step_time_s must be a positive number of seconds"),
    (lambda: dpa.RecoveryConfig(checkpoint_interval_s=-1), r"checkpoint_interval_s .* \(0 = no checkpoints\)"),
    (lambda: dpa.RecoveryConfig(max_recoveries=-1), "max_recoveries must be an integer >= 0"),
    (lambda: dpa.RecoveryConfig(timeout_s=0), "timeout_s must be a positive number of seconds or None"),
    (lambda: dpa.SemanticsConfig(migrate="keys"), r"migrate must be one of \('records', 'state'\)"),
    (lambda: dpa.SemanticsConfig(map_side_combine="yes"), "map_side_combine must be True or False"),
])
def test_each_group_validates_its_fields(make, message):
    with pytest.raises(ConfigError, match=message):
        make()


def test_policy_options_none_is_an_empty_dict():
    assert dpa.BalanceConfig(policy_options=None).policy_options == {}


def test_the_registry_reads_a_grouped_config(no_deprecation):
    from dpa.routing.registry import make_policy

    cfg = dpa.JobConfig(shape=dpa.ShapeConfig(num_mappers=2, num_reducers=4), runtime="local",
                        balance=dpa.BalanceConfig(policy="halving", tau=0.7, policy_options={"patience": 2}))
    settings = make_policy(cfg).settings
    assert (settings.tau, settings.patience) == (0.7, 2)
    ring = dpa.RingSettings("halving", tau=0.5)
    assert make_policy(cfg.with_options(tau=0.2, policy=ring, policy_options={})).settings.tau == 0.5
    with pytest.raises(ConfigError, match="JobConfig.tau=0.3 conflicts with RingSettings.tau=0.5"):
        make_policy(cfg.with_options(tau=0.3, policy=ring, policy_options={}))


def test_a_local_run_with_shortcuts_never_warns(no_deprecation):
    assert dpa.run(["a", "b", "a"], runtime="local").to_dict() == {"a": 2, "b": 1}
    res = dpa.run([{"k": 1}, {"k": 2}, {"k": 1}], key="k", reducer=dpa.Count(), runtime="local",
                  num_reducers=3, num_mappers=2, policy="hash", tau=0.3, batch_size=2, timeout_s=30)
    assert res.to_dict() == {1: 2, 2: 1}
    cfg = grouped()
    assert dpa.run([1, 1], config=cfg, num_reducers=9, max_reducers=None).to_dict() == {1: 2}
    assert dpa.run([1, 1], config={"num_reducers": 2, "runtime": "local"}).to_dict() == {1: 2}


def test_a_local_run_of_a_reducer_without_merge_falls_back_without_warning(no_deprecation):
    class NoMerge(dpa.Count):
        can_merge = False  # the default policy falls back to hash (plan: with_options)

    res = dpa.run(["a", "b", "a"], reducer=NoMerge(), runtime="local")
    assert res.to_dict() == {"a": 2, "b": 1} and res.stats.policy == "hash"


def test_the_cli_builds_its_config_without_a_warning(no_deprecation):
    from dpa.tools.cli.commands import _config
    from dpa.tools.cli.parser import build_parser

    args = build_parser().parse_args(["run", "--runtime", "local", "--reducers", "3", "--policy", "hash",
                                      "--tau", "0.4", "--batch-size", "100"])
    cfg = _config(args)
    assert (cfg.num_reducers, cfg.policy, cfg.tau, cfg.batch_size, cfg.runtime) == (3, "hash", 0.4, 100, "local")
    assert _config(args, max_rounds=0).max_rounds == 0


def test_simulate_builds_its_config_without_a_warning(no_deprecation):
    from dpa.tools.simulate import simulate

    out = simulate([1, 2, 3, 1, 1, 1], "hash", num_sources=2, num_workers=2)
    assert out is not None
