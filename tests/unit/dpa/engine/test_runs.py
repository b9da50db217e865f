"""A job's runs: their names, and the one rule for which run's messages count (the
coordinator's machine and every member apply it)."""

from __future__ import annotations

from dpa.engine.runs import run_name, serves


def test_a_jobs_first_run_is_the_job_and_each_recovery_numbers_the_next():
    assert [run_name("j", n) for n in range(3)] == ["j", "j.1", "j.2"]


def test_a_message_counts_only_for_the_run_served():
    assert serves("j.1", "j.1")
    assert not serves("j.1", "j") and not serves("j", "j.1")
    assert not serves(None, "j") and not serves(None, None) and not serves("j", None)
