"""evokit.evolve.coevolution: EE's co-evolution baseline, its bank and rounds and its refresh as a task source.

What is checked: the weakness bank on a scripted list of rollout records (the test is about the
bank, not about a policy); synthesis stays within the seed scenarios and prefers the failed pairs (a
statistical check with a fixed rng); a round stores verified tasks; run through the CPU loop, a round
is synthesised every ``refresh_every`` steps into the store (sizes split the budget), the run trains on
all rounds so far in random order, and the bank takes every step's rollouts.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
import torch

from evokit.catalog import skills_for
from evokit.cpu_agent.policy import PolicyConfig
from evokit.evolve.baselines import BaselineError
from evokit.evolve.coevolution import (
    Coevolution,
    CoevolutionConfig,
    WeaknessBank,
    coevolve_round,
    failure_rates,
    split_budget,
    synthesize,
    update_bank,
)
from evokit.lineage import LineageStore
from evokit.rows import read_rows
from evokit.seeds import make_seeds
from evokit.tasks import read_metadata
from evokit.train import TrainConfig, train
from evokit.verify import verify_task

A, B, C = ("access-log", "filter-rows"), ("access-log", "topk-count"), ("csv-ledger", "group-sum")
PLAN = [{"scenario": A[0], "skill": A[1]}, {"scenario": B[0], "skill": B[1], "input": 1},
        {"scenario": C[0], "skill": C[1]}]
#: Scripted rollouts of PLAN (not a policy): step results as the task's reward.json reports them.
ROLLOUTS = [
    {"plan": PLAN, "step_results": {"step_1": 1, "step_2": 0, "step_3": 1}},  # B wrong
    {"plan": PLAN, "step_results": {"step_1": 1, "step_2": 0, "step_3": 0}},  # B and C wrong
    {"plan": PLAN, "step_results": {"step_1": 0, "step_2": 0, "step_3": 1}},  # A wrong; B read A's bad output
    {"plan": PLAN, "step_results": {"step_1": 1, "step_2": 1, "step_3": 1}},  # solved
]


def test_update_bank_counts_failures():
    bank = update_bank(WeaknessBank(), ROLLOUTS)
    assert dict(bank.failures) == {A: 1, B: 2, C: 1}
    assert dict(bank.totals) == {A: 4, B: 3, C: 4}  # B after a failed A is not B's fault
    assert (bank.trajectories, bank.failed_trajectories) == (4, 3)
    again = update_bank(bank, ROLLOUTS[:1])  # pure: the old bank is unchanged
    assert bank.failures[B] == 2 and again.failures[B] == 3 and again.totals[A] == 5
    assert WeaknessBank.from_json(again.to_json()) == again
    halved = update_bank(bank, [], decay=0.5)
    assert halved.failures[B] == 1 and halved.totals[A] == 2
    rates = failure_rates(bank, [A, B, C, ("csv-ledger", "filter-rows")], smoothing=1.0)
    mean = 4 / 11
    assert rates[B] == pytest.approx((2 + mean) / 4) and rates[("csv-ledger", "filter-rows")] == pytest.approx(mean)
    with pytest.raises(BaselineError, match="step_3"):
        update_bank(bank, [{"plan": PLAN, "step_results": {"step_1": 1, "step_2": 1}}])


def test_synthesize_stays_in_seed_scenarios_and_targets_failures():
    """Over many draws the failed pairs come up far more often than pairs that never failed."""
    scenarios = ["access-log", "csv-ledger"]
    weak = ("csv-ledger", "group-sum")
    strong = [(s, k) for s in scenarios for k in skills_for(s) if (s, k) != weak]
    records = [{"plan": [{"scenario": weak[0], "skill": weak[1]}], "step_results": {"step_1": 0}}] * 20
    records += [{"plan": [{"scenario": s, "skill": k}], "step_results": {"step_1": 1}} for s, k in strong] * 5
    bank = update_bank(WeaknessBank(), records)
    plans = synthesize(bank, scenarios, 300, random.Random(0), lengths=[2, 3])
    steps = Counter((s.scenario, s.skill) for p in plans for s in p.steps)
    assert {s for s, _ in steps} <= set(scenarios)
    assert {len(p) for p in plans} == {2, 3}
    share = steps[weak] / sum(steps.values())
    assert share > 5 / (len(strong) + 1), share  # far above its uniform share
    assert steps[weak] > 5 * max(steps[p] for p in strong)
    for p in plans:
        p.validate()


def test_a_bank_without_failures_draws_pairs_uniformly():
    """Every seen step succeeded, so every smoothed rate is 0: synthesis draws the seed scenarios' pairs
    alike instead of failing (a solver that passes all its seed rollouts leaves nothing to mine)."""
    scenarios = ["access-log", "csv-ledger"]
    pairs = [(s, k) for s in scenarios for k in skills_for(s)]
    bank = update_bank(WeaknessBank(), [{"plan": [{"scenario": s, "skill": k}], "step_results": {"step_1": 1}}
                                        for s, k in pairs])
    assert set(failure_rates(bank, pairs).values()) == {0.0}
    plans = synthesize(bank, scenarios, 400, random.Random(1), lengths=[2])
    steps = Counter((s.scenario, s.skill) for p in plans for s in p.steps)
    assert set(steps) <= set(pairs) and len(steps) == len(pairs)
    assert max(steps.values()) < 3 * min(steps.values()), steps


def seeds(out: Path, n: int) -> list[Path]:
    """``n`` procedural seed tasks under ``out``."""
    return [out / r["name"] for r in make_seeds(n, 0, out, progress=False)]


def test_coevolve_round_stores_verified_tasks(tmp_path):
    store, seed_dirs = LineageStore(tmp_path / "store"), seeds(tmp_path / "seeds", 3)
    seed_plans = [read_metadata(d).plan for d in seed_dirs]
    bank = update_bank(WeaknessBank(), [{"plan": p, "step_results": {f"step_{i}": 0 for i in range(1, len(p) + 1)}}
                                        for p in seed_plans])
    recs = coevolve_round(bank, seed_dirs, store, n=3, round_index=1, seed=0)
    assert len(recs) == 3 and [r.k for r in recs] == [0, 1, 2]
    seed_scenarios = {s["scenario"] for p in seed_plans for s in p}
    for rec in recs:
        assert (rec.lineage, rec.generation) == ("coevolution", 1)
        assert verify_task(store.path(rec)).passed
        plan = read_metadata(store.path(rec)).plan
        assert {s["scenario"] for s in plan} <= seed_scenarios
        assert len(plan) in {len(p) for p in seed_plans}
        assert [[s["scenario"], s["skill"]] for s in plan] == [w[:2] for w in rec.data["weakness"]]
    assert coevolve_round(bank, seed_dirs, store, n=3, round_index=1, seed=0) == recs  # resumed: reused


# ---------------------------------------------------------------------------- the refresh


def test_split_budget():
    assert split_budget(10, 3) == (4, 3, 3) and split_budget(2, 2) == (1, 1) and sum(split_budget(7, 4)) == 7


def test_refresh_synthesises_rounds_and_updates_the_bank(tmp_path):
    """Two steps with refresh_every = 1: rounds 1 and 2 are made, step 1 may serve either, the bank grows."""
    store = tmp_path / "co_store"
    source = Coevolution(tuple(seeds(tmp_path / "seeds", 2)), store, (1, 1), WeaknessBank(), CoevolutionConfig(refresh_every=1))
    cfg = TrainConfig(steps=2, tasks_per_step=1, group_size=2, eval_every=0)
    out = train(source, PolicyConfig(), tmp_path / "run", cfg, progress=False)
    rows = read_rows(out / "steps.jsonl")
    assert [r["scheduler"]["rounds"] for r in rows] == [1, 2]
    assert [r["scheduler"]["environments"] for r in rows] == [1, 2]
    assert sorted(e.generation for e in LineageStore(store).envs()) == [1, 2]
    assert rows[0]["served"][0]["env"][1] == 1  # step 0 can only serve round 1
    state = torch.load(out / "checkpoint.pt", weights_only=False)["source"]
    assert state.bank.trajectories == sum(s["n"] for r in rows for s in r["served"]) > 0
