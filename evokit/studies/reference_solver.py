"""A p_T-prior reference solver and its pass rate over 8 rollouts (kept; no notebook measures with it).

Since issue 13 the EE notebooks measure difficulty with the data-pretrained solver population of
:mod:`evokit.studies.population` (its learners never read p_T). This solver starts *at* p_T, the
same prior that defines D_T, so a correlation between the two would follow from how it is built;
it stays for the lineage browser's tests, as the user of the ``"weighted"`` curriculum source, and
for :func:`env_seed` (the content-keyed rollout seed the population shares). What follows
describes it as it was used before.

EE (papers.md, "experimental setup") monitors the difficulty of every evolved environment by the
**pass rate of strong reference models over 8 rollouts**. Here:

1. **The reference solver is not a frontier model.** Ours is the CPU learner
   (:class:`evokit.learners.SkillPolicy`) warmed up by a short GRPO run on one-step tasks of the
   catalog's (scenario, skill) pairs, drawn as often as p_T says they occur (:func:`reference_solver`).
   It starts at p_T and learns most where it already succeeds sometimes, so after warm-up it knows
   common techniques well and rare ones less, which is the property a reference model needs here. It
   is a weak solver: it reads only a bag of words of each step's sentence, and after 40 warm-up
   updates it still confuses some common pairs. It is trained once and saved
   (``reference_solver.pt``).
2. **Turns.** The learner runs one command per step (it never reads outputs), so its turns equal the
   plan's length.
3. **Seeds.** EE keeps seeds a frontier model passes at most 4/8; we keep seeds our reference passes at
   least 1/8 (:func:`measurable_seeds`), since a lineage that starts at 0 cannot fall.

Each distinct environment (by content hash) is measured once per solver: the rollout seed is keyed
by the environment's content (:func:`env_seed`), so the same task gets the same pass rate in every
store and every notebook, and :func:`measure` keeps a cache of what it has measured.
"""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm  # a widget in Jupyter, text in a terminal

from evokit.catalog import pairs
from evokit.curriculum import Weighted
from evokit.difficulty import catalog_reference
from evokit.grpo import usable
from evokit.learners import PolicyConfig, SkillPolicy, collect_groups
from evokit.plan import Plan, PlanError, Step, render
from evokit.rows import append_rows, read_rows
from evokit.seeds import make_seeds
from evokit.studies.folder import StudyError
from evokit.train import TrainConfig, final_policy, train

ROLLOUTS = 8  # EE: pass rate over 8 rollouts (B = 8)
WARMUP_STEPS = 40  # GRPO updates of the reference solver's warm-up (ours; EE uses frontier models)
WARMUP_TASKS = 8  # one-step tasks per warm-up update
WARMUP_LR = 0.05  # Adam step size of the warm-up (ours)


# ----------------------------------------------------------------------- the solver
def pair_tasks(out: str | Path, seed: int = 0) -> list[Path]:
    """One-step tasks, one per compatible catalog (scenario, skill) pair, rendered once into ``out``.

    A pair whose skill cannot render on its scenario's data (a needed field missing) is left out.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tasks = []
    for s, k in pairs():
        dest = out / f"{s}__{k}"
        if not dest.exists():
            try:
                render(Plan((Step(s, k),)), seed, dest)
            except PlanError:
                continue
        tasks.append(dest)
    return tasks


def pair_prior(scenario: str, skill: str) -> float:
    """p_T(σ)·p_T(κ | σ) under the catalog's reference: how common the pair is "in the world"."""
    ref = catalog_reference()
    i, j = ref.scenarios.index(scenario), ref.skills.index(skill)
    return float(np.exp(ref.log_scenario[i] + ref.log_skill[i, j]))


def reference_solver(results_dir: str | Path, seed: int = 0, warmup_steps: int = WARMUP_STEPS, *,
                     tasks_per_step: int = WARMUP_TASKS, group_size: int = ROLLOUTS, lr: float = WARMUP_LR,
                     workers: int = 2, cache: bool = True, progress: bool = True) -> SkillPolicy:
    """The stand-in for EE's reference models: the CPU learner after a short GRPO warm-up.

    EE measures an environment's difficulty by strong reference models' pass rate over 8
    rollouts. Here the reference is :class:`~evokit.learners.SkillPolicy` (which starts at p_T)
    trained by ``warmup_steps`` GRPO updates, each on ``tasks_per_step`` one-step tasks of catalog
    pairs (:func:`pair_tasks`), ``group_size`` rollouts each. Pairs are drawn in proportion to
    p_T(σ)·p_T(κ | σ), as a pretrained model meets common situations and techniques more often;
    and GRPO learns only from partially solved groups, so a rare technique (a group of 8 failures
    teaches nothing) is learned less even when drawn. After warm-up the solver knows common
    skills well and rare ones less. The warm-up is :func:`evokit.train.train` on the p_T-weighted
    source (:class:`evokit.curriculum.Weighted`), its rows in ``results_dir/reference_solver_run``;
    the weights go to ``results_dir/reference_solver.pt`` (its settings beside it) and are
    reloaded when the settings match.
    """
    out = Path(results_dir)
    out.mkdir(parents=True, exist_ok=True)
    path, meta_path, run = out / "reference_solver.pt", out / "reference_solver.json", out / "reference_solver_run"
    params = {"seed": seed, "warmup_steps": warmup_steps, "tasks_per_step": tasks_per_step,
              "group_size": group_size, "lr": lr}
    if cache and path.exists() and meta_path.exists() and json.loads(meta_path.read_text()).get("params") == params:
        return SkillPolicy.load(path)
    shutil.rmtree(run, ignore_errors=True)  # another solver's run (or no cache wanted): start over
    tasks = pair_tasks(out / "reference_tasks", seed)
    source = Weighted(tuple(tasks), tuple(pair_prior(*t.name.split("__")) for t in tasks))
    cfg = TrainConfig(steps=warmup_steps, tasks_per_step=tasks_per_step, group_size=group_size, lr=lr, seed=seed,
                      workers=group_size, groups_at_once=workers, eval_every=0, rollout_seeds="reference-warmup")
    train(source, PolicyConfig(), run, cfg, progress=progress)
    policy = final_policy(run, PolicyConfig(), seed)
    policy.save(path)
    meta_path.write_text(json.dumps({"params": params, "tasks": len(tasks)}, indent=2))
    # pass rates measured by an earlier solver in this folder are not this one's
    for old in out.glob("pass_rates-*.jsonl"):
        old.unlink()
    return policy


