"""The EE evolution studies: evolve lineages at each effort and direction, then measure them.

EE (papers.md, "experimental setup") monitors the difficulty of every evolved environment by
the **pass rate of strong reference models over 8 rollouts**, and reports how it falls across
generations for each effort (the effort ablation) and after one evolution step along each
pinned direction (Table 1). :func:`evolution_study` runs the same measurements at CPU scale and
writes them as rows; the notebooks ``ee_effort``, ``ee_table1_directions`` and ``ee_difficulty``
read the rows (:mod:`evokit.studies.evolution_analysis`) and draw. :func:`quickstart` is the
pipeline of ``00_quickstart``: seeds → evolution → re-verification → measurement, one row per
environment.

Each study is a frozen config (:class:`EvolutionStudy`, :class:`QuickstartStudy`), recorded in
its folder's ``study.json`` (a notebook's parameters override it). How it departs from the paper,
stated here once (the measurement's own departures are in :mod:`evokit.studies.population`):

1. **Sizes.** A few evolution seeds (each its own seed tasks and its own evolution choices) ×
   a few lineages × 8 generations at smoke size, instead of 500 seeds × 15 generations; every
   claim is an estimate across evolution seeds with a 95 % interval (:mod:`evokit.stats`).
2. **Reference models.** The solver population A, B, C of :mod:`evokit.cpu_agent.solvers`, pretrained on
   data (never on p_T), with up to ``attempts`` techniques per step: pass rate and turns are
   measurements. The population's pass rate of an environment is the mean of the three.
3. **Seeds admitted by a band on the measuring population** (docs/preregistration.md, "Seed
   admission"). EE keeps seeds a frontier model passes ≤ 4/8 and that need ≥ 30 turns; here a
   candidate is admitted when the population's pass rate (mean of A, B, C over 8 rollouts each)
   lies in ``seed_band`` (1/8 ≤ p̂ ≤ 4/8), and the admitted are ranked by plan length, then mean
   turns on successful trajectories (:func:`evokit.seeds.admit_seeds`). The lower bound is
   measurability: a pass rate that starts at 0 cannot fall, so such seeds would decide claims 1
   and 2 by the floor. Admission reads its own rollout stream (``admission_seed``), the claims
   another (``measure_seed``), so a seed admitted by a lucky draw is not measured with the same
   luck: generation 0's pass rate, from which every change is measured, is a fresh measurement.
   No two evolution seeds admit the same seed task (by content), so they are independent units.
4. **The D_T gate** (:class:`~evokit.evolve.EvolveConfig` ``difficulty_gate``): the procedural
   proposer and reviewer accept only edits that raise D_T and the direction's part of it. It is
   evokit's addition (EE computes no D_T and has no gate), so the claims are read with it off;
   ``ee_effort`` runs the gated arm beside at full size, as the gate's effect.
5. **Pinned lineages may end early.** With the gate on, a lineage pinned to ``scenario`` or
   ``skill`` ends when the catalog has no rarer situation or technique left (the harness records
   an "end"); averages "over all generations" are over the edits that exist, and a curve carries
   an ended lineage's last environment forward.

Rows (``envs.jsonl``, one per environment of every store): the evolution seed, the run setting
(effort, pinned direction or "all"), lineage, generation, the edit's direction, D_T and its
three parts, the plan's length, the mutation of the edit, and the population's pass rate and
mean turns over 8 rollouts (mean and per solver: :func:`evokit.studies.population.flat`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from tqdm.auto import tqdm  # a widget in Jupyter, text in a terminal

from evokit.evolve import EvolveConfig, evolve
from evokit.rows import append_rows, read_rows
from evokit.seeds import SeedBand, admit_seeds, make_seeds
from evokit.studies.evolution_analysis import MUTATIONS, PARTS
from evokit.studies.folder import PhaseClock, StudyError, check_study
from evokit.studies.population import ATTEMPTS, ROLLOUTS, flat, load_solvers, measure
from evokit.verify import verify_task

__all__ = ["EvolutionStudy", "admitted_seeds", "QuickstartStudy", "StudyError", "env_row", "evolution_study", "quickstart",
           "read_rows", "store_name"]


@dataclass(frozen=True)
class EvolutionStudy:
    """One EE evolution study: which runs (efforts × directions), how many, and how they are measured."""

    evolution_seeds: tuple[int, ...] = (0, 1, 2, 3, 4)  # independent replications (claims: ≥ 5)
    n_seeds: int = 1  # seed tasks (lineages) per evolution seed
    generations: int = 8  # EE: 15; smoke ≥ 8 (claim 1's horizon)
    efforts: tuple[str, ...] = ("low", "high", "max")
    directions: tuple[str, ...] = ("all",)  # "all": EE's shuffled schedule; or pinned directions
    difficulty_gate: bool = True  # the D_T gate of the proposer and reviewer (module docstring, 4)
    solvers: tuple[str, ...] = ("A", "B", "C")  # the measuring population (evokit.cpu_agent.solvers)
    rollouts: int = ROLLOUTS
    attempts: int = ATTEMPTS
    seed_band: SeedBand = SeedBand()  # admitted: the population passes a seed within the band (EE: ≤ 4/8)
    seed_pool: int = 8  # candidate seed tasks per admitted seed, per round
    max_candidate_rounds: int = 4  # more rounds, one at a time, while fewer than n_seeds are admitted
    admission_seed: int = 1  # rollout stream of the seed admission (module docstring, 3)
    measure_seed: int = 0  # rollout stream of the measurement the claims read (keyed by content besides)


@dataclass(frozen=True)
class QuickstartStudy:
    """The quickstart: one evolution run from verified seeds, re-verified, measured by the population."""

    n_seeds: int = 3
    generations: int = 3
    effort: str = "high"
    direction: str = "all"
    seed: int = 0
    difficulty_gate: bool = False  # its figure reports D_T: the rise is measured, not a rule
    solvers: tuple[str, ...] = ("A", "B", "C")
    rollouts: int = ROLLOUTS
    attempts: int = ATTEMPTS
    measure_seed: int = 0


def store_name(effort: str, direction: str | None) -> str:
    return f"{effort}-{direction or 'all'}"


def admitted_seeds(out: Path, solvers: dict, study: EvolutionStudy, seed: int, solver_dir: Path, *,
                   taken: set[str] | frozenset[str] = frozenset(), workers: int, progress: bool) -> list[dict]:
    """The ``n_seeds`` seed tasks of evolution seed ``seed`` (module docstring, 3): candidates made with
    ``seed`` (``seed_pool``·``n_seeds`` a round, one more round at a time up to
    ``max_candidate_rounds`` while too few are admitted; candidate i is the same whatever the pool
    size), measured by the population on the admission stream, those in ``seed_band`` whose content
    is not in ``taken`` (another unit's), ranked by :func:`evokit.seeds.admit_seeds`.

    Returns the admitted rows (``name``, ``path``, ``content_hash``, ``length``, ``pass_rate``) and
    records the admission in ``out/seed_admission.json``. Raises :class:`StudyError` when too few
    candidates lie in the band.
    """
    band = study.seed_band
    for rounds in range(1, max(1, study.max_candidate_rounds) + 1):
        n = study.seed_pool * study.n_seeds * rounds
        rows = make_seeds(n, seed, out / "seeds", workers=workers, progress=False)
        rows = [r for r in rows if int(r["name"].rsplit("-", 1)[1]) < n]  # a resumed folder may hold more
        m = measure(solvers, {r["content_hash"]: out / "seeds" / r["name"] for r in rows}, solver_dir,
                    rollouts=study.rollouts, attempts=study.attempts, seed=study.admission_seed, workers=workers,
                    progress=progress, desc=f"seed admission (evolution seed {seed})")
        measured = [{"name": r["name"], "content_hash": r["content_hash"], "length": r["length"],
                     "pass_rate": flat(m[r["content_hash"]])["pass_rate"],
                     "success_turns": _mean_or_none(x.get("success_turns") for x in m[r["content_hash"]].values())}
                    for r in rows]
        ranked = [r for r in admit_seeds(measured, band) if r["content_hash"] not in taken]
        if len(ranked) >= study.n_seeds:
            break
    if len(ranked) < study.n_seeds:
        raise StudyError(f"{out / 'seeds'}: {len(ranked)} of {len(rows)} candidate seeds lie in the band "
                         f"{band.lo:.3f} ≤ p ≤ {band.hi:.3f} for the population; {study.n_seeds} are needed "
                         "(raise max_candidate_rounds or seed_pool)")
    picked = [{**r, "path": str(out / "seeds" / r["name"])} for r in ranked[: study.n_seeds]]
    (out / "seed_admission.json").write_text(json.dumps({
        "evolution_seed": seed, "band": [band.lo, band.hi], "candidates": len(rows), "in_band": len(ranked),
        "admitted": [r["name"] for r in picked], "content_hashes": [r["content_hash"] for r in picked],
        "admission_pass_rates": [r["pass_rate"] for r in picked]}, indent=2))
    return picked


def _mean_or_none(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def evolution_study(results_dir: str | Path, study: EvolutionStudy = EvolutionStudy(), *, workers: int = 2,
                    solver_dir: str | Path | None = None, progress: bool = True) -> Path:
    """Solvers → admitted seeds → one evolution run per (evolution seed, effort, direction) → every
    environment measured by the population; returns the path of ``envs.jsonl``.

    Layout of ``results_dir``: ``seed<s>/seeds/``, ``seed<s>/seed_admission.json`` and
    ``seed<s>/stores/<effort>-<direction>/`` per evolution seed s, ``envs.jsonl`` (:func:`env_row`), ``timings.json``, ``study.json``. Solvers and
    their measurements live in ``solver_dir`` (default ``results_dir``): the EE notebooks share them,
    and an environment two notebooks both evolve (same content) is measured once. Every stage resumes.
    """
    out = Path(results_dir)
    check_study(out, {"study": "evolution", **asdict(study)})
    solver_dir = Path(solver_dir) if solver_dir else out
    clock = PhaseClock(out / "timings.json")
    with clock("solvers"):
        solvers = load_solvers(solver_dir, study.solvers)
    stores, taken = [], set()
    for s in study.evolution_seeds:
        base = out / f"seed{s}"
        with clock(f"seeds {s}"):
            admitted = admitted_seeds(base, solvers, study, s, solver_dir, taken=taken, workers=workers,
                                      progress=progress)
        taken |= {r["content_hash"] for r in admitted}
        seed_dirs = [Path(r["path"]) for r in admitted]
        for effort in study.efforts:
            for d in study.directions:
                direction = None if d in (None, "", "all") else d
                name = store_name(effort, direction)
                cfg = EvolveConfig(generations=study.generations, effort=effort, direction=direction, seed=s,
                                   difficulty_gate=study.difficulty_gate)
                with clock(f"evolve {s} {name}"):
                    stores.append((s, name, effort, direction, evolve(seed_dirs, base / "stores" / name, cfg,
                                                                      workers=workers, progress=False)))
    envs = [(s, name, effort, d, store, e) for s, name, effort, d, store in stores for e in store.envs()]
    with clock("pass rates"):
        measured = measure(solvers, {e.content_hash: store.path(e) for *_, store, e in envs}, solver_dir,
                           rollouts=study.rollouts, attempts=study.attempts, seed=study.measure_seed,
                           workers=workers, progress=progress, desc="pass rates (solver population)")
    envs_path = out / "envs.jsonl"
    done = {(r["seed"], r["setting"], r["lineage"], r["generation"], r["k"]) for r in read_rows(envs_path)}
    append_rows(envs_path, [env_row(name, effort, d, e, flat(measured[e.content_hash]), seed=s)
                            for s, name, effort, d, _, e in envs
                            if (s, name, e.lineage, e.generation, e.k) not in done])
    return envs_path


def env_row(setting: str, effort: str, direction_setting: str | None, e, measured: dict, *, seed: int) -> dict:
    """One row of ``envs.jsonl`` (flat, so that a DataFrame of rows needs no unpacking)."""
    diff, mut = e.data.get("difficulty", {}), e.data.get("mutation") or {}
    return {"seed": seed, "setting": setting, "effort": effort, "direction_setting": direction_setting or "all",
            "lineage": e.lineage, "generation": e.generation, "k": e.k, "task": e.task,
            "content_hash": e.content_hash, "parent": e.parent, "direction": e.direction,
            "d_t": diff.get("total"), "length": diff.get("length"), **{p: diff.get(p) for p in PARTS},
            **{f"mutation_{m}": mut.get(m) for m in MUTATIONS}, **measured}


def quickstart(results_dir: str | Path, study: QuickstartStudy = QuickstartStudy(), *, workers: int = 2,
               solver_dir: str | Path | None = None, progress: bool = True) -> Path:
    """Seeds → evolve → re-verify each lineage's last environment → measure every environment by the
    solver population → ``quickstart.jsonl`` (one row per environment, :func:`env_row`'s columns plus
    ``verified``/``reverified``).

    The harness verified every environment as it accepted it; the re-verification here runs the three
    verifiers (oracle, null solution, rubric) again on the final generation, independently of the run.
    """
    out = Path(results_dir)
    check_study(out, {"study": "quickstart", **asdict(study)})
    solver_dir = Path(solver_dir) if solver_dir else out
    direction = None if study.direction in ("", "all") else study.direction
    seed_rows = make_seeds(study.n_seeds, study.seed, out / "seeds", workers=workers, progress=progress)
    store = evolve([out / "seeds" / r["name"] for r in seed_rows], out / "store",
                   EvolveConfig(generations=study.generations, effort=study.effort, direction=direction,
                                seed=study.seed, difficulty_gate=study.difficulty_gate),
                   workers=workers, progress=progress)
    envs = store.envs()
    measured = measure(load_solvers(solver_dir, study.solvers), {e.content_hash: store.path(e) for e in envs},
                       solver_dir, rollouts=study.rollouts, attempts=study.attempts, seed=study.measure_seed,
                       workers=workers, progress=progress, desc="pass rates (solver population)")
    path = out / "quickstart.jsonl"
    done = {(r["lineage"], r["generation"]) for r in read_rows(path)}
    last = {e.lineage: e for e in envs}  # envs are in order: the last one seen is the newest
    todo = [e for e in envs if (e.lineage, e.generation) not in done]
    name = store_name(study.effort, direction)
    for e in tqdm(todo, desc="rows (re-verifying each lineage's last environment)", disable=not progress):
        reverified = verify_task(store.path(e)).passed if last[e.lineage] is e else None
        append_rows(path, [{**env_row(name, study.effort, direction, e, flat(measured[e.content_hash]),
                                      seed=study.seed),
                            "verified": (e.data.get("verdict") or {}).get("passed", True), "reverified": reverified}])
    return path
