"""evokit's sandbox API over the Docker Engine API (the ``docker`` SDK), for machines without bwrap.

The local sandbox (:class:`evokit.sandbox.runtime.Sandbox`) needs root and bubblewrap on Linux.
A user on macOS with Docker Desktop, or without root, selects this backend instead with
``EVOKIT_SANDBOX=docker`` or ``--sandbox docker`` (the registry of :mod:`evokit.sandbox.backend`),
and ``evokit verify`` / ``evolve`` / ``train`` run their trials in Docker containers. The design
(``/work/shared/design.md``) names the ``docker`` package for this.

It implements :class:`evokit.sandbox.backend.SandboxAPI` (the surface the loops use, checked for
every backend by ``tests/test_sandbox_backends.py``).

Isolation promises of the local sandbox and how this backend keeps them:

* **network**: ``no-network`` tasks get ``network_mode=none`` (only a loopback); ``public``
  tasks the default bridge; ``allowlist`` is refused (as in the local sandbox).
* **limits**: ``memory_mb`` (RAM, and RAM+swap, so no swap), ``cpus`` (CFS quota), a pids
  limit against fork bombs. **Gap:** ``storage_mb`` is not enforced — Docker's ``size``
  storage option works only on overlay2 over xfs with project quotas, which Docker Desktop
  and ordinary ext4 hosts lack; the container's writes go to the daemon's disk.
* **capabilities**: Docker's default set (the same list as the local sandbox's execs) and
  ``no-new-privileges`` (bwrap always sets ``PR_SET_NO_NEW_PRIVS``). **Gap:** Docker's
  seccomp profile applies here, and the local sandbox has none: this backend is *stricter*.
* **pid 1 is evokit's anchor** (:func:`evokit.sandbox.enter.anchor`, bind-mounted read-only at
  ``/dev/.evokit-init``) wherever the host can build it (Linux, root, a daemon on a local unix
  socket): non-dumpable, so the agent cannot ptrace it or write its ``/proc/1/mem`` (the
  borrowed-process class), and, as pid 1, unkillable from inside. Elsewhere pid 1 is
  ``docker-init`` with a ``sleep``, which the agent *can* borrow; there :meth:`kill_commands`
  restarts the container, which ends them too.
* **kill before the verifier**: :meth:`kill_commands` SIGKILLs, from the host, every process
  in the container's pids cgroup but the anchor (daemon on this host), then checks that the anchor
  still runs its own program from its own start (:class:`~evokit.sandbox.runtime.SandboxSabotaged`
  if not), or (remote daemon) SIGKILLs pid 1, which ends the container's pid namespace, and starts
  the container again on the same writable layer. No in-container binary takes part, so nothing
  the agent runs inside can survive or veto it, unlike an in-container ``kill``.
* **private verifier**: with a daemon on this host, the tests run in the verifier's own pid and
  mount namespaces beside the container (:mod:`evokit.sandbox.verifier_ns`, entered by
  ``evokit-enter`` through the anchor's pidfd as on the local sandbox), so the shared verifier
  keeps the agent's processes running, as Harbor does, and reads the reward from a tmpfs only the
  host holds. **Gap:** with a remote daemon there is no such namespace: the shared verifier kills
  every agent process first and runs the tests in the container (:func:`evokit.verify.trial.run_tests`).
  The verifier's processes run under evokit's keyring filter and Docker's capability set, not
  Docker's own seccomp profile (they are not started by the daemon).
* **Docker API errors are sandbox errors**: a container the agent brought down (OOM, its pid 1
  gone) makes the daemon answer 409/500; each such answer becomes a
  :class:`~evokit.sandbox.runtime.SandboxError` with the daemon's words, which trials and rollouts
  score as the agent's failure (reward 0), never a crash of the run or a masked rollout.
* **no host-side extraction of agent archives**: ``get_archive`` returns a tar stream the agent
  shaped (links, names). :meth:`read_file` only reads one regular member's bytes in memory;
  :meth:`download_dir` unpacks in a throwaway *helper container* of the task's pristine image
  (no network, no capabilities but the few ``tar`` needs, read-only root) whose only host
  path is the target dir; inside it, every symlink and set-id bit is removed before the helper
  exits, so no link reaches the host (where a link leads is decided by the kernel that follows
  it, which no check of its text or in another filesystem can stand in for; the local sandbox
  copies links to in-tree files as files, this backend drops them). Python's ``tarfile`` never
  extracts it on the host.
* **teardown**: containers are removed with SIGKILL: no 10 s wait for a pid 1 that ignores SIGTERM.

Other gaps, stated: the daemon is root on the host (a container escape is a daemon bug, not
ours to close); timed-out commands are killed by host pid only when the daemon is local
(on Docker Desktop the timed-out process runs on until :meth:`kill_commands`/:meth:`stop`).
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import signal
import socket
import struct
import sys
import tarfile
import threading
import time
import uuid
from pathlib import Path, PurePosixPath

from evokit.sandbox.docker_engine import LABEL, client
from evokit.sandbox.docker_image import DockerImage
from evokit.sandbox.process import TIMEOUT_EXIT_CODE, ExecResult, HeadTail
from evokit.sandbox.runtime import LOG_DIRS, SandboxError, check_spared, process_identity, tar_bytes
from evokit.sandbox.verifier_ns import VerifierNamespace
from evokit.tasks.limits import Limits

#: Where the anchor binary is bind-mounted in the container (read-only, on the container's /dev tmpfs:
#: nothing is added to its root filesystem).
ANCHOR_TARGET = "/dev/.evokit-init"


@contextlib.contextmanager
def _api_errors(what: str):
    """Turn the daemon's error answers (409: the container is not running, 500: exec failed...)
    into :class:`SandboxError`: within the agent's reach, so scored, never a crash of the run."""
    import docker

    try:
        yield
    except docker.errors.APIError as e:
        raise SandboxError(f"{what}: {e.explanation or e}") from None

