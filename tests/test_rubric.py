"""The rubric's static rules (evokit.verify.rubric) on real task folders, without sandboxes.

Precision matters as much as recall here: the rubric must not fail correct third-party tasks
(inputs the tests invoke or read are not outputs; a request to the task's own service on
127.0.0.1 is not a download; a pristine copy of an input under tests/ is not a leak), and must
still catch the defects it exists for. The whole corpus of correct Terminal-Bench-2-style tasks
(tests/data/tb2_style) is verified in a sandbox by tests/test_verify.py; here every static rule
runs on each of them, and on broken variants of them. The import-path rule (the verifier's own
interpreters never load the agent's code) is also checked on shell and Python variants of the tests,
and one sandbox test shows the pattern it flags is a real hole (reward 1 for a planted pytest.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evokit.tasks import load_task
from evokit.verify.rubric import DEFAULT_RUBRIC, RubricContext, image_paths, outputs_and_inputs

ROOT = Path(__file__).resolve().parents[1]
CORPUS = sorted(p for p in (ROOT / "tests" / "data" / "tb2_style").iterdir() if (p / "task.toml").is_file())


def static(task_dir: Path) -> dict[str, tuple[bool, str]]:
    ctx = RubricContext(load_task(task_dir))
    return {r.name: (ok, reason) for r, ok, reason in DEFAULT_RUBRIC.evaluate(ctx, runs=False)}


def copy(name: str, tmp_path: Path) -> Path:
    dest = tmp_path / name
    shutil.copytree(ROOT / "tests" / "data" / "tb2_style" / name, dest)
    return dest


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 8


#: Corpus tasks whose inputs only the built image shows (tests/test_verify.py verifies them with it).
NEEDS_IMAGE = {"generated-fixtures"}


@pytest.mark.parametrize("task", [t for t in CORPUS if t.name not in NEEDS_IMAGE], ids=lambda p: p.name)
def test_no_static_rule_fails_a_correct_task(task):
    """Every static rule passes on every correct corpus task read without a build (FP rate 0); the
    whole verifier, with the image, is tests/test_verify.py's."""
    failed = {k: v[1] for k, v in static(task).items() if not v[0]}
    assert not failed


def test_scripts_the_tests_invoke_are_inputs_not_outputs():
    """The issue's case: test.sh runs /app/scripts/reset-state.sh, which the image ships (an input);
    rotate.sh is shipped too but the solution rewrites it (an output, named in the instruction)."""
    ctx = RubricContext(load_task(ROOT / "tests" / "data" / "tb2_style" / "log-rotate-fix"))
    outputs, inputs = outputs_and_inputs(ctx)
    assert "/app/scripts/reset-state.sh" in inputs
    assert "/app/scripts/rotate.sh" in outputs
    assert "/app/logs" in outputs  # the image does not have it: the tests read it as a result


def test_image_paths_follow_copy_semantics():
    """COPY of a file list into a relative folder, of a folder, JSON form, WORKDIR and RUN paths."""
    base = ROOT / "tests" / "data" / "tb2_style"
    merge = image_paths(RubricContext(load_task(base / "crlf-config-merge")))
    assert {"/srv/config/conf.d/base.ini", "/srv/config/conf.d/local.ini", "/opt/app/defaults.ini",
            "/srv/config"} <= merge
    mig = image_paths(RubricContext(load_task(base / "sqlite-migrations")))
    assert {"/app/migrations/0003_backfill.sql", "/app/scripts/migrate.py", "/app/db/app.db"} <= mig
    assert "/app/db/top_customer.txt" not in mig


def test_unnamed_output_is_still_caught(tmp_path):
    """Recall kept: an output the tests read that the instruction never names fails the rule."""
    task = copy("crlf-config-merge", tmp_path)
    text = (task / "instruction.md").read_text().replace("Also write `/srv/config/merged.json`", "Also write a file")
    (task / "instruction.md").write_text(text)
    ok, reason = static(task)["instruction-names-outputs"]
    assert not ok and "/srv/config/merged.json" in reason


def test_a_shipped_file_the_solution_rewrites_must_be_named(tmp_path):
    """A file the image ships becomes an output when the solution writes it: unnamed, it fails."""
    task = copy("log-rotate-fix", tmp_path)
    text = (task / "instruction.md").read_text().replace("`/app/scripts/rotate.sh`", "the rotation script")
    (task / "instruction.md").write_text(text.replace("Fix the rotation script", "Fix it"))
    ok, reason = static(task)["instruction-names-outputs"]
    assert not ok and "/app/scripts/rotate.sh" in reason


@pytest.mark.parametrize("line, fetches", [
    ("curl -s http://127.0.0.1:8088/healthz", False),
    ("curl -s http://localhost:9000/", False),
    ("curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh", True),
    ("uvx -p 3.13 -w pytest==8.4.1 pytest /tests/test_outputs.py", True),
    ("wget -q https://example.com/data.csv", True),
    ("pip install pytest", True),
])
def test_tests_offline_tells_loopback_from_downloads(tmp_path, line, fetches):
    """A request to the task's own service is not a download; installers and remote URLs are."""
    task = copy("service-healthcheck", tmp_path)
    test_sh = task / "tests" / "test.sh"
    test_sh.write_text(test_sh.read_text().replace("cd /tests\n", f"{line}\ncd /tests\n"))
    ok, reason = static(task)["tests-offline"]
    assert ok is not fetches, reason


