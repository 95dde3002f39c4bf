"""Difficulty transfer (claim 10): is evolved difficulty the solvers' common ground, and mined difficulty one solver's own?

EE's central argument (papers.md, "why a task is hard, independent of the solver") is that editing
a task along length, scenario rarity and skill rarity makes it hard *in the world's terms* (D_T),
so the difficulty should transfer to every solver, while co-evolution, which mines one agent's
failures (Σ_t e_t·[−log p_θ(κ_t | σ_{t−1}, g)]), makes tasks hard for *that* agent. No paper
measures it. This study does, with the data-pretrained solver population A, B, C of
:mod:`evokit.cpu_agent.solvers` (three data mixtures; none reads p_T), in real sandboxes.

One **repetition** r (the unit of the across-seed interval, :mod:`evokit.stats`) runs the whole
pipeline with its own seed ``study.repetition_seed(r)``:

1. **seeds** — ``n_seeds`` verified seed tasks (:func:`evokit.seeds.make_seeds`, the kit's
   2–5 steps; with fewer seeds than domains every seed has 2 steps, one domain each);
2. **EE** — one lineage per seed evolved by the *procedural* harness (:func:`evokit.evolve.evolve`,
   ``generations`` at ``effort``); no solver is involved. The EE arm is each lineage's last
   environment (generation ``generations``, or the latest one if the lineage ended early; a lineage
   with no offspring gives none): what evolution made of the seed. Its size N is the arm budget;
3. **co-evolution** — a :class:`~evokit.evolve.coevolution.WeaknessBank` fed with the target solver's
   (A's) rollouts on the seeds (``bank_rollouts`` per seed, rollout seeds of their own), then one
   round of :func:`~evokit.evolve.coevolution.coevolve_round` synthesising N tasks from it (the
   kit's :class:`~evokit.evolve.coevolution.CoevolutionConfig`, untouched): equal budgets;
4. **measurement** — every solver's pass rate on the seeds, the EE tasks and the co-evolution tasks,
   ``rollouts`` per task, the same rollout seeds for every solver (paired), independent of the
   bank's rollouts (so A's failures that built the bank are not re-counted as its pass rate).

The drop of solver s on arm a in repetition r is pass(s, seeds) − pass(s, a). The claims, fixed
before the first run, are read by :func:`transfer_summary` from per-repetition values:

* **EE lowers A, B and C alike**: every drop's interval lies above 0 and each solver's drop is within
  a factor 2 of the mean drop over solvers, i.e. the intervals of drop_s − mean/2 and of 2·mean − drop_s
  (per-repetition values, so paired) both lie above 0;
* **co-evolution is A's own**: drop_A − drop_o on the co-evolution arm (paired) has an interval
  above 0 for every other solver o.

``reproduced`` is "yes" when every interval named lies on the claimed side, "no" when some estimate
lies on the wrong side, "tie" when every estimate is on the claimed side but an interval crosses.

Deviations, stated: the solvers are the fixed population A, B, C (one corpus draw each, as in
:data:`evokit.cpu_agent.solvers.SOLVERS`), so the repetitions resample tasks, evolution, bank and rollouts,
not the solvers' corpora; one command per step (``attempts=1``: the claim is about pass rate, and
retries would only add turns); co-evolution gets one round (there is no RL loop here to refresh it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm  # a widget in Jupyter, text in a terminal

from evokit.cpu_agent.policy import collect_groups, task_plan
from evokit.cpu_agent.solvers import SOLVERS, Solver, build_solver
from evokit.evolve import EFFORTS, EvolveConfig, evolve
from evokit.evolve.coevolution import WeaknessBank, bank_records, coevolve_round, update_bank
from evokit.grpo import group_stats
from evokit.lineage import LineageStore
from evokit.rollout import rollout_workers
from evokit.rows import append_rows, read_rows
from evokit.seeding import call_seed
from evokit.seeds import MAX_STEPS, MIN_STEPS, make_seeds, seed_dirs
from evokit.stats import (
    MIN_UNITS,
    Interval,
    combine,
    difference,
    interval,
    paper_side,
    precondition,
    withheld,
)
from evokit.studies.folder import PhaseClock, check_study

ARMS = ("seeds", "ee", "coevolution")  # the seed tasks, EE's offspring, co-evolution's tasks


@dataclass(frozen=True)
class TransferStudy:
    """Claim 10's sizes and settings (``study.json`` records them; the notebook's parameters override them)."""

    repetitions: int = 5  # independent repetitions of the whole pipeline (the unit; registered: ≥ 10)
    n_seeds: int = 5  # seed tasks (and lineages) per repetition (EE: 500)
    seed_steps: tuple[int, int] = (MIN_STEPS, MAX_STEPS)  # the kit's seed lengths (evokit.seeds)
    generations: int = 2  # EE generations per lineage (EE: 15); each lineage's last environment is the EE arm
    effort: str = "high"  # EE's default effort
    rollouts: int = 4  # rollouts per task and solver for a pass rate (EE: 8)
    bank_rollouts: int = 8  # the target's rollouts per seed that feed the weakness bank (one GRPO group, B = 8)
    solvers: tuple[str, ...] = ("A", "B", "C")  # the population (evokit.cpu_agent.solvers.SOLVERS)
    target: str = "A"  # whose failures co-evolution mines
    seed: int = 0

    def __post_init__(self):
        if self.repetitions < 2:
            raise ValueError(f"repetitions must be ≥ 2 for an interval (the claims ask ≥ 5), not {self.repetitions}")
        if self.n_seeds < 1 or self.generations < 1 or self.rollouts < 1 or self.bank_rollouts < 1:
            raise ValueError("n_seeds, generations, rollouts and bank_rollouts must be ≥ 1, got "
                             f"{self.n_seeds}, {self.generations}, {self.rollouts}, {self.bank_rollouts}")
        if self.effort not in EFFORTS:
            raise ValueError(f"effort must be one of {EFFORTS}, not {self.effort!r}")
        unknown = [s for s in self.solvers if s not in SOLVERS]
        if unknown or len(set(self.solvers)) < 2:
            raise ValueError(f"solvers must be ≥ 2 distinct names of the population {', '.join(SOLVERS)}; "
                             f"got {self.solvers}")
        if self.target not in self.solvers:
            raise ValueError(f"target {self.target!r} must be one of the solvers {self.solvers}")

    def repetition_seed(self, r: int) -> int:
        """Repetition r's seed (seeds, evolution, co-evolution's synthesis): distinct per (seed, r)."""
        return call_seed("transfer", self.seed, r) % 1_000_000

    def params(self) -> dict:
        return asdict(self)


# ------------------------------------------------------------------------------- one repetition
def _bank(path: Path, target: Solver, seeds: Sequence[Path], study: TransferStudy, r: int,
          workers: int) -> WeaknessBank:
    """The weakness bank from the target's rollouts on the seeds, saved as ``bank.json`` and read back."""
    if path.exists():
        d = json.loads(path.read_text())
        return WeaknessBank({tuple(p): v for p, v in d["failures"]}, {tuple(p): v for p, v in d["totals"]},
                            d["trajectories"], d["failed_trajectories"])
    seeds_ = [call_seed("transfer-bank", study.seed, r, j) for j in range(len(seeds))]
    groups = collect_groups(target.policy, list(seeds), group_size=study.bank_rollouts, workers=rollout_workers(workers),
                            seeds=seeds_)
    bank = update_bank(WeaknessBank(), bank_records([x.to_row() for g in groups for x in g], seeds))
    path.write_text(json.dumps({"solver": target.config.name, "failures": [[list(p), v] for p, v in bank.failures.items()],
                                "totals": [[list(p), v] for p, v in bank.totals.items()],
                                "trajectories": bank.trajectories, "failed_trajectories": bank.failed_trajectories},
                               indent=1))
    return bank


