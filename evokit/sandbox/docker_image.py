"""A task's image in the Docker daemon, for evokit's Docker backend (:mod:`evokit.sandbox.docker_backend`).

``environment/Dockerfile`` is built by the daemon and tagged by the content of its build context,
so an unchanged context is built once; ``[environment].docker_image`` is the daemon's copy of that
reference, pulled when it has none. A ``FROM debian:*`` base the daemon lacks is imported from the
mmdebstrap rootfs on machines that can make one (offline machines, like this project's CI:
:func:`evokit.sandbox.docker_engine.ensure_debian_base`).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from evokit.sandbox.docker_engine import LABEL, client, ensure_debian_base
from evokit.sandbox.image import ImageBuildError, debian_suite

_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class DockerImage:
    """A task image in the daemon: its tag and the config that ``exec`` needs by default."""

    tag: str
    workdir: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    user: str | None = None


def _context_key(env_dir: Path) -> str:
    """Content hash of the build context (names, modes, bytes): same context → same tag."""
    h = hashlib.sha256()
    for p in sorted(env_dir.rglob("*")):
        rel = p.relative_to(env_dir).as_posix()
        if p.is_symlink():
            h.update(f"L {rel} {os.readlink(p)}\0".encode())
        elif p.is_file():
            h.update(f"F {rel} {p.stat().st_mode & 0o7777:o}\0".encode())
            h.update(hashlib.sha256(p.read_bytes()).digest())
        elif p.is_dir():
            h.update(f"D {rel}\0".encode())
    return h.hexdigest()[:20]


def build_docker_image(env_dir: str | Path, *, log: Callable[[str], None] = lambda s: None,
                       docker_client=None) -> DockerImage:
    """Build ``env_dir/Dockerfile`` with the daemon (cached by content), return its config.

    ``FROM debian:*`` bases missing from the daemon are imported from the mmdebstrap rootfs
    when this machine can make one (offline machines); any other base is pulled by the daemon.
    """
    import docker

    env_dir = Path(env_dir)
    dockerfile = env_dir / "Dockerfile"
    if not dockerfile.is_file():
        raise ImageBuildError(f"{dockerfile} not found: the Docker backend builds a task's environment/Dockerfile")
    c = docker_client or client()
    for ref in _FROM.findall(dockerfile.read_text()):
        if ref.split("/")[-1].startswith("debian:") or ref.startswith("debian@"):
            try:
                c.images.get(ref)
            except docker.errors.ImageNotFound:
                suite = debian_suite(ref, str(dockerfile))
                if _can_make_base():
                    ensure_debian_base(c, suite, log)
    tag = f"evokit-task:{_context_key(env_dir)}"
    try:
        image = c.images.get(tag)
    except docker.errors.ImageNotFound:
        log(f"docker build {env_dir} -> {tag}")
        try:
            image, _ = c.images.build(path=str(env_dir), tag=tag, rm=True, forcerm=True,
                                      labels={LABEL: "task-image"})
        except docker.errors.BuildError as e:
            lines = [str(chunk.get("stream") or chunk.get("error") or "").rstrip() for chunk in e.build_log]
            tail = "\n".join(line for line in lines if line)[-3000:]
            raise ImageBuildError(f"docker build of {dockerfile} failed: {e.msg}\n{tail}") from None
        except docker.errors.APIError as e:
            raise ImageBuildError(f"docker build of {dockerfile} failed: {e.explanation or e}") from None
    return _image_config(tag, image)


def prebuilt_docker_image(ref: str, *, log: Callable[[str], None] = lambda s: None,
                          docker_client=None) -> DockerImage:
    """``[environment].docker_image``: the daemon's copy of ``ref``, pulled if it has none."""
    import docker

    c = docker_client or client()
    try:
        image = c.images.get(ref)
    except docker.errors.ImageNotFound:
        log(f"docker pull {ref}")
        try:
            image = c.images.pull(ref)
        except docker.errors.APIError as e:
            raise ImageBuildError(f"docker pull {ref} failed: {e.explanation or e}") from None
    return _image_config(ref, image)


def _image_config(tag: str, image) -> DockerImage:
    cfg = image.attrs.get("Config") or {}
    env = dict(item.split("=", 1) for item in cfg.get("Env") or [] if "=" in item)
    return DockerImage(tag=tag, workdir=cfg.get("WorkingDir") or "/", env=env, user=cfg.get("User") or None)


def _can_make_base() -> bool:
    import shutil

    return os.geteuid() == 0 and shutil.which("mmdebstrap") is not None
