"""GenEnv's study: the co-evolution loop (learning vs random simulator vs static augmentation).

One study, :class:`GenEnvStudy`, serves three notebooks (papers.md, "GenEnv"): ``genenv_alpha``
(claim 7, the α-zone), ``genenv_vs_random`` (claim 8, fully solved and unsolved tasks
per batch) and ``genenv_data_efficiency`` (claim 9, the independent benchmark). Per seed it runs
the same agent, by the same loop (:func:`evokit.train.train` on :class:`evokit.genenv.GenEnvSource`),
against each *arm*:

* ``learning`` — GenEnv: the simulator trained by RWR on the α-curriculum reward;
* ``random`` — GenEnv's random-simulator baseline: the same generator, never updated;
* ``static`` — static augmentation: a fixed set of tasks sampled once from the initial generator
  (``static_share`` of the loop's task budget, so each is seen about 1/share times).

Every arm's agent also trains on its accumulating pool D_train (``replay``; :class:`evokit.genenv.GenEnvConfig`).

**The agent is pretrained from data, not from p_T** (so D_T and the agent do not share p_T): per seed a solver is
pretrained on a seeded corpus of solved steps drawn from the world's frequencies
(:func:`evokit.cpu_agent.solvers.pretrain`, the ``world`` mixture, :data:`evokit.cpu_agent.solvers.CORPUS_SIZE` steps),
as GenEnv starts from a base model; its logits contain no log p_T. D_T is only reported.

**The paper's starting condition** (docs/preregistration.md, claim 7). GenEnv's base model solves
13.8 % of the simulator's first tasks, below α, and the α-curriculum raises it into the zone. A
simulator initialised at p_T generates the agent's own training distribution (the agent succeeds
on ≈ 0.75 of it, above α, where moving towards α means *harder* tasks and claim 8's sign cannot
be reached). So each seed's simulator starts from rarer, longer plans chosen for that seed's base
agent by the registered rule (:mod:`evokit.studies.genenv_start`): seeds are drawn in order from
``first_seed`` until ``seeds`` of them have a start, and the ones passed over are reported beside
the claims (:func:`starts`). Every unit's base success at its start, on plans of another stream
(:func:`~evokit.studies.genenv_start.base_success`), is a precondition checked before any claim:
below the zone's lower edge.

With ``benchmark=True`` each seed's untrained solver and each arm's final agent are scored on the
independent held-out benchmark (:mod:`evokit.benchmark`, never trained on, checked disjoint from
every arm's tasks). Rows: ``seed<s>/<arm>/`` (the training runs: ``steps.jsonl``, pools),
``seed<s>/solver.pt``, ``seed<s>/start.json`` (every seed drawn), ``seed<s>/base_success.json``,
``benchmark_scores.jsonl``; frames and across-seed summaries below (intervals from :mod:`evokit.stats`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm  # a widget in Jupyter, text in a terminal

from evokit.benchmark import BENCHMARK, DETECTABLE, REGISTERED_ROLLOUTS, benchmark_tasks
from evokit.cpu_agent.policy import SkillPolicy, evaluate
from evokit.cpu_agent.solvers import CORPUS_SIZE, saved_policy, world_solver
from evokit.genenv import GenEnvConfig, GenEnvSource
from evokit.reference import GENENV_ALPHA, GENENV_ZONE
from evokit.rollout import rollout_workers
from evokit.rows import append_rows, read_rows
from evokit.stats import (
    MIN_UNITS,
    Interval,
    combine,
    difference,
    interval,
    paper_side,
    precondition,
    verdict,
    withheld,
    zone_side,
)
from evokit.studies.folder import check_study
from evokit.studies.genenv_start import (
    Start,
    StartRule,
    base_success,
    choose_start,
    initial_simulator,
    read_start,
    write_start,
)
from evokit.train import TrainConfig, final_policy, train

ARMS = ("learning", "random", "static")
ARM_LABELS = {"learning": "GenEnv", "random": "random simulator", "static": "static augmentation"}
BENCH_EVAL_STREAM = 9_100  # the benchmark evaluation's rollout seeds: seed·1000 + this (same for every arm)


# ============================================================================ the study
@dataclass(frozen=True)
class GenEnvStudy:
    """GenEnv's loop over ``seeds`` seeds (``first_seed``, …): the config ``study.json`` records, a notebook overrides.

    An epoch is ``batches_per_epoch`` batches of ``tasks_per_batch`` tasks, each tried ``rollouts``
    times (the GRPO group), so p̂ of a batch is over ``tasks_per_batch × rollouts`` rollouts.
    ``arms`` and ``benchmark`` only add runs and rows, so notebooks with other ``arms`` may share a
    folder; every other field must match (:func:`evokit.studies.folder.check_study`). ``seeds`` is the
    number of units; the seeds drawn to reach it depend on ``start`` (:func:`starts`).
    """

    seeds: int = 5
    first_seed: int = 0
    epochs: int = 6
    batches_per_epoch: int = 2
    tasks_per_batch: int = 2
    rollouts: int = 5
    replay: float = 1.0  # D_train groups per new group in the agent's update
    static_share: float = 0.5  # static augmentation's fixed tasks, as a share of the tasks the loop serves
    corpus_size: int = CORPUS_SIZE  # solved steps the base solver is pretrained on
    benchmark_rollouts: int = 1  # rollouts per benchmark task
    start: StartRule = field(default_factory=StartRule)  # each seed's initial simulator (evokit.studies.genenv_start)
    base_tasks: int = 128  # plans of the initial simulator claim 7's precondition is measured on
    arms: tuple[str, ...] = ("learning", "random")
    benchmark: bool = False

    def __post_init__(self):
        unknown = sorted(set(self.arms) - set(ARMS))
        if unknown or self.seeds < 1 or self.epochs < 1 or not 0 < self.static_share <= 1:
            raise ValueError(f"GenEnvStudy: arms from {ARMS}, seeds ≥ 1, epochs ≥ 1, 0 < static_share ≤ 1; got {self}")

    @property
    def candidates(self) -> list[int]:
        """The seeds a block may draw, in order: ``seeds`` of them, then up to ``start.passed_over`` more."""
        return list(range(self.first_seed, self.first_seed + self.seeds + self.start.passed_over))

    @property
    def tasks_per_epoch(self) -> int:
        return self.batches_per_epoch * self.tasks_per_batch

    def key(self) -> dict:
        """What must match to reuse a folder: everything but ``arms`` and ``benchmark`` (they only add rows)."""
        return {"study": "genenv", **{k: v for k, v in asdict(self).items() if k not in ("arms", "benchmark")}}


#: Smoke sizes (make check: 5 seeds, small batches, a choosing walk on 32 plans), the registered
#: smoke-scale design (10 seeds, batches of 4 × 4 so p̂ takes three values in |p̂ − α| ≤ 0.1, 4 of them
#: per epoch so the kept-batch precondition can be met, 8 benchmark rollouts per task, the registered
#: start: docs/preregistration.md, claims 7 and 9), and the paper's epochs and batches (64 tasks as 16 × 4).
SMOKE = GenEnvStudy(start=StartRule(tasks=32))
REGISTERED = GenEnvStudy(seeds=10, batches_per_epoch=4, tasks_per_batch=4, rollouts=4,
                         benchmark_rollouts=REGISTERED_ROLLOUTS)
FULL = GenEnvStudy(seeds=10, epochs=10, batches_per_epoch=16, tasks_per_batch=4, rollouts=4,
                   benchmark_rollouts=REGISTERED_ROLLOUTS)


def sized(base: GenEnvStudy, units: int | None = None) -> GenEnvStudy:
    """``base`` (:data:`SMOKE` or :data:`FULL`) with ``units`` seeds (None: its own); :data:`SMOKE` becomes
    :data:`REGISTERED` from :data:`~evokit.stats.MIN_UNITS` seeds on, where a claim can get a verdict."""
    n = units or base.seeds
    return replace(REGISTERED if base == SMOKE and n >= MIN_UNITS else base, seeds=n)


def base_solver(out: Path, seed: int, corpus_size: int) -> SkillPolicy:
    """Seed ``seed``'s base agent (:func:`evokit.cpu_agent.solvers.world_solver`), cached in ``out/solver.pt``."""
    return saved_policy(out / "solver.pt", world_solver(seed, corpus_size))


