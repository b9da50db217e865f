"""TPC-H Q1 through the bridge equals Spark's own ``groupBy().agg``, on data dpa did not write.

``lineitem`` at a small scale factor is made with ``tpchgen-cli`` (a test-only dependency);
Q1's filter and derived decimal columns (``decimal(32,4)`` and ``decimal(38,6)``) make the
general Spark path. Every value and every Spark type must equal Spark's own, with each
precombine the bridge can take for these aggregates.
"""

from __future__ import annotations

import pytest

from benchmarks import spark_tpch


@pytest.fixture(scope="module")
def lineitem(tmp_path_factory: pytest.TempPathFactory) -> str:
    try:
        spark_tpch.tpchgen()
    except SystemExit as exc:
        pytest.skip(str(exc))
    return spark_tpch.lineitem(0.01, str(tmp_path_factory.mktemp("tpch")))


@pytest.mark.parametrize("precombine", [None, "sql", "arrow", False])
def test_q1_equals_spark_s_own_values_and_types(spark, lineitem, precombine):
    want = spark_tpch.q1_frame(spark, lineitem).groupBy(*spark_tpch.KEYS).agg(*spark_tpch.spark_aggregates())
    bridge = {} if precombine is None else {"precombine": precombine}
    _, schema, rows, result = spark_tpch.run_dpa_once(spark, lineitem, None, bridge)
    assert len(rows) == 4  # (A,F), (N,F), (N,O), (R,F)
    assert spark_tpch.check(schema, rows, want.schema, want.collect()) == "ok"
    if precombine is None:  # the default takes Spark SQL's partial aggregates for Q1
        assert result.stats.extra.get("spark_combine") == "sql"
