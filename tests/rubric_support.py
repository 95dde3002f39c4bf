"""Shared by the rubric's tests: the corpus of correct Terminal-Bench-2-style tasks and the static rules on one."""

from __future__ import annotations

import shutil
from pathlib import Path

from evokit.tasks import load_task
from evokit.verify.rubric import DEFAULT_RUBRIC, RubricContext

ROOT = Path(__file__).resolve().parents[1]
CORPUS = sorted(p for p in (ROOT / "tests" / "data" / "tb2_style").iterdir() if (p / "task.toml").is_file())


def static(task_dir: Path) -> dict[str, tuple[bool, str]]:
    ctx = RubricContext(load_task(task_dir))
    return {r.name: (ok, reason) for r, ok, reason in DEFAULT_RUBRIC.evaluate(ctx, runs=False)}


def copy(name: str, tmp_path: Path) -> Path:
    dest = tmp_path / name
    shutil.copytree(ROOT / "tests" / "data" / "tb2_style" / name, dest)
    return dest
