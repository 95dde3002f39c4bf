"""The training studies' shared start: the learner, the seed pool and each run's evolved lineages (EE).

What EE's curricula and method studies share, and how it departs from EE (stated once here):

* **The learner is pretrained on data** (so it does not share p_T with D_T). Each run's student is a member of the solver
  population (:mod:`evokit.cpu_agent.solvers`, ``EEStudy.learner``) pretrained on its own corpus drawn
  with the run's seed (:meth:`~evokit.cpu_agent.solvers.SolverConfig.reseeded`): it never reads p_T.
  Its pretraining is our stand-in for EE's step 0 (rejection-sampling fine-tuning); GRPO then
  starts from it with **no KL anchor** (``TrainConfig.beta_kl`` = 0, TRL's default, in every
  study: papers.md states no KL coefficient for EE's GRPO, so the student may drift from its
  start as far as the rewards take it). It acts with ``attempts`` techniques per step,
  reading its command's exit status and output (its judge), so a hard step costs more turns.
* **Sampling temperature (changed after a pilot, stated).** Pretrained on its corpus, the student
  is nearly deterministic: in the pilot (one run, 10 steps, temperature 1) its most likely skill
  had probability ≥ 0.998 at 75 % of the seed pool's steps (median 1.0), so every GRPO group was
  all-pass or all-fail (partially solved share 0 under both curricula) and GRPO had no signal.
  An LLM student sampled at temperature 1 is far less peaked. We therefore sample the student
  at ``temperature`` = 4 (median top probability 0.80 on the same steps), in training and on the
  benchmark alike, chosen from those entropies before any claim was measured. Seed admission
  measures the student at that temperature too.
* **Seeds admitted by a band on the run's own student** (:func:`evokit.seeds.admit_seeds`,
  docs/preregistration.md, "Seed admission"): each run makes its own candidates (``candidate_steps``
  steps, balanced over domains: 13 domains × 3 lengths × ``candidate_rounds``, drawn with the
  run's seed in ``run-<s>/seed_pool``), measures them with its own student at its training
  temperature over 8 rollouts, and admits those in ``seed_band`` (:data:`STUDENT_BAND`,
  2/8 ≤ p̂ ≤ 4/8), the longest plan first, then the most turns on successful trajectories. EE keeps
  seeds a frontier model passes ≤ 4/8; the lower bound is evokit's: a seed the student never passes
  gives only all-fail groups, which EL cannot leave, and a pass rate of 0 cannot fall. It is 2/8,
  not 1/8, because a seed admitted on a single pass of 8 re-measured at 0 about half the time
  (32 of 68 over three blocks; 8 of 82 from 2/8: docs/preregistration.md, changes log). Ranking by turns over all
  rollouts (failures included) would rank by failure. A seed admitted in an earlier run (same
  content) is not admitted again, so runs are independent units. The admitted seeds are measured
  again on rollouts of their own seeds (``run-<s>/seed_admission.json``), so that a seed admitted by
  a lucky draw is reported at its own pass rate: the share at 0 is a precondition the summaries
  report. Candidates are 1–3 steps (EE's seeds need ≥ 30 turns of a frontier model; the CPU
  learner's turns are on another scale), chosen before any run for cost.
* **N_{i,g} = ``per_generation`` environments per generation** (EE's E_{i,g,k};
  :class:`evokit.evolve.EvolveConfig`), so EL's within-generation step (k < N → k + 1) runs.
* **Runs.** Every claim is over ``runs`` independent runs (seeds ``seed … seed + runs − 1``):
  each has its own seed tasks, its own evolution, learner and rollouts; the across-run intervals
  come from :mod:`evokit.stats`. Layout: ``root/run-<s>/{seed_pool,seed_admission.json,store,
  learner.pt,train/…}``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from evokit.cpu_agent.policy import PolicyConfig, SkillPolicy
from evokit.cpu_agent.solvers import (
    ShapeJudge,
    Solver,
    SolverConfig,
    build_solver,
    solver_config,
    support_reference,
)
from evokit.evolve import EvolveConfig, evolve
from evokit.lineage import LineageStore
from evokit.rollout import rollout_workers
from evokit.seeds import SEED_ROLLOUTS, SeedBand, admit_seeds, make_seeds, measure_seeds

N_DOMAINS = 13  # the catalog's scenario domains: candidates cover each at each length once


#: Claims 4–6's admission band on the run's own student (docs/preregistration.md, "Seed admission"):
#: from 2/8, where the population's band for claims 1–3 starts at 1/8 (:class:`evokit.seeds.SeedBand`).
STUDENT_BAND = SeedBand(lo=2 / SEED_ROLLOUTS)


@dataclass(frozen=True)
class EEStudy:
    """What EE's training studies share (``study.json`` records a study's config; a notebook's parameters override it)."""

    runs: int = 5  # independent runs per claim (every claim: ≥ 5 seeds)
    seed: int = 0  # runs use seeds seed … seed + runs − 1
    n_lineages: int = 4  # seeds (lineages) per run, admitted from the run's own candidates (EE: 500)
    generations: int = 3  # EE: 15
    per_generation: int = 2  # N_{i,g}: environments per generation (EE's E_{i,g,k})
    steps: int = 20  # GRPO updates (EE: 200; the EL comparison reads the first 50)
    group_size: int = 8  # B (EE: 8)
    tasks_per_step: int = 2  # GRPO groups per update (not stated in EE)
    attempts: int = 3  # techniques a learner may try per step, reading its results (turns depend on difficulty)
    learner: str = "A"  # the student: this population member, reseeded per run (evokit.cpu_agent.solvers.SOLVERS)
    temperature: float = 4.0  # the student's sampling temperature in rollouts (EE: 1.0; ours, see the docstring)
    seed_band: SeedBand = STUDENT_BAND  # admitted: the run's student passes a seed within the band (EE: ≤ 4/8)
    candidate_steps: tuple[int, int] = (1, 3)  # plan lengths of the candidate seeds
    candidate_rounds: int = 1  # candidates per run: 13 domains × lengths × rounds
    max_candidate_rounds: int = 4  # more rounds, one at a time, while a run admits fewer than n_lineages

    def run_seeds(self) -> list[int]:
        return [self.seed + i for i in range(self.runs)]


