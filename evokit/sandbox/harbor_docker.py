"""Harbor's docker environment, made to run evokit's ``no-network`` tasks on machines without a registry.

Stock Harbor (0.26) enforces ``network_mode = "no-network"`` with an egress-control sidecar
(nftables) whose images — a kernel probe and ``gogost/gost`` pinned by digest — come from Docker
Hub. Where Docker Hub cannot be reached the probe fails, Harbor reports that it cannot disable
the network, and refuses *every* evokit task (all of them are ``no-network``).

``harbor run -p TASK -a oracle --env evokit.sandbox.harbor_docker:OfflineDockerEnvironment``
(or ``EnvironmentConfig(import_path=...)``) is Harbor's own ``DockerEnvironment`` with two
changes, and nothing else of Harbor's trial replaced:

* a trial whose every network policy (agent phase and verifier phase) is ``no-network`` runs
  ``main`` with compose's ``network_mode: none`` (Harbor's own
  ``docker-compose-no-network.yaml``; only a loopback inside) instead of the sidecar, and says
  it can disable the network. ``public`` and ``allowlist`` tasks are Harbor's as before
  (``allowlist`` still needs the sidecar, so still a registry);
* ``main`` gets ``init: true`` (``docker-init`` as pid 1): Harbor's ``sleep infinity`` ignores
  SIGTERM as pid 1, so each teardown otherwise waits out Docker's 10 s stop timeout;
* a ``main`` container that exits at once with 127 (on this project's machine Docker 20.10 now
  and then starts a container on a root that looks empty; see docs/container-engines.md) is
  brought up again, at most twice.

Deviation from stock Harbor with a registry: there the sidecar also covers compose services
the task adds; here only ``main`` is set to ``network_mode: none``, and a task's own
``docker-compose.yaml`` that gives ``main`` ``networks`` conflicts with it (compose refuses).
"""

from __future__ import annotations

from pathlib import Path

from harbor.environments.docker import COMPOSE_NO_NETWORK_PATH
from harbor.environments.docker.docker import DockerEnvironment
from harbor.models.task.config import NetworkMode

COMPOSE_INIT_PATH = Path(__file__).parent / "compose" / "docker-compose-init.yaml"


def _all_no_network(startup_network_policy, phase_network_policies) -> bool:
    policies = [startup_network_policy, *(phase_network_policies or ())]
    return all(p is not None and p.network_mode == NetworkMode.NO_NETWORK for p in policies)


class OfflineDockerEnvironment(DockerEnvironment):
    """Harbor's ``DockerEnvironment`` + ``network_mode: none`` for no-network trials + ``init: true``."""

    def __init__(self, *args, network_policy=None, phase_network_policies=None, **kwargs):
        self._evokit_no_network = network_policy is not None and _all_no_network(
            network_policy, phase_network_policies)
        super().__init__(*args, network_policy=network_policy,
                         phase_network_policies=phase_network_policies, **kwargs)

    @staticmethod
    def _requires_egress_control(*, startup_network_policy, phase_network_policies) -> bool:
        # All-no-network needs no sidecar (and no probe of a registry image that cannot be pulled).
        if _all_no_network(startup_network_policy, phase_network_policies):
            return False
        return DockerEnvironment._requires_egress_control(
            startup_network_policy=startup_network_policy, phase_network_policies=phase_network_policies)

    @property
    def capabilities(self):
        caps = super().capabilities
        if self._evokit_no_network:
            caps = caps.model_copy(update={"disable_internet": True})
        return caps

    async def start(self, force_build: bool) -> None:
        for attempt in range(3):
            try:
                return await super().start(force_build)
            except RuntimeError as e:
                if attempt == 2 or "exited (127)" not in str(e):
                    raise
                self.logger.warning("main exited with 127 at start (empty root?); starting it again")
                await super().stop(delete=False)

    @property
    def _docker_compose_paths(self) -> list[Path]:
        paths = [*super()._docker_compose_paths, COMPOSE_INIT_PATH]
        if self._evokit_no_network:
            paths.append(COMPOSE_NO_NETWORK_PATH)
        return paths
