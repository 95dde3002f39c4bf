"""The training studies' shared start: seeds and evolved lineages, EE's warm start, and starting a run from it.

How the setting departs from EE (stated once here; :mod:`evokit.studies.training` lists the rest):

* **Warm start (EE's step 0).** EE fine-tunes its students by rejection sampling before GRPO.
  Our stand-in (:func:`warm_policy`) is a few full-batch cross-entropy steps on the reference
  solutions of one-step tasks, one per catalog (scenario, skill) pair (a reference solution is
  a successful trajectory): the learner then knows techniques broadly but imperfectly. GenEnv's
  studies start from the untrained learner, as the paper's loop starts from the base model.
* **Seeds.** The EE notebooks evolve from one-step seeds (``seed_steps=(1, 1)``): EE filters its
  seeds so that a frontier model passes ≤ 4 of 8 (hard, not hopeless); for the CPU learner that is
  a one-step task. Measured at smoke scale (8 seeds, 30 steps, partially solved share EL vs random):
  2-step seeds × 6 generations with the warm start 0.27 vs 0.28 (evolved generations drop to pass
  rate 0 at once, EL stalls on them; 45 of 56 environments at 0 for the untrained learner);
  one-step seeds × 4 generations 0.27 vs 0.07 untrained and 0.37 vs 0.17 warm-started, where EL
  also climbs further (generation 3 vs 1.5 reached in 30 steps).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import torch

from evokit.curriculum import ELConfig, make_curriculum
from evokit.evolve import EvolveConfig, evolve
from evokit.learners import PolicyConfig, SkillPolicy, goal_features, step_goals, task_plan
from evokit.lineage import LineageStore
from evokit.seeds import MAX_STEPS, MIN_STEPS, make_seeds
from evokit.studies.reference_solver import pair_tasks
from evokit.studies.rows import StudyError
from evokit.train import TrainConfig

WARMUP_STEPS = 6  # cross-entropy steps of the warm start (ours: partial knowledge, see the docstring)
WARMUP_LR = 0.05  # Adam step size of the warm start (ours; full-batch cross-entropy, no sampling noise)


def new_policy(cfg: TrainConfig) -> SkillPolicy:
    """The policy :mod:`evokit.train` builds for ``cfg`` (same config, same initialisation)."""
    return SkillPolicy(PolicyConfig(**{**asdict(cfg.policy), "seed": cfg.seed}))


def start_from(out: Path, cfg: TrainConfig, policy_state: dict, curriculum_state, *, step: int = 0,
                optimizer_state: dict | None = None) -> None:
    """Make :func:`~evokit.train.train_curriculum` start from given weights instead of a fresh policy.

    ``train_curriculum`` resumes from ``out/checkpoint.pt`` (policy, optimizer, curriculum state,
    step); writing one before its first call starts the run from the warm policy at step 0, or
    continues a policy at ``step`` on a grown store (co-evolution's windows). A run that already
    has a checkpoint is left alone (it resumes). The KL reference of ``train_curriculum`` is the
    untrained policy, so a warm start is refused when ``cfg.beta_kl`` is set.
    """
    if (out / "checkpoint.pt").exists():
        return
    if cfg.beta_kl:
        raise StudyError(f"{out}: a warm-started run with beta_kl={cfg.beta_kl} would take its KL to the untrained "
                         "policy (evokit.train's reference); use beta_kl=0 (TRL's default) in these studies")
    policy = new_policy(cfg)
    policy.load_state_dict(policy_state)
    opt = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    if optimizer_state is not None:
        opt.load_state_dict(optimizer_state)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / ".checkpoint.tmp"
    torch.save({"policy": policy.state_dict(), "optimizer": opt.state_dict(), "curriculum": curriculum_state,
                "step": step}, tmp)
    os.replace(tmp, out / "checkpoint.pt")


def initial_state(name: str, store: LineageStore, cfg: TrainConfig):
    return make_curriculum(name, store.envs(), ELConfig(), seed=cfg.seed)[1]  # as train_curriculum builds it


# ------------------------------------------------------------------------------ building blocks
def seed_store(root: str | Path, *, n_seeds: int, generations: int, seed: int, workers: int = 2,
               seed_steps: Sequence[int] = (MIN_STEPS, MAX_STEPS), name: str = "") -> tuple[list[Path], LineageStore]:
    """Verified seeds of ``seed_steps`` (min, max) steps (``root/<name>seeds``) and one evolved lineage per seed
    (``root/<name>store``), cached."""
    root = Path(root)
    rows = make_seeds(n_seeds, seed, root / f"{name}seeds", workers=workers, progress=False,
                      min_steps=seed_steps[0], max_steps=seed_steps[1])
    dirs = [root / f"{name}seeds" / r["name"] for r in rows]
    store = evolve(dirs, root / f"{name}store", EvolveConfig(generations=generations, seed=seed),
                   workers=workers, progress=False)
    return dirs, store


def solution_targets(policy: SkillPolicy, tasks: Sequence[Path]):
    """(scenario ids, goal features, reference skill ids) of every step of ``tasks``' reference solutions."""
    sid, goals, skills = [], [], []
    for t in tasks:
        plan, _ = task_plan(t)
        for st, g in zip(plan.steps, step_goals((Path(t) / "instruction.md").read_text(), len(plan)), strict=True):
            sid.append(policy._scenario_id(st.scenario))
            goals.append(goal_features(g, policy.config.n_features))
            skills.append(policy._skill_id(st.skill))
    return torch.tensor(sid), policy.features(goals), torch.tensor(skills)


def fine_tune_on_solutions(policy: SkillPolicy, tasks: Sequence[Path], *, steps: int, lr: float) -> list[float]:
    """Full-batch Adam on −mean log π(κ_ref | σ, g) over the reference solutions' steps; returns the losses."""
    sid, x, y = solution_targets(policy, tasks)
    opt = torch.optim.Adam(policy.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = -torch.log_softmax(policy.logits(sid, x), dim=-1).gather(1, y[:, None]).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def warm_policy(root: str | Path, cfg: TrainConfig, *, steps: int = WARMUP_STEPS, lr: float = WARMUP_LR
                ) -> SkillPolicy:
    """EE's step 0 (rejection-sampling fine-tuning) at CPU scale; ``steps=0``: the untrained policy.

    A few cross-entropy steps on the reference solutions of one-step tasks, one per catalog
    (scenario, skill) pair (:func:`evokit.studies.evolution.pair_tasks`). Saved to
    ``root/warm_policy.pt`` (with its losses in ``warm_policy.json``) and reloaded.
    """
    root = Path(root)
    policy = new_policy(cfg)
    if steps == 0:
        return policy
    path, meta = root / "warm_policy.pt", root / "warm_policy.json"
    if path.exists() and meta.exists() and json.loads(meta.read_text()).get("settings") == [steps, lr, cfg.seed]:
        return SkillPolicy.load(path)
    losses = fine_tune_on_solutions(policy, pair_tasks(root / "pair_tasks", cfg.seed), steps=steps, lr=lr)
    policy.save(path)
    meta.write_text(json.dumps({"settings": [steps, lr, cfg.seed], "losses": losses}, indent=2))
    return policy

