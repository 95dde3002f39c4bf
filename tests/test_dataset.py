"""An exported lineage store is a Harbor dataset (evokit.dataset, LineageStore.export).

Checks, with Harbor's own code: the manifest parses as a ``DatasetManifest``, its digests are the
ones ``harbor sync`` computes (nothing to update), Harbor's local dataset loader finds every task,
``harbor lint`` finds nothing; and each task's ``provenance.json`` carries the store's record
(parent, direction, effort, verdict, hack gate, LLM usage) with the parent's exported folder.
"""

from __future__ import annotations

import asyncio
import json
import shutil

from harbor.cli.sync import sync_dataset
from harbor.models.dataset.manifest import DatasetManifest
from harbor.models.job.config import DatasetConfig

from evokit.catalog import pairs
from evokit.lineage import EnvRecord, LineageStore
from evokit.plan import Plan, Step, render
from evokit.verify.harbor_lint import harbor_lint

VERDICT = {"passed": True, "rewards": {"oracle": [{"reward": 1.0}], "null": [{"reward": 0.0}]}}
GATE = [{"attempt": 1, "passed": True, "failed": [], "errors": 0, "seconds": 1.5}]
USAGE = {"calls": 3, "prompt_tokens": 1200, "completion_tokens": 300, "cost_usd": 0.0042}


def _store(tmp_path) -> LineageStore:
    """A real store: a rendered seed (generation 0) and a child rendered from a longer plan."""
    store = LineageStore(tmp_path / "store")
    (s1, k1), (s2, k2) = pairs()[0], pairs()[1]
    seed = render(Plan((Step(s1, k1),)), seed=7, dest=tmp_path / "seed")
    child = render(Plan((Step(s1, k1), Step(s2, k2))), seed=7, dest=tmp_path / "child")
    name0, h0 = store.add_task(seed)
    store.add_env(EnvRecord("L0", 0, 1, name0, h0, None, None, None, {"plan": [], "seed_dir": "seeds/x"}))
    name1, h1 = store.add_task(child)
    store.add_env(EnvRecord("L0", 1, 1, name1, h1, h0, "breadth", "small",
                            {"plan": [], "verdict": VERDICT, "hack_gate": GATE, "usage": USAGE, "attempts": 1}))
    return store


def test_export_is_a_harbor_dataset(tmp_path):
    out = tmp_path / "dataset"
    written = _store(tmp_path).export(out)
    assert [p.name for p in written] == ["L0-g00-k1", "L0-g01-k1"]

    manifest = DatasetManifest.from_toml_file(out / "dataset.toml")
    assert manifest.dataset.name == "evokit/dataset"
    assert [t.name for t in manifest.tasks] == ["evokit/L0-g00-k1", "evokit/L0-g01-k1"]
    assert {c.source for c in sync_dataset(out)} == {"unchanged"}  # Harbor's digests, already current

    configs = asyncio.run(DatasetConfig(path=out).get_task_configs())
    assert sorted(c.path.name for c in configs) == ["L0-g00-k1", "L0-g01-k1"]
    assert {p.name: harbor_lint(p) for p in written} == {p.name: [] for p in written}

    child = json.loads((out / "L0-g01-k1" / "provenance.json").read_text())
    assert (child["parent_task"], child["direction"], child["effort"]) == ("L0-g00-k1", "breadth", "small")
    assert (child["verdict"], child["hack_gate"], child["usage"]) == (VERDICT, GATE, USAGE)
    assert "plan" not in child and json.loads((out / "L0-g00-k1" / "provenance.json").read_text())["parent"] is None


def test_export_of_one_generation_and_a_stale_manifest(tmp_path):
    """One generation alone has no exported parent; a task changed after export makes ``harbor sync``
    report a new digest, so the manifest's digests are real checks."""
    out = tmp_path / "dataset"
    store = _store(tmp_path)
    assert [p.name for p in store.export(out, generation=1)] == ["L0-g01-k1"]
    assert json.loads((out / "L0-g01-k1" / "provenance.json").read_text())["parent_task"] is None
    shutil.copy(out / "L0-g01-k1" / "instruction.md", out / "L0-g01-k1" / "tests" / "extra.md")
    assert [c.source for c in sync_dataset(out)] == ["local"]