def test_leak_rule_tells_input_copies_from_test_logic(tmp_path):
    """A pristine copy of an input under tests/ is fine (log-rotate-fix keeps one of reset-state.sh);
    the test logic or the solution inside the image is a leak."""
    task = copy("log-rotate-fix", tmp_path)
    assert static(task)["environment-no-leak"][0]
    shutil.copy(task / "tests" / "test_outputs.py", task / "environment" / "scripts" / "checks.py")
    ok, reason = static(task)["environment-no-leak"]
    assert not ok and "tests/test_outputs.py" in reason


def test_multi_stage_dockerfiles_are_read_by_their_final_stage(tmp_path):
    """A multi-stage build (refused by the local sandbox, fine for Docker) still tells inputs apart:
    the final stage's COPY and what it copies from a builder stage are provided."""
    task = copy("python-package-bugfix", tmp_path)
    dockerfile = task / "environment" / "Dockerfile"
    text = dockerfile.read_text()
    dockerfile.write_text("FROM debian:bookworm-slim AS builder\nRUN echo built > /opt/tool\n\n" + text.replace(
        "WORKDIR /app\n", "WORKDIR /app\nCOPY --from=builder /opt/tool /app/bin/tool\n", 1))
    provided = image_paths(RubricContext(load_task(task)))
    assert {"/app/bin/inventory-cli", "/app/data/stock.csv", "/app/bin/tool"} <= provided
    assert static(task)["instruction-names-outputs"][0]


def test_copy_sources_outside_the_context_are_not_walked(tmp_path):
    """Attack: a task folder (written by an LLM modifier, or a stranger) whose Dockerfile copies
    ``../../..`` and whose environment holds a symlink to / must not make the rubric walk the host:
    nothing outside environment/ becomes a provided path, and the rule answers at once."""
    task = copy("log-rotate-fix", tmp_path)
    ctx = RubricContext(load_task(task))  # Harbor refuses the link below at load time; planted after
    (task / "environment" / "host").symlink_to("/")
    dockerfile = task / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "COPY ../../../../../../ /app/stolen/\nCOPY host/ /app/host/\n")
    provided = image_paths(ctx)
    assert not any(p.startswith(("/app/stolen/", "/app/host/")) for p in provided), sorted(provided)[:10]
    assert "/app/scripts/reset-state.sh" in provided


def test_rules_never_read_host_files_through_symlinks(tmp_path):
    """Attack: a tests/ symlink to a host file that would match a rule (and be quoted in its reason,
    which goes back to the LLM modifier) is not read. Harbor already refuses to load such a task;
    the rubric holds on its own too (a link planted after loading)."""
    secret = tmp_path / "host-secret.sh"
    secret.write_text("pip install exfiltrate-me\n")
    task = copy("log-rotate-fix", tmp_path)
    ctx = RubricContext(load_task(task))
    (task / "tests" / "helper.sh").symlink_to(secret)
    assert "helper.sh" not in ctx.read_tree("tests")
    ok, reason = dict((r.name, (o, why)) for r, o, why in DEFAULT_RUBRIC.evaluate(ctx, runs=False))["tests-offline"]
    assert ok and "exfiltrate" not in reason


def test_the_built_image_says_what_a_run_step_generated():
    """generated-fixtures' input is written by a RUN step under a relative path: the Dockerfile's text
    cannot show it (statically it looks like an unnamed output), the built image does."""
    from evokit.sandbox.task_env import image_for_task

    task = load_task(ROOT / "tests" / "data" / "tb2_style" / "generated-fixtures")
    ctx = RubricContext(task)
    assert "/app/data/measurements.csv" in outputs_and_inputs(ctx)[0]  # the static reading's limit
    ctx.image = image_for_task(task)
    outputs, inputs = outputs_and_inputs(ctx)
    assert "/app/data/measurements.csv" in inputs and "/app/result/stats.json" in outputs


def test_tests_offline_honours_an_allowlist(tmp_path):
    """With network_mode = "allowlist", downloads from the allowed hosts are fine, others are not."""
    task = copy("service-healthcheck", tmp_path)
    toml_path = task / "task.toml"
    toml_path.write_text(toml_path.read_text().replace(
        'network_mode = "no-network"', 'network_mode = "allowlist"\nallowed_hosts = ["*.pythonhosted.org", "pypi.org"]'))
    test_sh = task / "tests" / "test.sh"
    base = test_sh.read_text()
    test_sh.write_text(base.replace("cd /tests\n", "curl -sO https://files.pythonhosted.org/x.whl\ncd /tests\n"))
    assert static(task)["tests-offline"][0]
    test_sh.write_text(base.replace("cd /tests\n", "curl -sO https://example.com/x.whl\ncd /tests\n"))
    ok, reason = static(task)["tests-offline"]
    assert not ok and "allowlist" in reason


# --- tests-import-path: the verifier's own interpreters never load the agent's code ---------------

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
