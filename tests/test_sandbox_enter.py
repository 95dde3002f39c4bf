"""Tests for evokit.sandbox.enter: the compiled helper every ``Sandbox.exec`` goes through.

Each test runs real commands in a started sandbox (``running`` checks that nothing is left
behind) and reads what the kernel says about the command (``/proc/self/status``), not what the
helper's source intends.
"""

import os
import threading
import time
from pathlib import Path

import pytest
from sandbox_support import running

from evokit.sandbox import enter
from evokit.sandbox.bwrap import DOCKER_DEFAULT_CAPS

DOCKER_MASK = f"{enter.cap_mask(DOCKER_DEFAULT_CAPS):016x}"


def status(sandbox, **kw) -> dict[str, str]:
    res = sandbox.exec("cat /proc/self/status", **kw)
    assert res.ok, res.stderr
    return dict(line.split(":\t", 1) for line in res.stdout.splitlines() if ":\t" in line)


def test_command_runs_confined_as_root_and_as_a_user(base_image):
    """Docker's default capabilities in every set (bounding too), no_new_privs, the keyring filter;
    a non-root user keeps no capability."""
    with running(base_image) as s:
        st = status(s)
        assert {k: st[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")} == dict.fromkeys(
            ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"), DOCKER_MASK)
        assert st["NoNewPrivs"].strip() == "1" and st["Seccomp"].strip() == "2"
        user = status(s, user="agent")
        assert user["CapEff"].strip() == user["CapPrm"].strip() == user["CapAmb"].strip() == "0" * 16
        assert user["NoNewPrivs"].strip() == "1" and user["Seccomp"].strip() == "2"


def test_command_is_inside_every_namespace_and_the_cgroup_of_the_sandbox(base_image):
    """Same mount, net, uts, ipc and pid namespaces as the sandbox's pid 1; counted in its cgroup.
    (Pid 1, the anchor, is not dumpable, so its namespace links are read from the host.)"""
    with running(base_image) as s:
        res = s.exec("for n in mnt net uts ipc pid; do readlink /proc/self/ns/$n; done; echo $$")
        lines = res.stdout.split()
        names, pid = lines[:-1], int(lines[-1])
        assert names == [os.readlink(f"/proc/{s.pid1}/ns/{n}") for n in ("mnt", "net", "uts", "ipc", "pid")], names
        assert pid < 100  # a pid of the sandbox's namespace, not the host's
        s.exec("sleep 30 &")
        assert any(Path(f"/proc/{p}/cmdline").read_bytes().startswith(b"sleep\x0030") for p in s.cgroup.pids()
                   if Path(f"/proc/{p}").exists())


def test_mounts_are_the_sandbox_s_own_between_execs(base_image):
    """docker exec semantics: /dev/shm is one tmpfs for every command (before the helper each exec had its own)."""
    with running(base_image) as s:
        assert s.exec("echo shared > /dev/shm/x").ok
        assert s.exec("cat /dev/shm/x").stdout == "shared\n"


def test_no_fd_of_evokit_reaches_the_command(base_image):
    """The pidfd, the root fd and the filter pipe are closed on exec: only stdin, stdout, stderr are open."""
    with running(base_image) as s:
        res = s.exec(["ls", "/proc/self/fd"])
        assert sorted(int(x) for x in res.stdout.split()) == [0, 1, 2, 3]  # 3: ls's own directory fd


def test_helper_runs_with_an_empty_environment_on_the_host(base_image):
    """The command's environment travels as arguments: the host-side helper process has none, so a
    task's LD_PRELOAD or PATH cannot act outside the sandbox; the command still gets it."""
    with running(base_image) as s:
        found: list[bytes] = []

        def watch():
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not found:
                for p in Path("/proc").iterdir():
                    try:
                        if p.name.isdigit() and (p / "cmdline").read_bytes().split(b"\0")[0].endswith(
                                enter.helper().name.encode()) and os.getsid(int(p.name)) != os.getsid(0):
                            found.append((p / "environ").read_bytes())
                            return
                    except (OSError, ProcessLookupError):
                        pass

        t = threading.Thread(target=watch)
        t.start()
        res = s.exec("sleep 1; echo $LD_PRELOAD", env={"LD_PRELOAD": "/nonexistent/evil.so", "SECRET": "x"})
        t.join()
        assert res.stdout == "/nonexistent/evil.so\n"
        assert found == [b""]


@pytest.mark.parametrize("kw, code, words", [
    ({"command": ["no-such-command"]}, 127, "no-such-command"),
    ({"command": ["true"], "cwd": "/no/such/dir"}, 125, "/no/such/dir"),
])
def test_failures_of_the_helper_name_the_problem(base_image, kw, code, words):
    with running(base_image) as s:
        res = s.exec(**kw)
        assert res.return_code == code and words in res.stderr, res.stderr


def test_helper_is_private_and_static(base_image):
    """Root runs it, so only root may write it (0700 under the 0700 cache); linked statically where
    the host has libc.a, so no dynamic loader runs on the host side."""
    path = enter.helper()
    assert path.stat().st_mode & 0o777 == 0o700 and path.parent.stat().st_mode & 0o077 == 0
    if Path("/usr/lib/x86_64-linux-gnu/libc.a").exists():
        assert "PT_INTERP" not in elf_segments(path)


def elf_segments(path: Path) -> set[str]:
    """The program-header types of a 64-bit little-endian ELF file (PT_INTERP: it needs ld.so)."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2
    phoff = int.from_bytes(data[32:40], "little")
    phentsize, phnum = int.from_bytes(data[54:56], "little"), int.from_bytes(data[56:58], "little")
    names = {1: "PT_LOAD", 2: "PT_DYNAMIC", 3: "PT_INTERP"}
    return {names.get(int.from_bytes(data[phoff + i * phentsize:][:4], "little"), "other") for i in range(phnum)}


def test_argv_refuses_environment_names_that_would_split():
    with pytest.raises(ValueError, match="environment names"):
        enter.argv(pidfd=0, rootfd=0, seccomp_fd=0, cwd="/", caps=(), cgroup_procs=(), env={"A=B": "c"},
                   command=["true"])
    with pytest.raises(ValueError, match="unknown capability"):
        enter.cap_mask(["CAP_NOPE"])


def test_an_agent_planted_cwd_link_resolves_inside_the_sandbox(base_image):
    """Attack: the agent (root) points the next command's working directory at ``/../../..`` and
    at /proc/1/root of the host side; the helper chroots before it changes directory, so both
    resolve inside the sandbox (the host's /run/evokit, where sandboxes keep state, stays unseen)."""
    from evokit.sandbox.runtime import RUN_DIR

    assert Path(RUN_DIR).is_dir()
    with running(base_image) as s:
        assert s.exec("rm -rf /app && ln -s /../../../.. /app && ln -s /proc/1/root/../.. /tmp/up").ok
        for cwd in (None, "/tmp/up"):
            res = s.exec(f"pwd -P; test -e {RUN_DIR} && echo HOST-VISIBLE; ls /", cwd=cwd)
            assert res.ok and res.stdout.splitlines()[0] == "/" and "HOST-VISIBLE" not in res.stdout, res.stdout


def test_concurrent_builds_keep_the_first_binary(tmp_path, monkeypatch):
    """Builders racing on a fresh cache (two test workers, two harnesses) all end with the inode
    that stays: a sandbox compares its pid 1 with the binary it exec'd, so a later builder must
    not swap the file under an earlier one's running anchor."""
    monkeypatch.setenv("EVOKIT_CACHE", str(tmp_path / "cache"))
    start = threading.Barrier(4)
    seen: list[int] = []

    def build():
        start.wait()
        path = enter._build(enter.ANCHOR_SOURCE, "evokit-anchor", (enter.ANCHOR_FLAGS,), "the anchor")
        seen.append(path.stat().st_ino)  # what this builder's sandbox would exec and compare with

    threads = [threading.Thread(target=build) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    [final] = list((tmp_path / "cache" / "bin").glob("evokit-anchor-*"))
    assert seen == [final.stat().st_ino] * 4
