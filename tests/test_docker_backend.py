"""Tests for evokit.sandbox.docker_backend: evokit's sandbox API over a real Docker daemon.

Everything runs against the daemon of ``docker_support.docker_daemon`` (started here if none
runs; the tests fail, not skip, without one). The attacks are an agent that is root in its
container: a daemon that survives into the verifier phase, links and set-id files planted for
the host-side log download, a link in place of a file the host reads, a fork bomb, the
network of a ``no-network`` task, taking over pid 1 (``tests/data/inject.c``), killing it, and a
daemon that tries to reach the shared verifier's reward and processes.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from docker_support import containers_of, docker_client, docker_daemon  # noqa: F401
from sandbox_support import make_context

from evokit.sandbox.docker_backend import DockerSandbox
from evokit.sandbox.docker_image import build_docker_image
from evokit.sandbox.image import ImageBuildError
from evokit.sandbox.runtime import SandboxError
from evokit.tasks.limits import Limits

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "tasks" / "csv-quoted-ledger"
DOCKERFILE = """\
FROM debian:bookworm-slim
ENV IMAGE_VAR=from-image
WORKDIR /app
RUN useradd -m -u 1234 agent && echo ready > /app/ready.txt
"""


@pytest.fixture(scope="module")
def image(docker_client, tmp_path_factory):  # noqa: F811
    ctx = make_context(tmp_path_factory.mktemp("docker-ctx"), DOCKERFILE)
    return build_docker_image(ctx, docker_client=docker_client)


@pytest.fixture
def box(image, docker_client):  # noqa: F811
    """A started container sandbox; after the test, no container of it may remain."""
    sb = DockerSandbox(image, limits=Limits(memory_mb=256, pids=128), docker_client=docker_client)
    sb.start()
    yield sb
    sb.stop()
    assert containers_of(docker_client, sb.id) == []


def test_image_is_built_once_and_keeps_the_dockerfile_config(image, docker_client, tmp_path):  # noqa: F811
    assert image.workdir == "/app" and image.env["IMAGE_VAR"] == "from-image"
    ctx = make_context(tmp_path / "same", DOCKERFILE)
    assert build_docker_image(ctx, docker_client=docker_client).tag == image.tag  # content-keyed
    bad = make_context(tmp_path / "bad", "FROM debian:bookworm-slim\nRUN exit 7\n")
    with pytest.raises(ImageBuildError, match="exit|returned a non-zero code: 7"):
        build_docker_image(bad, docker_client=docker_client)


def test_exec_streams_codes_user_cwd_env_and_stdin(box):
    r = box.exec("echo out; echo err >&2; echo $IMAGE_VAR $EXTRA; pwd; exit 3", env={"EXTRA": "x"})
    assert (r.stdout, r.stderr, r.return_code) == ("out\nfrom-image x\n/app\n", "err\n", 3)
    assert box.exec(["id", "-u"], user="agent").stdout.strip() == "1234"
    assert box.exec(["sh", "-c", "pwd"], cwd="/tmp").stdout == "/tmp\n"
    payload = os.urandom(300_000)
    r = box.exec(["sh", "-c", "cat > /tmp/blob && sha256sum /tmp/blob"], stdin=payload)
    import hashlib

    assert r.ok and r.stdout.split()[0] == hashlib.sha256(payload).hexdigest()


def test_a_client_that_reads_the_reply_late_still_gets_all_the_output(box, monkeypatch):
    """A loaded host: the client reads the daemon's ``101`` reply after the command has written
    (a delay before ``http.client`` parses it forces that order on a real daemon). The frames
    that came with the reply are read from the HTTP parser's buffer, not lost."""
    import http.client

    parse = http.client.HTTPResponse.begin

    def late(response):
        time.sleep(0.5)
        return parse(response)

    monkeypatch.setattr(http.client.HTTPResponse, "begin", late)
    r = box.exec("echo out; echo err >&2")
    assert (r.stdout, r.stderr, r.return_code) == ("out\n", "err\n", 0)
    r = box.exec(["sh", "-c", "cat; echo done"], stdin=b"in\n", timeout_sec=30)
    assert (r.stdout, r.return_code) == ("in\ndone\n", 0)


