"""evokit's bubblewrap sandbox as a Harbor environment.

``harbor run -p TASK -a oracle --env evokit.sandbox:BubblewrapEnvironment`` (or
``EnvironmentConfig(import_path="evokit.sandbox:BubblewrapEnvironment")`` with Harbor's
``Trial``/``Job`` API) runs a task in the local sandbox instead of Docker. Everything
Harbor does around the environment (agents, verifier, result.json) is Harbor's own.

The class is a thin async wrapper: each call runs the synchronous :class:`Sandbox`
method in a worker thread. A timed-out exec raises ``RuntimeError`` as Harbor's docker
environment does, so Harbor reports the same error kinds on both backends.

**Agent processes end before the verifier** (issue 11, class 4). Harbor's shared-mode
verifier runs ``test.sh`` in the agent's environment, and Harbor's docker backend leaves the
agent's background processes running, so a daemon that rewrites ``/logs/verifier/reward.txt``
scores 1. Harbor gives an environment no "verification starts" call, so this class marks the
start of the verifier phase by the harness's own first operations of that phase, in the order
:class:`harbor.verifier.verifier.Verifier` makes them: the ``rm -f -- /logs/verifier/reward.txt
...`` that clears stale rewards, and every upload into ``/tests``. Before each, every process that
commands started is killed (:meth:`Sandbox.kill_commands`). An agent that sends that exact command
itself only kills its own processes. Harbor's ``environment_mode = "separate"`` (with the task's
``artifacts``) works on this backend too: the verifier gets a fresh sandbox.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.models.trial.paths import EnvironmentPaths

from evokit.sandbox.image import build_image, pull_image
from evokit.sandbox.runtime import Sandbox
from evokit.sandbox.task_env import limits_from_config, network_allowed


class BubblewrapEnvironment(BaseEnvironment):
    """A Harbor ``BaseEnvironment`` backed by :class:`evokit.sandbox.Sandbox`."""

    _sandbox: Sandbox | None = None

    @staticmethod
    def type() -> str:
        return "evokit-bwrap"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(disable_internet=True, mounted=False)

    def _validate_definition(self) -> None:
        if self.task_env_config.docker_image:  # a prebuilt image: pulled, no Dockerfile needed
            return
        if not (Path(self.environment_dir) / "Dockerfile").is_file():
            raise FileNotFoundError(
                f"{self.environment_dir}/Dockerfile not found: the evokit sandbox builds Dockerfiles only "
                "(docker-compose tasks need Harbor's docker backend)"
            )

    async def start(self, force_build: bool) -> None:
        env = self.task_env_config
        if env.docker_image:
            image = await asyncio.to_thread(pull_image, env.docker_image, where="[environment].docker_image",
                                            log=lambda line: self.logger.info(line))
        else:
            image = await asyncio.to_thread(
                build_image, self.environment_dir, step_timeout_sec=env.build_timeout_sec,
                log=lambda line: self.logger.info(line),
            )
        limits = limits_from_config(env)
        if self._effective_cpus or self._effective_memory_mb or self._effective_storage_mb:
            limits = type(limits)(cpus=self._effective_cpus, memory_mb=self._effective_memory_mb,
                                  storage_mb=self._effective_storage_mb or limits.storage_mb,
                                  pids=limits.pids)
        self._sandbox = Sandbox(image, network=network_allowed(env) and self._network_is_public,
                                limits=limits, workdir=env.workdir, env=self._startup_env())
        await asyncio.to_thread(self._sandbox.start)

    async def stop(self, delete: bool) -> None:
        if self._sandbox is not None:
            await asyncio.to_thread(self._sandbox.stop)
            self._sandbox = None

    def _require(self) -> Sandbox:
        if self._sandbox is None:
            raise RuntimeError("environment not started")
        return self._sandbox

    async def _end_agent_phase(self) -> None:
        """Kill every process that commands started (the agent's daemons) before the verifier runs."""
        sandbox = self._require()
        if sandbox.running:
            await asyncio.to_thread(sandbox.kill_commands)

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:
        if _starts_verifier(command):
            await self._end_agent_phase()
        res = await asyncio.to_thread(
            self._require().exec, command, cwd=cwd, env=self._merge_env(env),
            timeout_sec=timeout_sec, user=self._resolve_user(user),
        )
        if res.timed_out:
            raise RuntimeError(f"Command timed out after {timeout_sec} seconds")
        return ExecResult(stdout=res.stdout, stderr=res.stderr, return_code=res.return_code)

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        if _under_tests(target_path):
            await self._end_agent_phase()
        await asyncio.to_thread(self._require().upload_file, source_path, target_path)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        if _under_tests(target_dir):
            await self._end_agent_phase()
        await asyncio.to_thread(self._require().upload_dir, source_dir, target_dir)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        await asyncio.to_thread(self._require().download_file, source_path, target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        await asyncio.to_thread(self._require().download_dir, source_dir, target_dir)

    async def download_dir_filtered(self, *, source_dir: str, target_dir: Path | str,
                                    include: Sequence[str] | None = None, exclude: Sequence[str] | None = None,
                                    protect: Sequence[str] | None = None) -> None:
        """Harbor's filtered download (``include_logs``/``exclude_logs``) without Harbor's default,
        which runs the sandbox's ``tar`` and extracts the archive on the host (issue 11, class 6)."""
        await asyncio.to_thread(self._require().download_dir_filtered, source_dir, target_dir, include=include,
                                exclude=exclude, protect=protect)


def _starts_verifier(command: str) -> bool:
    """Harbor's verifier's first command: ``rm -f -- /logs/verifier/reward.txt /logs/verifier/reward.json``."""
    paths = EnvironmentPaths()
    return (command.startswith("rm -f -- ") and str(paths.reward_text_path) in command
            and str(paths.reward_json_path) in command)


def _under_tests(target: str) -> bool:
    tests = EnvironmentPaths().tests_dir
    target = PurePosixPath(target)
    return target == tests or tests in target.parents
