"""The verifier's private side of a running sandbox: its own pid and mount namespaces, a reward
channel only the host reads.

Why (the shared-verifier reward-forging class): in Harbor's shared mode the tests run in the
agent's sandbox *while the agent's processes keep running* (a task's redis or supervisord is part
of its work, and tests check it), so anything that the tests and the agent's processes share is a
channel. Here the tests share the agent's files, network, hostname and IPC, and nothing else:

* **pid namespace**: a *sibling* of the sandbox's (a child of the host's): no process of the
  sandbox can name a verifier pid, so none can signal, ptrace or read the ``/proc`` of a verifier
  process. A sibling rather than a parent of the sandbox's (which would let the tests see the
  agent's processes in ``ps``) because a Docker container's pid namespace has no parent but the
  host's: both backends give the tests the same view. Deviation from Harbor, stated: the tests'
  ``/proc`` lists only the tests' own processes; services are reached as clients reach them
  (network, unix sockets, files), not by pid.
* **mount namespace**: a private copy of the sandbox's (propagation cut both ways), in which
  ``/tests`` and ``/logs/verifier`` are tmpfs mounts the *host* created (``fsmount(2)``) and holds
  fds of: the agent's processes never see them, cannot read the answer keys in ``/tests`` or
  write ``reward.txt``; the host uploads the tests into one and reads the reward out of the other
  through its fds, never by a path the agent could redirect. ``/proc`` is a fresh procfs of the
  verifier's pid namespace with Docker's masked and read-only paths.

It is started by one launch of ``evokit-enter`` in its verifier mode (``enter.c``), whose pid 1
is ``evokit-anchor`` (non-dumpable, the reaper); every command of the verifier then enters it
through the anchor's pidfd like any exec of the sandbox. :meth:`VerifierNamespace.stop` kills
that pid 1, and the kernel kills every process of the namespace with it.

What remains of the shared mode's weakness, stated: the tests run on the agent's filesystem
(its ``/usr/bin``, ``/tmp``, ``/dev/shm``), so a daemon or a root agent can still change what
the tests *read* (trojaned tools, files swapped under them, a renamed ``/tests`` mountpoint), but
not what the harness reads as the reward, and never the tests' processes.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path, PurePosixPath
from typing import Protocol

from evokit.errors import EvokitError
from evokit.sandbox import enter, seccomp, transfer
from evokit.sandbox.bwrap import DOCKER_DEFAULT_CAPS
from evokit.sandbox.image import as_user
from evokit.sandbox.process import SUBPROCESS_CLOCK, ExecResult, run_capped

TESTS = "/tests"
VERIFIER_DIR = "/logs/verifier"
PRIVATE = (TESTS, VERIFIER_DIR)

# fsopen(2) & co. have one number on every architecture (asm-generic, >= 424).
_SYS_FSOPEN, _SYS_FSCONFIG, _SYS_FSMOUNT = 430, 431, 432
_FSOPEN_CLOEXEC, _FSCONFIG_SET_STRING, _FSCONFIG_CMD_CREATE, _FSMOUNT_CLOEXEC = 1, 1, 6, 1
_MOUNT_ATTR_NOSUID, _MOUNT_ATTR_NODEV = 0x2, 0x4
_libc = ctypes.CDLL(None, use_errno=True)


class VerifierSetupError(EvokitError, RuntimeError):
    """The verifier's namespaces could not be made in this sandbox (message says why)."""


def private_tmpfs(size_bytes: int) -> int:
    """A detached tmpfs mount (``nosuid,nodev``, root ``0755``) as an fd the caller owns and closes."""

    def check(ret: int, what: str) -> int:
        if ret < 0:
            err = ctypes.get_errno()
            raise VerifierSetupError(f"{what}: {os.strerror(err)} (the private verifier needs root and "
                                     "Linux >= 5.2)")
        return ret

    ctx = check(_libc.syscall(_SYS_FSOPEN, b"tmpfs", _FSOPEN_CLOEXEC), "fsopen(tmpfs)")
    try:
        for key, value in ((b"size", str(size_bytes).encode()), (b"mode", b"0755")):
            check(_libc.syscall(_SYS_FSCONFIG, ctx, _FSCONFIG_SET_STRING, key, value, 0), f"tmpfs {key.decode()}")
        check(_libc.syscall(_SYS_FSCONFIG, ctx, _FSCONFIG_CMD_CREATE, None, None, 0), "create tmpfs")
        return check(_libc.syscall(_SYS_FSMOUNT, ctx, _FSMOUNT_CLOEXEC, _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV),
                     "fsmount(tmpfs)")
    finally:
        os.close(ctx)


