"""From a Harbor task folder to a ready sandbox: image, limits and network from ``task.toml``, on the
chosen backend (:mod:`evokit.sandbox.backend`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harbor.models.task.config import EnvironmentConfig, NetworkMode
from harbor.models.task.task import Task

from evokit.errors import UserError
from evokit.sandbox.backend import SandboxAPI, SandboxBackendError, get_backend
from evokit.sandbox.image import Image
from evokit.sandbox.runtime import SandboxError
from evokit.tasks.folder import open_task
from evokit.tasks.limits import Limits, LimitsError

__all__ = ["SandboxBackendError", "TaskEnvironmentError", "image_for_task", "limits_from_config",
           "network_allowed", "sandbox_for_task"]

#: Used when a task sets no ``memory_mb`` / ``storage_mb`` (Harbor leaves them unset): many
#: sandboxes at once must not be able to take the host's RAM between them.
DEFAULT_MEMORY_MB = 2048
DEFAULT_STORAGE_MB = 2048


class TaskEnvironmentError(UserError, SandboxError):
    """A task's ``[environment]`` that the sandbox cannot honour (limits out of range, an allowlist
    network): the task's mistake, named with its field."""


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


def image_for_task(task: Task | str | Path, log: Callable[[str], None] = lambda s: None, *,
                   backend: str | None = None) -> Image:
    """The task's image, built or pulled by ``backend`` (a registered name; None: ``$EVOKIT_SANDBOX``,
    else ``local``; :mod:`evokit.sandbox.backend`)."""
    task = task if isinstance(task, Task) else open_task(task)
    return get_backend(backend).image_for_task(task, log)


def sandbox_for_task(task: Task | str | Path, *, image: Image | None = None, backend: str | None = None,
                     log: Callable[[str], None] = lambda s: None) -> SandboxAPI:
    """A (not yet started) sandbox of ``backend`` for ``task`` with its limits, network and workdir.

    ``image`` must come from the same backend (:func:`image_for_task` with the same ``backend``).
    """
    task = task if isinstance(task, Task) else open_task(task)
    env = task.config.environment
    chosen = get_backend(backend)
    network, limits = network_allowed(env), limits_from_config(env, where=task.paths.config_path)
    return chosen.sandbox(image or chosen.image_for_task(task, log), network=network, limits=limits,
                          workdir=env.workdir, env=dict(env.env))
