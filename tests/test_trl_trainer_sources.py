"""evokit.trl_trainer.sources: the Scheduler that holds a task source for TRL's batches.

What is checked: GenEnv as the task source renders Harbor tasks for a batch, and a batch whose p̂
is near α updates the simulator (RWR) and joins D_env while p̂ = 0 does not; GenEnv's batch step
run through the CPU loop (evokit.train.train, real sandboxes and the CPU learner) and through the
TRL scheduler on the same rollout results serves the same tasks and reaches the same simulator
state and pools; a done source keeps serving where it ended.
"""

from __future__ import annotations

import os

os.environ.update(HARBOR_TELEMETRY="0", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TRL_EXPERIMENTAL_SILENCE="1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import trl  # noqa: E402,F401  (required: a missing TRL must fail, not skip)

from evokit import trl_trainer as T  # noqa: E402
from evokit.cpu_agent.policy import PolicyConfig  # noqa: E402
from evokit.curriculum import EL, ELConfig, lineage_envs  # noqa: E402
from evokit.genenv import TABLES, GenEnvConfig, GenEnvSource, Pools  # noqa: E402
from evokit.rows import read_rows  # noqa: E402
from evokit.sources import Run  # noqa: E402
from evokit.train import TrainConfig, train  # noqa: E402


def records(refs, solved: int, n: int = 4) -> list[dict]:
    """Rollout records of one batch as the TRL reward function writes them: ``solved`` of ``n`` per slot."""
    return [{"slot": i, "reward": float(j < solved), "masked": False, "n_turns": 1}
            for i in range(len(refs)) for j in range(n)]


def test_genenv_scheduler_learns_from_the_pass_rates(tmp_path):
    """GenEnv as the task source: a batch at p̂ = α updates the simulator (RWR) and joins D_env; p̂ = 0 does not
    (with sim_data="epoch", so that the second step has no pool to learn from)."""
    sched = T.Scheduler(GenEnvSource(GenEnvConfig(tasks_per_batch=2, sim_data="epoch", kl_coef=0.0)),
                        Run(4, 0, tmp_path))
    refs = sched.begin_batch(2)
    assert all((r.path / "task.toml").is_file() and r.key[:2] == ("genenv", 0) for r in refs)
    sched.feedback(records(refs, 2), refs)  # p̂ = 0.5 = α: kept
    assert sched.state.sim.updates == 1 and len(Pools(tmp_path / "pools").d_env) == 2
    assert len(Pools(tmp_path / "pools").d_train) == 8  # every usable trace joins D_train
    refs = sched.begin_batch(2)
    sched.feedback(records(refs, 0), refs)  # p̂ = 0: filtered out, nothing kept, no KL pull (kl_coef 0)
    assert sched.state.sim.updates == 1 and len(Pools(tmp_path / "pools").d_env) == 2
    assert sched.position()["scheduler/sim_updates"] == 1.0


def test_genenv_batch_step_is_the_same_in_the_cpu_loop_and_the_trl_scheduler(tmp_path):
    """Run GenEnv through the CPU loop (sandboxes, the CPU learner), then feed its recorded rollouts to the
    TRL scheduler: each step serves the same tasks, and the simulator and pools end up identical."""
    cfg = GenEnvConfig(tasks_per_batch=1, k_min=0.5)  # keep every batch: the simulator learns each epoch
    run = TrainConfig(steps=3, tasks_per_step=2, group_size=3, seed=1, eval_every=0)
    cpu = train(GenEnvSource(cfg), PolicyConfig(), tmp_path / "cpu", run, progress=False)
    sched = T.Scheduler(GenEnvSource(cfg), Run(run.group_size, run.seed, tmp_path / "trl"))
    rollouts = read_rows(cpu / "rollouts.jsonl")
    for step in range(run.steps):
        refs = sched.begin_batch(run.tasks_per_step)
        slot = {r.path.name: i for i, r in enumerate(refs)}
        mine = [{**r, "slot": slot[r["task"]]} for r in rollouts if r["step"] == step]
        assert len(mine) == run.tasks_per_step * run.group_size  # the CPU loop served the same task folders
        sched.feedback(mine, refs)
    cpu_state = torch.load(cpu / "checkpoint.pt", weights_only=False)["source"]
    assert cpu_state.sim.updates == sched.state.sim.updates == run.steps
    for t in TABLES:
        np.testing.assert_array_equal(getattr(cpu_state.sim, t), getattr(sched.state.sim, t))
    assert not all(np.array_equal(getattr(cpu_state.sim, t), getattr(cpu_state.init_sim, t)) for t in TABLES)
    strip = lambda rows: [{k: v for k, v in r.items() if k not in ("step", "slot")} for r in rows]  # noqa: E731
    for name in Pools.FILES.values():
        assert strip(read_rows(cpu / "pools" / name)) == strip(read_rows(tmp_path / "trl" / "pools" / name))
    assert cpu_state.last == sched.state.last


def test_a_done_source_serves_where_it_ended(tmp_path):
    """EL with every lineage passed: the scheduler serves the last tasks again (the run stops after this step)."""
    a = tmp_path / "a"
    sched = T.Scheduler(EL(lineage_envs({"L": [a]}), ELConfig(tau=0.0)), Run(2))
    refs = sched.begin_batch(2)
    sched.feedback(records(refs, 1, n=2), refs)
    assert sched.done()
    assert [r.path for r in sched.begin_batch(2)] == [a, a]
