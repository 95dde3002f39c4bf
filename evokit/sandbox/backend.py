"""Sandbox backends as plug-ins: what a sandbox is to evokit's loops, and where one comes from.

Why: the loops that score an agent (:mod:`evokit.verify.trial`, :mod:`evokit.rollout`, the TRL
environment :mod:`evokit.trl_trainer.env`, the hack gate) drive a sandbox through one small surface,
and the reward is only as trustworthy as the backend that honours it (EE §4.1: verification in an
isolated environment; GenEnv §3: the simulator's rewards). :class:`SandboxAPI` writes that surface
down, :class:`SandboxBackend` says how a backend turns a task's image into such a sandbox, and the
registry below chooses one by name, so a new backend (a remote VM service, Podman, a microVM) is
one module plus an entry point, and ``tests/test_sandbox_backends.py`` runs the same battery on it
without an edit of any loop.

Choosing a backend: by argument (``sandbox_for_task(task, backend="docker")``,
``VerifyConfig.backend``, ``evokit verify --sandbox docker``), else ``$EVOKIT_SANDBOX``, else
``local``. Built-ins: ``local`` (:class:`evokit.sandbox.runtime.Sandbox`, bubblewrap, Linux and
root) and ``docker`` (:class:`evokit.sandbox.docker_backend.DockerSandbox`, any Docker daemon).
Third-party ones register in the entry-point group :data:`ENTRY_POINTS`::

    [project.entry-points."evokit.sandboxes"]
    firecracker = "my_pkg.backend:FirecrackerBackend"   # a class (made with no arguments) or an instance

The separate verifier's two host-side needs, and how a backend meets them:

* **the copy of the agent's work** into the fresh verifier sandbox goes through
  :meth:`SandboxAPI.copy_work_to`. The built-ins use :func:`evokit.sandbox.transfer.copy_between`,
  which walks both roots from the host (``openat2(RESOLVE_IN_ROOT)`` on an fd of each sandbox's
  root: links resolved inside the agent's sandbox, in-tree links kept, owners and modes kept). A
  backend with no host view of its roots (a remote daemon, a VM) implements it with its own file
  API; :func:`copy_through_host` does it with the protocol's own ``download_dir``/``upload_dir``.
  Stated weaker: links and special files are not carried (the backend's ``download_dir`` decides
  which links it resolves), owners become root and only permission bits travel as the upload keeps them.
* **the private verifier** (:mod:`evokit.sandbox.verifier_ns`: the tests in pid and mount
  namespaces beside the sandbox, ``/tests`` and ``/logs/verifier`` on tmpfs only the host holds)
  needs a host pidfd of the sandbox's pid 1 and an fd of its root. A backend that has them says
  ``private_verifier = True`` and gives :meth:`SandboxAPI.verifier_namespace`; one that has not
  (a remote daemon) says ``False``, and the trial kills every agent process before it runs the
  tests in the sandbox itself (:func:`evokit.verify.trial.run_tests`): the shared mode then cannot
  keep the agent's services running during the tests. Limitation, stated: that private side has no
  backend-neutral form; it exists only where the host sees the sandbox's processes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from importlib import import_module
from importlib.metadata import entry_points
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from evokit.errors import Unavailable
from evokit.sandbox.process import ExecResult
from evokit.sandbox.runtime import SandboxError
from evokit.tasks.limits import Limits

if TYPE_CHECKING:
    from harbor.models.task.task import Task

    from evokit.sandbox.verifier_ns import VerifierNamespace

#: The configuration variable; unset means :data:`DEFAULT_BACKEND`.
SANDBOX_ENV_VAR = "EVOKIT_SANDBOX"
DEFAULT_BACKEND = "local"
#: The entry-point group third-party backends register in (``name = "module:attr"``).
ENTRY_POINTS = "evokit.sandboxes"
#: The built-in backends, imported only when chosen (the Docker SDK is an optional dependency).
BUILTIN_BACKENDS = {"local": "evokit.sandbox.backend:LocalBackend",
                    "docker": "evokit.sandbox.backend:DockerBackend"}


class SandboxBackendError(Unavailable, SandboxError):
    """No sandbox backend of that name (or its plug-in failed to load): the machine's setup, not any task's."""


@runtime_checkable
class SandboxAPI(Protocol):
    """One isolated environment of a task, as the loops use it.

    ``start`` returns the sandbox; ``exec`` never raises for the command's own failure (its exit
    status, output and ``timed_out`` are in the :class:`ExecResult`) and raises
    :class:`SandboxError` when the sandbox is gone; transfers raise ``FileNotFoundError`` for a
    missing source and :class:`SandboxError` for a refused or too large one. ``kill_commands``
    ends every process the agent started, keeping files (before the verifier reads them).
    """

    image: Any
    env: dict[str, str]
    workdir: str
    limits: Limits
    network: bool

    def start(self) -> SandboxAPI: ...
    def stop(self) -> None: ...
    def __enter__(self) -> SandboxAPI: ...
    def __exit__(self, *exc) -> None: ...

    @property
    def running(self) -> bool: ...

    @property
    def private_verifier(self) -> bool:
        """Whether :meth:`verifier_namespace` works here (the host sees the sandbox's pid 1 and root)."""

    def exec(self, command: str | list[str], *, cwd: str | None = None, env: dict[str, str] | None = None,
             timeout_sec: float | None = None, user: str | int | None = None, stdin: bytes | None = None,
             max_output_bytes: int = 4 * 1024 * 1024, keep_bytes: bool = False) -> ExecResult: ...

    def kill_commands(self) -> int: ...

    def upload_file(self, source: str | Path, target: str) -> None: ...
    def upload_dir(self, source: str | Path, target: str) -> None: ...
    def write_file(self, target: str, data: bytes | str, mode: int = 0o644) -> None: ...
    def read_file(self, source: str, max_bytes: int = 64 * 1024 * 1024) -> bytes: ...
    def download_file(self, source: str, target: str | Path, max_bytes: int = 1 << 30) -> None: ...
    def download_dir(self, source: str, target: str | Path, max_bytes: int = 1 << 30) -> None: ...

    def copy_work_to(self, dst: SandboxAPI, paths: Sequence[str], *, max_bytes: int) -> None:
        """Copy the agent's work ``paths`` from this (stopped-commands) sandbox into ``dst`` (module docstring)."""

    def verifier_namespace(self, size_bytes: int | None = None) -> VerifierNamespace:
        """The tests' private namespaces beside this sandbox; only where :attr:`private_verifier`."""


class SandboxBackend(Protocol):
    """Where sandboxes come from: a task's image, and a sandbox over it with the task's settings."""

    name: str

    def image_for_task(self, task: Task, log: Callable[[str], None]) -> Any:
        """Build (cached) or pull the task's image: ``environment/Dockerfile`` or ``[environment].docker_image``."""

    def sandbox(self, image: Any, *, network: bool, limits: Limits, workdir: str | None,
                env: dict[str, str]) -> SandboxAPI:
        """A not yet started sandbox over ``image``: outbound network or only loopback, the
        limits, the default cwd (else the image's) and extra variables over the image's."""


class LocalBackend:
    """The bubblewrap sandbox (:mod:`evokit.sandbox.runtime`): images without Docker, Linux and root."""

    name = "local"

    def image_for_task(self, task: Task, log: Callable[[str], None]) -> Any:
        from evokit.sandbox.image import build_image, pull_image

        if image := task.config.environment.docker_image:
            # A prebuilt image: pulled like a FROM line, with no Dockerfile steps on top.
            return pull_image(image, where=f"{task.paths.config_path}: [environment].docker_image", log=log)
        return build_image(task.paths.environment_dir, step_timeout_sec=task.config.environment.build_timeout_sec,
                           log=log)

    def sandbox(self, image: Any, *, network: bool, limits: Limits, workdir: str | None,
                env: dict[str, str]) -> SandboxAPI:
        from evokit.sandbox.runtime import Sandbox

        return Sandbox(image, network=network, limits=limits, workdir=workdir, env=env)


class DockerBackend:
    """Containers of a Docker daemon (:mod:`evokit.sandbox.docker_backend`), for machines without bwrap."""

    name = "docker"

    def image_for_task(self, task: Task, log: Callable[[str], None]) -> Any:
        from evokit.sandbox.docker_image import build_docker_image, prebuilt_docker_image

        if task.config.environment.docker_image:
            return prebuilt_docker_image(task.config.environment.docker_image, log=log)
        return build_docker_image(task.paths.environment_dir, log=log)

    def sandbox(self, image: Any, *, network: bool, limits: Limits, workdir: str | None,
                env: dict[str, str]) -> SandboxAPI:
        from evokit.sandbox.docker_backend import DockerSandbox

        return DockerSandbox(image, network=network, limits=limits, workdir=workdir, env=env)


def backend_names() -> list[str]:
    """Every registered backend: the built-ins, then the entry points' names (sorted)."""
    plugins = sorted({ep.name for ep in entry_points(group=ENTRY_POINTS)} - set(BUILTIN_BACKENDS))
    return [*BUILTIN_BACKENDS, *plugins]


def configured_backend() -> str:
    """``$EVOKIT_SANDBOX`` (lower case), or :data:`DEFAULT_BACKEND` when unset."""
    return os.environ.get(SANDBOX_ENV_VAR, "").strip().lower() or DEFAULT_BACKEND


def get_backend(name: str | None = None) -> SandboxBackend:
    """The backend ``name``, else the configured one; an unknown name is one line listing the registered ones."""
    chosen = (name.strip().lower() if name else None) or configured_backend()
    if chosen in BUILTIN_BACKENDS:
        module, attr = BUILTIN_BACKENDS[chosen].split(":")
        obj = getattr(import_module(module), attr)
    else:
        found = [ep for ep in entry_points(group=ENTRY_POINTS) if ep.name == chosen]
        if not found:
            what = f"no sandbox backend is named {chosen!r}" if name else \
                f"{SANDBOX_ENV_VAR}={chosen!r} is not a sandbox backend"
            raise SandboxBackendError(f"{what}; use one of: " + ", ".join(backend_names())
                                      + ("" if name else f" (unset means {DEFAULT_BACKEND})"))
        try:
            obj = found[0].load()
        except Exception as e:  # a broken plug-in names itself instead of a traceback from its import
            raise SandboxBackendError(f"the sandbox backend plug-in {chosen!r} ({found[0].value}) failed to load: "
                                      f"{type(e).__name__}: {e}") from e
    backend = obj() if isinstance(obj, type) else obj
    if not callable(getattr(backend, "sandbox", None)) or not callable(getattr(backend, "image_for_task", None)):
        raise SandboxBackendError(f"the sandbox backend {chosen!r} ({type(backend).__name__}) lacks "
                                  "image_for_task() or sandbox(); see evokit.sandbox.backend.SandboxBackend")
    return backend


def copy_through_host(src: SandboxAPI, dst: SandboxAPI, paths: Sequence[str], *, max_bytes: int) -> None:
    """:meth:`SandboxAPI.copy_work_to` for a backend without host fds of its roots: each path is
    downloaded by ``src``'s own API into a private host temp dir and uploaded into ``dst``.

    What exists at a path in ``dst`` is replaced, a path missing in ``src`` is removed from ``dst``
    (the agent's sandbox as it was left, as :func:`evokit.sandbox.transfer.copy_between` does).
    Weaker than that copy, stated in the module docstring: no links, owners root.
    """
    budget = max_bytes
    with tempfile.TemporaryDirectory(prefix="evokit-copy-") as tmp:
        for i, path in enumerate(paths):
            if PurePosixPath(path) == PurePosixPath("/"):
                raise ValueError("copy_through_host cannot copy the whole root '/'; name the agent's paths")
            dst.exec(["rm", "-rf", "--", path], user="root")
            host = Path(tmp, str(i))
            try:
                src.download_dir(path, host, max_bytes=budget)
            except FileNotFoundError:  # not a directory in ``src``: a regular file, or nothing
                shutil.rmtree(host, ignore_errors=True)
                try:
                    src.download_file(path, host, max_bytes=budget)
                except FileNotFoundError:
                    continue  # missing in the agent's sandbox: missing in the verifier's too
                dst.upload_file(host, path)
                budget -= host.stat().st_size
            else:
                dst.upload_dir(host, path)
                budget -= sum(f.stat().st_size for f in host.rglob("*") if f.is_file())
