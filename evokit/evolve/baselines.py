"""What EE's two baselines (§5.1) share: their error, the seed plans they read, and how they store a task.

The paper compares evolution with two baselines "with the same synthesiser and the same total number
of environments" (papers.md, "experimental setup"): the environment ensemble
(:mod:`evokit.evolve.ensemble`) and co-evolution (:mod:`evokit.evolve.coevolution`). Both write Harbor
task folders that pass :func:`~evokit.verify.verify_task` into a :class:`~evokit.lineage.LineageStore`,
one :class:`~evokit.lineage.EnvRecord` each (:func:`store_task`), so a training run consumes all three
methods the same way. Both read evokit's procedural tasks: the plan and render seed in
``[metadata.evokit]`` (:func:`plan_and_seed`); a foreign task raises :class:`BaselineError`.
"""

from __future__ import annotations

import time
from pathlib import Path

from evokit.difficulty import catalog_reference, score
from evokit.errors import UserError
from evokit.evolve.harness import verdict_summary
from evokit.lineage import EnvRecord, LineageStore
from evokit.plan import Plan
from evokit.tasks import read_metadata


class BaselineError(UserError, ValueError):
    """A task a baseline cannot use (no evokit plan), or a malformed rollout record."""


def plan_and_seed(task_dir: Path) -> tuple[Plan, int]:
    """The plan and render seed a procedural task records; :class:`BaselineError` for a foreign task."""
    meta = read_metadata(task_dir)
    if meta is None or not meta.plan or meta.seed is None:
        raise BaselineError(f"{task_dir}: no plan and seed in [metadata.evokit]; the baselines merge and mine "
                            "evokit's procedural tasks only (extract a plan with evokit.extract first)")
    return Plan.from_records(meta.plan, meta.goal or ""), meta.seed


def store_task(store: LineageStore, folder: Path, lineage: str, generation: int, k: int, verdict,
               t0: float, extra: dict) -> EnvRecord:
    """Move a verified folder into the store and log its record (the fields evolution records, plus ``extra``)."""
    plan = Plan.from_records(read_metadata(folder).plan)  # the filled plan, as rendered
    name, h = store.add_task(folder)
    rec = EnvRecord(lineage, generation, k, name, h, None, None, None, {
        "plan": plan.to_records(), "difficulty": score(plan, catalog_reference()).as_dict(),
        "verdict": verdict_summary(verdict), "seconds": round(time.monotonic() - t0, 3), **extra})
    store.add_env(rec)
    return rec


__all__ = ["BaselineError", "plan_and_seed", "store_task"]
