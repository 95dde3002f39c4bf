"""EE's residual ΔE: the modifier's edit of a task's files, checked, confined and applied.

The LLM modifier (:mod:`evokit.evolve.llm_roles`) edits the real files of any Harbor task. It is
shown instruction.md, environment/, tests/ and solution/ (:func:`task_files`, :func:`files_text`:
big files truncated, binaries named only) and replies ``{"files": {path: full content | null},
"summary": ...}``. The reply is checked (:func:`validate_residual`: paths confined to those four
parts, task.toml untouched, tests/test.sh and solution/solve.sh kept; :func:`require_changes`:
since every edit changes steps, instruction, tests and solution must all change) and applied to a
copy of the parent (:func:`apply_residual`), which Harbor must load.
"""

from __future__ import annotations

import codecs
import os
import shutil
import tempfile
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from evokit.evolve.llm_plans import PLACEHOLDER
from evokit.tasks import IGNORED_NAMES, EvokitMetadata, content_hash, load_task, write_metadata

EDITABLE_DIRS = ("environment", "tests", "solution")
KEEP = ("instruction.md", "environment/Dockerfile", "tests/test.sh", "solution/solve.sh")  # never deleted
RESIDUAL_SCHEMA = {"type": "object", "required": ["files", "summary"], "properties": {
    "files": {"type": "object", "additionalProperties": {"type": ["string", "null"]}},
    "summary": {"type": "string", "maxLength": 300}}}


@dataclass(frozen=True)
class Residual:
    """EE's ΔE: the full new content of each changed file (None deletes it), by path in the task folder."""

    files: dict[str, str | None]
    summary: str


def check_path(rel) -> str:
    """A path the modifier may write, normalised; ValueError says why not."""
    if not isinstance(rel, str) or not rel.strip():
        raise ValueError(f"file path {rel!r}: must be a non-empty string")
    p = PurePosixPath(rel)
    if p.is_absolute():
        raise ValueError(f"{rel!r}: absolute paths are not allowed; give a path relative to the task "
                         "folder, e.g. tests/test.sh")
    if ".." in p.parts or "\\" in rel:
        raise ValueError(f"{rel!r}: '..' and backslashes are not allowed; stay inside the task folder")
    path = p.as_posix()
    if path == "task.toml":
        raise ValueError("task.toml cannot be edited: evokit writes its configuration and metadata")
    if path != "instruction.md" and (len(p.parts) < 2 or p.parts[0] not in EDITABLE_DIRS):
        raise ValueError(f"{rel!r}: only instruction.md and files under environment/, tests/ and solution/ "
                         "may be edited")
    return path


def validate_residual(reply, existing: Collection[str] | None = None, dirs: Collection[str] = ()) -> Residual:
    """reply → :class:`Residual`. ``existing``: the parent's files (deleting another is an error)."""
    if not isinstance(reply, dict) or not isinstance(reply.get("files"), dict):
        raise ValueError('expected {"files": {"<relative path>": "<full new content>" or null}, "summary": "..."}')
    if not reply["files"]:
        raise ValueError('"files" is empty: change at least instruction.md and the files the new steps need')
    summary = reply.get("summary", "")
    if not isinstance(summary, str):
        raise ValueError('"summary" must be a string')
    files: dict[str, str | None] = {}
    for rel, content in reply["files"].items():
        path = check_path(rel)
        if path in files:
            raise ValueError(f"{rel!r}: names {path} a second time")
        if path in dirs:
            raise ValueError(f"{path}: is a folder of the task; name the files inside it")
        if content is None:
            if path in KEEP:
                raise ValueError(f"{path}: cannot be deleted, every task needs it; give its new content instead")
            if existing is not None and path not in existing:
                raise ValueError(f"{path}: cannot be deleted, the task has no such file")
        elif not isinstance(content, str):
            raise ValueError(f"{path}: the content must be a string (the full new file) or null to delete it")
        elif path in KEEP and not content.strip():
            raise ValueError(f"{path}: must not be empty")
        elif PLACEHOLDER.match(content.strip()):
            raise ValueError(f"{path}: {content.strip()!r} is the example's placeholder; write the real content")
        files[path] = content
    return Residual(files, summary.strip())


