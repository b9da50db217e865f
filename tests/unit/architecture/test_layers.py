"""Imports run one way: benchmarks -> workloads -> spark_bridge -> dpa, never upward."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LAYERS = ["dpa", "spark_bridge", "workloads", "benchmarks"]  # each may import only those before it


def imported_packages(path: Path) -> set[tuple[str, int]]:
    """Top-level packages a file imports anywhere (function bodies too), with line numbers,
    including ``importlib.import_module("pkg.mod")`` / ``__import__`` with a literal name."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[tuple[str, int]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update((alias.name.split(".")[0], node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add((node.module.split(".")[0], node.lineno))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.add((node.args[0].value.split(".")[0], node.lineno))
    return found


def test_layers_exist():
    for layer in LAYERS:
        assert (ROOT / layer).is_dir(), layer


@pytest.mark.parametrize("layer", LAYERS)
def test_no_upward_imports(layer):
    above = set(LAYERS[LAYERS.index(layer) + 1:])
    offenders = []
    for path in sorted((ROOT / layer).rglob("*.py")):
        for package, line in sorted(imported_packages(path)):
            if package in above:
                offenders.append(f"{path.relative_to(ROOT)}:{line} imports {package}")
    assert not offenders, "upward imports (move the code down, or plug it in from above):\n" + "\n".join(offenders)


def test_the_checker_sees_imports_in_function_bodies(tmp_path):
    sample = tmp_path / "m.py"
    sample.write_text("def f():\n    from workloads.paper import x\n    import importlib\n"
                      "    importlib.import_module('benchmarks.throughput')\n")
    assert {p for p, _ in imported_packages(sample)} == {"workloads", "importlib", "benchmarks"}