def test_output_flood_is_capped(box):
    r = box.exec("head -c 5000000 /dev/zero | tr '\\0' a", max_output_bytes=10_000)
    assert r.ok and len(r.stdout) < 11_000 and r.truncated_bytes > 4_900_000


def test_timeout_kills_the_command_and_its_children(box):
    t = time.monotonic()
    r = box.exec("sleep 300 & sleep 301; echo never", timeout_sec=1)
    assert r.timed_out and r.return_code == 124 and time.monotonic() - t < 10
    time.sleep(0.2)
    ps = box.exec("for p in /proc/[0-9]*; do cat $p/cmdline 2>/dev/null | tr '\\0' ' '; echo; done").stdout
    assert "sleep 300" not in ps and "sleep 301" not in ps


def test_kill_commands_ends_a_daemon_that_would_rewrite_the_reward(box):
    """Attack: the agent leaves a loop that rewrites /logs/verifier/reward.txt; the files stay."""
    box.write_file("/app/work.txt", "agent's work")
    box.exec("nohup sh -c 'while true; do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' "
             ">/dev/null 2>&1 & disown; setsid sh -c 'sleep 1000' >/dev/null 2>&1 &")
    time.sleep(0.3)
    assert box.kill_commands() >= 2
    box.exec("rm -f /logs/verifier/reward.txt")
    time.sleep(0.3)
    assert box.exec("test -e /logs/verifier/reward.txt").return_code == 1
    assert box.read_file("/app/work.txt") == b"agent's work"
    assert box.exec("ls /proc | grep -c '^[0-9]'").stdout.strip() in {"3", "4"}  # the anchor, this exec's pipeline


def test_kill_commands_with_a_remote_daemon_restarts_the_container(box, monkeypatch):
    """The fallback when the container's cgroup is not on this host (Docker Desktop): SIGKILL pid 1
    and start again. Here the host's cgroup is hidden from the method to take that path for real."""
    monkeypatch.setattr(box, "_cgroup_procs", lambda: None)
    box.write_file("/app/work.txt", "kept")
    box.exec("nohup sh -c 'while true; do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' >/dev/null 2>&1 &")
    box.kill_commands()
    box.exec("rm -f /logs/verifier/reward.txt")
    time.sleep(0.3)
    assert box.exec("test -e /logs/verifier/reward.txt").return_code == 1
    assert box.read_file("/app/work.txt") == b"kept"


def test_upload_download_round_trip(box, tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("A")
    (src / "sub" / "b.bin").write_bytes(b"\x00\x01")
    box.upload_dir(src, "/deep/new/dir")
    box.upload_file(src / "a.txt", "/other/place/a2.txt")
    box.write_file("/logs/agent/w.txt", "W", mode=0o600)
    assert box.exec("cat /deep/new/dir/a.txt /deep/new/dir/sub/b.bin /other/place/a2.txt | wc -c").stdout.strip() == "4"
    assert box.exec("stat -c %a /logs/agent/w.txt").stdout.strip() == "600"
    out = tmp_path / "out"
    box.download_dir("/deep/new/dir", out)
    assert (out / "a.txt").read_text() == "A" and (out / "sub" / "b.bin").read_bytes() == b"\x00\x01"
    box.download_file("/logs/agent/w.txt", tmp_path / "w.txt")
    assert (tmp_path / "w.txt").read_text() == "W"
    with pytest.raises(FileNotFoundError):
        box.read_file("/nope")


def test_download_dir_keeps_planted_links_and_setid_files_off_the_host(box, tmp_path):
    """Attack: links out of the target (absolute, ``..``, through a link) and a setuid binary in /logs."""
    box.exec("cd /logs/agent && ln -s /etc etc && ln -s ../../../../../ up && ln -s w ok && echo w > w"
             " && cp /bin/sh suid && chmod 4755 suid && mkdir d && ln -s /etc/passwd d/pw")
    out = tmp_path / "logs"
    box.download_dir("/logs", out)
    agent = out / "agent"
    assert (agent / "w").read_text() == "w\n"
    for name in ("etc", "up", "d/pw", "ok"):  # no symlink reaches the host, not even an in-tree one
        assert not os.path.lexists(agent / name), name
    assert not (agent / "suid").stat().st_mode & (stat.S_ISUID | stat.S_ISGID)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]  # nothing written beside the target


