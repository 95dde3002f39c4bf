"""The EE evolution studies: evolve lineages at each effort and direction, then measure them.

EE (papers.md, "experimental setup") monitors the difficulty of every evolved environment by
the **pass rate of strong reference models over 8 rollouts**, and reports how it falls across
generations for each effort (the effort ablation) and after one evolution step along each
pinned direction (Table 1). This module runs the same measurements at CPU scale and writes
them as rows; the notebooks ``ee_effort``, ``ee_table1_directions`` and ``ee_difficulty``
read the rows and draw.

How it departs from the paper, stated here once:

1. **The reference solver is not a frontier model.** Ours is the CPU learner
   (:class:`evokit.learners.SkillPolicy`) warmed up by a short GRPO run on one-step tasks of
   the catalog's (scenario, skill) pairs, drawn as often as p_T says they occur
   (:func:`reference_solver`). It starts at p_T and learns most where it already succeeds
   sometimes, so after warm-up it knows common techniques well and rare ones less, which is the
   property a reference model needs here. It is a weak solver: it reads only a bag of words of
   each step's sentence, and after 40 warm-up updates it still confuses some common pairs. It is
   trained once and saved (``reference_solver.pt``); the EE notebooks share one.
2. **Turns.** The learner runs one command per step (it never reads outputs), so its turns
   equal the plan's length: ΔTurns measures only the length an edit adds, not the extra
   exploration a rarer situation costs an LLM agent (EE's +13.5 turns for scenario edits).
3. **Seeds.** EE keeps seeds a frontier model passes at most 4/8; we keep seeds our reference
   passes at least 1/8 (:func:`measurable_seeds`), since a lineage that starts at 0 cannot fall.
4. **Sizes.** A few seeds and up to 15 generations instead of 500 seeds; the rollouts per
   environment are EE's 8.
5. **Pinned lineages end early.** The procedural proposer only accepts an edit that makes its
   own part of D_T larger; on short plans the catalog soon has no rarer situation or technique
   left, so a lineage pinned to ``scenario`` or ``skill`` ends after a few generations (the
   harness records an "end"). Averages "over all generations" are over the edits that exist.

Rows (``envs.jsonl``, one per environment of every store): the run setting (effort, pinned
direction or "all"), lineage, generation, the edit's direction, D_T and its three parts, the
mutation of the edit, the reference solver's pass rate and mean turns over 8 rollouts.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from evokit.catalog import pairs
from evokit.difficulty import catalog_reference
from evokit.evolve import DIRECTIONS, EvolveConfig, evolve
from evokit.evolve.edits import TERM
from evokit.learners import PolicyConfig, SkillPolicy, collect_groups, grpo_update
from evokit.plan import Plan, PlanError, Step, render
from evokit.seeds import make_seeds
from evokit.verify import verify_task

ROLLOUTS = 8  # EE: pass rate over 8 rollouts (B = 8)
WARMUP_STEPS = 40  # GRPO updates of the reference solver's warm-up (ours; EE uses frontier models)
WARMUP_TASKS = 8  # one-step tasks per warm-up update
WARMUP_LR = 0.05  # Adam step size of the warm-up (evokit.train's default for the CPU learner)
PARTS = ("length_term", "scenario_term", "skill_term")
MUTATIONS = ("instruction", "environment", "verification", "total")


class StudyError(RuntimeError):
    """A results folder that holds another study (other sizes or settings); the message says which."""


# ----------------------------------------------------------------------------- rows on disk
def read_rows(path: str | Path) -> list[dict]:
    """Rows of a JSONL file (a torn last line from a killed writer is ignored)."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


def _append(path: Path, rows: Sequence[dict]) -> None:
    with open(path, "a") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _check_study(out: Path, params: dict) -> None:
    """First run: record ``params``; later runs: refuse other ones (rows would mix two studies)."""
    path = out / "study.json"
    params = json.loads(json.dumps(params))  # tuples → lists, as they come back from disk
    if path.exists():
        old = json.loads(path.read_text())
        if old != params:
            diff = sorted(k for k in set(old) | set(params) if old.get(k) != params.get(k))
            raise StudyError(f"{out} holds a study with other parameters ({', '.join(diff)}: "
                             f"{ {k: old.get(k) for k in diff} } there, { {k: params.get(k) for k in diff} } now); "
                             "pass another results_dir (e.g. results/full/<name>) or delete that folder")
    else:
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(params, indent=2, sort_keys=True))


