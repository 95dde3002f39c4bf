"""Tests for evokit.sandbox.docker_engine: the daemon the Docker paths use, and its offline base image.

Against the real daemon of ``docker_support.docker_daemon`` (started here if none runs).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from docker_support import docker_client, docker_daemon  # noqa: F401

from evokit.sandbox.docker_engine import (
    DEBIAN_TAGS,
    DockerDaemon,
    ensure_debian_base,
    private_data_root,
)


def test_ensure_uses_the_running_daemon(docker_daemon):  # noqa: F811
    again = DockerDaemon.ensure()
    assert again.started is False  # one answers already: nothing started, nothing to stop
    again.stop()


def test_the_offline_base_is_imported_once_and_runs(docker_client):  # noqa: F811
    assert ensure_debian_base(docker_client) == []  # the fixture imported (or found) it: idempotent
    out = docker_client.containers.run("debian:bookworm-slim", ["sh", "-c", "echo $PATH; cat /etc/debian_version"],
                                       remove=True, network_mode="none")
    path, version = out.decode().split()
    assert "/usr/bin" in path and version.startswith("12.")
    assert {t for i in docker_client.images.list("debian") for t in i.tags} >= set(DEBIAN_TAGS["bookworm"])
    with pytest.raises(ValueError, match="no offline base for Debian suite 'sid'"):
        ensure_debian_base(docker_client, "sid")


def test_the_data_root_is_a_private_mount(docker_client):  # noqa: F811
    """Shared, it let other mount namespaces unmount the containers' roots (see the module)."""
    root = docker_client.info()["DockerRootDir"]
    assert private_data_root(docker_client) is False  # ensure() made it private already
    line = next(ln for ln in Path("/proc/self/mountinfo").read_text().splitlines() if ln.split()[4] == root)
    assert "shared:" not in line.split(" - ")[0]
