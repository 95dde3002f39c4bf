"""evokit's bubblewrap sandbox as a Harbor environment.

``harbor run -p TASK -a oracle --env evokit.sandbox:BubblewrapEnvironment`` (or
``EnvironmentConfig(import_path="evokit.sandbox:BubblewrapEnvironment")`` with Harbor's
``Trial``/``Job`` API) runs a task in the local sandbox instead of Docker. Everything
Harbor does around the environment (agents, verifier, result.json) is Harbor's own.

The class is a thin async wrapper: each call runs the synchronous :class:`Sandbox`
method in a worker thread. A timed-out exec raises ``RuntimeError`` as Harbor's docker
environment does, so Harbor reports the same error kinds on both backends.

**The verifier in private namespaces** (the shared-verifier reward-forging class). Harbor's
shared-mode verifier runs ``test.sh`` in the agent's environment with the agent's processes still
running, so with a plain sandbox a daemon of the agent's could rewrite
``/logs/verifier/reward.txt``, read the answer keys in ``/tests`` or ptrace the tests. Harbor gives
an environment no "verification starts" call, so this class recognises the verifier phase by the
harness's own first operations of it, in the order :class:`harbor.verifier.verifier.Verifier`
makes them: the ``rm -f -- /logs/verifier/reward.txt ...`` that clears stale rewards (or, failing
that, an upload into ``/tests``). From there every ``exec`` runs in the verifier's namespaces
(:mod:`evokit.sandbox.verifier_ns`: a pid namespace no agent process can see, ``/tests`` and
``/logs/verifier`` on tmpfs mounts only the host and the tests reach, ``PYTHONSAFEPATH=1``),
uploads into ``/tests`` and downloads of ``/logs/verifier`` go through the host's fds of those
mounts, and the agent's processes keep running, as Harbor has it. The download of
``/logs/verifier`` ends the phase: the tests' processes are killed, and the processes the sandbox
spares are checked (:class:`~evokit.sandbox.runtime.SandboxSabotaged` if one was taken over,
which Harbor records as the verifier's exception). An agent that sends that exact ``rm``
command itself only starts a phase whose mounts the real verifier's ``rm`` replaces. Harbor's
``environment_mode = "separate"`` (with the task's ``artifacts``) works on this backend too: the
verifier gets a fresh sandbox, and the same private namespaces in it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.models.trial.paths import EnvironmentPaths

from evokit.sandbox.image import build_image, pull_image
from evokit.sandbox.runtime import Sandbox, file_filter
from evokit.sandbox.task_env import limits_from_config, network_allowed
from evokit.sandbox.verifier_ns import VerifierNamespace


class BubblewrapEnvironment(BaseEnvironment):
    """A Harbor ``BaseEnvironment`` backed by :class:`evokit.sandbox.Sandbox`."""

    _sandbox: Sandbox | None = None
    _verifier: VerifierNamespace | None = None  # the latest verifier phase's namespaces (mounts kept)
    _in_verifier_phase: bool = False

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
            await asyncio.to_thread(self._sandbox.stop)  # closes the verifier's namespaces too
            self._sandbox = None
        self._verifier, self._in_verifier_phase = None, False

    def _require(self) -> Sandbox:
        if self._sandbox is None:
            raise RuntimeError("environment not started")
        return self._sandbox

    async def _begin_verifier_phase(self) -> None:
        """Fresh private namespaces for the verifier (the previous phase's, if any, closed)."""
        sandbox = self._require()
        if self._verifier is not None:
            await asyncio.to_thread(self._verifier.close)
            self._verifier = None
        self._verifier = await asyncio.to_thread(sandbox.verifier_namespace)
        self._in_verifier_phase = True

    async def _end_verifier_phase(self) -> None:
        """Kill the tests' processes (their pid namespace) and check the sandbox's spared processes."""
        if self._in_verifier_phase and self._verifier is not None:
            self._in_verifier_phase = False
            await asyncio.to_thread(self._verifier.stop)
            await asyncio.to_thread(self._require().check_spared)

    def _private(self, path: str) -> VerifierNamespace | None:
        """The verifier's namespaces when ``path`` is on one of its private mounts."""
        return self._verifier if self._verifier is not None and self._verifier.owns(path) else None

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:
        if _starts_verifier(command):
            await self._begin_verifier_phase()
        env = self._merge_env(env)
        target = self._require()
        if self._in_verifier_phase:
            target, env = self._verifier, {**(env or {}), "PYTHONSAFEPATH": "1"}
        res = await asyncio.to_thread(target.exec, command, cwd=cwd, env=env, timeout_sec=timeout_sec,
                                      user=self._resolve_user(user))
        if res.timed_out:
            raise RuntimeError(f"Command timed out after {timeout_sec} seconds")
        return ExecResult(stdout=res.stdout, stderr=res.stderr, return_code=res.return_code)

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        if _under_tests(target_path) and not self._in_verifier_phase:
            await self._begin_verifier_phase()
        if (private := self._private(target_path)) is not None:
            await asyncio.to_thread(private.upload_file, Path(source_path), target_path)
        else:
            await asyncio.to_thread(self._require().upload_file, source_path, target_path)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        if _under_tests(target_dir) and not self._in_verifier_phase:
            await self._begin_verifier_phase()
        if (private := self._private(target_dir)) is not None:
            await asyncio.to_thread(private.upload_dir, Path(source_dir), target_dir)
        else:
            await asyncio.to_thread(self._require().upload_dir, source_dir, target_dir)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        if (private := self._private(source_path)) is not None:
            await self._end_verifier_phase()
            await asyncio.to_thread(private.download, source_path, Path(target_path), 1 << 30, as_file=True)
        else:
            await asyncio.to_thread(self._require().download_file, source_path, target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        if (private := self._private(source_dir)) is not None:
            await self._end_verifier_phase()
            await asyncio.to_thread(private.download, source_dir, Path(target_dir), 1 << 30, as_file=False)
        else:
            await asyncio.to_thread(self._require().download_dir, source_dir, target_dir)

    async def download_dir_filtered(self, *, source_dir: str, target_dir: Path | str,
                                    include: Sequence[str] | None = None, exclude: Sequence[str] | None = None,
                                    protect: Sequence[str] | None = None) -> None:
        """Harbor's filtered download (``include_logs``/``exclude_logs``) without Harbor's default,
        which runs the sandbox's ``tar`` and extracts the archive on the host (the host-extraction
        class)."""
        if (private := self._private(source_dir)) is not None:
            await self._end_verifier_phase()
            select = file_filter(include, exclude, protect)
            await asyncio.to_thread(private.download, source_dir, Path(target_dir), 1 << 30, as_file=False,
                                    select=select)
        else:
            await asyncio.to_thread(self._require().download_dir_filtered, source_dir, target_dir,
                                    include=include, exclude=exclude, protect=protect)


def _starts_verifier(command: str) -> bool:
    """Harbor's verifier's first command: ``rm -f -- /logs/verifier/reward.txt /logs/verifier/reward.json``."""
    paths = EnvironmentPaths()
    return (command.startswith("rm -f -- ") and str(paths.reward_text_path) in command
            and str(paths.reward_json_path) in command)


def _under_tests(target: str) -> bool:
    tests = EnvironmentPaths().tests_dir
    target = PurePosixPath(target)
    return target == tests or tests in target.parents