# ------------------------------------------------------------------------ measuring
def _summary(group) -> dict:
    """Pass rate as :func:`evokit.learners.evaluate_per_task` computes it, plus the mean turns."""
    kept = [r for r in group if usable(r)]
    if not kept:
        raise RuntimeError(f"{group[0].task}: every rollout was masked: {group[0].error}")
    return {"pass_rate": float(np.mean([r.reward for r in kept])), "turns": float(np.mean([r.n_turns for r in kept])),
            "rollouts": len(kept), "masked": len(group) - len(kept)}


def env_seed(content_hash: str, seed: int) -> int:
    """Rollout seed of one environment: its content (same task, same measurement in every store) and the study seed."""
    return (seed * 1_000_003 + int(content_hash[:12], 16)) % 2**31


def pass_rate_cache(solver_dir: str | Path, *, seed: int, rollouts: int) -> Path:
    """Where :func:`measure` keeps the pass rates of the solver in ``solver_dir`` (one file per study seed
    and number of rollouts, since both change the measurement)."""
    return Path(solver_dir) / f"pass_rates-seed{seed}-rollouts{rollouts}.jsonl"


def measure(solver: SkillPolicy, tasks: dict[str, Path], cache: str | Path, *, seed: int, rollouts: int = ROLLOUTS,
            workers: int = 2, progress: bool = True, desc: str = "pass rates") -> dict[str, dict]:
    """Pass rate and mean turns of ``solver`` over ``rollouts`` rollouts for each task (content hash → folder).

    Results are appended to ``cache`` (JSONL keyed by content hash) as each task finishes, and tasks already
    there are not run again (the rollout seed depends only on the content and ``seed``, so a cached row is
    what running again would give). Returns the whole cache.
    """
    cache = Path(cache)
    known = {r["content_hash"]: r for r in read_rows(cache)}
    todo = {h: p for h, p in tasks.items() if h not in known}
    with ThreadPoolExecutor(max(1, workers)) as pool, \
            tqdm(total=len(todo), desc=desc, unit="env", disable=not progress or not todo) as bar:
        futures = {pool.submit(lambda h, path: _summary(collect_groups(
            solver, [path], group_size=rollouts, workers=rollouts, seed=env_seed(h, seed))[0]), h, path): h
            for h, path in todo.items()}
        for fut in as_completed(futures):
            row = {"content_hash": futures[fut], **fut.result()}
            append_rows(cache, [row])
            known[row["content_hash"]] = row
            bar.update()
    return known


def measurable_seeds(results_dir: str | Path, solver: SkillPolicy, *, n_seeds: int, pool: int, seed: int,
                     min_pass: float, cache: str | Path, rollouts: int = ROLLOUTS, workers: int = 2,
                     progress: bool = True) -> list[Path]:
    """The first ``n_seeds`` verified seeds that the reference solver passes at least ``min_pass`` of the
    time, drawn from at most ``pool``·``n_seeds`` seeds (fewer are returned if the pool holds fewer).

    EE keeps seeds a frontier model passes at most 4/8 (hard ones). Our reference solver fails many of our
    seeds outright, and a lineage whose seed is at pass rate 0 can show no decline, so we keep the seeds it
    passes at least once in 8 (``min_pass`` = 1/8): the lineages start where a fall is measurable. Seeds are
    made and measured ``n_seeds`` at a time (seed i is the same whatever the pool size), so the pool grows
    only as far as needed. Pass rates go to ``cache`` (see :func:`measure`).
    """
    out = Path(results_dir)
    keep: list[Path] = []
    for k in range(1, pool + 1):
        rows = make_seeds(k * n_seeds, seed, out / "seeds", workers=workers, progress=progress)
        measured = measure(solver, {r["content_hash"]: out / "seeds" / r["name"] for r in rows}, cache,
                           seed=seed, rollouts=rollouts, workers=workers, progress=progress, desc="seed pass rates")
        keep = [out / "seeds" / r["name"] for r in rows if measured[r["content_hash"]]["pass_rate"] >= min_pass]
        if len(keep) >= n_seeds:
            break
    if not keep:
        raise StudyError(f"none of the {pool * n_seeds} seeds in {out / 'seeds'} has a reference pass rate ≥ "
                         f"{min_pass}; raise the seed pool or the reference solver's warm-up steps")
    return keep[:n_seeds]
