"""Where the Spark JVMs listen: loopback settings for a Ray on loopback (no Spark needed;
tests/spark/spark_bridge/test_embedded_default.py checks the sockets of a real session)."""

from __future__ import annotations

from spark_bridge.security import LOOPBACK, loopback_conf
from spark_bridge.session import SparkConfig


def config(**kwargs) -> SparkConfig:
    return SparkConfig(num_executors=1, executor_cores=1, executor_memory="1g", **kwargs)


def test_on_a_local_ray_every_jvm_binds_to_loopback():
    conf = config().spark_conf(loopback=True)
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == LOOPBACK
    for key in ("spark.executor.extraJavaOptions", "spark.ray.raydp_app_master.extraJavaOptions"):
        assert f"-Dray.node-ip={LOOPBACK}" in conf[key]  # the address RayDP binds these actors to
    assert "-Dray.node-ip" not in conf["spark.driver.extraJavaOptions"]


def test_on_another_ray_nothing_is_pinned():
    conf = config().spark_conf(loopback=False)
    assert "spark.driver.host" not in conf and "spark.driver.bindAddress" not in conf
    assert all("-Dray.node-ip" not in v for k, v in conf.items() if k.endswith("extraJavaOptions"))


def test_a_user_s_driver_address_wins():
    conf = config(extra_conf={"spark.driver.host": "10.0.0.5"}).spark_conf(loopback=True)
    assert conf["spark.driver.host"] == "10.0.0.5" and "spark.driver.bindAddress" not in conf
    assert loopback_conf({"spark.driver.bindAddress": "0.0.0.0"}) == {"java_options": f"-Dray.node-ip={LOOPBACK}"}
