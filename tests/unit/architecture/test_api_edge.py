"""A reducer's cost wrapper exists only at the API edge: the plan carries the bare aggregate
and its cost (``JobPlan.aggregate``, ``JobPlan.cost``), so the engine and the runtimes never
name :class:`dpa.WithCost` nor take a reducer argument apart
(:func:`dpa.aggregates.requested.requested`)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

#: The names that mean "a reducer argument as the user gave it".
EDGE_NAMES = {"WithCost", "requested", "Requested", "unwrap"}

#: Where those names may appear in dpa: the wrapper's definition and export, the module that
#: takes it apart, planning (which does so once per job), a list of aggregates made into one
#: (each member's cost added up) and the command line (which builds a WithCost from flags).
EDGE_FILES = {
    "dpa/__init__.py",
    "dpa/aggregates/contract.py",
    "dpa/aggregates/requested.py",
    "dpa/aggregates/composite.py",
    "dpa/engine/planning.py",
    "dpa/tools/cli/commands.py",
}


def edge_names(path: Path) -> list[tuple[str, int]]:
    """Where a file names one of :data:`EDGE_NAMES` in code (not in docstrings or comments)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in EDGE_NAMES:
            found.append((node.id, node.lineno))
        elif isinstance(node, ast.Attribute) and node.attr in EDGE_NAMES:
            found.append((node.attr, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            found += [(a.name, node.lineno) for a in node.names if a.name in EDGE_NAMES]
            if node.module == "dpa.aggregates.requested":
                found.append((node.module, node.lineno))
    return found


def offenders() -> list[str]:
    out = []
    for path in sorted((ROOT / "dpa").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel not in EDGE_FILES:
            out += [f"{rel}:{line}: {name}" for name, line in edge_names(path)]
    return out


def test_the_engine_and_runtimes_read_the_plan_not_the_wrapper():
    assert offenders() == []


def test_the_check_finds_a_wrapper_taken_apart_in_the_engine(tmp_path):
    """The check itself: a module that takes a reducer argument apart is found, by its import
    and by its call."""
    probe = tmp_path / "probe.py"
    probe.write_text("from dpa.aggregates.contract import unwrap\n"
                     "inner, cost, mode = unwrap(plan.reducer)\n"
                     "from dpa.aggregates.requested import requested\n"
                     "asked = requested(plan.reducer)\n")
    names = edge_names(probe)
    assert ("unwrap", 2) in names and ("requested", 4) in names and ("dpa.aggregates.requested", 3) in names
