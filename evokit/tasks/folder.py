"""Task folders: constants, the error type, reading through Harbor's model, safe TOML writes."""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from harbor.models.task.config import (
    TaskConfig,
)
from harbor.models.task.paths import TaskPaths
from harbor.models.task.task import Task
from pydantic import ValidationError

from evokit.errors import UserError
from evokit.tasks.limits import Limits, LimitsError

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

class TaskFormatError(UserError, ValueError):
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


def describe_validation_error(err: ValidationError) -> str:
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
        problem = "does not match Harbor's TaskConfig: " + describe_validation_error(e)
        raise TaskFormatError(folder, CONFIG_FILE, problem) from e


#: Cap on one instruction file (``instruction.md``, ``steps/<name>/instruction.md``): 1 MiB.
#: Why (host files): a 100 MB instruction costs 1.1 GB of host RSS by the time it is a
#: prompt. Terminal-Bench instructions are a few kB; 1 MiB is already past any model's
#: context window, so a larger file is a broken or hostile task, refused before it is read.
MAX_INSTRUCTION_BYTES = 1 << 20


def check_instruction_files(folder: StrPath, config: TaskConfig | None = None) -> None:
    """Refuse an instruction file that is too big, not a regular file, or a symlink.

    Checked with ``lstat`` before anything reads it: a FIFO would hang the reader, and a
    symlink (``instruction.md -> /etc/shadow``) would put a host file into the agent's prompt.
    """
    folder = Path(folder)
    names = [INSTRUCTION_FILE]
    if config is not None and config.steps:
        names = [f"steps/{step.name}/{INSTRUCTION_FILE}" for step in config.steps]
    elif (folder / "steps").is_dir():
        names += [f"steps/{p.name}/{INSTRUCTION_FILE}" for p in sorted((folder / "steps").iterdir())]
    for name in names:
        try:
            st = (folder / name).lstat()
        except FileNotFoundError:
            continue  # absent: reported (or not needed) by whoever requires it
        if stat.S_ISLNK(st.st_mode):
            raise TaskFormatError(folder, name, "is a symlink; an instruction must be a regular file in the "
                                  "task folder (a link could put any host file into the prompt)")
        if not stat.S_ISREG(st.st_mode):
            raise TaskFormatError(folder, name, "is not a regular file (a FIFO or device would hang the reader)")
        if st.st_size > MAX_INSTRUCTION_BYTES:
            raise TaskFormatError(folder, name, f"is {st.st_size} bytes, over the cap of {MAX_INSTRUCTION_BYTES} "
                                  "bytes (evokit.tasks.folder.MAX_INSTRUCTION_BYTES); shorten it")


def open_task(path: StrPath) -> Task:
    """Harbor's ``Task(path)`` after :func:`check_instruction_files` (which Harbor reads whole).

    For code that needs a ``Task`` without :func:`load_task`'s full checks (the sandbox and
    trial paths); errors are :class:`TaskFormatError`.
    """
    check_instruction_files(path)
    return Task(Path(path))


def _check_limits(folder: Path, config: TaskConfig) -> None:
    """``[environment]`` cpus / memory_mb / storage_mb in range (zero, negative, absurd refused)."""
    env = config.environment
    try:
        Limits(cpus=env.cpus, memory_mb=env.memory_mb, storage_mb=env.storage_mb)
    except LimitsError as e:
        raise TaskFormatError(folder, CONFIG_FILE, f"[environment] {e}") from None


def load_task(path: StrPath) -> Task:
    """Load any Harbor task folder with Harbor's own model, raising ``TaskFormatError`` if bad.

    Checks, in order: the folder exists; task.toml parses and validates (and its limits are in
    range); instruction files are regular files under the size cap; instruction.md exists
    (single-step tasks); environment/ exists unless ``[environment].docker_image`` is set (Harbor's
    ``Task`` does not check this, but no backend can start the task without it); then Harbor's
    ``Task(path)``, whose missing-test-script error is reported as the file it expects.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise TaskFormatError(folder, None, "not a directory (a Harbor task is a folder)")
    config = _read_config(folder)
    _check_limits(folder, config)
    check_instruction_files(folder, config)
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
