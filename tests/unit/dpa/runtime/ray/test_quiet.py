"""quiet_ray_data_reads: Ray Data's console notices off while dpa reads a dataset, every
setting back after (no Ray needed: Ray Data's context and loggers are plain objects)."""

from __future__ import annotations

import copy
import logging
import threading

from dpa.runtime.ray.quiet import quiet_ray_data_reads


def fake_dataset(context):
    """An object that looks like a ``ray.data.Dataset`` to dpa, with its own context."""
    cls = type("Dataset", (), {"__module__": "ray.data.dataset"})
    ds = cls()
    ds.context = context
    return ds


def test_the_dataset_s_and_the_current_context_are_quiet_inside_and_restored_after():
    from ray.data import DataContext

    current = DataContext.get_current()
    own = copy.copy(current)
    own.enable_progress_bars = True
    own.print_on_execution_start = True
    current_before = (current.enable_progress_bars, current.print_on_execution_start)
    with quiet_ray_data_reads(fake_dataset(own)):
        for ctx in (own, current):
            assert ctx.enable_progress_bars is False and ctx.print_on_execution_start is False
    assert own.enable_progress_bars is True and own.print_on_execution_start is True
    assert (current.enable_progress_bars, current.print_on_execution_start) == current_before


def test_ray_data_s_console_handler_is_raised_to_error_and_restored_by_the_last_reader():
    from ray.data import DataContext

    logger = logging.getLogger("ray.data")
    console = logging.StreamHandler()
    console.setLevel(logging.INFO)
    logger.addHandler(console)
    try:
        ds = fake_dataset(copy.copy(DataContext.get_current()))
        inside, release = threading.Event(), threading.Event()

        def other_reader():
            with quiet_ray_data_reads(ds):
                inside.set()
                release.wait(10)

        thread = threading.Thread(target=other_reader)
        thread.start()
        inside.wait(10)
        with quiet_ray_data_reads(ds):
            assert console.level == logging.ERROR
        assert console.level == logging.ERROR  # the other reader still runs
        release.set()
        thread.join(10)
        assert console.level == logging.INFO
    finally:
        logger.removeHandler(console)


def test_other_sources_change_nothing():
    with quiet_ray_data_reads([1, 2, 3]):
        pass
