"""EE's curricula study: EL vs random order on the same evolved store, from the same pretrained learner, over runs.

Rows per run and curriculum: ``run-<s>/train/<curriculum>/steps.jsonl`` and ``rollouts.jsonl``,
written by the study's trainer (:mod:`evokit.training.trainers`, chosen by ``policy``); notebooks ``ee_el_scheduler`` (claim 4) and ``ee_trajectory_growth``
(claim 5) read the same study. The shared start (learner, seed admission, N_{i,g}, runs) and its
departures from EE are in :mod:`evokit.studies.warm_start`. Here:

* **Claim 4 (EL vs random, first 50 steps).** Per run, the mean partially solved share (groups
  with 1–7 of 8 successes) over the first ``first`` steps for each curriculum; the paired
  difference EL − random across runs with its t interval (:func:`evokit.stats.difference`).
  Training reward: per run the least-squares slope of the mean reward per step over those steps,
  for each curriculum, with its interval (the paper: EL rises, random dips).
* **Claim 4's controls** (docs/preregistration.md; :mod:`evokit.curricula.controls`). With
  ``"seeds-only"`` and ``"matched"`` among the curricula (after ``"el"``: the matched control
  replays EL's generations slot by slot from EL's rows of the same run), the paired differences
  EL − seeds-only and EL − matched of the partially solved share; EL's adaptivity counts only if
  both are above 0, and claim 4 is "yes" only if EL also beats random order.
* **Claim 5 (trajectory growth).** Per run, (a) the slope of turns per trajectory over the steps
  under EL, and (b) that slope minus the slope of turns on the run's *fixed set* — 2 environments
  of each generation of its store (:func:`fixed_set`), on which EL's student is evaluated every
  ``fixed_set_every`` steps as it trains (``train/el/evals.jsonl``) — both with t intervals over
  runs (the paper: turns rise as harder generations unlock). (b) tells a rise from EL's unlocking
  apart from the student's own drift on unchanged tasks. Beside them: the slope of turns per plan
  step (a rise from longer tasks alone leaves it flat), of the served generation, and random
  order's turns slope.
* **Either policy.** ``policy="cpu"`` (the default) trains the warm-started CPU learner; an LLM spec
  (``"tiny"``, ``"smollm2"``, a model folder; :func:`evokit.trl_trainer.load_policy`) trains that
  model through TRL on the same stores and task sources, with ``llm`` (``LLMTrainConfig`` fields:
  ``max_completion_length``, ``max_turns``, …) for what only the LLM has. Both write the same row
  (:mod:`evokit.training.steps`), so the frame, the summary and the figures are the same code. The
  LLM starts from its own weights (no solver pretraining) and samples at its ``temperature`` (the
  study's ``temperature`` is the CPU student's).
* **Turns.** The learner tries up to ``attempts`` techniques per step, reading its command's
  result (:mod:`evokit.cpu_agent.solvers`), so turns per trajectory are plan steps plus retries: they
  depend on how hard the steps are for this learner, not only on plan length.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm  # a widget in Jupyter, text in a terminal

from evokit.curricula.controls import el_schedule
from evokit.curriculum import EnvRow, store_envs
from evokit.rollout import rollout_workers
from evokit.rows import read_rows
from evokit.sources import make_source
from evokit.stats import (
    MIN_UNITS,
    Precondition,
    combine,
    difference,
    interval,
    paper_side,
    precondition,
    withheld,
)
from evokit.studies.folder import check_study
from evokit.studies.warm_start import (
    EEStudy,
    learner,
    run_dir,
    run_seed_dirs,
    run_store,
    seed_admission,
    seed_pool,
)
from evokit.train import TrainConfig
from evokit.training.trainers import CPU, Trainer, make_trainer


@dataclass(frozen=True)
class CurriculaStudy(EEStudy):
    """EE's curricula study: the shared sizes, which curricula to compare, the comparison window."""

    curricula: tuple[str, ...] = ("el", "random")
    first: int = 50  # EE compares the curricula over the first 50 GRPO steps
    policy: str = CPU  # who learns: "cpu" (the CPU learner) or an LLM model spec ("tiny", "smollm2", a folder)
    llm: dict | None = None  # LLMTrainConfig fields for an LLM policy (e.g. max_completion_length, max_turns)
    fixed_set_every: int = 0  # claim 5's fixed set: EL's student evaluated on it every so many steps (0: not)
    fixed_set_per_generation: int = 2  # environments of each generation 0..G of the run's store in the fixed set
    fixed_set_rollouts: int = 8  # rollouts per fixed-set environment at each evaluation

    def __post_init__(self):
        if "matched" in self.curricula and ("el" not in self.curricula
                                           or self.curricula.index("el") > self.curricula.index("matched")):
            raise ValueError(f"curricula {self.curricula}: 'matched' replays EL's generations, so 'el' must come first")
        if self.fixed_set_every and self.policy != CPU:
            raise ValueError(f"fixed_set_every={self.fixed_set_every} with policy {self.policy!r}: the fixed set is "
                             "evaluated as the CPU learner trains (evokit.train); the TRL path does not evaluate")

    def record(self) -> dict:
        """What ``study.json`` holds: every field; ``policy`` and ``llm`` only for an LLM, so a CPU study's
        folder holds the same record whichever evokit wrote it."""
        rec = {"study": "curricula", **asdict(self)}
        if not self.fixed_set_every:  # a study without the fixed set records what it recorded before there was one
            rec = {k: v for k, v in rec.items() if not k.startswith("fixed_set_")}
        return {k: v for k, v in rec.items() if k not in ("policy", "llm")} if self.policy == CPU else rec


