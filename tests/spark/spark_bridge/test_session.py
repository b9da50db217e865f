"""Tests for spark_bridge.session: Java detection, configuration, session reuse."""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

import pytest

from dpa.errors import DPAError
from spark_bridge.session import (
    JAVA17_OPTIONS,
    JAVA_OPTION_KEYS,
    JavaNotFoundError,
    SparkConfig,
    check_java,
    default_executor_cores,
    default_executor_memory,
    default_num_executors,
    find_java,
    get_or_create_spark,
    is_spark_running,
    java_version,
    merge_java_options,
    parse_java_version,
    parse_memory,
    spark_session,
)

INSTALL_HINT = "apt-get install -y openjdk-17-jre-headless"


def _fake_java_home(tmp_path: Path, version_output: str) -> Path:
    """A JAVA_HOME whose bin/java prints ``version_output`` to stderr, like the real one."""
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\nprintf '%s\\n' {shlex.quote(version_output)} >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return home


# --------------------------------------------------------------------------- Java


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment', (17, 0, 15)),
        ('java version "1.8.0_292"\nJava(TM) SE Runtime Environment', (8, 0, 292)),
        ('openjdk version "11.0.2" 2019-01-15', (11, 0, 2)),
        ('openjdk version "21" 2023-09-19', (21,)),
        ('openjdk version "22-ea" 2024-03-19', (22,)),
        ('Picked up JAVA_TOOL_OPTIONS: -Xmx1g\nopenjdk version "17.0.1"', (17, 0, 1)),
        ("openjdk 17.0.15 2025-04-15", (17, 0, 15)),
        ("bash: java: command not found", None),
        ("", None),
    ],
)
def test_parse_java_version(output: str, expected: tuple[int, ...] | None) -> None:
    assert parse_java_version(output) == expected


