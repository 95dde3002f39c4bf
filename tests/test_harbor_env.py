"""Tests for evokit.sandbox.harbor_env: the sandbox as a Harbor environment, driven by Harbor itself.

Runs real Harbor trials (the ``harbor run`` CLI in a subprocess, and the ``Trial`` Python API)
with ``--env evokit.sandbox:BubblewrapEnvironment`` on small task folders written here, and
reads the rewards Harbor wrote: the oracle scores 1.0, nop 0.0, ``no-network`` tasks are accepted
and really get no network, ``public`` tasks get it, ``allowlist`` tasks are refused.
"""

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harbor.models.trial.config import AgentConfig, EnvironmentConfig, TaskConfig, TrialConfig
from harbor.trial.trial import Trial
from sandbox_support import leftovers, trace, write_harbor_task

from evokit.sandbox import Sandbox, runtime

IMPORT_PATH = "evokit.sandbox:BubblewrapEnvironment"
HARBOR = str(Path(sys.executable).with_name("harbor"))
# The oracle writes "hi" only if the sandbox has no network at all, so 1.0 proves both.
SOLVE_WITHOUT_NETWORK = (
    "if getent hosts pypi.org >/dev/null 2>&1 || timeout 3 bash -c 'echo > /dev/tcp/1.1.1.1/53' 2>/dev/null;"
    " then echo leaked > /app/out.txt; else echo hi > /app/out.txt; fi"
)
SOLVE_WITH_NETWORK = "getent hosts pypi.org > /dev/null && echo hi > /app/out.txt"


def mentions(needle: str) -> list[str]:
    """Host processes whose command line or mount table mentions ``needle``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        for name in ("cmdline", "mountinfo"):
            try:
                if needle in Path(f"/proc/{pid}/{name}").read_text(errors="replace"):
                    found.append(f"{pid} ({name})")
            except OSError:
                pass
    return found


def harbor_run(task: Path, agent: str, jobs: Path, cache: Path) -> dict:
    """``harbor run`` one trial on our environment; return its result.json; check nothing is left."""
    run_dir = jobs.parent / "run"
    env = {**os.environ, "HARBOR_TELEMETRY": "0", "EVOKIT_CACHE": str(cache), "EVOKIT_RUN_DIR": str(run_dir)}
    res = subprocess.run([HARBOR, "run", "-p", str(task), "-a", agent, "--env", IMPORT_PATH, "-o", str(jobs)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert run_dir.is_dir() and not list(run_dir.iterdir())  # a sandbox ran, and its state dir is gone
    assert mentions(str(run_dir)) == []
    results = list(jobs.glob("*/*/result.json"))
    assert len(results) == 1, (results, res.stdout[-2000:])
    return json.loads(results[0].read_text())


def reward_of(result: dict) -> float:
    assert result.get("exception_info") is None, result["exception_info"]
    return result["verifier_result"]["rewards"]["reward"]


@pytest.mark.parametrize("agent, expected", [("oracle", 1.0), ("nop", 0.0)])
def test_harbor_cli_scores_oracle_and_nop(agent, expected, tmp_path, sandbox_cache):
    """``harbor run -a oracle|nop --env evokit.sandbox:BubblewrapEnvironment`` scores 1.0 and 0.0."""
    task = write_harbor_task(tmp_path / "hello", solve=SOLVE_WITHOUT_NETWORK)
    result = harbor_run(task, agent, tmp_path / "jobs", sandbox_cache)
    assert reward_of(result) == expected


@pytest.fixture
def traced(monkeypatch, sandbox_cache, tmp_path):
    """Run in-process trials on the session cache; record every sandbox Harbor starts."""
    monkeypatch.setenv("EVOKIT_CACHE", str(sandbox_cache))
    monkeypatch.setattr(runtime, "RUN_DIR", tmp_path / "run")
    traces = []
    real_start = Sandbox.start

    def start(self):
        out = real_start(self)
        traces.append(trace(self))
        return out

    monkeypatch.setattr(Sandbox, "start", start)
    yield traces
    assert traces, "no sandbox was started"
    for t in traces:
        assert leftovers(t) == []


def run_trial(task: Path, agent: str, trials: Path) -> object:
    config = TrialConfig(
        task=TaskConfig(path=task),
        trials_dir=trials,
        agent=AgentConfig(name=agent),
        environment=EnvironmentConfig(import_path=IMPORT_PATH),
    )

    async def go():
        trial = await Trial.create(config)
        return await trial.run()

    return asyncio.run(go())


def test_trial_api_oracle_on_a_no_network_task(tmp_path, traced):
    """Harbor's Trial API with EnvironmentConfig(import_path=...) accepts a no-network task and the
    oracle, which succeeds only without network, scores 1.0."""
    task = write_harbor_task(tmp_path / "offline", solve=SOLVE_WITHOUT_NETWORK)
    result = run_trial(task, "oracle", tmp_path / "trials")
    assert result.exception_info is None, result.exception_info
    assert result.verifier_result.rewards == {"reward": 1.0}
    on_disk = json.loads(next((tmp_path / "trials").glob("*/result.json")).read_text())
    assert reward_of(on_disk) == 1.0


def test_trial_api_public_network_task_has_network(tmp_path, traced):
    """A ``network_mode = "public"`` task gets the host's network (its oracle needs DNS)."""
    task = write_harbor_task(tmp_path / "online", network_mode="public", solve=SOLVE_WITH_NETWORK)
    result = run_trial(task, "oracle", tmp_path / "trials")
    assert result.exception_info is None, result.exception_info
    assert result.verifier_result.rewards == {"reward": 1.0}


