"""Fixtures shared by every test directory (none of them starts Ray or Spark)."""

from __future__ import annotations

import pytest


@pytest.fixture
def repo_benchmark():
    """Imports a module of this repository's ``benchmarks`` package by name.

    pyarrow installs a ``benchmarks`` package of its own, which may come first on
    ``sys.path``; it is dropped from ``sys.modules`` and the repository put first.
    """
    import importlib
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]

    def load(name: str):
        pkg = sys.modules.get("benchmarks")
        if pkg is not None and Path(pkg.__file__ or "").resolve().parent != root / "benchmarks":
            for module in [m for m in sys.modules if m == "benchmarks" or m.startswith("benchmarks.")]:
                del sys.modules[module]
        if str(root) not in sys.path[:1]:
            sys.path.insert(0, str(root))
        return importlib.import_module(f"benchmarks.{name}")

    return load
