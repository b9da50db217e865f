"""Who can connect to the Spark on Ray that :func:`spark_bridge.get_or_create_spark` starts.

Spark's JVMs (the driver, RayDP's app master and the executor actors) listen on TCP ports for
their RPC and block transfers, without authentication. RayDP binds them to the Ray node's
address: the driver to ``spark.driver.bindAddress`` (which RayDP sets to the node's address
unless given), the app master and the executors to the address the Ray Java runtime inside
them reports (``ray.node-ip``, else the machine's network address).

The embedded default keeps all of them on loopback: on a Ray that this process started as a
single local node (:func:`local_ray`: dpa or the bridge started it, and no other node joined),
every Spark JVM runs on this machine, and each is told to bind to ``127.0.0.1``
(:data:`LOOPBACK`, :func:`loopback_conf`). Ray itself cannot run its node on loopback (it
replaces ``127.0.0.1`` by the machine's address); Ray's own ports (the Ray core worker inside
each JVM among them) are protected by Ray's token.

Spark's RPC authentication (``spark.authenticate``) cannot protect a RayDP session instead:
RayDP's executors take the application id of RayDP's app master, the driver keeps Spark's
own, and Spark's block manager then refuses every block an executor asks the driver for
(``SecurityException: Client app-... not authorized to read stream``), so no job runs.
``docs/cluster.md`` says what a deployment on a cluster relies on instead.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

#: The loopback address the embedded default binds everything to.
LOOPBACK = "127.0.0.1"

#: Spark settings naming the driver's address: a user who gives one keeps it.
_DRIVER_ADDRESS_KEYS = ("spark.driver.host", "spark.driver.bindAddress")


def local_ray() -> bool:
    """Whether this process started the Ray it is connected to (a local head node, not a
    cluster it joined) and that Ray has one node: then every Spark JVM runs on this machine
    and can listen on loopback only."""
    import ray

    if not ray.is_initialized():
        return False
    node = getattr(ray._private.worker, "_global_node", None)  # noqa: SLF001 - no public accessor
    if not getattr(node, "head", False):
        return False
    return sum(1 for n in ray.nodes() if n.get("Alive")) == 1


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
