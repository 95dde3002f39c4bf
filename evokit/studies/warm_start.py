"""The training studies' shared start: seeds and evolved lineages, and EE's warm start (an initial policy).

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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evokit.evolve import EvolveConfig, evolve
from evokit.learners import PolicyConfig, SkillPolicy, fine_tune_on_solutions
from evokit.lineage import LineageStore
from evokit.seeds import MAX_STEPS, MIN_STEPS, make_seeds
from evokit.studies.reference_solver import pair_tasks
from evokit.train import new_policy

WARMUP_STEPS = 6  # cross-entropy steps of the warm start (ours: partial knowledge, see the docstring)
WARMUP_LR = 0.05  # Adam step size of the warm start (ours; full-batch cross-entropy, no sampling noise)


@dataclass(frozen=True)
class EEStudy:
    """What EE's training studies share: seeds, lineages, the run's sizes, the warm start (``study.json`` records
    a study's config; a notebook's parameters override it)."""

    n_seeds: int = 8
    generations: int = 4
    steps: int = 50
    group_size: int = 8  # B
    tasks_per_step: int = 2
    seed: int = 0
    warmup_steps: int = WARMUP_STEPS
    seed_steps: tuple[int, int] = (MIN_STEPS, MAX_STEPS)


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


def warm_policy(root: str | Path, seed: int, *, steps: int = WARMUP_STEPS, lr: float = WARMUP_LR,
                policy: PolicyConfig = PolicyConfig()) -> SkillPolicy:
    """EE's step 0 (rejection-sampling fine-tuning) at CPU scale; ``steps=0``: the untrained policy.

    A few cross-entropy steps (:func:`evokit.learners.fine_tune_on_solutions`) on the reference
    solutions of one-step tasks, one per catalog (scenario, skill) pair
    (:func:`evokit.studies.reference_solver.pair_tasks`). Saved to ``root/warm_policy.pt`` (with
    its losses in ``warm_policy.json``) and reloaded. The result is the ``init_policy`` of
    :func:`evokit.train.train`.
    """
    root = Path(root)
    model = new_policy(policy, seed)
    if steps == 0:
        return model
    path, meta = root / "warm_policy.pt", root / "warm_policy.json"
    if path.exists() and meta.exists() and json.loads(meta.read_text()).get("settings") == [steps, lr, seed]:
        return SkillPolicy.load(path)
    losses = fine_tune_on_solutions(model, pair_tasks(root / "pair_tasks", seed), steps=steps, lr=lr)
    model.save(path)
    meta.write_text(json.dumps({"settings": [steps, lr, seed], "losses": losses}, indent=2))
    return model

