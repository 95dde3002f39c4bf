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
from dataclasses import dataclass
from pathlib import Path

from evokit.errors import UserError

ROOT = Path("/sys/fs/cgroup")
_V1_CONTROLLERS = ("memory", "pids", "cpu")


#: The accepted range of each limit, so that a task cannot take the host's resources: ``0`` or a
#: negative value must not mean "unlimited" without a word, ``10**12`` MB is no limit, and
#: ``memory_mb = -1`` or ``cpus = 0.001`` crash the sandbox at start. Outside the range is a :class:`LimitsError`
#: naming the field. The minimums are what a sandbox needs to start at all (cpus: the
#: kernel's smallest CFS quota, 1 ms per 100 ms period); the maximums are far beyond any
#: machine, so only a typo or an adversarial task reaches them.
LIMIT_RANGES: dict[str, tuple[float, float]] = {
    "cpus": (0.01, 1024),
    "memory_mb": (16, 4 * 1024 * 1024),  # 4 TiB
    "storage_mb": (16, 4 * 1024 * 1024),
    "pids": (16, 4 * 1024 * 1024),  # the kernel's pid_max ceiling
}


class LimitsError(UserError, ValueError):
    """A limit that is zero, negative, too small, absurdly large or not a number."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandbox; ``None`` means unlimited. From ``task.toml [environment]``.

    Validated on construction against :data:`LIMIT_RANGES`; leave a field ``None`` (out of
    ``task.toml``) for no limit, never ``0``.
    """

    cpus: float | None = None  # Harbor `cpus`: a CFS quota of cpus × period
    memory_mb: int | None = None  # Harbor `memory_mb`: RAM (+ swap) including the tmpfs upper layer
    storage_mb: int | None = 2048  # Harbor `storage_mb`: size of the writable tmpfs layer
    pids: int | None = 1024  # not in Harbor's schema; what stops a fork bomb

    def __post_init__(self) -> None:
        for name, (low, high) in LIMIT_RANGES.items():
            value = getattr(self, name)
            if value is None:
                continue
            whole = name != "cpus"
            if isinstance(value, bool) or not isinstance(value, int | float) or (whole and not isinstance(value, int)):
                raise LimitsError(f"{name} = {value!r}: must be {'a whole number' if whole else 'a number'}"
                                  f" (leave it out for no limit)")
            if value != value or value in (float("inf"), float("-inf")):
                raise LimitsError(f"{name} = {value!r}: must be a finite number")
            unit = " MB" if name.endswith("_mb") else ""
            if value <= 0:
                raise LimitsError(f"{name} = {value!r}: must be positive; leave it out for no limit "
                                  f"(0 and negative values do not mean unlimited)")
            if value < low:
                raise LimitsError(f"{name} = {value!r}: too small; the least a sandbox can run with is {low}{unit}")
            if value > high:
                raise LimitsError(f"{name} = {value!r}: absurdly large; at most {high}{unit}")


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
        while (pids := self.pids()) and time.monotonic() < deadline:
            if self._write("cgroup.kill", "1"):
                time.sleep(0.01)
                continue
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.01)
        for d in self.dirs:
            for _ in range(100):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY while the kernel reaps the last tasks
                    time.sleep(0.02)
