"""The contract every sandbox backend keeps (evokit.sandbox.backend), run on every registered one.

The parameters are :func:`evokit.sandbox.backend.backend_names` at collection: the built-ins and
every backend an installed distribution registers in the ``evokit.sandboxes`` entry-point group,
so a new backend is covered by installing its module, with no edit here. The same battery on each:
``exec`` (exit status, stdout/stderr, the task's and the call's env, the workdir, another cwd,
stdin), upload and download of a file and a directory, a ``no-network`` task with only its
loopback, ``kill_commands``, ``stop`` ending every process, the separate verifier's copy, and a
small Harbor task verified on it (oracle 1, null 0, in both verifier modes). The Docker runs share
the ``docker`` xdist group and the daemon of ``docker_support``. The last tests show a third-party
backend found by name through its entry point, and the registry's errors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from docker_support import docker_client, docker_daemon  # noqa: F401
from sandbox_support import write_harbor_task

from evokit.sandbox.backend import (
    SandboxAPI,
    SandboxBackendError,
    backend_names,
    configured_backend,
    get_backend,
)
from evokit.sandbox.runtime import SandboxError
from evokit.sandbox.task_env import image_for_task, sandbox_for_task
from evokit.tasks import load_task
from evokit.verify import run_trial

ROOT = Path(__file__).resolve().parents[1]


def _param(name: str):
    """One backend; Docker's share the xdist group of every test on the one ``dockerd``."""
    return pytest.param(name, id=name, marks=[pytest.mark.xdist_group("docker")] if name == "docker" else [])


@pytest.fixture(scope="module", params=[_param(n) for n in backend_names()])
def on(request, tmp_path_factory):
    """``(backend name, task, image)``: a small Harbor task (reward 1 iff /app/out.txt is "hi") with a
    task variable, and its image built by the backend."""
    if request.param == "docker":
        request.getfixturevalue("docker_client")  # the daemon, started for the session if none runs
    root = write_harbor_task(tmp_path_factory.mktemp(f"task-{request.param}") / "hi")
    with open(root / "task.toml", "a") as f:
        f.write('[environment.env]\nTASK_VAR = "from-task"\n')
    task = load_task(root)
    return request.param, task, image_for_task(task, backend=request.param)


@pytest.fixture
def box(on):
    name, task, image = on
    sandbox = sandbox_for_task(task, image=image, backend=name)
    with sandbox:
        yield sandbox


def host_processes(marker: str) -> list[int]:
    """Host pids whose command line holds ``marker`` (the sandboxes of both built-ins run on this host)."""
    found = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and marker.encode() in (p / "cmdline").read_bytes():
                found.append(int(p.name))
        except OSError:
            continue
    return found


def test_the_sandbox_implements_the_protocol(box):
    assert isinstance(box, SandboxAPI)
    assert box.running and box.workdir == "/app" and box.env["TASK_VAR"] == "from-task"


def test_exec_status_streams_env_workdir_and_stdin(box):
    r = box.exec("echo out; echo err >&2; echo $TASK_VAR $EXTRA; pwd; exit 3", env={"EXTRA": "x"})
    assert (r.stdout, r.stderr, r.return_code, r.timed_out) == ("out\nfrom-task x\n/app\n", "err\n", 3, False)
    assert box.exec(["sh", "-c", "pwd"], cwd="/tmp").stdout == "/tmp\n"
    assert box.exec(["echo", "$HOME; not a shell"]).stdout == "$HOME; not a shell\n"
    assert box.exec(["sh", "-c", "wc -c"], stdin=b"x" * 100_000).stdout.strip() == "100000"
    assert box.exec(["id", "-u"], user="nobody").stdout.strip() == "65534"
    slow = box.exec("sleep 30", timeout_sec=1)
    assert slow.timed_out and slow.return_code == 124


