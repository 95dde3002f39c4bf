"""The error hierarchy (evokit.errors) and what the CLI makes of it.

Checks that every exception class evokit defines is an EvokitError on the branch errors.py's table
gives it, with its builtin base kept; that the environment's mistakes (a mistyped $EVOKIT_SANDBOX,
no Docker daemon behind DOCKER_HOST, a Dockerfile whose RUN fails) reach a user of the real CLI as
one line, exit 2; and that anything else is an internal error, exit 1, re-raised under --debug.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import evokit
from evokit import cli, errors
from evokit.errors import EvokitError, Unavailable, UserError
from evokit.parallel import LocalExecutor, ParallelError

ROOT = Path(__file__).resolve().parents[1]
TASK = ROOT / "examples" / "tasks" / "files-organize"
NOBODY = "unix:///tmp/evokit-test-nobody-listens.sock"


def evokit_classes() -> dict[str, type]:
    """``module.Class`` (without ``evokit.``) → class, for every Exception subclass defined in evokit."""
    found = {}
    for info in pkgutil.walk_packages(evokit.__path__, "evokit."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and issubclass(obj, Exception) and obj.__module__ == module.__name__:
                found[f"{obj.__module__.removeprefix('evokit.')}.{obj.__qualname__}"] = obj
    return found


def table() -> dict[str, str]:
    """errors.py's table: ``module.Class`` → branch."""
    rows = re.findall(r"^``([\w.]+)``\s+(EvokitError|UserError|Unavailable)\s", errors.__doc__, re.M)
    return dict(rows)


def branch(cls: type) -> str:
    return ("Unavailable" if issubclass(cls, Unavailable) else "UserError" if issubclass(cls, UserError)
            else "EvokitError" if issubclass(cls, EvokitError) else "none")


def test_every_evokit_exception_is_an_evokit_error_on_its_tables_branch():
    classes = evokit_classes()
    assert len(classes) > 35  # the walk found the package's classes, not a handful
    outside = sorted(name for name, cls in classes.items() if not issubclass(cls, EvokitError))
    assert outside == [], f"not EvokitErrors: {outside}"
    rows = table()  # a row may name a class where it is importable from, not only where defined
    listed = {name: getattr(importlib.import_module("evokit." + name.rpartition(".")[0]), name.rpartition(".")[2])
              for name in rows}
    named = {name: cls for name, cls in classes.items() if not name.startswith("errors.")}
    assert sorted(name for name, cls in named.items() if cls not in listed.values()) == [], "not in the table"
    wrong = {name: (rows[name], branch(cls)) for name, cls in listed.items() if rows[name] != branch(cls)}
    assert wrong == {}, f"table branch vs class branch: {wrong}"


def test_old_bases_are_kept():
    """Code that catches ValueError / RuntimeError / SandboxError still catches what it caught."""
    classes = evokit_classes()
    assert issubclass(classes["sandbox.build_step.ImageBuildError"], RuntimeError)
    assert issubclass(classes["tasks.folder.TaskFormatError"], ValueError)
    assert issubclass(classes["llm.LLMError"], RuntimeError)
    sandbox_error = classes["sandbox.runtime.SandboxError"]
    assert issubclass(classes["sandbox.backend.SandboxBackendError"], sandbox_error)
    assert issubclass(classes["sandbox.task_env.TaskEnvironmentError"], sandbox_error)
    assert cli.UserError is UserError


def evokit_cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evokit.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, "HARBOR_TELEMETRY": "0", **(env or {})})


def one_error_line(out: subprocess.CompletedProcess) -> str:
    """The one line a user's mistake prints (exit 2, nothing else on stderr, no traceback)."""
    assert out.returncode == 2, (out.returncode, out.stdout[-2000:], out.stderr[-2000:])
    lines = [line for line in out.stderr.replace("\r", "\n").splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("verify:")]  # the progress bar
    assert len(lines) == 1 and lines[0].startswith("evokit: error: "), out.stderr[-2000:]
    assert "Traceback" not in out.stderr + out.stdout
    return lines[0]


def test_a_mistyped_sandbox_backend_is_one_line_exit_2():
    line = one_error_line(evokit_cli("verify", str(TASK), env={"EVOKIT_SANDBOX": "bogus"}))
    assert "EVOKIT_SANDBOX='bogus' is not a sandbox backend; use one of: local, docker" in line


def test_under_debug_the_same_mistake_shows_its_traceback():
    out = evokit_cli("verify", str(TASK), env={"EVOKIT_SANDBOX": "bogus", "EVOKIT_DEBUG": "1"})
    assert out.returncode != 0 and "Traceback" in out.stderr and "SandboxBackendError" in out.stderr


