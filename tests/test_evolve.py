"""The evolution harness with the procedural backend: soundness, directions, efforts, crash safety.

Every environment is built and verified in the real sandbox. The seeds come from
``evokit.seeds.make_seeds`` (themselves verified).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from evokit.difficulty import catalog_reference
from evokit.evolve import EvolveConfig, evolve
from evokit.evolve.edits import ProceduralProposer
from evokit.evolve.review import PlanReviewer
from evokit.lineage import LineageStore
from evokit.plan import Plan, Step
from evokit.seeds import make_seeds
from evokit.verify import verify_task

REF = catalog_reference()


@pytest.fixture(scope="module")
def seed_dirs(tmp_path_factory):
    out = tmp_path_factory.mktemp("seeds")
    make_seeds(4, 0, out, progress=False)
    return sorted(p for p in out.iterdir() if p.name.startswith("seed-"))


def core(store: LineageStore) -> set[tuple]:
    return {(e.lineage, e.generation, e.content_hash, e.parent, e.direction) for e in store.envs()}


def test_evolved_environments_reverify_and_index_agrees(seed_dirs, tmp_path):
    """Every stored environment passes all three verifiers again from scratch; index and folders agree."""
    store = evolve(seed_dirs[:2], tmp_path / "store", EvolveConfig(generations=3), progress=False)
    envs = store.envs()
    assert len(envs) >= 2 + 2 * 2  # seeds plus most generations
    assert store.check() == []
    for e in envs:
        assert verify_task(store.path(e)).passed, e
    by_lineage = {}
    for e in envs:
        by_lineage.setdefault(e.lineage, []).append(e)
    for chain in by_lineage.values():  # each child names its parent by content hash
        chain.sort(key=lambda e: e.generation)
        for parent, child in zip(chain, chain[1:], strict=False):
            assert child.parent == parent.content_hash and child.generation == parent.generation + 1
            assert child.data["difficulty"]["total"] > parent.data["difficulty"]["total"]


@pytest.mark.parametrize(("direction", "term"), [("length", "length"), ("scenario", "scenario_term"),
                                                 ("skill", "skill_term")])
def test_pinned_direction_raises_its_own_term(seed_dirs, tmp_path, direction, term):
    """length raises L; scenario raises the scenario term; skill raises the skill term (EE's directions)."""
    store = evolve(seed_dirs[:2], tmp_path / direction, EvolveConfig(generations=2, direction=direction),
                   progress=False)
    children = [e for e in store.envs() if e.generation > 0]
    assert children and all(e.direction == direction for e in children)
    for e in children:
        parent = next(p for p in store.envs() if p.content_hash == e.parent)
        assert e.data["difficulty"][term] > parent.data["difficulty"][term], (e.lineage, e.generation)
        if direction == "skill":
            assert e.data["difficulty"]["scenario_term"] == pytest.approx(parent.data["difficulty"]["scenario_term"])
            assert e.data["difficulty"]["length"] == parent.data["difficulty"]["length"]


@pytest.mark.parametrize("effort", ["low", "high", "max"])
def test_effort_bounds_the_edit(effort):
    """low edits touch one pair; high edits one contiguous span; max may touch several spans."""
    import random

    plan = Plan(tuple(Step(s, k) for s, k in [("access-log", "topk-count"), ("csv-ledger", "group-sum"),
                                              ("jsonl-events", "distinct-values"), ("tsv-inventory", "sum-field")]))
    prop, rev = ProceduralProposer(REF), PlanReviewer(REF)
    spans = []
    for i in range(12):
        for direction in ("length", "scenario", "skill"):
            edit = prop.propose(plan, direction, effort, seed=1, rng=random.Random(i))
            if edit is None:
                continue
            assert rev.review(plan, edit.plan, direction, effort, seed=1) == [], (direction, edit)
            c = list(edit.changed)
            if effort == "low":
                assert len(c) == 1
            if effort == "high":
                assert c == list(range(c[0], c[-1] + 1))
            spans.append(c)
    assert spans
    if effort == "max":
        assert any(len(c) > 1 and c != list(range(c[0], c[-1] + 1)) for c in spans)


def test_reviewer_rejects_with_reasons():
    """Wrong kind of edit, too wide for the effort, not harder, or a duplicate: each gets a reason."""
    a = Plan((Step("access-log", "topk-count"), Step("csv-ledger", "group-sum")))
    rev = PlanReviewer(REF)
    swapped = Plan((Step("tsv-inventory", "distinct-values"), Step("csv-ledger", "group-sum")))
    assert any(r.startswith("direction") for r in rev.review(a, swapped, "skill", "high", seed=0))
    two = Plan((Step("access-log", "max-record"), Step("csv-ledger", "max-record")))
    assert any(r.startswith("effort") for r in rev.review(a, two, "skill", "low", seed=0))
    easier = Plan((Step("access-log", "topk-count"), Step("csv-ledger", "count-records")))
    reasons = rev.review(a, easier, "skill", "low", seed=0)
    assert any(r.startswith("harder") for r in reasons) or pytest.fail(reasons)
    assert any(r.startswith("novel") for r in rev.review(a, two, "skill", "high", seed=0, seen={two.to_json()}))


def test_sigkill_then_resume_gives_the_same_store(seed_dirs, tmp_path):
    """Kill `evokit evolve` with SIGKILL mid-run, run the same command again: same store as uninterrupted."""
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    for s in seed_dirs[:3]:
        os.symlink(s, seeds / s.name)
    cmd = [sys.executable, "-m", "evokit.cli", "evolve", "--seeds", str(seeds), "--generations", "4",
           "--out", str(tmp_path / "killed")]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    index = tmp_path / "killed" / "index.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not index.exists() or index.read_text().count('"kind": "env"') < 6):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = index.read_text().count('"kind": "env"')
    assert 6 <= partial < 3 * 5, "the kill must land mid-run"
    subprocess.run(cmd, check=True, capture_output=True)
    full = evolve(sorted(seeds.iterdir()), tmp_path / "clean", EvolveConfig(generations=4), progress=False)
    killed = LineageStore(tmp_path / "killed")
    assert core(killed) == core(full)
    assert killed.check() == []
    assert not list((tmp_path / "killed").glob(".tmp-*")) and not list((tmp_path / "killed").glob(".work-*"))
    assert sorted(p.name for p in (tmp_path / "killed" / "tasks").iterdir()) == \
        sorted(p.name for p in (tmp_path / "clean" / "tasks").iterdir())


def test_resume_refuses_other_parameters(seed_dirs, tmp_path):
    """Resuming a store with different parameters is a clear error (it would mix two runs)."""
    from evokit.lineage import StoreError

    evolve(seed_dirs[:1], tmp_path / "s", EvolveConfig(generations=1), progress=False)
    with pytest.raises(StoreError, match="effort"):
        evolve(seed_dirs[:1], tmp_path / "s", EvolveConfig(generations=1, effort="low"), progress=False)
