"""``spark_bridge.apply_in_pandas`` on PySpark 3.5 with RayDP equals Spark's ``applyInPandas``."""

from __future__ import annotations

import os
import sys

import pytest

import dpa
from spark_bridge import apply_in_pandas

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from spark_staged.cases import check_apply_in_pandas_equals_spark, skewed_frame  # noqa: E402


@pytest.mark.parametrize("path", ["raydp", "staged"])
def test_apply_in_pandas_equals_spark_on_both_paths(spark, path):
    result = check_apply_in_pandas_equals_spark(spark, path=path)
    assert result.stats.extra["spark_path"] == path


def test_a_bad_schema_or_key_is_refused_before_the_job(spark):
    df = skewed_frame(spark)
    with pytest.raises(dpa.ConfigError, match="cannot parse the schema"):
        apply_in_pandas(df, "k", lambda pdf: pdf, "k int, n")
    with pytest.raises(dpa.SchemaError, match="missing column"):
        apply_in_pandas(df, "nope", lambda pdf: pdf, "k int")


def test_an_output_that_does_not_fit_the_schema_names_the_key(spark):
    import pandas as pd

    df = skewed_frame(spark, rows=200)

    def wrong(pdf):
        return pd.DataFrame({"k": [int(pdf.k.iloc[0])], "count": [len(pdf)]})

    with pytest.raises(dpa.DPAError, match=r"returned columns \['k', 'count'\] for the group of key"):
        apply_in_pandas(df, "k", wrong, "k int, n long").collect()
