"""The import-path rule (evokit.verify.import_path): the verifier's own interpreters never load the agent's code.

Checked on every correct corpus task and bundled example (no false positive), on shell and Python
variants of the tests, and by one sandbox test showing the pattern it flags is a real hole (reward 1
for a planted pytest.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rubric_support import CORPUS, ROOT, copy, static

from evokit.tasks import load_task

EXAMPLES = sorted(p for p in (ROOT / "examples" / "tasks").iterdir() if (p / "task.toml").is_file())


def import_path(task_dir: Path) -> tuple[bool, str]:
    return static(task_dir)["tests-import-path"]


@pytest.mark.parametrize("task", CORPUS + EXAMPLES, ids=lambda p: p.name)
def test_import_path_rule_passes_the_clean_corpus(task):
    """Every corpus task (generated-fixtures too: the rule needs no image) and every bundled example
    keeps the agent's dirs off its tests' import path: 0 of 15 flagged."""
    ok, reason = import_path(task)
    assert ok, reason


def shell_task(tmp_path: Path, lines: str) -> Path:
    """log-rotate-fix (workdir /app, test.sh starts there) with ``lines`` run first in its test.sh."""
    task = copy("log-rotate-fix", tmp_path)
    test_sh = task / "tests" / "test.sh"
    test_sh.write_text(test_sh.read_text().replace("mkdir -p /logs/verifier\n", f"mkdir -p /logs/verifier\n{lines}\n", 1))
    return task


def test_the_json_shadow_case_is_flagged(tmp_path):
    """The case the rule exists for: test.sh runs ``python3 -c 'import json…'`` in /app with
    PYTHONPATH=/app, so an /app/json.py would run as the verifier."""
    task = shell_task(tmp_path, "cd /app && PYTHONPATH=/app python3 -c 'import json; json.load(open(\"/app/out.json\"))'")
    ok, reason = import_path(task)
    assert not ok
    assert "PYTHONPATH=/app puts /app on the import path" in reason and "python3 -c` in /app" in reason
    assert "tests/test.sh:6" in reason and "setpriv" in reason  # where, and the way out


@pytest.mark.parametrize("line", [
    "python3 -m pytest -p no:cacheprovider /tests/test_outputs.py",  # no cd: cwd is the workdir
    "cd /app; python3 - <<'EOF'\nimport json\nEOF",
    "export PYTHONPATH=\"$PYTHONPATH:/app/lib\"",
    "pytest -q",  # collects /app's own tests and conftest.py
    "pytest /app/tests",
    "python3 check.py",  # a relative script: the agent's file
    "node -e \"require('./helper')\"",
    "npm test",
    "uv run pytest /tests/test_outputs.py",
    "LD_PRELOAD=/app/libhook.so sha256sum /app/out.txt",
    "cd /srv && cd ../app && timeout 30 python3 -c 'import csv'",
])
def test_interpreters_that_load_the_workdir_are_flagged(tmp_path, line):
    """Each of these runs (or lets run) a module from /app inside the verifier."""
    ok, reason = import_path(shell_task(tmp_path, line))
    assert not ok, line


@pytest.mark.parametrize("line", [
    "cd /tests && python3 -m pytest /tests/test_outputs.py",
    "python3 /tests/test_outputs.py",  # script mode: /tests, not the cwd, goes on sys.path
    "python3 -I -c 'import json'",
    "python3 -P -m json.tool /app/x.json",
    "pytest /tests/test_outputs.py",  # a console script: its bin dir, not the cwd, on sys.path
    "uvx -w pytest==8.4.1 pytest /tests/test_outputs.py",  # tool runs ignore project configuration
    "(cd /tmp && setpriv --reuid=65534 --regid=65534 --clear-groups python3 /app/report.py)",
    "setpriv --reuid=65534 --regid=65534 --clear-groups python3 -c 'import report'",
    "PYTHONPATH=/app/src runuser -u nobody -- python3 -c 'import inventory'",
    "export PYTHONPATH=/opt/verifier-lib",
    "cat > /tmp/x.py <<'EOF'\ncd /app\npython3 -m json\nEOF",  # a heredoc body is data
])
def test_safe_invocations_are_not_flagged(tmp_path, line):
    """A dir the agent cannot write, isolated/safe-path mode, absolute verifier scripts, and the
    agent's code run as an unprivileged user are fine."""
    ok, reason = import_path(shell_task(tmp_path, line))
    assert ok, (line, reason)


