"""Fixtures for the tests that need a real Docker daemon (``make engine`` installs docker.io + compose v2).

``docker_daemon`` uses the daemon that answers, or starts ``dockerd`` for the session and stops
it after (:class:`evokit.sandbox.docker_engine.DockerDaemon`). When no engine can be provided
the tests FAIL with the reason: a missing engine is a broken setup, not a pass.
``docker_client`` is a client of it with ``debian:bookworm-slim`` present (imported from the
mmdebstrap base when this machine has no registry).
"""

from __future__ import annotations

import pytest

from evokit.sandbox.docker_engine import (
    LABEL,
    DockerDaemon,
    EngineUnavailableError,
    client,
    ensure_debian_base,
)


@pytest.fixture(scope="session")
def docker_daemon():
    try:
        daemon = DockerDaemon.ensure()
    except EngineUnavailableError as e:
        pytest.fail(f"these tests need a Docker engine; run `make engine` as root. {e}", pytrace=False)
    yield daemon
    daemon.stop()


@pytest.fixture(scope="session")
def docker_client(docker_daemon):
    c = client()
    ensure_debian_base(c)
    yield c
    c.close()


def containers_of(docker_client, sandbox_id: str) -> list:
    """Containers (running or not) that the evokit sandbox ``sandbox_id`` created."""
    return docker_client.containers.list(all=True, filters={"label": f"{LABEL}.id={sandbox_id}"})