def test_read_file_does_not_follow_a_planted_link(box):
    """Attack: the agent replaces a file the host reads with a link to a secret elsewhere."""
    box.exec("echo secret > /root/secret && ln -sf /root/secret /logs/verifier/reward.txt")
    with pytest.raises(FileNotFoundError, match="not a regular file"):
        box.read_file("/logs/verifier/reward.txt")


def test_no_network_fork_bomb_and_memory_limits(box, docker_client):  # noqa: F811
    ifaces = box.exec("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").stdout.split()
    assert ifaces == ["lo"]
    box.exec("for i in $(seq 400); do sleep 30 & done 2>/dev/null; exit 0", timeout_sec=20)
    running = len(docker_client.api.top(f"evokit-{box.id}")["Processes"])
    assert 100 < running <= 128  # the fork bomb stopped at pids_limit
    box.kill_commands()
    assert box.exec("echo alive").stdout == "alive\n"
    host = docker_client.api.inspect_container(f"evokit-{box.id}")["HostConfig"]
    assert host["Memory"] == 256 << 20 and host["MemorySwap"] == 256 << 20 and host["PidsLimit"] == 128
    assert host["Init"] is False and "no-new-privileges" in host["SecurityOpt"]  # pid 1 is the anchor


def test_a_public_local_sandbox_leaves_the_containers_root_mounted(box, docker_client, base_image):  # noqa: F811
    """Regression: slirp4netns's sandbox (a public local sandbox) once unmounted Docker's overlays."""
    from evokit.sandbox import Sandbox

    merged = docker_client.api.inspect_container(f"evokit-{box.id}")["GraphDriver"]["Data"]["MergedDir"]
    with Sandbox(base_image, network=True) as local:
        assert local.exec("true").ok
    assert f" {merged} " in Path("/proc/self/mountinfo").read_text()
    assert box.exec(["cat", "/etc/hostname"], user="root").stdout == "sandbox\n"


def test_exec_after_stop_raises_and_stop_is_idempotent(image, docker_client):  # noqa: F811
    sb = DockerSandbox(image, docker_client=docker_client).start()
    sb.stop()
    sb.stop()
    assert containers_of(docker_client, sb.id) == []
    with pytest.raises(SandboxError, match="not running"):
        sb.exec("true")