# --------------------------------------------------------------------------- measuring
def _groups(policy: SkillPolicy, tasks: Sequence[Path], seeds: Sequence[int], *, group_size: int,
            workers: int) -> list[list]:
    """One group of ``group_size`` rollouts per task, ``workers`` tasks at once (each rollout in its sandbox)."""
    def one(job):
        task, s = job
        return collect_groups(policy, [task], group_size=group_size, workers=group_size, seed=s)[0]

    with ThreadPoolExecutor(max(1, workers)) as pool:
        return list(pool.map(one, zip(tasks, seeds, strict=True)))


def _summary(group) -> dict:
    """Pass rate as :func:`evokit.learners.evaluate_per_task` computes it, plus the mean turns."""
    usable = [r for r in group if not r.masked and r.reward is not None]
    if not usable:
        raise RuntimeError(f"{group[0].task}: every rollout was masked: {group[0].error}")
    return {"pass_rate": float(np.mean([r.reward for r in usable])),
            "turns": float(np.mean([r.n_turns for r in usable])),
            "rollouts": len(usable), "masked": len(group) - len(usable)}


def env_seed(content_hash: str, seed: int) -> int:
    """Rollout seed of one environment: its content (same task, same measurement in every store) and the study seed."""
    return (seed * 1_000_003 + int(content_hash[:12], 16)) % 2**31


# ----------------------------------------------------------------------- reference solver
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
    skills well and rare ones less. The weights go to
    ``results_dir/reference_solver.pt`` (its settings and per-update metrics beside it) and are
    reloaded when the settings match.
    """
    out = Path(results_dir)
    out.mkdir(parents=True, exist_ok=True)
    path, meta_path, log = out / "reference_solver.pt", out / "reference_solver.json", out / "reference_solver.jsonl"
    params = {"seed": seed, "warmup_steps": warmup_steps, "tasks_per_step": tasks_per_step,
              "group_size": group_size, "lr": lr}
    if cache and path.exists() and meta_path.exists() and json.loads(meta_path.read_text()).get("params") == params:
        return SkillPolicy.load(path)
    tasks = pair_tasks(out / "reference_tasks", seed)
    weights = [pair_prior(t.name.split("__")[0], t.name.split("__")[1]) for t in tasks]
    torch.manual_seed(seed)
    policy = SkillPolicy(PolicyConfig(seed=seed))
    opt = torch.optim.Adam(policy.parameters(), lr=lr)
    log.unlink(missing_ok=True)
    for step in tqdm(range(warmup_steps), desc="reference solver warm-up", disable=not progress):
        rng = random.Random(f"evokit-reference:{seed}:{step}")
        batch = rng.choices(tasks, weights, k=tasks_per_step)
        groups = _groups(policy, batch, [seed * 100_003 + step * 101 + i for i in range(len(batch))],
                         group_size=group_size, workers=workers)
        metrics = grpo_update(policy, opt, groups)
        _append(log, [{"step": step, **metrics}])
    policy.save(path)
    meta_path.write_text(json.dumps({"params": params, "tasks": len(tasks)}, indent=2))
    return policy


# -------------------------------------------------------------------------- the study
def store_name(effort: str, direction: str | None) -> str:
    return f"{effort}-{direction or 'all'}"


def measure(solver: SkillPolicy, tasks: dict[str, Path], cache: str | Path, *, seed: int, rollouts: int = ROLLOUTS,
            workers: int = 2, progress: bool = True, desc: str = "pass rates") -> dict[str, dict]:
    """Pass rate and mean turns of ``solver`` over ``rollouts`` rollouts for each task (content hash → folder).

    Results are appended to ``cache`` (JSONL keyed by content hash) as each task finishes, and tasks already
    there are not run again. Returns the whole cache.
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
            _append(cache, [row])
            known[row["content_hash"]] = row
            bar.update()
    return known


