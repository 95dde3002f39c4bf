"""GenEnv's studies: the co-evolution loop (learning vs random simulator), data efficiency, and the theory.

Rows: ``<simulator>/steps.jsonl`` and pools (:func:`evokit.train.train` with :class:`evokit.genenv.GenEnvSource`), ``data_efficiency.jsonl``,
and the theory's ``signal``/``dead_groups``/``theorem1.jsonl``; notebooks ``genenv_alpha``,
``genenv_vs_random``, ``genenv_data_efficiency`` and ``genenv_theory``. The agent is the untrained CPU
learner (GenEnv's loop starts from the base model); the simulator is :class:`evokit.genenv.Simulator`
with the settings of :class:`evokit.genenv.GenEnvConfig`, whose docstring states how they depart from
the paper.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from evokit import genenv
from evokit.curriculum import RandomOrder, store_envs
from evokit.difficulty import catalog_reference, score
from evokit.genenv import GenEnvConfig, GenEnvSource
from evokit.grpo import dead_group_probability
from evokit.learners import PolicyConfig, evaluate, task_plan
from evokit.lineage import EnvRecord, LineageStore
from evokit.plan import render
from evokit.rows import append_rows, read_rows
from evokit.seeds import MAX_STEPS, MIN_STEPS, make_seeds
from evokit.studies.folder import check_study
from evokit.studies.methods import ROLLOUTS
from evokit.tasks import Lineage
from evokit.train import TrainConfig, new_policy, train

# ============================================================================ GenEnv: the loop
SIMULATORS = ("learning", "random")


@dataclass(frozen=True)
class GenEnvSizes:
    """A GenEnv run's sizes: an epoch is ``batches_per_epoch`` batches of ``tasks_per_batch`` tasks, each tried
    ``rollouts`` times (the GRPO group). A study's config is what ``study.json`` records and a notebook overrides."""

    epochs: int = 12
    batches_per_epoch: int = 16
    tasks_per_batch: int = 1
    rollouts: int = 5
    seed: int = 0


@dataclass(frozen=True)
class GenEnvStudy(GenEnvSizes):
    """GenEnv's loop with the learning simulator and the random one."""

    simulators: tuple[str, ...] = SIMULATORS


def genenv_study(results_dir: str | Path, study: GenEnvStudy = GenEnvStudy(), *, workers: int = 2) -> Path:
    """GenEnv's co-evolution loop with the learning simulator and the random (never updated) one.

    Rows: ``<simulator>/steps.jsonl`` (one per epoch) and the two pools (:func:`evokit.train.train` on
    :class:`evokit.genenv.GenEnvSource`); read them with :func:`genenv_frame`.
    """
    out = Path(results_dir)
    unknown = sorted(set(study.simulators) - set(SIMULATORS))
    if unknown:
        raise ValueError(f"unknown simulators {unknown}; choose from {SIMULATORS}")
    check_study(out, {"study": "genenv", **asdict(study)})
    for sim in study.simulators:
        _genenv_run(out / sim, epochs=study.epochs, batches_per_epoch=study.batches_per_epoch,
                    tasks_per_batch=study.tasks_per_batch, rollouts=study.rollouts, seed=study.seed, workers=workers, learning=sim == "learning")
    return out


def _genenv_run(out: Path, *, epochs: int, batches_per_epoch: int, tasks_per_batch: int, rollouts: int, seed: int,
                workers: int, learning: bool) -> Path:
    """One GenEnv run of the CPU learner: an epoch is a step of ``batches_per_epoch`` × ``tasks_per_batch`` tasks."""
    cfg = TrainConfig(steps=epochs, tasks_per_step=batches_per_epoch * tasks_per_batch, group_size=rollouts,
                      seed=seed, workers=workers, eval_every=0)
    source = GenEnvSource(GenEnvConfig(tasks_per_batch=tasks_per_batch, learning=learning))
    return train(source, PolicyConfig(), out, cfg, progress=False)


def genenv_frame(results_dir: str | Path) -> pd.DataFrame:
    """One row per (simulator, epoch): success on generated tasks, R_env, kept share, solved counts, lengths."""
    rows = []
    for sim in SIMULATORS:
        run = Path(results_dir) / sim
        if not run.exists():
            continue
        run_cfg = json.loads((run / "config.json").read_text())
        per_epoch = run_cfg["config"]["tasks_per_step"]
        batches = per_epoch // run_cfg["source"]["config"]["tasks_per_batch"]
        for r in read_rows(run / "steps.jsonl"):
            g = r["scheduler"]  # the GenEnv source's summary after this epoch's batch step
            rows.append({"simulator": sim, "epoch": r["step"] + 1, "success": g["success"], "r_env": g["r_env"],
                         "kept_share": g["kept_share"], "fully_solved": r["fully_solved"], "unsolved": r["unsolved"],
                         "tasks": per_epoch, "batches": batches,
                         "fully_solved_share": r["fully_solved"] / per_epoch, "unsolved_share": r["unsolved"] / per_epoch,
                         "mean_length": g["mean_length"], "turns": r["turns"], "sim_kl": g["sim_kl"],
                         "mean_d_theta": r.get("mean_d_theta", float("nan")), "mean_d_t": r.get("mean_d_t", float("nan"))})
    return pd.DataFrame(rows)