def arm_config(study: GenEnvStudy, arm: str, start: Start) -> GenEnvConfig:
    """The environment side of ``arm`` (module docstring) for the seed of ``start``."""
    static = max(study.tasks_per_batch, round(study.static_share * study.epochs * study.tasks_per_epoch))
    return start.config(GenEnvConfig(tasks_per_batch=study.tasks_per_batch, learning=arm == "learning",
                                     replay=study.replay, static_pool=static if arm == "static" else 0))


def starts(results_dir: str | Path, study: GenEnvStudy, *, progress: bool = False) -> list[Start]:
    """Every seed the block draws, in order, with its start: :attr:`GenEnvStudy.candidates` until ``seeds``
    of them qualify (fewer if the candidates run out; claim 7's precondition on units then withholds).

    A seed's start is chosen once, before any of its arms trains, and recorded in ``seed<s>/start.json``
    (:func:`evokit.studies.genenv_start.choose_start`); a later call reads it.
    """
    out, drawn = Path(results_dir), []
    with tqdm(total=study.seeds, desc="seeds with a start", disable=not progress) as bar:
        for seed in study.candidates:
            if sum(s.qualifies for s in drawn) == study.seeds:
                break
            start = read_start(out / f"seed{seed}")
            if start is None:
                init = base_solver(out / f"seed{seed}", seed, study.corpus_size)
                start = choose_start(init, seed, GenEnvConfig(), study.start)
                write_start(out / f"seed{seed}", start)
            drawn.append(start)
            bar.update(start.qualifies)
            bar.set_postfix(drawn=len(drawn))
    return drawn


