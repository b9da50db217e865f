"""What Spark on Ray prints: the log4j2 configuration handed to every JVM (no Spark needed)."""

from __future__ import annotations

import os

import pytest

from spark_bridge.logs import log4j2_file, quiet_jvm_start
from spark_bridge.session import SparkConfig


def test_every_jvm_gets_the_configuration_of_the_level():
    conf = SparkConfig(num_executors=1, executor_cores=1, executor_memory="1g").spark_conf()
    uri = log4j2_file("ERROR").as_uri()
    assert conf["spark.log4j.config.file.name"] == uri  # the driver (RayDP passes it on)
    assert conf["spark.ray.log4j.config.file.name"] == uri  # RayDP's app master
    for key in ("spark.executor.extraJavaOptions", "spark.driver.extraJavaOptions",
                "spark.ray.raydp_app_master.extraJavaOptions"):
        assert f"-Dlog4j2.configurationFile={uri}" in conf[key]
        assert "-Dray.logging.level=ERROR" in conf[key]  # the Ray Java runtime inside the JVM
        assert "--add-opens=java.base/java.lang=ALL-UNNAMED" in conf[key]
    text = log4j2_file("ERROR").read_text()
    assert "rootLogger.level = error" in text
    assert "logger.repl.name = org.apache.spark.repl.Main" in text  # else "Setting default log level"


def test_a_user_setting_wins_and_a_bad_level_is_refused():
    conf = SparkConfig(num_executors=1, executor_cores=1, executor_memory="1g", log_level="INFO",
                       extra_conf={"spark.log4j.config.file.name": "/etc/mine.properties"}).spark_conf()
    assert conf["spark.log4j.config.file.name"] == "/etc/mine.properties"
    assert "rootLogger.level = info" in log4j2_file("INFO").read_text()
    with pytest.raises(ValueError, match="log_level must be one of ERROR, WARN, INFO, DEBUG"):
        SparkConfig(num_executors=1, executor_cores=1, executor_memory="1g", log_level="LOUD")


def test_the_jvms_stderr_goes_to_a_file_only_while_they_start(capfd):
    os.environ.pop("RAY_BACKEND_LOG_LEVEL", None)
    with quiet_jvm_start("ERROR") as path:
        assert os.environ["RAY_BACKEND_LOG_LEVEL"] == "warning"
        os.write(2, b"from a child JVM\n")
    assert "RAY_BACKEND_LOG_LEVEL" not in os.environ
    os.write(2, b"back on the console\n")
    err = capfd.readouterr().err
    assert "from a child JVM" not in err and "back on the console" in err
    assert "from a child JVM" in path.read_text()
    with quiet_jvm_start("WARN") as path:
        assert path is None


def test_the_jvm_start_lines_are_dropped_from_what_ray_forwards_and_the_rest_kept():
    from ray._private.ray_logging import global_worker_stdstream_dispatcher as dispatcher

    from spark_bridge.logs import drop_jvm_start_lines

    printed = []
    saved = dispatcher.handlers
    dispatcher.handlers = [("ray_print_logs", printed.append)]  # Ray's own handler, if any, is put back below
    try:
        assert drop_jvm_start_lines() and drop_jvm_start_lines()  # idempotent: wrapped once
        start = "[2026-01-01 10:00:00,000 I 5450 5468] gcs_client.cc:96: GcsClient has no Cluster ID set, and won't fetch"
        dispatcher.emit({"pid": "raylet", "lines": [start], "is_err": True})
        dispatcher.emit({"pid": 7, "lines": [start, "a user's print"], "is_err": False})
        assert [batch["lines"] for batch in printed] == [["a user's print"]]
    finally:
        dispatcher.handlers = saved


def test_the_driver_jvm_is_pointed_back_at_the_session_s_file():
    from spark_bridge.logs import reapply_log4j2

    calls = []

    class Context:
        def setConfigLocation(self, uri):  # noqa: N802 - log4j2's name
            calls.append(uri)

    class JVM:
        class org:  # noqa: N801
            class apache:  # noqa: N801
                class logging:  # noqa: N801
                    class log4j:  # noqa: N801
                        class LogManager:  # noqa: N801
                            @staticmethod
                            def getContext(current):  # noqa: N802
                                return Context()

        class java:  # noqa: N801
            class net:  # noqa: N801
                URI = str

    spark = type("Spark", (), {"sparkContext": type("SC", (), {"_jvm": JVM})()})()
    reapply_log4j2(spark, "/etc/mine.properties")
    reapply_log4j2(spark, "file:///tmp/x.properties")
    assert calls == ["file:///etc/mine.properties", "file:///tmp/x.properties"]
