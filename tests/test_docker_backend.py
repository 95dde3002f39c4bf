"""Tests for evokit.sandbox.docker_backend: evokit's sandbox API over a real Docker daemon.

Everything runs against the daemon of ``docker_support.docker_daemon`` (started here if none
runs; the tests fail, not skip, without one). The attacks are an agent that is root in its
container: a daemon that survives into the verifier phase, links and set-id files planted for
the host-side log download, a link in place of a file the host reads, a fork bomb, and the
network of a ``no-network`` task.
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

from evokit.sandbox.cgroup import Limits
from evokit.sandbox.docker_backend import DockerSandbox
from evokit.sandbox.docker_image import build_docker_image
from evokit.sandbox.image import ImageBuildError
from evokit.sandbox.runtime import SandboxError
from evokit.sandbox.task_env import sandbox_backend

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
    assert box.exec("ls /proc | grep -c '^[0-9]'").stdout.strip() in {"3", "4", "5"}  # init, sleep, this exec


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
    assert (agent / "w").read_text() == "w\n" and os.readlink(agent / "ok") == "w"
    for name in ("etc", "up", "d/pw"):
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
    assert host["Init"] is True and "no-new-privileges" in host["SecurityOpt"]


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


def test_backend_option_is_read_in_one_place_with_a_clear_error(monkeypatch):
    monkeypatch.setenv("EVOKIT_SANDBOX", "docker")
    assert sandbox_backend() == "docker"
    monkeypatch.setenv("EVOKIT_SANDBOX", "dokcer")
    with pytest.raises(SandboxError, match="EVOKIT_SANDBOX='dokcer' is not a sandbox backend; use one of: local, docker"):
        sandbox_backend()


def test_evokit_verify_with_the_docker_backend_scores_oracle_1_and_null_0(docker_client, tmp_path):  # noqa: F811
    """``EVOKIT_SANDBOX=docker evokit verify`` on an example task: oracle 1, null 0, verdict PASS."""
    env = {**os.environ, "EVOKIT_SANDBOX": "docker", "HARBOR_TELEMETRY": "0"}
    res = subprocess.run([sys.executable, "-m", "evokit.cli", "verify", str(EXAMPLE), "--json"],
                         capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    verdict = json.loads(res.stdout.strip().splitlines()[-1]) if res.stdout.strip() else {}
    assert verdict.get("rewards") == {"oracle": [{"reward": 1.0}] * 2, "null": [{"reward": 0.0}]}, (
        res.stdout[-3000:] + res.stderr[-3000:])
    assert res.returncode == 0 and verdict["passed"], verdict