def test_missing_java_home_raises_with_install_hint(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-such-jdk"))
    assert find_java() is None
    assert java_version() is None
    with pytest.raises(JavaNotFoundError) as info:
        check_java()
    message = str(info.value)
    assert "JAVA_HOME" in message and "no-such-jdk" in message
    assert INSTALL_HINT in message
    assert isinstance(info.value, DPAError)


def test_no_java_on_path_raises_with_install_hint(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert find_java() is None
    with pytest.raises(JavaNotFoundError, match="PATH") as info:
        check_java()
    assert INSTALL_HINT in str(info.value)
    assert "JAVA_HOME" in str(info.value)


def test_java_home_wins_over_path(tmp_path, monkeypatch) -> None:
    home = _fake_java_home(tmp_path, 'openjdk version "11.0.20" 2023-07-18')
    monkeypatch.setenv("JAVA_HOME", str(home))
    assert find_java() == str(home / "bin" / "java")
    assert java_version() == (11, 0, 20)
    assert check_java(min_major=8) == (11, 0, 20)


def test_too_old_java_names_the_version(tmp_path, monkeypatch) -> None:
    home = _fake_java_home(tmp_path, 'java version "1.7.0_80"')
    monkeypatch.setenv("JAVA_HOME", str(home))
    with pytest.raises(JavaNotFoundError) as info:
        check_java(min_major=8)
    message = str(info.value)
    assert "1.7.0_80" in message and "too old" in message and "8" in message
    assert INSTALL_HINT in message


def test_unparseable_java_version(tmp_path, monkeypatch) -> None:
    home = _fake_java_home(tmp_path, "Error: could not create the Java Virtual Machine")
    monkeypatch.setenv("JAVA_HOME", str(home))
    with pytest.raises(JavaNotFoundError, match="Could not determine"):
        check_java()


def test_real_java_is_usable() -> None:
    # The directory is skipped without Java, so here a real one must be found.
    assert check_java()[0] >= 8


# --------------------------------------------------------------------------- options


def test_java17_options_content() -> None:
    tokens = JAVA17_OPTIONS.split()
    assert tokens[0] == "-XX:+IgnoreUnrecognizedVMOptions"
    for pkg in ("java.lang", "java.nio", "sun.nio.ch", "sun.util.calendar"):
        assert f"--add-opens=java.base/{pkg}=ALL-UNNAMED" in tokens
    assert len(tokens) == 15


def test_merge_keeps_user_options_and_adds_required() -> None:
    merged = merge_java_options("-Xss4m -Dfoo='a b'")
    tokens = shlex.split(merged)
    assert tokens[-2:] == ["-Xss4m", "-Dfoo=a b"]  # user flags last: they win
    assert set(JAVA17_OPTIONS.split()) <= set(tokens)


def test_merge_does_not_duplicate() -> None:
    user = "--add-opens=java.base/java.nio=ALL-UNNAMED -Dx=1"
    tokens = shlex.split(merge_java_options(user))
    assert tokens.count("--add-opens=java.base/java.nio=ALL-UNNAMED") == 1
    assert "-Dx=1" in tokens
    assert merge_java_options(None) == merge_java_options("") == JAVA17_OPTIONS


def test_spark_conf_merges_not_clobbers() -> None:
    cfg = SparkConfig(
        num_executors=1,
        executor_cores=1,
        executor_memory="1g",
        extra_conf={
            "spark.driver.extraJavaOptions": "-Duser.flag=1",
            "spark.ui.enabled": True,
            "spark.sql.shuffle.partitions": "7",
        },
    )
    conf = cfg.spark_conf()
    driver = shlex.split(conf["spark.driver.extraJavaOptions"])
    assert "-Duser.flag=1" in driver
    assert set(JAVA17_OPTIONS.split()) <= set(driver)
    for key in JAVA_OPTION_KEYS:
        assert set(JAVA17_OPTIONS.split()) <= set(shlex.split(conf[key]))
    assert conf["spark.ui.enabled"] == "true"  # user value wins over dpa default
    assert conf["spark.sql.shuffle.partitions"] == "7"
    assert cfg.extra_conf["spark.driver.extraJavaOptions"] == "-Duser.flag=1"  # not mutated


def test_executor_actor_cpus_conf() -> None:
    conf = SparkConfig(executor_actor_cpus=0.5).spark_conf()
    assert conf["spark.ray.raydp_spark_executor.actor.resource.cpu"] == "0.5"
    assert "spark.ray.raydp_spark_executor.actor.resource.cpu" not in SparkConfig().spark_conf()


# --------------------------------------------------------------------------- SparkConfig


def test_default_config_fits_machine() -> None:
    cfg = SparkConfig()
    cpus = os.cpu_count() or 1
    assert cfg.app_name == "dpa"
    assert 1 <= cfg.num_executors * cfg.executor_cores <= max(1, cpus)
    assert 1 << 30 <= parse_memory(cfg.executor_memory) <= 4 << 30


@pytest.mark.parametrize(
    ("cpus", "executors", "cores"), [(1, 1, 1), (2, 1, 1), (4, 1, 2), (16, 2, 4), (64, 8, 4)]
)
def test_default_sizing(cpus: int, executors: int, cores: int) -> None:
    assert default_num_executors(cpus) == executors
    assert default_executor_cores(cpus) == cores


@pytest.mark.parametrize(
    ("total", "executors", "expected"),
    [(4 << 30, 1, "1g"), (24 << 30, 1, "2g"), (64 << 30, 1, "4g"), (32 << 30, 2, "1536m")],
)
def test_default_executor_memory(total: int, executors: int, expected: str) -> None:
    assert default_executor_memory(total, executors) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1g", 1 << 30), ("512m", 512 << 20), ("2GB", 2 << 30), ("1536M", 1536 << 20), (4096, 4096)],
)
def test_parse_memory(value: str | int, expected: int) -> None:
    assert parse_memory(value) == expected


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_executors": 0}, "num_executors"),
        ({"executor_cores": -1}, "executor_cores"),
        ({"executor_cores": 1.5}, "executor_cores"),
        ({"executor_memory": "lots"}, "memory"),
        ({"executor_memory": "256m"}, "512m"),
        ({"app_name": ""}, "app_name"),
        ({"extra_conf": {"spark.x": None}}, "spark.x"),
        ({"executor_actor_cpus": -1}, "executor_actor_cpus"),
    ],
)
def test_config_validation(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SparkConfig(**kwargs)


# --------------------------------------------------------------------------- live session


def test_session_is_spark_on_ray(spark) -> None:
    import ray

    assert is_spark_running()
    assert spark.sparkContext.master.startswith("ray://")
    assert ray.get_actor(spark.sparkContext.appName + "_SPARK_MASTER") is not None
    assert spark.range(10).count() == 10


def test_get_or_create_reuses_running_session(spark) -> None:
    again = get_or_create_spark(SparkConfig(app_name="ignored", executor_memory="3g"))
    assert again is spark


def test_context_manager_keeps_session_it_did_not_start(spark) -> None:
    with spark_session() as inner:
        assert inner is spark
    assert is_spark_running()
    assert spark.range(5).count() == 5
