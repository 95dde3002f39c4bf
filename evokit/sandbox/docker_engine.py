"""The Docker daemon and its base images, for the two Docker paths (Harbor's and evokit's).

* :class:`DockerDaemon` answers "is a daemon there?" and, where none is and we are root on
  Linux with Debian's ``docker.io`` (``make engine``), starts ``dockerd`` and later stops it —
  what the tests and ``benchmarks/bench_engines.py`` need on a fresh machine.
* :func:`ensure_debian_base` gives the daemon a ``debian:<suite>-slim`` image without a
  registry: ``docker import`` of the mmdebstrap minbase rootfs that the local sandbox builds
  anyway (:func:`evokit.sandbox.image.ensure_base`). On a machine that reaches Docker Hub a pull
  gives the real image instead; this is for offline machines (like this project's CI).

Why here and not in the tests: a user who selects the Docker backend offline needs the same
base image, and the benchmark needs the same daemon handling as the tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from evokit.errors import Unavailable
from evokit.sandbox.image import DEFAULT_PATH, cache_root, ensure_base

#: Labels evokit puts on what it creates, so a cleanup finds exactly its own objects.
LABEL = "io.evokit"
#: Tags a Debian base gets; ``FROM debian:bookworm-slim`` is what real Terminal-Bench tasks use.
DEBIAN_TAGS = {"bookworm": ("debian:bookworm-slim", "debian:bookworm", "debian:12-slim", "debian:12")}


class EngineUnavailableError(Unavailable, RuntimeError):
    """No Docker daemon is reachable and none could be started; the message says what to do."""


def client(timeout: int = 120):
    """A ``docker.DockerClient`` from the environment (``DOCKER_HOST`` etc.), checked with a ping."""
    import docker  # the SDK is a core dependency, imported late: most of evokit never needs it

    try:
        c = docker.from_env(timeout=timeout)
        c.ping()
        return c
    except Exception as e:  # DockerException, requests' ConnectionError, a missing socket
        where = os.environ.get("DOCKER_HOST") or "the default socket (DOCKER_HOST unset)"
        raise EngineUnavailableError(
            f"no Docker daemon answers at {where} ({type(e).__name__}: {_first_line(e)}); start one "
            "(dockerd, Docker Desktop), point DOCKER_HOST at it, or run `make engine` as root to install "
            "Debian's docker.io; unset EVOKIT_SANDBOX to use the local sandbox instead"
        ) from None


def _first_line(e: BaseException, limit: int = 200) -> str:
    """The first line of ``e``'s message, at most ``limit`` characters (the SDK's are long)."""
    line = (str(e).strip().splitlines() or [""])[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


@dataclass
class DockerDaemon:
    """A running daemon: the one that answers already, else a ``dockerd`` we start (and stop).

    ``started`` says whether we own it. Our daemon logs to ``log_path``; its pidfile is in a
    temp dir, and its data root is Docker's default, so images built once (the imported base,
    the tasks' images) are reused by later runs instead of being rebuilt by every test session.
    """

    started: bool = False
    log_path: Path | None = None
    _proc: subprocess.Popen | None = field(default=None, repr=False)
    _tmp: Path | None = field(default=None, repr=False)

    @classmethod
    def ensure(cls, wait_sec: float = 60.0) -> DockerDaemon:
        try:
            c = client(timeout=10)
            private_data_root(c)
            c.close()
            return cls()
        except EngineUnavailableError as first:
            dockerd = shutil.which("dockerd")
            if dockerd is None or os.geteuid() != 0 or os.environ.get("DOCKER_HOST"):
                raise EngineUnavailableError(
                    f"{first}. (evokit starts dockerd itself only as root with Debian's docker.io "
                    "installed and no DOCKER_HOST set)"
                ) from None
        tmp = Path(tempfile.mkdtemp(prefix="evokit-dockerd-"))
        log = tmp / "dockerd.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([dockerd, "--pidfile", str(tmp / "dockerd.pid")], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        daemon = cls(started=True, log_path=log, _proc=proc, _tmp=tmp)
        deadline = time.monotonic() + wait_sec
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            try:
                c = client(timeout=5)
                private_data_root(c)
                c.close()
                return daemon
            except EngineUnavailableError:
                time.sleep(0.3)
        tail = log.read_text(errors="replace")[-2000:]
        daemon.stop()
        raise EngineUnavailableError(f"dockerd did not come up within {wait_sec:.0f}s; its log ends:\n{tail}")

    def stop(self) -> None:
        """Stop the daemon if we started it (SIGTERM: it stops its containers, then exits)."""
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def private_data_root(docker_client) -> bool:
    """Make a local daemon's data root a *private* mount (as root); return whether it changed.

    dockerd makes its data root (``/var/lib/docker``) a shared mount, so every container's
    overlay under it is in a peer group. A process that copies the host's mount namespace without
    making it private and then detaches mounts (slirp4netns 1.2.0's ``--enable-sandbox``; found
    here, fixed in :mod:`evokit.sandbox.netns`, but any old or third-party copy does it) then
    unmounts the overlays on the host, and running containers lose their root ("unable to find
    user root", exit 127). Private, those unmounts stay in that namespace. What is lost: binds from
    under the data root with ``rshared``/``rslave`` propagation, which evokit never uses.
    """
    if os.geteuid() != 0:
        return False
    root = docker_client.info().get("DockerRootDir") or "/var/lib/docker"
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return False
    shared = [ln for ln in lines if ln.split()[4] == root and "shared:" in ln.split(" - ")[0]]
    if not shared:
        return False  # not a mount here (remote daemon), or private already
    return subprocess.run(["mount", "--make-rprivate", root], capture_output=True).returncode == 0


def ensure_debian_base(docker_client, suite: str = "bookworm", log=lambda s: None) -> list[str]:
    """Tag the mmdebstrap ``suite`` base as ``debian:<suite>-slim`` (and friends) if missing.

    Idempotent: tags that exist (pulled, or imported before) are left alone. The import runs
    ``tar`` on the host over the rootfs *we* built (never over anything an agent wrote).
    Returns the tags it created.
    """
    import docker

    tags = DEBIAN_TAGS.get(suite)
    if tags is None:
        raise ValueError(f"no offline base for Debian suite {suite!r} (known: {', '.join(DEBIAN_TAGS)})")
    missing = []
    for tag in tags:
        try:
            docker_client.images.get(tag)
        except docker.errors.ImageNotFound:
            missing.append(tag)
    if not missing:
        return []
    root = cache_root()
    rootfs = root / ensure_base(suite, root, log)
    log(f"docker import of the {suite} minbase rootfs as {', '.join(missing)}")
    with tempfile.TemporaryDirectory(prefix="evokit-import-") as tmp:
        archive = Path(tmp) / "rootfs.tar"
        subprocess.run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(archive), "."], check=True)
        repo, _, tag = missing[0].partition(":")
        docker_client.api.import_image_from_file(
            str(archive), repository=repo, tag=tag,
            changes=[f"ENV PATH={DEFAULT_PATH}", 'CMD ["bash"]', f"LABEL {LABEL}.base={suite}"])
    image = docker_client.images.get(missing[0])
    for other in missing[1:]:
        r, _, t = other.partition(":")
        image.tag(r, t)
    return missing
