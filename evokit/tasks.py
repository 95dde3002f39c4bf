"""Harbor task folders: load, write, fingerprint, annotate and import them.

evokit's unit of work is a Harbor task folder (``instruction.md``, ``task.toml``, ``environment/``,
``tests/test.sh``, ``solution/solve.sh``). Whatever evokit evolves must stay a plain Harbor task, so
that ``harbor run``, TRL, SkyRL and rLLM consume it unchanged. Hence:

1. Reading goes through Harbor's own ``Task`` / ``TaskConfig``, so evokit never disagrees with the
   harness about what a valid task is. We only wrap Harbor's errors so that, in a batch over
   hundreds of generated tasks, each one names the folder, the file and the field at fault.
2. evokit's bookkeeping (scenario-skill plan, lineage, content hash) lives in the free-form
   ``[metadata.evokit]`` table of ``task.toml``, which Harbor carries without interpreting; other
   ``[metadata]`` keys (difficulty, category, tags, ...) are kept as they are.
3. ``content_hash`` covers what the agent and the verifier see (instruction, environment, tests,
   solution) and deliberately not ``task.toml``: writing lineage into a task must not change its
   identity, or a child could never name its parent by hash.
4. ``write_task`` and ``migrate_terminal_bench`` build the folder in a temporary sibling, validate it
   with Harbor, then rename it into place, so a crash or a rejected task never leaves a half-written
   folder where a scheduler could pick it up.
"""

import hashlib
import math
import os
import re
import shutil
import stat
import tempfile
import tomllib
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from harbor.models.task.config import (
    AgentConfig,
    EnvironmentConfig,
    NetworkMode,
    TaskConfig,
    VerifierConfig,
)
from harbor.models.task.paths import TaskPaths
from harbor.models.task.task import Task
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

METADATA_KEY = "evokit"  # evokit's table inside task.toml's free-form [metadata]
CONFIG_FILE = "task.toml"
INSTRUCTION_FILE = "instruction.md"
# What the agent and verifier see; task.toml is left out on purpose (see module docstring).
# steps/ and trajectory.json only exist in multi-step / prior-context tasks.
HASHED_PARTS = (INSTRUCTION_FILE, "trajectory.json", "environment", "tests", "solution", "steps")
IGNORED_NAMES = frozenset({"__pycache__", ".DS_Store"})
_HASH_DOMAIN = b"evokit-content-hash-v1\0"  # bump if the encoding below ever changes
_SHA256_HEX = r"^[0-9a-f]{64}$"
_UNION_TAG = re.compile(r"^(int|float|str|bool|none|[a-z-]+\[.*\]|[A-Z][A-Za-z0-9]*)$")

StrPath = str | os.PathLike[str]
FileContent = bytes | str


class TaskFormatError(ValueError):
    """A task folder that Harbor would reject or evokit cannot read.

    Carries ``folder``, ``file`` (relative to the folder, or None when the folder itself is at
    fault) and ``problem`` so callers can aggregate errors over a whole population of tasks.
    """

    def __init__(self, folder: StrPath, file: str | None, problem: str):
        self.folder = Path(folder)
        self.file = file
        self.problem = problem
        super().__init__(f"{self.folder}/{file}: {problem}" if file else f"{folder}: {problem}")

    def __reduce__(self):  # keep it picklable across process pools (args != __init__ args)
        return (type(self), (self.folder, self.file, self.problem))


def _describe_validation_error(err: ValidationError) -> str:
    """One clause per offending field, named by the dotted path the file spells it with.

    pydantic puts union-member tags (``int``, ``float``, ``ArtifactConfig``) into error locations;
    they are dropped, and the alternatives for one field are joined with "or".
    """
    problems: dict[str, list[str]] = {}
    for e in err.errors():
        parts = [str(p) for p in e["loc"] if not _UNION_TAG.match(str(p))]
        value = e.get("input")
        shown = f" (got {value!r})" if isinstance(value, str | int | float | bool) else ""
        problems.setdefault(".".join(parts) or "(top level)", []).append(e["msg"] + shown)
    return "; ".join(f"field '{loc}': {' or '.join(msgs)}" for loc, msgs in problems.items())


# --------------------------------------------------------------------------------------- reading


