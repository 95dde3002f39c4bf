"""Per-sandbox control groups: memory, process count and CPU limits, and a sure kill.

Works on cgroup v2 (unified) and on v1 hierarchies (what these Debian 12 VMs mount).
Each sandbox gets ``evokit-<id>`` under the cgroup the current process lives in, in
every controller we use. Processes join it from ``preexec_fn`` (before ``exec``), so
no command ever runs outside its limits, and :meth:`Cgroup.kill` reaches every
process of the sandbox, including daemons that escaped their process group.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from evokit.tasks.limits import Limits

ROOT = Path("/sys/fs/cgroup")
_V1_CONTROLLERS = ("memory", "pids", "cpu")



def _own_path(controller: str) -> str:
    """This process's cgroup path in ``controller`` ('' for cgroup v2)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if controller in names.split(",") or (controller == "" and names == ""):
            return path
    return "/"


def _is_v2() -> bool:
    return (ROOT / "cgroup.controllers").exists()


def parent_dirs() -> list[Path]:
    """The cgroup dirs (one per controller used) under which this process makes sandbox cgroups."""
    if _is_v2():
        return [ROOT / _own_path("").lstrip("/")]
    return [ROOT / c / _own_path(c).lstrip("/") for c in _V1_CONTROLLERS if (ROOT / c).is_dir()]


class Cgroup:
    """A set of same-named cgroups (one per controller) with limits applied.

    If making the directories or applying a limit fails, the directories made so far are
    removed before the error propagates: a failed start leaves no cgroup behind.
    """

    def __init__(self, name: str, limits: Limits):
        self.dirs: list[Path] = [parent / name for parent in parent_dirs()]
        try:
            for d in self.dirs:
                d.mkdir(exist_ok=True)
            self._apply(limits)
        except BaseException:
            self.kill(timeout=0.5)
            raise

    def _write(self, filename: str, value: str) -> bool:
        for d in self.dirs:
            if (d / filename).exists():
                (d / filename).write_text(value)
                return True
        return False

    def _apply(self, limits: Limits) -> None:
        if limits.memory_mb:
            nbytes = str(limits.memory_mb * 1024 * 1024)
            if not self._write("memory.max", nbytes):
                self._write("memory.limit_in_bytes", nbytes)
                try:  # no swap beyond the RAM limit, where swap accounting exists
                    self._write("memory.memsw.limit_in_bytes", nbytes)
                except OSError:
                    pass
            else:
                self._write("memory.swap.max", "0")
        if limits.pids:
            self._write("pids.max", str(limits.pids))
        if limits.cpus:
            period = 100_000
            quota = int(limits.cpus * period)
            if not self._write("cpu.max", f"{quota} {period}"):
                self._write("cpu.cfs_period_us", str(period))
                self._write("cpu.cfs_quota_us", str(quota))

    def join_self(self) -> None:
        """Move the calling process into every cgroup (use as ``preexec_fn``)."""
        pid = str(os.getpid())
        for d in self.dirs:
            with open(d / "cgroup.procs", "w") as f:
                f.write(pid)

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` prefixed by a shell that joins the cgroup and then execs it.

        Same effect as :meth:`join_self` as a ``preexec_fn``, but lets ``subprocess`` use
        ``vfork``: a ``preexec_fn`` forces a full fork of the Python process, which
        tripled the cost of a trivial ``exec`` (benchmarks/bench_sandbox.py).
        """
        joins = " ".join(f"echo $$ > '{d}/cgroup.procs' &&" for d in self.dirs)
        return ["/bin/sh", "-c", f'{joins} exec "$@"', "evokit-cgroup", *argv]

    def pids(self) -> set[int]:
        out: set[int] = set()
        for d in self.dirs:
            try:
                out |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
            except FileNotFoundError:
                pass
        return out

    def oom_killed(self) -> bool:
        """Whether the kernel OOM-killed anything in this sandbox (memory limit hit)."""
        for d in self.dirs:
            for name, key in (("memory.events", "oom_kill"), ("memory.oom_control", "oom_kill")):
                try:
                    for line in (d / name).read_text().splitlines():
                        k, _, v = line.partition(" ")
                        if k == key and int(v) > 0:
                            return True
                except (FileNotFoundError, ValueError):
                    pass
        return False

    def kill(self, timeout: float = 5.0) -> None:
        """SIGKILL every process in the group, then remove the cgroup directories."""
        deadline = time.monotonic() + timeout
        for d in self.dirs:
            kill_members(d, max(0.0, deadline - time.monotonic()))
        for d in self.dirs:
            for _ in range(100):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY while the kernel reaps the last tasks
                    time.sleep(0.02)


def members(d: Path) -> list[int]:
    """The processes in the cgroup folder ``d`` (none when it is gone or unreadable)."""
    try:
        return [int(p) for p in (d / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def kill_members(d: Path, timeout: float = 1.0) -> bool:
    """SIGKILL every process in the cgroup folder ``d``: ``cgroup.kill`` where the kernel has it (v2),
    else each member, in rounds (a forking member adds new ones), until none is left or ``timeout``
    has passed. Returns whether it had members. The one kill every holder of a sandbox's cgroups
    uses: the sandbox itself, Ctrl-C (:mod:`evokit.parallel.ctrl_c`) and stale clean-up."""
    if not members(d):
        return False
    deadline = time.monotonic() + timeout
    while (pids := members(d)) and time.monotonic() < deadline:
        try:
            (d / "cgroup.kill").write_text("1")
        except OSError:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        time.sleep(0.01)
    return True
