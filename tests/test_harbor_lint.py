"""Harbor's own linter over the task folders evokit ships and writes (evokit.verify.harbor_lint).

Checks that ``harbor lint`` (the real CLI, and Harbor's linter as a library with the same rule
selection) finds nothing in the bundled examples, the TB2-style fixtures, a freshly rendered
procedural task and a task written with evokit's defaults; that the rule selection follows
``[metadata.harbor.lint]`` exactly as the CLI does; and that the rubric's ``harbor-lint`` and
``tests-no-download`` items flag what they claim and stay quiet on the correct corpus.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from harbor.models.task.config import NetworkMode, VerifierEnvironmentMode
from harbor.models.task.task import Task

from evokit.catalog import pairs
from evokit.plan import Plan, Step, render
from evokit.tasks import default_task_config, write_task
from evokit.verify.harbor_lint import harbor_lint
from evokit.verify.rubric import DEFAULT_RUBRIC, RubricContext

ROOT = Path(__file__).resolve().parents[1]
CORPUS = sorted((ROOT / "examples" / "tasks").iterdir()) + sorted((ROOT / "tests" / "data" / "tb2_style").iterdir())
HARBOR = Path(sys.executable).with_name("harbor")


def _harbor_cli(*args: str | Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HARBOR_TELEMETRY": "0"}
    return subprocess.run([str(HARBOR), "lint", *map(str, args)], capture_output=True, text=True, env=env,
                          timeout=120)


def _written(dest: Path, *, shared: bool = False, test_sh: str | None = None) -> Path:
    cfg = default_task_config()
    if shared:
        cfg.verifier.environment_mode = VerifierEnvironmentMode.SHARED
    return write_task(dest, instruction="Write 42 to /app/out.txt.\n",
                      dockerfile="FROM debian:bookworm-slim\nWORKDIR /app\n",
                      tests={"test.sh": test_sh or "#!/bin/bash\ngrep -qx 42 /app/out.txt && echo 1 > "
                             "/logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"},
                      solution={"solve.sh": "#!/bin/bash\necho 42 > /app/out.txt\n"}, config=cfg)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> list[Path]:
    """A procedural task and a task written with evokit's defaults, fresh from the writers."""
    tmp = tmp_path_factory.mktemp("written")
    scenario_name, skill_name = pairs()[0]
    return [render(Plan((Step(scenario_name, skill_name),)), seed=7, dest=tmp / "procedural"), _written(tmp / "default")]


@pytest.mark.skipif(not HARBOR.is_file(), reason="the harbor CLI is installed with evokit's environment")
def test_harbor_cli_finds_nothing(rendered):
    """``harbor lint`` itself exits 0 with no output over every example, fixture and written task."""
    result = _harbor_cli(*CORPUS, *rendered)
    assert (result.returncode, result.stdout.strip()) == (0, ""), result.stdout + result.stderr


def test_library_finds_nothing(rendered):
    """The library call with the CLI's rule selection agrees: no finding anywhere."""
    assert {str(t): harbor_lint(t) for t in [*CORPUS, *rendered]} == {str(t): [] for t in [*CORPUS, *rendered]}


@pytest.mark.skipif(not HARBOR.is_file(), reason="the harbor CLI is installed with evokit's environment")
def test_rule_selection_matches_the_cli(tmp_path):
    """A shared verifier is a finding for both; ``[metadata.harbor.lint] ignore`` silences it for both."""
    task = _written(tmp_path / "shared", shared=True)

    def both() -> tuple[list[str], list[str]]:
        cli = json.loads(_harbor_cli("--json", task).stdout)
        return [f["rule"] for f in cli], [str(f.rule) for f in harbor_lint(task)]

    assert both() == (["shared-verifier"], ["shared-verifier"])
    toml = task / "task.toml"
    toml.write_text(toml.read_text() + '\n[metadata.harbor.lint]\nignore = ["shared-verifier"]\n')
    assert both() == ([], [])


def _static_rubric(task: Path) -> dict[str, tuple[bool, str]]:
    ctx = RubricContext(task=Task(task))
    return {rule.name: (ok, reason) for rule, ok, reason in DEFAULT_RUBRIC.evaluate(ctx, runs=False)}


def test_rubric_harbor_lint_item(tmp_path):
    """The rubric's ``harbor-lint`` item fails on a shared verifier, naming the rule and file."""
    ok, reason = _static_rubric(_written(tmp_path / "shared", shared=True))["harbor-lint"]
    assert not ok and "[shared-verifier] task.toml" in reason
    assert _static_rubric(_written(tmp_path / "separate"))["harbor-lint"] == (True, "harbor lint finds nothing")


def test_rubric_tests_no_download_item(tmp_path):
    """With the network open, tests that install uv from the internet fail ``tests-no-download``;
    a request to the task's own service on localhost does not."""
    reward = "echo 1 > /logs/verifier/reward.txt\n"
    fetching = _written(tmp_path / "fetching", test_sh="#!/bin/bash\ncurl -LsSf https://astral.sh/uv/0.7.13/install.sh"
                        " | sh\nuv pip install pytest==8.4.1\n" + reward)
    local = _written(tmp_path / "local", test_sh="#!/bin/bash\ncurl -fsS http://localhost:8080/health\n" + reward)
    for task in (fetching, local):
        toml = task / "task.toml"
        toml.write_text(toml.read_text().replace('network_mode = "no-network"', 'network_mode = "public"'))
        assert Task(task).config.environment.network_mode == NetworkMode.PUBLIC
    ok, reason = _static_rubric(fetching)["tests-no-download"]
    assert not ok and "astral.sh" in reason and "uv pip install" in reason
    assert _static_rubric(local)["tests-no-download"][0]
    toml = fetching / "task.toml"
    toml.write_text(toml.read_text() + '\n[metadata.harbor.lint]\nignore = ["verifier-network-download"]\n')
    assert _static_rubric(fetching)["tests-no-download"][0]  # live-service verification, stated Harbor's way


def test_no_false_positives_on_the_correct_corpus(tmp_path):
    """The Harbor-derived rubric items pass on every example and TB2-style fixture (false-positive rate 0/15)."""
    failed = {t.name: [(name, reason) for name, (ok, reason) in _static_rubric(t).items()
                       if not ok and name in ("harbor-lint", "tests-no-download")] for t in CORPUS}
    assert len(CORPUS) == 15 and not any(failed.values()), failed


def test_a_copied_fixture_with_a_runtime_download_is_flagged(tmp_path):
    """The same fixture becomes a finding when its test.sh gains a test-time download in the separate
    verifier (Harbor's ``verifier-network-download``), so the corpus result is not vacuous."""
    task = shutil.copytree(ROOT / "examples" / "tasks" / "csv-quoted-ledger", tmp_path / "t")
    test_sh = task / "tests" / "test.sh"
    test_sh.write_text(test_sh.read_text().replace("\n", "\ncurl -fsSL https://example.com/data.csv -o /tmp/d.csv\n", 1))
    assert [str(f.rule) for f in harbor_lint(task)] == ["verifier-network-download"]
