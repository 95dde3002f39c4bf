"""evokit.trl_trainer.harbor_adapter: TRL's ``trl.experimental.harbor`` on evokit's sandbox.

What is checked: TRL's own ``HarborBashEnv`` refuses evokit's sandbox as an ``environment_type``
(Harbor's enum of backends), which is why the adapter exists; through :class:`EvokitHarborEnv`,
TRL's ``HarborSpec`` builds its dataset and environments from a folder of evokit tasks, and one
episode per environment runs in the real bubblewrap sandbox, scored by the task's own tests
through Harbor's verifier and TRL's reward function. The policy is scripted (the tool calls are
made directly, as TRL's tool loop would make them): the test is about the adapter, not a model.
"""

from __future__ import annotations

import os

import pytest

os.environ.update(HARBOR_TELEMETRY="0", TRL_EXPERIMENTAL_SILENCE="1")

from trl.experimental.harbor import HarborBashEnv, HarborSpec  # noqa: E402
from trl_support import SOLVE  # noqa: E402

from evokit.plan import Plan, Step, render  # noqa: E402
from evokit.trl_trainer.harbor_adapter import EVOKIT_SANDBOX, EvokitHarborEnv  # noqa: E402


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    root = tmp_path_factory.mktemp("harbor-tasks")
    render(Plan((Step("text-list", "distinct-values"),)), 0, root / "t0")
    return root


def test_trls_own_env_refuses_evokits_sandbox(tasks):
    """Harbor's ``EnvironmentConfig.type`` is an enum: an import path there is refused."""
    from pydantic import ValidationError

    env = HarborBashEnv(environment_type=EVOKIT_SANDBOX)
    with pytest.raises(ValidationError, match="type"):
        env.reset(task_dir=str(tasks / "t0"))


def test_harbor_spec_runs_an_episode_in_evokits_sandbox(tasks):
    """The right command scores 1 and a wrong one 0, each in its own sandbox, read by TRL's reward function."""
    spec = HarborSpec(str(tasks), agent=EvokitHarborEnv, environment_type="evokit")
    (row,) = spec.train_dataset
    solver, idler = spec.environment_factory(), spec.environment_factory()
    try:
        instruction = solver.reset(**row)
        assert instruction == (tasks / "t0" / "instruction.md").read_text()
        assert "hosts.txt" in solver.bash("ls /app/step1")
        solver.bash(SOLVE)
        idler.reset(**row)
        idler.bash("true")
        assert spec.reward_funcs(environments=[solver, idler]) == [1.0, 0.0]
    finally:
        for env in (solver, idler):
            env._run(env._stop())
