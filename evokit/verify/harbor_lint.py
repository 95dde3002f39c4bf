"""Harbor's own task linter (``harbor lint``), run as a library with the rules its CLI selects.

A task evokit accepts should be one the field's own tooling accepts too, so the rubric asks
Harbor's linter rather than re-implementing its rules. The selection matches the CLI: Harbor's
default rules, then the ``[metadata.harbor.lint]`` table (``select``, ``extend-select``,
``ignore``) of the nearest ``dataset.toml`` above the task, then that of the task's own
``task.toml`` -- Harbor's place for a task to state a deliberate exception (a shared verifier
for a task about running services, a verifier that checks a live service on purpose).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from harbor.lint import LintFinding, lint_task
from harbor.lint.models import DEFAULT_RULES, LintConfig, LintRule
from harbor.models.dataset.paths import DatasetPaths
from pydantic import ValidationError


def _lint_config(path: Path) -> LintConfig:
    """The ``[metadata.harbor.lint]`` table of a TOML file; an empty config where there is none."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return LintConfig()  # a missing or malformed task.toml is a lint finding of its own
    table = data.get("metadata", {}).get("harbor", {}).get("lint", {})
    try:
        return LintConfig.model_validate(table)
    except ValidationError as e:
        raise ValueError(f"{path}: [metadata.harbor.lint] is not a lint config (select, extend-select "
                         f"and ignore: lists of Harbor rule names): {e.errors()[0]['msg']}") from None


def selected_rules(task_dir: str | Path) -> set[LintRule]:
    """The rules ``harbor lint TASK_DIR`` would apply to this task."""
    root = Path(task_dir).resolve()
    rules = set(DEFAULT_RULES)
    for parent in root.parents:
        manifest = parent / DatasetPaths.MANIFEST_FILENAME
        if manifest.is_file():
            rules = _lint_config(manifest).apply(rules)
            break
    return _lint_config(root / "task.toml").apply(rules)


def harbor_lint(task_dir: str | Path) -> list[LintFinding]:
    """Harbor's findings for one task folder, as ``harbor lint`` reports them."""
    root = Path(task_dir).resolve()
    return lint_task(root, selected_rules=selected_rules(root))


def describe(finding: LintFinding, task_dir: str | Path) -> str:
    """``[rule] path:line message`` with the path relative to the task folder."""
    path = os.path.relpath(finding.path, Path(task_dir).resolve())
    where = f"{path}:{finding.line}" if finding.line is not None else path
    return f"[{finding.rule}] {where}: {finding.message}"