def train_config(study: EEStudy, run: int, workers: int, **extra) -> TrainConfig:
    """The GRPO run of ``run`` (its seed), with the study's sizes and attempts."""
    return TrainConfig(steps=study.steps, tasks_per_step=study.tasks_per_step, group_size=study.group_size,
                       seed=run, workers=rollout_workers(workers), groups_at_once=study.tasks_per_step,
                       attempts=study.attempts, **{"eval_every": 0, **extra})


def run_trainer(results_dir: str | Path, study: CurriculaStudy, run: int, workers: int) -> Trainer:
    """Run ``run``'s trainer: the run's warm-started learner for ``policy="cpu"``, else the LLM through TRL."""
    if study.policy == CPU:
        solver = learner(results_dir, study, run)
        return make_trainer(learner=solver.policy, judge=solver.judge, cpu=train_config(study, run, workers))
    from evokit.trl_trainer import LLMTrainConfig

    return make_trainer(study.policy, llm=LLMTrainConfig(**(study.llm or {})))


def curricula_study(results_dir: str | Path, study: CurriculaStudy = CurriculaStudy(), *, workers: int = 2,
                    progress: bool = True) -> Path:
    """Per run: seeds → lineages → one GRPO run per curriculum (same store, same policy, same rollout seeds).

    Read the rows with :func:`curricula_frame` and :func:`curricula_summary`.
    """
    out = Path(results_dir)
    check_study(out, study.record())
    pool = seed_pool(out, study, workers=workers)
    for run in tqdm(study.run_seeds(), desc="runs", disable=not progress):
        store = run_store(out, run_seed_dirs(out, pool, study, run), study, run, workers=workers)
        trainer = run_trainer(out, study, run, workers)
        envs = store_envs(store)
        fixed = fixed_set(envs, study.fixed_set_per_generation, run) if study.fixed_set_every else ()
        for name in study.curricula:
            cfg = trainer.config(steps=study.steps, tasks_per_step=study.tasks_per_step, group_size=study.group_size,
                                 seed=run)
            options = {"schedule": el_schedule(run_dir(out, run) / "train" / "el")} if name == "matched" else {}
            evals = fixed if name == "el" else ()
            if evals:  # EL's student on the fixed set, every fixed_set_every steps (claim 5, part b)
                cfg = dataclasses.replace(cfg, eval_every=study.fixed_set_every,
                                          eval_rollouts=study.fixed_set_rollouts)
            trainer.train(make_source(name, envs=envs, **options), run_dir(out, run) / "train" / name, cfg,
                          eval_tasks=evals)
    return out


