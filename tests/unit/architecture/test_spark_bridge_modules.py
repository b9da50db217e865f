"""Inside ``spark_bridge``: session set-up apart from the data path, two sibling paths above
one module that prepares a job.

================  ===============================================================
part              modules
================  ===============================================================
set-up            ``session``, ``java``, ``logs``, ``security`` (start and stop Spark
                  on Ray)
shared leaf       ``cluster`` (what the data path reads about the running session)
data path         everything else: ``prepare`` (checks, columns, schema) below the two
                  paths ``raydp_path`` and ``staged``, which only ``bridge`` chooses
================  ===============================================================
"""

from __future__ import annotations

import pytest

from tests.unit.architecture.test_import_graph import SPARK_BRIDGE, import_graph

SETUP = {"spark_bridge.session", "spark_bridge.java", "spark_bridge.logs", "spark_bridge.security"}
SHARED = {"spark_bridge.cluster"}
PATHS = {"spark_bridge.raydp_path", "spark_bridge.staged"}
#: Modules that may import a path: the one that chooses it, and the public front.
ABOVE_PATHS = {"spark_bridge.bridge", "spark_bridge"}


def breaches(graph: dict[str, set[str]]) -> list[str]:
    """Imports across the parts of the table above."""
    found = []
    for module, deps in sorted(graph.items()):
        if module == "spark_bridge":  # the package front re-exports both parts
            continue
        for dep in sorted(deps):
            if module in SETUP and dep not in SETUP | SHARED:
                found.append(f"set-up module {module} imports data-path module {dep}")
            if module not in SETUP and dep in SETUP:
                found.append(f"data-path module {module} imports set-up module {dep}")
            if dep in PATHS and module not in ABOVE_PATHS:
                found.append(f"{module} imports the path {dep}; only spark_bridge.bridge chooses a path")
    return found


def test_setup_and_data_path_and_paths_stay_apart():
    graph = import_graph(SPARK_BRIDGE)
    assert SETUP | SHARED | PATHS <= set(graph), sorted(graph)
    bad = breaches(graph)
    assert not bad, "\n".join(bad)


def test_both_paths_start_from_the_prepared_job():
    graph = import_graph(SPARK_BRIDGE)
    for path in PATHS:
        assert "spark_bridge.prepare" in graph[path], path
    assert not graph["spark_bridge.prepare"] & (PATHS | ABOVE_PATHS)
    assert PATHS <= graph["spark_bridge.bridge"]


@pytest.mark.parametrize("graph,bad", [
    ({"spark_bridge.staged": {"spark_bridge.raydp_path"}}, True),  # one path on top of the other
    ({"spark_bridge.convert": {"spark_bridge.session"}}, True),  # the data path starts Spark
    ({"spark_bridge.session": {"spark_bridge.to_spark"}}, True),  # set-up reaches into the data path
    ({"spark_bridge.convert": {"spark_bridge.cluster"}, "spark_bridge.session": {"spark_bridge.cluster"}}, False),
    ({"spark_bridge.bridge": {"spark_bridge.staged", "spark_bridge.raydp_path"}}, False),
])
def test_the_checker_finds_breaches(graph, bad):
    assert bool(breaches(graph)) == bad
