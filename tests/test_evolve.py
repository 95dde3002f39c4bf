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
from evokit.seeds import seed_dirs as seed_folders
from evokit.verify import verify_task

REF = catalog_reference()


@pytest.fixture(scope="module")
def seed_dirs(tmp_path_factory):
    out = tmp_path_factory.mktemp("seeds")
    make_seeds(4, 0, out, progress=False)
    return seed_folders(out)


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


def test_the_d_t_gate_is_a_parameter(seed_dirs, tmp_path):
    """Gate off: the reviewer does not reject an edit for not raising D_T (its other rules stay), the
    proposer returns edits that lower D_T as well as ones that raise it (measured over 24 proposals), and
    a store records the setting; the default keeps the gate on and the store key of earlier runs."""
    import random

    from evokit.difficulty import score
    from evokit.evolve import procedural_backend

    a = Plan((Step("access-log", "topk-count"), Step("csv-ledger", "group-sum")))
    easier = Plan((Step("access-log", "topk-count"), Step("csv-ledger", "count-records")))
    assert any(r.startswith("harder") for r in PlanReviewer(REF).review(a, easier, "skill", "low", seed=0))
    assert PlanReviewer(REF, difficulty_gate=False).review(a, easier, "skill", "low", seed=0) == []
    swapped = Plan((Step("tsv-inventory", "distinct-values"), Step("csv-ledger", "group-sum")))
    assert any(r.startswith("direction") for r in
               PlanReviewer(REF, difficulty_gate=False).review(a, swapped, "skill", "high", seed=0))
    plan = Plan(tuple(Step(s, k) for s, k in [("access-log", "topk-count"), ("csv-ledger", "group-sum"),
                                              ("jsonl-events", "distinct-values")]))
    before = score(plan, REF).total
    for gate in (True, False):
        prop = ProceduralProposer(REF, difficulty_gate=gate)
        deltas = [score(e.plan, REF).total - before for i in range(8) for d in ("length", "scenario", "skill")
                  if (e := prop.propose(plan, d, "high", seed=1, rng=random.Random(i))) is not None]
        assert deltas and (all(x > 0 for x in deltas) if gate else any(x <= 0 for x in deltas)), (gate, deltas)
    assert "difficulty_gate" not in EvolveConfig().key() and EvolveConfig(difficulty_gate=False).key()["difficulty_gate"] is False
    store = evolve(seed_dirs[:1], tmp_path / "off", EvolveConfig(generations=1, difficulty_gate=False), progress=False)
    assert len(store.envs()) == 2
    with pytest.raises(ValueError, match="difficulty_gate"):
        evolve(seed_dirs[:1], tmp_path / "mixed", EvolveConfig(generations=1, difficulty_gate=False),
               backend=procedural_backend(), progress=False)


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


def test_more_generations_or_seeds_extend_a_store_to_the_direct_run(seed_dirs, tmp_path):
    """A finished 3-generation store run again with 5 generations ends with the records, task folders and
    config of a direct 5-generation run (clock fields aside); a finished 1-seed store run again with 2
    seeds ends as a direct 2-seed run. Every choice is keyed by (seed, lineage, generation), so the
    extension asks the same questions a direct run asks after generation 3."""
    import json

    from store_support import timeless_records

    def same(a: LineageStore, b: LineageStore) -> None:
        assert timeless_records(a.records()) == timeless_records(b.records())
        assert sorted(p.name for p in (a.root / "tasks").iterdir()) == sorted(p.name for p in (b.root / "tasks").iterdir())
        assert json.loads((a.root / "config.json").read_text()) == json.loads((b.root / "config.json").read_text())

    short = evolve(seed_dirs[:2], tmp_path / "grown", EvolveConfig(generations=3), progress=False)
    assert max(e.generation for e in short.envs()) == 3
    grown = evolve(seed_dirs[:2], tmp_path / "grown", EvolveConfig(generations=5), progress=False)
    direct = evolve(seed_dirs[:2], tmp_path / "direct", EvolveConfig(generations=5), progress=False)
    assert max(e.generation for e in direct.envs()) == 5
    same(grown, direct)

    evolve(seed_dirs[:1], tmp_path / "wider", EvolveConfig(generations=2), progress=False)
    wider = evolve(seed_dirs[:2], tmp_path / "wider", EvolveConfig(generations=2), progress=False)
    same(wider, evolve(seed_dirs[:2], tmp_path / "both", EvolveConfig(generations=2), progress=False))
    assert len(wider.lineages()) == 2