def _read_config(folder: Path) -> TaskConfig:
    path = folder / CONFIG_FILE
    if not path.is_file():
        raise TaskFormatError(folder, CONFIG_FILE, "missing; every Harbor task needs a task.toml")
    try:
        return TaskConfig.model_validate_toml(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise TaskFormatError(folder, CONFIG_FILE, f"not UTF-8 text ({e})") from e
    except tomllib.TOMLDecodeError as e:
        raise TaskFormatError(folder, CONFIG_FILE, f"not valid TOML: {e}") from e
    except ValidationError as e:
        problem = "does not match Harbor's TaskConfig: " + _describe_validation_error(e)
        raise TaskFormatError(folder, CONFIG_FILE, problem) from e


def load_task(path: StrPath) -> Task:
    """Load any Harbor task folder with Harbor's own model, raising ``TaskFormatError`` if bad.

    Checks, in order: the folder exists; task.toml parses and validates; instruction.md exists
    (single-step tasks); environment/ exists unless ``[environment].docker_image`` is set (Harbor's
    ``Task`` does not check this, but no backend can start the task without it); then Harbor's
    ``Task(path)``, whose missing-test-script error is reported as the file it expects.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise TaskFormatError(folder, None, "not a directory (a Harbor task is a folder)")
    config = _read_config(folder)
    if not config.steps and not (folder / INSTRUCTION_FILE).is_file():
        raise TaskFormatError(folder, INSTRUCTION_FILE, "missing; it is what the agent is asked")
    if not config.environment.docker_image and not (folder / "environment").is_dir():
        raise TaskFormatError(
            folder,
            "environment/",
            "missing; add environment/Dockerfile or set [environment].docker_image in task.toml",
        )
    try:
        return Task(folder)
    except FileNotFoundError as e:
        paths = TaskPaths(folder)
        os_ = config.environment.os
        if not config.steps and paths.discovered_test_path_for(os_) is None:
            expected = paths.test_path_for(os_).relative_to(paths.task_dir).as_posix()
            problem = "missing; the verifier runs it after the agent and it must write the reward"
            raise TaskFormatError(folder, expected, f"{problem} (Harbor: {e})") from e
        raise TaskFormatError(folder, None, str(e)) from e
    except (ValueError, OSError) as e:
        raise TaskFormatError(folder, None, f"rejected by Harbor: {e}") from e


# -------------------------------------------------------------------------------------- metadata


class Lineage(BaseModel):
    """Where an evolved task comes from; a seed task has generation 0 and no parent."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    parent: str | None = Field(
        default=None,
        pattern=_SHA256_HEX,
        description="content_hash of the task this one was evolved from; None for a seed.",
    )
    generation: int = Field(default=0, ge=0, description="Evolution steps since the seed.")
    direction: Literal["length", "scenario", "skill"] | None = Field(
        default=None,
        description="Axis the last evolution step moved along: a longer scenario-skill plan, "
        "a new scenario, or a new skill.",
    )
    effort: Literal["low", "high", "max"] | None = Field(
        default=None, description="Generator effort level used for the last evolution step."
    )
    lineage_id: str | None = Field(
        default=None, description="Id shared by every task descending from one seed."
    )

    @model_validator(mode="after")
    def _parent_implies_generation(self) -> "Lineage":
        if self.parent is not None and self.generation == 0:
            raise ValueError("a task with a parent is at least generation 1")
        return self