def test_evokit_verify_with_the_docker_backend_scores_oracle_1_and_null_0(docker_client, tmp_path):  # noqa: F811
    """``EVOKIT_SANDBOX=docker evokit verify`` on an example task: oracle 1, null 0, verdict PASS."""
    env = {**os.environ, "EVOKIT_SANDBOX": "docker", "HARBOR_TELEMETRY": "0"}
    res = subprocess.run([sys.executable, "-m", "evokit.cli", "verify", str(EXAMPLE), "--json"],
                         capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    verdict = json.loads(res.stdout.strip().splitlines()[-1]) if res.stdout.strip() else {}
    assert verdict.get("rewards") == {"oracle": [{"reward": 1.0}] * 2, "null": [{"reward": 0.0}]}, (
        res.stdout[-3000:] + res.stderr[-3000:])
    assert res.returncode == 0 and verdict["passed"], verdict


# ---------------------------------------------------------------- the borrowed-process class
@pytest.mark.parametrize("user", ["root", "agent"])
def test_pid1_is_the_anchor_and_no_agent_can_take_it_over(box, user):
    """Pid 1 of the container is evokit's anchor (bind-mounted read-only, non-dumpable): the
    injector is refused through ptrace and through ``/proc/1/mem``, ``kill -9 1`` does nothing,
    and ``kill_commands`` finds it unchanged. The control: the injector takes over a ``sleep`` of
    the agent's own, which ``kill_commands`` then ends."""
    from inject_support import place_injector

    assert box.private_verifier
    inj = place_injector(box)
    daemon = "while :; do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done"
    res = box.exec(f"{inj} ptrace 1 '{daemon}'; {inj} mem 1 '{daemon}'; kill -9 1; sleep 0.3; cat /proc/1/comm",
                   user=user)
    assert res.stdout.splitlines() == ["refused: ptrace attach: Operation not permitted",
                                       "refused: open /proc/PID/mem for writing: Permission denied",
                                       "evokit-init"], res
    control = box.exec(f"sleep 1000 >/dev/null 2>&1 & p=$!; sleep 0.2; {inj} ptrace $p 'echo taken > /tmp/m-{user}; "
                       f"exec sleep 999'; sleep 0.5; cat /tmp/m-{user}", user=user, timeout_sec=10)
    assert control.stdout == "injected\ntaken\n", control
    assert box.kill_commands() >= 1
    assert "sleep 999" not in box.exec("cat /proc/[0-9]*/cmdline | tr '\\0' ' '").stdout


class Script:
    """A scripted agent: runs fixed shell commands as the task's agent user (or the given one)."""

    name = "attack"

    def __init__(self, *commands: str, user: str | None = None):
        self.commands, self.user = commands, user

    def run_episode(self, episode) -> None:
        for command in self.commands:
            episode.run(command, user=self.user, timeout_sec=60)


KILL_ALL = "kill -9 -1; sleep 1"  # every process the agent may signal (pid 1 ignores it, if it is the anchor)


@pytest.fixture
def on_docker(monkeypatch, docker_client):  # noqa: F811
    """Trials and rollouts on the Docker backend (``EVOKIT_SANDBOX=docker``)."""
    monkeypatch.setenv("EVOKIT_SANDBOX", "docker")


@pytest.mark.parametrize("anchored", [True, False])
def test_killing_pid1_is_reward_zero_never_a_crash_or_a_mask(on_docker, monkeypatch, anchored):
    """The agent kills every process it can, pid 1 included. With the anchor, pid 1 survives and the
    work (none) scores 0. Without it (the fallback where the anchor cannot be used, taken here for
    real by withholding the anchor's binary) ``docker-init`` and its ``sleep`` die, the container
    stops, and the daemon answers 409 to what follows: a :class:`SandboxError`, so every rollout
    of ``rollout_groups`` (separate and shared verifier) and the TRL reward path score 0, not
    masked, and nothing raises."""
    from concurrent.futures import ThreadPoolExecutor

    from harbor.models.task.task import Task

    from evokit.rollout import rollout_groups
    from evokit.trl_trainer.config import LLMTrainConfig
    from evokit.trl_trainer.env import RunContext, SandboxToolEnv

    if not anchored:
        monkeypatch.setattr(DockerSandbox, "_anchor_path", lambda self: None)
    for mode in ("separate", "shared"):
        groups = rollout_groups(Script(KILL_ALL), [Task(EXAMPLE)], group_size=2, in_flight=2, mode=mode)
        for r in groups[0]:
            assert (r.reward, r.masked) == (0.0, False), r
            if not anchored:
                assert "not running" in r.error or "gone" in r.error, r.error
    with ThreadPoolExecutor(2) as pool:
        env = SandboxToolEnv(RunContext(LLMTrainConfig(), pool))
        env.reset(task_key=["ledger"], task_dir=str(EXAMPLE))
        env._exec(KILL_ALL)
        rewards, err = env._finish(run_tests=True)
    assert rewards == {"reward": 0.0}, (rewards, err)  # scored (None would be a masked rollout)
    assert anchored or "gone" in err or "not running" in err, err


def test_a_dead_container_is_a_sandbox_error(image, docker_client, monkeypatch):  # noqa: F811
    """In the fallback, the agent's ``kill -9 -1`` stops the container; ``kill_commands`` then says
    so as a SandboxError (the daemon's 409 is never what reaches the caller)."""
    monkeypatch.setattr(DockerSandbox, "_anchor_path", lambda self: None)
    sb = DockerSandbox(image, docker_client=docker_client).start()
    try:
        assert not sb.private_verifier
        sb.exec(KILL_ALL)
        with pytest.raises(SandboxError, match="not running"):
            sb.kill_commands()
        with pytest.raises(SandboxError):
            sb.exec("true")
    finally:
        sb.stop()


# ---------------------------------------------------------------- the shared verifier, private
SERVICE = ("nohup perl -MIO::Socket::INET -e '$s=IO::Socket::INET->new(LocalAddr=>\"127.0.0.1:7171\",Listen=>5,"
           "ReuseAddr=>1) or die; while($c=$s->accept){print $c \"42\\n\"; close $c}' >/dev/null 2>&1 &\n"
           "for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/7171) 2>/dev/null && break; sleep 0.05; done")
SERVICE_TEST = """#!/bin/bash
if exec 3<>/dev/tcp/127.0.0.1/7171 && [ "$(head -1 <&3)" = 42 ]; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
"""


def service_task(root: Path) -> Path:
    from evokit.tasks import default_task_config, write_task

    cfg = default_task_config()
    return write_task(root, instruction="Serve the number 42 on 127.0.0.1:7171 in /app's sandbox.",
                      dockerfile="FROM debian:bookworm-slim\nWORKDIR /app\n", tests={"test.sh": SERVICE_TEST},
                      solution={"solve.sh": "#!/bin/bash\n" + SERVICE + "\n"}, config=cfg)


def test_shared_verifier_keeps_the_solutions_service_up(on_docker, tmp_path):
    """On Docker as on the local sandbox: in the shared mode a service the oracle started is up
    while the tests run (oracle 1, null 0)."""
    from harbor.models.task.task import Task

    from evokit.sandbox.task_env import image_for_task
    from evokit.verify import run_trial

    task = Task(service_task(tmp_path / "service"))
    image = image_for_task(task)
    oracle = run_trial(task, image, kind="oracle", mode="shared")
    assert (oracle.rewards, oracle.error) == ({"reward": 1.0}, None)
    assert run_trial(task, image, kind="null", mode="shared").rewards == {"reward": 0.0}


@pytest.mark.parametrize("user", [None, "nobody"])
def test_shared_verifier_daemon_reaches_neither_the_reward_nor_the_tests(on_docker, tmp_path, user):
    """A weak-looking task (its tests fail the absent work) and an agent daemon that, all through the
    shared verifier, writes reward 1, copies ``/tests`` and looks for the tests' processes to ptrace
    them (``inject_support.DAEMON_SOLVE``): it stays alive beside the tests, takes over its own
    decoy, finds none of the tests' processes, and the reward is 0."""
    from harbor.models.task.task import Task
    from inject_support import check_daemon_run, daemon_task

    from evokit.sandbox.task_env import image_for_task
    from evokit.verify import run_trial

    task = Task(daemon_task(tmp_path / "daemon", user=user))
    run = run_trial(task, image_for_task(task), kind="oracle", mode="shared", log_dir=tmp_path / "logs")
    check_daemon_run(run, tmp_path / "logs")
