"""Mutation metrics of an accepted edit: how much of the task changed (EE Table 1's columns).

* **instruction**, token level: 1 − the similarity ratio of the two token sequences
  (``difflib.SequenceMatcher`` over whitespace tokens);
* **environment**, file level: files under ``environment/`` added, removed or changed, over the
  union of both file sets;
* **verification**, test-unit level: units are the files under ``tests/``, and inside shell or
  Python test files each check (an ``if check …`` line of evokit's test.sh, a ``def test_…``
  function); changed units over the union;
* **total**: the unweighted mean of the three (as in the paper).
"""

from __future__ import annotations

import difflib
import hashlib
import re
from pathlib import Path

_PY_TEST = re.compile(r"^def (test_\w+)\(.*?(?=^def |\Z)", re.S | re.M)


def _files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()} if root.is_dir() else {}


def _changed_share(a: dict[str, str], b: dict[str, str]) -> float:
    union = set(a) | set(b)
    if not union:
        return 0.0
    return sum(a.get(k) != b.get(k) for k in union) / len(union)


def instruction_mutation(a: str, b: str) -> float:
    return 1.0 - difflib.SequenceMatcher(None, a.split(), b.split(), autojunk=False).ratio()


def test_units(tests: Path) -> dict[str, str]:
    """Test units: files, plus each check inside test scripts (so one new check is not 'whole file changed')."""
    units: dict[str, str] = {}
    for p in sorted(tests.rglob("*")) if tests.is_dir() else []:
        if not p.is_file():
            continue
        rel = str(p.relative_to(tests))
        text = p.read_text(errors="replace")
        parts: dict[str, str] = {}
        if p.suffix == ".py":
            parts = {f"{rel}::{m.group(1)}": m.group(0) for m in _PY_TEST.finditer(text)}
        elif p.suffix == ".sh":
            parts = {f"{rel}::{line.split()[2]}": line for line in text.splitlines() if line.startswith("if check ")}
        if parts:
            units.update({k: hashlib.sha256(v.encode()).hexdigest() for k, v in parts.items()})
        else:
            units[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return units


def mutation(parent: Path, child: Path) -> dict[str, float]:
    """The four mutation numbers between two task folders, in [0, 1]."""
    instr = instruction_mutation((parent / "instruction.md").read_text(), (child / "instruction.md").read_text())
    env = _changed_share(_files(parent / "environment"), _files(child / "environment"))
    verif = _changed_share(test_units(parent / "tests"), test_units(child / "tests"))
    return {"instruction": instr, "environment": env, "verification": verif, "total": (instr + env + verif) / 3}
