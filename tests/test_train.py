"""The training loop: rows on disk, resume after a kill, GenEnv's pools.

The papers' claims about curricula (EL vs random order, the α-zone) are asserted where they are
measured: the notebooks' summaries (tests/test_notebooks_training.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from evokit.evolve import EvolveConfig, evolve
from evokit.rows import read_rows
from evokit.seeds import make_seeds, seed_dirs
from evokit.train import GenEnvConfig, TrainConfig, train_curriculum, train_genenv

TINY = TrainConfig(steps=4, tasks_per_step=2, group_size=4, eval_every=0)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    seeds = tmp_path_factory.mktemp("seeds")
    make_seeds(3, 0, seeds, progress=False)
    dirs = seed_dirs(seeds)
    return evolve(dirs, tmp_path_factory.mktemp("store"), EvolveConfig(generations=3), progress=False)


def strip(rows):
    drop = {"seconds", "grad_norm", "turns_seconds"}
    return [{k: v for k, v in r.items() if k not in drop} for r in rows]


@pytest.mark.parametrize("curriculum", ["el", "random", "dt"])
def test_rows_are_written_per_step(store, tmp_path, curriculum):
    """Each step writes a metrics row (reward, dead/partial shares, turns, D_T served, scheduler)."""
    out = train_curriculum(store, curriculum, tmp_path / curriculum, TINY, progress=False)
    rows = read_rows(out / "steps.jsonl")
    assert [r["step"] for r in rows] == list(range(4))
    for r in rows:
        assert {"mean_reward", "dead_group_share", "partially_solved_share", "turns", "mean_d_t", "scheduler"} <= r.keys()
        assert len(r["served"]) == 2
    assert len(read_rows(out / "rollouts.jsonl")) == 4 * 2 * 4


def test_killed_run_resumes_to_the_same_rows(store, tmp_path):
    """SIGKILL a training run mid-way; rerun: the rows equal an uninterrupted run's (timings aside)."""
    cfg = TrainConfig(steps=6, tasks_per_step=2, group_size=4, eval_every=0)
    clean = train_curriculum(store, "el", tmp_path / "clean", cfg, progress=False)
    code = ("import sys; from evokit.train import *; from evokit.lineage import LineageStore; "
            f"train_curriculum(LineageStore({str(store.root)!r}), 'el', {str(tmp_path / 'killed')!r}, "
            "TrainConfig(steps=6, tasks_per_step=2, group_size=4, eval_every=0), progress=False)")
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    steps = tmp_path / "killed" / "steps.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and (not steps.exists() or len(read_rows(steps)) < 2):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 2 <= len(read_rows(steps)) < 6
    train_curriculum(store, "el", tmp_path / "killed", cfg, progress=False)
    assert strip(read_rows(steps)) == strip(read_rows(clean / "steps.jsonl"))


def test_genenv_rows_and_pools(tmp_path):
    """A short GenEnv run writes per-epoch rows (success, p̂, R_env, kept share, KL) and fills both pools."""
    out = train_genenv(tmp_path / "g", TrainConfig(eval_every=0),
                       GenEnvConfig(epochs=2, batches_per_epoch=2, tasks_per_batch=1, rollouts=3), progress=False)
    rows = read_rows(out / "steps.jsonl")
    assert [r["step"] for r in rows] == [0, 1]
    assert all(0 <= r["success"] <= 1 and len(r["p_hat"]) == 2 for r in rows)
    assert len(read_rows(out / "pools" / "d_train.jsonl")) == 2 * 2 * 3