FIXED_SET_STREAM = 5  # the fixed set's own random stream, apart from training's (seed, step) draws


def fixed_set(envs: Sequence[EnvRow], per_generation: int, seed: int) -> tuple[Path, ...]:
    """Claim 5's fixed environment set of a run: ``per_generation`` environments of each generation 0..G of
    its store, drawn uniformly (seeded by the run) and the same at every evaluation, so that turns on it
    move only with the student, not with what the curriculum serves (docs/preregistration.md, claim 5)."""
    rng = np.random.default_rng([int(seed), FIXED_SET_STREAM])
    chosen = []
    for g in sorted({e.generation for e in envs}):
        pool = sorted((e for e in envs if e.generation == g), key=lambda e: (e.lineage, e.k))
        take = rng.choice(len(pool), size=min(per_generation, len(pool)), replace=False)
        chosen += [pool[i].path for i in sorted(take)]
    return tuple(chosen)



def _advances(prev: dict | None, now: dict) -> tuple[int, int]:
    """(within-generation, next-generation) moves of EL's cursors between two steps."""
    within = across = 0
    for lineage, (g, k, _) in now.items():
        if prev is None or lineage not in prev:
            continue
        g0, k0, _ = prev[lineage]
        within += g == g0 and k > k0
        across += g > g0
    return within, across


def admission_columns(results_dir: str | Path) -> dict[int, dict]:
    """Per run, the seed-admission preconditions (:func:`evokit.studies.warm_start.seed_admission`):
    ``admitted_seeds``, ``admitted_at_zero`` (re-measured at pass rate 0 on separate rollouts) and
    ``shared_seeds`` (admitted seeds whose content another run also admitted); NaN where not recorded."""
    runs = {int(rd.name.split("-")[1]): seed_admission(results_dir, int(rd.name.split("-")[1]))
            for rd in sorted(Path(results_dir).glob("run-*"))}
    owners: dict[str, set[int]] = {}
    for run, a in runs.items():
        for h in (a or {}).get("content_hashes", []):
            owners.setdefault(h, set()).add(run)
    nan = float("nan")
    return {run: {"admitted_seeds": len(a["admitted"]) if a else nan,
                  "admitted_at_zero": sum(p == 0 for p in a["recheck_pass_rates"]) if a else nan,
                  "shared_seeds": sum(len(owners[h]) > 1 for h in a["content_hashes"]) if a else nan}
            for run, a in runs.items()}


def _turns_per_plan_step(served: list[dict]) -> float:
    """Mean over the served groups of turns per rollout / plan steps (NaN if a task has no plan, or rows
    written before the served entries recorded ``plan_steps``)."""
    ratios = [s["turns"] / s["plan_steps"] if s.get("plan_steps") else float("nan") for s in served]
    return float(np.mean(ratios)) if ratios else float("nan")