def units(results_dir: str | Path, study: GenEnvStudy) -> list[int]:
    """The seeds that are the study's units: those drawn with a start (:func:`starts`)."""
    return [s.seed for s in starts(results_dir, study) if s.qualifies]


def start_success(results_dir: str | Path, study: GenEnvStudy, start: Start) -> float:
    """A unit's base success at its start on :attr:`GenEnvStudy.base_tasks` plans of the precondition's own
    stream (claim 7), measured once and recorded in ``seed<s>/base_success.json``."""
    path = Path(results_dir) / f"seed{start.seed}" / "base_success.json"
    if not path.exists():
        init = base_solver(path.parent, start.seed, study.corpus_size)
        sim = initial_simulator(arm_config(study, "learning", start), start.seed)
        path.write_text(json.dumps({"success": base_success(init, sim, study.base_tasks, start.seed),
                                    "tasks": study.base_tasks, "init_tilt": start.init_tilt,
                                    "max_len": start.max_len}))
    return json.loads(path.read_text())["success"]


def genenv_study(results_dir: str | Path, study: GenEnvStudy = SMOKE, *, workers: int = 2,
                 progress: bool = True) -> Path:
    """Run (or resume) every unit × arm of ``study``, then, with ``benchmark``, the benchmark scores."""
    out = Path(results_dir)
    check_study(out, study.key())
    chosen = [s for s in starts(out, study, progress=progress) if s.qualifies]
    for start in tqdm(chosen, desc="seeds", disable=not progress):
        seed = start.seed
        init = base_solver(out / f"seed{seed}", seed, study.corpus_size)
        start_success(out, study, start)  # claim 7's precondition, measured before any arm trains
        for arm in study.arms:
            cfg = TrainConfig(steps=study.epochs, tasks_per_step=study.tasks_per_epoch, group_size=study.rollouts,
                              seed=seed, workers=rollout_workers(workers), eval_every=0)
            train(GenEnvSource(arm_config(study, arm, start)), init.config, out / f"seed{seed}" / arm, cfg,
                  init_policy=init, progress=False)
    if study.benchmark:
        _score_benchmark(out, study, workers)
    return out