def repetition_tasks(out: Path, study: TransferStudy, r: int, target: Solver, workers: int = 2) -> dict[str, list[Path]]:
    """Repetition r's three arms (module docstring, steps 1–3), made once into ``out`` and reused."""
    rs = study.repetition_seed(r)
    make_seeds(study.n_seeds, rs, out / "seeds", workers=workers, progress=False, min_steps=study.seed_steps[0],
               max_steps=study.seed_steps[1])
    seeds = seed_dirs(out / "seeds")
    ee = evolve(seeds, out / "ee_store", EvolveConfig(generations=study.generations, effort=study.effort, seed=rs),
                workers=workers, progress=False)
    last = {e.lineage: e for e in ee.envs() if e.generation >= 1}  # records are in order: the last is the newest
    offspring = [ee.path(e) for _, e in sorted(last.items())]
    bank = _bank(out / "bank.json", target, seeds, study, r, workers)
    co = LineageStore(out / "coevolution_store")
    made = coevolve_round(bank, seeds, co, n=len(offspring), round_index=1, seed=rs)
    return {"seeds": seeds, "ee": offspring, "coevolution": [co.path(e) for e in made]}


def _measure(solver: Solver, arm: str, tasks: Sequence[Path], study: TransferStudy, r: int,
             workers: int) -> list[dict]:
    """One row per task: the solver's pass rate and turns over ``rollouts``; rollout seeds shared by all solvers."""
    seeds = [call_seed("transfer-measure", study.seed, r, arm, j) for j in range(len(tasks))]
    groups = collect_groups(solver.policy, list(tasks), group_size=study.rollouts, workers=rollout_workers(workers),
                            seeds=seeds)
    rows = []
    for task, g in zip(tasks, groups, strict=True):
        st = group_stats(g)
        if not st.n:
            raise RuntimeError(f"{task}: every rollout of solver {solver.config.name} was masked: {g[0].error}")
        plan, _ = task_plan(task)
        rows.append({"repetition": r, "solver": solver.config.name, "arm": arm, "task": Path(task).name,
                     "pass_rate": st.mean_reward, "turns": float(np.mean([x.n_turns for x in g])),
                     "rollouts": st.n, "masked": st.masked, "length": len(plan),
                     "scenarios": sorted({s.scenario for s in plan.steps})})
    return rows


