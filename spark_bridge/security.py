"""Who can connect to the Spark on Ray that :func:`spark_bridge.get_or_create_spark` starts.

Spark's JVMs (the driver, RayDP's app master and the executor actors) listen on TCP ports for
their RPC and block transfers, without authentication. RayDP binds them to the Ray node's
address: the driver to ``spark.driver.bindAddress`` (which RayDP sets to the node's address
unless given), the app master and the executors to the address the Ray Java runtime inside
them reports (``ray.node-ip``, else the machine's network address).

The embedded default keeps all of them on loopback: when the bridge starts Ray itself, it
starts it on ``127.0.0.1`` (:data:`LOOPBACK`, :func:`ray_start_options`), and on a Ray whose
node address is loopback (:func:`on_loopback_ray`) every JVM is told to bind there
(:func:`loopback_conf`). Ray's own ports (the Ray core worker inside each JVM) are Ray's,
protected by Ray's token.

Spark's RPC authentication (``spark.authenticate``) cannot protect a RayDP session instead:
RayDP's executors take the application id of RayDP's app master, the driver keeps Spark's
own, and Spark's block manager then refuses every block an executor asks the driver for
(``SecurityException: Client app-... not authorized to read stream``), so no job runs.
``docs/cluster.md`` says what a deployment on a cluster relies on instead.
"""

from __future__ import annotations

import logging
import os
from typing import Any

logger = logging.getLogger(__name__)

#: The loopback address the embedded default binds everything to.
LOOPBACK = "127.0.0.1"

#: Spark settings naming the driver's address: a user who gives one keeps it.
_DRIVER_ADDRESS_KEYS = ("spark.driver.host", "spark.driver.bindAddress")


def ray_start_options() -> dict[str, Any]:
    """``ray.init`` options for a Ray the bridge starts: on loopback, unless the process
    is told to join a cluster (``RAY_ADDRESS``), where the node's address is the cluster's
    business."""
    if os.environ.get("RAY_ADDRESS"):
        return {}
    return {"_node_ip_address": LOOPBACK}


def on_loopback_ray() -> bool:
    """Whether the Ray this process is connected to runs its node on :data:`LOOPBACK`
    (then every Spark JVM runs on this machine and can listen on loopback only)."""
    import ray

    if not ray.is_initialized():
        return False
    node = getattr(ray._private.worker, "_global_node", None)  # noqa: SLF001 - no public accessor
    address = getattr(node, "node_ip_address", None)
    return address == LOOPBACK


def loopback_conf(user_conf: dict[str, str]) -> dict[str, str]:
    """Spark settings that keep a session's JVMs on :data:`LOOPBACK`.

    The driver binds and advertises loopback (its RPC, block manager and RayDP's driver
    agent); the executors and the app master, Ray actors whose address RayDP takes from the
    Ray Java runtime, get ``-Dray.node-ip=127.0.0.1``.

    Args:
        user_conf: The user's ``extra_conf``: if it names the driver's address, the driver
            keeps it.

    Returns:
        Settings to put under the user's, and under the key ``"java_options"`` the JVM
        options for the executors' and the app master's ``extraJavaOptions``.
    """
    conf: dict[str, str] = {"java_options": f"-Dray.node-ip={LOOPBACK}"}
    if not set(_DRIVER_ADDRESS_KEYS) & set(user_conf):
        conf.update({key: LOOPBACK for key in _DRIVER_ADDRESS_KEYS})
    return conf