def _check_toml_value(value: Any, where: str) -> None:
    """Reject what TOML cannot store faithfully, so write_metadata never silently drops data."""
    if value is None:
        raise ValueError(f"{where} is None; TOML has no null, leave the key out instead")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where} is {value}; store non-finite numbers as strings")
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{where} has non-string key {key!r}")
            _check_toml_value(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_toml_value(item, f"{where}[{i}]")
    elif not isinstance(value, str | int | float | bool):
        raise ValueError(f"{where} has type {type(value).__name__}, which TOML cannot store")


class EvokitMetadata(BaseModel):
    """evokit's record of a task, stored as ``[metadata.evokit]`` in its task.toml."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    plan: list[dict[str, Any]] | None = Field(
        default=None,
        description="Ordered scenario-skill steps the task exercises (filled by the generator).",
    )
    seed: int | None = Field(default=None, description="Seed the plan was rendered with (evokit.plan.render).")
    goal: str | None = Field(default=None, description="The plan's goal g (EE's instruction context).")
    difficulty: dict[str, float] | None = Field(
        default=None, description="D_T and its parts (length, scenario, skill) under the catalog priors."
    )
    lineage: Lineage | None = None
    content_hash: str | None = Field(
        default=None,
        pattern=_SHA256_HEX,
        description="content_hash() of the folder when the record was written.",
    )

    @field_validator("plan")
    @classmethod
    def _plan_fits_toml(cls, plan: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if plan is not None:
            _check_toml_value(plan, "plan")
        return plan

    def to_toml_table(self) -> dict[str, Any]:
        """The ``[metadata.evokit]`` table: JSON-mode dump with unset (None) fields left out."""
        return self.model_dump(mode="json", exclude_none=True)


def _dump_config(folder: Path, config: TaskConfig) -> str:
    """Harbor's TOML dump, refused if reading it back would not give the same config."""
    text = config.model_dump_toml()
    want = config.model_dump(mode="json")
    got = TaskConfig.model_validate_toml(text).model_dump(mode="json")
    if got != want:
        lost = sorted(key for key in want if got.get(key) != want[key])
        raise TaskFormatError(
            folder,
            CONFIG_FILE,
            f"config section(s) {lost} would change when written as TOML "
            "(TOML has no null: leave out None values, e.g. in [metadata])",
        )
    return text


def read_metadata(path: StrPath) -> EvokitMetadata | None:
    """The task's ``[metadata.evokit]`` record, or None for a task evokit has not annotated."""
    folder = Path(path)
    table = _read_config(folder).metadata.get(METADATA_KEY)
    if table is None:
        return None
    try:
        return EvokitMetadata.model_validate(table)
    except ValidationError as e:
        fields = _describe_validation_error(e).replace(
            "field '", f"field 'metadata.{METADATA_KEY}."
        )
        raise TaskFormatError(folder, CONFIG_FILE, f"bad evokit metadata: {fields}") from e


def write_metadata(path: StrPath, meta: EvokitMetadata) -> None:
    """Store ``meta`` as ``[metadata.evokit]``, keeping every other key of task.toml.

    The file is re-emitted by Harbor's ``model_dump_toml``: comments and key order are not kept,
    and deprecated keys come out migrated (``memory = "2G"`` becomes ``memory_mb = 2048``), but
    every value is. ``meta.content_hash``, if set, must match the folder, so a stale hash can
    never be written.
    """
    folder = Path(path)
    config = _read_config(folder)
    if meta.content_hash is not None and meta.content_hash != content_hash(folder):
        raise TaskFormatError(
            folder,
            CONFIG_FILE,
            "metadata content_hash does not match the folder; recompute it with content_hash()",
        )
    updated = config.model_copy(deep=True)
    updated.metadata = {**config.metadata, METADATA_KEY: meta.to_toml_table()}
    _atomic_write_text(folder / CONFIG_FILE, _dump_config(folder, updated))


def _atomic_write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---------------------------------------------------------------------------------- content hash


def _hashed_files(root: Path, rel: PurePosixPath) -> Iterator[tuple[str, Path]]:
    path = root / rel
    if path.name in IGNORED_NAMES:
        return
    if path.is_symlink() or path.is_file():
        yield rel.as_posix(), path
    elif path.is_dir():
        for child in path.iterdir():
            yield from _hashed_files(root, rel / child.name)
    elif path.exists():
        raise TaskFormatError(root, rel.as_posix(), "neither a file, a link nor a folder")


def content_hash(path: StrPath) -> str:
    """sha256 hex digest of everything the agent and verifier see, independent of task.toml.

    Each file under ``HASHED_PARTS`` contributes its relative POSIX path, whether it is a symlink
    (hashed by target, not followed), its owner-executable bit and its bytes, each length-prefixed
    so no two trees share an encoding. Files are taken in sorted path order; mtimes, the folder's
    name and location, ``__pycache__`` and ``.DS_Store`` do not count.
    """
    root = Path(path)
    if not (root / INSTRUCTION_FILE).is_file() and not (root / "steps").is_dir():
        raise TaskFormatError(root, INSTRUCTION_FILE, "missing; is this a task folder?")
    entries = sorted(
        entry for part in HASHED_PARTS for entry in _hashed_files(root, PurePosixPath(part))
    )
    digest = hashlib.sha256(_HASH_DOMAIN)
    for rel, file in entries:
        name = rel.encode("utf-8")
        if file.is_symlink():
            kind, data = b"L-", os.fsencode(os.readlink(file))
        else:
            kind = b"Fx" if file.stat().st_mode & stat.S_IXUSR else b"F-"
            data = file.read_bytes()
        digest.update(kind + len(name).to_bytes(8, "big") + name)
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


# --------------------------------------------------------------------------------------- writing


def default_task_config() -> TaskConfig:
    """evokit's defaults for generated tasks: small, short, and offline during the agent phase."""
    return TaskConfig(
        agent=AgentConfig(timeout_sec=120.0),
        verifier=VerifierConfig(timeout_sec=120.0),
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
    def from_folder(cls, path: StrPath) -> "TaskFiles":
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


# ------------------------------------------------------------------------- Terminal-Bench import

# Terminal-Bench 1 used this compose file for tasks that ship only a Dockerfile; Harbor's mapper
# requires a compose file, and this one collapses back to the plain Dockerfile in its output.
_TB1_DEFAULT_COMPOSE = """\
services:
  client:
    build:
      dockerfile: Dockerfile
    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}
    container_name: ${T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}
    command: [ "sh", "-c", "sleep infinity" ]
    environment:
      - TEST_DIR=${T_BENCH_TEST_DIR}
    volumes:
      - ${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}
      - ${T_BENCH_TASK_AGENT_LOGS_PATH}:${T_BENCH_CONTAINER_AGENT_LOGS_PATH}
"""


def _check_terminal_bench_source(src: Path) -> None:
    import yaml  # PyYAML comes with harbor; only Terminal-Bench import needs it
    from harbor.mappers.terminal_bench import TerminalBenchTaskConfig

    if not src.is_dir():
        raise TaskFormatError(src, None, "not a directory (a Terminal-Bench task is a folder)")
    if not (src / "task.yaml").is_file():
        raise TaskFormatError(src, "task.yaml", "missing; is this an original Terminal-Bench task?")
    try:
        TerminalBenchTaskConfig.model_validate(yaml.safe_load((src / "task.yaml").read_text()))
    except yaml.YAMLError as e:
        raise TaskFormatError(src, "task.yaml", f"not valid YAML: {e}") from e
    except ValidationError as e:
        raise TaskFormatError(src, "task.yaml", _describe_validation_error(e)) from e
    if not (src / "run-tests.sh").is_file():
        raise TaskFormatError(src, "run-tests.sh", "missing; Harbor turns it into tests/test.sh")
    if not (src / "docker-compose.yaml").is_file() and not (src / "Dockerfile").is_file():
        raise TaskFormatError(src, "Dockerfile", "missing (and no docker-compose.yaml either)")


def migrate_terminal_bench(src: StrPath, dest: StrPath) -> Path:
    """Convert an original Terminal-Bench task folder into a Harbor task at ``dest``.

    Uses Harbor's own mapper (what ``harbor task migrate`` runs for a single task), after checking
    the source so errors name the file at fault. Departures from the CLI: a Dockerfile-only task
    gets Terminal-Bench's default compose file first (Harbor's mapper insists on one), the result
    is validated with ``load_task``, and it appears at ``dest`` atomically. Resources, network
    mode and test-time downloads are left as the source had them: review before evolving.
    """
    from harbor.mappers.terminal_bench import TerminalBenchMapper

    src, dest = Path(src).resolve(), Path(dest)
    _check_terminal_bench_source(src)
    if dest.exists() or dest.is_symlink():
        raise FileExistsError(f"{dest}: already exists; refusing to migrate over it")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{dest.name}.", dir=dest.parent) as work:
        source = src
        if not (src / "docker-compose.yaml").is_file():
            source = Path(work) / "source" / src.name
            shutil.copytree(src, source, symlinks=True)
            (source / "docker-compose.yaml").write_text(_TB1_DEFAULT_COMPOSE)
        staged = Path(work) / "out" / dest.name
        try:
            TerminalBenchMapper()._map_task(source, staged)
        except (OSError, ValueError) as e:
            raise TaskFormatError(src, None, f"Harbor's Terminal-Bench mapper failed: {e}") from e
        load_task(staged)
        os.chmod(staged, 0o755)
        os.rename(staged, dest)
    return dest
