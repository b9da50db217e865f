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


def test_stats_and_a_runtimes_output_share_the_job_figures_and_repeat_none():
    from dataclasses import fields

    from dpa.engine.output import JobFigures, RunOutput
    from dpa.result import Stats

    shared = {f.name for f in fields(JobFigures)}
    own_output = {f.name for f in fields(RunOutput)} - shared
    own_stats = {f.name for f in fields(Stats)} - shared
    assert own_output == {"tables", "final_snapshot", "arrow_refs", "result_meta"}
    assert not own_output & own_stats

    res = dpa.run(["a", "b", "a", "c"], runtime="local", num_reducers=2)
    stats = res.stats
    assert isinstance(stats, JobFigures) and stats.processed and sum(stats.processed) == 4
    assert stats.runtime == "local" and stats.num_keys == 3 and stats.virtual_time_s is not None
    as_dict = stats.to_dict()
    assert as_dict["processed"] == stats.processed and as_dict["ring_version"] == stats.ring_version