def curricula_frame(results_dir: str | Path) -> pd.DataFrame:
    """One row per (run, curriculum, step): GRPO group shares, reward, turns (per trajectory and per plan step),
    served generation, EL's cursor moves, the turns on claim 5's fixed set where the student was evaluated
    after that step (``fixed_set_turns``, NaN elsewhere), and the run's seed-admission preconditions
    (:func:`admission_columns`)."""
    rows = []
    admission = admission_columns(results_dir)
    nan = float("nan")
    for rd in sorted(Path(results_dir).glob("run-*")):
        for tr in sorted((rd / "train").iterdir()):
            prev = None
            fixed = {e["step"]: e["turns"] for e in read_rows(tr / "evals.jsonl")}  # [] where none was evaluated
            for r in read_rows(tr / "steps.jsonl"):
                cursors = r["scheduler"].get("cursors")
                within, across = _advances(prev, cursors) if cursors is not None else (0, 0)
                prev = cursors
                rows.append({"run": int(rd.name.split("-")[1]), "curriculum": tr.name, "step": r["step"],
                             "partially_solved_share": r["partially_solved_share"],
                             "dead_group_share": r["dead_group_share"], "mean_reward": r["mean_reward"],
                             "turns": r["turns"], "generation": float(np.mean([s["env"][1] for s in r["served"]])),
                             "mean_d_t": r["mean_d_t"], "k_advances": within, "g_advances": across,
                             "turns_per_plan_step": _turns_per_plan_step(r["served"]),
                             "fixed_set_turns": fixed.get(r["step"], nan),
                             **admission[int(rd.name.split("-")[1])]})
    return pd.DataFrame(rows)


def slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of y on x (per step) over the points where y is measured (NaN: not)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    x, y = x[~np.isnan(y)], y[~np.isnan(y)]
    return float(np.polyfit(x, y, 1)[0]) if len(x) > 1 else float("nan")


def per_run(frame: pd.DataFrame, first: int) -> pd.DataFrame:
    """Per (run, curriculum) over the first ``first`` steps: mean shares and reward, reward/turns/generation slopes."""
    rows = []
    for (run, name), g in frame[frame.step < first].groupby(["run", "curriculum"]):
        g = g.sort_values("step")
        rows.append({"run": run, "curriculum": name, "steps": len(g),
                     "partially_solved_share": float(g.partially_solved_share.mean()),
                     "dead_group_share": float(g.dead_group_share.mean()), "mean_reward": float(g.mean_reward.mean()),
                     "reward_slope": slope(g.step, g.mean_reward), "turns_slope": slope(g.step, g.turns),
                     "generation_slope": slope(g.step, g.generation),
                     "turns_per_plan_step_slope": slope(g.step, g.turns_per_plan_step)
                     if g.turns_per_plan_step.notna().all() else float("nan"),
                     "fixed_set_turns_slope": slope(g.step, g.fixed_set_turns),
                     "fixed_set_evaluations": int(g.fixed_set_turns.notna().sum()),
                     "turns_first": float(g.turns.head(5).mean()),
                     "turns_last": float(g.turns.tail(5).mean()), "generation_last": float(g.generation.tail(5).mean()),
                     "k_advances": int(g.k_advances.sum()), "g_advances": int(g.g_advances.sum()),
                     "served_evolved": bool((g.generation > 0).any()),
                     **{c: float(g[c].iloc[0]) if c in g else float("nan")
                        for c in ("admitted_seeds", "admitted_at_zero", "shared_seeds")}})
    return pd.DataFrame(rows)


#: docs/preregistration.md, claims 4 and 5: at most this share of the block's admitted seeds (pooled over
#: runs) at pass rate 0 when re-measured, a window of at least this many steps, EL serving an evolved
#: environment in this share of runs.
MAX_AT_ZERO, MIN_WINDOW, MIN_EVOLVED_RUNS = 0.20, 16, 0.8
MIN_FIXED_EVALUATIONS = 2  # claim 5's part (b): a slope of turns on the fixed set needs two evaluations


def admission_at_zero(admitted: pd.Series, at_zero: pd.Series) -> tuple[Precondition, float]:
    """Claims 4–6's admission precondition from one row per run: the share of all the runs' admitted seeds
    that re-measure at pass rate 0 (pooled, ≤ :data:`MAX_AT_ZERO`), and the largest share of one run's,
    reported beside and not gating. A run not recorded (NaN) makes both "not measured".

    Pooled, because with 4–5 seeds a run a per-run tolerance means none at 0 anywhere; 0.20 because
    a seed at the band's lower edge (p = 2/8) re-measures at 0 over 8 rollouts with probability 0.10,
    and a block of such seeds exceeds 0.20 with probability ≈ 0.01 (docs/preregistration.md, changes
    log, 2026-12-07). A seed the student never passes is never admitted (admission needs a pass), so
    this measures how near 0 the admitted seeds sit, not whether they are possible.
    """
    pooled = at_zero.sum(skipna=False) / admitted.sum(skipna=False)
    return (precondition("share of the runs' admitted seeds at pass rate 0 (pooled)", pooled, "≤", MAX_AT_ZERO),
            float((at_zero / admitted).max(skipna=False)))


