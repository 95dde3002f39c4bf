"""From a Harbor task folder to a ready sandbox: image, limits and network from ``task.toml``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harbor.models.task.config import EnvironmentConfig, NetworkMode
from harbor.models.task.task import Task

from evokit.sandbox.cgroup import Limits
from evokit.sandbox.image import Image, build_image
from evokit.sandbox.runtime import Sandbox, SandboxError

#: Used when a task sets no ``memory_mb`` / ``storage_mb`` (Harbor leaves them unset): many
#: sandboxes at once must not be able to take the host's RAM between them.
DEFAULT_MEMORY_MB = 2048
DEFAULT_STORAGE_MB = 2048


def limits_from_config(env: EnvironmentConfig, *, pids: int | None = 1024) -> Limits:
    """Harbor's ``[environment]`` cpus / memory_mb / storage_mb → :class:`Limits` (with defaults)."""
    return Limits(cpus=env.cpus, memory_mb=env.memory_mb or DEFAULT_MEMORY_MB,
                  storage_mb=env.storage_mb or DEFAULT_STORAGE_MB, pids=pids)


def network_allowed(env: EnvironmentConfig) -> bool:
    """``public`` → host network; ``no-network`` → none; ``allowlist`` → refused (not enforceable here)."""
    if env.network_mode == NetworkMode.ALLOWLIST:
        raise SandboxError(
            "network_mode='allowlist' cannot be enforced by the local sandbox; "
            "use Harbor's docker backend for this task"
        )
    return env.network_mode == NetworkMode.PUBLIC


def image_for_task(task: Task | str | Path, log: Callable[[str], None] = lambda s: None) -> Image:
    task = task if isinstance(task, Task) else Task(Path(task))
    if task.config.environment.docker_image:
        raise SandboxError(
            f"{task.paths.config_path}: [environment].docker_image={task.config.environment.docker_image!r} "
            "is a prebuilt registry image, which the local sandbox cannot pull; use Harbor's docker backend"
        )
    return build_image(task.paths.environment_dir, step_timeout_sec=task.config.environment.build_timeout_sec,
                       log=log)


def sandbox_for_task(task: Task | str | Path, *, image: Image | None = None,
                     log: Callable[[str], None] = lambda s: None) -> Sandbox:
    """A (not yet started) :class:`Sandbox` for ``task`` with its limits, network and workdir."""
    task = task if isinstance(task, Task) else Task(Path(task))
    env = task.config.environment
    return Sandbox(image or image_for_task(task, log), network=network_allowed(env),
                   limits=limits_from_config(env), workdir=env.workdir, env=dict(env.env))