def measurable_seeds(results_dir: str | Path, solver: SkillPolicy, *, n_seeds: int, pool: int, seed: int,
                     min_pass: float, rollouts: int = ROLLOUTS, workers: int = 2, progress: bool = True) -> list[Path]:
    """The first ``n_seeds`` verified seeds that the reference solver passes at least ``min_pass`` of the
    time, drawn from at most ``pool``·``n_seeds`` seeds (fewer are returned if the pool holds fewer).

    EE keeps seeds a frontier model passes at most 4/8 (hard ones). Our reference solver fails many of our
    seeds outright, and a lineage whose seed is at pass rate 0 can show no decline, so we keep the seeds it
    passes at least once in 8 (``min_pass`` = 1/8): the lineages start where a fall is measurable. Seeds are
    made and measured ``n_seeds`` at a time (seed i is the same whatever the pool size), so the pool grows
    only as far as needed.
    """
    out = Path(results_dir)
    keep: list[Path] = []
    for k in range(1, pool + 1):
        rows = make_seeds(k * n_seeds, seed, out / "seeds", workers=workers, progress=progress)
        measured = measure(solver, {r["content_hash"]: out / "seeds" / r["name"] for r in rows},
                           out / "measured.jsonl", seed=seed, rollouts=rollouts, workers=workers, progress=progress,
                           desc="seed pass rates")
        keep = [out / "seeds" / r["name"] for r in rows if measured[r["content_hash"]]["pass_rate"] >= min_pass]
        if len(keep) >= n_seeds:
            break
    if not keep:
        raise StudyError(f"none of the {pool * n_seeds} seeds in {out / 'seeds'} has a reference pass rate ≥ "
                         f"{min_pass}; raise the seed pool or the reference solver's warm-up steps")
    return keep[:n_seeds]


def evolution_study(results_dir: str | Path, *, n_seeds: int, generations: int,
                    efforts: Sequence[str] = ("low", "high", "max"), directions: Sequence[str | None] = (None,),
                    seed: int = 0, workers: int = 2, rollouts: int = ROLLOUTS, warmup_steps: int = WARMUP_STEPS,
                    seed_pool: int = 4, min_seed_pass: float = 1 / 8, solver_dir: str | Path | None = None,
                    progress: bool = True) -> Path:
    """Reference solver → measurable seeds → one evolution run per (effort, direction) → every environment
    measured; returns the path of ``envs.jsonl``.

    Layout of ``results_dir``: ``seeds/`` (the seed pool, :func:`measurable_seeds`), ``stores/<effort>-<direction
    or all>/`` (one :class:`~evokit.lineage.LineageStore` each), ``measured.jsonl`` (pass rate and turns per
    distinct environment, by content hash), ``envs.jsonl`` (one row per environment of every store, see
    :func:`env_row`). ``directions`` holds pinned directions or None / "all" (shuffle all three). The reference
    solver is trained into ``solver_dir/seed<seed>-warmup<steps>/`` (default: ``results_dir``); the EE
    notebooks share one, as EE measures every environment with the same reference models.

    Every stage resumes: seeds and stores continue where they stopped and nothing measured is measured
    again. Each distinct environment is measured once, with a rollout seed keyed by its content, so a seed
    task that is generation 0 of every store has one pass rate.
    """
    out = Path(results_dir)
    directions = [None if d in (None, "", "all") else d for d in directions]
    _check_study(out, {"n_seeds": n_seeds, "generations": generations, "efforts": list(efforts),
                       "directions": [d or "all" for d in directions], "seed": seed, "rollouts": rollouts,
                       "warmup_steps": warmup_steps, "seed_pool": seed_pool, "min_seed_pass": min_seed_pass})
    clock = _Clock(out / "timings.json")
    solver_dir = Path(solver_dir) / f"seed{seed}-warmup{warmup_steps}" if solver_dir else out
    with clock("reference_solver"):
        solver = reference_solver(solver_dir, seed=seed, warmup_steps=warmup_steps, group_size=rollouts,
                                  workers=workers, progress=progress)
    with clock("seeds"):
        seed_dirs = measurable_seeds(out, solver, n_seeds=n_seeds, pool=seed_pool, seed=seed,
                                     min_pass=min_seed_pass, rollouts=rollouts, workers=workers, progress=progress)
    stores = []
    for effort in efforts:
        for d in directions:
            name = store_name(effort, d)
            with clock(f"evolve {name}"):
                stores.append((name, effort, d, evolve(seed_dirs, out / "stores" / name, EvolveConfig(
                    generations=generations, effort=effort, direction=d, seed=seed), workers=workers,
                    progress=progress)))
    envs = [(name, effort, d, store, e) for name, effort, d, store in stores for e in store.envs()]
    with clock("pass rates"):
        measured = measure(solver, {e.content_hash: store.path(e) for *_, store, e in envs}, out / "measured.jsonl",
                           seed=seed, rollouts=rollouts, workers=workers, progress=progress,
                           desc="pass rates (reference solver)")
    envs_path = out / "envs.jsonl"
    done = {(r["setting"], r["lineage"], r["generation"], r["k"]) for r in read_rows(envs_path)}
    _append(envs_path, [env_row(name, effort, d, e, measured[e.content_hash]) for name, effort, d, _, e in envs
                        if (name, e.lineage, e.generation, e.k) not in done])
    return envs_path