def test_trial_api_refuses_an_allowlist_task(tmp_path, sandbox_cache, monkeypatch):
    """An ``allowlist`` task cannot be enforced here: Harbor refuses it up front instead of running it open."""
    monkeypatch.setenv("EVOKIT_CACHE", str(sandbox_cache))
    task = write_harbor_task(tmp_path / "allow", network_mode="allowlist", solve=SOLVE_WITH_NETWORK)
    toml = (task / "task.toml").read_text().replace('network_mode = "allowlist"',
                                                    'network_mode = "allowlist"\nallowed_hosts = ["pypi.org"]')
    (task / "task.toml").write_text(toml)
    with pytest.raises(ValueError, match="allowlist.*not supported by evokit-bwrap"):
        run_trial(task, "oracle", tmp_path / "trials")


def test_agent_timeout_is_reported_and_nothing_outlives_the_trial(tmp_path, sandbox_cache):
    """An oracle that runs past ``[agent].timeout_sec`` ends as AgentTimeoutError, the verifier still
    scores the state it left (0.0), the trial ends promptly and the agent's command is gone."""
    task = write_harbor_task(tmp_path / "slow", solve="sleep 4242; echo hi > /app/out.txt")
    toml = (task / "task.toml").read_text().replace("[agent]\ntimeout_sec = 60", "[agent]\ntimeout_sec = 3")
    (task / "task.toml").write_text(toml)
    t0 = time.monotonic()
    result = harbor_run(task, "oracle", tmp_path / "jobs", sandbox_cache)
    assert time.monotonic() - t0 < 30
    assert result["exception_info"]["exception_type"] == "AgentTimeoutError"
    assert result["verifier_result"]["rewards"] == {"reward": 0.0}
    assert "sleep 4242" not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout


@pytest.mark.parametrize("solve, expected", [
    ("echo hi > /app/out.txt", 1.0),
    # A trojaned shell in the agent's environment writes reward 1 whatever the tests say; it
    # never reaches Harbor's separate verifier, which sees only the declared artifact /app.
    ("cp /usr/bin/dash /usr/bin/real-dash && printf '#!/usr/bin/real-dash\\necho 1 > /logs/verifier/reward.txt\\n'"
     " > /tmp/t && chmod 755 /tmp/t && mv /tmp/t /usr/bin/bash", 0.0),
])
def test_trial_api_harbor_separate_verifier_mode(tmp_path, traced, solve, expected):
    """Harbor's own ``[verifier] environment_mode = "separate"`` with ``artifacts = ["/app"]`` runs on
    this backend: the tests run in a second, fresh sandbox holding only /app."""
    task = write_harbor_task(tmp_path / "sep", solve=solve)
    toml = (task / "task.toml").read_text()
    toml = toml.replace('schema_version = "1.4"\n', 'schema_version = "1.4"\nartifacts = ["/app"]\n')
    (task / "task.toml").write_text(toml.replace("[verifier]\n", '[verifier]\nenvironment_mode = "separate"\n'))
    result = run_trial(task, "oracle", tmp_path / "trials")
    assert result.exception_info is None, result.exception_info
    assert result.verifier_result.rewards == {"reward": expected}
    assert len(traced) == 2  # the agent's sandbox and the verifier's


