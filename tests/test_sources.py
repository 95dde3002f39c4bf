"""Tests for evokit.sources and evokit.curricula: the contract every registered task source keeps, and a curriculum
added from outside evokit (an installed plug-in) reaching both training loops from the CLI.

The contract runs over ``source_names()``, so a source registered tomorrow is tested without an
edit here (a source that needs inputs the test cannot derive fails until it gets a factory below).
The group results fed back are inputs made here (pass rates chosen per task), not a learner: the
test is about the protocol, not about learning.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from evokit.curricula import source_from, takes_envs
from evokit.grpo import GroupStats
from evokit.plan import Plan, Step, render
from evokit.seeding import step_rng
from evokit.sources import GroupResult, Run, SourceError, TaskSource, source_names

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def task_dirs(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("source-tasks")
    plans = [Plan((Step("text-list", "distinct-values"),)), Plan((Step("csv-ledger", "filter-rows"),))]
    return [render(plans[i % 2], i, root / f"t{i}") for i in range(3)]


def _coevolution(tmp_path: Path, task_dirs: list[Path]):
    from evokit.evolve.coevolution import Coevolution, CoevolutionConfig

    return Coevolution(tuple(task_dirs[:1]), tmp_path / "co-store", (1,), config=CoevolutionConfig(refresh_every=1))


#: Sources that take no environments and need inputs of their own (the rest are built by source_from).
FACTORIES = {
    "coevolution": _coevolution,
    "genenv": lambda tmp_path, task_dirs: source_from("genenv"),
    "none": lambda tmp_path, task_dirs: source_from("none"),
}


#: Options a source over evolved environments needs beyond them (the matched control: EL's generations
#: per step and slot; a task list's tasks are generation 1).
OPTIONS = {"matched": {"schedule": ((1, 1),) * 4}}


def build(name: str, tmp_path: Path, task_dirs: list[Path]) -> TaskSource:
    if takes_envs(name):
        return source_from(name, tasks=task_dirs, **OPTIONS.get(name, {}))
    assert name in FACTORIES, f"source {name!r} takes no envs: give the contract test a factory for it"
    return FACTORIES[name](tmp_path, task_dirs)


def _results(refs, step: int) -> list[GroupResult]:
    """One group per served task, pass rates varying with the task and the step (0/4 … 4/4)."""
    out = []
    for i, ref in enumerate(refs):
        solved = (i + step) % 5
        out.append(GroupResult(ref, GroupStats((1.0,) * solved + (0.0,) * (4 - solved), 0)))
    return out


def _serve(source: TaskSource, run: Run, steps: int = 3, n: int = 2) -> tuple[list[list[tuple]], object]:
    state = source.init(run)
    served = []
    for t in range(steps):
        state, refs = source.sample(state, step_rng(run.seed, t), n)
        assert len(refs) == n and all(r.path is None or Path(r.path).is_dir() for r in refs)
        served.append([r.key for r in refs])
        state = source.update(state, _results(refs, t))
    return served, state


@pytest.mark.parametrize("name", source_names())
def test_every_registered_source_keeps_the_contract(name, tmp_path, task_dirs):
    """init → sample → update round trips for a few steps; the state pickles (checkpoints) and the
    pickled state serves what the live one serves; the summary is JSON; the same seed serves the
    same tasks in a fresh run, whatever folder the run writes to."""
    source = build(name, tmp_path, task_dirs)
    assert isinstance(source, TaskSource) and source.name == name
    served, state = _serve(source, Run(4, seed=3, out=tmp_path / "a"))
    json.dumps(source.summary(state))
    assert isinstance(source.done(state), bool)
    copy = pickle.loads(pickle.dumps(state))
    a = source.sample(state, step_rng(3, 99), 2)[1]
    b = source.sample(copy, step_rng(3, 99), 2)[1]
    assert [r.key for r in a] == [r.key for r in b]
    again, _ = _serve(build(name, tmp_path / "again", task_dirs), Run(4, seed=3, out=tmp_path / "b"))
    assert again == served


def test_source_from_names_what_is_wrong(tmp_path, task_dirs):
    with pytest.raises(SourceError, match="unknown task source 'nope'; choose one of .*el.*replay"):
        source_from("nope")
    with pytest.raises(SourceError, match="needs a lineage store"):
        source_from("replay")
    with pytest.raises(SourceError, match="no lineage store at"):
        source_from("el", store=tmp_path / "missing")
    with pytest.raises(SourceError, match="takes no lineage store"):
        source_from("genenv", tasks=task_dirs)
    with pytest.raises(SourceError, match="takes no option"):
        source_from("random", tasks=task_dirs, temperature=2)


PLUGIN = '''
"""A third-party curriculum: serve the environments round-robin, whatever the results."""
from dataclasses import dataclass
from typing import ClassVar

from evokit.curriculum import env_rows
from evokit.sources import TaskRef, register


@register("round-robin")
@dataclass(frozen=True)
class RoundRobin:
    envs: tuple
    name: ClassVar[str] = "round-robin"

    def init(self, run):
        return 0

    def sample(self, state, rng, n):
        rows = sorted(env_rows(self.envs), key=lambda e: (e.lineage, e.generation, e.k))
        picked = [rows[(state + i) % len(rows)] for i in range(n)]
        return state + n, [TaskRef((e.lineage, e.generation, e.k), e.path) for e in picked]

    def update(self, state, results):
        return state

    def done(self, state):
        return False

    def summary(self, state):
        return {"served": state}
'''


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory) -> dict[str, str]:
    """An installed distribution (a dist-info with an ``evokit.sources`` entry point, as pip writes
    it) whose module registers a curriculum evokit has never seen."""
    site = tmp_path_factory.mktemp("site")
    (site / "roundrobin_curriculum.py").write_text(PLUGIN)
    info = site / "roundrobin_curriculum-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: roundrobin-curriculum\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[evokit.sources]\nround-robin = roundrobin_curriculum\n")
    return {**os.environ, "PYTHONPATH": str(site), "HARBOR_TELEMETRY": "0"}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """A small evolved lineage store (2 procedural seeds × 1 generation)."""
    from evokit.evolve import EvolveConfig, evolve
    from evokit.seeds import make_seeds

    root = tmp_path_factory.mktemp("plugin-store")
    make_seeds(2, 0, root / "seeds", progress=False)
    seeds = sorted(p for p in (root / "seeds").iterdir() if (p / "task.toml").is_file())
    evolve(seeds, root / "store", EvolveConfig(generations=1, seed=0), progress=False)
    return root / "store"


def _cli(*args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evokit.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


def test_an_installed_plugin_curriculum_trains_from_the_cli_in_the_cpu_loop(plugin_env, store, tmp_path):
    """`evokit train --curriculum round-robin`: the plug-in is found through its entry point, gets the
    store's environments (it has a field ``envs``) and is driven by the CPU loop unchanged."""
    out = tmp_path / "cpu"
    r = _cli("train", "--source", "store", "--store", str(store), "--curriculum", "round-robin", "--out", str(out),
             "--steps", "2", "--group-size", "2", "--tasks-per-step", "2", "--learner", "prior", env=plugin_env)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert [row["source"] for row in rows] == ["round-robin"] * 2
    assert rows[-1]["scheduler"] == {"served": 4}