def require_changes(parent_dir: Path, residual: Residual) -> Residual:
    """Every edit changes the plan's steps, so what the agent is asked (instruction.md), what is
    checked (tests/) and the reference solution (solution/) must all change."""
    def differs(rel: str, content: str | None) -> bool:
        path = Path(parent_dir) / rel
        return content is None or not path.is_file() or path.read_bytes() != content.encode("utf-8")

    changed = [rel for rel, content in residual.files.items() if differs(rel, content)]
    missing = [part for part in ("instruction.md", "tests/", "solution/")
               if not any(rel == part or rel.startswith(part) for rel in changed)]
    if missing:
        raise ValueError(f"the new steps need changes to {', '.join(missing)} too (this reply changes "
                         f"{', '.join(changed) or 'nothing'}): give the full new content of those files")
    return residual


def _head(path: Path, limit: int) -> str | None:
    """The first ``limit`` bytes of a text file, decoded; None for a binary file (NUL bytes, not UTF-8)."""
    with open(path, "rb") as f:
        data = f.read(limit)
    if b"\0" in data[:8192]:
        return None
    try:  # incremental: a character cut at the limit is not an error
        return codecs.getincrementaldecoder("utf-8")().decode(data, final=len(data) < limit)
    except UnicodeDecodeError:
        return None


def task_files(task_dir: Path) -> tuple[list[str], list[str]]:
    """(files, folders) the modifier may see, relative to the task folder, in prompt order."""
    files, dirs = [], []
    for part in ("instruction.md", *EDITABLE_DIRS):
        root = task_dir / part
        if root.is_file():
            files.append(part)
        for p in sorted(root.rglob("*")) if root.is_dir() else []:
            if IGNORED_NAMES & set(p.relative_to(task_dir).parts):
                continue
            (dirs if p.is_dir() else files).append(p.relative_to(task_dir).as_posix())
    first = [f for f in KEEP if f in files]  # then the rest, small files first: more of them fit
    rest = sorted((f for f in files if f not in first), key=lambda f: ((task_dir / f).stat().st_size, f))
    return first + rest, dirs


def files_text(task_dir: Path, files: Sequence[str], *, file_chars: int, total_chars: int) -> str:
    """The files as prompt text: big ones cut at ``file_chars``, binaries and the over-budget ones named only."""
    parts, used = [], 0
    for rel in files:
        path = task_dir / rel
        size = path.stat().st_size
        text = _head(path, 4 * file_chars + 4)  # enough bytes for file_chars characters
        keep = "not shown: leave it out of your reply to keep it"
        if text is None:
            parts.append(f"=== {rel} (binary, {size} bytes, {keep}) ===")
        elif used >= total_chars:
            parts.append(f"=== {rel} ({size} bytes, {keep}) ===")
        else:
            shown = text[: min(file_chars, total_chars - used)]
            cut = len(shown.encode("utf-8")) < size
            parts.append(f"=== {rel} ({size} bytes{', only its start is shown: leave it out to keep it' if cut else ''})"
                         f" ===\n{shown}")
            used += len(shown)
    return "\n".join(parts)


def apply_residual(parent_dir: str | Path, residual: Residual, dest: str | Path,
                   metadata: EvokitMetadata | None = None) -> Path:
    """Copy the parent to ``dest`` with ``residual`` applied and ``metadata`` stamped; Harbor must load it.

    The copy is built in a hidden sibling and renamed into place, so a rejected edit never leaves
    a folder at ``dest``.
    """
    parent_dir, dest = Path(parent_dir), Path(dest)
    if dest.exists():
        raise FileExistsError(f"{dest}: already exists")
    dest.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        shutil.copytree(parent_dir, staged, symlinks=True, dirs_exist_ok=True)
        root = staged.resolve()
        for rel, content in residual.files.items():
            target = staged / check_path(rel)
            if not target.parent.resolve().is_relative_to(root):  # a symlinked folder leading outside
                raise ValueError(f"{rel}: leads outside the task folder")
            if target.is_symlink() or content is None:
                target.unlink(missing_ok=True)
            if content is not None:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(content, encoding="utf-8")
                os.chmod(target, 0o755 if rel.endswith(".sh") or content.startswith("#!") else 0o644)
        if metadata is not None:
            write_metadata(staged, metadata.model_copy(update={"content_hash": content_hash(staged)}))
        load_task(staged)  # never hand over a folder Harbor would reject
        os.rename(staged, dest)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return dest