def test_an_extension_that_would_change_the_store_is_refused(seed_dirs, tmp_path):
    """Fewer generations than the store holds, a new seed that sorts before a stored one (it would
    rename that lineage), or a changed seed, are refused with the reason; the store is left as it was."""
    from evokit.lineage import StoreError

    evolve(seed_dirs[1:2], tmp_path / "s", EvolveConfig(generations=2), progress=False)
    before = (tmp_path / "s" / "index.jsonl").read_text()
    with pytest.raises(StoreError, match=r"generations 1 < 2"):
        evolve(seed_dirs[1:2], tmp_path / "s", EvolveConfig(generations=1), progress=False)
    with pytest.raises(StoreError, match="is the seed of lineage L000-seed-0001 but would start lineage L001-seed-0001"):
        evolve(seed_dirs[:2], tmp_path / "s", EvolveConfig(generations=2), progress=False)
    assert (tmp_path / "s" / "index.jsonl").read_text() == before
    assert '"generations": 2' in (tmp_path / "s" / "config.json").read_text()

    import shutil

    changed = tmp_path / "seeds" / seed_dirs[0].name
    shutil.copytree(seed_dirs[0], changed)
    evolve([changed], tmp_path / "c", EvolveConfig(generations=1), progress=False)
    with open(changed / "instruction.md", "a") as f:
        f.write("\nOne more sentence.\n")
    with pytest.raises(StoreError, match="L000-seed-0000 was grown from another seed"):
        evolve([changed], tmp_path / "c", EvolveConfig(generations=1), progress=False)


# ------------------------------------------------------------------ pinned outputs for fixed seeds
# Pinned so that the proposer's speed-ups (score before render, a shared RenderCache, memoised catalog
# lookups) leave every choice, and so every stored byte, unchanged.
PINNED_PROPOSALS = "725fb99df323aa949cb3a5ec787a4de75a2b4353db3832c14cb12e778946d369"
PINNED_STORES = {
    "high": (EvolveConfig(generations=3), 3, [
        ("L000-seed-0000", 1, "c4c2898e74cf1c6214312797e4869e9d4ab8227489431f40c664c1de4a141875"),
        ("L000-seed-0000", 2, "9af8a42e315b9d19506ba78a812abc15a4eb2f7227598b47bf6b98173dc7d280"),
        ("L000-seed-0000", 3, "21ddc695b5414e09987d703fe103f6800b6a4248f426beda0192166278516e7e"),
        ("L001-seed-0001", 1, "d57b604343a716edb6ca3d10e7473e53a737ddefa966b2e0a2fb3c530403197e"),
        ("L001-seed-0001", 2, "4f5ba77cfea7dfded0801f31404b1095088a24c9cadbda6f10ebb3042a5f5ccc"),
        ("L001-seed-0001", 3, "45709cd88595d8b390e1f236587d4d5c4450c4474f1de259bd23fc9912ae609d"),
        ("L002-seed-0002", 1, "872459a528f49d51d3653e3384ed9facfc8fbf243a63556dec29f4af706d5121"),
        ("L002-seed-0002", 2, "6cadec7ab4fc39569073834fa20e7fed7dd1ab24fbb4d5a84fcd8253e5722f2a"),
        ("L002-seed-0002", 3, "c422797fcaa06c6a9bbec0133a361f9403a55866d5558eb5de89347dd0589453"),
    ]),
    "low": (EvolveConfig(generations=2, effort="low"), 2, [
        ("L000-seed-0000", 1, "8b14481dcc37ba83717f79a4ddad80bfd63db3bb36a3d6e3e4fac232eed67533"),
        ("L000-seed-0000", 2, "3ec8109978017529bbf33c12aaf0cb4cdd2c540020fa34da55811207cf96c85a"),
        ("L001-seed-0001", 1, "7006702cb2f3509ccf4db188a12eeff03610bc72ec8f4297ebcc777b1d3b1d07"),
        ("L001-seed-0001", 2, "4a699e3277c58affb86fecc0e9e5f0d434a9328db35cd824ea69557814c71306"),
    ]),
    "max": (EvolveConfig(generations=2, effort="max"), 2, [
        ("L000-seed-0000", 1, "b0648dac19e4bd3284f00dec50c82942b53fd41c67e5fe8a00425831ae9368b5"),
        ("L000-seed-0000", 2, "11809564590790f1bdb29d07d3ea72776860fea0b4e62dac1508bf75ed7ef2ee"),
        ("L001-seed-0001", 1, "d57b604343a716edb6ca3d10e7473e53a737ddefa966b2e0a2fb3c530403197e"),
        ("L001-seed-0001", 2, "35cd05cca9c51a8f6b4707d7b24123d71f560d8afd6d8a954c0d4dbf2027d96b"),
    ]),
}