def _score_benchmark(out: Path, study: GenEnvStudy, workers: int) -> None:
    seeds = units(out, study)
    trained = {f"seed{s}/{a}": sorted((out / f"seed{s}" / a / "tasks").iterdir())
               for s in seeds for a in study.arms}
    bench = benchmark_tasks(out / "benchmark", BENCHMARK, disjoint_from=trained, workers=workers)
    rows_path = out / "benchmark_scores.jsonl"
    done = {(r["seed"], r["arm"]) for r in read_rows(rows_path)}
    for seed in seeds:
        init = base_solver(out / f"seed{seed}", seed, study.corpus_size)
        for arm in ("untrained", *study.arms):
            if (seed, arm) in done:
                continue
            policy = init if arm == "untrained" else final_policy(out / f"seed{seed}" / arm, init.config, seed)
            score = evaluate(policy, bench, n=study.benchmark_rollouts, seed=seed * 1000 + BENCH_EVAL_STREAM,
                             workers=rollout_workers(workers))
            append_rows(rows_path, [{"seed": seed, "arm": arm, "score": score, "tasks": len(bench),
                                     "rollouts": study.benchmark_rollouts}])


# ============================================================================ frames
def genenv_frame(results_dir: str | Path) -> pd.DataFrame:
    """One row per (seed, arm, epoch) from the runs' ``steps.jsonl``, with the preconditions' columns
    ``base_success`` (the seed's base agent on the initial simulator, :func:`base_success`; NaN where
    not measured) and ``kept_batches`` (batches the difficulty filter kept that epoch).

    ``fully_solved_per_batch`` / ``unsolved_per_batch`` count the epoch's *served* tasks whose
    rollouts all pass / all fail, per batch (replayed D_train groups are not counted).
    """
    rows = []
    for run in sorted(Path(results_dir).glob("seed*/*/steps.jsonl")):
        seed, arm = int(run.parent.parent.name.removeprefix("seed")), run.parent.name
        base = run.parent.parent / "base_success.json"
        base_rate = json.loads(base.read_text())["success"] if base.exists() else float("nan")
        run_cfg = json.loads((run.parent / "config.json").read_text())
        batches = run_cfg["config"]["tasks_per_step"] // run_cfg["source"]["config"]["tasks_per_batch"]
        for r in read_rows(run):
            g, served = r["scheduler"], r["served"]
            full = sum(bool(s["n"]) and s["successes"] == s["n"] for s in served)
            none = sum(bool(s["n"]) and s["successes"] == 0 for s in served)
            rows.append({"seed": seed, "arm": arm, "epoch": r["step"] + 1, "success": g["success"],
                         "r_env": g["r_env"], "kept_share": g["kept_share"], "batches": batches,
                         "kept_batches": round(g["kept_share"] * batches), "base_success": base_rate,
                         "fully_solved_per_batch": full / batches, "unsolved_per_batch": none / batches,
                         "plan_length": g["mean_length"], "turns": r["turns"], "sim_kl": g["sim_kl"],
                         "weights_n": g["weights_n"], "weights_levels": g["weights_levels"],
                         "weights_min": g["weights_min"], "weights_max": g["weights_max"],
                         "weights_std": g["weights_std"], "pool_weights_levels": g["pool_weights_levels"],
                         "pool_weights_min": g["pool_weights_min"], "pool_weights_max": g["pool_weights_max"],
                         "pool_weights_std": g["pool_weights_std"], "d_train_groups": g["d_train_groups"],
                         "replayed": r.get("replayed", 0), "mean_d_theta": r["mean_d_theta"]})
    return pd.DataFrame(rows).sort_values(["arm", "seed", "epoch"], ignore_index=True)


