"""EE's baselines: environment ensemble and co-evolution produce verified tasks in the lineage store.

Ensemble: merged tasks re-verify from their store folders, their plans are the parents' plans
concatenated (``input`` links shifted), and every step keeps its parent's data and expected
answer. Co-evolution: the weakness bank is checked on a scripted list of rollout records (the
test is about the bank, not about a policy); synthesis stays within the seed scenarios and
prefers the failed pairs (a statistical check with a fixed rng); a round stores verified tasks.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from evokit.catalog import skills_for
from evokit.evolve.baselines import (
    BaselineError,
    EnsembleConfig,
    WeaknessBank,
    coevolve_round,
    ensemble,
    failure_rates,
    merge_plans,
    synthesize,
    update_bank,
)
from evokit.lineage import LineageStore
from evokit.plan import Plan, Step
from evokit.seeds import make_seeds
from evokit.tasks import read_metadata, write_task
from evokit.verify import verify_task


@pytest.fixture(scope="module")
def seed_dirs(tmp_path_factory) -> list[Path]:
    out = tmp_path_factory.mktemp("seeds")
    return [out / row["name"] for row in make_seeds(3, 0, out, progress=False)]


def plan_of(task: Path) -> list[dict]:
    return read_metadata(task).plan


def step_files(task: Path, i: int, part: str) -> dict[str, bytes]:
    """The data files of step i (part="data") or its expected answer (part="expected")."""
    if part == "expected":
        return {"expected": (task / "tests" / "expected" / f"step{i}.txt").read_bytes()}
    root = task / "environment" / "data" / f"step{i}"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def assert_concatenation(merged: Path, parents: list[Path]) -> None:
    """Plan = parents' plans in order (inputs shifted); each step's data and expected answer = the parent's."""
    got = plan_of(merged)
    offset = 0
    for parent in parents:
        for j, step in enumerate(plan_of(parent), 1):
            i = offset + j
            mine = got[i - 1]
            assert (mine["scenario"], mine["skill"]) == (step["scenario"], step["skill"])
            assert mine.get("input") == (None if step.get("input") is None else step["input"] + offset)
            if step.get("input") is None:
                assert step_files(merged, i, "data") == step_files(parent, j, "data") != {}
            assert step_files(merged, i, "expected") == step_files(parent, j, "expected")
        offset += len(plan_of(parent))
    assert len(got) == offset


def test_merge_plans_shifts_inputs_and_keeps_params():
    a = Plan((Step("access-log", "filter-rows", (("data", 1),)), Step("access-log", "topk-count", input=1)))
    b = Plan((Step("csv-ledger", "group-sum", (("data", 1), ("data_seed", 7))),
              Step("csv-ledger", "group-sum", input=1)))
    m = merge_plans([a, b])
    assert [s.input for s in m.steps] == [None, 1, None, 3]
    assert m.steps[2].params == b.steps[0].params


def test_ensemble_of_three_seeds(seed_dirs, tmp_path):
    """Budget 4 with 3 seeds: the three pairs and the triple, verified, concatenated, data unchanged."""
    store = LineageStore(tmp_path / "store")
    recs = ensemble(seed_dirs, store, budget=4, seed=0)
    assert len(recs) == 4 and len(store.lineage("ensemble")) == 4
    by_name = {p.name: p for p in seed_dirs}
    assert sorted(len(r.data["merged"]) for r in recs) == [2, 2, 2, 3]
    assert len({frozenset(r.data["merged"]) for r in recs}) == 4
    for rec in recs:
        assert rec.generation == 1 and rec.parent is None and rec.data["verdict"]["passed"]
        task = store.path(rec)
        assert verify_task(task).passed, rec
        assert_concatenation(task, [by_name[n] for n in rec.data["merged"]])
        assert read_metadata(task).lineage.lineage_id == "ensemble"
    assert not store.check()
    # Resuming with the same arguments reuses every record and writes nothing new.
    lines = store.index_path.read_text()
    assert ensemble(seed_dirs, store, budget=4, seed=0) == recs
    assert store.index_path.read_text() == lines
    # Every combination is used: a larger budget stops short instead of repeating seeds.
    assert len(ensemble(seed_dirs, store, budget=6, seed=0)) == 4


def test_ensemble_recurses_into_merged_tasks(seed_dirs, tmp_path):
    """One pair per round: round 2 merges the round-1 task with the remaining seed (generation 2)."""
    store = LineageStore(tmp_path / "store")
    first, second = ensemble(seed_dirs, store, budget=2, seed=3, config=EnsembleConfig(sizes=(2,), max_per_round=1))
    assert (first.generation, second.generation) == (1, 2)
    assert first.task in second.data["merged"] and sorted(second.data["seeds"]) == sorted(p.name for p in seed_dirs)
    assert verify_task(store.path(second)).passed
    parts = [store.path(first) if n == first.task else seed_dirs[0].parent / n for n in second.data["merged"]]
    assert_concatenation(store.path(second), parts)


def test_ensemble_refuses_foreign_tasks(tmp_path):
    task = write_task(tmp_path / "foreign", instruction="Say hi.", dockerfile="FROM debian:bookworm-slim\n",
                      tests={"test.sh": "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"},
                      solution={"solve.sh": "#!/bin/bash\ntrue\n"})
    with pytest.raises(BaselineError, match="no plan"):
        ensemble([task], LineageStore(tmp_path / "store"), budget=1, seed=0)


# ---------------------------------------------------------------------------- weakness bank
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


def test_coevolve_round_stores_verified_tasks(seed_dirs, tmp_path):
    store = LineageStore(tmp_path / "store")
    seed_plans = [plan_of(d) for d in seed_dirs]
    bank = update_bank(WeaknessBank(), [{"plan": p, "step_results": {f"step_{i}": 0 for i in range(1, len(p) + 1)}}
                                        for p in seed_plans])
    recs = coevolve_round(bank, seed_dirs, store, n=3, round_index=1, seed=0)
    assert len(recs) == 3 and [r.k for r in recs] == [0, 1, 2]
    seed_scenarios = {s["scenario"] for p in seed_plans for s in p}
    for rec in recs:
        assert (rec.lineage, rec.generation) == ("coevolution", 1)
        assert verify_task(store.path(rec)).passed
        plan = plan_of(store.path(rec))
        assert {s["scenario"] for s in plan} <= seed_scenarios
        assert len(plan) in {len(p) for p in seed_plans}
        assert [[s["scenario"], s["skill"]] for s in plan] == [w[:2] for w in rec.data["weakness"]]
    assert coevolve_round(bank, seed_dirs, store, n=3, round_index=1, seed=0) == recs  # resumed: reused
