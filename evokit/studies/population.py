"""EE's difficulty measurement with a solver population built from data: pass rate and turns over 8 rollouts.

EE (papers.md, "experimental setup") measures every evolved environment by the **pass rate of
strong reference models over 8 rollouts**. Here the reference models are the solver population of
:mod:`evokit.cpu_agent.solvers` (A, B, C: supervised pretraining on seeded corpora of different data
mixtures; none of them reads p_T, the distribution D_T is defined by), and each rollout may read
its command's exit status and printed result and retry another technique (``attempts``), so the
turns a trajectory takes depend on how hard its steps are for the solver: turns are measured,
not the plan's length by construction.

Departures, stated once: the reference models are CPU learners that choose a technique per step
from a bag of words of its sentence, not frontier models; the turn budget is the plan's steps ×
``attempts``. Seeds are admitted by the same population on a rollout stream of their own
(:mod:`evokit.studies.evolution`), so that a seed admitted by a lucky draw is measured afresh.

Each solver is built once per folder and saved (its corpus is rendered, which takes seconds);
each (solver, distinct environment) is measured once: the rollout seed is keyed by the
environment's content (:func:`env_seed`), so the same task gets
the same pass rate in every store and every notebook, and measurements are cached as rows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm  # a widget in Jupyter, text in a terminal

from evokit.cpu_agent.policy import collect_groups
from evokit.cpu_agent.solvers import SOLVERS, Solver, SolverConfig, build_solver
from evokit.grpo import SUCCESS, usable
from evokit.rows import append_rows, read_rows

ROLLOUTS = 8  # EE: pass rate over 8 rollouts (B = 8)
ATTEMPTS = 3  # techniques a solver may try per step before it moves on (ours; fixed before the first run)


def env_seed(content_hash: str, seed: int) -> int:
    """Rollout seed of one environment: its content (same task, same measurement in every store) and the study seed."""
    return (seed * 1_000_003 + int(content_hash[:12], 16)) % 2**31


def solver_by_name(name: str) -> SolverConfig:
    if name not in SOLVERS:
        raise ValueError(f"unknown solver {name!r}; the population is {', '.join(SOLVERS)}")
    return SOLVERS[name]


def _tag(config: SolverConfig) -> str:
    return f"{config.name}-{hashlib.sha1(repr(config).encode()).hexdigest()[:10]}"


def load_solvers(solver_dir: str | Path, names: Sequence[str]) -> dict[str, Solver]:
    """The named solvers, pretrained once into ``solver_dir/solvers/<name>-<config hash>.pt`` and reloaded."""
    out = Path(solver_dir) / "solvers"
    out.mkdir(parents=True, exist_ok=True)
    solvers = {}
    for name in names:
        config = solver_by_name(name)
        path = out / f"{_tag(config)}.pt"
        if path.exists():
            solvers[name] = torch.load(path, weights_only=False)  # our own cache file, written below
        else:
            solvers[name] = build_solver(config)
            tmp = path.with_suffix(".tmp")
            torch.save(solvers[name], tmp)
            tmp.replace(path)
    return solvers


def cache_path(solver_dir: str | Path, solver: Solver, *, rollouts: int, attempts: int, seed: int = 0) -> Path:
    """Where the measurements of ``solver`` are kept: rollouts, attempts and the rollout seed base
    change the measurement (seed 0, the studies' measurement stream, keeps the name it always had)."""
    stream = f"-seed{seed}" if seed else ""
    return Path(solver_dir) / "pass_rates" / f"{_tag(solver.config)}-rollouts{rollouts}-attempts{attempts}{stream}.jsonl"


def _summary(group) -> dict:
    kept = [r for r in group if usable(r)]
    if not kept:
        raise RuntimeError(f"{group[0].task}: every rollout was masked: {group[0].error}")
    wins = [r.n_turns for r in kept if r.reward >= SUCCESS]
    return {"pass_rate": float(np.mean([r.reward for r in kept])), "turns": float(np.mean([r.n_turns for r in kept])),
            "rollouts": len(kept), "success_turns": float(np.mean(wins)) if wins else None}


def measure(solvers: dict[str, Solver], tasks: dict[str, Path], solver_dir: str | Path, *, rollouts: int = ROLLOUTS,
            attempts: int = ATTEMPTS, seed: int = 0, workers: int = 2, progress: bool = True,
            desc: str = "pass rates") -> dict[str, dict[str, dict]]:
    """{content hash: {solver: {pass_rate, turns, rollouts, success_turns}}} for each task (content hash → folder).

    Each (solver, task) not yet in the solver's cache (:func:`cache_path`) runs ``rollouts``
    rollouts with up to ``attempts`` techniques per step; rows are appended as they finish.
    ``seed`` is the rollout stream: two streams of the same task are independent measurements
    (the seed admission of :mod:`evokit.studies.evolution` reads one, the claims another).
    """
    paths = {n: cache_path(solver_dir, s, rollouts=rollouts, attempts=attempts, seed=seed) for n, s in solvers.items()}
    known = {n: {r["content_hash"]: r for r in read_rows(paths[n])} for n in solvers}
    todo = [(n, h, p) for n in solvers for h, p in tasks.items() if h not in known[n]]
    (Path(solver_dir) / "pass_rates").mkdir(parents=True, exist_ok=True)

    def one(n: str, h: str, path: Path) -> dict:
        s = solvers[n]
        group = collect_groups(s.policy, [path], group_size=rollouts, workers=rollouts, seed=env_seed(h, seed),
                               attempts=attempts, judge=s.judge)[0]
        return {"content_hash": h, **_summary(group)}

    with ThreadPoolExecutor(max(1, workers)) as pool, \
            tqdm(total=len(todo), desc=desc, unit="run", disable=not progress or not todo) as bar:
        futures = {pool.submit(one, n, h, p): n for n, h, p in todo}
        for fut in as_completed(futures):
            n, row = futures[fut], fut.result()
            append_rows(paths[n], [row])
            known[n][row["content_hash"]] = row
            bar.update()
    return {h: {n: {k: v for k, v in known[n][h].items() if k != "content_hash"} for n in solvers} for h in tasks}


def flat(measured: dict[str, dict]) -> dict:
    """One environment's measurement as flat columns: ``pass_rate``/``turns`` (mean over the population)
    and ``pass_rate_<solver>``/``turns_<solver>``."""
    out = {"pass_rate": float(np.mean([m["pass_rate"] for m in measured.values()])),
           "turns": float(np.mean([m["turns"] for m in measured.values()]))}
    for n, m in measured.items():
        out[f"pass_rate_{n}"], out[f"turns_{n}"] = m["pass_rate"], m["turns"]
    return out
