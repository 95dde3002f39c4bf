"""The three verifiers (oracle, null solution, rubric) on good and deliberately broken tasks.

Every task here runs for real in the local sandbox; the broken ones are small variants of a
good task written into tmp_path, so each failure mode is checked against its own reason.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evokit.tasks import write_task
from evokit.verify import Rule, VerifyConfig, load_pattern_rules, parse_rewards, verify_task
from evokit.verify.rubric import DEFAULT_RUBRIC
from evokit.verify.trial import RewardError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p for p in (ROOT / "examples" / "tasks").iterdir() if (p / "task.toml").is_file())

GOOD_TEST = """#!/bin/bash
mkdir -p /logs/verifier
if [ "$(cat /app/answer.txt 2>/dev/null)" = "42" ]; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
"""


def make_task(root: Path, name: str = "answer", *, test: str = GOOD_TEST, solve: str = "echo 42 > /app/answer.txt",
              dockerfile: str = "FROM debian:bookworm-slim\nWORKDIR /app\n", env_files=None,
              agent_timeout: float = 30) -> Path:
    from evokit.tasks import default_task_config

    cfg = default_task_config()
    cfg.agent.timeout_sec = agent_timeout
    return write_task(root / name, instruction="Write the number 42 to /app/answer.txt and nothing else.",
                      dockerfile=dockerfile, environment_files=env_files or {},
                      tests={"test.sh": test}, solution={"solve.sh": "#!/bin/bash\n" + solve + "\n"}, config=cfg)


def checks(verdict) -> dict[str, tuple[bool, str]]:
    return {c.name: (c.passed, c.reason) for c in verdict.checks}


@pytest.mark.parametrize("task", EXAMPLES, ids=lambda p: p.name)
def test_bundled_examples_verify(task):
    """Each bundled example passes all three verifiers: oracle 1, null 0, every rubric rule."""
    v = verify_task(task)
    assert v.passed, [(c.name, c.reason) for c in v.failures]
    assert v.rewards["oracle"] == [{"reward": 1.0}, {"reward": 1.0}]
    assert v.rewards["null"] == [{"reward": 0.0}]


TB2_STYLE = sorted(p for p in (ROOT / "tests" / "data" / "tb2_style").iterdir() if (p / "task.toml").is_file())


@pytest.mark.parametrize("task", TB2_STYLE, ids=lambda p: p.name)
def test_tb2_style_corpus_verifies_without_rubric_false_positives(task):
    """Each correct third-party-style task (Terminal-Bench 2's style: apt + pip at build time, pytest with
    a CTRF report, helper scripts the tests run, CRLF inputs, files under /opt, non-root users, a
    loopback service) builds in the local sandbox and verifies: oracle 1 twice, null 0, and no rubric
    rule fails (on a correct task, any failed rule is a false positive; benchmarks/bench_rubric.py
    prints the per-rule table). The hack gate is left out: several of these tasks run the agent's code
    as root in their tests, which it rightly rejects (tests/test_hack_gate.py)."""
    v = verify_task(task, VerifyConfig(hack_gate=None))
    assert v.passed, [(c.name, c.reason) for c in v.failures]
    assert v.rewards["oracle"] == [{"reward": 1.0}, {"reward": 1.0}] and v.rewards["null"] == [{"reward": 0.0}]
    assert all(c.passed for c in v.checks if c.name.startswith("rubric:"))


def test_good_task_and_logs_kept(tmp_path):
    """A minimal good task passes; with log_root each trial's /logs and verdict.json are kept on disk."""
    task = make_task(tmp_path)
    v = verify_task(task, VerifyConfig(log_root=tmp_path / "logs"))
    assert v.passed, v.failures
    log = Path(v.log_dir)
    assert json.loads((log / "verdict.json").read_text())["passed"] is True
    assert (log / "oracle-0" / "verifier" / "reward.txt").read_text().strip() == "1"
    assert (log / "null-2" / "verifier" / "reward.txt").read_text().strip() == "0"