TROJAN_DIFF = "printf '#!/bin/sh\\nexit 0\\n' > /usr/bin/diff && chmod +x /usr/bin/diff && echo wrong > /app/out.txt"


@pytest.mark.parametrize("mode, expected", [("default", 0.0), ("shared", 1.0)])
def test_evokit_written_tasks_are_safe_from_trojans_under_harbors_own_trial(tmp_path, traced, mode, expected):
    """Attack (the trojaned-tool class) through Harbor's Trial: the agent (here the oracle slot, running the
    attack) replaces ``diff`` with ``exit 0`` and writes a wrong answer. A task written by evokit's
    ``write_task`` carries ``environment_mode = "separate"`` + ``artifacts = ["/app"]``, so the tests run
    in a fresh sandbox with the real ``diff``: reward 0. The same task switched to Harbor's shared mode
    (the control) gives 1.0: the attack is real, and the default is what stops it."""
    from harbor.models.task.config import VerifierEnvironmentMode

    from evokit.tasks.write import default_task_config, write_task

    cfg = default_task_config()
    if mode == "shared":
        cfg.verifier.environment_mode = VerifierEnvironmentMode.SHARED
        cfg.artifacts = []
    task = write_task(tmp_path / "t", instruction="Write the word right to /app/out.txt\n",
                      dockerfile="FROM debian:bookworm-slim\nWORKDIR /app\n",
                      tests={"test.sh": "#!/bin/bash\nmkdir -p /logs/verifier\necho right > /tmp/expected\n"
                                        "if diff -q /tmp/expected /app/out.txt; then echo 1 > /logs/verifier/reward.txt;"
                                        " else echo 0 > /logs/verifier/reward.txt; fi\n"},
                      solution={"solve.sh": f"#!/bin/bash\n{TROJAN_DIFF}\n"}, config=cfg)
    result = run_trial(task, "oracle", tmp_path / "trials")
    assert result.exception_info is None, result.exception_info
    assert result.verifier_result.rewards == {"reward": expected}


SERVICE = ("nohup perl -MIO::Socket::INET -e '$s=IO::Socket::INET->new(LocalAddr=>\"127.0.0.1:7272\",Listen=>5,"
           "ReuseAddr=>1) or die; while($c=$s->accept){print $c \"hi\\n\"; close $c}' >/dev/null 2>&1 &\n"
           "for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/7272) 2>/dev/null && break; sleep 0.05; done")


@pytest.mark.parametrize("agent, expected", [("oracle", 1.0), ("nop", 0.0)])
def test_trial_api_shared_mode_keeps_the_agents_service_up(tmp_path, traced, agent, expected):
    """Harbor's shared verifier (its default) on this backend: the oracle leaves a TCP service running
    and the tests, in the verifier's private namespaces, reach it over localhost (1.0); nop leaves
    none (0.0). The tests also find PYTHONSAFEPATH=1 and their own /tests, not the agent's."""
    task = write_harbor_task(tmp_path / "svc", solve=SERVICE)
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"
        'if [ "$PYTHONSAFEPATH" = 1 ] && [ -f /tests/test.sh ] && exec 3<>/dev/tcp/127.0.0.1/7272 '
        '&& [ "$(head -1 <&3)" = hi ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n')
    result = run_trial(task, agent, tmp_path / "trials")
    assert result.exception_info is None, result.exception_info
    assert result.verifier_result.rewards == {"reward": expected}


def test_trial_api_anchor_cannot_be_borrowed(tmp_path, traced):
    """Through Harbor's Trial (shared mode): the 'oracle' injects a reward daemon into pid 1 with
    ptrace and through /proc/1/mem; both are refused (the anchor is not dumpable), so Harbor reads 0.
    The refusals are in the oracle's own log."""
    import shutil

    from inject_support import injector

    daemon = "while :; do echo 1 > /logs/verifier/reward.txt; echo hi > /app/out.txt; sleep 0.01; done"
    task = write_harbor_task(tmp_path / "borrow",
                             solve=f"/solution/inject ptrace 1 '{daemon}'; /solution/inject mem 1 '{daemon}'; sleep 0.5")
    shutil.copy(injector(), task / "solution" / "inject")
    result = run_trial(task, "oracle", tmp_path / "trials")
    assert result.exception_info is None, result.exception_info
    assert result.verifier_result.rewards == {"reward": 0.0}
    log = next((tmp_path / "trials").glob("*/agent/oracle.txt")).read_text()
    assert log.count("refused:") == 2, log
