"""A running sandbox: start once, ``exec`` many commands, move files, stop.

Layout of one sandbox (all of it disappears at :meth:`Sandbox.stop`, or with the
process that started it):

* an **init**: ``unshare --mount`` (holder of a private mount namespace in which a
  ``storage_mb`` tmpfs and the overlay ``image layers + tmpfs upper`` are mounted) that
  execs bwrap with fresh pid/ipc/uts/net namespaces whose pid 1 (``--as-pid-1``: no bwrap
  process inside) is evokit's **anchor** (:func:`evokit.sandbox.enter.anchor`), executed from
  an inherited fd: non-dumpable, so no process of the sandbox can ptrace it or write its
  ``/proc/1/mem``, and as pid 1 unkillable from inside; with ``network``, a slirp4netns process
  connects the net namespace outward (:mod:`evokit.sandbox.netns`); every bwrap loads the keyring
  filter (:mod:`evokit.sandbox.seccomp`);
* each **exec** is one launch of ``evokit-enter`` (:mod:`evokit.sandbox.enter`), which joins
  the cgroup, enters pid 1's mount, net, uts, ipc and pid namespaces through its pidfd, and
  runs the command under the same root, capability set, ``no_new_privs`` and seccomp filter
  as the init. So files, mounts and background processes persist between execs, exactly as
  with ``docker exec``, and killing the init kills every process at once;
* a per-sandbox cgroup (memory, pids, cpu) that every process joins before it execs;
* the verifier's private namespaces, made on demand (:meth:`Sandbox.verifier_namespace`,
  :mod:`evokit.sandbox.verifier_ns`): the tests share the sandbox's files, network, hostname
  and IPC, in a pid namespace no sandbox process can see, with ``/tests`` and ``/logs/verifier``
  on tmpfs mounts only the host and the tests reach;
* a lease on all of that host state (:mod:`evokit.sandbox.stale`), released last by ``stop``.

File transfer (:mod:`evokit.sandbox.transfer`) walks the sandbox's root from the host through
``/proc/<pid 1>/root`` with ``openat2(RESOLVE_IN_ROOT)``: symlinks the agent planted
(``/tests -> /etc``) resolve inside the sandbox, and none of the agent's programs runs.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import signal
import subprocess
import tarfile
import threading
import time
import uuid
from collections.abc import Sequence
from fnmatch import fnmatch
from pathlib import Path

from evokit.errors import EvokitError
from evokit.sandbox import enter, netns, seccomp, stale, transfer
from evokit.sandbox.bwrap import (
    DOCKER_DEFAULT_CAPS,
    bwrap_base,
    host_env,
    overlay_argv,
    require_tools,
)
from evokit.sandbox.cgroup import Cgroup
from evokit.sandbox.cgroup import parent_dirs as cgroup_parent_dirs
from evokit.sandbox.image import Image, as_user
from evokit.sandbox.process import SUBPROCESS_CLOCK, ExecResult, run_capped
from evokit.sandbox.verifier_ns import VerifierNamespace
from evokit.tasks.limits import Limits

RUN_DIR = stale.RUN_DIR
LOG_DIRS = ("/logs/agent", "/logs/verifier", "/logs/artifacts")
ETC_HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tsandbox\n"


class SandboxError(EvokitError, RuntimeError):
    """The sandbox could not start, or was used while stopped."""


class SandboxSabotaged(SandboxError):
    """A process the harness keeps in a sandbox (its anchor, bwrap, slirp4netns) no longer runs its
    own program from its own start: something took it over. Within the agent's reach by
    definition (nothing else runs there), so the trial scores 0 with this reason, never masked."""


def process_identity(pid: int) -> tuple[int, int, int] | None:
    """``(st_dev, st_ino)`` of the program ``pid`` runs and its start time (clock ticks), or None if gone.

    What :meth:`Sandbox.kill_commands` compares for the processes it spares: an ``execve`` changes
    the program, a recycled pid the start time.
    """
    try:
        st = os.stat(f"/proc/{pid}/exe")
        start = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None
    return st.st_dev, st.st_ino, start


def check_spared(spared: dict[int, tuple[str, tuple[int, int, int] | None]]) -> None:
    """Raise :class:`SandboxSabotaged` unless every spared ``pid: (name, identity)`` is unchanged."""
    for pid, (name, identity) in spared.items():
        now = process_identity(pid)
        if now is None or now != identity:
            what = "is gone" if now is None else (
                "runs another program" if now[:2] != (identity or now)[:2] else "is another process (same pid)")
            raise SandboxSabotaged(f"sabotage: {name} (host pid {pid}) {what}; the harness's own process in the "
                                   "sandbox was taken over or killed")


class Sandbox:
    """One isolated environment over a built :class:`Image`.

    Args:
        image: what :func:`evokit.sandbox.image.build_image` returned.
        network: outbound access (Harbor ``network_mode = "public"``) through slirp4netns from
            the sandbox's own network namespace, host loopback refused (:mod:`evokit.sandbox.netns`);
            otherwise the namespace has only its loopback interface (up, for local servers).
        limits: cpu / memory / storage / pid limits (see :class:`Limits`).
        workdir: default cwd of ``exec`` (the task's ``workdir``, else the image's WORKDIR).
        env: extra variables for every command, over the image's ``ENV``.
    """

    def __init__(self, image: Image, *, network: bool = False, limits: Limits = Limits(),
                 workdir: str | None = None, env: dict[str, str] | None = None):
        self.image, self.network, self.limits = image, network, limits
        self.workdir = workdir or image.workdir or "/"
        self.env = {**image.env, **(env or {})}
        self.id = uuid.uuid4().hex[:12]
        self.state_dir = RUN_DIR / self.id
        self._init = None
        self._pid1_fd: int | None = None  # pidfd of the sandbox's pid 1
        self._own_pids: set[int] = set()
        self._spared: dict[int, tuple[str, tuple[int, int, int] | None]] = {}
        self._verifiers: list[VerifierNamespace] = []
        self._ns: dict[str, str] = {}
        self.cgroup: Cgroup | None = None
        self._lease: stale.Lease | None = None
        self._outbound: netns.Outbound | None = None
        self._resolv: str | None = None
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> Sandbox:
        """Start the init (and, with ``network``, its slirp4netns); on any failure undo all of it.

        First takes a lease on the sandbox's host state (:mod:`evokit.sandbox.stale`), and the
        first start in a process removes state left by harnesses that died (SIGKILL).
        """
        require_tools("unshare", "bwrap", *(("slirp4netns",) if self.network else ()))
        if self._lease is not None:
            raise SandboxError("start() on a sandbox that was already started")
        stale.clean_once(self.state_dir.parent)
        self._lease = stale.Lease(self.state_dir.parent, self.id)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        self._lease.record(state_dir=str(self.state_dir),
                           cgroup_dirs=[str(d / f"evokit-{self.id}") for d in cgroup_parent_dirs()])
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.cgroup = Cgroup(f"evokit-{self.id}", self.limits)
        self._resolv = str(netns.resolv_conf()) if self.network else None
        info_r, info_w = os.pipe()
        filter_fd = seccomp.fd()
        anchor_fd = os.open(enter.anchor(), os.O_RDONLY | os.O_CLOEXEC)
        anchor = os.fstat(anchor_fd)  # the file exec'd, whatever the path names by the check below
        inner = bwrap_base(resolv_conf=self._resolv, seccomp_fd=filter_fd, cwd="/",
                           env={"PATH": self.env.get("PATH", "/usr/bin:/bin")}, die_with_parent=True)
        # Always a network namespace of its own: with ``network`` slirp4netns connects it to the
        # outside below; without, it has only its loopback (up, as Docker's network "none").
        inner += ["--unshare-pid", "--as-pid-1", "--unshare-ipc", "--unshare-uts", "--unshare-net",
                  "--hostname", "sandbox", "--info-fd", str(info_w)]
        # The init makes the harness dirs, then execs the anchor (pid 1 for the sandbox's life),
        # which says "ready" once it is non-dumpable: start() returns only then.
        # Like Docker, give the sandbox an /etc/hosts (minbase has none): without it
        # `localhost` does not resolve, and offline tasks that talk to a local server fail.
        setup = ("mkdir -p " + " ".join([*LOG_DIRS, shlex.quote(self.workdir)]) + " && chmod 777 "
                 + " ".join(LOG_DIRS) + f" && {{ [ -e /etc/hosts ] || printf {shlex.quote(ETC_HOSTS)} > /etc/hosts; }}"
                 + f" && exec /proc/self/fd/{anchor_fd}")
        inner += ["--", "/bin/sh", "-c", setup]
        storage = (self.limits.storage_mb or 100_000) * 1024 * 1024
        argv = overlay_argv(cache_root=self.image.root, lowerdirs=self.image.lowerdirs,
                            upper_root=self.state_dir, tmpfs_bytes=storage, inner=inner)
        t_start = time.monotonic()
        try:
            self._init = subprocess.Popen(self.cgroup.wrap(argv), pass_fds=(info_w, filter_fd, anchor_fd),
                                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          start_new_session=True, env=host_env())
        finally:
            os.close(info_w)
            os.close(filter_fd)
            os.close(anchor_fd)
        with os.fdopen(info_r, "rb") as f:
            raw = f.read()  # bwrap closes the fd once the sandbox is set up (or on failure)
        ready = self._init.stdout.readline()
        self._init.stdout.close()
        SUBPROCESS_CLOCK.add(time.monotonic() - t_start)
        if not raw or ready.strip() != b"ready":
            self._init.wait(timeout=10) if self._init.poll() is None and not raw else None
            err = self._init.stderr.read().decode(errors="replace") if self._init.poll() is not None else ""
            raise SandboxError(f"sandbox failed to start: {err.strip() or 'the init never became ready'}")
        child = json.loads(raw)["child-pid"]
        # "mnt" is the init's namespace, where the overlay is mounted (pid 1's own is a child of it).
        self._ns = {name: f"/proc/{child}/ns/{name}" for name in ("net", "uts", "ipc", "pid")}
        self._ns["mnt"] = f"/proc/{self._init.pid}/ns/mnt"
        self._pid1_fd = os.pidfd_open(child)
        # The processes that are the sandbox itself (outer bwrap in the host's pid namespace, the
        # anchor as pid 1, slirp): everything else in the cgroup was started by a command.
        self._own_pids = {self._init.pid, child}
        self._spared = {self._init.pid: ("the sandbox's bwrap", process_identity(self._init.pid)),
                        child: ("the sandbox's anchor (pid 1)", process_identity(child))}
        if (self._spared[child][1] or (0, 0))[:2] != (anchor.st_dev, anchor.st_ino):
            raise SandboxError("the sandbox's pid 1 is not evokit's anchor")
        if self.network:
            # Only now: slirp configuring the namespace while bwrap still sets up its loopback
            # makes bwrap fail (measured: "loopback: Failed RTM_NEWADDR").
            t_net = time.monotonic()
            self._outbound = netns.Outbound(child, wrap=self.cgroup.wrap)
            self._outbound.wait_ready()
            SUBPROCESS_CLOCK.add(time.monotonic() - t_net)
            self._own_pids.add(self._outbound.pid)
            self._spared[self._outbound.pid] = ("slirp4netns", process_identity(self._outbound.pid))

    def check_spared(self) -> None:
        """:class:`SandboxSabotaged` unless every process the sandbox spares runs its own program."""
        check_spared(self._spared)

    def kill_commands(self, rounds: int = 50) -> int:
        """Kill every process that commands started (background daemons too); keep the sandbox.

        Called before the agent's work is copied to a separate verifier (nothing of the agent may
        still be writing it) and after a shared verifier's tests (the end of the trial). Returns how
        many it killed. Then every process it spared (bwrap, the anchor, slirp4netns) must still
        run its own program from its own start (:func:`process_identity`, recorded at start), else
        :class:`SandboxSabotaged`: the borrowed-process class is closed by the anchor being
        non-dumpable, and this check makes a miss visible instead of trusted.

        Stop first, then kill: SIGKILLs sent one process at a time let the survivors run in
        between, and an agent's ``(sleep 300; echo 1 > /logs/verifier/reward.txt) &`` wrote its
        reward when its ``sleep`` died before its shell (measured: 5 of 150 such chains). Every
        command process gets SIGSTOP (repeated until a round finds no new one: a process caught
        mid-fork leaves a child for the next round), then all of them SIGKILL.
        """
        if not self.running:
            raise SandboxError("kill_commands on a sandbox that is not running")
        stopped: set[int] = set()
        for _ in range(rounds):
            new = self.cgroup.pids() - self._own_pids - stopped
            if not new:
                break
            for pid in new:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except ProcessLookupError:
                    pass
                stopped.add(pid)
        killed: set[int] = set()
        for _ in range(rounds):
            pids = self.cgroup.pids() - self._own_pids
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.005)
        check_spared(self._spared)
        return len(killed)

    def stop(self) -> None:
        """Kill every process of the sandbox and release its mounts, cgroup and state dir."""
        with self._lock:
            for verifier in self._verifiers:
                verifier.close()
            self._verifiers.clear()
            if self._init is not None:
                # Kill the namespace's pid 1 first: the kernel kills every process in the
                # namespace, pid 1 reaps them and bwrap outside reaps pid 1. Killing the whole
                # group at once orphans pid 1 to the host's init: a zombie until that reaps it.
                if self._pid1_fd is not None:
                    try:
                        signal.pidfd_send_signal(self._pid1_fd, signal.SIGKILL)
                        self._init.wait(timeout=5)
                    except (ProcessLookupError, subprocess.TimeoutExpired):
                        pass
                try:
                    os.killpg(self._init.pid, 9)
                except ProcessLookupError:
                    pass
                self._init.wait()
                if self._init.stderr:
                    self._init.stderr.close()
                self._init = None
            if self._outbound is not None:
                self._outbound.close()
                self._outbound = None
            if self._pid1_fd is not None:
                os.close(self._pid1_fd)
            self._pid1_fd = None
            if self.cgroup is not None:
                self.cgroup.kill()
                self.cgroup = None
            # On the host the state dir is only the (now unmounted) tmpfs mountpoint;
            # after a failed start it may still hold the prelude's merged/ dir.
            for d in (self.state_dir / "merged", self.state_dir):
                try:
                    d.rmdir()
                except OSError:
                    pass
            if self._lease is not None:
                self._lease.release()  # last: until here a cleaner must not think the state is free
                self._lease = None

    @property
    def running(self) -> bool:
        return self._init is not None and self._init.poll() is None

    @property
    def pid1(self) -> int:
        """The host pid of the sandbox's pid 1 (its anchor)."""
        if self._pid1_fd is None:
            raise SandboxError("the sandbox is not running")
        return _pidfd_pid(self._pid1_fd)

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---------------------------------------------------------------- the verifier's side
    def enter_target(self) -> tuple[int, int, list[Path]]:
        """pidfd of pid 1, a new fd of its root and the cgroup.procs files (:class:`VerifierNamespace`)."""
        if not self.running:
            raise SandboxError("the sandbox is not running")
        return self._pid1_fd, self.open_root(), self.cgroup_procs()

    @property
    def private_verifier(self) -> bool:
        """Always: the host holds pid 1's pidfd and root (:meth:`verifier_namespace`)."""
        return True

    def copy_work_to(self, dst, paths: Sequence[str], *, max_bytes: int) -> None:
        """The separate verifier's copy (:func:`evokit.sandbox.transfer.copy_between`, host fds of both roots)."""
        transfer.copy_between(self, dst, paths, max_bytes=max_bytes)

    def cgroup_procs(self) -> list[Path]:
        return [d / "cgroup.procs" for d in self.cgroup.dirs]

    def shell_argv(self, command: str) -> list[str]:
        """``bash -c command``, or ``sh -c`` in an image without bash."""
        return ["bash" if self.image.find("/bin/bash") is not None else "sh", "-c", command]

    def verifier_namespace(self, size_bytes: int | None = None) -> VerifierNamespace:
        """A started :class:`~evokit.sandbox.verifier_ns.VerifierNamespace` beside this sandbox (the
        tests' private pid and mount namespaces); closed by the caller, or at the latest by :meth:`stop`.

        ``size_bytes`` caps each of its two tmpfs (default: the sandbox's ``storage_mb``).
        """
        if not self.running:
            raise SandboxError("the verifier's namespaces need a running sandbox")
        size = size_bytes or (self.limits.storage_mb or 100_000) << 20
        verifier = VerifierNamespace(self, size_bytes=size)
        with self._lock:
            self._verifiers = [v for v in self._verifiers if not v.closed] + [verifier]
        return verifier.start()

    # ---------------------------------------------------------------- commands
    def exec(self, command: str | list[str], *, cwd: str | None = None, env: dict[str, str] | None = None,
             timeout_sec: float | None = None, user: str | int | None = None, stdin: bytes | None = None,
             max_output_bytes: int = 4 * 1024 * 1024, keep_bytes: bool = False) -> ExecResult:
        """Run ``command`` (a bash string, or an argv) in the sandbox; never raises on failure."""
        if not self.running:
            raise SandboxError("exec on a sandbox that is not running (start() it, or it was stopped)")
        argv = command if isinstance(command, list) else self.shell_argv(command)
        user = self.image.user if user is None else str(user)
        merged_env = {**self.env, **(env or {})}
        merged_env.setdefault("HOME", "/root")
        root_fd = self.open_root()
        filter_fd = seccomp.fd()
        try:
            full = enter.argv(pidfd=self._pid1_fd, rootfd=root_fd, seccomp_fd=filter_fd, cwd=cwd or self.workdir,
                              caps=DOCKER_DEFAULT_CAPS, cgroup_procs=self.cgroup_procs(),
                              env=merged_env, command=as_user(argv, user))
            return run_capped(full, stdin=stdin, timeout_sec=timeout_sec, env={},
                              pass_fds=(self._pid1_fd, root_fd, filter_fd), max_output_bytes=max_output_bytes,
                              keep_bytes=keep_bytes)
        finally:
            os.close(filter_fd)
            os.close(root_fd)

    # ---------------------------------------------------------------- files
    # Every transfer goes through evokit.sandbox.transfer: the host walks the sandbox's root
    # with openat2(RESOLVE_IN_ROOT); no archive is made or parsed and no program of the
    # sandbox (its tar, its libc) runs (the trojaned-tool and host-extraction classes).
    def open_root(self) -> int:
        """An ``O_PATH`` fd of the sandbox's ``/`` (the caller closes it), for :mod:`transfer`.

        Taken through ``/proc/<pid 1>/root`` and checked against the pidfd of pid 1 afterwards,
        so a recycled pid can never hand out another process's root.
        """
        if not self.running or self._pid1_fd is None:
            raise SandboxError("file transfer on a sandbox that is not running (start() it, or it was stopped)")
        pid = _pidfd_pid(self._pid1_fd)
        try:
            fd = os.open(f"/proc/{pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            raise SandboxError(f"the sandbox's pid 1 is gone ({e.strerror}); it cannot be read") from None
        try:
            signal.pidfd_send_signal(self._pid1_fd, 0)
        except ProcessLookupError:
            os.close(fd)
            raise SandboxError("the sandbox's pid 1 is gone; it cannot be read") from None
        return fd

    def upload_file(self, source: str | Path, target: str) -> None:
        """Copy the host file ``source`` to ``target`` (parents made); owner root, its mode bits."""
        _transfer(transfer.upload, Path(source), self, target, as_file=True)

    def upload_dir(self, source: str | Path, target: str) -> None:
        """Copy the *contents* of ``source`` into ``target`` (created if missing).

        ``source`` itself may not be a symlink (a ``tests/`` folder linked to ``/etc`` would
        upload the host's ``/etc``); links inside it stay links, resolved in the sandbox.
        """
        _transfer(transfer.upload, Path(source), self, target, as_file=False)

    def write_file(self, target: str, data: bytes | str, mode: int = 0o644) -> None:
        data = data.encode() if isinstance(data, str) else data
        _transfer(transfer.write_bytes, self, target, data, mode)

    def read_file(self, source: str, max_bytes: int = 64 * 1024 * 1024) -> bytes:
        """The bytes of the regular file ``source`` (a symlink is not followed: FileNotFoundError)."""
        return _transfer(transfer.read_bytes, self, source, max_bytes)

    def download_file(self, source: str, target: str | Path, max_bytes: int = 1 << 30) -> None:
        """Stream the regular file ``source`` to the host file ``target`` (at most ``max_bytes``)."""
        _transfer(transfer.download, self, source, Path(target), max_bytes, as_file=True)

    def download_dir(self, source: str, target: str | Path, max_bytes: int = 1 << 30) -> None:
        """Copy the contents of ``source`` to the host dir ``target``; no symlink is written.

        A link is resolved by the kernel inside the sandbox and arrives as a copy of the file or
        directory it leads to when that is inside ``source``; other links, FIFOs, sockets and
        device nodes are skipped (:func:`evokit.sandbox.transfer.download`): failing the whole
        download would let an agent break the copy of its own logs. More than ``max_bytes`` in
        all is a :class:`SandboxError`.
        """
        _transfer(transfer.download, self, source, Path(target), max_bytes, as_file=False)

    def download_dir_filtered(self, source: str, target: str | Path, *, include: Sequence[str] | None = None,
                              exclude: Sequence[str] | None = None, protect: Sequence[str] | None = None,
                              max_bytes: int = 1 << 30) -> None:
        """Harbor's ``download_dir_filtered``, host-safe: the regular files under ``source`` whose
        relative path matches an ``include`` glob (all if none) and no ``exclude`` glob (fnmatch,
        ``*`` matches ``/``); the exact relative paths in ``protect`` always.

        Harbor's own version runs the sandbox's ``tar`` and extracts the archive on the host
        with ``tarfile``: the trojaned-tar and filter-bypass paths of the host-extraction class.
        """
        _transfer(transfer.download, self, source, Path(target), max_bytes, as_file=False,
                  select=file_filter(include, exclude, protect))


def file_filter(include: Sequence[str] | None, exclude: Sequence[str] | None,
                protect: Sequence[str] | None):
    """Harbor's ``download_dir_filtered`` rule on a relative path: ``protect`` always, else an
    ``include`` glob (all if none) and no ``exclude`` glob (fnmatch: ``*`` matches ``/``)."""
    protected = set(protect or ())

    def select(rel: str) -> bool:
        if rel in protected:
            return True
        if include and not any(fnmatch(rel, p) for p in include):
            return False
        return not (exclude and any(fnmatch(rel, p) for p in exclude))

    return select


def _pidfd_pid(pidfd: int) -> int:
    for line in Path(f"/proc/self/fdinfo/{pidfd}").read_text().splitlines():
        if line.startswith("Pid:"):
            pid = int(line.split()[1])
            if pid > 0:
                return pid
    raise SandboxError("the sandbox's pid 1 is gone; it cannot be read")


def _transfer(fn, *args, **kwargs):
    """Run a :mod:`transfer` function; its refusals become :class:`SandboxError` (same message)."""
    try:
        return fn(*args, **kwargs)
    except transfer.TransferError as e:
        raise SandboxError(str(e)) from None


def tar_bytes(source: str | Path) -> bytes:
    """An uncompressed tar of the *contents* of the host dir ``source`` (to extract in a sandbox).

    ``source`` may not be a symlink (its target would be uploaded). Built in memory: for small
    trees only (a task's ``tests/``); :meth:`Sandbox.upload_dir` streams instead.
    """
    transfer.check_upload_source(Path(source), as_file=False)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for child in sorted(Path(source).iterdir()):
            tar.add(child, arcname=child.name)
    return buf.getvalue()