def transfer_study(results_dir: str | Path, study: TransferStudy = TransferStudy(), workers: int = 2,
                   progress: bool = True) -> Path:
    """Run (or resume) every repetition; returns the path of ``passes.jsonl`` (one row per repetition,
    solver, arm and task). Layout: ``rep<r>/{seeds, ee_store, bank.json, coevolution_store}``,
    ``study.json``, ``timings.json``. A (repetition, solver, arm) already measured is not measured again."""
    out = Path(results_dir)
    check_study(out, study.params())
    clock = PhaseClock(out / "timings.json")
    with clock("solvers"):
        solvers = {name: build_solver(SOLVERS[name]) for name in study.solvers}
    path = out / "passes.jsonl"
    done = {(x["repetition"], x["solver"], x["arm"]) for x in read_rows(path)}
    for r in tqdm(range(study.repetitions), desc="repetitions", disable=not progress):
        with clock(f"rep{r} tasks"):
            arms = repetition_tasks(out / f"rep{r}", study, r, solvers[study.target], workers)
        with clock(f"rep{r} pass rates"):
            for name, solver in solvers.items():
                for arm in ARMS:
                    if (r, name, arm) not in done and arms[arm]:
                        append_rows(path, _measure(solver, arm, arms[arm], study, r, workers))
    return path


# ------------------------------------------------------------------------------- reading the rows
def transfer_frame(results_dir: str | Path) -> pd.DataFrame:
    """Per (repetition, solver, arm): mean pass rate over the arm's tasks, mean turns, tasks, mean length."""
    rows = read_rows(Path(results_dir) / "passes.jsonl")
    if not rows:
        raise FileNotFoundError(f"{results_dir}: no passes.jsonl rows; run transfer_study first")
    df = pd.DataFrame(rows)
    return (df.groupby(["repetition", "solver", "arm"], as_index=False)
            .agg(pass_rate=("pass_rate", "mean"), turns=("turns", "mean"), tasks=("task", "count"),
                 length=("length", "mean")))