class EnterTarget(Protocol):
    """What a backend gives :class:`VerifierNamespace`: the sandbox's pid 1 and cgroup, seen from the
    host, and what its ``exec`` defaults to (``image.user``, ``env``, ``workdir``, the shell)."""

    image: object
    env: dict[str, str]
    workdir: str

    def shell_argv(self, command: str) -> list[str]:
        """The argv that runs the shell string ``command`` in this sandbox."""

    def enter_target(self) -> tuple[int, int, list[Path]]:
        """``(pidfd of pid 1 (borrowed), O_PATH fd of its root (the caller closes it), cgroup.procs files)``."""

    def cgroup_procs(self) -> list[Path]:
        """The ``cgroup.procs`` files every process of the sandbox joins."""


class _MountRoot:
    """One private tmpfs as a :mod:`transfer` root (``open_root`` hands out a duplicate of its fd)."""

    def __init__(self, fd: int):
        self.fd = fd

    def open_root(self) -> int:
        return os.dup(self.fd)


class VerifierNamespace:
    """The verifier's pid and mount namespaces beside a running sandbox (module docstring).

    Args:
        target: the sandbox (local or Docker) whose files, network, hostname and IPC the verifier shares.
        size_bytes: size cap of each private tmpfs (``/tests`` and ``/logs/verifier``).
    """

    def __init__(self, target: EnterTarget, *, size_bytes: int):
        self.target, self.size_bytes = target, size_bytes
        self._mounts: dict[str, int] = {}
        self._helper: subprocess.Popen | None = None
        self._pidfd: int | None = None
        self._pid = 0

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> VerifierNamespace:
        """Make the two tmpfs, launch the namespaces' anchor and wait until it is ready."""
        if self._helper is not None or self._mounts:
            raise VerifierSetupError("start() on a verifier namespace that was already started")
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        for path in PRIVATE:
            self._mounts[path] = private_tmpfs(self.size_bytes)
        pidfd, rootfd, procs = self.target.enter_target()
        anchor_fd = os.open(enter.anchor(), os.O_RDONLY | os.O_CLOEXEC)
        filter_fd = seccomp.fd()
        t0 = time.monotonic()
        try:
            argv = enter.argv(pidfd=pidfd, rootfd=rootfd, seccomp_fd=filter_fd, cwd="/", caps=DOCKER_DEFAULT_CAPS,
                              cgroup_procs=procs, env={}, command=[f"/proc/self/fd/{anchor_fd}"],
                              mounts=self._mounts)
            self._helper = subprocess.Popen(argv, pass_fds=(pidfd, rootfd, filter_fd, anchor_fd, *self._mounts.values()),
                                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                            env={}, start_new_session=True)
        finally:
            for fd in (rootfd, filter_fd, anchor_fd):
                os.close(fd)
        ready = self._helper.stdout.readline()
        self._helper.stdout.close()
        SUBPROCESS_CLOCK.add(time.monotonic() - t0)
        if ready != b"ready\n":
            self._helper.wait(timeout=10)
            err = self._helper.stderr.read().decode(errors="replace").strip()
            raise VerifierSetupError(f"the verifier's namespaces could not be made in the sandbox: "
                                     f"{err or f'exit {self._helper.returncode}'}")
        hp = self._helper.pid
        kids = Path(f"/proc/{hp}/task/{hp}/children").read_text().split()
        if len(kids) != 1:
            raise VerifierSetupError(f"the verifier's pid 1 is not the helper's only child ({kids})")
        self._pid = int(kids[0])
        self._pidfd = os.pidfd_open(self._pid)
        if Path(f"/proc/{self._pid}/task/{self._pid}/children").read_text().split():  # the anchor forks nothing
            raise VerifierSetupError("the verifier's pid 1 is not evokit's anchor")

    @property
    def closed(self) -> bool:
        """Stopped and its tmpfs released (nothing left to close)."""
        return self._helper is None and not self._mounts

    @property
    def running(self) -> bool:
        return self._helper is not None and self._helper.poll() is None

    def stop(self) -> None:
        """Kill the namespace's pid 1: the kernel kills every verifier process with it. The private
        tmpfs stay readable (through the host's fds) until :meth:`close`."""
        if self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.close(self._pidfd)
            self._pidfd = None
        if self._helper is not None:
            if self._helper.poll() is None:
                try:
                    self._helper.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self._helper.kill()
                    self._helper.wait()
            if self._helper.stderr:
                self._helper.stderr.close()
            self._helper = None

    def close(self) -> None:
        """:meth:`stop`, then release the private tmpfs (their contents are gone)."""
        self.stop()
        for fd in self._mounts.values():
            os.close(fd)
        self._mounts.clear()

    def __enter__(self) -> VerifierNamespace:
        # Sandbox.verifier_namespace() hands it out started: entering it must not start a second one
        # (whose mounts, pidfd and helper would replace, and leak, the first's).
        return self if self._helper is not None else self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # ---------------------------------------------------------------- commands
    def exec(self, command: str | list[str], *, cwd: str | None = None, env: dict[str, str] | None = None,
             timeout_sec: float | None = None, user: str | int | None = None, stdin: bytes | None = None,
             max_output_bytes: int = 4 * 1024 * 1024) -> ExecResult:
        """Run ``command`` in the verifier's namespaces, as the sandbox's ``exec`` runs it in the
        sandbox's: same shell, environment (the sandbox's own under ``env``), user, cwd, confinement."""
        if self._pidfd is None or not self.running:
            raise VerifierSetupError("exec in a verifier namespace that is not running")
        t = self.target
        argv = command if isinstance(command, list) else t.shell_argv(command)
        user = t.image.user if user is None else str(user)
        merged = {**t.env, **(env or {})}
        merged.setdefault("HOME", "/root")
        procs = t.cgroup_procs()
        try:
            root_fd = os.open(f"/proc/{self._pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            signal.pidfd_send_signal(self._pidfd, 0)  # the pid was not recycled meanwhile
        except (OSError, ProcessLookupError) as e:
            raise VerifierSetupError(f"the verifier's pid 1 is gone: {e}") from None
        filter_fd = seccomp.fd()
        try:
            full = enter.argv(pidfd=self._pidfd, rootfd=root_fd, seccomp_fd=filter_fd, cwd=cwd or t.workdir,
                              caps=DOCKER_DEFAULT_CAPS, cgroup_procs=procs, env=merged,
                              command=as_user(argv, user))
            return run_capped(full, stdin=stdin, timeout_sec=timeout_sec, env={},
                              pass_fds=(self._pidfd, root_fd, filter_fd), max_output_bytes=max_output_bytes)
        finally:
            os.close(filter_fd)
            os.close(root_fd)

    # ---------------------------------------------------------------- files (host side, through the fds)
    def owns(self, path: str) -> bool:
        """Whether ``path`` (absolute, in the sandbox) lies on one of the private mounts."""
        return self._split(path) is not None

    def _split(self, path: str) -> tuple[_MountRoot, str] | None:
        p = PurePosixPath(path)
        for top in PRIVATE:
            if p == PurePosixPath(top) or PurePosixPath(top) in p.parents:
                if top not in self._mounts:
                    raise VerifierSetupError("the verifier's private mounts are closed")
                rel = str(p.relative_to(top))
                return _MountRoot(self._mounts[top]), "/" if rel == "." else "/" + rel
        return None

    def _at(self, path: str) -> tuple[_MountRoot, str]:
        where = self._split(path)
        if where is None:
            raise ValueError(f"{path} is not under {' or '.join(PRIVATE)}")
        return where

    def upload_dir(self, source: Path, target: str) -> None:
        root, rel = self._at(target)
        transfer.upload(Path(source), root, rel, as_file=False)

    def upload_file(self, source: Path, target: str) -> None:
        root, rel = self._at(target)
        transfer.upload(Path(source), root, rel, as_file=True)

    def read_file(self, source: str, max_bytes: int) -> bytes:
        root, rel = self._at(source)
        return transfer.read_bytes(root, rel, max_bytes)

    def download(self, source: str, target: Path, max_bytes: int, *, as_file: bool, select=None) -> None:
        root, rel = self._at(source)
        transfer.download(root, rel, Path(target), max_bytes, as_file=as_file, select=select)
