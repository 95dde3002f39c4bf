"""Helpers for the sandbox tests: build contexts, a private layer cache, and a leftovers checker.

:func:`running` starts a sandbox, records where it lives on the host (id, state dir, pid and
mount namespaces, cgroup dirs) and, after ``stop``, asserts that :func:`leftovers` finds none
of it: no process in its cgroup or namespaces, no mount of its state dir in any process's
mountinfo, no state dir, no lease, no ``evokit-<id>`` cgroup anywhere under /sys/fs/cgroup.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from evokit.sandbox import Sandbox, cache_root
from evokit.sandbox.image import ensure_base


def make_context(root: Path, dockerfile: str, files: dict[str, str | bytes] | None = None) -> Path:
    """Write ``root/Dockerfile`` and ``files`` (paths relative to ``root``); return ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "Dockerfile").write_text(dockerfile)
    for rel, data in (files or {}).items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            p.write_bytes(data)
        else:
            p.write_text(data)
    return root


def write_harbor_task(root: Path, *, marker: str = "m", network_mode: str = "no-network",
                      solve: str = "echo hi > /app/out.txt") -> Path:
    """A Harbor task folder: reward 1 iff /app/out.txt is "hi"; tests/ and solution/ carry ``marker``."""
    make_context(root / "environment", "FROM debian:bookworm-slim\nWORKDIR /app\n")
    (root / "instruction.md").write_text("Write hi to /app/out.txt\n")
    (root / "task.toml").write_text(
        'schema_version = "1.4"\n[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n'
        f'[environment]\nnetwork_mode = "{network_mode}"\nmemory_mb = 512\nstorage_mb = 256\n'
        'workdir = "/app"\n')
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text(
        f"#!/bin/bash\n# {marker}\nmkdir -p /logs/verifier\n"
        'if [ "$(cat /app/out.txt 2>/dev/null)" = hi ]; then echo 1 > /logs/verifier/reward.txt;'
        " else echo 0 > /logs/verifier/reward.txt; fi\n")
    (root / "solution").mkdir()
    (root / "solution" / "solve.sh").write_text(f"#!/bin/bash\n# {marker}\n{solve}\n")
    return root


def link_base(root: Path) -> Path:
    """Make ``root`` a cache whose ``base/`` is the shared minbase rootfs (built on first use)."""
    shared = cache_root()
    rel = ensure_base("bookworm", shared)
    (root / "base").mkdir(parents=True, exist_ok=True)
    link = root / rel
    if not os.path.lexists(link):
        link.symlink_to(shared / rel)
    return root


def layer_dirs(root: Path) -> set[str]:
    """Names of the published layers in cache ``root``."""
    d = root / "layers"
    return {p.name for p in d.iterdir() if not p.name.startswith(".")} if d.is_dir() else set()


def temp_dirs(root: Path) -> list[str]:
    """Build temp dirs (``.tmp-*``) left anywhere in cache ``root``."""
    return [str(p) for p in root.rglob(".tmp-*")] if root.is_dir() else []


@dataclass(frozen=True)
class Trace:
    """Where one running sandbox lives on the host, recorded while it runs."""

    id: str
    state_dir: str
    pid_ns: str  # e.g. "pid:[4026532183]"
    mnt_ns: str
    cgroup_dirs: tuple[str, ...]


def trace(sandbox: Sandbox) -> Trace:
    assert sandbox.running, "trace() needs a running sandbox"
    return Trace(
        id=sandbox.id,
        state_dir=str(sandbox.state_dir),
        pid_ns=os.readlink(sandbox._ns["pid"]),
        mnt_ns=os.readlink(sandbox._ns["mnt"]),
        cgroup_dirs=tuple(str(d) for d in sandbox.cgroup.dirs),
    )


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:  # the process exited meanwhile
        return ""


def ticks_since_boot() -> int:
    """Now, in the clock ticks of field 22 (start time) of ``/proc/<pid>/stat``."""
    with open("/proc/uptime") as f:
        return int(float(f.read().split()[0]) * os.sysconf("SC_CLK_TCK"))


def _start_ticks(pid: str) -> int:
    stat = _read(f"/proc/{pid}/stat")
    return int(stat.rsplit(")", 1)[1].split()[19]) if stat else 1 << 62


def leftovers(t: Trace, stopped_at: int | None = None) -> list[str]:
    """Everything of sandbox ``t`` still present on the host: processes, mounts, dirs, cgroups.

    Namespace inode numbers are recycled once a namespace is freed, so a process is counted
    as "in the sandbox's pid namespace" only if it started before ``stopped_at``
    (:func:`ticks_since_boot` taken just before ``stop``); later ones belong to someone else.
    That is exact for the pid namespace, fixed at a process's birth. A mount namespace is not
    (bwrap and ``unshare`` make theirs after they start, and under concurrency one got the
    inode of a just-freed sandbox's: a false leftover), so mount namespaces are found by what
    they show instead: any process whose ``mountinfo`` names the state dir (both of the
    sandbox's mount namespaces do, through the overlay's ``upperdir``).
    """
    found = []
    cgroup_name = f"evokit-{t.id}"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        cmdline = _read(f"/proc/{pid}/cmdline").replace("\0", " ")
        if cgroup_name in _read(f"/proc/{pid}/cgroup") or t.state_dir in cmdline:
            found.append(f"process {pid}: {cmdline[:120]}")
        if stopped_at is not None and _start_ticks(pid) < stopped_at:
            try:
                if os.readlink(f"/proc/{pid}/ns/pid") == t.pid_ns:
                    stat = _read(f"/proc/{pid}/stat")[:60]
                    found.append(f"process {pid} in the sandbox's pid namespace: {stat}")
            except OSError:
                pass
        if t.state_dir in _read(f"/proc/{pid}/mountinfo"):
            found.append(f"process {pid} still sees a mount of {t.state_dir}")
    if os.path.lexists(t.state_dir):
        found.append(f"state dir {t.state_dir} exists")
    lease = Path(t.state_dir).parent / f"{t.id}.lock"  # evokit.sandbox.stale's lease
    if os.path.lexists(lease):
        found.append(f"lease {lease} exists")
    found += [f"cgroup {d} exists" for d in t.cgroup_dirs if os.path.exists(d)]
    res = subprocess.run(["find", "/sys/fs/cgroup", "-type", "d", "-name", cgroup_name],
                         capture_output=True, text=True)
    found += [f"cgroup {d} exists" for d in res.stdout.split() if d not in t.cgroup_dirs]
    return found


def sandbox_processes(t: Trace) -> list[str]:
    """Host-side cmdlines of the processes in sandbox ``t``'s cgroup (while it runs)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if f"evokit-{t.id}" in _read(f"/proc/{pid}/cgroup"):
            out.append(_read(f"/proc/{pid}/cmdline").replace("\0", " ").strip())
    return out


@contextlib.contextmanager
def running(image_or_sandbox, **kwargs):
    """Start a sandbox (or one on an image); after the block, stop it and assert nothing is left."""
    s = image_or_sandbox if isinstance(image_or_sandbox, Sandbox) else Sandbox(image_or_sandbox, **kwargs)
    s.start()
    t = trace(s)
    try:
        yield s
    finally:
        stopped_at = ticks_since_boot()
        s.stop()
    left = leftovers(t, stopped_at)
    assert not left, f"sandbox {t.id} left behind: {left}"


def reset_peak_rss() -> None:
    """Reset this process's peak RSS (VmHWM), so that :func:`peak_rss` measures what follows."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_rss() -> int:
    """This process's peak resident memory since the last :func:`reset_peak_rss`, in bytes."""
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/self/status")

