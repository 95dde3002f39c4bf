"""The training studies' shared start: the learner, the seed pool and each run's evolved lineages (EE).

What EE's curricula and method studies share, and how it departs from EE (stated once here):

* **The learner is pretrained on data** (so it does not share p_T with D_T). Each run's student is a member of the solver
  population (:mod:`evokit.solvers`, ``EEStudy.learner``) pretrained on its own corpus drawn
  with the run's seed (:meth:`~evokit.solvers.SolverConfig.reseeded`): it never reads p_T.
  Its pretraining is our stand-in for EE's step 0 (rejection-sampling fine-tuning); GRPO then
  starts from it and regularises towards it. It acts with ``attempts`` techniques per step,
  reading its command's exit status and output (its judge), so a hard step costs more turns.
* **Sampling temperature (changed after a pilot, stated).** Pretrained on its corpus, the student
  is nearly deterministic: in the pilot (one run, 10 steps, temperature 1) its most likely skill
  had probability ≥ 0.998 at 75 % of the seed pool's steps (median 1.0), so every GRPO group was
  all-pass or all-fail (partially solved share 0 under both curricula) and GRPO had no signal.
  An LLM student sampled at temperature 1 is far less peaked. We therefore sample the student
  at ``temperature`` = 4 (median top probability 0.80 on the same steps), in training and on the
  benchmark alike, chosen from those entropies before any claim was measured. The seed filter's
  solver is measured as pretrained (temperature 1).
* **Seeds as EE filters them** (:func:`evokit.seeds.select_seeds`): candidates of
  ``candidate_steps`` steps, balanced over domains (13 domains × 3 lengths), measured by an
  *independent* data solver (``seed_solver``, another mixture, never the learner) over 8
  rollouts; kept if it passes ≤ 4/8, the longest first. The pool is measured once per study
  and each run draws its ``n_lineages`` seeds from it with its own seed (EE: 500 seeds from one
  filtered pool). Candidates are 1–3 steps (EE's seeds need ≥ 30 turns of a frontier model; the
  CPU learner's turns are on another scale), chosen before any run for cost.
* **N_{i,g} = ``per_generation`` environments per generation** (EE's E_{i,g,k};
  :class:`evokit.evolve.EvolveConfig`), so EL's within-generation step (k < N → k + 1) runs.
* **Runs.** Every claim is over ``runs`` independent runs (seeds ``seed … seed + runs − 1``):
  each has its own seeds drawn from the pool, its own evolution, learner and rollouts; the
  across-run intervals come from :mod:`evokit.stats`. Layout: ``root/seed_pool/`` (shared),
  ``root/run-<s>/{store,learner.pt,train/…}``.
"""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass
from pathlib import Path

import torch

from evokit.evolve import EvolveConfig, evolve
from evokit.learners import PolicyConfig, SkillPolicy
from evokit.lineage import LineageStore
from evokit.rollout import rollout_workers
from evokit.seeds import MAX_SEED_PASS, make_seeds, measure_seeds, select_seeds
from evokit.solvers import (
    ShapeJudge,
    Solver,
    SolverConfig,
    build_solver,
    solver_config,
    support_reference,
)

N_DOMAINS = 13  # the catalog's scenario domains: candidates cover each at each length once


@dataclass(frozen=True)
class EEStudy:
    """What EE's training studies share (``study.json`` records a study's config; a notebook's parameters override it)."""

    runs: int = 5  # independent runs per claim (every claim: ≥ 5 seeds)
    seed: int = 0  # runs use seeds seed … seed + runs − 1
    n_lineages: int = 4  # seeds (lineages) per run, drawn from the filtered pool (EE: 500)
    generations: int = 3  # EE: 15
    per_generation: int = 2  # N_{i,g}: environments per generation (EE's E_{i,g,k})
    steps: int = 20  # GRPO updates (EE: 200; the EL comparison reads the first 50)
    group_size: int = 8  # B (EE: 8)
    tasks_per_step: int = 2  # GRPO groups per update (not stated in EE)
    attempts: int = 3  # techniques a learner may try per step, reading its results (turns depend on difficulty)
    learner: str = "A"  # the student: this population member, reseeded per run (evokit.solvers.SOLVERS)
    temperature: float = 4.0  # the student's sampling temperature in rollouts (EE: 1.0; ours, see the docstring)
    seed_solver: str = "C"  # the seed filter's independent solver (another mixture; fixed, not reseeded)
    max_seed_pass: float = MAX_SEED_PASS  # EE: kept seeds are passed ≤ 4/8
    candidate_steps: tuple[int, int] = (1, 3)  # plan lengths of the candidate seeds
    candidate_rounds: int = 1  # candidates: 13 domains × lengths × rounds

    def run_seeds(self) -> list[int]:
        return [self.seed + i for i in range(self.runs)]