class _Clock:
    """Wall time per phase of the latest call, written to ``path`` (cached phases show as near 0)."""

    def __init__(self, path: Path):
        self.path, self.times = path, {}

    @contextlib.contextmanager
    def __call__(self, phase: str):
        t0 = time.monotonic()
        yield
        self.times[phase] = round(time.monotonic() - t0, 1)
        self.path.write_text(json.dumps(self.times, indent=2) + "\n")


def env_row(setting: str, effort: str, direction_setting: str | None, e, measured: dict) -> dict:
    """One row of ``envs.jsonl`` (flat, so that a DataFrame of rows needs no unpacking)."""
    diff, mut = e.data.get("difficulty", {}), e.data.get("mutation") or {}
    return {"setting": setting, "effort": effort, "direction_setting": direction_setting or "all",
            "lineage": e.lineage, "generation": e.generation, "k": e.k, "task": e.task,
            "content_hash": e.content_hash, "parent": e.parent, "direction": e.direction,
            "d_t": diff.get("total"), "length": diff.get("length"), **{p: diff.get(p) for p in PARTS},
            **{f"mutation_{m}": mut.get(m) for m in MUTATIONS},
            **{k: v for k, v in measured.items() if k != "content_hash"}}


# ---------------------------------------------------------------------------- quickstart
def quickstart(results_dir: str | Path, *, n_seeds: int, generations: int, effort: str = "high",
               direction: str | None = None, seed: int = 0, workers: int = 2, progress: bool = True) -> Path:
    """Seeds → evolve → re-verify each lineage's last environment → ``quickstart.jsonl`` (one row per env).

    The harness verified every environment as it accepted it; the re-verification here runs the three
    verifiers (oracle, null solution, rubric) again on the final generation, independently of the run.
    """
    out = Path(results_dir)
    _check_study(out, {"n_seeds": n_seeds, "generations": generations, "effort": effort,
                       "direction": direction or "all", "seed": seed})
    seed_rows = make_seeds(n_seeds, seed, out / "seeds", workers=workers, progress=progress)
    store = evolve([out / "seeds" / r["name"] for r in seed_rows], out / "store",
                   EvolveConfig(generations=generations, effort=effort, direction=direction, seed=seed),
                   workers=workers, progress=progress)
    path = out / "quickstart.jsonl"
    done = {(r["lineage"], r["generation"]) for r in read_rows(path)}
    envs = store.envs()
    last = {e.lineage: e for e in envs}  # envs are in order: the last one seen is the newest
    todo = [e for e in envs if (e.lineage, e.generation) not in done]
    for e in tqdm(todo, desc="rows (re-verifying each lineage's last environment)", disable=not progress):
        reverified = verify_task(store.path(e)).passed if last[e.lineage] is e else None
        diff, mut = e.data.get("difficulty", {}), e.data.get("mutation") or {}
        _append(path, [{"lineage": e.lineage, "generation": e.generation, "direction": e.direction,
                        "task": e.task, "steps": len(e.data.get("plan", [])), "d_t": diff.get("total"),
                        **{p: diff.get(p) for p in PARTS}, "mutation_total": mut.get("total"),
                        "verified": (e.data.get("verdict") or {}).get("passed", True), "reverified": reverified}])
    return path


