"""Import original Terminal-Bench (v1) tasks through Harbor's own migration code."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from pydantic import ValidationError

from evokit.tasks.fetches import test_time_fetches
from evokit.tasks.folder import (
    CONFIG_FILE,
    StrPath,
    TaskFormatError,
    _dump_config,
    describe_validation_error,
    load_task,
)

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


#: ``[metadata]`` key listing what an imported task's tests install or download at test time.
TEST_TIME_FETCHES_KEY = "test_time_fetches"


def _record_test_time_fetches(task_dir: Path) -> list[str]:
    """Write what the tests fetch at test time into ``[metadata]``, and return it.

    Terminal-Bench 1's ``run-tests.sh`` commonly installs uv from the internet and pytest with it
    while the tests run; Harbor's mapper keeps that and marks the network open, so nothing in the
    folder says the reward needs the internet. The record says it, in the task, next to the
    config that allows it; the rubric's ``tests-no-download`` judges the files themselves.
    """
    tests = task_dir / "tests"
    fetches = [f"tests/{p.relative_to(tests)}: {line}" for p in sorted(tests.rglob("*")) if p.is_file()
               for line in test_time_fetches(p.read_text(errors="replace"))]
    config = load_task(task_dir).config
    config.metadata[TEST_TIME_FETCHES_KEY] = fetches
    (task_dir / CONFIG_FILE).write_text(_dump_config(task_dir, config), encoding="utf-8")
    return fetches


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
        raise TaskFormatError(src, "task.yaml", describe_validation_error(e)) from e
    if not (src / "run-tests.sh").is_file():
        raise TaskFormatError(src, "run-tests.sh", "missing; Harbor turns it into tests/test.sh")
    if not (src / "docker-compose.yaml").is_file() and not (src / "Dockerfile").is_file():
        raise TaskFormatError(src, "Dockerfile", "missing (and no docker-compose.yaml either)")


def migrate_terminal_bench(src: StrPath, dest: StrPath) -> Path:
    """Convert an original Terminal-Bench task folder into a Harbor task at ``dest``.

    Uses Harbor's own mapper (what ``harbor task migrate`` runs for a single task), after checking
    the source so errors name the file at fault. Departures from the CLI: a Dockerfile-only task
    gets Terminal-Bench's default compose file first (Harbor's mapper insists on one), the result
    is validated with ``load_task``, what its tests fetch at test time is recorded as
    ``[metadata].test_time_fetches`` (empty when nothing), and it appears at ``dest`` atomically.
    Resources, network mode and the downloads themselves are left as the source had them: the
    rubric (``tests-no-download``, ``harbor-lint``) judges the task as it is.
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
        _record_test_time_fetches(staged)
        os.chmod(staged, 0o755)
        os.rename(staged, dest)
    return dest


def terminal_bench_tasks(root: StrPath) -> list[Path]:
    """Original Terminal-Bench task folders (task.yaml, no task.toml) at or below ``root``.

    ``root`` itself when it is one; otherwise every such folder below it (hidden folders skipped, a
    task's own subfolders not searched). Lets a command that expects Harbor tasks tell a user who
    pointed it at Terminal-Bench 1 tasks what to run instead (``evokit import-tb1``).
    """
    root = Path(root)
    if _is_terminal_bench(root):
        return [root]
    found = []
    for dirpath, dirnames, _ in os.walk(root):
        here = Path(dirpath)
        if here != root and _is_terminal_bench(here):
            found.append(here)
            dirnames[:] = []
            continue
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
    return sorted(found)


def _is_terminal_bench(path: Path) -> bool:
    return (path / "task.yaml").is_file() and not (path / "task.toml").is_file()


def import_terminal_bench(src: StrPath, dest: StrPath) -> list[Path]:
    """Import one Terminal-Bench task (``src`` has task.yaml; it becomes the Harbor task ``dest``, or
    ``dest/<name>`` when ``dest`` is an existing folder, as ``cp -r`` would place it) or a folder of
    them (each becomes ``dest/<name>``), with :func:`migrate_terminal_bench`.

    A folder of tasks is imported whole or reported whole: every task is tried, and if any fails a
    :class:`TaskFormatError` names each failure (the tasks that did import stay in ``dest``).
    """
    src, dest = Path(src), Path(dest)
    if not src.exists():
        raise FileNotFoundError(f"{src}: no such file or folder")
    if (src / "task.yaml").is_file():
        return [migrate_terminal_bench(src, dest / src.resolve().name if dest.is_dir() else dest)]
    tasks = terminal_bench_tasks(src)
    if not tasks:
        raise TaskFormatError(src, "task.yaml", "missing, and no Terminal-Bench task (a folder with task.yaml) "
                                                "below it")
    names = [t.name for t in tasks]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise TaskFormatError(src, None, f"task name(s) {', '.join(twice)} occur more than once below it; import "
                                         "those folders one at a time")
    done, failed = [], []
    for t in tasks:
        try:
            done.append(migrate_terminal_bench(t, dest / t.name))
        except (TaskFormatError, FileExistsError) as e:
            failed.append(" ".join(str(e).split()))
    if failed:
        raise TaskFormatError(src, None, f"{len(failed)} of {len(tasks)} task(s) not imported "
                                         f"({len(done)} imported into {dest}): {'; '.join(failed)}")
    return done