#: The task image's tar, sh and find unpack downloads in the helper container; tar as root
#: needs these to create files and dirs it does not own (nothing else: no chown, no setid).
_HELPER_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER"]
_UNPACK = r"""
tar -x -f - -C /out --no-same-owner --no-same-permissions || echo "evokit: some members were not unpacked" >&2
find /out -type l -exec rm -f -- {} +
find /out -perm /6000 -exec chmod ug-s {} +
"""


class _Frames:
    """Reads a hijacked exec stream: the bytes ``http.client`` already buffered, then the socket.

    docker-py hands out the raw socket *under* the buffered reader that parsed the ``101``
    response. When the command's first frames arrive before the client reads that response (a
    loaded host: the client is descheduled between sending the request and reading the reply),
    the reader's first fill takes them with the headers, and a read from the raw socket alone
    starts after them: the output is lost without an error (docker/docker-py#2042). Those
    buffered bytes are taken first here, with the socket non-blocking, so nothing waits.
    """

    def __init__(self, sock_io) -> None:
        self.sock = sock_io._sock if hasattr(sock_io, "_sock") else sock_io
        self._pending = bytearray()
        response = getattr(sock_io, "_response", None)
        reader = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
        if isinstance(reader, io.BufferedReader) and isinstance(self.sock, socket.socket):
            timeout = self.sock.gettimeout()
            self.sock.settimeout(0.0)
            try:  # the buffer's bytes, or what the socket has now; never a blocking read
                self._pending += reader.peek()
            except OSError:
                pass
            finally:
                self.sock.settimeout(timeout)

    def read_exact(self, n: int, deadline: float | None) -> bytes | None:
        """``n`` bytes; fewer at the end of the stream (``None`` if none); TimeoutError at ``deadline``."""
        buf = bytearray(self._pending[:n])
        del self._pending[:n]
        while len(buf) < n:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                self.sock.settimeout(min(left, 1.0))
            try:
                chunk = self.sock.recv(n - len(buf))
            except TimeoutError:
                continue
            if not chunk:
                return None if not buf else bytes(buf)
            buf += chunk
        return bytes(buf)


