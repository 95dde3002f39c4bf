"""TRL's Harbor integration (``trl.experimental.harbor``) on evokit's sandbox.

``trl.experimental.harbor.HarborEnv`` builds its sandbox from Harbor's ``EnvironmentConfig(type=...)``,
whose ``type`` is Harbor's enum of backends (docker, e2b, daytona, …): an environment that Harbor
loads by ``import_path``, as evokit's bubblewrap sandbox is (:mod:`evokit.sandbox.harbor_env`), is
refused there. :class:`EvokitHarborEnv` is TRL's single-``bash`` harness that starts the task's
sandbox from ``EnvironmentConfig(import_path=...)`` instead; the tool loop, the verifier and the
reward stay TRL's and Harbor's::

    from trl.experimental.harbor import HarborSpec
    from evokit.trl_trainer.harbor_adapter import EvokitHarborEnv

    spec = HarborSpec("runs/tasks", agent=EvokitHarborEnv, environment_type="evokit")
    GRPOTrainer(..., train_dataset=spec.train_dataset, environment_factory=spec.environment_factory,
                reward_funcs=spec.reward_funcs)

This path has none of ``evokit train-llm``'s curricula, rows or masking: it is TRL's trainer over a
fixed list of task folders, with evokit's sandbox under it.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from trl.experimental.harbor import HarborBashEnv  # noqa: E402

#: Harbor's import path of evokit's bubblewrap sandbox; ``environment_type="evokit"`` names it
EVOKIT_SANDBOX = "evokit.sandbox:BubblewrapEnvironment"


class EvokitHarborEnv(HarborBashEnv):
    """TRL's ``HarborBashEnv`` on evokit's sandbox (``environment_type``: ``"evokit"``, any
    ``module:Class`` import path, or one of Harbor's own backend names)."""

    PROMPT_SUFFIX = ""  # evokit's tasks are graded by their tests, not by TRL's /workdir/answer.txt

    def __init__(self, environment_type: str = "evokit"):
        super().__init__(EVOKIT_SANDBOX if environment_type == "evokit" else environment_type)

    async def _start(self, task_dir: str) -> str:
        from harbor.environments.factory import EnvironmentFactory
        from harbor.models.task.task import Task
        from harbor.models.trial.config import EnvironmentConfig
        from harbor.models.trial.paths import TrialPaths

        await self._stop()  # the previous task's sandbox
        kind = self._environment_type
        self._task = Task(task_dir=Path(task_dir))
        self._paths = TrialPaths(trial_dir=Path(tempfile.mkdtemp(prefix="evokit_trl_harbor_")))
        self._env = EnvironmentFactory.create_environment_from_config(
            config=EnvironmentConfig(import_path=kind) if ":" in kind else EnvironmentConfig(type=kind),
            environment_dir=self._task.paths.environment_dir, environment_name=self._task.short_name,
            session_id=uuid.uuid4().hex, trial_paths=self._paths, task_env_config=self._task.config.environment)
        await self._env.start(force_build=False)
        await self._env.run_healthcheck()
        await self._setup()
        return self._task.instruction
