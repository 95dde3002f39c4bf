"""Leftovers: failed starts undo themselves, and state of a SIGKILLed harness is cleaned later.

The "harness" in the SIGKILL tests is a real child Python process that starts a real sandbox
(with slirp4netns and a daemon of its own) and is then killed with SIGKILL; the test process
plays "the next run". Other engineers' harnesses share /run/evokit on this machine and clean
free leases there too, so these harnesses use a run dir of the test's own (``EVOKIT_RUN_DIR``),
and every check looks only at the ids this test created.
"""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from sandbox_support import leftovers, ticks_since_boot, trace
from typer.testing import CliRunner

from evokit.sandbox import Sandbox, SandboxError, runtime, stale
from evokit.sandbox.cgroup import Cgroup, parent_dirs
from evokit.tasks.limits import Limits

HARNESS = r"""
import json, sys
from pathlib import Path
from evokit.sandbox import Image, Sandbox
spec = json.loads(sys.argv[1])
image = Image(spec["key"], Path(spec["root"]), tuple(spec["lowerdirs"]))
s = Sandbox(image, network=True).start()
assert s.exec("setsid sleep 7777 > /dev/null 2>&1 &").ok
print(json.dumps({"id": s.id, "state_dir": str(s.state_dir), "cgroups": [str(d) for d in s.cgroup.dirs],
                  "pid_ns": __import__("os").readlink(s._ns["pid"]), "mnt_ns": __import__("os").readlink(s._ns["mnt"]),
                  "slirp": s._outbound.pid}), flush=True)
for line in sys.stdin:  # "exec" runs a command; EOF stops the sandbox and exits
    print(json.dumps(s.exec(line.strip()).stdout), flush=True)
s.stop()
"""


