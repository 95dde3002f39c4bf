"""Content hash and atomic writing of task folders."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from harbor.models.task.config import (
    AgentConfig,
    EnvironmentConfig,
    NetworkMode,
    TaskConfig,
    VerifierConfig,
    VerifierEnvironmentMode,
)

from evokit.tasks.folder import (
    CONFIG_FILE,
    INSTRUCTION_FILE,
    METADATA_KEY,
    FileContent,
    StrPath,
    TaskFormatError,
    _dump_config,
    _hashed_files,
    content_hash,
    load_task,
)
from evokit.tasks.metadata import EvokitMetadata

# --------------------------------------------------------------------------------------- writing


def default_task_config() -> TaskConfig:
    """evokit's defaults for generated tasks: small, short, and offline during the agent phase.

    The verifier is Harbor's ``environment_mode = "separate"`` with ``artifacts = ["/app"]`` (the
    workdir): under Harbor's own ``Trial`` too, the tests then run in a fresh environment holding
    only the agent's work, so a trojaned tool or a planted daemon in the agent's environment never
    reaches them (threat classes: trojaned tools, reward daemons). evokit's own trials use that mode by default anyway.
    """
    return TaskConfig(
        artifacts=["/app"],
        agent=AgentConfig(timeout_sec=120.0),
        verifier=VerifierConfig(timeout_sec=120.0, environment_mode=VerifierEnvironmentMode.SEPARATE),
        environment=EnvironmentConfig(
            network_mode=NetworkMode.NO_NETWORK,
            cpus=1,
            memory_mb=1024,
            storage_mb=1024,
            workdir="/app",
        ),
    )


def _checked_files(files: Mapping[str, FileContent], where: str) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for rel, data in files.items():
        p = PurePosixPath(rel)
        if not rel or p.is_absolute() or ".." in p.parts or "\\" in rel or str(p) == ".":
            raise ValueError(f"{where}: {rel!r} must be a relative POSIX path inside the folder")
        out[p.as_posix()] = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    return out


@dataclass(frozen=True)
class TaskFiles:
    """The file contents of a task, keyed by path relative to their folder; texts as UTF-8.

    Field names match ``write_task``'s keywords: ``write_task(dest, **files.as_kwargs())``.
    """

    instruction: str
    dockerfile: str
    tests: Mapping[str, FileContent]
    solution: Mapping[str, FileContent]
    environment_files: Mapping[str, FileContent] = field(default_factory=dict)

    def __post_init__(self) -> None:
        env = _checked_files(self.environment_files, "environment_files")
        if "Dockerfile" in env:
            raise ValueError("environment_files: pass the Dockerfile as `dockerfile`, not here")
        tests = _checked_files(self.tests, "tests")
        if "test.sh" not in tests:
            raise ValueError("tests: needs 'test.sh', which writes /logs/verifier/reward.txt")
        solution = _checked_files(self.solution, "solution")
        if "solve.sh" not in solution:
            raise ValueError("solution: needs 'solve.sh', the reference solution the oracle runs")
        object.__setattr__(self, "environment_files", env)
        object.__setattr__(self, "tests", tests)
        object.__setattr__(self, "solution", solution)

    @classmethod
    def from_folder(cls, path: StrPath) -> TaskFiles:
        """Read a task's files back (executable bits are not kept; write_task re-derives them)."""
        root = Path(path)

        def read_dir(name: str) -> dict[str, bytes]:
            return {
                rel.removeprefix(f"{name}/"): file.read_bytes()
                for rel, file in _hashed_files(root, PurePosixPath(name))
            }

        env = read_dir("environment")
        dockerfile = env.pop("Dockerfile", None)
        if dockerfile is None:
            raise TaskFormatError(root, "environment/Dockerfile", "missing")
        return cls(
            instruction=(root / INSTRUCTION_FILE).read_text(encoding="utf-8"),
            dockerfile=dockerfile.decode("utf-8"),
            tests=read_dir("tests"),
            solution=read_dir("solution"),
            environment_files=env,
        )

    def as_kwargs(self) -> dict[str, Any]:
        return {
            "instruction": self.instruction,
            "dockerfile": self.dockerfile,
            "environment_files": dict(self.environment_files),
            "tests": dict(self.tests),
            "solution": dict(self.solution),
        }


