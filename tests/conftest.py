"""Shared fixtures: a private layer cache for the session and a small base image.

``sandbox_cache`` is a fresh cache root whose ``base/`` links to the user's Debian minbase
rootfs (mmdebstrap, ~1 min once, then reused), so that every layer a test builds is built
and counted in this session, never taken from an older cache. Helpers live in
``sandbox_support.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["HARBOR_TELEMETRY"] = "0"

from sandbox_support import link_base, make_context  # noqa: E402

BASE_DOCKERFILE = """\
FROM debian:bookworm-slim
ENV IMAGE_VAR=from-image
WORKDIR /app
RUN useradd -m -u 1234 agent && echo ready > /app/ready.txt
"""


@pytest.fixture(scope="session", autouse=True)
def no_sandbox_left_behind():
    """Fail the run if it left a sandbox or build step of its own unstopped.

    Every sandbox and build step holds a lease naming its owner's pid until all its host state
    (state dir, cgroups, slirp4netns, build dir) is gone (:mod:`evokit.sandbox.stale`); other
    engineers' runs share /run/evokit, so only leases of this process count.
    """
    yield
    from evokit.sandbox import stale

    left = stale.leases_of(os.getpid())
    assert not left, f"this test run left sandbox state behind: {left}"


@pytest.fixture(scope="session")
def sandbox_cache(tmp_path_factory) -> Path:
    """A session-private cache root (layers are built here) sharing the Debian base rootfs."""
    return link_base(tmp_path_factory.mktemp("evokit-cache"))


@pytest.fixture
def fresh_cache(tmp_path) -> Path:
    """A cache root private to one test, for tests that count layers or temp dirs."""
    return link_base(tmp_path / "cache")


@pytest.fixture(scope="session")
def base_image(sandbox_cache, tmp_path_factory):
    """Debian bookworm with WORKDIR /app, an ``agent`` user (uid 1234) and one ENV; built once."""
    from evokit.sandbox import build_image

    ctx = make_context(tmp_path_factory.mktemp("base-ctx"), BASE_DOCKERFILE)
    return build_image(ctx, root=sandbox_cache)


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for a module: on a shared 2-core host OpenMP's spin-waiting makes 2 threads ~15x slower."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which turns the groups into node-id suffixes
def pytest_collection_modifyitems(config, items):
    """Groups for pytest-xdist's ``--dist loadgroup`` (``make test``/``make check`` run 2 workers): a
    module's tests share a worker, so its module fixtures are built once, and every module with a test
    on ``docker_daemon`` shares one, since they start and stop one ``dockerd``. A test that names its own
    ``xdist_group`` keeps it (the training notebooks: the tests that share one study's rows)."""
    docker = {item.path for item in items if "docker_daemon" in item.fixturenames}
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group("docker" if item.path in docker else item.path.name))


def pytest_xdist_node_collection_finished(node, ids):
    """Under ``--dist loadgroup`` every node id a worker collected must carry its group (xdist's ``@group``
    suffix, made from the marks above): without it xdist silently schedules each test on its own, and two
    workers then run one module, or two Docker tests, at once (CI saw a module's live sandbox leak into its
    sibling test's process check). pytest 9.2 broke the suffix (pytest-dev/pytest-xdist#1386)."""
    if node.config.getoption("dist", "no") == "loadgroup":
        lost = [i for i in ids if "@" not in i.rpartition("]")[2].rpartition("::")[2]]
        if lost:
            pytest.exit(f"--dist loadgroup: {len(lost)} of {len(ids)} tests lost their xdist group (e.g. "
                        f"{lost[:1]}): this pytest and pytest-xdist cannot keep a module on one worker; "
                        "run `make setup` (pytest<9.2) or TEST_WORKERS=0", returncode=pytest.ExitCode.USAGE_ERROR)
