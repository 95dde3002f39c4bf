"""EE §5.1's method comparison: evolution vs co-evolution vs ensemble, equal environment budgets, an independent benchmark.

Rows per run: ``run-<s>/train/<method>/…/steps.jsonl``, ``evals.jsonl``, ``initial_eval.json``;
notebook ``ee_methods``. The shared start (learner, seed admission, N_{i,g}, runs) is in
:mod:`evokit.studies.warm_start`. How the setting departs from EE:

* **The benchmark** is :mod:`evokit.benchmark` (fixed verified tasks drawn in their own seed
  namespace, never trained on), not Terminal-Bench 2.1; after training, its tasks are checked
  apart by content from the seed pool and from every method's environments
  (:func:`evokit.benchmark.check_disjoint`), and a study whose benchmark overlaps fails.
* **Equal budgets.** N is the number of environments evolution synthesised (generations ≥ 1 of
  its store). The ensemble merges the seeds the learner fails (at least one of 8 rollouts; if
  fewer than three, the three hardest) until N exist; co-evolution synthesises N over
  ⌈steps / refresh_every⌉ rounds. All three start from the same seeds; evolution's EL curriculum
  also serves the seeds themselves (generation 0, where EL starts). The ensemble can make at most
  2^f − f − 1 distinct merges of f failed seeds, which bounds N at this scale (a first smoke
  design with N = 20 from 4 seeds could not be matched: a size change for cost and feasibility,
  made before any method was compared).
* **Baselines' order.** Evolution is served by EL (its lineages have generations to climb); the
  ensemble and co-evolution have no lineages and are served in random order.
* **Co-evolution's refresh** is a task source (:class:`evokit.evolve.coevolution.Coevolution`): the
  weakness bank starts from the learner's rollouts on the seeds and takes every step's rollouts.
* **Peak and final.** Each method is evaluated on the benchmark every ``eval_every`` steps; its
  peak is the best of those evaluations *after* training began (step 0, the shared learner, is
  reported apart as ``initial``, so "peak ≥ initial" is not built in) and its final is the last.
  Across runs, each method's peak and final get a t interval; two methods whose
  intervals overlap are a **tie**; the paired differences (same run, same learner) are reported too.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm  # a widget in Jupyter, text in a terminal

from evokit.benchmark import BENCHMARK, DETECTABLE, BenchmarkConfig, benchmark_tasks, check_disjoint
from evokit.cpu_agent.policy import collect_groups, evaluate
from evokit.cpu_agent.solvers import Solver
from evokit.curriculum import RandomOrder, store_envs
from evokit.evolve.coevolution import (
    Coevolution,
    CoevolutionConfig,
    WeaknessBank,
    bank_records,
    split_budget,
    update_bank,
)
from evokit.evolve.ensemble import ensemble
from evokit.grpo import group_stats
from evokit.lineage import LineageStore
from evokit.rollout import write_rows
from evokit.rows import read_rows
from evokit.sources import make_source
from evokit.stats import MIN_UNITS, difference, interval, precondition, withheld
from evokit.studies.curricula import admission_at_zero, admission_columns, train_config
from evokit.studies.folder import check_study
from evokit.studies.warm_start import (
    EEStudy,
    learner,
    run_dir,
    run_seed_dirs,
    run_store,
    seed_pool,
)
from evokit.train import TrainConfig, train

MIN_FAILED = 3  # the ensemble needs parts; if fewer seeds are failed, the hardest seeds are used
ROLLOUTS = 8  # EE: pass rates over 8 rollouts
METHODS = ("evolution", "co-evolution", "ensemble")
STORES = {"evolution": "store", "ensemble": "ensemble_store", "co-evolution": "coevolution_store"}


@dataclass(frozen=True)
class MethodsStudy(EEStudy):
    """EE §5.1's method comparison: the shared sizes, co-evolution's refresh, the benchmark, the methods."""

    refresh_every: int = 10  # EE: 50 RL steps
    eval_every: int = 10  # benchmark evaluations every so many steps
    eval_rollouts: int = 2  # rollouts per benchmark task per evaluation (EE: mean of 5 runs)
    benchmark: BenchmarkConfig = field(default_factory=lambda: BENCHMARK)
    methods: tuple[str, ...] = METHODS
    evolution_curriculum: str = "el"


def _groups_cached(path: Path, solver: Solver, tasks: Sequence[Path], *, cfg: TrainConfig, seed: int) -> list[dict]:
    """Rollout rows of one group of 8 per task, acting as in training; written once to ``path``, read back after."""
    if not path.exists():
        groups = collect_groups(solver.policy, list(tasks), group_size=ROLLOUTS, workers=cfg.workers, seed=seed,
                                attempts=cfg.attempts, judge=solver.judge, groups_at_once=cfg.groups_at_once)
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


def methods_study(results_dir: str | Path, study: MethodsStudy = MethodsStudy(), *, workers: int = 2,
                  progress: bool = True) -> Path:
    """EE §5.1 over ``study.runs`` runs: each method trains the run's learner on its own N environments.

    Rows: ``run-<s>/train/<method>/…`` and ``run-<s>/initial_eval.json``; read them with
    :func:`methods_frame` and :func:`methods_summary`. Raises
    :class:`evokit.benchmark.BenchmarkOverlapError` if a method's environments share a benchmark task.
    """
    out = Path(results_dir)
    unknown = sorted(set(study.methods) - set(METHODS))
    if unknown:
        raise ValueError(f"unknown methods {unknown}; choose from {METHODS}")
    check_study(out, {"study": "methods", **asdict(study), "benchmark": study.benchmark.key()})
    pool = seed_pool(out, study, workers=workers)
    bench = benchmark_tasks(out / "benchmark", study.benchmark, workers=workers)
    for run in tqdm(study.run_seeds(), desc="runs", disable=not progress):
        rd = run_dir(out, run)
        seeds = run_seed_dirs(out, pool, study, run)
        store = run_store(out, seeds, study, run, workers=workers)
        budget = sum(e.generation >= 1 for e in store.envs())
        solver = learner(out, study, run)
        cfg = train_config(study, run, workers, eval_every=study.eval_every, eval_rollouts=study.eval_rollouts)
        initial = rd / "initial_eval.json"
        if not initial.exists():  # step 0 of every method: the run's learner, evaluated as train() evaluates
            rate = evaluate(solver.policy, bench, n=study.eval_rollouts, seed=cfg.seed + 7, workers=cfg.workers,
                            attempts=cfg.attempts, judge=solver.judge, groups_at_once=cfg.groups_at_once)
            initial.write_text(json.dumps({"pass_rate": rate, "benchmark_tasks": len(bench), "budget": budget}))
        seed_rows = _groups_cached(rd / "seed_rollouts.jsonl", solver, seeds, cfg=cfg, seed=run * 7 + 3)
        for method in study.methods:
            run_one(method, rd, study, cfg, solver, seeds, seed_rows, store, bench, budget)
        check_disjoint(bench, {"seed pool": sorted(out.glob("run-*/seed_pool/seed-*")),
                               **{f"run {run} {m}": [LineageStore(rd / STORES[m]).path(e)
                                                     for e in LineageStore(rd / STORES[m]).envs()]
                                  for m in study.methods}})
    return out


def run_one(method: str, rd: Path, study: MethodsStudy, cfg: TrainConfig, solver: Solver, seeds: Sequence[Path],
            seed_rows: Sequence[dict], store: LineageStore, bench: Sequence[Path], budget: int) -> None:
    """Train the run's learner with one method on its own environments, evaluated on the benchmark."""
    run, kw = rd / "train" / method, {"init_policy": solver.policy, "eval_tasks": bench, "judge": solver.judge,
                                      "progress": False}
    if method == "evolution":
        train(make_source(study.evolution_curriculum, envs=store_envs(store)), solver.policy.config, run, cfg, **kw)
    elif method == "ensemble":
        rates = pass_rates(seed_rows)
        by_rate = sorted(seeds, key=lambda d: (rates[d.name], d.name))
        failed = [d for d in by_rate if rates[d.name] < 1.0]
        failed = failed if len(failed) >= MIN_FAILED else by_rate[:MIN_FAILED]
        ens = LineageStore(rd / STORES["ensemble"])
        made = ensemble(failed, ens, budget=budget, seed=cfg.seed)
        (rd / "ensemble.json").write_text(json.dumps({"failed_seeds": [d.name for d in failed],
                                                      "pass_rates": rates, "made": len(made)}, indent=2))
        train(RandomOrder(store_envs(ens)), solver.policy.config, run, cfg, **kw)
    else:
        config = CoevolutionConfig(refresh_every=study.refresh_every)
        bank = update_bank(WeaknessBank(), bank_records(seed_rows, seeds), decay=config.decay)
        sizes = split_budget(budget, math.ceil(cfg.steps / study.refresh_every))
        source = Coevolution(tuple(seeds), rd / STORES["co-evolution"], sizes, bank, config)
        train(source, solver.policy.config, run, cfg, **kw)