def test_a_trial_the_harness_broke_runs_again(tmp_path, monkeypatch):
    """A sandbox that fails to start (the machine's fault, here made to happen once for the oracle's
    first trial by wrapping the real sandbox's start) is no verdict on the task: that trial runs once
    more and the task passes."""
    from evokit.sandbox import SandboxError
    from evokit.verify import trial

    real, broken = trial.sandbox_for_task, []

    def flaky(*args, **kwargs):
        sandbox = real(*args, **kwargs)
        if not broken:
            broken.append(sandbox)

            def refuse():
                raise SandboxError("could not start (simulated machine fault)")
            sandbox.start = refuse
        return sandbox

    monkeypatch.setattr(trial, "sandbox_for_task", flaky)
    v = verify_task(make_task(tmp_path), VerifyConfig(hack_gate=None, parallel=False))
    assert broken and v.passed, v.failures


def test_vacuous_tests_fail_the_null_check(tmp_path):
    """Tests that always pass are caught: the do-nothing run must score 0."""
    task = make_task(tmp_path, test="#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    c = checks(verify_task(task))
    assert c["oracle"][0] and not c["null"][0]
    assert "reward 1.0 with no solution" in c["null"][1]


def test_missing_reward_file_is_an_error_not_a_zero(tmp_path):
    """A test script that writes no reward fails oracle and null with a reason naming the reward file."""
    task = make_task(tmp_path, test="#!/bin/bash\ntrue\n")
    v = verify_task(task)
    c = checks(v)
    assert not c["oracle"][0] and "no reward file" in c["oracle"][1]
    assert not c["null"][0] and not c["rubric:null-writes-reward"][0]
    assert not c["rubric:test-writes-reward"][0]


def test_hanging_solution_times_out(tmp_path):
    """A solution that hangs is killed at the agent timeout and the oracle check says so."""
    task = make_task(tmp_path, solve="sleep 600", agent_timeout=2)
    v = verify_task(task, VerifyConfig(determinism_runs=1))
    c = checks(v)
    assert not c["oracle"][0] and "timed out" in c["oracle"][1]
    assert v.timings["total"] < 30


def test_dockerfile_that_fails_to_build(tmp_path):
    """A failing RUN gives a failed 'build' check naming the Dockerfile line, not an exception."""
    task = make_task(tmp_path, dockerfile="FROM debian:bookworm-slim\nRUN echo about to fail && false\n")
    c = checks(verify_task(task))
    assert not c["build"][0]
    assert "Dockerfile:2" in c["build"][1] and "about to fail" in c["build"][1]


def test_unreachable_base_image(tmp_path, monkeypatch):
    """A base image whose registry cannot be reached is a clear 'build' failure naming the image and
    the registry (here a Docker Hub mirror on a closed local port, so the test needs no network)."""
    monkeypatch.setenv("EVOKIT_REGISTRY_MIRRORS", "docker.io=http://127.0.0.1:9")
    task = make_task(tmp_path, dockerfile="FROM python:3.12-slim\n")
    c = checks(verify_task(task))
    assert not c["build"][0] and "python:3.12-slim" in c["build"][1] and "127.0.0.1:9" in c["build"][1]
    assert "cannot reach the registry" in c["build"][1] and "\n" not in c["build"][1]


def test_malformed_task_toml(tmp_path):
    """A task.toml that is not TOML gives a failed 'format' check naming the file."""
    task = make_task(tmp_path)
    (task / "task.toml").write_text("[agent\ntimeout_sec = ")
    c = checks(verify_task(task))
    assert not c["format"][0] and "task.toml" in c["format"][1]


def test_missing_test_script(tmp_path):
    """A task without tests/test.sh is refused at load time with a reason naming it."""
    task = make_task(tmp_path)
    (task / "tests" / "test.sh").unlink()
    c = checks(verify_task(task))
    assert not c["format"][0] and "test.sh" in c["format"][1]


def test_nondeterministic_oracle_is_caught(tmp_path):
    """Rewards that differ between two fresh sandboxes fail the determinism rule."""
    test = ('#!/bin/bash\nmkdir -p /logs/verifier\n'
            'echo "{\\"reward\\": 1, \\"nonce\\": $(od -An -N4 -tu4 /dev/urandom)}" > /logs/verifier/reward.json\n')
    c = checks(verify_task(make_task(tmp_path, test=test)))
    assert c["oracle"][0]
    assert not c["rubric:oracle-deterministic"][0]


def test_solution_copied_into_environment_is_a_leak(tmp_path):
    """A reference solution shipped inside the image fails the leak rule."""
    solve = "# a long enough solution comment to count as content\necho 42 > /app/answer.txt"
    task = make_task(tmp_path, solve=solve, env_files={"solve.sh": "#!/bin/bash\n" + solve + "\n"},
                     dockerfile="FROM debian:bookworm-slim\nWORKDIR /app\nCOPY solve.sh /opt/\n")
    c = checks(verify_task(task))
    assert not c["rubric:environment-no-leak"][0] and "solve.sh" in c["rubric:environment-no-leak"][1]


def test_instruction_must_name_tested_outputs(tmp_path):
    """Tests that check a file the instruction never mentions fail the instruction rule."""
    test = GOOD_TEST.replace("/app/answer.txt", "/app/secret_output.txt")
    c = checks(verify_task(make_task(tmp_path, test=test, solve="echo 42 > /app/secret_output.txt")))
    assert not c["rubric:instruction-names-outputs"][0]
    assert "/app/secret_output.txt" in c["rubric:instruction-names-outputs"][1]


def test_rubric_is_extensible_from_toml_and_python(tmp_path):
    """User rules (TOML pattern rules and Python rules) run alongside the defaults."""
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\nname = "no-cat"\nfiles = "tests"\nforbid = "\\\\bcat\\\\b"\n')
    python_rule = Rule("has-answer-word", "instruction says 'number'",
                       lambda ctx: ("number" in ctx.task.instruction, "checked"))
    rubric = DEFAULT_RUBRIC.with_rules(*load_pattern_rules(rules), python_rule)
    c = checks(verify_task(make_task(tmp_path), VerifyConfig(rubric=rubric, determinism_runs=1)))
    assert not c["rubric:no-cat"][0]
    assert c["rubric:has-answer-word"][0]


def test_pattern_rule_file_errors_name_the_rule(tmp_path):
    """A malformed rule file gives an error naming the file and the rule."""
    bad = tmp_path / "bad.toml"
    bad.write_text('[[rule]]\nname = "x"\nforbid = "a"\nrequire = "b"\n')
    with pytest.raises(ValueError, match="bad.toml.*x"):
        load_pattern_rules(bad)


def test_reward_contract():
    """reward.json wins over reward.txt; non-numeric, empty, non-finite and non-UTF-8 rewards are errors."""
    assert parse_rewards({"reward.txt": b"0.5\n"}) == {"reward": 0.5}
    assert parse_rewards({"reward.txt": b"1", "reward.json": b'{"a": 1, "b": 0}'}) == {"a": 1.0, "b": 0.0}
    for bad in ({"reward.txt": b""}, {"reward.txt": b"yes"}, {"reward.json": b'{"a": "1"}'},
                {"reward.json": b"NaN"}, {"reward.json": b"{"}, {},
                # strict decoding (the reward-parsing class): no lenient bytes, no booleans, no empty metric set
                {"reward.txt": b"1\xff"}, {"reward.txt": b"1e309"}, {"reward.json": b"true"},
                {"reward.json": b"{}"}, {"reward.json": b'{"reward": Infinity}'}):
        with pytest.raises(RewardError):
            parse_rewards(bad)


def test_multi_metric_threshold(tmp_path):
    """With reward.json metrics, reward_key picks the judged metric; without it the minimum is judged."""
    test = ('#!/bin/bash\nmkdir -p /logs/verifier\nif [ -f /app/answer.txt ]; then a=1; else a=0; fi\n'
            'echo "{\\"correct\\": $a, \\"style\\": 0.5}" > /logs/verifier/reward.json\n')
    task = make_task(tmp_path, test=test)
    assert not checks(verify_task(task, VerifyConfig(determinism_runs=1)))["oracle"][0]
    assert checks(verify_task(task, VerifyConfig(determinism_runs=1, reward_key="correct")))["oracle"][0]


def test_cli_verify_and_run(tmp_path):
    """`evokit verify` exits 1 when a task fails and prints the table; `evokit run --agent nop` prints reward 0."""
    good = make_task(tmp_path, "good")
    bad = make_task(tmp_path, "bad", test="#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    cli = [sys.executable, "-m", "evokit.cli"]
    out = subprocess.run([*cli, "verify", str(good), str(bad)], capture_output=True, text=True)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "good" in out.stdout and "bad" in out.stdout and "null" in out.stdout
    assert subprocess.run([*cli, "verify", str(good)], capture_output=True).returncode == 0
    out = subprocess.run([*cli, "run", str(good), "--agent", "nop"], capture_output=True, text=True)
    assert json.loads(out.stdout.strip().splitlines()[-1])["rewards"] == {"reward": 0.0}
    shutil.rmtree(tmp_path / "bad")


@pytest.mark.parametrize("mode", ["separate", "shared"])
def test_agent_daemon_cannot_rewrite_the_reward(tmp_path, mode):
    """A background loop left by the 'agent' that keeps writing reward 1: in the separate mode it is
    killed before the work is copied; in the shared mode it runs on beside the tests, but writes
    only the sandbox's own ``/logs/verifier``, never the private one the host reads."""
    solve = ("(while :; do echo 1 > /logs/verifier/reward.txt 2>/dev/null; sleep 0.01; done) &\n"
             "setsid sh -c 'while :; do echo 1 > /logs/verifier/reward.txt; sleep 0.01; done' &\n"
             "sleep 0.2")
    # Like many real test scripts, this one writes 0 first and takes a while before deciding.
    test = "#!/bin/bash\nmkdir -p /logs/verifier\necho 0 > /logs/verifier/reward.txt\nsleep 0.5\n" + \
        GOOD_TEST.split("mkdir -p /logs/verifier\n", 1)[1] + "sleep 0.3\n"
    task = make_task(tmp_path, solve=solve, test=test)  # never writes the answer: the true reward is 0
    v = verify_task(task, VerifyConfig(determinism_runs=1, verifier_mode=mode))
    assert v.rewards["oracle"] == [{"reward": 0.0}]


# A TCP service the solution leaves running (perl-base is in every Debian image); the tests talk to it.
SERVICE = ("nohup perl -MIO::Socket::INET -e '$s=IO::Socket::INET->new(LocalAddr=>\"127.0.0.1:7171\",Listen=>5,"
           "ReuseAddr=>1) or die; while($c=$s->accept){print $c \"42\\n\"; close $c}' >/dev/null 2>&1 &\n"
           "for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/7171) 2>/dev/null && break; sleep 0.05; done")
SERVICE_TEST = """#!/bin/bash
if exec 3<>/dev/tcp/127.0.0.1/7171 && [ "$(head -1 <&3)" = 42 ]; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
"""


def test_shared_mode_keeps_the_solutions_services_up_for_the_tests(tmp_path):
    """Harbor's shared mode: a solution that starts a service (here a TCP server answering 42) is
    checked with the service up: oracle 1, null 0. The separate mode carries files only, so there
    the same oracle scores 0 (the service is the agent's process, killed before the copy)."""
    from harbor.models.task.task import Task

    from evokit.sandbox.task_env import image_for_task
    from evokit.verify import run_trial

    task = Task(make_task(tmp_path, solve=SERVICE, test=SERVICE_TEST))
    image = image_for_task(task)
    oracle = run_trial(task, image, kind="oracle", mode="shared")
    assert (oracle.rewards, oracle.error) == ({"reward": 1.0}, None)
    null = run_trial(task, image, kind="null", mode="shared")
    assert null.rewards == {"reward": 0.0}
    assert run_trial(task, image, kind="oracle", mode="separate").rewards == {"reward": 0.0}


PYTHON_IMAGE = ("FROM debian:bookworm-slim\n"
                "RUN apt-get update && apt-get install -y --no-install-recommends python3 && rm -rf /var/lib/apt/lists/*\n"
                "WORKDIR /app\n")
IMPORT_TEST = """#!/bin/bash
if python3 -c 'import json, sys; sys.exit(0 if json.load(open("/app/answer.json")) == {"x": 1} else 1)' \\
   && [ "$(echo aGk= | python3 -m base64 -d)" = hi ]; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
"""
SHADOW = ("printf 'import sys\\nprint(\"shadowed\")\\nsys.exit(0)\\n' > /app/json.py\n"
          "printf 'import sys\\nprint(\"hi\")\\n' > /app/base64.py")


@pytest.mark.parametrize("mode", ["separate", "shared"])
def test_tests_do_not_import_the_agents_modules(tmp_path, mode):
    """The import-path class: the tests run with cwd = the workdir, the agent's work. A
    ``/app/json.py`` and ``/app/base64.py`` that pass whatever they are asked would be imported
    by ``python3 -c 'import json'`` and ``python3 -m base64`` there (the control shows it), so the
    harness sets ``PYTHONSAFEPATH=1``, over the task's own ``[verifier].env`` (which tries to unset
    it here): the planted modules score 0, an honest answer 1."""
    from harbor.models.task.task import Task

    from evokit.sandbox import Sandbox
    from evokit.sandbox.task_env import image_for_task
    from evokit.verify import run_trial

    root = make_task(tmp_path, "shadow", solve=SHADOW, test=IMPORT_TEST, dockerfile=PYTHON_IMAGE)
    toml = (root / "task.toml").read_text()
    assert "[verifier.env]\n" in toml
    (root / "task.toml").write_text(toml.replace("[verifier.env]\n", '[verifier.env]\nPYTHONSAFEPATH = ""\n'))
    task = Task(root)
    image = image_for_task(task)
    with Sandbox(image) as control:
        assert control.exec(SHADOW).ok
        assert control.exec("python3 -c 'import json'", cwd="/app").stdout == "shadowed\n"  # the attack is real
    attack = run_trial(task, image, kind="oracle", mode=mode)
    assert attack.rewards == {"reward": 0.0}, attack.error
    honest_root = make_task(tmp_path, "honest", solve='echo \'{"x": 1}\' > /app/answer.json', test=IMPORT_TEST,
                            dockerfile=PYTHON_IMAGE)
    honest = run_trial(Task(honest_root), image, kind="oracle", mode=mode)
    assert honest.rewards == {"reward": 1.0}, honest.error


SERVICES_TASK = Path(__file__).parent / "data" / "shared_services" / "redis-supervisord"


@pytest.mark.slow  # apt-get installs redis and supervisor into the image (about a minute once)
def test_shared_mode_task_with_redis_under_supervisord():
    """A task in the style of Terminal-Bench's service tasks: the solution configures supervisord
    to run redis and stores a key; the tests ask supervisorctl and redis-cli. Under Harbor's shared
    mode the agent's services are up when the tests run, so the oracle scores 1 and doing nothing 0."""
    from harbor.models.task.task import Task

    from evokit.sandbox.task_env import image_for_task
    from evokit.verify import run_trial

    task = Task(SERVICES_TASK)
    image = image_for_task(task)
    oracle = run_trial(task, image, kind="oracle", mode="shared")
    assert (oracle.rewards, oracle.error) == ({"reward": 1.0}, None)
    assert run_trial(task, image, kind="null", mode="shared").rewards == {"reward": 0.0}
