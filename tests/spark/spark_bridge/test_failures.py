"""A failing Spark task becomes one dpa error naming what the task raised (no Spark needed)."""

from __future__ import annotations

import pytest

import dpa
from spark_bridge.failures import spark_errors, spark_failure

WORKER_TEXT = """
  An exception was thrown from the Python worker. Please see the stack trace below.
Traceback (most recent call last):
  File "/work/job.py", line 14, in boom
    raise ValueError("boom in task")
ValueError: boom in task
"""


def spark_exception(name: str, text: str) -> BaseException:
    """An exception of PySpark's kind (by module) with ``text`` as its message."""
    cls = type(name, (Exception,), {"__module__": "pyspark.errors.exceptions.captured"})
    return cls(text)


def test_a_python_worker_failure_names_what_the_task_raised_with_its_traceback():
    error = spark_failure(spark_exception("PythonException", WORKER_TEXT))
    assert isinstance(error, dpa.JobFailedError)
    message = str(error)
    assert message.startswith("Spark failed computing the input DataFrame: a Spark task raised ValueError: boom in task")
    assert 'File "/work/job.py", line 14, in boom' in message
    assert "An exception was thrown" not in message


def test_a_jvm_failure_gives_its_first_line_only():
    text = "java.lang.OutOfMemoryError: Java heap space\n\tat org.apache.spark.Foo.bar(Foo.scala:1)\n" * 20
    message = str(spark_failure(spark_exception("SparkRuntimeException", text)))
    assert "java.lang.OutOfMemoryError: Java heap space" in message and "org.apache.spark.Foo" not in message


def test_dpa_errors_and_other_exceptions_pass_unchanged():
    assert spark_failure(dpa.SchemaError("no column x")) is None
    assert spark_failure(ValueError("x")) is None
    with pytest.raises(dpa.SchemaError, match="no column x"), spark_errors():
        raise dpa.SchemaError("no column x")
    with pytest.raises(dpa.JobFailedError, match="boom in task") as info, spark_errors():
        raise spark_exception("PythonException", WORKER_TEXT)
    assert info.value.__cause__ is None and info.value.__suppress_context__  # one error, not two
