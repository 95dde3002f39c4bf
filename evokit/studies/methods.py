"""EE §5.1's method comparison: evolution vs co-evolution vs environment ensemble, same number of environments.

Rows: ``train/<method>/…/steps.jsonl``, ``evals.jsonl``, ``initial_eval.json``; notebook ``ee_methods``.
How the setting departs from EE:

* **Baselines' order.** Evolution is trained with EL (its lineages have generations to climb);
  the environment ensemble and co-evolution have no lineages to climb, so they are served in
  random order over the environments they have made so far.
* **Co-evolution windows.** The weakness bank starts from the warm policy's rollouts on the
  seeds and is updated from each window's training rollouts; every ``refresh_every`` steps a new
  round is synthesised and the policy continues (same weights, optimizer and step count) on all
  rounds so far. Rounds split the same environment budget as evolution's store.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from evokit.evolve.baselines import (
    CoevolutionConfig,
    WeaknessBank,
    coevolve_round,
    ensemble,
    update_bank,
)
from evokit.learners import SkillPolicy, collect_groups, evaluate, task_plan
from evokit.lineage import LineageStore
from evokit.rollout import write_rows
from evokit.rows import read_rows
from evokit.seeds import MAX_STEPS, MIN_STEPS
from evokit.studies.rows import check_study
from evokit.studies.warm_start import (
    WARMUP_STEPS,
    initial_state,
    seed_store,
    start_from,
    warm_policy,
)
from evokit.train import TrainConfig, train_curriculum

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
    """Per-task pass rate of rollout rows (masked rollouts left out)."""
    by: dict[str, list[float]] = {}
    for r in rows:
        if not r["masked"] and r["reward"] is not None:
            by.setdefault(r["task"], []).append(float(r["reward"]))
    return {t: float(np.mean(v)) for t, v in by.items()}


def bank_records(rows: Sequence[dict], task_dirs: Sequence[Path]) -> list[dict]:
    """Rollout rows as :func:`~evokit.evolve.baselines.update_bank` records (plan + per-step results)."""
    plans = {Path(d).name: task_plan(d)[0] for d in task_dirs}
    return [{"plan": plans[r["task"]], "step_results": r["rewards"]} for r in rows
            if not r["masked"] and r["rewards"] and r["task"] in plans]



METHODS = ("evolution", "co-evolution", "ensemble")


def methods_study(results_dir: str | Path, *, n_seeds: int, generations: int, steps: int, refresh_every: int,
                  n_heldout: int, heldout_generations: int, eval_every: int, group_size: int = 8,
                  tasks_per_step: int = 2, eval_rollouts: int = ROLLOUTS, seed: int = 0, workers: int = 2,
                  methods: Sequence[str] = METHODS, evolution_curriculum: str = "el",
                  warmup_steps: int = WARMUP_STEPS, seed_steps: Sequence[int] = (MIN_STEPS, MAX_STEPS)) -> Path:
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
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise ValueError(f"unknown methods {unknown}; choose from {METHODS}")
    check_study(out, {"study": "methods", "n_seeds": n_seeds, "generations": generations, "steps": steps,
                        "refresh_every": refresh_every, "n_heldout": n_heldout,
                        "heldout_generations": heldout_generations, "eval_every": eval_every,
                        "group_size": group_size, "tasks_per_step": tasks_per_step, "eval_rollouts": eval_rollouts,
                        "seed": seed, "methods": list(methods), "evolution_curriculum": evolution_curriculum,
                        "warmup_steps": warmup_steps, "seed_steps": list(seed_steps)})
    seeds, store = seed_store(out, n_seeds=n_seeds, generations=generations, seed=seed, workers=workers,
                              seed_steps=seed_steps)
    budget = sum(e.generation >= 1 for e in store.envs())
    _, held = seed_store(out, n_seeds=n_heldout, generations=heldout_generations, seed=seed + 1000,
                         workers=workers, seed_steps=seed_steps, name="heldout_")
    heldout = sorted(held.path(e) for e in held.envs() if e.generation >= 1)
    cfg = TrainConfig(steps=steps, tasks_per_step=tasks_per_step, group_size=group_size, seed=seed, workers=workers,
                      eval_every=eval_every, eval_rollouts=eval_rollouts)
    policy = warm_policy(out, cfg, steps=warmup_steps)
    initial = out / "initial_eval.json"
    if not initial.exists():  # step 0 of every method: the same warm policy
        rate = evaluate(policy, heldout, n=eval_rollouts, seed=seed + 7, workers=workers)
        initial.write_text(json.dumps({"pass_rate": rate, "heldout_tasks": len(heldout), "budget": budget}))
    seed_rows = _groups_cached(out / "seed_rollouts.jsonl", policy, seeds, group_size=ROLLOUTS, workers=workers,
                               seed=seed * 7 + 3)
    for method in methods:
        run = out / "train" / method
        if method == "evolution":
            start_from(run, cfg, policy.state_dict(), initial_state(evolution_curriculum, store, cfg))
            train_curriculum(store, evolution_curriculum, run, cfg, eval_tasks=heldout, progress=False)
        elif method == "ensemble":
            rates = pass_rates(seed_rows)
            by_rate = sorted(seeds, key=lambda d: (rates[d.name], d.name))
            failed = [d for d in by_rate if rates[d.name] < 1.0]
            failed = failed if len(failed) >= MIN_FAILED else by_rate[:MIN_FAILED]
            ens = LineageStore(out / "ensemble_store")
            made = ensemble(failed, ens, budget=budget, seed=seed)
            (out / "ensemble.json").write_text(json.dumps({"failed_seeds": [d.name for d in failed],
                                                           "pass_rates": rates, "made": len(made)}, indent=2))
            start_from(run, cfg, policy.state_dict(), initial_state("random", ens, cfg))
            train_curriculum(ens, "random", run, cfg, eval_tasks=heldout, progress=False)
        else:
            _coevolution(out, run, cfg, policy, seeds, seed_rows, heldout, budget=budget,
                         refresh_every=refresh_every, seed=seed)
    return out


def _coevolution(out: Path, run: Path, cfg: TrainConfig, policy: SkillPolicy, seeds: Sequence[Path],
                 seed_rows: Sequence[dict], heldout: Sequence[Path], *, budget: int, refresh_every: int,
                 seed: int) -> None:
    """Windows of ``refresh_every`` steps; before each, a new round synthesised from the weakness bank."""
    config = CoevolutionConfig(refresh_every=refresh_every)
    co = LineageStore(out / "coevolution_store")
    rounds = math.ceil(cfg.steps / refresh_every)
    sizes = [budget // rounds + (r < budget % rounds) for r in range(rounds)]
    bank = update_bank(WeaknessBank(), bank_records(seed_rows, seeds), decay=config.decay)
    previous = None
    for r in range(rounds):
        coevolve_round(bank, seeds, co, n=sizes[r], round_index=r + 1, seed=seed, config=config)
        window = run / f"window-{r}"
        end = min((r + 1) * refresh_every, cfg.steps)
        if previous is None:
            start_from(window, cfg, policy.state_dict(), initial_state("random", co, cfg))
        else:
            ck = torch.load(previous / "checkpoint.pt", weights_only=False)
            start_from(window, cfg, ck["policy"], initial_state("random", co, cfg), step=ck["step"],
                        optimizer_state=ck["optimizer"])
        train_curriculum(co, "random", window, replace(cfg, steps=end), eval_tasks=heldout, progress=False)
        (window / "bank.json").write_text(json.dumps(bank.to_json()))
        bank = update_bank(bank, bank_records(read_rows(window / "rollouts.jsonl"), [co.path(e) for e in co.envs()]),
                           decay=config.decay)
        previous = window


def _runs(method_dir: Path) -> list[Path]:
    windows = sorted(method_dir.glob("window-*"), key=lambda p: int(p.name.split("-")[1]))
    return windows or [method_dir]


def methods_frame(results_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(held-out evaluations, training steps): ``method, steps_trained, heldout_pass_rate`` and per-step rows.

    ``steps_trained`` 0 is the shared warm policy (``initial_eval.json``).
    """
    out = Path(results_dir)
    initial = json.loads((out / "initial_eval.json").read_text())["pass_rate"]
    evals, steps = [], []
    for method_dir in sorted((out / "train").iterdir()):
        evals.append({"method": method_dir.name, "steps_trained": 0, "heldout_pass_rate": initial})
        for run in _runs(method_dir):
            evals += [{"method": method_dir.name, "steps_trained": r["step"] + 1, "heldout_pass_rate": r["pass_rate"]}
                      for r in read_rows(run / "evals.jsonl")]
            steps += [{"method": method_dir.name, "step": r["step"], "mean_reward": r["mean_reward"],
                       "partially_solved_share": r["partially_solved_share"], "turns": r["turns"]}
                      for r in read_rows(run / "steps.jsonl")]
    return pd.DataFrame(evals), pd.DataFrame(steps)


def environments_per_method(results_dir: str | Path) -> dict[str, int]:
    """How many environments each method had to train on (the paper's "same total number")."""
    out = Path(results_dir)
    counts = {"evolution": sum(e.generation >= 1 for e in LineageStore(out / "store").envs())}
    for method, name in (("ensemble", "ensemble_store"), ("co-evolution", "coevolution_store")):
        if (out / name).exists():
            counts[method] = len(LineageStore(out / name).envs())
    return counts

