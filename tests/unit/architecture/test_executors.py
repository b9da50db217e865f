"""The coordinator's protocol lives once, in :class:`~dpa.engine.coordinator_machine.CoordinatorMachine`:
the runtimes that carry it out (the Ray coordinator actor, with its scale-out, the Ray driver,
which runs a new pool's first hand-out, and the in-process runtime) hold no protocol decision of
their own.

Three checks over each executor's source (``ast``, no import):

* it names none of the coordinator's bookkeeping (the ledger, the conservation counts, the
  checkpoint round, the final-merge rule: :data:`BOOKKEEPING`);
* it reads nothing of the machine but its public results (:data:`MACHINE_API`);
* no condition in it (``if``, ``while``, ``x if c else y``, a comprehension's ``if``) tests
  what the machine holds.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
EXECUTORS = ["dpa/runtime/ray/coordinator.py", "dpa/runtime/ray/scale_out.py", "dpa/runtime/ray/checkpoints.py",
             "dpa/runtime/local.py",
             "dpa/runtime/ray/driver.py"]  # (the driver runs a new pool's first hand-out: open_job)
#: The attribute that holds the coordinator's machine, per executor.
MACHINE_NAMES = {"machine", "coordinator"}

#: Names only the coordinator machine may use.
BOOKKEEPING = {
    "CoordinatorLogic", "CheckpointRound", "EpochLedger", "needs_final_merge", "finalize_at_stop",
    "ledger", "checkpoint_due", "on_checkpoint", "rollback", "mapping_done", "abandon_close", "complete",
    "on_block_taken", "on_block_done", "on_block_split", "on_mapper_done", "on_progress", "blocks_offered",
    "max_recoveries", "told_done", "told_mapped", "logic",
}
#: What an executor may read of the machine: its entry point and its results.
MACHINE_API = {"handle", "queued", "processed", "emitted", "blocks_per_mapper", "recoveries", "checkpoints",
               "checkpoint", "job_slots"}


def _is_machine(node: ast.AST) -> bool:
    """``self.machine`` / ``machine`` (the executor's hold of its coordinator machine)."""
    if isinstance(node, ast.Attribute):
        return node.attr in MACHINE_NAMES and isinstance(node.value, ast.Name) and node.value.id == "self"
    return isinstance(node, ast.Name) and node.id in MACHINE_NAMES


def _machine_reads(tree: ast.AST) -> list[ast.Attribute]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and _is_machine(n.value)]


def _conditions(tree: ast.AST) -> list[ast.AST]:
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.While, ast.IfExp)):
            found.append(node.test)
        elif isinstance(node, ast.comprehension):
            found += node.ifs
    return found


def breaches(source: str) -> list[str]:
    """Every protocol decision an executor's ``source`` holds, one line each."""
    tree = ast.parse(source)
    out = []
    for node in ast.walk(tree):
        name = (node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name)
                else None)
        if isinstance(node, ast.alias):
            name = node.name
        if name in BOOKKEEPING:
            out.append(f"line {getattr(node, 'lineno', '?')}: names the coordinator's bookkeeping ({name})")
    for read in _machine_reads(tree):
        if read.attr not in MACHINE_API:
            out.append(f"line {read.lineno}: reads the machine's {read.attr}")
    for test in _conditions(tree):
        for read in _machine_reads(test):
            out.append(f"line {read.lineno}: branches on the machine's {read.attr}")
    return out


@pytest.mark.parametrize("path", EXECUTORS)
def test_the_executors_hold_no_protocol_decision(path):
    found = breaches((ROOT / path).read_text(encoding="utf-8"))
    assert not found, f"{path} decides what the coordinator machine should:\n" + "\n".join(found)


def test_the_check_finds_decisions_an_executor_would_take_itself():
    source = """
from dpa.engine.coordinator import CoordinatorLogic

class Shell:
    def check(self):
        if self.logic.complete():
            self.done.set()
        epoch = self.machine.logic.ledger.closable(0)
        if self.machine.told_mapped:
            pass
        items = [i for i in self.machine.queue if self.coordinator.live]
        for ins in self.machine.handle(epoch):
            pass
"""
    found = breaches(source)
    assert any("CoordinatorLogic" in f for f in found)
    assert any("(complete)" in f for f in found) and any("(ledger)" in f for f in found)
    assert any("reads the machine's logic" in f for f in found)
    assert any("branches on the machine's told_mapped" in f for f in found)
    assert any("reads the machine's queue" in f for f in found)
    assert any("branches on the machine's live" in f for f in found)
    assert not any("handle" in f for f in found)
