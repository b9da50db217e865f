"""Result: a Spark DataFrame only for a Spark input, and a clear error otherwise."""

from __future__ import annotations

import pytest

import dpa


def test_to_spark_needs_a_spark_input_and_says_what_to_use():
    res = dpa.run([("a", 1), ("b", 2), ("a", 3)], key=0, reducer=dpa.Count(), runtime="local")
    with pytest.raises(dpa.ConfigError, match=r"to_spark\(\) needs a job whose input was a Spark DataFrame.*"
                                              r"spark.createDataFrame\(result.to_pandas\(\)\)"):
        res.to_spark()


def test_to_spark_returns_the_frame_the_bridge_attached():
    res = dpa.run(["a", "b", "a"], runtime="local")
    frame = object()
    res.set_spark_frame(frame)
    assert res.to_spark() is frame
    assert res.to_dict() == {"a": 2, "b": 1}