def preconditions(pr: pd.DataFrame, first_steps: int, min_runs: int = MIN_UNITS) -> dict[str, list]:
    """Claims 4 and 5's preconditions from :func:`per_run` rows (docs/preregistration.md)."""
    runs = pr.drop_duplicates("run")
    claim4 = [precondition("runs", len(runs), "≥", min_runs),
              precondition("seed tasks shared between runs", runs.shared_seeds.sum(skipna=False), "=", 0),
              admission_at_zero(runs.admitted_seeds, runs.admitted_at_zero)[0],
              precondition("comparison window (steps)", first_steps, "≥", MIN_WINDOW)]
    el = pr[pr.curriculum == "el"]
    evolved = float(el.served_evolved.mean()) if len(el) else None
    fixed = int(el.fixed_set_evaluations.min()) if len(el) else None  # part (b) needs a slope in every run
    return {"claim4": claim4,
            "claim5": [*claim4, precondition("share of runs where EL served generation ≥ 1", evolved, "≥",
                                             MIN_EVOLVED_RUNS),
                       precondition("fewest fixed-set evaluations in an EL run", fixed, "≥", MIN_FIXED_EVALUATIONS)]}


def curricula_summary(frame: pd.DataFrame, first: int = 50, min_runs: int = MIN_UNITS) -> dict:
    """Claims 4 and 5 over runs: estimates with 95 % t intervals and what they say (module docstring).

    Each claim reports its preconditions (:func:`preconditions`; the dead-group share per
    curriculum beside them, not gating); a claim whose precondition fails says
    "no verdict (precondition: …)" instead of yes / no / tie.
    """
    pr = per_run(frame, first)
    by = {name: g.sort_values("run") for name, g in pr.groupby("curriculum")}
    first_steps = int(min(first, frame.step.max() + 1))
    pre = preconditions(pr, first_steps, min_runs)
    runs = pr.drop_duplicates("run")
    out: dict = {"first_steps": first_steps, "runs": sorted(pr.run.unique().tolist()),
                 "per_run": pr.to_dict("records"), "curricula": {},
                 "preconditions": {c: [p.as_dict() for p in ps] for c, ps in pre.items()},
                 "largest_run_share_at_zero": admission_at_zero(runs.admitted_seeds, runs.admitted_at_zero)[1]}
    for name, g in by.items():
        out["curricula"][name] = {col: interval(g[col], name=f"{name} {col}").as_dict() for col in (
            "partially_solved_share", "dead_group_share", "mean_reward", "reward_slope", "turns_slope",
            "generation_slope", "turns_first", "turns_last", "generation_last")}
        out["curricula"][name]["k_advances"] = int(g.k_advances.sum())
        out["curricula"][name]["g_advances"] = int(g.g_advances.sum())
    if {"el", "random"} <= set(by):
        el, rnd = by["el"], by["random"]
        if el.run.tolist() != rnd.run.tolist():
            raise ValueError(f"EL and random order ran on other runs ({el.run.tolist()} vs {rnd.run.tolist()})")
        diff = difference(el.partially_solved_share, rnd.partially_solved_share, paired=True,
                          name="partially solved share, EL − random")
        s_el, s_rnd = (interval(g.reward_slope, name="reward slope") for g in (el, rnd))
        out["claim4"] = {"share_difference": diff.as_dict(),
                         "share_reproduced": withheld(paper_side(diff, "above"), pre["claim4"]),
                         "reward_slope_el": s_el.as_dict(), "reward_slope_random": s_rnd.as_dict(),
                         "el_rises": withheld(paper_side(s_el, "above"), pre["claim4"]),
                         "random_dips": withheld(paper_side(s_rnd, "below"), pre["claim4"]),
                         "dead_group_share": {n: out["curricula"][n]["dead_group_share"] for n in ("el", "random")},
                         "paper": "EL keeps more groups partially solved; EL's reward rises, random's dips"}
        out["claim4"].update(_controls(by, paper_side(diff, "above"), pre["claim4"]))
    if "el" in by:
        out["claim5"] = _claim5(by, pre["claim5"], out["curricula"]["el"]["generation_slope"])
    return out


