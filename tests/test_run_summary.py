"""evokit.run_summary on the rows of real short training runs (EL over an evolved store, rollouts in sandboxes).

Every number of the summary, which reads ``steps.jsonl``, is recomputed here from the other file the
run writes, ``rollouts.jsonl`` (one row per episode, with its reward), with pass@k taken as the share
of all k-subsets of a group that hold a pass: two records of one run, one definition each.
"""

from __future__ import annotations

import itertools
import math

import pytest

from evokit.cpu_agent.policy import PolicyConfig
from evokit.curriculum import store_envs
from evokit.evolve import EvolveConfig, evolve
from evokit.grpo import SUCCESS
from evokit.rows import read_rows
from evokit.run_summary import NO_SIGNAL_SHARE, run_report, summarize_steps, summary_lines
from evokit.seeds import make_seeds, seed_dirs
from evokit.sources import make_source
from evokit.train import TrainConfig, train


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    seeds = tmp_path_factory.mktemp("seeds")
    make_seeds(3, 0, seeds, progress=False)
    return evolve(seed_dirs(seeds), tmp_path_factory.mktemp("store"), EvolveConfig(generations=3), progress=False)


def groups_from_rollouts(path) -> list[tuple[int, list[bool]]]:
    """(step, passed per usable rollout) for each group, split where a rollout's index starts again at 0."""
    groups: list[tuple[int, list[dict]]] = []
    for r in read_rows(path):
        if r["index"] == 0:
            groups.append((r["step"], []))
        groups[-1][1].append(r)
    return [(step, [r["reward"] >= SUCCESS for r in g if not r["masked"] and r["reward"] is not None])
            for step, g in groups]


def share_of_subsets_with_a_pass(passed: list[bool], k: int) -> float:
    subsets = list(itertools.combinations(passed, k))
    return sum(any(s) for s in subsets) / len(subsets)


def test_summary_of_a_real_run_agrees_with_its_rollouts(store, tmp_path):
    cfg = TrainConfig(steps=5, tasks_per_step=2, group_size=4, eval_every=0)
    out = train(make_source("random", envs=store_envs(store)), PolicyConfig(), tmp_path / "run", cfg, progress=False)
    s = summarize_steps(read_rows(out / "steps.jsonl"))
    groups = groups_from_rollouts(out / "rollouts.jsonl")
    assert len(groups) == 5 * 2 and s.steps == 5 and s.groups == 10

    def pooled(step):
        passed = [p for st, g in groups if st == step for p in g]
        return sum(passed) / len(passed)

    assert s.window == 1  # a fifth of 5 steps
    assert s.first_pass_rate == pytest.approx(pooled(0)) and s.last_pass_rate == pytest.approx(pooled(4))
    assert s.pass_at_1 == pytest.approx(sum(sum(g) / len(g) for _, g in groups) / len(groups))
    k = max(len(g) for _, g in groups)
    at_k = [g for _, g in groups if len(g) >= k]
    assert s.k == k and s.groups_at_k == len(at_k)
    assert s.pass_at_k == pytest.approx(sum(share_of_subsets_with_a_pass(g, k) for g in at_k) / len(at_k))
    assert s.solved_share == pytest.approx(sum(all(g) for _, g in groups) / 10)
    assert s.unsolved_share == pytest.approx(sum(not any(g) for _, g in groups) / 10)
    assert s.partially_solved_share == pytest.approx(1 - s.solved_share - s.unsolved_share)
    # no replay in this source: the update's dead groups are the served groups whose rewards are all equal
    assert s.dead_share == pytest.approx(sum(len(set(g)) < 2 for _, g in groups) / 10)
    assert s.no_signal == (s.dead_share >= NO_SIGNAL_SHARE)
    lines = run_report(out)
    assert lines == summary_lines(s) and f"pass@{k} " in lines[2]
    assert any(line.startswith("warning: no learning signal") for line in lines) == s.no_signal


def test_a_run_without_learning_signal_is_reported(store, tmp_path):
    """Groups of one rollout give GRPO no advantage at all: the summary says so in a warning line."""
    cfg = TrainConfig(steps=2, tasks_per_step=2, group_size=1, eval_every=0)
    out = train(make_source("random", envs=store_envs(store)), PolicyConfig(), tmp_path / "run", cfg, progress=False)
    rows = read_rows(out / "steps.jsonl")
    assert all(r["n_steps"] == 0 for r in rows)  # the update had nothing to learn from
    s = summarize_steps(rows)
    assert s.dead_share == 1.0 and s.no_signal and s.k is None and s.pass_at_k is None
    assert math.isclose(s.pass_at_1, sum(g[0] for _, g in groups_from_rollouts(out / "rollouts.jsonl")) / 4)
    assert summary_lines(s)[-1].startswith("warning: no learning signal: 100 % of groups")
    assert "no group had two usable rollouts" in summary_lines(s)[-1]


def test_no_rows_is_one_line(tmp_path):
    assert run_report(tmp_path) == [f"{tmp_path / 'steps.jsonl'}: no rows, the run made no GRPO update"]
    with pytest.raises(ValueError, match="no steps.jsonl rows"):
        summarize_steps([])
