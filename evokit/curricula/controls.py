"""The two control arms of claim 4 (docs/preregistration.md): what EL's adaptivity is measured against.

EE compares EL with random order over every environment of every generation. That comparison
mixes two things: EL serves the seeds and early generations more often than random order does,
and EL *chooses* when a lineage moves on. The two controls take the first away from the second:

* **seeds-only** (``"seeds-only"``): random order over each lineage's first environment alone: its
  seed task (generation 0 in a store made by ``evokit evolve``; the given task for a task list). EL beating it says that serving evolved environments at all adds something;
  EL's share of partially solved groups cannot come from "EL mostly served the seeds".
* **generation-matched random** (``"matched"``): at each step and slot, an environment drawn
  uniformly among those of the *same generation* EL served in that slot of the same run
  (``schedule``, read from EL's ``steps.jsonl``), from any lineage. It serves EL's mix of
  generations in EL's order, so EL beating it says that EL's choice of *which* environment of a
  generation, the lineage whose predecessor the student just passed, adds something beyond the mix.

EL's adaptivity counts only if EL beats both. Neither is from either paper; both are evokit's
controls, registered before any run. Pass rates change neither (they are fed and ignored).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from evokit.curriculum import EnvId, EnvRow, env_rows
from evokit.rows import read_rows
from evokit.sources import GroupResult, Run, TaskRef, register


@dataclass(frozen=True)
class ControlState:
    """How many steps a control has served (the matched control reads its schedule at this index)."""

    step: int = 0


def _where(envs: Sequence[EnvRow]) -> dict[EnvId, Path | None]:
    return {(e.lineage, e.generation, e.k): e.path for e in env_rows(envs)}


@register("seeds-only")
@dataclass(frozen=True)
class SeedsOnly:
    """Random order over each lineage's first environment, its seed, alone (module docstring)."""

    envs: tuple[EnvRow, ...]
    name: ClassVar[str] = "seeds-only"

    def _seeds(self) -> list[EnvId]:
        first: dict[str, int] = {}
        for lineage, g, _ in _where(self.envs):
            first[lineage] = min(g, first.get(lineage, g))
        return sorted(i for i in _where(self.envs) if i[1] == first[i[0]])

    def init(self, run: Run) -> ControlState:
        if not self._seeds():
            raise ValueError("seeds-only: no environments (the store or task list is empty)")
        return ControlState()

    def sample(self, state: ControlState, rng: np.random.Generator, n: int) -> tuple[ControlState, list[TaskRef]]:
        seeds, where = self._seeds(), _where(self.envs)
        picks: list[EnvId] = []
        while len(picks) < n:  # shuffled rounds: distinct while n ≤ the number of seeds
            picks += [seeds[i] for i in rng.permutation(len(seeds))]
        return dataclasses.replace(state, step=state.step + 1), [TaskRef(i, where[i]) for i in picks[:n]]

    def update(self, state: ControlState, results: Sequence[GroupResult]) -> ControlState:
        return state

    def done(self, state: ControlState) -> bool:
        return False

    def summary(self, state: ControlState) -> dict:
        return {"draws": state.step}


@register("matched")
@dataclass(frozen=True)
class GenerationMatched:
    """At each step and slot, a uniform environment of the generation EL served there (module docstring).

    ``schedule[t][j]`` is the generation EL served in slot j of step t (:func:`el_schedule`). A run
    longer than the schedule, or a generation the store does not hold, is an error naming it.
    """

    envs: tuple[EnvRow, ...]
    schedule: tuple[tuple[int, ...], ...] = ()
    name: ClassVar[str] = "matched"

    def _by_generation(self) -> dict[int, list[EnvId]]:
        out: dict[int, list[EnvId]] = {}
        for i in sorted(_where(self.envs)):
            out.setdefault(i[1], []).append(i)
        return out

    def init(self, run: Run) -> ControlState:
        if not self.schedule:
            raise ValueError("matched: no schedule (the generations EL served, per step and slot; el_schedule)")
        missing = sorted({g for step in self.schedule for g in step} - set(self._by_generation()))
        if missing:
            raise ValueError(f"matched: EL served generation(s) {missing}, which the store does not hold")
        return ControlState()

    def sample(self, state: ControlState, rng: np.random.Generator, n: int) -> tuple[ControlState, list[TaskRef]]:
        if state.step >= len(self.schedule):
            raise ValueError(f"matched: step {state.step} is past EL's schedule of {len(self.schedule)} steps")
        slots = self.schedule[state.step]
        if len(slots) != n:
            raise ValueError(f"matched: step {state.step} asks for {n} tasks, EL served {len(slots)} there")
        pool, where = self._by_generation(), _where(self.envs)
        picks = [pool[g][int(rng.integers(len(pool[g])))] for g in slots]
        return dataclasses.replace(state, step=state.step + 1), [TaskRef(i, where[i]) for i in picks]

    def update(self, state: ControlState, results: Sequence[GroupResult]) -> ControlState:
        return state

    def done(self, state: ControlState) -> bool:
        return state.step >= len(self.schedule)

    def summary(self, state: ControlState) -> dict:
        return {"draws": state.step, "of": len(self.schedule)}


def el_schedule(train_dir: str | Path) -> tuple[tuple[int, ...], ...]:
    """The generations an EL run served, per step and slot, from its ``steps.jsonl`` (the ``env`` key of
    each served entry: lineage, generation, k). Raises ValueError when the folder holds no EL steps."""
    rows = read_rows(Path(train_dir) / "steps.jsonl")
    if not rows or any(r["source"] != "el" for r in rows):
        raise ValueError(f"{train_dir}: no EL run's steps.jsonl to match (train EL first)")
    return tuple(tuple(int(s["env"][1]) for s in r["served"]) for r in sorted(rows, key=lambda r: r["step"]))
