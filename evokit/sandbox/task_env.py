"""From a Harbor task folder to a ready sandbox: image, limits and network from ``task.toml``."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from harbor.models.task.config import EnvironmentConfig, NetworkMode
from harbor.models.task.task import Task

from evokit.errors import Unavailable, UserError
from evokit.sandbox.image import Image, build_image, pull_image
from evokit.sandbox.runtime import Sandbox, SandboxError
from evokit.tasks.folder import open_task
from evokit.tasks.limits import Limits, LimitsError

#: Used when a task sets no ``memory_mb`` / ``storage_mb`` (Harbor leaves them unset): many
#: sandboxes at once must not be able to take the host's RAM between them.
DEFAULT_MEMORY_MB = 2048
DEFAULT_STORAGE_MB = 2048


class TaskEnvironmentError(UserError, SandboxError):
    """A task's ``[environment]`` that the sandbox cannot honour (limits out of range, an allowlist
    network): the task's mistake, named with its field."""


class SandboxBackendError(Unavailable, SandboxError):
    """``$EVOKIT_SANDBOX`` names no sandbox backend: the machine's setup, not any task's."""


def limits_from_config(env: EnvironmentConfig, *, pids: int | None = 1024, where: str | Path = "task.toml") -> Limits:
    """Harbor's ``[environment]`` cpus / memory_mb / storage_mb → :class:`Limits` (with defaults).

    Only a field left out gets the default: ``memory_mb = 0`` is an error naming the field
    (taken as the default or as "unlimited", a typo would pass unnoticed), as is anything outside
    :data:`evokit.tasks.limits.LIMIT_RANGES`.
    """
    try:
        return Limits(cpus=env.cpus, memory_mb=DEFAULT_MEMORY_MB if env.memory_mb is None else env.memory_mb,
                      storage_mb=DEFAULT_STORAGE_MB if env.storage_mb is None else env.storage_mb, pids=pids)
    except LimitsError as e:
        raise TaskEnvironmentError(f"{where}: [environment] {e}") from None


def network_allowed(env: EnvironmentConfig) -> bool:
    """``public`` → host network; ``no-network`` → none; ``allowlist`` → refused (not enforceable here)."""
    if env.network_mode == NetworkMode.ALLOWLIST:
        raise TaskEnvironmentError(
            "network_mode='allowlist' cannot be enforced by the local sandbox; "
            "use Harbor's docker backend for this task"
        )
    return env.network_mode == NetworkMode.PUBLIC


#: Where evokit's own loops (verify, rollouts, evolve, train) run their trials: ``local`` (the
#: bubblewrap sandbox, Linux + root) or ``docker`` (:mod:`evokit.sandbox.docker_backend`, any
#: machine with a Docker daemon). The one place this is chosen.
SANDBOX_ENV_VAR = "EVOKIT_SANDBOX"
SANDBOX_BACKENDS = ("local", "docker")


def sandbox_backend() -> str:
    """``$EVOKIT_SANDBOX`` (``local`` when unset); anything else is a :class:`SandboxBackendError`."""
    value = os.environ.get(SANDBOX_ENV_VAR, "").strip().lower() or "local"
    if value not in SANDBOX_BACKENDS:
        raise SandboxBackendError(f"{SANDBOX_ENV_VAR}={value!r} is not a sandbox backend; use one of: "
                                  + ", ".join(SANDBOX_BACKENDS) + " (unset means local)")
    return value


def image_for_task(task: Task | str | Path, log: Callable[[str], None] = lambda s: None) -> Image:
    task = task if isinstance(task, Task) else open_task(task)
    if sandbox_backend() == "docker":
        from evokit.sandbox.docker_image import build_docker_image, prebuilt_docker_image

        if task.config.environment.docker_image:
            return prebuilt_docker_image(task.config.environment.docker_image, log=log)
        return build_docker_image(task.paths.environment_dir, log=log)
    if image := task.config.environment.docker_image:
        # A prebuilt image: pulled like a FROM line, with no Dockerfile steps on top.
        return pull_image(image, where=f"{task.paths.config_path}: [environment].docker_image", log=log)
    return build_image(task.paths.environment_dir, step_timeout_sec=task.config.environment.build_timeout_sec,
                       log=log)


def sandbox_for_task(task: Task | str | Path, *, image: Image | None = None,
                     log: Callable[[str], None] = lambda s: None) -> Sandbox:
    """A (not yet started) :class:`Sandbox` for ``task`` with its limits, network and workdir."""
    task = task if isinstance(task, Task) else open_task(task)
    env = task.config.environment
    if sandbox_backend() == "docker":
        from evokit.sandbox.docker_backend import DockerSandbox

        return DockerSandbox(image or image_for_task(task, log), network=network_allowed(env),
                             limits=limits_from_config(env, where=task.paths.config_path), workdir=env.workdir,
                             env=dict(env.env))
    return Sandbox(image or image_for_task(task, log), network=network_allowed(env),
                   limits=limits_from_config(env, where=task.paths.config_path), workdir=env.workdir, env=dict(env.env))
