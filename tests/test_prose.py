"""Prose says why, never when: no docstring, comment, notebook, script or page cites an issue number.

Nothing in the repository resolves an issue number, so a reference to one tells a reader only
that a discussion happened elsewhere; the reason belongs in the sentence itself, in the present
tense. Each scanned root (the package, tests, notebooks, scripts, benchmarks, docs,
the README and the Makefile) is one case, so a failure names the root and lists every hit as
``file:line: text``. CHANGELOG.md is not scanned: it carries history by design; nor is this file,
whose examples of the pattern are references by design.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: What is scanned, relative to the repository root (a folder is walked, a file read).
SCANNED = ("evokit", "tests", "notebooks", "scripts", "benchmarks", "docs", "README.md", "Makefile")

#: Files that carry history on purpose.
EXCLUDED_NAMES = frozenset({"CHANGELOG.md"})

#: Folders that hold generated files, not prose.
SKIPPED_DIRS = frozenset({"__pycache__", ".ipynb_checkpoints", ".pytest_cache", ".ruff_cache"})

#: An issue number ("issue 13", "Issues 4 and 12", "issue #7") or "before issue".
ISSUE_REFERENCE = re.compile(r"\b[Ii]ssues? #?\d+|\bbefore issue\b")


def text_files(root: Path):
    """Every readable UTF-8 text file under ``root`` (or ``root`` itself), binary files skipped."""
    paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    for path in paths:
        if (path.name in EXCLUDED_NAMES or path.resolve() == Path(__file__).resolve()
                or SKIPPED_DIRS.intersection(path.relative_to(ROOT).parts)):
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            yield path, data.decode("utf-8")
        except UnicodeDecodeError:
            continue


def issue_references(root: Path) -> list[str]:
    """``file:line: text`` for every issue-number reference under ``root``."""
    hits = []
    for path, text in text_files(root):
        for number, line in enumerate(text.splitlines(), 1):
            if ISSUE_REFERENCE.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:160]}")
    return hits


def test_the_pattern_finds_issue_references():
    """The pattern catches the forms seen in prose, and leaves ordinary words alone."""
    for hit in ("(issue 3)", "issue 11, class 10", "before issue 13", "issues 4 and 12", "Issue #7 found"):
        assert ISSUE_REFERENCE.search(hit), hit
    for fine in ("a known issue", "the issue is the cap", "tissue 3", "before issues arise"):
        assert not ISSUE_REFERENCE.search(fine), fine


@pytest.mark.parametrize("scanned", SCANNED)
def test_no_issue_numbers_in_prose(scanned):
    """No scanned file refers to an issue by number: say why the code is as it is instead."""
    root = ROOT / scanned
    assert root.exists(), f"{scanned}: not found under {ROOT} (update SCANNED in tests/test_prose.py)"
    hits = issue_references(root)
    if hits:
        pytest.fail(f"{len(hits)} issue-number reference(s) in {scanned}; nothing here resolves them, so "
                    "state the reason in the present tense:\n" + "\n".join(hits), pytrace=False)