def test_an_installed_plugin_curriculum_trains_from_the_cli_in_the_trl_path(plugin_env, store, tmp_path):
    """`evokit train-llm --curriculum round-robin` with TRL's tiny model on CPU: the same plug-in
    drives the TRL path's scheduler unchanged (one GRPO step)."""
    out = tmp_path / "trl"
    env = {**plugin_env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    r = _cli("train-llm", "--model", "tiny", "--source", "store", "--store", str(store), "--curriculum",
             "round-robin", "--out", str(out), "--steps", "1", "--group-size", "2", "--tasks-per-step", "1",
             "--max-completion-length", "32", "--max-turns", "1", "--device", "cpu", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["scheduler"] == {"served": 1}


def test_a_broken_plugin_names_itself(tmp_path):
    """A plug-in whose module fails to import is named in one line, instead of breaking every source."""
    site = tmp_path / "site"
    info = site / "broken_curriculum-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "broken_curriculum.py").write_text("raise ImportError('missing dependency foo')\n")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-curriculum\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[evokit.sources]\nbroken = broken_curriculum\n")
    code = textwrap.dedent("""
        from evokit.sources import SourceError, source_names
        try:
            source_names()
        except SourceError as e:
            print(e)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(site)})
    assert "plug-in 'broken' (broken_curriculum) failed to load: ImportError: missing dependency foo" in r.stdout, r