def test_upload_and_download_a_file_and_a_directory(box, tmp_path):
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "top.txt").write_text("top\n")
    (tree / "sub" / "leaf.bin").write_bytes(bytes(range(256)))
    blob = tmp_path / "blob.bin"
    blob.write_bytes(os.urandom(200_000))
    box.upload_dir(tree, "/data/tree")
    box.upload_file(blob, "/data/new/blob.bin")
    box.write_file("/data/w.txt", "written", mode=0o600)
    assert box.exec("cat /data/tree/top.txt; stat -c %a /data/w.txt").stdout == "top\n600\n"
    assert box.read_file("/data/new/blob.bin") == blob.read_bytes()
    box.download_dir("/data/tree", tmp_path / "back")
    assert (tmp_path / "back" / "top.txt").read_text() == "top\n"
    assert (tmp_path / "back" / "sub" / "leaf.bin").read_bytes() == bytes(range(256))
    box.download_file("/data/w.txt", tmp_path / "out" / "w.txt")
    assert (tmp_path / "out" / "w.txt").read_text() == "written"
    with pytest.raises(FileNotFoundError):
        box.read_file("/data/missing")


def test_a_no_network_task_has_only_its_loopback(box):
    assert box.network is False
    assert box.exec("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").stdout.split() == ["lo"]


def test_kill_commands_ends_background_processes_and_keeps_files(box):
    box.write_file("/app/work.txt", "kept")
    box.exec("nohup sh -c 'while :; do echo 1 > /app/late.txt; sleep 0.05; done' >/dev/null 2>&1 &")
    time.sleep(0.3)
    assert box.kill_commands() >= 1
    box.exec("rm -f /app/late.txt")
    time.sleep(0.3)
    assert box.exec("test -e /app/late.txt").return_code == 1
    assert box.read_file("/app/work.txt") == b"kept"


def test_stop_ends_every_process_and_refuses_further_use(on):
    name, task, image = on
    sandbox = sandbox_for_task(task, image=image, backend=name).start()
    marker = f"{os.getpid()}{time.monotonic_ns() % 10**6}.5"
    sandbox.exec(f"nohup sleep {marker} >/dev/null 2>&1 &")
    time.sleep(0.2)
    assert host_processes(f"sleep\0{marker}"), "the marker process should run on this host before stop"
    sandbox.stop()
    sandbox.stop()  # idempotent
    deadline = time.monotonic() + 5  # the daemon reaps a removed container's processes on its own time
    while host_processes(f"sleep\0{marker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not sandbox.running and host_processes(f"sleep\0{marker}") == []
    with pytest.raises(SandboxError, match="not running"):
        sandbox.exec("true")


def test_the_separate_verifiers_copy_carries_the_work_only(on):
    name, task, image = on
    with sandbox_for_task(task, image=image, backend=name) as agent, \
            sandbox_for_task(task, image=image, backend=name) as verifier:
        agent.exec("mkdir -p /app/d && echo w > /app/d/f && echo hi > /app/out.txt && echo x > /etc/agent-only")
        verifier.exec("mkdir -p /app && echo stale > /app/stale.txt")
        agent.kill_commands()
        agent.copy_work_to(verifier, ["/app", "/logs/artifacts"], max_bytes=1 << 20)
        assert verifier.exec("cat /app/out.txt /app/d/f").stdout == "hi\nw\n"
        assert verifier.exec("test -e /app/stale.txt || test -e /etc/agent-only").return_code == 1


@pytest.mark.parametrize("mode", ["separate", "shared"])
def test_a_task_verifies_oracle_1_and_null_0(on, mode):
    name, task, image = on
    oracle = run_trial(task, image, kind="oracle", mode=mode, backend=name)
    null = run_trial(task, image, kind="null", mode=mode, backend=name)
    assert (oracle.rewards, oracle.error) == ({"reward": 1.0}, None)
    assert (null.rewards, null.error) == ({"reward": 0.0}, None)


# ---------------------------------------------------------------- the registry
PLUGIN = '''
"""A third-party backend: the local sandbox, with the separate verifier's copy through the
protocol's own download and upload, as a backend without host fds of its roots would do it."""
from evokit.sandbox.backend import LocalBackend, copy_through_host
from evokit.sandbox.runtime import Sandbox


class ViaHostSandbox(Sandbox):
    copies = 0

    def copy_work_to(self, dst, paths, *, max_bytes):
        ViaHostSandbox.copies += 1
        copy_through_host(self, dst, paths, max_bytes=max_bytes)


class ViaHostBackend(LocalBackend):
    name = "via-host"

    def sandbox(self, image, **settings):
        return ViaHostSandbox(image, **settings)
'''


@pytest.fixture
def plugin_site(tmp_path, monkeypatch) -> Path:
    """An installed distribution (a dist-info with an ``evokit.sandboxes`` entry point, as pip writes
    it) on ``sys.path``, registering a backend evokit has never seen."""
    site = tmp_path / "site"
    info = site / "via_host_sandbox-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "via_host_sandbox.py").write_text(PLUGIN)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: via-host-sandbox\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[evokit.sandboxes]\nvia-host = via_host_sandbox:ViaHostBackend\n")
    monkeypatch.syspath_prepend(str(site))
    return site


