"""The embedded default as a new user meets it, in a fresh process: ``dpa.run`` on a Spark
DataFrame returns a ``dpa.Result``, the console stays clean (no Ray core worker start-up
lines, no Spark task log or Java stack trace), a failing Spark task is one dpa error, and
every port a Spark JVM listens on is on loopback or is Ray's own (token-protected)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent(
    r'''
    import glob, json, os
    import dpa
    from spark_bridge import spark_session
    from pyspark.sql import functions as F

    def listening(pid):
        """(address, port) of each TCP socket process ``pid`` listens on."""
        inodes = set()
        for fd in glob.glob(f"/proc/{pid}/fd/*"):
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        found = []
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(table) as f:
                next(f)
                for row in f:
                    cols = row.split()
                    if cols[3] != "0A" or cols[9] not in inodes:  # 0A: LISTEN
                        continue
                    hexaddr, hexport = cols[1].split(":")
                    raw = bytes.fromhex(hexaddr)
                    if len(raw) == 4:
                        address = ".".join(str(b) for b in raw[::-1])
                    else:  # four little-endian 32-bit words
                        words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                        mapped = words[:12] == bytes(10) + b"\xff\xff"
                        address = ".".join(str(b) for b in words[12:]) if mapped else words.hex()
                    found.append((address, int(hexport, 16)))
        return found

    def descendants(root):
        children = {}
        for stat in glob.glob("/proc/[0-9]*/stat"):
            try:
                fields = open(stat).read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(stat.split("/")[2]))
        out, todo = [], [root]
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo.extend(children.get(pid, []))
        return out

    def is_java(pid):
        try:
            return os.path.basename(open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0]).decode() == "java"
        except OSError:
            return False

    report = {}
    with spark_session() as spark:
        df = spark.range(0, 2000).select((F.col("id") % 7).alias("k"), F.col("id").alias("x"))
        res = dpa.run(df, key="k", reducer=dpa.Sum("x"))
        report["type"] = type(res).__module__ + "." + type(res).__name__
        report["rows"] = sorted(res.to_dict().items())
        report["spark_rows"] = sorted((r["k"], r["sum"]) for r in res.to_spark().collect())
        report["expected"] = sorted((r["k"], r["s"]) for r in df.groupBy("k").agg(F.sum("x").alias("s")).collect())
        # The Ray core worker inside each JVM (a Ray worker, or a Ray driver): Ray's port,
        # behind Ray's token. Ray's GCS knows every worker's and driver's pid and port.
        from ray._private.state import state
        from ray.core.generated import gcs_pb2
        accessor = state._connect_and_get_accessor()
        ray_ports = {}
        for raw in accessor.get_worker_table():
            worker = gcs_pb2.WorkerTableData.FromString(raw)
            ray_ports.setdefault(worker.pid, set()).add(worker.worker_address.port)
        for raw in accessor.get_job_table(skip_submission_job_info_field=True, skip_is_running_tasks_field=True):
            job = gcs_pb2.JobTableData.FromString(raw)
            ray_ports.setdefault(job.driver_pid, set()).add(job.driver_address.port)
        sockets = {}
        for pid in descendants(os.getpid()):
            if is_java(pid):
                sockets[pid] = {"listening": listening(pid), "ray": sorted(ray_ports.get(pid, ()))}
        report["sockets"] = sockets

        def boom(batches):
            for batch in batches:
                raise ValueError("boom in a Spark task")
                yield batch

        try:
            dpa.run(df.mapInPandas(boom, df.schema), key="k", reducer=dpa.Count())
        except dpa.JobFailedError as exc:
            report["error"] = str(exc)
    print("REPORT " + json.dumps(report))
    '''
)


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    """One fresh process running the embedded default (no Ray before it)."""
    script = tmp_path_factory.mktemp("embedded") / "first_hour.py"
    script.write_text(SCRIPT)
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900, cwd=root,
                          env={**__import__("os").environ, "PYTHONPATH": str(root)})
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("REPORT "))
    return json.loads(line[len("REPORT "):]), proc.stdout.replace(line, ""), proc.stderr


def test_dpa_run_on_a_spark_dataframe_returns_a_result_with_the_spark_frame(embedded):
    report, _, _ = embedded
    assert report["type"] == "dpa.result.Result"
    assert [tuple(r) for r in report["rows"]] == [tuple(r) for r in report["expected"]]
    assert [tuple(r) for r in report["spark_rows"]] == [tuple(r) for r in report["expected"]]


def test_the_console_shows_no_jvm_start_lines_and_no_spark_task_log(embedded):
    _, out, err = embedded
    console = out + err
    for noise in ("gcs_client", "(raylet)", "GcsClient", "TaskSetManager", "\tat org.apache", "WARN ", "Setting default log level"):
        assert noise not in console, f"{noise!r} on the console:\n{console[-3000:]}"
    assert err.strip() == "", err[-3000:]


def test_a_failing_spark_task_is_one_dpa_error_naming_what_it_raised(embedded):
    report, _, _ = embedded
    message = report["error"]
    assert message.startswith("Spark failed computing the input DataFrame: a Spark task raised ValueError: boom in a Spark task")
    assert "raise ValueError" in message  # the user's frame, from the Python worker's traceback
    assert "org.apache" not in message


def test_every_spark_port_is_on_loopback_or_ray_s_own(embedded):
    report, _, _ = embedded
    sockets = report["sockets"]
    assert len(sockets) >= 3, sockets  # the driver, RayDP's app master, an executor at least
    exposed = []
    for pid, seen in sockets.items():
        for address, port in seen["listening"]:
            if address != "127.0.0.1" and port not in seen["ray"]:
                exposed.append((pid, address, port))
    assert not exposed, f"Spark JVM ports reachable from another machine: {exposed}\n{sockets}"