def bank_targeting(results_dir: str | Path, repetitions: Sequence[int]) -> dict:
    """How much of co-evolution's synthesis lands on the target's failures, per repetition (a diagnostic).

    ``failed_pairs``: (scenario, skill) pairs the bank saw fail at least once; ``seen_pairs``: pairs it saw;
    ``targeted_share``: share of the co-evolution tasks' steps whose pair is a failed one.
    """
    out = Path(results_dir)
    rows = []
    for r in repetitions:
        d = json.loads((out / f"rep{r}" / "bank.json").read_text())
        failed = {tuple(p) for p, v in d["failures"] if v > 0}
        steps = [(st["scenario"], st["skill"]) for e in LineageStore(out / f"rep{r}" / "coevolution_store").envs()
                 for st in e.data["plan"]]
        rows.append({"repetition": r, "seen_pairs": len(d["totals"]), "failed_pairs": len(failed),
                     "failed_trajectories": d["failed_trajectories"],
                     "failed_trajectory_share": d["failed_trajectories"] / max(d["trajectories"], 1),
                     "targeted_share": sum(p in failed for p in steps) / len(steps) if steps else 0.0})
    return {"per_repetition": rows,
            "targeted_share": interval([x["targeted_share"] for x in rows], name="targeted share").as_dict(),
            "failed_pairs": float(np.mean([x["failed_pairs"] for x in rows])),
            "seen_pairs": float(np.mean([x["seen_pairs"] for x in rows]))}


#: docs/preregistration.md, claim 10: each solver's pass rate on the seeds at least this (a drop is
#: bounded by it).
MIN_SEED_PASS = 0.25


def _reproduced(ivs: Sequence[Interval]) -> str:
    """A part of claim 10 from its intervals, each expected above 0: "yes" if all are, "no" if one lies
    wholly below 0, "tie" otherwise."""
    return combine([paper_side(iv, "above") for iv in ivs])


def preconditions(frame: pd.DataFrame, bank: dict, solvers: Sequence[str], min_units: int = MIN_UNITS) -> list:
    """Claim 10's registered preconditions from the per-(repetition, solver, arm) frame and the target's banks."""
    reps = sorted(frame.repetition.unique())
    seeds = frame[frame.arm == "seeds"].groupby("solver").pass_rate.mean()
    tasks = frame.pivot_table(index="repetition", columns="arm", values="tasks", aggfunc="max")
    unequal = int((tasks.get("ee") != tasks.get("coevolution")).sum()) if {"ee", "coevolution"} <= set(tasks) else None
    failed = [x["failed_trajectories"] for x in bank["per_repetition"]]
    return [precondition("repetitions", len(reps), "≥", min_units),
            *(precondition(f"solver {s}'s pass rate on the seeds", float(seeds.get(s, float("nan"))), "≥",
                           MIN_SEED_PASS) for s in solvers),
            precondition("fewest failed trajectories in the target's bank (a repetition)", min(failed, default=None),
                         "≥", 1),
            precondition("repetitions whose EE and co-evolution arms differ in tasks", unequal, "=", 0)]


