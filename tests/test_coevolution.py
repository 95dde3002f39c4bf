"""evokit.evolve.coevolution: EE's co-evolution refresh as a task source, run through the CPU loop.

What is checked: a round is synthesised every ``refresh_every`` steps into the store (sizes split
the budget), the run trains on all rounds so far in random order, and the weakness bank takes every
step's rollouts; the budget split; the seed rollouts' records.
"""

from __future__ import annotations

import torch

from evokit.evolve.baselines import CoevolutionConfig, WeaknessBank
from evokit.evolve.coevolution import Coevolution, split_budget
from evokit.learners import PolicyConfig
from evokit.lineage import LineageStore
from evokit.rows import read_rows
from evokit.seeds import make_seeds
from evokit.train import TrainConfig, train


def test_split_budget():
    assert split_budget(10, 3) == (4, 3, 3) and split_budget(2, 2) == (1, 1) and sum(split_budget(7, 4)) == 7


def test_refresh_synthesises_rounds_and_updates_the_bank(tmp_path):
    """Two steps with refresh_every = 1: rounds 1 and 2 are made, step 1 may serve either, the bank grows."""
    seeds = [tmp_path / "seeds" / r["name"] for r in make_seeds(2, 0, tmp_path / "seeds", progress=False)]
    store = tmp_path / "co_store"
    source = Coevolution(tuple(seeds), store, (1, 1), WeaknessBank(), CoevolutionConfig(refresh_every=1))
    cfg = TrainConfig(steps=2, tasks_per_step=1, group_size=2, eval_every=0)
    out = train(source, PolicyConfig(), tmp_path / "run", cfg, progress=False)
    rows = read_rows(out / "steps.jsonl")
    assert [r["scheduler"]["rounds"] for r in rows] == [1, 2]
    assert [r["scheduler"]["environments"] for r in rows] == [1, 2]
    assert sorted(e.generation for e in LineageStore(store).envs()) == [1, 2]
    assert rows[0]["served"][0]["env"][1] == 1  # step 0 can only serve round 1
    state = torch.load(out / "checkpoint.pt", weights_only=False)["source"]
    assert state.bank.trajectories == sum(s["n"] for r in rows for s in r["served"]) > 0