def _claim5(by: dict[str, pd.DataFrame], pre: list, generation_slope: dict) -> dict:
    """Claim 5 (docs/preregistration.md): (a) EL's slope of turns per trajectory above 0, and (b) that slope
    minus the slope of turns on the run's fixed set (the same student; a rise there is the student's own
    drift, not EL's unlocking) above 0; turns per plan step and random order's turns slope beside them."""
    el = by["el"]
    a = interval(el.turns_slope, name="EL turns slope")
    out = {"turns_slope_el": a.as_dict(), "generation_slope_el": generation_slope,
           "paper": "turns per trajectory rise steadily as harder generations unlock (≈190 for 27B)"}
    parts = [paper_side(a, "above")]
    if (el.fixed_set_evaluations >= MIN_FIXED_EVALUATIONS).all():
        b = difference(el.turns_slope, el.fixed_set_turns_slope, paired=True,
                       name="EL turns slope − fixed-set turns slope")
        out["fixed_set_turns_slope"] = interval(el.fixed_set_turns_slope, name="fixed-set turns slope").as_dict()
        out["served_minus_fixed_slope"] = b.as_dict()
        parts.append(paper_side(b, "above"))
    if el.turns_per_plan_step_slope.notna().all():
        out["turns_per_plan_step_slope_el"] = interval(el.turns_per_plan_step_slope,
                                                       name="EL turns per plan step slope").as_dict()
    if "random" in by:
        out["turns_slope_random"] = interval(by["random"].turns_slope, name="random turns slope").as_dict()
    out["reproduced"] = withheld(combine(parts), pre)
    return out


CONTROLS = ("seeds-only", "matched")  # claim 4's control arms (evokit.curricula.controls)


def _controls(by: dict[str, pd.DataFrame], share: str, pre: list) -> dict:
    """Claim 4's part (b) and the claim: EL − each control arm (paired over runs), EL's adaptivity
    ("yes" if both above 0) and claim 4 ("yes" if EL also beats random order, ``share``); withheld,
    besides claim 4's preconditions, when a control arm was not run."""
    el = by["el"]
    diffs = {c: difference(el.partially_solved_share, by[c].partially_solved_share, paired=True,
                           name=f"partially solved share, EL − {c}") for c in CONTROLS if c in by}
    pre = [*pre, precondition("control arms run (seeds-only, matched)", len(diffs), "=", len(CONTROLS))]
    adaptivity = combine([paper_side(iv, "above") for iv in diffs.values()])
    return {"control_differences": {c: iv.as_dict() for c, iv in diffs.items()},
            "control_preconditions": [p.as_dict() for p in pre],
            "adaptivity_reproduced": withheld(adaptivity, pre),
            "claim_reproduced": withheld(combine([share, adaptivity]), pre)}


def step_bands(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per (curriculum, step): the across-run mean of ``column`` and its t interval (for the figures' bands)."""
    rows = []
    for (name, step), g in frame.groupby(["curriculum", "step"]):
        if len(g) < 2:
            continue
        iv = interval(g[column], name=f"{name} {column} step {step}")
        rows.append({"curriculum": name, "step": step, "estimate": iv.estimate, "lo": iv.lo, "hi": iv.hi})
    return pd.DataFrame(rows)
