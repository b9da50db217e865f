"""The modules of ``dpa`` and of ``spark_bridge`` import each other without cycles (imports in
function bodies count); the policy contract knows no policy."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "dpa"
SPARK_BRIDGE = ROOT / "spark_bridge"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_blocks(tree: ast.AST) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` blocks (those imports do not run)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.attr if isinstance(test, ast.Attribute) else getattr(test, "id", "")
            if name == "TYPE_CHECKING":
                for child in node.body:
                    inside.update(id(n) for n in ast.walk(child))
    return inside


def _resolve(target: str, modules: set[str]) -> str | None:
    """The package's module an import of ``target`` loads (itself, or the package holding it)."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def import_graph(package: Path = PACKAGE, type_only: bool = False) -> dict[str, set[str]]:
    """``module -> modules of the same package it imports`` anywhere (function bodies too),
    except under ``if TYPE_CHECKING:`` unless ``type_only``; ``importlib.import_module("dpa.x")``
    with a literal counts. ``package`` is a top-level package's directory (``dpa``,
    ``spark_bridge``)."""
    top = package.name
    files = {module_name(p): p for p in sorted(package.rglob("*.py"))}
    modules = set(files)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        skip = set() if type_only else _type_checking_blocks(tree)
        is_pkg = path.name == "__init__.py"
        targets: list[str] = []
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                targets += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".")
                    anchor = anchor[: len(anchor) - node.level + (1 if is_pkg else 0)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets.append(base)
                targets += [f"{base}.{a.name}" for a in node.names]  # "from pkg import module"
            elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                func = node.func
                fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if fname in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                    targets.append(node.args[0].value)
        deps = {_resolve(t, modules) for t in targets if t == top or t.startswith(top + ".")}
        # importing dpa.a.b runs dpa/__init__ and dpa/a/__init__ first
        for dep in list(deps):
            while dep and "." in dep:
                dep = dep.rpartition(".")[0]
                deps.add(dep)
        graph[name] = {d for d in deps if d and d != name and not name.startswith(d + ".")}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (``[a, b, ..., a]``), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_dpa_has_no_import_cycle():
    graph = import_graph()
    assert "dpa.routing.policy" in graph and "dpa.routing.registry" in graph
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_spark_bridge_has_no_import_cycle():
    graph = import_graph(SPARK_BRIDGE)
    assert "spark_bridge.bridge" in graph and "spark_bridge.staged" in graph
    assert "spark_bridge.prepare" in graph["spark_bridge.staged"]  # (the graph sees relative imports)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_spark_bridge_has_no_cycle_even_through_type_only_imports():
    cycle = find_cycle(import_graph(SPARK_BRIDGE, type_only=True))
    assert cycle is None, "import cycle through a TYPE_CHECKING import: " + " -> ".join(cycle or [])


def test_dpa_has_no_cycle_even_through_type_only_imports():
    cycle = find_cycle(import_graph(type_only=True))
    assert cycle is None, "import cycle through a TYPE_CHECKING import: " + " -> ".join(cycle or [])


def test_policy_contract_imports_no_policy_and_no_config():
    deps = import_graph()["dpa.routing.policy"]
    assert not {d for d in deps if d.startswith("dpa.routing.policies")}, deps
    assert "dpa.config" not in deps and "dpa.routing.registry" not in deps


def test_partitioners_do_not_import_the_config_or_the_registry():
    graph = import_graph()
    for name, deps in graph.items():
        if name.startswith("dpa.routing.policies"):
            assert not deps & {"dpa.config", "dpa.routing.registry", "dpa.engine.plan"}, (name, deps)


@pytest.mark.parametrize("source,cyclic", [
    ({"a.py": "import dpa.b\n", "b.py": "from dpa import a\n"}, True),
    ({"a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import dpa.b\n",
      "b.py": "import dpa.a\n"}, False),
    ({"a.py": "def f():\n    import dpa.b\n", "b.py": "import dpa.a\n"}, True),
    ({"a.py": "from . import b\n", "b.py": "from .a import x\n"}, True),
    ({"a.py": "import importlib\nimportlib.import_module('dpa.b')\n", "b.py": "import dpa.a\n"}, True),
])
@pytest.mark.parametrize("top", ["dpa", "spark_bridge"])
def test_the_checker_finds_cycles(tmp_path, source, cyclic, top):
    pkg = tmp_path / top
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name, text in source.items():
        (pkg / name).write_text(text.replace("dpa", top))
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert (find_cycle(import_graph(pkg)) is not None) == cyclic
    finally:
        ROOT = saved