def methods_frame(results_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(benchmark evaluations, training steps) over runs: ``run, method, steps_trained, benchmark_pass_rate``
    and per-step rows. ``steps_trained`` 0 is the run's learner before training (``initial_eval.json``).

    Each evaluation row also carries its run's preconditions: the seed admission's
    (:func:`evokit.studies.curricula.admission_columns`), the run's ``budget`` N and the
    ``environments`` the method had (evolution: what it synthesised; the others: their store).
    """
    evals, steps = [], []
    admission = admission_columns(results_dir)
    for rd in sorted(Path(results_dir).glob("run-*")):
        run = int(rd.name.split("-")[1])
        initial_eval = json.loads((rd / "initial_eval.json").read_text())
        initial = initial_eval["pass_rate"]
        for method_dir in sorted((rd / "train").iterdir()):
            m = method_dir.name
            store = rd / STORES.get(m, "")
            envs = LineageStore(store).envs() if m in STORES and store.exists() else None
            made = (float("nan") if envs is None else
                    sum(e.generation >= 1 for e in envs) if m == "evolution" else len(envs))
            cols = {**admission[run], "budget": initial_eval.get("budget", float("nan")), "environments": made}
            evals.append({"run": run, "method": m, "steps_trained": 0, "benchmark_pass_rate": initial, **cols})
            evals += [{"run": run, "method": m, "steps_trained": r["step"] + 1, "benchmark_pass_rate": r["pass_rate"],
                       **cols} for r in read_rows(method_dir / "evals.jsonl")]
            steps += [{"run": run, "method": m, "step": r["step"], "mean_reward": r["mean_reward"],
                       "partially_solved_share": r["partially_solved_share"], "turns": r["turns"]}
                      for r in read_rows(method_dir / "steps.jsonl")]
    return pd.DataFrame(evals), pd.DataFrame(steps)


#: docs/preregistration.md, claim 6: the untrained student's benchmark pass rate leaves room to move 0.05 either way.
UNTRAINED_RANGE = (0.1, 0.9)


def preconditions(evals: pd.DataFrame, min_runs: int = MIN_UNITS) -> list:
    """Claim 6's preconditions from :func:`methods_frame`'s rows (docs/preregistration.md); NaN or a
    missing column is "not measured" and fails."""

    def col(c: str) -> pd.Series:
        return evals[c] if c in evals else pd.Series(float("nan"), index=evals.index)

    runs = evals.drop_duplicates("run")
    initial = evals[evals.steps_trained == 0].groupby("run").benchmark_pass_rate.first()
    short = (col("environments") - col("budget")).abs()
    return [precondition("runs", len(runs), "≥", min_runs),
            precondition("largest budget shortfall of a method (environments)", short.max(skipna=False), "=", 0),
            precondition("lowest untrained benchmark pass rate", initial.min(), "in", UNTRAINED_RANGE),
            precondition("highest untrained benchmark pass rate", initial.max(), "in", UNTRAINED_RANGE),
            precondition("seed tasks shared between runs",
                         col("shared_seeds").groupby(evals.run).first().sum(skipna=False), "=", 0),
            _admission(evals)[0]]


def _admission(evals: pd.DataFrame) -> tuple:
    """The admission precondition and the largest share of one run's seeds at 0 (:func:`admission_at_zero`)."""
    nan = pd.Series(float("nan"), index=evals.index)
    first = {c: (evals[c] if c in evals else nan).groupby(evals.run).first() for c in ("admitted_seeds", "admitted_at_zero")}
    return admission_at_zero(first["admitted_seeds"], first["admitted_at_zero"])


def methods_summary(evals: pd.DataFrame, min_runs: int = MIN_UNITS) -> dict:
    """Per method across runs: peak (after step 0) and final benchmark pass rates with intervals, and each
    pair's order read from the **paired** difference over runs (the methods share a run's seeds and
    student: docs/preregistration.md, claim 6, parts (a) and (b)); an interval holding 0 is a tie,
    with its MDE and the runs a design of this spread needs to detect :data:`~evokit.benchmark.DETECTABLE`
    (``units_to_detect``: a pilot's sizing, docs/preregistration.md). The preconditions (:func:`preconditions`) are reported, and gate ``peak_reproduced`` and
    ``final_reproduced``: a failed one gives "no verdict (precondition: …)"."""
    trained = evals[evals.steps_trained > 0].sort_values("steps_trained")
    per = {"peak": trained.groupby(["method", "run"]).benchmark_pass_rate.max(),
           "final": trained.groupby(["method", "run"]).benchmark_pass_rate.last()}
    initial = evals[evals.steps_trained == 0].groupby("run").benchmark_pass_rate.first()
    pre = preconditions(evals, min_runs)
    out: dict = {"initial": interval(initial, name="initial").as_dict(), "runs": sorted(initial.index.tolist()),
                 "preconditions": [p.as_dict() for p in pre], "largest_run_share_at_zero": _admission(evals)[1]}
    methods = sorted(trained.method.unique(), key=lambda m: METHODS.index(m))
    for what, s in per.items():
        ivs = {m: interval(s[m].sort_index(), name=f"{m} {what}") for m in methods}
        out[what] = {m: iv.as_dict() for m, iv in ivs.items()}
        out[f"{what}_per_run"] = {m: s[m].sort_index().tolist() for m in methods}
        pairs = {}
        for a, b in itertools.combinations(methods, 2):
            d = difference(s[a].sort_index(), s[b].sort_index(), paired=True, name=f"{what} {a} − {b}")
            order = {"above": f"{a} > {b}", "below": f"{b} > {a}", "overlaps": "tie"}[d.sign]
            pairs[f"{a} vs {b}"] = {"order": order, "paired_difference": d.as_dict(),
                                    "units_to_detect": d.units_to_detect(DETECTABLE)}
        out[f"{what}_comparison"] = pairs
        if {"evolution", "co-evolution", "ensemble"} <= set(methods):
            orders = [pairs["evolution vs co-evolution"]["order"], pairs["evolution vs ensemble"]["order"]]
            out[f"{what}_reproduced"] = withheld("yes" if all(o.startswith("evolution >") for o in orders)
                                                 else "no" if any(o.endswith("> evolution") for o in orders)
                                                 else "tie", pre)
    return out


def environments_per_method(results_dir: str | Path) -> dict[str, list[int]]:
    """How many environments each method had to train on in each run (the paper's "same total number")."""
    counts: dict[str, list[int]] = {}
    for rd in sorted(Path(results_dir).glob("run-*")):
        for method, name in STORES.items():
            if (rd / name).exists():  # evolution: what it synthesised (its seeds are every method's seeds)
                envs = LineageStore(rd / name).envs()
                counts.setdefault(method, []).append(sum(e.generation >= 1 for e in envs) if method == "evolution"
                                                     else len(envs))
    return counts
