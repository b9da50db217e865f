"""An empty input gives an empty result at once: typed like the input, without starting Ray."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

import dpa
from dpa.input.sources import pandas_table


def empty_frame() -> pd.DataFrame:
    """The empty frame a filter leaves of a frame with a string key (an ``object`` column)."""
    df = pd.DataFrame({"user": ["a", "b"], "amount": [1.0, 2.0], "n": [1, 2]})
    return df[df.amount > 10]


@pytest.mark.parametrize("reducer,columns", [
    (dpa.Sum("amount"), {"user": pa.string(), "sum": pa.float64()}),
    ([dpa.Count(), dpa.Max("n")], {"user": pa.string(), "count(1)": pa.int64(), "max(n)": pa.int64()}),
])
def test_an_empty_pandas_frame_keeps_its_string_key_type(reducer, columns):
    res = dpa.run(empty_frame(), key="user", reducer=reducer)
    table = res.to_arrow()
    assert table.num_rows == 0 and len(res) == 0
    assert {f.name: f.type for f in table.schema} == columns


EMPTY_JOBS = textwrap.dedent("""
    import sys, time
    import pandas as pd, pyarrow as pa
    import dpa
    df = pd.DataFrame({"user": ["a", "b"], "amount": [1.0, 2.0]})
    started = time.perf_counter()
    for source in (df[df.amount > 10], pa.table({"user": pa.array([], pa.string())}), []):
        res = dpa.run(source, key="user" if not isinstance(source, list) else None, reducer=dpa.Count())
        assert len(res) == 0 and res.stats.total_processed == 0 and res.stats.runtime == "ray"
    print("ray imported" if "ray" in sys.modules and sys.modules["ray"].is_initialized() else "no ray",
          time.perf_counter() - started)
""")


def test_an_empty_input_returns_at_once_without_starting_ray():
    # A fresh interpreter: another test of the session may have started Ray in this one.
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", EMPTY_JOBS], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    words = proc.stdout.split()
    assert words[:2] == ["no", "ray"], proc.stdout
    assert float(words[2]) < 10  # no Ray start (which takes seconds), generous for a loaded machine


def test_only_empty_object_columns_become_strings():
    df = pd.DataFrame({"s": pd.Series([], dtype=object), "f": pd.Series([], dtype="float64"),
                       "d": pd.Series([], dtype="datetime64[ns]")})
    schema = pandas_table(df).schema
    assert schema.field("s").type == pa.string() and schema.field("f").type == pa.float64()
    assert pa.types.is_timestamp(schema.field("d").type)
    # with rows, pyarrow's own inference stands (a column of Nones stays null)
    assert pandas_table(pd.DataFrame({"s": [None, None]})).schema.field("s").type == pa.null()
