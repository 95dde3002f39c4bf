"""The import direction of docs/README.md's module map, enforced: import-linter's layers contract in
pyproject.toml ([tool.importlinter]) over the whole package, lazy imports inside functions included.

The control copies the package, adds one upward import (the task folder layer importing the CLI,
the kind of cycle that tied tasks and sandbox together), and requires the same check to fail on it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(root)})


def test_the_layers_hold():
    r = lint_imports(ROOT)
    assert r.returncode == 0 and "1 kept, 0 broken" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]


def test_an_upward_import_breaks_them(tmp_path):
    shutil.copytree(ROOT / "evokit", tmp_path / "evokit", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    limits = tmp_path / "evokit" / "tasks" / "limits.py"
    limits.write_text(limits.read_text() + "\n\ndef _upward():\n    from evokit import cli  # noqa: F401\n")
    r = lint_imports(tmp_path)
    assert r.returncode != 0 and "evokit.tasks.limits -> evokit.cli" in r.stdout, r.stdout[-3000:]