def start_harness(image, run_dir: Path) -> tuple[subprocess.Popen, dict]:
    spec = json.dumps({"key": image.key, "root": str(image.root), "lowerdirs": list(image.lowerdirs)})
    env = {**os.environ, "HARBOR_TELEMETRY": "0", "PYTHONPATH": str(Path(__file__).parents[1]),
           "EVOKIT_RUN_DIR": str(run_dir)}
    proc = subprocess.Popen([sys.executable, "-c", HARNESS, spec], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
    info = json.loads(proc.stdout.readline())
    return proc, info


def host_state(info: dict, ended_at: int) -> list[str]:
    """What of the child's sandbox is still on the host (processes, mounts, dirs, cgroups, lease).

    ``ended_at`` (:func:`ticks_since_boot` just before the harness was killed or told to stop):
    namespace inodes are recycled, so only processes older than that count as its own.
    """
    from sandbox_support import Trace

    t = Trace(info["id"], info["state_dir"], info["pid_ns"], info["mnt_ns"], tuple(info["cgroups"]))
    found = leftovers(t, ended_at)
    if (Path(info["state_dir"]).parent / f"{info['id']}.lock").exists():
        found.append("lease")
    if Path(f"/proc/{info['slirp']}").exists() and "slirp4netns" in Path(f"/proc/{info['slirp']}/cmdline").read_text():
        found.append("slirp4netns")
    return found


def test_sigkilled_harness_leaves_state_that_the_next_run_lists_and_cleans(base_image, tmp_path, monkeypatch):
    """After SIGKILL of the harness its lease is free: `evokit sandbox list` shows it stale and
    `evokit sandbox clean` removes state dir, cgroups and lease; no process of it survives."""
    from evokit.cli import app

    run_dir = tmp_path / "run"
    monkeypatch.setattr(stale, "RUN_DIR", run_dir)  # what the CLI reads
    proc, info = start_harness(base_image, run_dir)
    killed_at = ticks_since_boot()
    proc.kill()
    proc.wait()
    entry = next(e for e in stale.scan() if e.id == info["id"])
    assert entry.status == "stale" and entry.pid == proc.pid
    assert host_state(info, killed_at), "a SIGKILLed harness should leave something for this test to clean"
    runner = CliRunner()
    listed = runner.invoke(app, ["sandbox", "list"], terminal_width=300)
    assert listed.exit_code == 0 and info["id"] in listed.output and "stale" in listed.output, listed.output
    cleaned = runner.invoke(app, ["sandbox", "clean"], terminal_width=300)
    flat = cleaned.output.replace("\n", "")  # rich wraps long paths
    assert cleaned.exit_code == 0 and f"removed state dir {info['state_dir']}" in flat.replace("dir  ", "dir "), flat
    deadline = time.monotonic() + 10
    while (left := host_state(info, killed_at)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == []
    assert info["id"] not in [e.id for e in stale.scan()]
    ps = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout.splitlines()
    assert "sleep 7777" not in ps


def test_clean_never_touches_a_live_harness_sandbox(base_image, tmp_path):
    """clean() run while another harness's sandbox is up leaves it running and usable."""
    run_dir = tmp_path / "run"
    proc, info = start_harness(base_image, run_dir)
    try:
        removed = stale.clean(run_dir)
        assert not [r for r in removed if info["id"] in r], removed
        assert next(e for e in stale.scan(run_dir) if e.id == info["id"]).status == "live"
        proc.stdin.write("echo still-up\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline()) == "still-up\n"
    finally:
        stopped_at = ticks_since_boot()
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    assert host_state(info, stopped_at) == []


def test_a_cgroup_that_fails_to_apply_limits_removes_its_dirs(monkeypatch):
    """Cgroup() raising after it made its directories (here: a limit write fails) leaves none."""
    name = f"evokit-{uuid.uuid4().hex[:12]}"

    def fail(self, limits):
        raise OSError("simulated: the kernel refused a limit")

    monkeypatch.setattr(Cgroup, "_apply", fail)
    with pytest.raises(OSError, match="simulated"):
        Cgroup(name, Limits())
    assert [p / name for p in parent_dirs() if (p / name).exists()] == []


def _nothing_left(s: Sandbox) -> list[str]:
    found = [str(p) for p in (s.state_dir, s.state_dir.parent / f"{s.id}.lock") if os.path.lexists(p)]
    found += [str(p / f"evokit-{s.id}") for p in parent_dirs() if (p / f"evokit-{s.id}").exists()]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if f"evokit-{s.id}" in Path(f"/proc/{pid}/cgroup").read_text():
                found.append(f"process {pid}")
        except OSError:
            pass
    return found


def test_failed_start_cleans_up_when_the_cgroup_fails(base_image, monkeypatch):
    def fail(self, limits):
        raise OSError("simulated: cgroup limit")

    monkeypatch.setattr(Cgroup, "_apply", fail)
    s = Sandbox(base_image)
    with pytest.raises(OSError, match="simulated"):
        s.start()
    assert _nothing_left(s) == [] and not s.running


def test_failed_start_cleans_up_when_the_init_fails(base_image):
    """An image whose layer is missing: the overlay mount fails inside the init."""
    broken = type(base_image)(base_image.key, base_image.root, ("layers/does-not-exist", *base_image.lowerdirs))
    s = Sandbox(broken)
    with pytest.raises(SandboxError, match="failed to start"):
        s.start()
    assert _nothing_left(s) == [] and not s.running


def test_failed_start_cleans_up_when_the_network_fails(base_image, monkeypatch):
    """slirp4netns failing after the init is up (simulated by a stand-in that raises, since the
    test is about start()'s cleanup): the running init, its cgroup and state dir all go."""
    from evokit.sandbox import netns

    class Broken:
        def __init__(self, pid, wrap):
            assert Path(f"/proc/{pid}").exists()  # the init really is up at this point
            raise netns.NetworkSetupError("simulated: slirp4netns failed")

    monkeypatch.setattr(runtime.netns, "Outbound", Broken)
    s = Sandbox(base_image, network=True)
    with pytest.raises(netns.NetworkSetupError):
        s.start()
    assert _nothing_left(s) == [] and not s.running


def test_state_from_before_leases_is_removed_only_when_unused_and_old(tmp_path):
    """A lease-less state dir (an older evokit, killed) older than the grace period goes; a
    young one (maybe being created right now) stays."""
    old, young = tmp_path / uuid.uuid4().hex[:12], tmp_path / uuid.uuid4().hex[:12]
    (old / "merged").mkdir(parents=True)
    young.mkdir()
    past = time.time() - 2 * stale.GRACE_SEC
    os.utime(old, (past, past))
    by_id = {e.id: e for e in stale.scan(tmp_path)}
    assert by_id[old.name].status == "orphan" and by_id[young.name].status == "live"
    removed = stale.clean(tmp_path)
    assert f"state dir {old}" in removed
    assert not old.exists() and young.exists()


def test_a_lease_being_written_is_not_judged_stale(tmp_path):
    """A lease file created but not yet locked and written (its owner is between open and
    flock) must read as live, or a cleaner would remove state that is about to exist."""
    (tmp_path / "0123456789ab.lock").write_text("")
    assert {e.id: e.status for e in stale.scan(tmp_path)}["0123456789ab"] == "live"
    lease = stale.Lease(tmp_path, "ba9876543210")
    try:
        assert {e.id: e.status for e in stale.scan(tmp_path)}["ba9876543210"] == "live"
        assert [e.id for e in stale.leases_of(os.getpid(), tmp_path)] == ["ba9876543210"]
    finally:
        lease.release()
    assert not (tmp_path / "ba9876543210.lock").exists()


def test_sandbox_of_this_process_holds_a_lease_until_stopped(base_image):
    with Sandbox(base_image) as s:
        assert [e.id for e in stale.leases_of(os.getpid())].count(s.id) == 1
        t = trace(s)
        assert t.state_dir in next(e.state_dir for e in stale.scan() if e.id == s.id)
    assert s.id not in [e.id for e in stale.leases_of(os.getpid())]


def test_sigkill_of_the_init_process_group_is_not_needed_for_stop(base_image):
    """stop() after the sandbox's pid 1 was killed from outside still releases everything."""
    s = Sandbox(base_image).start()
    os.kill(s._init.pid, signal.SIGKILL)
    s.stop()
    assert _nothing_left(s) == []


def test_the_next_harness_cleans_up_after_a_sigkilled_one_by_itself(base_image, tmp_path):
    """No command needed: the first sandbox the next harness process starts removes the state
    the SIGKILLed one left (its lease is free)."""
    run_dir = tmp_path / "run"
    proc, info = start_harness(base_image, run_dir)
    killed_at = ticks_since_boot()
    proc.kill()
    proc.wait()
    assert host_state(info, killed_at)
    nxt, nxt_info = start_harness(base_image, run_dir)  # its start() runs the cleanup once
    try:
        deadline = time.monotonic() + 10
        while (left := host_state(info, killed_at)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert left == []
    finally:
        stopped_at = ticks_since_boot()
        nxt.stdin.close()
        assert nxt.wait(timeout=30) == 0
    assert host_state(nxt_info, stopped_at) == []
