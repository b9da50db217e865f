"""Per-group functions on Ray: pandas' answer for every policy, a Ray Dataset out, a worker killed."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import ray

import dpa
from dpa.runtime.ray.host import find_member

pytestmark = pytest.mark.usefixtures("ray_session")
# The actors cannot import test modules (tests/integration/__init__.py): ship this one's functions by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

_RNG = np.random.default_rng(5)
N = 3_000
TABLE = pa.table({"k": (_RNG.zipf(1.2, N) % 120).astype(np.int64), "v": _RNG.integers(0, 100, N)})


def summary(pdf: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({"k": [pdf.k.iloc[0]], "n": [len(pdf)], "total": [int(pdf.v.sum())],
                         "top": [int(pdf.v.max())]})


def slow_summary(pdf: pd.DataFrame) -> pd.DataFrame:
    time.sleep(0.003 * len(pdf))
    return summary(pdf)


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)


EXPECTED = _sorted(pd.concat([summary(g) for _, g in TABLE.to_pandas().groupby("k")]))


@pytest.mark.parametrize("policy", sorted(dpa.policies()))
def test_every_policy_gives_pandas_answer_on_ray(policy):
    res = dpa.run(TABLE, key="k", reducer=dpa.GroupApply(summary), policy=policy, num_reducers=4,
                  batch_size=200, timeout_s=120)
    pd.testing.assert_frame_equal(_sorted(res.to_pandas()), EXPECTED, check_dtype=False)
    assert res.stats.group_apply["groups"] == len(EXPECTED) and res.stats.runtime == "ray"


def test_map_groups_on_a_ray_dataset_gives_a_ray_dataset():
    ds = ray.data.from_arrow(TABLE).repartition(4).materialize()
    out = dpa.groupby(ds, "k", num_reducers=4).map_groups(summary)
    assert isinstance(out, ray.data.Dataset)
    pd.testing.assert_frame_equal(_sorted(out.to_pandas()), EXPECTED, check_dtype=False)


def test_a_fn_error_on_ray_names_the_key():
    def boom(pdf):
        if pdf.k.iloc[0] == 5:
            raise KeyError("missing")
        return None

    with pytest.raises(dpa.JobFailedError, match=r"KeyError: 'missing' on the group of key 5"):
        dpa.run(TABLE, key="k", reducer=dpa.GroupApply(boom), num_reducers=2, timeout_s=120)


def _kill_later(role: str, delay: float, killed: list) -> threading.Thread:
    """Kills the host running ``role`` after ``delay`` seconds; ``killed`` gets the roles
    it ran (every one of them is lost with it)."""
    def kill():
        time.sleep(delay)
        found = find_member(role)
        if found is not None:
            ray.kill(found[0], no_restart=True)
            killed.append(sorted(found[1]))

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


def test_a_worker_killed_while_groups_are_applied_changes_nothing():
    dpa.shutdown()  # the victim is found by its role: one pool
    config = dpa.JobConfig(num_reducers=4, batch_size=200, timeout_s=120)
    dpa.run(TABLE.slice(0, 100), key="k", reducer=dpa.GroupApply(summary), config=config)  # warm pool
    killed: list = []
    # Collecting takes well under a second; fn takes 3 ms per row, about 2.3 s per worker.
    thread = _kill_later("reducer-1", 1.0, killed)
    res = dpa.run(TABLE, key="k", reducer=dpa.GroupApply(slow_summary), config=config)
    thread.join()
    assert killed and res.stats.recoveries, res.stats.recoveries
    assert "reducer-1" in killed[0] and res.stats.recoveries[0].actors == killed[0]
    pd.testing.assert_frame_equal(_sorted(res.to_pandas()), EXPECTED, check_dtype=False)


def warmed(pdf: pd.DataFrame) -> pd.DataFrame:
    """Centres ``v`` in every row and says whether this process was warmed for group apply
    (its garbage collector's frozen objects, waiting up to 60 s for the warm-up thread)."""
    import gc

    deadline = time.monotonic() + 60
    while not gc.get_freeze_count() and time.monotonic() < deadline:
        time.sleep(0.05)
    return pdf.assign(x=pdf.v - pdf.v.mean(), warm=gc.get_freeze_count() > 0)


def test_a_new_pool_for_many_small_groups_is_warmed_and_gives_pandas_answer():
    dpa.shutdown()  # (idle pools: this job starts a new one)
    keys = np.random.default_rng(9).permutation(np.repeat(np.arange(2_000, dtype=np.int64), 5))
    table = pa.table({"k": keys, "v": np.arange(len(keys), dtype=np.float64)})
    res = dpa.run(table, key="k", reducer=dpa.GroupApply(warmed), num_reducers=2, timeout_s=180)
    got = res.to_pandas()
    assert got["warm"].all()
    want = pd.concat([g.assign(x=g.v - g.v.mean()) for _, g in table.to_pandas().groupby("k")])
    pd.testing.assert_frame_equal(_sorted(got.drop(columns=["warm"])), _sorted(want), check_dtype=False)
    assert res.stats.group_apply["groups"] == 2_000
