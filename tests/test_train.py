"""The CPU learner's training loop (evokit.train.train): rows on disk, resume after a kill, a refused
resume with another configuration, a warm start as a real initial policy, GenEnv's pools.

The papers' claims about curricula (EL vs random order, the α-zone) are asserted where they are
measured: the notebooks' summaries (tests/test_notebooks_training.py).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from evokit.cpu_agent.policy import PolicyConfig
from evokit.curriculum import ELConfig, store_envs
from evokit.evolve import EvolveConfig, evolve
from evokit.genenv import GenEnvConfig, GenEnvSource
from evokit.rows import read_rows
from evokit.seeds import make_seeds, seed_dirs
from evokit.sources import make_source
from evokit.train import ResumeError, TrainConfig, final_policy, new_policy, train

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
    """Each step writes a metrics row (reward, dead/partial/masked shares, turns, D_T served, the source's summary)."""
    out = train(make_source(curriculum, envs=store_envs(store)), PolicyConfig(), tmp_path / curriculum, TINY,
                progress=False)
    rows = read_rows(out / "steps.jsonl")
    assert [r["step"] for r in rows] == list(range(4))
    for r in rows:
        assert {"mean_reward", "dead_group_share", "partially_solved_share", "masked_share", "turns", "mean_d_t",
                "mean_d_theta", "scheduler"} <= r.keys()
        assert r["source"] == curriculum and len(r["served"]) == 2
        assert all(s["n"] + s["masked"] == 4 for s in r["served"])
    assert len(read_rows(out / "rollouts.jsonl")) == 4 * 2 * 4


def test_killed_run_resumes_to_the_same_rows(store, tmp_path):
    """SIGKILL a training run mid-way; rerun: the rows equal an uninterrupted run's (timings aside)."""
    cfg = TrainConfig(steps=6, tasks_per_step=2, group_size=4, eval_every=0)
    source = make_source("el", envs=store_envs(store))
    clean = train(source, PolicyConfig(), tmp_path / "clean", cfg, progress=False)
    code = ("from evokit.train import *; from evokit.curriculum import store_envs; "
            "from evokit.sources import make_source; from evokit.cpu_agent.policy import PolicyConfig; "
            f"train(make_source('el', envs=store_envs({str(store.root)!r})), PolicyConfig(), "
            f"{str(tmp_path / 'killed')!r}, TrainConfig(steps=6, tasks_per_step=2, group_size=4, eval_every=0), "
            "progress=False)")
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    steps = tmp_path / "killed" / "steps.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and (not steps.exists() or len(read_rows(steps)) < 2):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 2 <= len(read_rows(steps)) < 6
    train(source, PolicyConfig(), tmp_path / "killed", cfg, progress=False)
    assert strip(read_rows(steps)) == strip(read_rows(clean / "steps.jsonl"))


def test_evaluating_as_it_trains_leaves_the_training_rows_as_they_were(store, tmp_path):
    """The measurement does not move what it measures (claim 5's fixed set): EL's rows with two held-out
    tasks evaluated after every update equal those of the same run without them; each evaluation row
    holds every task's pass rate and turns, and their means."""
    envs = store_envs(store)
    held_out = [envs[0].path, envs[-1].path]
    plain = train(make_source("el", envs=envs), PolicyConfig(), tmp_path / "plain", TINY, progress=False)
    cfg = dataclasses.replace(TINY, eval_every=1, eval_rollouts=2)
    evaluated = train(make_source("el", envs=envs), PolicyConfig(), tmp_path / "evaluated", cfg,
                      eval_tasks=held_out, progress=False)
    assert strip(read_rows(evaluated / "steps.jsonl")) == strip(read_rows(plain / "steps.jsonl"))
    evals = read_rows(evaluated / "evals.jsonl")
    assert [e["step"] for e in evals] == list(range(4)) and not (plain / "evals.jsonl").exists()
    for e in evals:
        assert sorted(e["tasks"]) == sorted(p.name for p in held_out)
        assert e["pass_rate"] == pytest.approx(sum(t["pass_rate"] for t in e["tasks"].values()) / 2)
        assert e["turns"] == pytest.approx(sum(t["turns"] for t in e["tasks"].values()) / 2)
        assert all(t["turns"] >= 1 for t in e["tasks"].values())


def test_resume_with_another_configuration_is_refused(store, tmp_path):
    """The τ-ablation trap: a run resumed with another EL config (or learning rate, or start weights) is a clear error,
    not a silent continuation under the old one; more steps with the same configuration (or another
    parallelism) are allowed."""
    cfg = dataclasses.replace(TINY, steps=1)
    envs = store_envs(store)
    out = train(make_source("el", envs=envs), PolicyConfig(), tmp_path / "run", cfg, progress=False)
    with pytest.raises(ResumeError, match="source.config"):
        train(make_source("el", envs=envs, config=ELConfig(tau=0.5)), PolicyConfig(), out, cfg, progress=False)
    with pytest.raises(ResumeError, match="config.learning_rate"):
        train(make_source("el", envs=envs), PolicyConfig(), out, dataclasses.replace(cfg, learning_rate=0.1), progress=False)
    with pytest.raises(ResumeError, match="init_policy"):
        train(make_source("el", envs=envs), PolicyConfig(), out, cfg, init_policy=new_policy(PolicyConfig(), 5),
              progress=False)
    train(make_source("el", envs=envs), PolicyConfig(), out, dataclasses.replace(cfg, steps=2, workers=5, groups_at_once=2),
          progress=False)  # the parallelism is not part of the identity: the rollouts do not depend on it
    assert [r["step"] for r in read_rows(out / "steps.jsonl")] == [0, 1]


def test_warm_start_is_the_initial_policy_and_the_kl_reference(store, tmp_path):
    """init_policy's weights start the run (no forged checkpoint); with β > 0 the KL is taken to them."""
    warm = new_policy(PolicyConfig(), 0)
    with torch.no_grad():
        warm.skill_bias += 0.5  # weights the fresh learner of seed 0 does not have
    cfg = dataclasses.replace(TINY, steps=1, tasks_per_step=4, beta=0.1)
    evolved = ELConfig(start_generation=1)  # the evolved environments this test's fixed seeds were checked on
    out = train(make_source("random", envs=store_envs(store), config=evolved), PolicyConfig(), tmp_path / "warm",
                cfg, init_policy=warm, progress=False)
    row = read_rows(out / "steps.jsonl")[0]
    assert row["n_steps"] > 0  # a live group: the update ran (fixed seeds, so this does not flake)
    # the first update's KL is taken before the policy moves: 0 against the warm weights it started from
    # (against the fresh learner's it would be > 0, their skill biases differ by 0.5)
    assert row["kl"] == pytest.approx(0.0, abs=1e-6)
    after = final_policy(out, PolicyConfig(), 0)
    fresh = new_policy(PolicyConfig(), 0)
    # one Adam step at lr 0.03 moves a weight by ≤ 0.03: the biases are near the warm ones, not the fresh zeros
    assert torch.allclose(after.skill_bias, warm.skill_bias, atol=0.05)
    assert not torch.allclose(after.skill_bias, fresh.skill_bias, atol=0.1)
    with pytest.raises(ValueError, match="PolicyConfig"):
        train(make_source("random", envs=store_envs(store)), PolicyConfig(dim=8), tmp_path / "bad", cfg,
              init_policy=warm, progress=False)


def test_genenv_rows_and_pools(tmp_path):
    """A short GenEnv run writes per-epoch rows (success, p̂, R_env, kept share, KL) and fills both pools."""
    cfg = TrainConfig(steps=2, tasks_per_step=2, group_size=3, eval_every=0)
    out = train(GenEnvSource(GenEnvConfig(tasks_per_batch=1)), PolicyConfig(), tmp_path / "g", cfg, progress=False)
    rows = read_rows(out / "steps.jsonl")
    assert [r["step"] for r in rows] == [0, 1]
    assert all(0 <= r["scheduler"]["success"] <= 1 and len(r["scheduler"]["p_hat"]) == 2 for r in rows)
    assert [r["scheduler"]["epoch"] for r in rows] == [1, 2]
    assert len(read_rows(out / "pools" / "d_train.jsonl")) == 2 * 2 * 3
