"""The rubric's static rules (evokit.verify.rubric) on real task folders, without sandboxes.

Precision matters as much as recall here: the rubric must not fail correct third-party tasks
(inputs the tests invoke or read are not outputs; a request to the task's own service on
127.0.0.1 is not a download; a pristine copy of an input under tests/ is not a leak), and must
still catch the defects it exists for. The whole corpus of correct Terminal-Bench-2-style tasks
(tests/data/tb2_style) is verified in a sandbox by tests/test_verify.py; here every static rule
runs on each of them, and on broken variants of them. The import-path rule has its own tests
(tests/test_import_path.py).
"""

from __future__ import annotations

import shutil

import pytest
from rubric_support import CORPUS, ROOT, copy, static

from evokit.tasks import load_task
from evokit.verify.rubric import DEFAULT_RUBRIC, RubricContext, image_paths, outputs_and_inputs


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


def test_an_oracle_run_without_a_reward_is_named_with_its_error():
    """Two oracle runs, one scored and one that wrote no reward: the determinism rule fails and the
    reason carries the rewardless run's own error, so a rejection (an evolved child's, an ensemble
    merge's) says whether the task or the machine broke it."""
    from evokit.verify.rubric import oracle_deterministic
    from evokit.verify.trial import TrialRun

    ctx = RubricContext(load_task(ROOT / "tests" / "data" / "tb2_style" / "log-rotate-fix"))
    ctx.oracle_runs = [TrialRun("oracle", rewards={"reward": 1.0}),
                       TrialRun("oracle", error="solution timed out after 120s")]
    ok, reason = oracle_deterministic(ctx)
    assert not ok and "no reward (solution timed out after 120s)" in reason and "'reward': 1.0" in reason