def _is_script(rel: str, data: bytes) -> bool:
    return rel.endswith(".sh") or data.startswith(b"#!")


def _write_tree(root: Path, files: TaskFiles) -> None:
    layout = {INSTRUCTION_FILE: files.instruction.encode("utf-8")}
    layout["environment/Dockerfile"] = files.dockerfile.encode("utf-8")
    for prefix, group in (
        ("environment", files.environment_files),
        ("tests", files.tests),
        ("solution", files.solution),
    ):
        layout.update({f"{prefix}/{rel}": data for rel, data in group.items()})
    for rel, data in layout.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        # Explicit modes so the result (and its hash) does not depend on the caller's umask.
        os.chmod(target, 0o755 if _is_script(rel, bytes(data)) else 0o644)


def _publish(staged: Path, dest: Path, overwrite: bool) -> None:
    """Rename a finished folder into place, swapping out an old task folder if allowed."""
    if not (dest.exists() or dest.is_symlink()):
        os.rename(staged, dest)
        return
    if not overwrite:
        raise FileExistsError(f"{dest}: already exists; pass overwrite=True to replace it")
    if dest.is_symlink() or not dest.is_dir():
        raise FileExistsError(f"{dest}: exists and is not a folder; refusing to replace it")
    if not (dest / CONFIG_FILE).is_file() and any(dest.iterdir()):
        raise FileExistsError(f"{dest}: not a task folder (no task.toml); refusing to replace it")
    backup = dest.with_name(f".{dest.name}.old-{uuid.uuid4().hex[:8]}")
    os.rename(dest, backup)
    try:
        os.rename(staged, dest)
    except BaseException:
        os.rename(backup, dest)
        raise
    shutil.rmtree(backup)


def write_task(
    dest: StrPath,
    *,
    instruction: str,
    dockerfile: str,
    environment_files: Mapping[str, FileContent] | None = None,
    tests: Mapping[str, FileContent],
    solution: Mapping[str, FileContent],
    config: TaskConfig | None = None,
    metadata: EvokitMetadata | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a Harbor task folder at ``dest`` atomically and return its path.

    ``config`` defaults to ``default_task_config()``. If ``metadata`` is given it is stored as
    ``[metadata.evokit]`` with ``content_hash`` set to the hash of the files just written. Files
    named ``*.sh`` or starting with ``#!`` are made executable (0755), others 0644. The folder is
    validated with ``load_task`` before it appears at ``dest``; an existing ``dest`` is replaced
    only with ``overwrite=True`` and only if it is a task folder (or empty).
    """
    files = TaskFiles(
        instruction=instruction,
        dockerfile=dockerfile,
        tests=tests,
        solution=solution,
        environment_files=environment_files or {},
    )
    dest = Path(dest)
    if (dest.exists() or dest.is_symlink()) and not overwrite:
        raise FileExistsError(f"{dest}: already exists; pass overwrite=True to replace it")
    dest.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        os.chmod(staged, 0o755)  # mkdtemp makes 0700
        _write_tree(staged, files)
        cfg = (config or default_task_config()).model_copy(deep=True)
        if metadata is not None:
            stamped = metadata.model_copy(update={"content_hash": content_hash(staged)})
            cfg.metadata = {**cfg.metadata, METADATA_KEY: stamped.to_toml_table()}
        (staged / CONFIG_FILE).write_text(_dump_config(staged, cfg), encoding="utf-8")
        load_task(staged)  # never publish a folder Harbor would reject
        _publish(staged, dest, overwrite)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return dest
