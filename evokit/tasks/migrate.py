"""Import original Terminal-Bench (v1) tasks through Harbor's own migration code."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from pydantic import ValidationError

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
    from evokit.verify.rubric import test_time_fetches  # the rubric's own judgement of a fetch

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
