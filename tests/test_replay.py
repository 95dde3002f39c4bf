"""evokit.curricula.replay: a curriculum added as one module ("replay the most recently failed lineage", PLR-style).

What is checked: the rule on its own (a failure is replayed next, most recent first; a pass takes the
lineage off the list), and that the source runs unchanged in both training loops — the CPU learner's
(evokit.train.train, real sandboxes) and the TRL path (evokit.trl_trainer.train_llm, a tiny model
with a scripted sampler, since this test is about the curriculum's plumbing, not about learning) —
where each step after a failure serves the failed environment first (replay_prob = 1).
"""

from __future__ import annotations

import os

os.environ.update(HARBOR_TELEMETRY="0", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TRL_EXPERIMENTAL_SILENCE="1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import trl  # noqa: E402,F401  (required: a missing TRL must fail, not skip)
from trl_support import TINY, scripted_sampler  # noqa: E402

from evokit import trl_trainer as T  # noqa: E402
from evokit.cpu_agent.policy import PolicyConfig  # noqa: E402
from evokit.curricula.replay import ReplayFailed  # noqa: E402
from evokit.curriculum import lineage_envs  # noqa: E402
from evokit.grpo import GroupStats  # noqa: E402
from evokit.plan import Plan, Step, render  # noqa: E402
from evokit.rows import read_rows  # noqa: E402
from evokit.sources import GroupResult, Run, TaskRef, make_source, source_names  # noqa: E402
from evokit.train import TrainConfig, train  # noqa: E402


@pytest.fixture(scope="module")
def envs(tmp_path_factory):
    """Two lineages of one-step text-list tasks (other data each): A = (g1, g2), B = (g1)."""
    root = tmp_path_factory.mktemp("replay-tasks")
    t = [render(Plan((Step("text-list", "distinct-values"),)), s, root / f"t{s}") for s in range(3)]
    return lineage_envs({"A": t[:2], "B": t[2:]})


def result(ref, solved: int, n: int = 4) -> GroupResult:
    return GroupResult(ref, GroupStats((1.0,) * solved + (0.0,) * (n - solved), 0))


def test_the_rule(envs):
    """A failure is served again next (most recent first); a pass takes the lineage off the replay list."""
    assert "replay" in source_names() and isinstance(make_source("replay", envs=envs), ReplayFailed)
    src = ReplayFailed(envs, replay_prob=1.0)
    state = src.init(Run(4))
    rng = np.random.default_rng(0)
    state, refs = src.sample(state, rng, 2)  # nothing failed yet: uniform
    a = next(e for e in envs if e.lineage == "A")
    b = next(e for e in envs if e.lineage == "B")
    ref_a = TaskRef((a.lineage, a.generation, a.k), a.path)
    ref_b = TaskRef((b.lineage, b.generation, b.k), b.path)
    state = src.update(state, [result(ref_a, 0), result(ref_b, 1)])  # both fail, B last in the batch: B first
    state, refs = src.sample(state, rng, 3)
    assert [r.key for r in refs[:2]] == [ref_b.key, ref_a.key]
    state = src.update(state, [result(ref_b, 4)])  # B passes: only A is left to replay
    assert [f[0] for f in state.failed] == ["A"]
    assert src.summary(state)["most_recent_failure"] == list(ref_a.key)
    with pytest.raises(ValueError, match="replay_prob"):
        ReplayFailed(envs, replay_prob=2.0).init(Run(4))


def assert_failures_replayed(rows, min_replays: int = 1) -> None:
    """In every step after one that left a failed lineage, the first served task is that lineage's failure."""
    replayed = 0
    for before, after in zip(rows, rows[1:], strict=False):
        failure = before["scheduler"]["most_recent_failure"]
        if failure is not None:
            assert after["served"][0]["env"] == failure
            replayed += 1
    assert replayed >= min_replays
    assert rows[-1]["scheduler"]["updates"] == sum(len(r["served"]) for r in rows)


def test_runs_in_the_cpu_loop(envs, tmp_path):
    """evokit.train.train drives the new source as it is: rows per step, failures replayed."""
    cfg = TrainConfig(steps=4, tasks_per_step=2, group_size=4, eval_every=0)
    out = train(ReplayFailed(envs, replay_prob=1.0), PolicyConfig(), tmp_path / "cpu", cfg, progress=False)
    rows = read_rows(out / "steps.jsonl")
    assert [r["source"] for r in rows] == ["replay"] * 4
    assert_failures_replayed(rows)


@pytest.mark.usefixtures("one_torch_thread")
def test_runs_in_the_trl_path(envs, tmp_path):
    """evokit.trl_trainer.train_llm drives the same source as it is (tiny model, scripted sampler)."""
    tok = T.prepare_tokenizer(T.smollm2_tokenizer())
    cfg = T.LLMTrainConfig(steps=3, generation_kwargs=scripted_sampler(tok, (envs[0].path / "instruction.md")
                                                                       .read_text()), **TINY)
    trainer = T.train_llm(T.tiny_llama(tok), ReplayFailed(envs, replay_prob=1.0), tmp_path / "trl", cfg,
                          tokenizer=tok, progress=False)
    rows = read_rows(tmp_path / "trl" / "steps.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert trainer.scheduler.source.name == "replay"
    assert_failures_replayed(rows)
