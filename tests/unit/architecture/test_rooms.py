"""Inside ``dpa``, the subpackages ("rooms") import downward only, and files stay small.

The rooms from the bottom up (a room may import the rooms below it, never one above it nor
another room of its own level):

==========  ==========================================================================
level       rooms
==========  ==========================================================================
0           ``errors``, ``metrics``, ``_internal`` (leaves)
1           ``keys`` (canonical encodings and hashes)
2           ``input`` (sources and the Arrow tables dpa moves around)
3           ``aggregates`` (the combine contract and the aggregates), ``routing`` (ring,
            policy contract, registry, policies)
4           ``config`` (``JobConfig``)
5           ``engine`` (the plan and the roles' state machines)
6           ``runtime`` (the executors: in-process and Ray)
7           ``result``
8           ``api``, ``groupby``
9           ``tools`` (CLI, reports, simulation)
==========  ==========================================================================
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.architecture.test_import_graph import PACKAGE, import_graph

LEVELS: list[set[str]] = [
    {"errors", "metrics", "_internal"},
    {"keys"},
    {"input"},
    {"aggregates", "routing"},
    {"config"},
    {"engine"},
    {"runtime"},
    {"result"},
    {"api", "groupby"},
    {"tools"},
]
#: Largest file, in lines (a file holds one idea).
MAX_LINES = 620


def room(module: str) -> str:
    """The room of a dpa module: ``dpa.engine.reducer`` -> ``engine``; ``dpa`` itself -> ``dpa``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "dpa"


def level(name: str) -> int:
    for i, rooms in enumerate(LEVELS):
        if name in rooms:
            return i
    raise KeyError(name)


def test_every_room_has_a_level():
    rooms = {room(m) for m in import_graph()} - {"dpa"}
    unplaced = sorted(r for r in rooms if not any(r in lv for lv in LEVELS))
    assert not unplaced, f"place these dpa subpackages in LEVELS: {unplaced}"


def offenders(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, deps in sorted(graph.items()):
        here = room(module)
        if here == "dpa":
            continue
        for dep in sorted(deps):
            there = room(dep)
            if there in (here, "dpa"):
                continue
            if level(there) >= level(here):
                found.append(f"{module} imports {dep} ({there} is not below {here})")
    return found


def test_rooms_import_downward_only():
    bad = offenders(import_graph())
    assert not bad, "move the code down, or pass it in from above:\n" + "\n".join(bad)


def test_the_engine_imports_no_runtime_and_routing_no_engine():
    graph = import_graph()
    for module, deps in graph.items():
        if room(module) == "engine":
            assert not {d for d in deps if room(d) == "runtime"}, (module, deps)
        if room(module) == "routing":
            assert not {d for d in deps if room(d) in ("engine", "runtime", "config")}, (module, deps)


@pytest.mark.parametrize("graph,bad", [
    ({"dpa.engine.plan": {"dpa.runtime.local"}}, True),
    ({"dpa.runtime.local": {"dpa.engine.plan"}}, False),
    ({"dpa.aggregates.state": {"dpa.routing.ring"}}, True),  # same level, another room
    ({"dpa.keys.columns": {"dpa.keys.murmur3", "dpa.errors"}}, False),
])
def test_the_checker_tells_upward_imports(graph, bad):
    assert bool(offenders(graph)) == bad


def test_files_hold_one_idea():
    long = []
    for path in sorted(Path(PACKAGE).rglob("*.py")):
        lines = path.read_text(encoding="utf-8").count("\n")
        if lines > MAX_LINES:
            long.append(f"{path.relative_to(PACKAGE.parent)}: {lines} lines")
    assert not long, f"files over {MAX_LINES} lines (split them by idea):\n" + "\n".join(long)


#: The protocols that live in the engine's machines only: a runtime reaches them through
#: the machine (``handle``), never through the data objects under it.
MACHINE_DATA = {"dpa.engine.mapper", "dpa.engine.reducer", "dpa.engine.flow"}


def test_the_runtimes_reach_mappers_and_reducers_only_through_their_machines():
    """The mapper's and the reducer's protocols live once: the Ray actors and the local
    runtime import their machines, never ``MapperLogic``/``ReducerLogic`` or the push
    protocol's constants, and name no member of the machines' data (``.logic``)."""
    graph = import_graph()
    for module, deps in sorted(graph.items()):
        if room(module) == "runtime":
            assert not deps & MACHINE_DATA, (module, sorted(deps & MACHINE_DATA))
    for path in sorted((PACKAGE / "runtime").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert "machine.logic" not in text and "MapperLogic" not in text and "ReducerLogic" not in text.replace(
            ":class:`~dpa.engine.reducer.ReducerLogic`", ""), path