# ------------------------------------------------------------------------------- analysis
def edit_rows(rows: Sequence[dict]) -> list[dict]:
    """One row per accepted edit (generation g ≥ 1): the change from its parent in pass rate (points),
    turns, D_T and each part, with the edit's mutation."""
    by_hash = {(r["setting"], r["lineage"], r["content_hash"]): r for r in rows}
    out = []
    for r in rows:
        parent = by_hash.get((r["setting"], r["lineage"], r["parent"])) if r.get("parent") else None
        if parent is None:
            continue
        out.append({**{k: r[k] for k in ("setting", "effort", "direction_setting", "direction", "lineage",
                                         "generation")},
                    "d_pass_pts": 100 * (r["pass_rate"] - parent["pass_rate"]), "d_turns": r["turns"] - parent["turns"],
                    "d_d_t": r["d_t"] - parent["d_t"], **{f"d_{p}": r[p] - parent[p] for p in PARTS},
                    **{f"mutation_{m}": r[f"mutation_{m}"] for m in MUTATIONS}})
    return sorted(out, key=lambda x: (x["setting"], x["lineage"], x["generation"]))


def _mean(xs) -> float:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return float(np.mean(xs)) if xs else float("nan")


def table1(rows: Sequence[dict], *, effort: str = "high", directions: Sequence[str] = DIRECTIONS) -> list[dict]:
    """EE Table 1 from our rows: per pinned direction, after one step (generation 1) and averaged over all
    generations: ΔPass (points), ΔTurns, and the mutation columns (percent). ``paper_key`` names the matching
    row of :data:`evokit.reference.EE_TABLE1` (whose "mean of 15" is over EE's 15 generations)."""
    edits = [e for e in edit_rows(rows) if e["effort"] == effort and e["direction_setting"] in directions]
    out = []
    for d in directions:
        mine = [e for e in edits if e["direction_setting"] == d]
        last = max((e["generation"] for e in mine), default=0)
        for label, sel, paper in ((f"{d}, 1 step", [e for e in mine if e["generation"] == 1], f"{d}, 1 step"),
                                  (f"{d}, mean of {last}", mine, f"{d}, mean of 15")):
            out.append({"direction": d, "row": label, "paper_key": paper, "n_edits": len(sel),
                        "d_pass_pts": _mean(e["d_pass_pts"] for e in sel), "d_turns": _mean(e["d_turns"] for e in sel),
                        **{m: 100 * _mean(e[f"mutation_{m}"] for e in sel) for m in MUTATIONS},
                        f"d_{TERM[d]}": _mean(e[f"d_{TERM[d]}"] for e in sel)})
    return out


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given their average rank (as Spearman's ρ needs)."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(1, len(x) + 1)
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return (sums / counts)[inverse]


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (scipy's when installed, else the same formula in numpy).

    >>> round(spearman([1, 2, 3, 4], [10, 9, 7, 1]), 6)
    -1.0
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    try:
        from scipy.stats import spearmanr
    except ImportError:
        return float(np.corrcoef(_ranks(x), _ranks(y))[0, 1])
    return float(spearmanr(x, y).statistic)


def calibration(rows: Sequence[dict]) -> dict:
    """Does D_T predict the measured pass rate? Spearman ρ over distinct environments (by content hash),
    for D_T and for each of its parts, with the number of environments; and ``rho_within_length``: ρ of
    D_T with the pass rate among environments of the same length L (mean over lengths with at least 4
    environments, weighted by their number; NaN if none), i.e. what D_T predicts beyond length."""
    uniq = list({r["content_hash"]: r for r in rows}.values())
    p = [r["pass_rate"] for r in uniq]
    by_length: dict[int, list[dict]] = defaultdict(list)
    for r in uniq:
        by_length[r["length"]].append(r)
    strata = [(len(rs), spearman([r["d_t"] for r in rs], [r["pass_rate"] for r in rs]))
              for rs in by_length.values() if len(rs) >= 4]
    strata = [(n, rho) for n, rho in strata if not math.isnan(rho)]
    within = sum(n * rho for n, rho in strata) / sum(n for n, _ in strata) if strata else float("nan")
    return {"n_envs": len(uniq), "rho_d_t": spearman([r["d_t"] for r in uniq], p),
            **{f"rho_{part}": spearman([r[part] for r in uniq], p) for part in PARTS},
            "rho_within_length": within, "n_envs_within_length": sum(n for n, _ in strata)}


def curves(rows: Sequence[dict], by: Sequence[str] = ("setting",),
           values: Sequence[str] = ("pass_rate", "turns", "d_t", *PARTS)) -> list[dict]:
    """Mean and standard error of ``values`` per (``by``…, generation): the lines of the figures."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        groups[(*(r[b] for b in by), r["generation"])].append(r)
    out = []
    for key, rs in sorted(groups.items()):
        row = {**dict(zip(by, key[:-1], strict=True)), "generation": key[-1], "n": len(rs)}
        for v in values:
            xs = np.array([r[v] for r in rs], dtype=float)
            row[v] = float(xs.mean())
            row[f"{v}_sem"] = float(xs.std(ddof=1) / math.sqrt(len(xs))) if len(xs) > 1 else 0.0
        out.append(row)
    return out


# ------------------------------------------------------------------------ notebook summaries
def _last_envs(rows: Sequence[dict]) -> list[dict]:
    """The newest environment of each (setting, lineage): where a lineage stands at the end of the run."""
    last: dict[tuple, dict] = {}
    for r in rows:
        key = (r["setting"], r["lineage"])
        if key not in last or r["generation"] > last[key]["generation"]:
            last[key] = r
    return list(last.values())


def effort_summary(rows: Sequence[dict]) -> dict:
    """Per effort: pass rate of the seeds, at the last generation and averaged over the evolved generations,
    the first generation at which the mean pass rate is 0, turns and D_T at the end, and the mean mutation."""
    efforts = [e for e in ("low", "high", "max") if any(r["effort"] == e for r in rows)]
    curve = {(c["effort"], c["generation"]): c for c in curves(rows, by=("effort",), values=("pass_rate",))}
    edits = edit_rows(rows)
    out: dict = {"generations": max(r["generation"] for r in rows), "efforts": efforts}
    for key, fn in (("n_lineages", lambda rs: len(rs)),
                    ("seed_pass_rate", lambda rs: _mean(r["pass_rate"] for r in rs)),
                    ("final_pass_rate", lambda rs: _mean(r["pass_rate"] for r in rs)),
                    ("final_turns", lambda rs: _mean(r["turns"] for r in rs)),
                    ("final_d_t", lambda rs: _mean(r["d_t"] for r in rs))):
        src = [r for r in rows if r["generation"] == 0] if key == "seed_pass_rate" else _last_envs(rows)
        out[key] = {e: fn([r for r in src if r["effort"] == e]) for e in efforts}
    out["mean_pass_rate_evolved"] = {e: _mean(r["pass_rate"] for r in rows if r["effort"] == e and r["generation"] > 0)
                                     for e in efforts}
    out["first_zero_generation"] = {
        e: next((g for (ee, g), c in sorted(curve.items()) if ee == e and c["pass_rate"] == 0), None) for e in efforts}
    out["mean_mutation_total"] = {e: _mean(x["mutation_total"] for x in edits if x["effort"] == e) for e in efforts}
    return out


def direction_summary(rows: Sequence[dict], directions: Sequence[str] = DIRECTIONS) -> dict:
    """Per pinned direction: the mean change per edit of D_T, of each of its parts and of the pass rate, and
    the direction's own part of D_T at the seeds and at the end (does each direction raise its own term and
    lower the pass rate?)."""
    edits = edit_rows(rows)
    last = _last_envs(rows)
    out = {}
    for d in directions:
        mine = [x for x in edits if x["direction_setting"] == d]
        if not mine:
            continue
        term = TERM[d]
        out[d] = {"own_term": term, "n_edits": len(mine),
                  "d_pass_pts_mean": _mean(x["d_pass_pts"] for x in mine),
                  "d_turns_mean": _mean(x["d_turns"] for x in mine),
                  "d_d_t_mean": _mean(x["d_d_t"] for x in mine),
                  **{f"d_{p}_mean": _mean(x[f"d_{p}"] for x in mine) for p in PARTS},
                  "own_term_seed": _mean(r[term] for r in rows if r["direction_setting"] == d and r["generation"] == 0),
                  "own_term_final": _mean(r[term] for r in last if r["direction_setting"] == d),
                  "pass_rate_seed": _mean(r["pass_rate"] for r in rows
                                          if r["direction_setting"] == d and r["generation"] == 0),
                  "pass_rate_final": _mean(r["pass_rate"] for r in last if r["direction_setting"] == d)}
    return out
