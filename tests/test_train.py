"""The training loop: rows on disk, resume after a kill, and (slow) the curricula's claims.

The fast tests use tiny sizes; the claims of EE and GenEnv at smoke scale are marked slow
(they train for minutes) and are also what the notebooks of issue 6 run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from evokit.evolve import EvolveConfig, evolve
from evokit.seeds import make_seeds
from evokit.train import GenEnvConfig, TrainConfig, read_rows, train_curriculum, train_genenv

TINY = TrainConfig(steps=4, tasks_per_step=2, group_size=4, eval_every=0)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    seeds = tmp_path_factory.mktemp("seeds")
    make_seeds(3, 0, seeds, progress=False)
    dirs = sorted(p for p in seeds.iterdir() if p.name.startswith("seed-"))
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


@pytest.mark.slow
def test_el_keeps_more_groups_partially_solved_than_random(store, tmp_path):
    """EE: over the first 50 steps EL serves a larger share of partially solved groups than random order."""
    cfg = TrainConfig(steps=50, tasks_per_step=2, group_size=8, eval_every=0)
    shares = {}
    for cur in ("el", "random"):
        rows = read_rows(train_curriculum(store, cur, tmp_path / cur, cfg, progress=False) / "steps.jsonl")
        shares[cur] = float(np.mean([r["partially_solved_share"] for r in rows]))
    (tmp_path / "shares.json").write_text(json.dumps(shares))
    assert shares["el"] > shares["random"], shares


@pytest.mark.slow
def test_learning_simulator_settles_in_the_alpha_zone(tmp_path):
    """GenEnv: the learning simulator's success enters [0.4, 0.6] and stays; the random one's does not."""
    g = GenEnvConfig(epochs=14, batches_per_epoch=4, tasks_per_batch=2, rollouts=5)
    runs = {}
    for learning in (True, False):
        out = train_genenv(tmp_path / str(learning), TrainConfig(eval_every=0),
                           GenEnvConfig(**{**g.__dict__, "learning": learning}), progress=False)
        runs[learning] = [r["success"] for r in read_rows(out / "steps.jsonl")]
    late_learning, late_random = np.mean(runs[True][-4:]), np.mean(runs[False][-4:])
    assert 0.4 <= late_learning <= 0.6, runs
    assert not 0.4 <= late_random <= 0.6, runs
