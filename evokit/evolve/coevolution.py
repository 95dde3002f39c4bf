"""EE §5.1's co-evolution baseline as a task source: every ``refresh_every`` steps a new round of tasks
is synthesised from the weakness bank, and training continues in random order on all rounds so far.

The bank (:class:`evokit.evolve.baselines.WeaknessBank`) starts from the rollouts it is given
(the warm policy's on the seeds) and takes every training group's per-step results back
(:meth:`Coevolution.update`). Round r (1-based) is synthesised at step (r − 1)·``refresh_every``
into ``store`` by :func:`evokit.evolve.baselines.coevolve_round` (resumable: a round's stored
slots are reused), ``sizes[r − 1]`` tasks of it, so the rounds split an environment budget.
Registered as ``"coevolution"`` (:mod:`evokit.sources`).

Deviation from the earlier windowed loop, stated here: the bank is updated after every step rather
than after each window; with ``decay = 1`` (the default, counts accumulate) the bank at each
refresh is the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ClassVar

from evokit.curriculum import RandomOrder, RandomState, store_envs
from evokit.evolve.baselines import CoevolutionConfig, WeaknessBank, coevolve_round, update_bank
from evokit.grpo import usable
from evokit.learners import task_plan
from evokit.lineage import LineageStore
from evokit.sources import GroupResult, Run, register


def split_budget(budget: int, rounds: int) -> tuple[int, ...]:
    """``budget`` environments over ``rounds`` rounds, the first ones one larger where it does not divide.

    >>> split_budget(10, 3)
    (4, 3, 3)
    """
    return tuple(budget // rounds + (r < budget % rounds) for r in range(rounds))


def bank_records(rows: Sequence[dict], task_dirs: Sequence[Path]) -> list[dict]:
    """Rollout rows as :func:`~evokit.evolve.baselines.update_bank` records (plan + per-step results)."""
    plans = {Path(d).name: task_plan(d)[0] for d in task_dirs}
    return [{"plan": plans[r["task"]], "step_results": r["rewards"]} for r in rows
            if usable(r) and r["rewards"] and r["task"] in plans]


@dataclass(frozen=True)
class CoevolutionState:
    bank: WeaknessBank
    seed: int
    order: RandomState | None = None  # random order over the rounds made so far
    rounds_made: int = 0
    step: int = 0


@register("coevolution")
@dataclass(frozen=True)
class Coevolution:
    """Co-evolution's refresh (module docstring); ``seeds`` are the seed task folders the rounds draw from."""

    seeds: tuple[Path, ...]
    store: Path
    sizes: tuple[int, ...]  # tasks per round (:func:`split_budget`)
    bank: WeaknessBank = WeaknessBank()
    config: CoevolutionConfig = CoevolutionConfig()
    name: ClassVar[str] = "coevolution"

    def init(self, run: Run) -> CoevolutionState:
        self.config.validate()
        if not self.seeds or not self.sizes:
            raise ValueError("coevolution: needs seed task folders and at least one round size")
        return CoevolutionState(self.bank, run.seed)

    def sample(self, state: CoevolutionState, rng, n):
        if state.step % self.config.refresh_every == 0 and state.rounds_made < len(self.sizes):
            r = state.rounds_made + 1
            store = LineageStore(self.store)
            coevolve_round(state.bank, self.seeds, store, n=self.sizes[r - 1], round_index=r,
                           seed=state.seed, config=self.config)
            state = replace(state, rounds_made=r, order=RandomOrder(store_envs(store)).init(Run(1, state.seed)))
        if state.order is None:
            raise ValueError("coevolution: no round has been synthesised (every slot was rejected?)")
        order, refs = RandomOrder(store_envs(self.store)).sample(state.order, rng, n)
        return replace(state, order=order), refs

    def update(self, state: CoevolutionState, results: Sequence[GroupResult]) -> CoevolutionState:
        records = [{"plan": task_plan(r.ref.path)[0], "step_results": row["rewards"]}
                   for r in results if r.ref.path is not None for row in r.rows if usable(row) and row["rewards"]]
        bank = update_bank(state.bank, records, decay=self.config.decay)
        return replace(state, bank=bank, step=state.step + 1)

    def done(self, state: CoevolutionState) -> bool:
        return False

    def summary(self, state: CoevolutionState) -> dict:
        return {"rounds": state.rounds_made, "environments": len(state.order.envs) if state.order else 0,
                "bank_trajectories": state.bank.trajectories}

