"""Source adapters: other packages plug their source types into dpa.run."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pyarrow as pa

import dpa
from dpa.input.adapters import find_source_adapter, register_source_adapter


class Frame:
    """A stand-in for another library's table type."""

    def __init__(self, rows):
        self.rows = rows


def test_a_registered_adapter_takes_its_source_type():
    seen = {}

    def run(source, **kwargs):
        seen.update(kwargs)
        return dpa.run(source.rows, **kwargs)

    register_source_adapter("frame-test", lambda s: isinstance(s, Frame), run)
    out = dpa.run(Frame(["a", "b", "a"]), config=dpa.JobConfig(runtime="local"))
    assert out.to_dict() == {"a": 2, "b": 1}
    assert seen["config"].runtime == "local"
    assert find_source_adapter(pa.table({"x": [1]})) is None


def test_spark_dataframes_are_found_through_the_entry_point_without_importing_spark_bridge():
    script = textwrap.dedent("""
        import sys
        from dpa.input.adapters import find_source_adapter
        DataFrame = type("DataFrame", (), {"__module__": "pyspark.sql.dataframe"})
        assert "spark_bridge" not in sys.modules
        adapter = find_source_adapter(DataFrame())
        assert adapter is not None and adapter.name == "spark", adapter
        assert "pyspark" not in sys.modules  # recognising one must not import Spark
        print("OK")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-2000:]