def benchmark_frame(results_dir: str | Path) -> pd.DataFrame:
    """Rows (seed, arm, score): each seed's untrained solver and each arm's final agent on the benchmark."""
    return pd.DataFrame(read_rows(Path(results_dir) / "benchmark_scores.jsonl"))


def epoch_bands(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per (arm, epoch): the across-seed mean of ``column`` and its t interval (for the figures' bands; NaN bounds for one seed)."""
    rows = []
    for (arm, epoch), g in frame.groupby(["arm", "epoch"]):
        iv = interval(g[column].tolist(), min_n=1, name=f"{arm} epoch {epoch} {column}")
        rows.append({"arm": arm, "epoch": int(epoch), "estimate": iv.estimate, "lo": iv.lo, "hi": iv.hi, "n": iv.n})
    return pd.DataFrame(rows)


# ============================================================================ summaries
def last_third(epochs: int) -> int:
    """How many final epochs "the last third of epochs" is (at least one)."""
    return max(1, round(epochs / 3))


def _per_seed(frame: pd.DataFrame, arm: str, fn) -> dict[int, float]:
    return {int(s): float(fn(g.sort_values("epoch"))) for s, g in frame[frame.arm == arm].groupby("seed")}


def _paired(a: dict, b: dict, name: str) -> dict:
    seeds = sorted(set(a) & set(b))
    iv = difference([a[s] for s in seeds], [b[s] for s in seeds], paired=True, name=name)
    return {**iv.as_dict(), "sign": verdict(iv), "seeds": seeds}


def preconditions(frame: pd.DataFrame, min_seeds: int = MIN_UNITS) -> list:
    """Claims 7–9's shared preconditions (docs/preregistration.md, claim 7): enough seeds; every seed's base
    agent below the zone at its start; the learning arms kept ≥ 1 batch per seed in the first third of
    epochs, pooled over seeds (a start below the zone keeps a batch with chance 0.13–0.27,
    :func:`evokit.studies.genenv_start.keep_probability`, so "in every seed" would withhold almost
    every block whatever the simulator does; each seed's count is reported, :func:`kept_early`)."""
    seeds = frame.seed.nunique()
    base = frame.groupby("seed").base_success.first() if "base_success" in frame else pd.Series(dtype=float)
    kept = kept_early(frame)
    return [precondition("seeds", seeds, "≥", min_seeds),
            precondition("highest base success on the initial simulator",
                         float(base.max(skipna=False)) if len(base) else None, "<", GENENV_ZONE[0]),
            precondition("kept batches per seed of the learning arms in the first third of epochs, pooled",
                         sum(kept.values()) / seeds if len(kept) == seeds and seeds else None, "≥", 1)]


def kept_early(frame: pd.DataFrame) -> dict[int, int]:
    """Per seed, the batches its learning arm kept in the first third of epochs."""
    learning = frame[frame.arm == "learning"] if "kept_batches" in frame else frame.iloc[:0]
    if not len(learning):
        return {}
    k = last_third(int(frame.epoch.max()))
    return {int(s): int(v) for s, v in learning[learning.epoch <= k].groupby("seed").kept_batches.sum().items()}


def alpha_summary(frame: pd.DataFrame, zone: tuple[float, float], alpha: float = GENENV_ALPHA,
                  min_seeds: int = MIN_UNITS) -> dict:
    """Claim 7 as registered (docs/preregistration.md, claim 7), from each seed's mean success over the
    last third of epochs, t intervals over seeds:

    (a) the learning arm's last-third success within ``zone`` (:func:`~evokit.stats.zone_side`);
    (b) the random arm's distance to α minus the learning arm's, |success − α|, paired: above 0;
    (c) a guard, the simulator must not reach the zone by collapsing to short tasks: the learning
        arm's plan length, last third minus first epoch, "no" if its interval lies below 0.

    ``reproduced`` is :func:`~evokit.stats.combine` of the three, or "no verdict (precondition: …)".
    Reported beside: seeds in the zone, the first epoch whose interval lies in the zone, kept batches.
    """
    epochs = int(frame.epoch.max())
    k = last_third(epochs)
    pre = preconditions(frame, min_seeds)
    out: dict = {"last_epochs": k, "zone": list(zone), "alpha": alpha, "preconditions": [p.as_dict() for p in pre]}
    if "kept_batches" in frame:
        out["kept_batches_per_epoch"] = {int(e): int(v) for e, v in
                                         frame[frame.arm == "learning"].groupby("epoch").kept_batches.sum().items()}
        early = kept_early(frame)
        out["kept_batches_first_third"] = {"per_seed": early, "seeds_with_none": sum(v == 0 for v in early.values())}
    last = {}
    for arm in sorted(set(frame.arm) & {"learning", "random"}):
        last[arm] = _per_seed(frame, arm, lambda g: g.success.tail(k).mean())
        inside = {s: bool(zone[0] <= v <= zone[1]) for s, v in last[arm].items()}
        length_change = _per_seed(frame, arm, lambda g: g.plan_length.tail(k).mean() - g.plan_length.iloc[0])
        iv_len = interval(list(length_change.values()), name=f"{arm} length change")
        out[arm] = {"success_last": interval(list(last[arm].values()), name=f"{arm} success").as_dict(),
                    "success_last_per_seed": last[arm], "in_zone_per_seed": inside,
                    "seeds_in_zone": sum(inside.values()), "seeds": len(inside),
                    "success_first": interval(_per_seed(frame, arm, lambda g: g.success.iloc[0]).values(),
                                              name=f"{arm} first").as_dict(),
                    "length_first": interval(_per_seed(frame, arm, lambda g: g.plan_length.iloc[0]).values(),
                                             name=f"{arm} length first").as_dict(),
                    "length_last": interval(_per_seed(frame, arm, lambda g: g.plan_length.tail(k).mean()).values(),
                                            name=f"{arm} length last").as_dict(),
                    "length_change": {**iv_len.as_dict(), "sign": verdict(iv_len)},
                    "turns_first": float(frame[(frame.arm == arm) & (frame.epoch == 1)].turns.mean()),
                    "turns_last": float(frame[(frame.arm == arm) & (frame.epoch > epochs - k)].turns.mean())}
    if {"learning", "random"} <= out.keys():
        distance = {arm: {s: abs(v - alpha) for s, v in last[arm].items()} for arm in last}
        out["distance_random_minus_learning"] = _paired(distance["random"], distance["learning"],
                                                        "distance to α: random − learning")
        bands = epoch_bands(frame[frame.arm == "learning"], "success")
        in_zone = bands[(bands.lo >= zone[0]) & (bands.hi <= zone[1])]
        out["first_epoch_in_zone"] = int(in_zone.epoch.min()) if len(in_zone) else None
        parts = {"learning_in_zone": zone_side(out["learning"]["success_last"], zone),
                 "closer_to_alpha_than_random": paper_side(out["distance_random_minus_learning"], "above"),
                 "length_not_below_start": "no" if out["learning"]["length_change"]["sign"] == "below" else "yes"}
        out["parts"] = parts
        out["reproduced"] = withheld(combine(list(parts.values())), pre)
    return out


def vs_random_summary(frame: pd.DataFrame, min_seeds: int = MIN_UNITS) -> dict:
    """Claim 8: learning − random in fully solved and unsolved tasks per batch (paired over seeds).

    "yes": more fully solved (interval above 0) and fewer unsolved (below 0), the paper's signs;
    "no": either interval on the other side; "tie" otherwise. Relative changes are in percent of
    the random simulator's across-seed mean (the paper's +3.5 % / −20.3 %). Claim 7's preconditions
    gate the verdict (from above α, moving towards it *adds* unsolved tasks).
    """
    pre = preconditions(frame, min_seeds)
    out: dict = {"preconditions": [p.as_dict() for p in pre]}
    for col in ("fully_solved_per_batch", "unsolved_per_batch"):
        per = {arm: _per_seed(frame, arm, lambda g, c=col: g[c].mean()) for arm in ("learning", "random")}
        d = _paired(per["learning"], per["random"], col)
        base = float(np.mean(list(per["random"].values())))
        out[col] = {"learning": interval(list(per["learning"].values()), name=col).as_dict(),
                    "random": interval(list(per["random"].values()), name=col).as_dict(), "difference": d,
                    "relative_pct": {k: (100 * d[k] / base if base else None) for k in ("estimate", "lo", "hi")},
                    "per_seed": per}
    fs, un = out["fully_solved_per_batch"]["difference"]["sign"], out["unsolved_per_batch"]["difference"]["sign"]
    out["reproduced"] = withheld("yes" if (fs, un) == ("above", "below") else
                                 "no" if fs == "below" or un == "above" else "tie", pre)
    return out


def weights_summary(frame: pd.DataFrame) -> dict:
    """How much the RWR weights of the learning simulator's kept batches differ (whether RWR is weighted, not plain likelihood)."""
    g = frame[frame.arm == "learning"]
    kept = g[g.weights_n > 0]
    return {"epochs_with_kept_batches": int(len(kept)), "epochs": int(len(g)),
            "epochs_with_distinct_weights": int((kept.weights_levels >= 2).sum()),
            "weight_min": float(kept.weights_min.min()) if len(kept) else None,
            "weight_max": float(kept.weights_max.max()) if len(kept) else None,
            "mean_within_epoch_std": float(kept.weights_std.mean()) if len(kept) else None,
            "pool_levels_last": int(g.groupby("seed").pool_weights_levels.last().max()) if len(g) else 0}


#: docs/preregistration.md, claim 9: the untrained agent's benchmark score leaves room to move either way.
UNTRAINED_RANGE = (0.1, 0.9)


def data_efficiency_summary(scores: pd.DataFrame, frame: pd.DataFrame | None = None,
                            min_seeds: int = MIN_UNITS) -> dict:
    """Claim 9: GenEnv's final benchmark score against static augmentation, the random simulator and untrained.

    Paired differences over seeds (same base solver, same benchmark rollout seeds). "yes": GenEnv
    above all three (intervals above 0); "no": below any; "tie" otherwise. Gated by claim 7's
    preconditions (read from the training ``frame``; without it they are not measured) and the
    untrained agent's score in [0.1, 0.9].
    """
    per = {arm: {int(r.seed): float(r.score) for r in g.itertuples()} for arm, g in scores.groupby("arm")}
    untrained = per.get("untrained", {}).values()
    pre = [*(preconditions(frame, min_seeds) if frame is not None else
             [precondition("claim 7's preconditions (training frame)", None, "=", 1)]),
           precondition("lowest untrained benchmark score", min(untrained, default=None), "in", UNTRAINED_RANGE),
           precondition("highest untrained benchmark score", max(untrained, default=None), "in", UNTRAINED_RANGE)]
    out: dict = {"score": {arm: {**interval(list(v.values()), name=arm).as_dict(), "per_seed": v}
                           for arm, v in per.items()}, "preconditions": [p.as_dict() for p in pre]}
    others = [a for a in ("static", "random", "untrained") if a in per]
    out["genenv_minus"] = {a: _paired(per["learning"], per[a], f"GenEnv − {a}") for a in others}
    # a pilot's sizing (docs/preregistration.md, claim 9): the seeds a design of this spread needs
    out["units_to_detect"] = {a: Interval.from_dict(d).units_to_detect(DETECTABLE)
                              for a, d in out["genenv_minus"].items()}
    signs = [d["sign"] for d in out["genenv_minus"].values()]
    out["reproduced"] = withheld("yes" if signs and all(s == "above" for s in signs) else
                                 "no" if "below" in signs else "tie", pre)
    return out