@pytest.mark.parametrize("command", [["run", str(TASK)], ["verify", str(TASK), str(TASK.parent / "pipes-top-ips")]])
def test_no_docker_daemon_is_one_line_exit_2(command):
    """The Docker backend with DOCKER_HOST at a socket nobody listens on: `run` directly, `verify`
    through its parallel jobs (both tasks fail the same way: the machine's setup, not a verdict)."""
    line = one_error_line(evokit_cli(*command, env={"EVOKIT_SANDBOX": "docker", "DOCKER_HOST": NOBODY}))
    assert f"no Docker daemon answers at {NOBODY}" in line and "unset EVOKIT_SANDBOX" in line
    assert len(line) <= len("evokit: error: ") + cli.MESSAGE_LIMIT + len(" (2 of 2 jobs failed)")


def test_a_dockerfile_whose_run_fails_is_one_line_exit_2_naming_the_step(tmp_path):
    """`evokit run TASK --agent oracle` on a task whose Dockerfile's third line fails to build in the
    local sandbox: one line naming Dockerfile:3 and the step's last output."""
    task = tmp_path / "broken-build"
    shutil.copytree(TASK, task)
    (task / "environment" / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nWORKDIR /app\nRUN echo apt says no-such-package >&2 && exit 3\n")
    line = one_error_line(evokit_cli("run", str(task), "--agent", "oracle"))
    assert f"{task}/environment/Dockerfile:3: build step failed (exit code 3)" in line, line
    assert line.endswith("apt says no-such-package"), line


def raised(e: Exception) -> Exception:
    """``e`` after a real raise (with its traceback), as the CLI's handler receives it."""
    try:
        raise e
    except Exception as caught:
        return caught


def test_an_internal_error_is_exit_1_and_debug_re_raises_it(capsys):
    """The CLI's handler (the unit under test) with a bug's plain RuntimeError."""
    bug = raised(RuntimeError("index out of step\nsecond line"))
    assert cli.report_error(bug) == 1
    err = capsys.readouterr().err
    assert err == ("evokit: internal error: RuntimeError: index out of step second line (rerun with "
                   "`evokit --debug ...` for the traceback)\n")
    with pytest.raises(RuntimeError) as info:
        cli.report_error(bug, debug=True)
    assert info.value is bug and info.traceback  # the same exception, its traceback intact


def test_a_user_error_message_becomes_one_capped_line(capsys):
    """Newlines collapse, a traceback inside a message is dropped, a long message keeps both ends."""
    text = ("Dockerfile:7: build step failed\n" + "noise " * 200 + "\nE: Unable to locate package nope\n"
            "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: inner")
    assert cli.report_error(raised(UserError(text))) == 2
    line = capsys.readouterr().err
    assert line.count("\n") == 1 and "Traceback" not in line and "inner" not in line
    assert line.startswith("evokit: error: Dockerfile:7: build step failed noise")
    assert line.rstrip().endswith("E: Unable to locate package nope") and " … " in line
    assert cli.MESSAGE_LIMIT - 3 <= len(line.rstrip()) - len("evokit: error: ") <= cli.MESSAGE_LIMIT


def fails_the_users_way(i: int) -> int:
    from evokit.tasks import TaskFormatError

    if i == 0:
        raise TaskFormatError(Path(f"/tasks/t{i}"), "task.toml", "missing")
    raise Unavailable(f"no daemon (job {i})")


def fails_with_a_bug_too(i: int) -> int:
    if i == 1:
        raise KeyError("a bug")
    return fails_the_users_way(i)


def test_parallel_jobs_failing_the_users_way_are_one_line_and_a_bug_among_them_is_internal(capsys):
    """Real parallel jobs (process workers: the errors travel back pickled) through the CLI's handler."""
    ex = LocalExecutor(2, "process")
    with pytest.raises(ParallelError) as info:
        ex.map(fails_the_users_way, range(3))
    assert cli.report_error(info.value) == 2
    assert capsys.readouterr().err == ("evokit: error: /tasks/t0/task.toml: missing (3 of 3 jobs failed)\n")
    with pytest.raises(ParallelError) as info:
        ex.map(fails_with_a_bug_too, range(3))
    assert cli.report_error(info.value) == 1
    err = capsys.readouterr().err
    assert err.startswith("evokit: internal error: ParallelError: 3 of 3 jobs failed;") and err.count("\n") == 1