# ------------------------------------------------------------------------------ the seed pool
def seed_pool(root: str | Path, study: EEStudy, *, workers: int = 2) -> list[dict]:
    """The filtered seed pool: every candidate that ``study.seed_solver`` passes ≤ ``max_seed_pass``, longest first.

    Candidates: ``13 × (lengths)`` verified seeds (``root/seed_pool``), each measured once (8
    rollouts, cached in ``root/seed_pool/filter-<solver>.jsonl``). Rows carry the measurement.
    """
    out = Path(root) / "seed_pool"
    lo, hi = study.candidate_steps
    rows = make_seeds(N_DOMAINS * (hi - lo + 1) * study.candidate_rounds, study.seed, out, workers=workers, progress=False,
                      min_steps=lo, max_steps=hi)
    solver = build_solver(study.seed_solver)
    measured = measure_seeds(rows, out, solver, seed=study.seed, attempts=study.attempts,
                             cache=out / f"filter-{study.seed_solver}.jsonl", workers=rollout_workers(workers),
                             groups_at_once=2)
    kept = [r for r in measured if r["pass_rate"] <= study.max_seed_pass]
    return select_seeds(kept, len(kept), study.max_seed_pass)


def run_seed_dirs(root: str | Path, pool: list[dict], study: EEStudy, run: int) -> list[Path]:
    """Run ``run``'s ``n_lineages`` seeds: a seeded draw from the longer half of the filtered pool."""
    longer = pool[: max(study.n_lineages, (len(pool) + 1) // 2)]
    if len(longer) < study.n_lineages:
        raise ValueError(f"the filtered seed pool holds {len(pool)} seeds, {study.n_lineages} lineages are needed; "
                         "lower n_lineages or widen candidate_steps")
    picked = random.Random(f"evokit-run-seeds:{run}").sample(longer, study.n_lineages)
    return [Path(root) / "seed_pool" / r["name"] for r in sorted(picked, key=lambda r: r["name"])]


def run_store(root: str | Path, seeds: list[Path], study: EEStudy, run: int, *, workers: int = 2) -> LineageStore:
    """Run ``run``'s lineages: one per seed, ``generations`` × ``per_generation`` environments (``run-<s>/store``)."""
    return evolve(seeds, run_dir(root, run) / "store",
                  EvolveConfig(generations=study.generations, per_generation=study.per_generation, seed=run),
                  workers=workers, progress=False)


def run_dir(root: str | Path, run: int) -> Path:
    return Path(root) / f"run-{run}"


# -------------------------------------------------------------------------------- the learner
def learner_config(study: EEStudy, run: int) -> SolverConfig:
    return solver_config(study.learner).reseeded(run)


def learner(root: str | Path, study: EEStudy, run: int) -> Solver:
    """Run ``run``'s student: ``study.learner`` pretrained on its own corpus (seed ``run``), cached in ``run-<s>/learner.pt``."""
    config = learner_config(study, run)
    path = run_dir(root, run) / "learner.pt"
    key = json.loads(json.dumps(dataclasses.asdict(config), default=str))
    blob = torch.load(path, weights_only=False) if path.exists() else None
    if blob is None or blob["config"] != key:
        solver = build_solver(config)
        blob = {"config": key, "policy_config": dataclasses.asdict(solver.policy.config),
                "policy": solver.policy.state_dict(), "shapes": solver.judge.shapes,
                "judge": solver.judge.state_dict(), "losses": solver.losses}
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(blob, path)
    policy_config = dataclasses.replace(PolicyConfig(**blob["policy_config"]), temperature=study.temperature)
    policy = SkillPolicy(policy_config, reference=support_reference())
    policy.load_state_dict(blob["policy"])
    judge = ShapeJudge(blob["shapes"], policy.config.n_features, config.doubt)
    judge.load_state_dict(blob["judge"])
    return Solver(config, policy, judge, blob["losses"])
