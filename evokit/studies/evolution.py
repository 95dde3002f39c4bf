"""The EE evolution studies: evolve lineages at each effort and direction, then measure them.

EE (papers.md, "experimental setup") monitors the difficulty of every evolved environment by
the **pass rate of strong reference models over 8 rollouts**, and reports how it falls across
generations for each effort (the effort ablation) and after one evolution step along each
pinned direction (Table 1). :func:`evolution_study` runs the same measurements at CPU scale and
writes them as rows; the notebooks ``ee_effort``, ``ee_table1_directions`` and ``ee_difficulty``
read the rows (:mod:`evokit.studies.evolution_analysis`) and draw. :func:`quickstart` is the
pipeline of ``00_quickstart``: seeds → evolution → re-verification → one row per environment.

How it departs from the paper, stated here once (the reference solver's own departures are in
:mod:`evokit.studies.reference_solver`: a CPU learner, not a frontier model; one turn per step;
seeds it passes at least 1/8):

1. **Sizes.** A few seeds and a few generations at smoke size instead of 500 seeds × 15
   generations; the rollouts per environment are EE's 8.
2. **Pinned lineages end early.** The procedural proposer only accepts an edit that makes its
   own part of D_T larger; on short plans the catalog soon has no rarer situation or technique
   left, so a lineage pinned to ``scenario`` or ``skill`` ends after a few generations (the
   harness records an "end"). Averages "over all generations" are over the edits that exist.

Rows (``envs.jsonl``, one per environment of every store): the run setting (effort, pinned
direction or "all"), lineage, generation, the edit's direction, D_T and its three parts, the
mutation of the edit, the reference solver's pass rate and mean turns over 8 rollouts.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tqdm.auto import tqdm  # a widget in Jupyter, text in a terminal

from evokit.evolve import EvolveConfig, evolve
from evokit.rows import append_rows, read_rows
from evokit.seeds import make_seeds
from evokit.studies.evolution_analysis import MUTATIONS, PARTS
from evokit.studies.folder import PhaseClock, StudyError, check_study
from evokit.studies.reference_solver import (
    ROLLOUTS,
    WARMUP_STEPS,
    measurable_seeds,
    measure,
    pair_tasks,
    pass_rate_cache,
    reference_solver,
)
from evokit.verify import verify_task

__all__ = ["StudyError", "env_row", "evolution_study", "pair_tasks", "quickstart", "read_rows", "store_name"]


def store_name(effort: str, direction: str | None) -> str:
    return f"{effort}-{direction or 'all'}"


def evolution_study(results_dir: str | Path, *, n_seeds: int, generations: int,
                    efforts: Sequence[str] = ("low", "high", "max"), directions: Sequence[str | None] = (None,),
                    seed: int = 0, workers: int = 2, rollouts: int = ROLLOUTS, warmup_steps: int = WARMUP_STEPS,
                    seed_pool: int = 4, min_seed_pass: float = 1 / 8, solver_dir: str | Path | None = None,
                    progress: bool = True) -> Path:
    """Reference solver → measurable seeds → one evolution run per (effort, direction) → every environment
    measured; returns the path of ``envs.jsonl``.

    Layout of ``results_dir``: ``seeds/`` (the seed pool, :func:`~evokit.studies.reference_solver.measurable_seeds`),
    ``stores/<effort>-<direction or all>/`` (one :class:`~evokit.lineage.LineageStore` each), ``envs.jsonl``
    (one row per environment of every store, see :func:`env_row`), ``timings.json`` (wall time per phase).
    ``directions`` holds pinned directions or None / "all" (shuffle all three). The reference solver is
    trained into ``solver_dir/seed<seed>-warmup<steps>/`` (default: ``results_dir``), and its pass rates
    (per distinct environment, by content hash) are kept beside it
    (:func:`~evokit.studies.reference_solver.pass_rate_cache`): the EE notebooks share one solver, as EE
    measures every environment with the same reference models, and an environment that two notebooks both
    evolve (the same seed, effort, direction and generation give the same content) is measured once.

    Every stage resumes: seeds and stores continue where they stopped and nothing measured is measured
    again. Each distinct environment is measured once, with a rollout seed keyed by its content, so a seed
    task that is generation 0 of every store has one pass rate.
    """
    out = Path(results_dir)
    directions = [None if d in (None, "", "all") else d for d in directions]
    check_study(out, {"n_seeds": n_seeds, "generations": generations, "efforts": list(efforts),
                      "directions": [d or "all" for d in directions], "seed": seed, "rollouts": rollouts,
                      "warmup_steps": warmup_steps, "seed_pool": seed_pool, "min_seed_pass": min_seed_pass})
    clock = PhaseClock(out / "timings.json")
    solver_dir = Path(solver_dir) / f"seed{seed}-warmup{warmup_steps}" if solver_dir else out
    with clock("reference_solver"):
        solver = reference_solver(solver_dir, seed=seed, warmup_steps=warmup_steps, group_size=rollouts,
                                  workers=workers, progress=progress)
    cache = pass_rate_cache(solver_dir, seed=seed, rollouts=rollouts)
    with clock("seeds"):
        seed_dirs = measurable_seeds(out, solver, n_seeds=n_seeds, pool=seed_pool, seed=seed, min_pass=min_seed_pass,
                                     cache=cache, rollouts=rollouts, workers=workers, progress=progress)
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
        measured = measure(solver, {e.content_hash: store.path(e) for *_, store, e in envs}, cache, seed=seed,
                           rollouts=rollouts, workers=workers, progress=progress, desc="pass rates (reference solver)")
    envs_path = out / "envs.jsonl"
    done = {(r["setting"], r["lineage"], r["generation"], r["k"]) for r in read_rows(envs_path)}
    append_rows(envs_path, [env_row(name, effort, d, e, measured[e.content_hash]) for name, effort, d, _, e in envs
                            if (name, e.lineage, e.generation, e.k) not in done])
    return envs_path


def env_row(setting: str, effort: str, direction_setting: str | None, e, measured: dict) -> dict:
    """One row of ``envs.jsonl`` (flat, so that a DataFrame of rows needs no unpacking)."""
    diff, mut = e.data.get("difficulty", {}), e.data.get("mutation") or {}
    return {"setting": setting, "effort": effort, "direction_setting": direction_setting or "all",
            "lineage": e.lineage, "generation": e.generation, "k": e.k, "task": e.task,
            "content_hash": e.content_hash, "parent": e.parent, "direction": e.direction,
            "d_t": diff.get("total"), "length": diff.get("length"), **{p: diff.get(p) for p in PARTS},
            **{f"mutation_{m}": mut.get(m) for m in MUTATIONS},
            **{k: v for k, v in measured.items() if k != "content_hash"}}


def quickstart(results_dir: str | Path, *, n_seeds: int, generations: int, effort: str = "high",
               direction: str | None = None, seed: int = 0, workers: int = 2, progress: bool = True) -> Path:
    """Seeds → evolve → re-verify each lineage's last environment → ``quickstart.jsonl`` (one row per env).

    The harness verified every environment as it accepted it; the re-verification here runs the three
    verifiers (oracle, null solution, rubric) again on the final generation, independently of the run.
    """
    out = Path(results_dir)
    check_study(out, {"n_seeds": n_seeds, "generations": generations, "effort": effort,
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
        append_rows(path, [{"lineage": e.lineage, "generation": e.generation, "direction": e.direction,
                            "task": e.task, "steps": len(e.data.get("plan", [])), "d_t": diff.get("total"),
                            **{p: diff.get(p) for p in PARTS}, "mutation_total": mut.get("total"),
                            "verified": (e.data.get("verdict") or {}).get("passed", True), "reverified": reverified}])
    return path
