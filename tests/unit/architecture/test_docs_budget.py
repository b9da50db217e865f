"""The project speaks of itself only: a README within its budget, and no development history
(numbered sessions or work periods, commit hashes in prose, "before this change", scratch
scripts) in any tracked file. History lives in git."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

#: Lines README.md may have: a newcomer reads it in ten minutes; the rest lives in docs/.
README_BUDGET = 300

_HEX = r"(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,12}"

#: (name, pattern): what development history looks like in prose. Case-insensitive.
HISTORY_PATTERNS: tuple[tuple[str, str], ...] = (
    ("a numbered session", r"\bsessions? \d+\b"),
    ("a work period", r"\bwork(ing)? periods?\b"),
    ("a session of development", r"\b(previous|earlier|last) session\b|\bthis session's\b"),
    ("'before/after this change'", r"\b(before|after|since|until) this (change|commit|fix|patch)\b"),
    ("a scratch script", r"(/tmp|scratch|throwaway) (script|build)"),
    ("a commit hash in backticks", rf"`{_HEX}`"),
    ("a commit hash", rf"\b(commits?|on|since|from|before|after|at) {_HEX}\b"),
    ("a period of the machine", r"\bin (a |the )?(slower|faster|slow|fast|busier|quieter|quiet|busy) periods?\b"
                                r"|\b(slower|faster|busier|quieter) periods?\b"),
    ("a target missed by", r"\bmissed (in [\w ]+ )?by \d"),
    ("work left for later", r"^#+\s*not done\b|\bnot done\.|\bnone of these is done\b"),
    ("a load average beside a figure", r"\bload averages? (of |~|around |about |up to )?\d"
                                       r"|\b(at|under|with) (a )?load (of |~)?\d"),
    ("'now/previously' in prose", r"\b(previously|formerly|used to be|no longer does)\b"),
)


def tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    files = []
    for name in out.decode().split("\0"):
        path = ROOT / name
        if not name or not path.is_file() or path.resolve() == Path(__file__).resolve():
            continue
        try:
            path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary (images, ...)
        files.append(path)
    return files


def history_lines(text: str) -> list[tuple[int, str, str]]:
    """(line number, what, line) of each line of ``text`` that names development history."""
    found = []
    compiled = [(what, re.compile(pattern, re.IGNORECASE)) for what, pattern in HISTORY_PATTERNS]
    for number, line in enumerate(text.splitlines(), 1):
        for what, regex in compiled:
            if regex.search(line):
                found.append((number, what, line.strip()[:120]))
                break
    return found


def test_readme_stays_within_its_budget():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_BUDGET, (
        f"README.md has {len(lines)} lines, budget {README_BUDGET}: move detail to a page under docs/")


def test_no_tracked_file_names_development_history():
    offenders = []
    for path in tracked_text_files():
        for number, what, line in history_lines(path.read_text(encoding="utf-8")):
            offenders.append(f"{path.relative_to(ROOT)}:{number}: {what}: {line}")
    assert not offenders, "development history belongs in git, not in the tree:\n" + "\n".join(offenders[:50])


@pytest.mark.parametrize("text", [
    "Measured in session 20 on a quiet machine.",
    "the third work period added it",
    "took 0.9 s before this change",
    "a `/tmp` script" .replace("`", ""),
    "the commit before (`4bf30e9`) was slower",
    "re-measured on 83dd8e4",
    "unlike the previous session",
    "in slower periods the runs measured 1.31x",
    "missed in slow periods by 0.01, 0.01 and 0.05",
    "Not done. Putting the coordinator in a host would save a process",
    "## Not done",
    "measured at load 130 to 220",
    "a 1-minute load average of 130 to 220",
    "(1-minute load average 0.9 to 2.6 while it ran)",
    "mean of 3 runs (load average ~10)",
    "this path previously copied the table",
])
def test_the_patterns_catch_history(text):
    assert history_lines(text)


@pytest.mark.parametrize("text", [
    "Starting Spark on Ray costs 15-30 s; one session is shared by the tests.",
    "The coordinator stores the shares in its own object store.",
    "murmur3 of b'abc' is 0xb3dd93fa",
    "keys it no longer owns go on to their owners",
    "run `python -m benchmarks.docs` after a benchmark",
    "the reducer with the most load takes the next key",
    "a reducer's queue reports every 50 ms (`report_interval_s`)",
    "the page leaves out the figures of a busy machine",
    "KG top load 82.7%, PKG top two 40.5%",
    "if not done:",
    "a load balancer moves keys between reducers",
])
def test_the_patterns_leave_the_product_alone(text):
    assert not history_lines(text)


def test_relative_links_of_the_readme_and_docs_resolve():
    broken = []
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("#"):
                continue
            path = (page.parent / target.split("#")[0]).resolve()
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, "links to missing files:\n" + "\n".join(broken)