class DockerSandbox:
    """One container over a :class:`DockerImage`, with :class:`~evokit.sandbox.runtime.Sandbox`'s API.

    Args are the local sandbox's: ``network`` (public) or not, ``limits``, default ``workdir``
    and extra ``env``. ``docker_client`` defaults to one from the environment (``DOCKER_HOST``).
    """

    def __init__(self, image: DockerImage, *, network: bool = False, limits: Limits = Limits(),
                 workdir: str | None = None, env: dict[str, str] | None = None, docker_client=None):
        self.image, self.network, self.limits = image, network, limits
        self.workdir = workdir or image.workdir or "/"
        self.env = {**image.env, **(env or {})}
        self.id = uuid.uuid4().hex[:12]
        self._client = docker_client
        self._container = None
        self._own: set[int] | None = None
        self._anchored = False  # pid 1 is evokit's anchor (see the module docstring)
        self._spared: dict[int, tuple[str, tuple[int, int, int] | None]] = {}
        self._pidfd: int | None = None
        self._verifiers: list[VerifierNamespace] = []
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- lifecycle
    @property
    def _api(self):
        if self._client is None:
            self._client = client()
        return self._client.api

    #: Attempts at a container whose setup command succeeds. On this project's machine Docker
    #: 20.10 now and then starts a container whose root looks empty (``sleep``/``sh`` not found,
    #: exit 127; cause not found, see docs/container-engines.md); a fresh container works.
    START_ATTEMPTS = 3

    def start(self) -> DockerSandbox:
        errors = []
        for _ in range(self.START_ATTEMPTS):
            try:
                return self._start_once()
            except SandboxError as e:
                errors.append(str(e))
                if "failed to start" in str(e):  # the daemon refused the container: no retry helps
                    break
        raise SandboxError(errors[-1] + (f" (after {len(errors)} attempts)" if len(errors) > 1 else ""))

    def _anchor_path(self) -> str | None:
        """The host's anchor binary when pid 1 can be it: Linux, root, a daemon on a local unix socket
        (whose bind mounts name this host's files), and a C compiler that built it."""
        if sys.platform != "linux" or os.geteuid() != 0 or self._api.base_url != "http+docker://localhost":
            return None
        from evokit.sandbox import enter

        try:
            return str(enter.anchor())
        except Exception:  # noqa: BLE001 - no compiler: docker-init and a sleep instead (stated gap)
            return None

    def _start_once(self) -> DockerSandbox:
        import docker

        self.id = uuid.uuid4().hex[:12]
        lim = self.limits
        anchor = self._anchor_path()
        kwargs = dict(
            image=self.image.tag, entrypoint=["sleep", "infinity"], command=[], init=True, detach=True,
            hostname="sandbox", network_mode="bridge" if self.network else "none",
            security_opt=["no-new-privileges"], labels={LABEL: "sandbox", f"{LABEL}.id": self.id},
            name=f"evokit-{self.id}", environment=self.env, user="root",
        )
        if anchor is not None:
            kwargs.update(entrypoint=[ANCHOR_TARGET], init=False,
                          volumes={anchor: {"bind": ANCHOR_TARGET, "mode": "ro"}})
        if lim.memory_mb:
            kwargs.update(mem_limit=f"{lim.memory_mb}m", memswap_limit=f"{lim.memory_mb}m")
        if lim.cpus:
            kwargs["nano_cpus"] = int(lim.cpus * 1e9)
        if lim.pids:
            kwargs["pids_limit"] = lim.pids
        self._api  # noqa: B018 (connects, raising EngineUnavailableError with advice)
        try:
            self._container = self._client.containers.create(**kwargs)
            self._container.start()
        except docker.errors.APIError as e:
            self.stop()
            raise SandboxError(f"docker container failed to start: {e.explanation or e}") from None
        self._own, self._anchored, self._spared = None, anchor is not None, {}
        if self._anchored:
            self._await_anchor()
        elif self._cgroup_procs() is not None:  # before any command: pid 1's only child is its sleep
            for _ in range(100):
                pid1 = int(self._api.inspect_container(self._container.id)["State"]["Pid"])
                if Path(f"/proc/{pid1}/task/{pid1}/children").read_text().split():
                    self._own_pids()
                    break
                time.sleep(0.005)
        setup = ("mkdir -p " + " ".join([*LOG_DIRS, shlex.quote(self.workdir)]) + " && chmod 777 "
                 + " ".join(LOG_DIRS))
        try:
            res = self.exec(["sh", "-c", setup], user="root", cwd="/", timeout_sec=60)
        except SandboxError as e:
            res = ExecResult(stdout="", stderr=str(e), return_code=-1)
        if not res.ok:
            try:
                state = self._api.inspect_container(self._container.id)["State"]
                logs = self._api.logs(self._container.id).decode(errors="replace").strip()
            except Exception:
                state, logs = {}, ""
            self.stop()
            raise SandboxError(f"sandbox setup failed in {self.image.tag} (exit {res.return_code}): "
                               f"{res.stderr.strip() or res.stdout.strip()} {logs[-500:]} "
                               f"[container {state.get('Status')}, exit {state.get('ExitCode')}]")
        return self

    def _await_anchor(self) -> None:
        """Wait until the anchor is non-dumpable (it says "ready" only after that) and record who it is."""
        for _ in range(1000):
            if b"ready" in self._api.logs(self._container.id, stdout=True, stderr=False):
                break
            time.sleep(0.005)
        else:
            raise SandboxError("the container's anchor never became ready")
        pid1 = int(self._api.inspect_container(self._container.id)["State"]["Pid"])
        identity = process_identity(pid1)
        anchor = os.stat(self._anchor_path() or "/")
        if identity is not None and identity[:2] == (anchor.st_dev, anchor.st_ino) and self._uid_map_is_identity(pid1):
            # The daemon's pids are this host's: the private verifier and the spared-process check apply.
            self._spared = {pid1: ("the container's anchor (pid 1)", identity)}
            if self._pidfd is not None:  # a restart (kill_commands with the pids out of view)
                os.close(self._pidfd)
            self._pidfd = os.pidfd_open(pid1)

    @staticmethod
    def _uid_map_is_identity(pid: int) -> bool:
        """No user-namespace remapping (``userns-remap``): the verifier's root is the container's root."""
        try:
            return Path(f"/proc/{pid}/uid_map").read_text().split() == ["0", "0", "4294967295"]
        except OSError:
            return False

    @property
    def private_verifier(self) -> bool:
        """Whether the verifier can run in private namespaces beside this container (a daemon on this host)."""
        return self._pidfd is not None and self.running

    @property
    def running(self) -> bool:
        if self._container is None:
            return False
        try:
            return self._api.inspect_container(self._container.id)["State"]["Running"]
        except Exception:
            return False

    # ---------------------------------------------------------------- the verifier's side
    def enter_target(self) -> tuple[int, int, list[Path]]:
        """pidfd of the anchor, a new fd of the container's root, its cgroup.procs (:class:`VerifierNamespace`)."""
        if self._pidfd is None:
            raise SandboxError("no private verifier for this container (its daemon is not on this host)")
        try:
            signal.pidfd_send_signal(self._pidfd, 0)
        except ProcessLookupError:
            raise SandboxError("the container's pid 1 is gone") from None
        return self._pidfd, self.open_root(), self.cgroup_procs()

    def cgroup_procs(self) -> list[Path]:
        procs = self._cgroup_procs()
        if procs is None:
            raise SandboxError("the container's cgroup is gone (it stopped)")
        return [procs]

    def shell_argv(self, command: str) -> list[str]:
        return ["bash", "-c", command]

    def verifier_namespace(self, size_bytes: int | None = None) -> VerifierNamespace:
        """A started :class:`~evokit.sandbox.verifier_ns.VerifierNamespace` beside the container (the
        caller closes it; :meth:`stop` does at the latest). ``size_bytes`` caps each of its two tmpfs."""
        if not self.private_verifier:
            raise SandboxError("no private verifier for this container (not running, or a remote daemon)")
        verifier = VerifierNamespace(self, size_bytes=size_bytes or 1 << 30)
        with self._lock:
            self._verifiers = [v for v in self._verifiers if not v.closed] + [verifier]
        return verifier.start()

    def check_spared(self) -> None:
        """:class:`SandboxSabotaged` unless the anchor still runs its own program from its own start."""
        check_spared(self._spared)

    def kill_commands(self, rounds: int = 50) -> int:
        """End every process that commands started (daemons too); keep the container and its files.

        With a daemon on this host: SIGKILL, from the host, to every pid in the container's pids
        cgroup except pid 1 (``docker-init``) and its ``sleep`` (the local sandbox's way; a process
        cannot leave its cgroup without ``CAP_SYS_ADMIN``). Otherwise (remote daemon): SIGKILL to
        pid 1, which ends the whole pid namespace, and start the container again on the same
        writable layer. Neither uses a binary inside the container. Returns how many it killed.
        """
        if self._container is None:
            raise SandboxError("kill_commands on a sandbox that is not running")
        if not self.running:
            raise SandboxError("the container is not running: its pid 1 died (killed, or out of memory)")
        procs = self._cgroup_procs()
        if procs is None:
            try:
                n = max(len(self._api.top(self._container.id).get("Processes") or []) - 2, 0)
            except Exception:
                n = 0
            with _api_errors("restarting the container to end its processes failed"):
                self._api.kill(self._container.id, signal="SIGKILL")
                self._api.wait(self._container.id, timeout=60)
                self._api.start(self._container.id)
            self._own = None
            if self._anchored:
                self._await_anchor()
            return n
        own = self._own_pids()
        killed = 0
        for _ in range(rounds):  # again: a process may fork while its siblings die
            pids = set(map(int, procs.read_text().split())) - own
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
            time.sleep(0.005)
        check_spared(self._spared)
        return killed

    def _own_pids(self) -> set[int]:
        """Host pids of the container itself: the anchor, or ``docker-init`` and its ``sleep`` (recorded once)."""
        if getattr(self, "_own", None) is None:
            with _api_errors("the container could not be inspected"):
                pid1 = int(self._api.inspect_container(self._container.id)["State"]["Pid"])
            kids = [] if self._anchored else Path(f"/proc/{pid1}/task/{pid1}/children").read_text().split()
            self._own = {pid1, *map(int, kids[:1])}
        return self._own

    def _cgroup_procs(self) -> Path | None:
        """The container's ``cgroup.procs`` on this host (pids cgroup), or None (remote daemon)."""
        cid = self._container.id
        try:
            pid1 = int(self._api.inspect_container(cid)["State"]["Pid"])
            lines = Path(f"/proc/{pid1}/cgroup").read_text().splitlines()
        except (OSError, KeyError, ValueError, TypeError):
            return None
        for line in lines:
            _, names, rel = line.split(":", 2)
            controllers = names.split(",") if names else []
            if cid not in rel or (controllers and "pids" not in controllers):
                continue  # cgroup v1: the pids hierarchy; v2: the unified one (no names)
            procs = Path("/sys/fs/cgroup", *(["pids"] if controllers else []), rel.lstrip("/"), "cgroup.procs")
            if procs.is_file():
                return procs
        return None

    def stop(self) -> None:
        """Remove the container with SIGKILL (idempotent), and any verifier namespaces beside it."""
        with self._lock:
            for verifier in self._verifiers:
                verifier.close()
            self._verifiers.clear()
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
            if self._container is not None:
                try:
                    self._api.remove_container(self._container.id, force=True, v=True)
                except Exception:
                    pass
                self._container = None

    def __enter__(self) -> DockerSandbox:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---------------------------------------------------------------- commands
    def exec(self, command: str | list[str], *, cwd: str | None = None, env: dict[str, str] | None = None,
             timeout_sec: float | None = None, user: str | int | None = None, stdin: bytes | None = None,
             max_output_bytes: int = 4 * 1024 * 1024, keep_bytes: bool = False) -> ExecResult:
        """Run ``command`` (bash string or argv) in the container; never raises on failure."""
        if self._container is None:
            raise SandboxError("exec on a sandbox that is not running (start() it, or it was stopped)")
        argv = command if isinstance(command, list) else ["bash", "-c", command]
        user = self.image.user if user is None else str(user)
        merged = {**self.env, **(env or {})}
        merged.setdefault("HOME", "/root")
        t0 = time.monotonic()
        import docker

        try:
            exec_id = self._api.exec_create(self._container.id, argv, stdout=True, stderr=True,
                                            stdin=stdin is not None, environment=merged,
                                            workdir=cwd or self.workdir, user=user or "")["Id"]
            sock_io = self._api.exec_start(exec_id, socket=True)
        except docker.errors.APIError as e:  # the container died (the agent killed pid 1, OOM)
            raise SandboxError(f"exec in the container failed: {e.explanation or e}") from None
        frames = _Frames(sock_io)
        sock = frames.sock
        writer = None
        if stdin is not None:
            def feed():
                try:
                    sock.sendall(stdin)
                    sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass  # the command exited without reading all of it
            writer = threading.Thread(target=feed, daemon=True)
            writer.start()
        out, err = HeadTail(max_output_bytes), HeadTail(max_output_bytes)
        deadline = None if timeout_sec is None else t0 + timeout_sec
        timed_out = False
        try:
            while True:
                header = frames.read_exact(8, deadline)
                if header is None or len(header) < 8:
                    break
                kind, size = header[0], struct.unpack(">I", header[4:])[0]
                payload = frames.read_exact(size, deadline) or b""
                (err if kind == 2 else out).add(payload)
        except TimeoutError:
            timed_out = True
            self._kill_exec(exec_id)
        finally:
            sock.close()
            sock_io.close()
        with _api_errors("the daemon lost the command (the container died?)"):
            info = self._api.exec_inspect(exec_id)
            for _ in range(50):
                if not info.get("Running"):
                    break
                time.sleep(0.01)
                info = self._api.exec_inspect(exec_id)
        code = TIMEOUT_EXIT_CODE if timed_out else (info.get("ExitCode") if info.get("ExitCode") is not None else -1)
        raw = out.raw()
        return ExecResult(stdout=raw.decode("utf-8", errors="replace"), stderr=err.raw().decode("utf-8", errors="replace"),
                          return_code=code, timed_out=timed_out, duration_sec=time.monotonic() - t0,
                          truncated_bytes=out.dropped + err.dropped, stdout_bytes=raw if keep_bytes else b"")

    def _kill_exec(self, exec_id: str) -> None:
        """Kill a timed-out command and its descendants, by host pid, when the daemon is local.

        A pid is signalled only if ``/proc/<pid>/cgroup`` names this container: with a remote
        daemon (Docker Desktop's VM) the pids are not ours and nothing is killed here.
        """
        try:
            pid = self._api.exec_inspect(exec_id).get("Pid") or 0
        except Exception:  # noqa: BLE001 - the container is gone: nothing left to kill
            return
        cid = self._container.id
        try:
            rows = self._api.top(cid, ps_args="-eo pid,ppid").get("Processes") or []
        except Exception:
            rows = []
        children: dict[int, list[int]] = {}
        for row in rows:
            try:
                children.setdefault(int(row[1]), []).append(int(row[0]))
            except (ValueError, IndexError):
                continue
        todo, victims = [pid] if pid else [], []
        while todo:
            p = todo.pop()
            victims.append(p)
            todo.extend(children.get(p, []))
        for p in victims:
            try:
                if cid in Path(f"/proc/{p}/cgroup").read_text():
                    os.kill(p, signal.SIGKILL)
            except (OSError, ValueError):
                pass

    def open_root(self) -> int:
        """An ``O_PATH`` fd of the container's ``/``, for :mod:`evokit.sandbox.transfer` (caller closes).

        What the separate verifier copies the agent's work with. Taken through
        ``/proc/<pid 1>/root``, so only with a daemon on this host; the pid is checked to be this
        container's (its cgroup names the container) before and after the open, so a recycled
        pid never hands out another root. **Gap:** with a remote daemon (Docker Desktop's VM)
        this raises: use ``environment_mode = "shared"`` there.
        """
        if self._container is None:
            raise SandboxError("file transfer on a sandbox that is not running (start() it, or it was stopped)")
        cid = self._container.id

        def pid1() -> int:
            with _api_errors("the container could not be inspected"):
                state = self._api.inspect_container(cid)["State"]
            if not state.get("Running") or not state.get("Pid"):
                raise SandboxError("the container is not running; it cannot be read")
            return int(state["Pid"])

        def ours(pid: int) -> bool:
            try:
                return cid in Path(f"/proc/{pid}/cgroup").read_text()
            except OSError:
                return False

        pid = pid1()
        if not ours(pid):
            raise SandboxError("the Docker daemon is not on this host (its container pids are not ours): "
                               "the separate verifier cannot copy files; use environment_mode = \"shared\"")
        fd = os.open(f"/proc/{pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        if not ours(pid) or pid1() != pid:
            os.close(fd)
            raise SandboxError("the container's pid 1 changed while its root was opened")
        return fd

    # ---------------------------------------------------------------- files
    def _put(self, target_dir: str, payload: bytes) -> None:
        """``put_archive`` into ``target_dir``, creating it (the daemon unpacks, inside the container)."""
        parts = PurePosixPath(target_dir).parts[1:]
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for i in range(len(parts)):
                info = tarfile.TarInfo("/".join(parts[: i + 1]))
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
        if parts:
            self._api.put_archive(self._container.id, "/", buf.getvalue())
        if not self._api.put_archive(self._container.id, target_dir, payload):
            raise SandboxError(f"upload to {target_dir} failed")

    def upload_file(self, source: str | Path, target: str) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(Path(source), arcname=PurePosixPath(target).name)
        self._put(str(PurePosixPath(target).parent), buf.getvalue())

    def upload_dir(self, source: str | Path, target: str) -> None:
        """Copy the *contents* of ``source`` into ``target`` (created if missing)."""
        self._put(target, tar_bytes(source))

    def write_file(self, target: str, data: bytes | str, mode: int = 0o644) -> None:
        data = data.encode() if isinstance(data, str) else data
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(PurePosixPath(target).name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
        self._put(str(PurePosixPath(target).parent), buf.getvalue())

    def _archive(self, source: str, max_bytes: int) -> bytes:
        import docker

        try:
            stream, _ = self._api.get_archive(self._container.id, source)
        except docker.errors.NotFound:
            raise FileNotFoundError(f"{source} does not exist in the sandbox") from None
        buf = bytearray()
        for chunk in stream:
            buf += chunk
            if len(buf) > max_bytes + (1 << 20):
                raise SandboxError(f"{source} is larger than {max_bytes} bytes; not downloaded")
        return bytes(buf)

    def read_file(self, source: str, max_bytes: int = 64 * 1024 * 1024) -> bytes:
        """The bytes of one regular file (read from the tar stream in memory; nothing is extracted)."""
        with tarfile.open(fileobj=io.BytesIO(self._archive(source, max_bytes)), mode="r:") as tar:
            member = tar.next()
            if member is None or not member.isfile():
                raise FileNotFoundError(f"{source} is not a regular file in the sandbox")
            return tar.extractfile(member).read()

    def download_file(self, source: str, target: str | Path, max_bytes: int = 1 << 30) -> None:
        target = Path(target)
        data = self.read_file(source, max_bytes=max_bytes)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    def copy_work_to(self, dst, paths, *, max_bytes: int) -> None:
        """The separate verifier's copy, as the local sandbox does it: host fds of both roots
        (:meth:`open_root`, so a daemon on this host; a remote one raises :class:`SandboxError`)."""
        from evokit.sandbox.transfer import copy_between

        copy_between(self, dst, paths, max_bytes=max_bytes)

    def download_dir(self, source: str, target: str | Path, max_bytes: int = 1 << 30) -> None:
        """Copy the contents of ``source`` to the host dir ``target``, unpacked in a helper container.

        The helper runs the task's pristine image (not the agent's container), with no network,
        a read-only root, three capabilities and ``target`` as its only host path. Every symlink
        and set-id bit is removed there, so no link lands on the host (the host-write class).
        """
        target = Path(target).resolve()
        target.mkdir(parents=True, exist_ok=True)
        src = source.rstrip("/") or "/"
        payload = self._archive(src + "/.", max_bytes)
        helper = self._client.containers.create(
            self.image.tag, entrypoint=["sh", "-c", _UNPACK], command=[], user="0:0", stdin_open=True,
            network_mode="none", read_only=True, cap_drop=["ALL"], cap_add=_HELPER_CAPS,
            security_opt=["no-new-privileges"], labels={LABEL: "unpack-helper"},
            volumes={str(target): {"bind": "/out", "mode": "rw"}}, working_dir="/", pids_limit=64,
            mem_limit="256m")
        try:
            sock_io = self._api.attach_socket(helper.id, params={"stdin": 1, "stream": 1, "stdout": 1,
                                                                  "stderr": 1})
            sock = sock_io._sock if hasattr(sock_io, "_sock") else sock_io
            helper.start()
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
            status = helper.wait(timeout=300)
            sock.close()
            if status.get("StatusCode") != 0:
                logs = helper.logs().decode(errors="replace").strip()
                raise SandboxError(f"unpacking {source} failed (exit {status.get('StatusCode')}): {logs[-1000:]}")
        finally:
            helper.remove(force=True)
