"""The local sandbox: Dockerfile → cached overlay image → bubblewrap environment.

Public API (the rest is internal):

* :func:`build_image` turns a task's ``environment/`` into an :class:`Image`;
* :class:`Sandbox` runs it: ``start``, ``exec``, upload/download, ``stop``;
* :func:`sandbox_for_task` does both from a Harbor task folder and its ``task.toml``, on the backend
  chosen by name (:mod:`evokit.sandbox.backend`: the Protocol, the registry, plug-ins);
* ``evokit.sandbox:BubblewrapEnvironment`` is the same sandbox as a Harbor
  ``BaseEnvironment`` (``harbor run --env evokit.sandbox:BubblewrapEnvironment``).
"""

from evokit.sandbox.bwrap import SandboxUnavailableError
from evokit.sandbox.dockerfile import DockerfileError
from evokit.sandbox.image import Image, ImageBuildError, build_image, cache_root
from evokit.sandbox.process import ExecResult
from evokit.sandbox.runtime import Sandbox, SandboxError
from evokit.tasks.limits import Limits

__all__ = [
    "DockerfileError", "ExecResult", "Image", "ImageBuildError", "Limits", "Sandbox",
    "SandboxError", "SandboxUnavailableError", "build_image", "cache_root",
]


def __getattr__(name: str):
    # Imported lazily: Harbor's environment base pulls in more than the sandbox needs.
    if name == "BubblewrapEnvironment":
        from evokit.sandbox.harbor_env import BubblewrapEnvironment

        return BubblewrapEnvironment
    raise AttributeError(name)