@pytest.mark.parametrize("code, flagged", [
    ('import sys\nsys.path.insert(0, "/app")\n', True),
    ('import site\nsite.addsitedir("/app/lib")\n', True),
    ('import runpy\nrunpy.run_path("/app/solution.py")\n', True),
    ('import os\nos.environ["PYTHONPATH"] = "/app"\n', True),
    ('import subprocess\nsubprocess.run(["python3", "-c", "import x"], cwd="/app")\n', True),
    ('import subprocess\nsubprocess.run(["python3", "/tests/h.py"], env={"PYTHONPATH": "/app"})\n', True),
    ('import subprocess\nCMD = ["python3", "-m", "x"]\nsubprocess.run(CMD, cwd="/app")\n', True),
    ('import subprocess\nNOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]\n'
     'subprocess.run([*NOBODY, "python3", "-c", "import x"], cwd="/app", env={"PYTHONPATH": "/app"})\n', False),
    ('import subprocess\nsubprocess.run(["python3", "-c", "import x"], cwd="/tmp")\n', False),
    ('import sys\nsys.path.insert(0, "/tests/helpers")\n', False),
])
def test_python_test_files_are_read(tmp_path, code, flagged):
    """Test code that imports from /app, or starts an interpreter that would, as the verifier."""
    task = copy("log-rotate-fix", tmp_path)
    (task / "tests" / "test_outputs.py").write_text(code + (task / "tests" / "test_outputs.py").read_text())
    ok, reason = import_path(task)
    assert ok is not flagged, reason


def test_environment_the_tests_inherit_is_read(tmp_path):
    """An image ENV, a [verifier].env entry or an editable install naming the workdir is flagged;
    the image's PYTHONPATH is fine once test.sh unsets it before anything runs."""
    task = copy("python-package-bugfix", tmp_path)  # its Dockerfile sets ENV PYTHONPATH=/app/src
    assert import_path(task)[0]  # its test.sh unsets it first
    test_sh = task / "tests" / "test.sh"
    test_sh.write_text(test_sh.read_text().replace("unset PYTHONPATH\n", ""))
    ok, reason = import_path(task)
    assert not ok and "environment: PYTHONPATH=/app/src" in reason

    task = copy("sqlite-migrations", tmp_path / "b")
    toml_path = task / "task.toml"
    toml_path.write_text(toml_path.read_text().replace("[verifier]\n", '[verifier]\nenv = { NODE_PATH = "/app/node_modules" }\n'))
    ok, reason = import_path(task)
    assert not ok and "NODE_PATH=/app/node_modules" in reason

    task = copy("sqlite-migrations", tmp_path / "c")
    dockerfile = task / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN pip install --break-system-packages -e /app/pkg\n")
    ok, reason = import_path(task)
    assert not ok and "editable install of /app/pkg" in reason


def test_a_workdir_from_task_toml_or_artifacts_counts(tmp_path):
    """The agent's dirs follow the task: crlf-config-merge's workdir is /srv/config, and a declared
    artifact's source is the agent's work too."""
    task = copy("crlf-config-merge", tmp_path)
    test_sh = task / "tests" / "test.sh"
    test_sh.write_text(test_sh.read_text().replace("cd /tests\n", "python3 -c 'import configparser'\ncd /tests\n"))
    ok, reason = import_path(task)
    assert not ok and "in /srv/config" in reason
    task = copy("sqlite-migrations", tmp_path / "b")
    toml_path = task / "task.toml"
    toml_path.write_text(toml_path.read_text().replace('artifacts = ["/app"]', 'artifacts = ["/app", "/output/report"]'))
    (task / "tests" / "test_outputs.py").write_text('import sys\nsys.path.insert(0, "/output/report")\n'
                                                     + (task / "tests" / "test_outputs.py").read_text())
    ok, reason = import_path(task)
    assert not ok and "/output/report" in reason


def test_the_flagged_pattern_is_a_real_hole(tmp_path):
    """Why the rule exists, in the sandbox: python-package-bugfix's tests as they were (the image's
    PYTHONPATH=/app/src reaching ``python3 -m pytest``, the package imported into the verifier) give
    reward 1 to an agent that fixes nothing and plants ``/app/src/pytest.py``; the rule flags them.
    The task's tests as they are (PYTHONPATH unset, the package run as nobody) give it 0."""
    from evokit.sandbox.task_env import image_for_task
    from evokit.verify.trial import run_trial

    exploit = "#!/bin/bash\nprintf 'raise SystemExit(0)\\n' > /app/src/pytest.py\n"
    fixed = copy("python-package-bugfix", tmp_path / "fixed")
    (fixed / "solution" / "solve.sh").write_text(exploit)
    former = copy("python-package-bugfix", tmp_path / "former")
    (former / "solution" / "solve.sh").write_text(exploit)
    test_sh = former / "tests" / "test.sh"
    test_sh.write_text(test_sh.read_text().replace("unset PYTHONPATH\n", "").replace("chmod 700 /tests\n", ""))
    (former / "tests" / "test_outputs.py").write_text(  # fails on the unfixed package: only the shadow passes it
        'import sys\nfrom decimal import Decimal\nsys.path.insert(0, "/app/src")\n'
        'from inventory import Item, total_value  # noqa: E402\n\n\ndef test_api_unseen_data():\n'
        '    items = [Item("x", 4, Decimal("1.25")), Item("y", -1, Decimal("3"))]\n'
        '    assert total_value(items) == Decimal("5.00")\n')
    assert not import_path(former)[0] and import_path(fixed)[0]
    rewards = {}
    for name, task_dir in (("former", former), ("fixed", fixed)):
        task = load_task(task_dir)
        rewards[name] = run_trial(task, image_for_task(task), kind="oracle").rewards
    assert rewards == {"former": {"reward": 1.0}, "fixed": {"reward": 0.0}}