def genenv_summary(frame: pd.DataFrame, last: int = 3, zone: tuple[float, float] = (0.4, 0.6),
                   band: float = 0.1) -> dict:
    """Per simulator: success per epoch and over the last ``last`` epochs, first epoch in the zone, solved counts.

    ``settled`` is GenEnv's "enters the zone and stays there" made checkable: the mean success of the
    last ``last`` epochs lies in ``zone`` and each of those epochs lies within ``band`` of it (an epoch's
    success is a mean over a few generated tasks, so single epochs are noisy).
    """
    out = {}
    for sim, g in frame.groupby("simulator"):
        g = g.sort_values("epoch")
        inside = g[(g.success >= zone[0]) & (g.success <= zone[1])]
        tail = g.success.tail(last)
        mean_last = float(tail.mean())
        out[sim] = {"epochs": len(g), "success": [round(float(x), 4) for x in g.success],
                    "success_last": mean_last, "success_last_min": float(tail.min()),
                    "success_last_max": float(tail.max()), "success_first": float(g.success.iloc[0]),
                    "settled": bool(zone[0] <= mean_last <= zone[1] and tail.min() >= zone[0] - band
                                    and tail.max() <= zone[1] + band),
                    "first_epoch_in_zone": int(inside.epoch.iloc[0]) if len(inside) else None,
                    "epochs_in_zone": int(len(inside)),
                    "fully_solved_per_batch": float((g.fully_solved / g.batches).mean()),
                    "unsolved_per_batch": float((g.unsolved / g.batches).mean()),
                    "length_first": float(g.mean_length.iloc[0]), "length_last": float(g.mean_length.tail(last).mean()),
                    "length": [round(float(x), 3) for x in g.mean_length],
                    "d_theta": [round(float(x), 3) for x in g.mean_d_theta],
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
    """Tasks of the D_train pool of a :func:`evokit.train.train` GenEnv run (valid traces), in generation order."""
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


@dataclass(frozen=True)
class DataEfficiencyStudy(GenEnvSizes):
    """GenEnv's data efficiency: one learning-simulator run's sizes, then the subsets, passes and held-out set."""

    amounts: tuple[int, ...] = (4, 8, 16)
    passes: int = 2
    n_heldout: int = 12
    group_size: int = 8
    tasks_per_step: int = 2
    eval_rollouts: int = ROLLOUTS
    methods: tuple[str, ...] = DATA_METHODS
    heldout_steps: tuple[int, int] = (MIN_STEPS, MAX_STEPS)


def data_efficiency_study(results_dir: str | Path, study: DataEfficiencyStudy = DataEfficiencyStudy(), *,
                          workers: int = 2) -> Path:
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
    unknown = sorted(set(study.methods) - set(DATA_METHODS))
    if unknown:
        raise ValueError(f"unknown methods {unknown}; choose from {DATA_METHODS}")
    check_study(out, {"study": "data_efficiency", **asdict(study)})
    gcfg = GenEnvConfig(tasks_per_batch=study.tasks_per_batch)
    run = _genenv_run(out / "genenv", epochs=study.epochs, batches_per_epoch=study.batches_per_epoch,
                      tasks_per_batch=study.tasks_per_batch, rollouts=study.rollouts, seed=study.seed,
                      workers=workers, learning=True)
    pool = genenv_pool_tasks(run)
    if max(study.amounts) > len(pool):
        raise ValueError(f"amounts go up to {max(study.amounts)} tasks but the GenEnv pool has {len(pool)}; raise epochs, "
                         "batches_per_epoch or tasks_per_batch, or lower the amounts")
    order = np.random.default_rng([study.seed, 4_242]).permutation(len(pool)).tolist()
    sources = {"GenEnv": [pool[i] for i in order],
               "static augmentation": static_tasks(out / "static_tasks", len(pool), seed=study.seed,
                                                   min_len=gcfg.min_len, max_len=gcfg.max_len)}
    heldout_rows = make_seeds(study.n_heldout, study.seed + 2000, out / "heldout", workers=workers, progress=False,
                              min_steps=study.heldout_steps[0], max_steps=study.heldout_steps[1])
    heldout = [out / "heldout" / r["name"] for r in heldout_rows]
    rows_path = out / "data_efficiency.jsonl"
    done = {(r["method"], r["amount"]) for r in read_rows(rows_path)}
    if ("untrained", 0) not in done:
        rate = evaluate(new_policy(PolicyConfig(), study.seed), heldout, n=study.eval_rollouts, seed=study.seed + 7,
                        workers=workers)
        append_rows(rows_path, [{"method": "untrained", "amount": 0, "score": rate, "steps": 0}])
    for method in study.methods:
        lineage = "genenv" if method == "GenEnv" else "static"
        for amount in sorted(study.amounts):
            if (method, amount) in done:
                continue
            store = LineageStore(out / "subsets" / lineage / f"a{amount:04d}" / "store")
            for k, task in enumerate(sources[method][:amount], 1):
                _add_task(store, lineage, k, task)
            n_steps = math.ceil(study.passes * amount / study.tasks_per_step)
            cfg = TrainConfig(steps=n_steps, tasks_per_step=study.tasks_per_step, group_size=study.group_size,
                              seed=study.seed, workers=workers, eval_every=n_steps, eval_rollouts=study.eval_rollouts)
            run_dir = train(RandomOrder(store_envs(store)), PolicyConfig(), out / "subsets" / lineage /
                            f"a{amount:04d}" / "train", cfg, eval_tasks=heldout, progress=False)
            score_ = read_rows(run_dir / "evals.jsonl")[-1]["pass_rate"]
            append_rows(rows_path, [{"method": method, "amount": amount, "score": score_, "steps": n_steps}])
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