def test_an_installed_backend_is_found_by_name_and_verifies_a_task(plugin_site, tmp_path):
    assert backend_names()[:2] == ["local", "docker"] and "via-host" in backend_names()
    backend = get_backend("via-host")
    assert type(backend).__name__ == "ViaHostBackend"
    task = load_task(write_harbor_task(tmp_path / "hi"))
    image = image_for_task(task, backend="via-host")
    sandbox = sandbox_for_task(task, image=image, backend="via-host")
    assert type(sandbox).__name__ == "ViaHostSandbox" and isinstance(sandbox, SandboxAPI)
    before = type(sandbox).copies
    assert run_trial(task, image, kind="oracle", backend="via-host").rewards == {"reward": 1.0}
    assert run_trial(task, image, kind="null", backend="via-host").rewards == {"reward": 0.0}
    assert type(sandbox).copies == before + 1  # the oracle's work went through the plug-in's own copy


def test_the_cli_picks_an_installed_backend_by_flag(plugin_site, tmp_path):
    task = write_harbor_task(tmp_path / "hi")
    env = {**os.environ, "PYTHONPATH": str(plugin_site), "HARBOR_TELEMETRY": "0"}
    r = subprocess.run([sys.executable, "-m", "evokit.cli", "run", str(task), "--sandbox", "via-host",
                        "--log-dir", str(tmp_path / "logs")], capture_output=True, text=True, env=env,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1])["rewards"] == {"reward": 1.0}
    r = subprocess.run([sys.executable, "-m", "evokit.cli", "run", str(task), "--sandbox", "nope"],
                       capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert r.returncode == 2 and "no sandbox backend is named 'nope'; use one of: local, docker, via-host" \
        in r.stderr, r.stderr[-2000:]


def test_an_unknown_backend_is_one_line_listing_the_registered_ones(monkeypatch):
    monkeypatch.delenv("EVOKIT_SANDBOX", raising=False)
    assert configured_backend() == "local"
    monkeypatch.setenv("EVOKIT_SANDBOX", "Docker")
    assert configured_backend() == "docker" and type(get_backend()).__name__ == "DockerBackend"
    assert type(get_backend("local")).__name__ == "LocalBackend"  # the argument wins over the variable
    monkeypatch.setenv("EVOKIT_SANDBOX", "dokcer")
    with pytest.raises(SandboxBackendError, match=r"^EVOKIT_SANDBOX='dokcer' is not a sandbox backend; use one of: "
                                                  r"local, docker \(unset means local\)$"):
        get_backend()
    with pytest.raises(SandboxBackendError, match=r"^no sandbox backend is named 'dokcer'; use one of: "
                                                  r"local, docker$"):
        get_backend("dokcer")


def test_a_broken_plugin_names_itself(tmp_path, monkeypatch):
    site = tmp_path / "site"
    info = site / "broken_sandbox-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "broken_sandbox.py").write_text("raise ImportError('missing dependency foo')\n")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-sandbox\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[evokit.sandboxes]\nbroken = broken_sandbox:Backend\n")
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(SandboxBackendError, match=r"plug-in 'broken' \(broken_sandbox:Backend\) failed to load: "
                                                  "ImportError: missing dependency foo"):
        get_backend("broken")
