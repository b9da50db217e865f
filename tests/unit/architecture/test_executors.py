"""Protocol decisions live in the machines of :mod:`dpa.engine`: the runtimes that carry them out
(the in-process runtime, ``dpa/runtime/local.py``, and every file of the Ray runtime,
``dpa/runtime/ray/``) only translate calls into events and instructions into calls.

Checks over each shell's source (``ast``, no import):

* it names none of the coordinator's bookkeeping (the ledger, the conservation counts, the
  checkpoint round, the final-merge rule: :data:`BOOKKEEPING`);
* it reads nothing of a machine but its entry point and its results (:data:`MACHINE_API`);
* no decision in it reads a machine, and no comparison in it holds protocol state (a run or
  job id, an epoch, a snapshot version, a queue's length or bound, a finished or busy flag:
  :data:`PROTOCOL_STATE`). A decision is an ``if``, ``while``, ``x if c else y`` or
  ``assert`` test, a comprehension's ``if``, a lambda's body (through ``not``, ``and``,
  ``or``), and any comparison wherever it stands (inside a lambda, a comprehension, a
  call's argument, an ``x or default``).

A shell may branch on an instruction's type to carry it out, on the fields an instruction
carries (the machine's decision), and on its own resources (a future done, a handle missing,
an error raised); it may pass a run id along as data.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SHELLS = sorted(["dpa/runtime/local.py",
                 *(str(p.relative_to(ROOT)) for p in (ROOT / "dpa/runtime/ray").glob("*.py"))])
#: The names a shell holds a machine under (``self.machine``, ``job.machine``, ``machine``),
#: and per file the others (the in-process runtime's coordinator machine).
MACHINE_NAMES = {"machine"}
MACHINE_NAMES_IN = {"dpa/runtime/local.py": {"coordinator"}}

#: Names only the coordinator machine may use.
BOOKKEEPING = {
    "CoordinatorLogic", "CheckpointRound", "EpochLedger", "needs_final_merge", "finalize_at_stop",
    "ledger", "checkpoint_due", "on_checkpoint", "rollback", "mapping_done", "abandon_close", "complete",
    "on_block_taken", "on_block_done", "on_block_split", "on_mapper_done", "on_progress", "blocks_offered",
    "max_recoveries", "told_done", "told_mapped", "logic",
}
#: What a shell may read of a machine: its entry point and its results.
MACHINE_API = {"handle", "processed", "emitted", "blocks_per_mapper", "recoveries", "checkpoints", "checkpoint",
               "job_slots", "run_id", "serving", "result_width", "plan",
               "snapshot", "events", "timeline", "scaling",  # (the balancer's)
               "current_key"}  # (a reducer's: the key its user code was at, for an error)
#: Protocol state: no comparison in a shell may hold it, and no decision may test it.
PROTOCOL_STATE = {"run_id", "job_id", "member_run", "epoch", "version", "queued", "max_pending", "finished", "busy",
                  "live", "ending", "aborted", "closed", "told_mapped", "recoveries", "served"}


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _is_machine(node: ast.AST, names: set[str]) -> bool:
    """A shell's hold of a machine: ``machine``, ``<anything>.machine`` (and the file's other names)."""
    return _name(node) in names


def _machine_reads(tree: ast.AST, names: set[str]) -> list[ast.Attribute]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and _is_machine(n.value, names)]


def _tested(node: ast.AST) -> list[ast.AST]:
    """What a truth test tests directly (through ``not``, ``and``, ``or``)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return _tested(node.operand)
    if isinstance(node, ast.BoolOp):
        return [t for value in node.values for t in _tested(value)]
    return [node]


def _decisions(tree: ast.AST) -> list[ast.AST]:
    """Every test, comprehension filter, lambda body and comparison."""
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            found.append(node.test)
        elif isinstance(node, ast.comprehension):
            found += node.ifs
        elif isinstance(node, ast.Lambda):
            found.append(node.body)
        elif isinstance(node, ast.Compare):
            found.append(node)
    return found


def breaches(source: str, path: str = "") -> list[str]:
    """Every protocol decision a shell's ``source`` holds, one line each (``path``: which
    file it is, for the names it holds its machines under)."""
    tree = ast.parse(source)
    machines = MACHINE_NAMES | MACHINE_NAMES_IN.get(path, set())
    out: set[tuple[int, str]] = set()
    for node in ast.walk(tree):
        name = node.name if isinstance(node, ast.alias) else _name(node)
        if name in BOOKKEEPING:
            out.add((getattr(node, "lineno", 0), f"names the coordinator's bookkeeping ({name})"))
    for read in _machine_reads(tree, machines):
        if read.attr not in MACHINE_API:
            out.add((read.lineno, f"reads the machine's {read.attr}"))
    for decision in _decisions(tree):
        for read in _machine_reads(decision, machines):
            if read.attr != "handle":
                out.add((read.lineno, f"decides on the machine's {read.attr}"))
        if isinstance(decision, ast.Compare):
            held = [n for n in ast.walk(decision) if _name(n) in PROTOCOL_STATE]
        else:
            held = [n for n in _tested(decision) if _name(n) in PROTOCOL_STATE]
        for node in held:
            out.add((node.lineno, f"compares protocol state ({_name(node)})"))
    return [f"line {line}: {what}" for line, what in sorted(out)]


