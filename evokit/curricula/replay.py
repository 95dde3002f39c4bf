"""A PLR-style curriculum written as one module: replay the most recently failed lineage.

The example of how a new curriculum joins evokit (docs/curricula-and-learners.md, "Adding a curriculum"): one frozen
source class implementing :class:`evokit.sources.TaskSource`, registered by name; the CPU loop
(:func:`evokit.train.train`) and the TRL path (:func:`evokit.trl_trainer.train_llm`) run it
unchanged. Not from either paper: it borrows Prioritized Level Replay's idea (Jiang et al., 2021)
of serving again the levels the agent recently did badly on, with the simplest score.

Rule, over EE's evolved lineages (:class:`evokit.curriculum.EnvRow`, generations ≥ ``start_generation``):

* each task slot is, with probability ``replay_prob``, the environment on which a lineage most
  recently *failed* (p̂ ≤ ``fail_below``; the latest failure first, then the one before, …), and
  otherwise an environment drawn uniformly over all of them;
* a lineage leaves the replay list when one of its environments is passed again (p̂ > ``fail_below``);
* with nothing failed yet, every slot is uniform.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from evokit.curriculum import EnvId, EnvRow, env_rows
from evokit.sources import GroupResult, Run, TaskRef, register


@dataclass(frozen=True)
class ReplayState:
    """Failed lineages, most recent first, each with the environment it failed on; pass rates received."""

    failed: tuple[tuple[str, EnvId], ...] = ()
    updates: int = 0
    replays: int = 0


@register("replay")
@dataclass(frozen=True)
class ReplayFailed:
    """Replay the most recently failed lineage (module docstring)."""

    envs: tuple[EnvRow, ...]
    replay_prob: float = 0.5
    fail_below: float = 0.5
    start_generation: int = 1
    name: ClassVar[str] = "replay"

    def _pool(self) -> list[EnvRow]:
        return [e for e in env_rows(self.envs) if e.generation >= self.start_generation]

    def init(self, run: Run) -> ReplayState:
        if not 0.0 <= self.replay_prob <= 1.0:
            raise ValueError(f"replay_prob must lie in [0, 1]; got {self.replay_prob}")
        if not self._pool():
            raise ValueError(f"replay: no environment of generation ≥ {self.start_generation}")
        return ReplayState()

    def sample(self, state: ReplayState, rng, n: int) -> tuple[ReplayState, list[TaskRef]]:
        pool = self._pool()
        where = {(e.lineage, e.generation, e.k): e.path for e in pool}
        picks, replays = [], 0
        for _ in range(n):
            if state.failed and replays < len(state.failed) and rng.random() < self.replay_prob:
                picks.append(state.failed[replays][1])
                replays += 1
            else:
                e = pool[int(rng.integers(len(pool)))]
                picks.append((e.lineage, e.generation, e.k))
        return replace(state, replays=state.replays + replays), [TaskRef(i, where[i]) for i in picks]

    def update(self, state: ReplayState, results: Sequence[GroupResult]) -> ReplayState:
        failed = list(state.failed)
        for r in results:
            if r.pass_rate is None:
                continue
            env = tuple(r.ref.key)
            failed = [f for f in failed if f[0] != env[0]]
            if r.pass_rate <= self.fail_below:
                failed.insert(0, (env[0], env))
        return replace(state, failed=tuple(failed), updates=state.updates + len(results))

    def done(self, state: ReplayState) -> bool:
        return False

    def summary(self, state: ReplayState) -> dict:
        return {"failed_lineages": len(state.failed), "replays": state.replays, "updates": state.updates,
                "most_recent_failure": list(state.failed[0][1]) if state.failed else None}
