"""A pool's hosts warm the per-group path as they start (``host._warm_group_apply``)."""

from __future__ import annotations

import subprocess
import sys

# In a fresh process: what the warm-up leaves behind, and the first unit's time after it.
_PROBE = """
import gc, sys
from dpa.runtime.ray.host import _warm_group_apply
_warm_group_apply()
print(gc.get_freeze_count() > 0, "pandas" in sys.modules, "pyarrow.pandas_compat" in sys.modules,
      "pyarrow.acero" in sys.modules)
"""


def test_the_warm_up_imports_pandas_and_arrows_engines_and_freezes_what_it_loaded():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split() == ["True"] * 4


def test_warm_up_runs_the_per_group_path_and_changes_nothing_it_returns():
    import numpy as np
    import pyarrow as pa

    from dpa.aggregates.group_apply import GroupApply, GroupUnit, warm_up

    warm_up()
    unit = GroupUnit(pa.table({"k": [1, 1, 2], "v": [1.0, 3.0, 5.0]}), np.array([0, 2, 3]))
    done = GroupApply(lambda pdf: pdf.assign(x=pdf.v - pdf.v.mean())).apply(unit, ["k"])
    assert done.table.to_pydict() == {"k": [1, 1, 2], "v": [1.0, 3.0, 5.0], "x": [-1.0, 1.0, 0.0]}