# ------------------------------------------------------------------------------ the seed pool
ADMISSION_STREAM = 1  # admission rollouts: measure_seeds seed run·10 + this (its rollouts: that·100_003 + index)
RECHECK_STREAM = 2  # the re-measurement's: another stream, so admission's luck is not measured twice


def seed_pool(root: str | Path, study: EEStudy, *, workers: int = 2) -> list[dict]:
    """Every run's admitted seeds (rows with ``run`` and ``path``), each run's ranked as :func:`evokit.seeds.admit_seeds`.

    Per run (in order): its candidates in ``run-<s>/seed_pool`` (``candidate_rounds`` rounds, one
    more at a time up to ``max_candidate_rounds`` while fewer than ``n_lineages`` are admitted),
    measured by its student (cached in ``filter.jsonl`` there); admitted seeds whose content an
    earlier run admitted are dropped; the first ``n_lineages`` are measured again on their own
    rollout seeds and recorded with the band in ``run-<s>/seed_admission.json``. Raises ValueError when a run admits fewer than
    ``n_lineages`` seeds.
    """
    pool: list[dict] = []
    taken: set[str] = set()
    for run in study.run_seeds():
        admitted = _admit(root, study, run, taken, workers)
        taken |= {r["content_hash"] for r in admitted}
        pool += admitted
    return pool


def _admit(root: str | Path, study: EEStudy, run: int, taken: set[str], workers: int) -> list[dict]:
    out = run_dir(root, run) / "seed_pool"
    lo, hi = study.candidate_steps
    student = learner(root, study, run)
    kw = {"attempts": study.attempts, "workers": rollout_workers(workers), "groups_at_once": 2}
    for rounds in range(study.candidate_rounds, max(study.candidate_rounds, study.max_candidate_rounds) + 1):
        rows = make_seeds(N_DOMAINS * (hi - lo + 1) * rounds, run, out, workers=workers, progress=False,
                          min_steps=lo, max_steps=hi)
        measured = measure_seeds(rows, out, student, seed=run * 10 + ADMISSION_STREAM, cache=out / "filter.jsonl",
                                 **kw)
        ranked = [r for r in admit_seeds(measured, study.seed_band) if r["content_hash"] not in taken]
        if len(ranked) >= study.n_lineages:
            break
    if len(ranked) < study.n_lineages:
        band = study.seed_band
        raise ValueError(f"run {run}: {len(ranked)} of {len(rows)} candidate seeds lie in the band "
                         f"{band.lo:.3f} ≤ p ≤ {band.hi:.3f} for the run's student; {study.n_lineages} are needed: "
                         "raise max_candidate_rounds or lower n_lineages")
    picked = ranked[: study.n_lineages]
    again = measure_seeds(picked, out, student, seed=run * 10 + RECHECK_STREAM, cache=out / "recheck.jsonl", **kw)
    (run_dir(root, run) / "seed_admission.json").write_text(json.dumps({
        "run": run, "band": [study.seed_band.lo, study.seed_band.hi], "candidates": len(rows),
        "in_band": len(ranked), "admitted": [r["name"] for r in picked],
        "content_hashes": [r["content_hash"] for r in picked],
        "admission_pass_rates": [r["pass_rate"] for r in picked],
        "recheck_pass_rates": [r["pass_rate"] for r in again]}, indent=2))
    return [{**r, "run": run, "path": str(out / r["name"])} for r in picked]


def run_seed_dirs(root: str | Path, pool: list[dict], study: EEStudy, run: int) -> list[Path]:
    """Run ``run``'s ``n_lineages`` seeds: its own admitted seeds from :func:`seed_pool` (no other run's)."""
    mine = [Path(r["path"]) for r in pool if r["run"] == run]
    if len(mine) != study.n_lineages:
        raise ValueError(f"run {run} has {len(mine)} admitted seeds in the pool, {study.n_lineages} lineages are needed")
    return sorted(mine, key=lambda p: p.name)


def seed_admission(root: str | Path, run: int) -> dict | None:
    """What ``run-<s>/seed_admission.json`` records (None if the run has none)."""
    path = run_dir(root, run) / "seed_admission.json"
    return json.loads(path.read_text()) if path.exists() else None


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