def transfer_summary(results_dir: str | Path) -> dict:
    """Claim 10 from the rows (docs/preregistration.md): pass rates, drops and both parts with t intervals
    over repetitions. A part is "yes" if every one of its intervals lies above 0, "no" if one lies wholly
    below 0, "tie" otherwise; the claim combines the two parts; all three are withheld when a registered
    precondition fails (fewer than 10 repetitions, a solver below 0.25 on the seeds, a repetition whose
    target bank holds no failed trajectory, arms of unequal size)."""
    out = Path(results_dir)
    study = TransferStudy(**{k: tuple(v) if isinstance(v, list) else v
                             for k, v in json.loads((out / "study.json").read_text()).items()})
    frame = transfer_frame(out)
    table = frame.pivot_table(index="repetition", columns=["solver", "arm"], values="pass_rate")
    complete = table.dropna()
    if len(complete) < 2:
        raise ValueError(f"{out}: {len(complete)} repetition(s) with every solver and arm measured; an interval "
                         "needs ≥ 2 (is the run finished?)")
    solvers, reps = list(study.solvers), complete.index.tolist()

    def col(s: str, arm: str) -> np.ndarray:
        return complete[(s, arm)].to_numpy()

    drop = {arm: {s: col(s, "seeds") - col(s, arm) for s in solvers} for arm in ARMS[1:]}
    d = lambda iv: iv.as_dict()  # noqa: E731
    pass_rate = {s: {arm: d(interval(col(s, arm), name=f"{s} {arm}")) for arm in ARMS} for s in solvers}
    ee, co = drop["ee"], drop["coevolution"]
    mean_ee = np.mean([ee[s] for s in solvers], axis=0)
    ee_drop = {s: interval(ee[s], name=f"EE drop {s}") for s in solvers}
    low = {s: interval(ee[s] - mean_ee / 2, name=f"{s}: drop − mean/2") for s in solvers}
    high = {s: interval(2 * mean_ee - ee[s], name=f"{s}: 2·mean − drop") for s in solvers}
    others = [s for s in solvers if s != study.target]
    target_gap = {o: difference(co[study.target], co[o], paired=True, name=f"{study.target} − {o}") for o in others}
    ee_gap = {o: difference(ee[study.target], ee[o], paired=True, name=f"EE {study.target} − {o}") for o in others}
    bank = bank_targeting(out, reps)
    pre = preconditions(frame[frame.repetition.isin(reps)], bank, solvers)
    ee_ok = _reproduced([*ee_drop.values(), *low.values(), *high.values()])
    co_ok = _reproduced(list(target_gap.values()))
    arms = frame.groupby("arm").agg(tasks=("tasks", "mean"), length=("length", "mean")).to_dict(orient="index")
    return {
        "study": study.params(), "repetitions": reps, "n_repetitions": len(reps), "arms": arms,
        "pass_rate": pass_rate,
        "drop": {arm: {s: d(interval(v, name=f"{arm} drop {s}")) for s, v in drop[arm].items()} for arm in drop},
        "per_repetition": {"pass_rate": {f"{s} {arm}": col(s, arm).tolist() for s in solvers for arm in ARMS}},
        "ee_alike": {
            "claim": "EE's offspring lower every solver's pass rate (drop interval > 0), each drop within a "
                     "factor 2 of the mean drop (intervals of drop − mean/2 and 2·mean − drop > 0)",
            "mean_drop": d(interval(mean_ee, name="mean EE drop")),
            "ratio_to_mean": {s: float(ee[s].mean() / mean_ee.mean()) if mean_ee.mean() else None for s in solvers},
            "drop_minus_half_mean": {s: d(iv) for s, iv in low.items()},
            "twice_mean_minus_drop": {s: d(iv) for s, iv in high.items()},
            "reproduced": withheld(ee_ok, pre)},
        "coevolution_targets": {
            "claim": f"co-evolution mined from {study.target}'s failures lowers {study.target}'s pass rate more "
                     f"than {', '.join(others)}'s (paired difference of drops, interval > 0)",
            "target": study.target, "difference": {o: d(iv) for o, iv in target_gap.items()},
            "ee_difference": {o: d(iv) for o, iv in ee_gap.items()},  # the same contrast on EE, for comparison
            "reproduced": withheld(co_ok, pre)},
        "bank": bank, "preconditions": [p.as_dict() for p in pre],
        "reproduced": withheld(combine([ee_ok, co_ok]), pre),
    }


__all__ = ["ARMS", "TransferStudy", "bank_targeting", "repetition_tasks", "transfer_frame", "transfer_study", "transfer_summary"]