def test_procedural_proposer_choices_are_pinned():
    """For fixed seed plans and rngs, the edit chosen for every direction × effort is the recorded one
    (sha256 over the chosen plans and changed positions). Pure Python: no sandbox."""
    import hashlib
    import json
    import random

    from evokit.evolve.edits import DIRECTIONS, EFFORTS
    from evokit.seeds import sample_plan, seed_specs

    prop = ProceduralProposer(REF)
    chosen = []
    for spec in seed_specs(4, 7):
        rng = random.Random(f"golden:{spec.index}")
        render_seed = rng.randrange(2**31)
        plan = sample_plan(spec, rng, render_seed)
        for d in DIRECTIONS:
            for e in EFFORTS:
                edit = prop.propose(plan, d, e, seed=render_seed, rng=random.Random(f"golden:{spec.index}:{d}:{e}"))
                chosen.append(None if edit is None else [edit.plan.to_json(), list(edit.changed)])
    assert hashlib.sha256(json.dumps(chosen).encode()).hexdigest() == PINNED_PROPOSALS


@pytest.mark.parametrize("name", sorted(PINNED_STORES))
def test_fixed_seed_gives_the_pinned_store(seed_dirs, tmp_path, name):
    """Seeds make_seeds(4, 0) evolved with a fixed config store exactly the recorded environments
    (content hashes per lineage and generation)."""
    cfg, n, expected = PINNED_STORES[name]
    store = evolve(seed_dirs[:n], tmp_path / name, cfg, progress=False)
    got = sorted((e.lineage, e.generation, e.content_hash) for e in store.envs() if e.generation)
    assert got == sorted(expected)


def test_n_environments_per_generation_and_el_walks_them(seed_dirs, tmp_path):
    """per_generation = 2: each generation holds E_{i,g,1} and E_{i,g,2}, siblings of the parent E_{i,g-1,1},
    distinct from each other and from the lineage; EL (fed p̂ = 1) walks them in order, so its k < N branch runs;
    a second call resumes to the same store."""
    import numpy as np

    from evokit.curriculum import store_envs
    from evokit.grpo import GroupStats
    from evokit.sources import GroupResult, Run, make_source

    cfg = EvolveConfig(generations=2, per_generation=2)
    store = evolve(seed_dirs[:1], tmp_path / "store", cfg, progress=False)
    envs = store.envs()
    ids = sorted((e.generation, e.k) for e in envs)
    assert ids == [(0, 1), (1, 1), (1, 2), (2, 1), (2, 2)], ids
    first = {e.generation: e for e in envs if e.k == 1}
    for e in envs:
        if e.generation:
            assert e.parent == first[e.generation - 1].content_hash
    assert len({e.content_hash for e in envs}) == len(envs)
    index = (tmp_path / "store" / "index.jsonl").read_text()
    assert sorted((e.generation, e.k) for e in evolve(seed_dirs[:1], tmp_path / "store", cfg,
                                                      progress=False).envs()) == ids
    assert (tmp_path / "store" / "index.jsonl").read_text() == index

    src = make_source("el", envs=store_envs(store))
    state, walked = src.init(Run(8)), []
    while not src.done(state):
        state, refs = src.sample(state, np.random.default_rng(0), 1)
        walked.append(refs[0].key[1:])
        state = src.update(state, [GroupResult(refs[0], GroupStats((1.0,) * 8, 0))])
    assert walked == ids  # starts at the seed (generation 0), then (1, 1) → (1, 2) within generation 1


def test_per_generation_is_validated():
    with pytest.raises(ValueError, match="per_generation"):
        EvolveConfig(per_generation=0)
    assert "per_generation" not in EvolveConfig().key()  # stores made before the field resume unchanged
    assert EvolveConfig(per_generation=2).key()["per_generation"] == 2
