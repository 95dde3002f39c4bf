"""evokit.trl_trainer.tasks: the schedulers that choose each GRPO group's task and take its pass rate back.

What is checked: GenEnv as the task source renders Harbor tasks for a batch, and a batch whose p̂
is near α updates the simulator (RWR) and joins D_env while p̂ = 0 does not; the docstring
examples (the dead / partially-solved group shares) hold.
"""

from __future__ import annotations

import os

os.environ.update(HARBOR_TELEMETRY="0", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TRL_EXPERIMENTAL_SILENCE="1")

import trl  # noqa: E402,F401  (required: a missing TRL must fail, not skip)

from evokit import trl_trainer as T  # noqa: E402


def test_genenv_scheduler_learns_from_the_pass_rates(tmp_path):
    """GenEnv as the task source: a batch at p̂ = α updates the simulator (RWR) and joins D_env; p̂ = 0 does not."""
    from evokit.genenv import Pools

    sched = T.GenEnvTasks(tmp_path, seed=0)
    refs = sched.begin_batch(2)
    assert all((r.path / "task.toml").is_file() and r.key[:2] == ("genenv", 0) for r in refs)
    sched.update([T.GroupResult(i, r, 2, 4, 0, 0.5) for i, r in enumerate(refs)])  # p̂ = 0.5 = α: kept
    assert sched.sim.updates == 1 and len(Pools(tmp_path / "pools").d_env) == 2
    refs = sched.begin_batch(2)
    sched.update([T.GroupResult(i, r, 0, 4, 0, 0.0) for i, r in enumerate(refs)])  # p̂ = 0: filtered out
    assert sched.sim.updates == 1 and len(Pools(tmp_path / "pools").d_env) == 2


def test_doctests():
    """The docstring examples of evokit.trl_trainer.tasks hold (pytest does not collect module doctests)."""
    import doctest

    import evokit.trl_trainer.tasks

    result = doctest.testmod(evokit.trl_trainer.tasks)
    assert result.attempted > 0 and result.failed == 0
