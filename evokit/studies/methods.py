"""EE §5.1's method comparison: evolution vs co-evolution vs environment ensemble, same number of environments.

Rows: ``train/<method>/…/steps.jsonl``, ``evals.jsonl``, ``initial_eval.json``; notebook ``ee_methods``.
How the setting departs from EE:

* **Baselines' order.** Evolution is trained with EL (its lineages have generations to climb);
  the environment ensemble and co-evolution have no lineages to climb, so they are served in
  random order over the environments they have made so far.
* **Co-evolution's refresh** is a task source (:class:`evokit.evolve.coevolution.Coevolution`): the
  weakness bank starts from the warm policy's rollouts on the seeds and takes every step's
  rollouts; every ``refresh_every`` steps a new round is synthesised and the one run continues on
  all rounds so far. Rounds split the same environment budget as evolution's store.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from evokit.curriculum import RandomOrder, store_envs
from evokit.evolve.baselines import CoevolutionConfig, WeaknessBank, ensemble, update_bank
from evokit.evolve.coevolution import Coevolution, bank_records, split_budget
from evokit.grpo import group_stats
from evokit.learners import PolicyConfig, SkillPolicy, collect_groups, evaluate
from evokit.lineage import LineageStore
from evokit.rollout import write_rows
from evokit.rows import read_rows
from evokit.sources import make_source
from evokit.studies.folder import check_study
from evokit.studies.warm_start import EEStudy, seed_store, warm_policy
from evokit.train import TrainConfig, train

MIN_FAILED = 3  # the ensemble needs parts; if fewer seeds are failed, the hardest seeds are used
ROLLOUTS = 8  # EE: pass rates over 8 rollouts


def _groups_cached(path: Path, policy: SkillPolicy, tasks: Sequence[Path], *, group_size: int, workers: int,
                   seed: int) -> list[dict]:
    """Rollout rows of one group per task, written once to ``path`` and read back afterwards."""
    if not path.exists():
        groups = collect_groups(policy, list(tasks), group_size=group_size, workers=workers, seed=seed)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.unlink(missing_ok=True)
        write_rows([r for g in groups for r in g], tmp)
        os.replace(tmp, path)
    return read_rows(path)


def pass_rates(rows: Sequence[dict]) -> dict[str, float]:
    """Per-task mean reward of rollout rows over the usable rollouts (:func:`evokit.grpo.group_stats`)."""
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["task"], []).append(r)
    return {t: g.mean_reward for t, v in by.items() if (g := group_stats(v)).n}



METHODS = ("evolution", "co-evolution", "ensemble")


@dataclass(frozen=True)
class MethodsStudy(EEStudy):
    """EE §5.1's method comparison: the shared sizes, co-evolution's refresh, the held-out set, the methods."""

    n_seeds: int = 6
    generations: int = 3
    steps: int = 20
    refresh_every: int = 10
    n_heldout: int = 4
    heldout_generations: int = 2
    eval_every: int = 5
    eval_rollouts: int = ROLLOUTS
    methods: tuple[str, ...] = METHODS
    evolution_curriculum: str = "el"


def methods_study(results_dir: str | Path, study: MethodsStudy = MethodsStudy(), *, workers: int = 2) -> Path:
    """EE §5.1: evolution vs co-evolution vs environment ensemble, with the same number of environments.

    The budget N is the number of evolved environments (generations ≥ 1) in the evolution store.
    The ensemble merges the seeds the warm policy fails (at least one of 8 rollouts fails; if fewer
    than three are, the three hardest); co-evolution synthesises N environments over
    ⌈steps / refresh_every⌉ rounds. Each method trains the same warm policy for ``steps`` GRPO
    steps and is evaluated every ``eval_every`` steps on a held-out set: the evolved environments
    (generations ≥ 1) of ``n_heldout`` lineages grown from other seeds. Rows:
    ``train/<method>/…/steps.jsonl``, ``evals.jsonl``, ``initial_eval.json``; see :func:`methods_frame`.
    """
    out = Path(results_dir)
    unknown = sorted(set(study.methods) - set(METHODS))
    if unknown:
        raise ValueError(f"unknown methods {unknown}; choose from {METHODS}")
    check_study(out, {"study": "methods", **asdict(study)})
    seeds, store = seed_store(out, n_seeds=study.n_seeds, generations=study.generations, seed=study.seed,
                              workers=workers,
                              seed_steps=study.seed_steps)
    budget = sum(e.generation >= 1 for e in store.envs())
    _, held = seed_store(out, n_seeds=study.n_heldout, generations=study.heldout_generations, seed=study.seed + 1000,
                         workers=workers, seed_steps=study.seed_steps, name="heldout_")
    heldout = sorted(held.path(e) for e in held.envs() if e.generation >= 1)
    cfg = TrainConfig(steps=study.steps, tasks_per_step=study.tasks_per_step, group_size=study.group_size,
                      seed=study.seed, workers=workers,
                      eval_every=study.eval_every, eval_rollouts=study.eval_rollouts)
    policy = warm_policy(out, study.seed, steps=study.warmup_steps)
    initial = out / "initial_eval.json"
    if not initial.exists():  # step 0 of every method: the same warm policy
        rate = evaluate(policy, heldout, n=study.eval_rollouts, seed=study.seed + 7, workers=workers)
        initial.write_text(json.dumps({"pass_rate": rate, "heldout_tasks": len(heldout), "budget": budget}))
    seed_rows = _groups_cached(out / "seed_rollouts.jsonl", policy, seeds, group_size=ROLLOUTS, workers=workers,
                               seed=study.seed * 7 + 3)
    for method in study.methods:
        run = out / "train" / method
        if method == "evolution":
            train(make_source(study.evolution_curriculum, envs=store_envs(store)), PolicyConfig(), run, cfg,
                  init_policy=policy, eval_tasks=heldout, progress=False)
        elif method == "ensemble":
            rates = pass_rates(seed_rows)
            by_rate = sorted(seeds, key=lambda d: (rates[d.name], d.name))
            failed = [d for d in by_rate if rates[d.name] < 1.0]
            failed = failed if len(failed) >= MIN_FAILED else by_rate[:MIN_FAILED]
            ens = LineageStore(out / "ensemble_store")
            made = ensemble(failed, ens, budget=budget, seed=study.seed)
            (out / "ensemble.json").write_text(json.dumps({"failed_seeds": [d.name for d in failed],
                                                           "pass_rates": rates, "made": len(made)}, indent=2))
            train(RandomOrder(store_envs(ens)), PolicyConfig(), run, cfg, init_policy=policy, eval_tasks=heldout,
                  progress=False)
        else:
            _coevolution(out, run, cfg, policy, seeds, seed_rows, heldout, budget=budget,
                         refresh_every=study.refresh_every)
    return out


def _coevolution(out: Path, run: Path, cfg: TrainConfig, policy: SkillPolicy, seeds: Sequence[Path],
                 seed_rows: Sequence[dict], heldout: Sequence[Path], *, budget: int, refresh_every: int) -> None:
    """One run on the co-evolution source: a new round from the weakness bank every ``refresh_every`` steps."""
    config = CoevolutionConfig(refresh_every=refresh_every)
    bank = update_bank(WeaknessBank(), bank_records(seed_rows, seeds), decay=config.decay)
    sizes = split_budget(budget, math.ceil(cfg.steps / refresh_every))
    source = Coevolution(tuple(seeds), out / "coevolution_store", sizes, bank, config)
    train(source, PolicyConfig(), run, cfg, init_policy=policy, eval_tasks=heldout, progress=False)


def methods_frame(results_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(held-out evaluations, training steps): ``method, steps_trained, heldout_pass_rate`` and per-step rows.

    ``steps_trained`` 0 is the shared warm policy (``initial_eval.json``).
    """
    out = Path(results_dir)
    initial = json.loads((out / "initial_eval.json").read_text())["pass_rate"]
    evals, steps = [], []
    for method_dir in sorted((out / "train").iterdir()):
        evals.append({"method": method_dir.name, "steps_trained": 0, "heldout_pass_rate": initial})
        evals += [{"method": method_dir.name, "steps_trained": r["step"] + 1, "heldout_pass_rate": r["pass_rate"]}
                  for r in read_rows(method_dir / "evals.jsonl")]
        steps += [{"method": method_dir.name, "step": r["step"], "mean_reward": r["mean_reward"],
                   "partially_solved_share": r["partially_solved_share"], "turns": r["turns"]}
                  for r in read_rows(method_dir / "steps.jsonl")]
    return pd.DataFrame(evals), pd.DataFrame(steps)


def environments_per_method(results_dir: str | Path) -> dict[str, int]:
    """How many environments each method had to train on (the paper's "same total number")."""
    out = Path(results_dir)
    counts = {"evolution": sum(e.generation >= 1 for e in LineageStore(out / "store").envs())}
    for method, name in (("ensemble", "ensemble_store"), ("co-evolution", "coevolution_store")):
        if (out / name).exists():
            counts[method] = len(LineageStore(out / name).envs())
    return counts

