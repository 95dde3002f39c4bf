"""EE's environment ensemble: merged tasks re-verify from their store folders, their plans are the
parents' plans concatenated (``input`` links shifted), and every step keeps its parent's data and
expected answer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from evokit.evolve.ensemble import EnsembleConfig, ensemble, merge_plans
from evokit.lineage import LineageStore
from evokit.plan import Plan, Step
from evokit.seeds import make_seeds
from evokit.tasks import read_metadata
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