@pytest.mark.parametrize("path", SHELLS)
def test_the_shells_hold_no_protocol_decision(path):
    found = breaches((ROOT / path).read_text(encoding="utf-8"), path)
    assert not found, f"{path} decides what a machine should:\n" + "\n".join(found)


def test_every_shell_is_checked():
    assert "dpa/runtime/local.py" in SHELLS and "dpa/runtime/ray/coordinator.py" in SHELLS
    assert {"dpa/runtime/ray/job.py", "dpa/runtime/ray/reducer.py", "dpa/runtime/ray/balancer.py"} <= set(SHELLS)


def test_the_check_finds_decisions_an_executor_would_take_itself():
    source = """
from dpa.engine.coordinator import CoordinatorLogic

class Shell:
    def check(self, run_id):
        if self.logic.complete():
            self.done.set()
        epoch = self.machine.logic.ledger.closable(0)
        if self.machine.told_mapped:
            pass
        items = [i for i in self.machine.queue if self.job.machine.live]
        for ins in self.machine.handle(epoch):
            if isinstance(ins, op.GiveBlock) and ins.request is not None:
                pass
        if run_id != self.run_id:
            return None
        waits = lambda: self.job.machine.queued < self.max_pending
        ok = [m for m in self.members if m.version > 3]
        while not machine.finished:
            pass
"""
    found = breaches(source)
    assert any("CoordinatorLogic" in f for f in found)
    assert any("(complete)" in f for f in found) and any("(ledger)" in f for f in found)
    assert any("reads the machine's logic" in f for f in found)
    assert any("decides on the machine's told_mapped" in f for f in found)
    assert any("reads the machine's queue" in f for f in found)
    assert any("decides on the machine's live" in f for f in found)
    assert "line 15: compares protocol state (run_id)" in found  # (the run's gate)
    assert "line 17: decides on the machine's queued" in found  # (inside a lambda)
    assert "line 17: compares protocol state (max_pending)" in found
    assert "line 18: compares protocol state (version)" in found  # (inside a comprehension)
    assert "line 19: decides on the machine's finished" in found
    assert not any("handle" in f or "request" in f for f in found)  # (carrying instructions out)


def _mutated(source: str, old: str, new: str) -> str:
    assert source.count(old) == 1, f"the mutation's anchor is not in the source once: {old!r}"
    return source.replace(old, new)


COORDINATOR = "dpa/runtime/ray/coordinator.py"


def test_putting_the_back_pressure_back_in_the_ray_coordinator_fails_the_check():
    """The offer's wait for room (``queued < max_pending``, inside a ``wait_for`` lambda) is
    the machine's: written back into the shell, the check finds it."""
    source = (ROOT / COORDINATOR).read_text(encoding="utf-8")
    mutated = _mutated(source, "        offer, answer = job.expect(job.offers)\n",
                       "        await self.cond.wait_for(lambda: job.machine.queued < self.max_pending)\n"
                       "        offer, answer = job.expect(job.offers)\n")
    assert not breaches(source, COORDINATOR)
    found = breaches(mutated, COORDINATOR)
    assert any("decides on the machine's queued" in f for f in found)
    assert any("compares protocol state (max_pending)" in f for f in found)


def test_putting_the_run_gate_back_in_the_ray_coordinator_fails_the_check():
    source = (ROOT / COORDINATOR).read_text(encoding="utf-8")
    mutated = _mutated(source, "        self.job.handle(ev.FromRun(run_id, (ev.BlockFinished(mapper, epoch, emitted), ev.Tick())))\n",
                       "        if run_id == self.job.machine.run_id:\n"
                       "            self.job.handle(ev.BlockFinished(mapper, epoch, emitted), ev.Tick())\n")
    found = breaches(mutated, COORDINATOR)
    assert any("compares protocol state (run_id)" in f for f in found)


def test_putting_the_width_rule_back_in_the_local_runtime_fails_the_check():
    path = "dpa/runtime/local.py"
    source = (ROOT / path).read_text(encoding="utf-8")
    mutated = _mutated(source, "coordinator.result_width(self.counters)",
                       "max(balancer.width, max(i + 1 for i, c in enumerate(counters) if c['processed']),"
                       " max(coordinator.served) + 1)")
    found = breaches(mutated, path)
    assert any("reads the machine's served" in f for f in found)
