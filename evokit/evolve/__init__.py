"""Environment Evolution (EE §4): edits along three directions at three efforts, the plan reviewer,
the modifier, the verifiers, lineages of generations, and the baselines.

``evolve(seed_dirs, store, config)`` runs (or resumes) one lineage per seed; see
:mod:`evokit.evolve.harness` for the loop and :mod:`evokit.evolve.edits` for the proposer.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from evokit.evolve.edits import DIRECTIONS, EFFORTS, Edit, ProceduralProposer
from evokit.evolve.harness import (
    Backend,
    EvolveConfig,
    check_seeds,
    evolve_lineage,
    procedural_backend,
)
from evokit.evolve.metrics import mutation
from evokit.evolve.review import PlanReviewer
from evokit.lineage import LineageStore


def evolve(seed_dirs: Sequence[str | Path], store: LineageStore | str | Path, config: EvolveConfig = EvolveConfig(),
           *, backend: Backend | None = None, workers: int = 2, executor=None, progress: bool = True) -> LineageStore:
    """Evolve one lineage per seed (in parallel), resuming whatever ``store`` already holds.

    A store resumes with the parameters it was made with; a larger ``config.generations`` or more
    seeds extend it to the store a direct run with them would make.
    """
    from tqdm.auto import tqdm  # a widget in Jupyter, text in a terminal

    from evokit.parallel import LocalExecutor

    store = store if isinstance(store, LineageStore) else LineageStore(store)
    backend = backend or procedural_backend(difficulty_gate=config.difficulty_gate)
    if getattr(backend.reviewer, "difficulty_gate", True) != config.difficulty_gate:
        raise ValueError(f"config.difficulty_gate={config.difficulty_gate} but the {backend.name} backend's reviewer "
                         f"has difficulty_gate={getattr(backend.reviewer, 'difficulty_gate', True)}; build it with "
                         "procedural_backend(difficulty_gate=...) (the LLM roles always apply the gate)")
    seeds = sorted(Path(s) for s in seed_dirs)
    names = [f"L{i:03d}-{p.name}" for i, p in enumerate(seeds)]
    check_seeds(store, list(zip(names, seeds, strict=True)))
    # More generations extend a store (harness.check_seeds: more seeds add lineages).
    store.check_config({**config.key(), "backend": backend.name}, grows=("generations",))
    executor = executor or LocalExecutor(workers)
    with tqdm(total=len(seeds) * config.generations, desc="lineages × generations", unit="gen",
              disable=not progress) as bar:
        executor.map(lambda job: evolve_lineage(store, backend, config, job[0], job[1], on_generation=bar.update),
                     list(zip(names, seeds, strict=True)))
    return store


__all__ = ["DIRECTIONS", "EFFORTS", "Backend", "Edit", "EvolveConfig", "LineageStore", "PlanReviewer",
           "ProceduralProposer", "evolve", "evolve_lineage", "mutation", "procedural_backend"]
