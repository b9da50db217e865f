"""Integration tier (one Ray for the session).

Each folder under ``tests/unit``, ``tests/integration`` and ``tests/spark`` is a package, so
test files may share a basename; ``tests/`` itself is not one. Test modules thus import as
``integration.dpa.test_x`` with ``tests/`` on the driver's ``sys.path`` only, and the Ray
workers (whose ``sys.path`` holds the repository root) cannot import them, which
``dpa/test_robustness.py::test_code_the_actors_cannot_load_is_a_clear_job_failure`` relies on.
"""
