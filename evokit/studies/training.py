"""The training studies: EE's curricula and method comparison, GenEnv's loop, data efficiency and theory.

Each study is one call that computes (or resumes) and writes rows under its results folder; the
notebooks ``ee_el_scheduler``, ``ee_trajectory_growth``, ``ee_methods``, ``genenv_theory``,
``genenv_alpha``, ``genenv_vs_random`` and ``genenv_data_efficiency`` read the rows and draw.
Every step is cached on disk: seeds, lineage stores and training runs resume where they stopped
(:mod:`evokit.seeds`, :mod:`evokit.evolve`, :mod:`evokit.train`), and ``study.json`` refuses a
results folder made with other parameters.

How the setting departs from the papers, stated here once:

1. **The policy** is the CPU learner (:class:`evokit.learners.SkillPolicy`), not a 7B/27B LLM,
   and the tasks are evokit's procedural family, not ALFWorld, BFCL or Terminal-Bench 2.1.
   Held-out sets are procedural too (tasks of lineages or seeds never trained on).
2. **Warm start (EE's step 0).** EE fine-tunes its students by rejection sampling before GRPO.
   Our stand-in (:func:`warm_policy`) is a few full-batch cross-entropy steps on the reference
   solutions of one-step tasks, one per catalog (scenario, skill) pair (a reference solution is
   a successful trajectory): the learner then knows techniques broadly but imperfectly. GenEnv's
   studies start from the untrained learner, as the paper's loop starts from the base model.
3. **Seeds.** The EE notebooks evolve from one-step seeds (``seed_steps=(1, 1)``): EE filters its
   seeds so that a frontier model passes ≤ 4 of 8 (hard, not hopeless); for the CPU learner that is
   a one-step task. Measured at smoke scale (8 seeds, 30 steps, partially solved share EL vs random):
   2-step seeds × 6 generations with the warm start 0.27 vs 0.28 (evolved generations drop to pass
   rate 0 at once, EL stalls on them; 45 of 56 environments at 0 for the untrained learner);
   one-step seeds × 4 generations 0.27 vs 0.07 untrained and 0.37 vs 0.17 warm-started, where EL
   also climbs further (generation 3 vs 1.5 reached in 30 steps).
4. **One command per turn.** The learner issues one shell command per plan step and never reads
   outputs, so turns per trajectory equal the length of the plan it is served and "commands per
   turn" is 1 by construction; EE's tokens per turn has no counterpart. What can grow is turns
   per trajectory, as EL unlocks later (longer) generations.
5. **Baselines' order.** Evolution is trained with EL (its lineages have generations to climb);
   the environment ensemble and co-evolution have no lineages to climb, so they are served in
   random order over the environments they have made so far.
6. **Co-evolution windows.** The weakness bank starts from the warm policy's rollouts on the
   seeds and is updated from each window's training rollouts; every ``refresh_every`` steps a new
   round is synthesised and the policy continues (same weights, optimizer and step count) on all
   rounds so far. Rounds split the same environment budget as evolution's store.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from evokit import genenv
from evokit.curriculum import ELConfig, make_curriculum
from evokit.difficulty import catalog_reference, score
from evokit.evolve import EvolveConfig, evolve
from evokit.evolve.baselines import (
    CoevolutionConfig,
    WeaknessBank,
    coevolve_round,
    ensemble,
    update_bank,
)
from evokit.grpo import dead_group_probability
from evokit.learners import (
    PolicyConfig,
    SkillPolicy,
    collect_groups,
    evaluate,
    goal_features,
    step_goals,
    task_plan,
)
from evokit.lineage import EnvRecord, LineageStore
from evokit.plan import render
from evokit.rollout import write_rows
from evokit.seeds import MAX_STEPS, MIN_STEPS, make_seeds
from evokit.studies.evolution import StudyError, _check_study, pair_tasks
from evokit.tasks import Lineage
from evokit.train import GenEnvConfig, TrainConfig, read_rows, train_curriculum, train_genenv

WARMUP_STEPS = 6  # cross-entropy steps of the warm start (ours: partial knowledge, see the docstring)
WARMUP_LR = 0.05  # Adam step size of the warm start (ours; full-batch cross-entropy, no sampling noise)
MIN_FAILED = 3  # the ensemble needs parts; if fewer seeds are failed, the hardest seeds are used
ROLLOUTS = 8  # EE: pass rates over 8 rollouts


# ----------------------------------------------------------------------------- bookkeeping
def _check_params(out: Path, params: dict) -> None:
    """First run: record ``params`` in ``study.json``; later runs: refuse other ones (rows would mix)."""
    _check_study(out, params)


def _append_rows(path: Path, rows: Sequence[dict]) -> None:
    with open(path, "a") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True, default=float) + "\n")


def _new_policy(cfg: TrainConfig) -> SkillPolicy:
    """The policy :mod:`evokit.train` builds for ``cfg`` (same config, same initialisation)."""
    return SkillPolicy(PolicyConfig(**{**asdict(cfg.policy), "seed": cfg.seed}))


def _start_from(out: Path, cfg: TrainConfig, policy_state: dict, curriculum_state, *, step: int = 0,
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
    policy = _new_policy(cfg)
    policy.load_state_dict(policy_state)
    opt = torch.optim.Adam(policy.parameters(), lr=cfg.lr)
    if optimizer_state is not None:
        opt.load_state_dict(optimizer_state)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / ".checkpoint.tmp"
    torch.save({"policy": policy.state_dict(), "optimizer": opt.state_dict(), "curriculum": curriculum_state,
                "step": step}, tmp)
    os.replace(tmp, out / "checkpoint.pt")


def _initial_state(name: str, store: LineageStore, cfg: TrainConfig):
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
    policy = _new_policy(cfg)
    if steps == 0:
        return policy
    path, meta = root / "warm_policy.pt", root / "warm_policy.json"
    if path.exists() and meta.exists() and json.loads(meta.read_text()).get("settings") == [steps, lr, cfg.seed]:
        return SkillPolicy.load(path)
    losses = fine_tune_on_solutions(policy, pair_tasks(root / "pair_tasks", cfg.seed), steps=steps, lr=lr)
    policy.save(path)
    meta.write_text(json.dumps({"settings": [steps, lr, cfg.seed], "losses": losses}, indent=2))
    return policy


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


# =============================================================================== EE: curricula
def curricula_study(results_dir: str | Path, *, n_seeds: int, generations: int, steps: int, group_size: int = 8,
                    tasks_per_step: int = 2, seed: int = 0, workers: int = 2,
                    curricula: Sequence[str] = ("el", "random"), warmup_steps: int = WARMUP_STEPS,
                    seed_steps: Sequence[int] = (MIN_STEPS, MAX_STEPS)) -> Path:
    """Seeds → evolved lineages → one GRPO run per curriculum, same store, same warm policy, same seeds.

    Rows: ``train/<curriculum>/steps.jsonl`` and ``rollouts.jsonl`` (:func:`evokit.train.train_curriculum`);
    read them with :func:`curricula_frame`.
    """
    out = Path(results_dir)
    _check_params(out, {"study": "curricula", "n_seeds": n_seeds, "generations": generations, "steps": steps,
                        "group_size": group_size, "tasks_per_step": tasks_per_step, "seed": seed,
                        "curricula": list(curricula), "warmup_steps": warmup_steps, "seed_steps": list(seed_steps)})
    _, store = seed_store(out, n_seeds=n_seeds, generations=generations, seed=seed, workers=workers,
                          seed_steps=seed_steps)
    cfg = TrainConfig(steps=steps, tasks_per_step=tasks_per_step, group_size=group_size, seed=seed, workers=workers,
                      eval_every=0)
    policy = warm_policy(out, cfg, steps=warmup_steps)
    for name in curricula:
        run = out / "train" / name
        _start_from(run, cfg, policy.state_dict(), _initial_state(name, store, cfg))
        train_curriculum(store, name, run, cfg, progress=False)
    return out


def _commands_per_turn(rollout_rows: Sequence[dict]) -> dict[int, float]:
    """Per step: shell commands issued per turn (each recorded turn is one command: 1 for the CPU learner)."""
    by: dict[int, list[int]] = {}
    for r in rollout_rows:
        by.setdefault(r["step"], []).extend(1 if t.get("command") else 0 for t in r["turns"])
    return {s: float(np.mean(v)) if v else float("nan") for s, v in by.items()}


def curricula_frame(results_dir: str | Path) -> pd.DataFrame:
    """One row per (curriculum, step): GRPO group shares, reward, turns per trajectory, served generation."""
    frames = []
    for run in sorted((Path(results_dir) / "train").iterdir()):
        cmd = _commands_per_turn(read_rows(run / "rollouts.jsonl"))
        rows = [{"curriculum": run.name, "step": r["step"], "partially_solved_share": r["partially_solved_share"],
                 "dead_group_share": r["dead_group_share"], "mean_reward": r["mean_reward"], "turns": r["turns"],
                 "generation": float(np.mean([s["env"][1] for s in r["served"]])), "mean_d_t": r["mean_d_t"],
                 "commands_per_turn": cmd.get(r["step"], float("nan"))}
                for r in read_rows(run / "steps.jsonl")]
        frames.append(pd.DataFrame(rows))
    return pd.concat(frames, ignore_index=True)


def _slope(x, y) -> float:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    return float(np.polyfit(x, y, 1)[0]) if len(x) > 1 else float("nan")


def curricula_summary(frame: pd.DataFrame, first: int = 50, window: int = 10) -> dict:
    """Per curriculum over the first ``first`` steps: mean shares and reward, reward slope, turns early vs late."""
    out = {}
    for name, g in frame.groupby("curriculum"):
        g = g[g.step < first].sort_values("step")
        w = min(window, max(1, len(g) // 2))
        out[name] = {"steps": len(g), "partially_solved_share": float(g.partially_solved_share.mean()),
                     "dead_group_share": float(g.dead_group_share.mean()),
                     "mean_reward": float(g.mean_reward.mean()), "reward_slope": _slope(g.step, g.mean_reward),
                     "turns_first": float(g.turns.head(w).mean()), "turns_last": float(g.turns.tail(w).mean()),
                     "turns_slope": _slope(g.step, g.turns), "max_generation": float(g.generation.max()),
                     "generation_last": float(g.generation.tail(w).mean()),
                     "commands_per_turn": float(g.commands_per_turn.mean())}
    return out


# ============================================================================ EE: method comparison
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
    _check_params(out, {"study": "methods", "n_seeds": n_seeds, "generations": generations, "steps": steps,
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
            _start_from(run, cfg, policy.state_dict(), _initial_state(evolution_curriculum, store, cfg))
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
            _start_from(run, cfg, policy.state_dict(), _initial_state("random", ens, cfg))
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
            _start_from(window, cfg, policy.state_dict(), _initial_state("random", co, cfg))
        else:
            ck = torch.load(previous / "checkpoint.pt", weights_only=False)
            _start_from(window, cfg, ck["policy"], _initial_state("random", co, cfg), step=ck["step"],
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


# ============================================================================ GenEnv: the loop
SIMULATORS = ("learning", "random")


def genenv_study(results_dir: str | Path, *, epochs: int, batches_per_epoch: int, tasks_per_batch: int,
                 rollouts: int, seed: int = 0, workers: int = 2, simulators: Sequence[str] = SIMULATORS) -> Path:
    """GenEnv's co-evolution loop with the learning simulator and the random (never updated) one.

    Rows: ``<simulator>/steps.jsonl`` (one per epoch) and the two pools (:func:`evokit.train.train_genenv`);
    read them with :func:`genenv_frame`.
    """
    out = Path(results_dir)
    unknown = sorted(set(simulators) - set(SIMULATORS))
    if unknown:
        raise ValueError(f"unknown simulators {unknown}; choose from {SIMULATORS}")
    _check_params(out, {"study": "genenv", "epochs": epochs, "batches_per_epoch": batches_per_epoch,
                        "tasks_per_batch": tasks_per_batch, "rollouts": rollouts, "seed": seed,
                        "simulators": list(simulators)})
    for sim in simulators:
        train_genenv(out / sim, TrainConfig(seed=seed, workers=workers, eval_every=0),
                     GenEnvConfig(epochs=epochs, batches_per_epoch=batches_per_epoch, tasks_per_batch=tasks_per_batch,
                                  rollouts=rollouts, learning=sim == "learning"), progress=False)
    return out


def genenv_frame(results_dir: str | Path) -> pd.DataFrame:
    """One row per (simulator, epoch): success on generated tasks, R_env, kept share, solved counts, lengths."""
    rows = []
    for sim in SIMULATORS:
        run = Path(results_dir) / sim
        if not run.exists():
            continue
        gcfg = json.loads((run / "config.json").read_text())["genenv"]
        per_epoch = gcfg["batches_per_epoch"] * gcfg["tasks_per_batch"]
        for r in read_rows(run / "steps.jsonl"):
            rows.append({"simulator": sim, "epoch": r["step"] + 1, "success": r["success"], "r_env": r["r_env"],
                         "kept_share": r["kept_share"], "fully_solved": r["fully_solved"], "unsolved": r["unsolved"],
                         "tasks": per_epoch, "batches": gcfg["batches_per_epoch"],
                         "fully_solved_share": r["fully_solved"] / per_epoch, "unsolved_share": r["unsolved"] / per_epoch,
                         "mean_length": r["mean_length"], "turns": r["turns"], "sim_kl": r["sim_kl"]})
    return pd.DataFrame(rows)


def genenv_summary(frame: pd.DataFrame, last: int = 3, zone: tuple[float, float] = (0.4, 0.6)) -> dict:
    """Per simulator: success of the last ``last`` epochs, first epoch in the zone, solved/unsolved per batch."""
    out = {}
    for sim, g in frame.groupby("simulator"):
        g = g.sort_values("epoch")
        inside = g[(g.success >= zone[0]) & (g.success <= zone[1])]
        out[sim] = {"epochs": len(g), "success_last": float(g.success.tail(last).mean()),
                    "success_first": float(g.success.iloc[0]),
                    "first_epoch_in_zone": int(inside.epoch.iloc[0]) if len(inside) else None,
                    "epochs_in_zone": int(len(inside)),
                    "fully_solved_per_batch": float((g.fully_solved / g.batches).mean()),
                    "unsolved_per_batch": float((g.unsolved / g.batches).mean()),
                    "length_first": float(g.mean_length.iloc[0]), "length_last": float(g.mean_length.tail(last).mean()),
                    "turns_first": float(g.turns.iloc[0]), "turns_last": float(g.turns.tail(last).mean()),
                    "sim_kl_last": float(g.sim_kl.iloc[-1])}
    if {"learning", "random"} <= out.keys():
        lr, rd = out["learning"], out["random"]
        out["learning_vs_random"] = {
            "fully_solved_pct_more": _pct(lr["fully_solved_per_batch"], rd["fully_solved_per_batch"]),
            "unsolved_pct_fewer": -_pct(lr["unsolved_per_batch"], rd["unsolved_per_batch"])}
    return out


def _pct(new: float, old: float) -> float | None:
    return 100.0 * (new - old) / old if old else None


# ======================================================================== GenEnv: data efficiency
DATA_METHODS = ("GenEnv", "static augmentation")


def _add_task(store: LineageStore, lineage: str, k: int, task_dir: Path) -> None:
    """Copy a rendered task into ``store`` as (lineage, generation 1, k) (``add_task`` moves its folder)."""
    if any(e.k == k for e in store.lineage(lineage)):
        return
    with tempfile.TemporaryDirectory(dir=store.root, prefix=".work-") as work:
        folder = Path(work) / "task"
        shutil.copytree(task_dir, folder, symlinks=True)
        name, h = store.add_task(folder)
    plan, render_seed = task_plan(store.root / "tasks" / name)
    store.add_env(EnvRecord(lineage, 1, k, name, h, None, None, None, {
        "plan": plan.to_records(), "difficulty": score(plan, catalog_reference()).as_dict(),
        "source": str(task_dir), "render_seed": render_seed}))


def genenv_pool_tasks(run: Path) -> list[Path]:
    """Tasks of the D_train pool of a :func:`~evokit.train.train_genenv` run (valid traces), in generation order."""
    names = []
    for r in read_rows(run / "pools" / genenv.Pools.FILES["d_train"]):
        if r["task"] not in names:
            names.append(r["task"])
    return [run / "tasks" / n for n in names]


def static_tasks(out: Path, n: int, *, seed: int, min_len: int, max_len: int) -> list[Path]:
    """``n`` tasks sampled once from the initial simulator (plans ∝ p_T), rendered into ``out``."""
    sim = genenv.init_simulator(max_len=max_len, min_len=min_len, render_seed=seed, contexts=("any",))
    plans = genenv.sample_plans(sim, "any", n, np.random.default_rng([seed, 7_777]))
    dirs = []
    for i, plan in enumerate(plans):
        dest = out / f"static-{i:04d}"
        if not dest.exists():
            render(plan, sim.render_seed, dest, lineage=Lineage(generation=1, lineage_id="static"))
        dirs.append(dest)
    return dirs


def data_efficiency_study(results_dir: str | Path, *, epochs: int, batches_per_epoch: int, tasks_per_batch: int,
                          rollouts: int, amounts: Sequence[int], passes: int, n_heldout: int,
                          group_size: int = 8, tasks_per_step: int = 2, eval_rollouts: int = ROLLOUTS, seed: int = 0,
                          workers: int = 2, methods: Sequence[str] = DATA_METHODS,
                          heldout_steps: Sequence[int] = (MIN_STEPS, MAX_STEPS)) -> Path:
    """Held-out pass rate vs training tasks: GenEnv's D_train pool vs static augmentation.

    1. One learning-simulator GenEnv run (``genenv/``); its D_train pool's tasks, in a seeded
       shuffle, give nested subsets of ``amounts`` tasks.
    2. Static augmentation: as many tasks sampled once from the initial simulator (∝ p_T), never
       adapted, in the same nested subsets.
    3. For each method and amount a fresh, untrained learner runs ⌈passes·a / tasks_per_step⌉
       GRPO steps in random order over the subset and is evaluated once at the end on a fixed
       held-out set (``n_heldout`` verified seeds of ``heldout_steps`` (min, max) steps made with
       another seed). Amount 0 is the untrained learner. Rows: ``data_efficiency.jsonl``
       (amount, method, score, steps).
    """
    out = Path(results_dir)
    unknown = sorted(set(methods) - set(DATA_METHODS))
    if unknown:
        raise ValueError(f"unknown methods {unknown}; choose from {DATA_METHODS}")
    _check_params(out, {"study": "data_efficiency", "epochs": epochs, "batches_per_epoch": batches_per_epoch,
                        "tasks_per_batch": tasks_per_batch, "rollouts": rollouts, "amounts": list(amounts),
                        "passes": passes, "n_heldout": n_heldout, "group_size": group_size,
                        "tasks_per_step": tasks_per_step, "eval_rollouts": eval_rollouts, "seed": seed,
                        "methods": list(methods), "heldout_steps": list(heldout_steps)})
    gcfg = GenEnvConfig(epochs=epochs, batches_per_epoch=batches_per_epoch, tasks_per_batch=tasks_per_batch,
                        rollouts=rollouts)
    run = train_genenv(out / "genenv", TrainConfig(seed=seed, workers=workers, eval_every=0), gcfg, progress=False)
    pool = genenv_pool_tasks(run)
    if max(amounts) > len(pool):
        raise ValueError(f"amounts go up to {max(amounts)} tasks but the GenEnv pool has {len(pool)}; raise epochs, "
                         "batches_per_epoch or tasks_per_batch, or lower the amounts")
    order = np.random.default_rng([seed, 4_242]).permutation(len(pool)).tolist()
    sources = {"GenEnv": [pool[i] for i in order],
               "static augmentation": static_tasks(out / "static_tasks", len(pool), seed=seed,
                                                   min_len=gcfg.min_len, max_len=gcfg.max_len)}
    heldout_rows = make_seeds(n_heldout, seed + 2000, out / "heldout", workers=workers, progress=False,
                              min_steps=heldout_steps[0], max_steps=heldout_steps[1])
    heldout = [out / "heldout" / r["name"] for r in heldout_rows]
    rows_path = out / "data_efficiency.jsonl"
    done = {(r["method"], r["amount"]) for r in read_rows(rows_path)}
    if ("untrained", 0) not in done:
        base = TrainConfig(seed=seed)
        rate = evaluate(_new_policy(base), heldout, n=eval_rollouts, seed=seed + 7, workers=workers)
        _append_rows(rows_path, [{"method": "untrained", "amount": 0, "score": rate, "steps": 0}])
    for method in methods:
        lineage = "genenv" if method == "GenEnv" else "static"
        for amount in sorted(amounts):
            if (method, amount) in done:
                continue
            store = LineageStore(out / "subsets" / lineage / f"a{amount:04d}" / "store")
            for k, task in enumerate(sources[method][:amount], 1):
                _add_task(store, lineage, k, task)
            n_steps = math.ceil(passes * amount / tasks_per_step)
            cfg = TrainConfig(steps=n_steps, tasks_per_step=tasks_per_step, group_size=group_size, seed=seed,
                              workers=workers, eval_every=n_steps, eval_rollouts=eval_rollouts)
            train = train_curriculum(store, "random", out / "subsets" / lineage / f"a{amount:04d}" / "train", cfg,
                                     eval_tasks=heldout, progress=False)
            score_ = read_rows(train / "evals.jsonl")[-1]["pass_rate"]
            _append_rows(rows_path, [{"method": method, "amount": amount, "score": score_, "steps": n_steps}])
    return out


def data_efficiency_frame(results_dir: str | Path) -> pd.DataFrame:
    """Rows (method, amount, score, steps); the untrained learner is repeated as amount 0 of every method."""
    rows = read_rows(Path(results_dir) / "data_efficiency.jsonl")
    base = [r for r in rows if r["method"] == "untrained"]
    methods = sorted({r["method"] for r in rows} - {"untrained"})
    rows = [r for r in rows if r["method"] != "untrained"] + [{**b, "method": m} for b in base for m in methods]
    return pd.DataFrame(rows).sort_values(["method", "amount"], ignore_index=True)


# ============================================================================= GenEnv: theory
def theory_study(results_dir: str | Path, *, group_sizes: Sequence[int] = (4, 8, 16),
                 ns: Sequence[int] = (8, 16, 32, 64, 128, 256, 512),
                 pairs: Sequence[tuple[float, float]] = ((0.5, 0.9), (0.45, 0.15), (0.6, 0.8)),
                 trials: int = 20_000, alpha: float = 0.5, beta: float = 20.0, grid: int = 101, seed: int = 0) -> Path:
    """Rows for GenEnv's Proposition 1, the dead-group probability and Theorem 1 (pure math, seconds).

    * ``signal.jsonl``: p, the gradient-signal proxy p(1−p) and R_env(p) on a grid;
    * ``dead_groups.jsonl``: p^G + (1−p)^G for each G;
    * ``theorem1.jsonl``: for each pair (p1, p2) with Δ1 = |p1 − α| < Δ2 = |p2 − α| and each n, the
      bound 4·exp(−(2/9)(Δ2 − Δ1)²·n) and a Monte Carlo estimate of Pr[R_env(p̂1) ≤ R_env(p̂2)]
      (ties counted as violations, as :func:`evokit.genenv.ranking_violation_mc`).
    """
    out = Path(results_dir)
    out.mkdir(parents=True, exist_ok=True)
    p = np.linspace(0.0, 1.0, grid)
    signal = [{"p": float(x), "signal": float(x * (1 - x)), "r_env": float(genenv.alpha_reward(x, alpha, beta))}
              for x in p]
    dead = [{"G": int(g), "p": float(x), "dead": float(dead_group_probability(x, g))} for g in group_sizes for x in p]
    thm = []
    for i, (p1, p2) in enumerate(pairs):
        d1, d2 = abs(p1 - alpha), abs(p2 - alpha)
        for n in ns:
            mc = genenv.ranking_violation_mc(p1, p2, n, alpha, beta, trials=trials,
                                             rng=np.random.default_rng([seed, i, n]))
            thm.append({"p1": p1, "p2": p2, "delta1": d1, "delta2": d2, "n": int(n), "trials": trials,
                        "bound": genenv.theorem1_bound(d1, d2, n), "mc": mc})
    for name, rows in (("signal", signal), ("dead_groups", dead), ("theorem1", thm)):
        tmp = out / f".{name}.jsonl.tmp"
        tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
        os.replace(tmp, out / f"{name}.jsonl")
    return out
