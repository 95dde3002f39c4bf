"""evokit.training: one GRPO config, one steps.jsonl row and one trainer interface for the CPU learner and an LLM.

What is checked:

1. The shared GRPO fields are one record: ``TrainConfig`` (CPU loop) and ``LLMTrainConfig`` (TRL path)
   both extend ``GRPOSettings``, spell its fields alike, keep their own defaults for the scale
   (learning rate), and refuse an out-of-range shared field by name; the TRL path hands ``clip`` to
   TRL as ``epsilon``.
2. ``make_trainer`` picks the CPU learner for ``"cpu"`` and TRL for an LLM spec, both a ``Trainer``.
3. The curricula study runs with ``policy="tiny"``: the tiny random Llama (SmolLM2's tokenizer) through
   TRL on CPU, a few GRPO steps per run; the CPU learner, through its trainer, trains on each run's
   same store and curriculum. Both runs' rows carry every field of the shared row (``STEP_FIELDS``, served entries ``SERVED_FIELDS``)
   with the same JSON types, count steps from 0, serve the same first task with the same D_T, and
   give the study's frame and summary the same columns and keys. A random tiny model never calls
   the tool, so its groups all fail: this is the plumbing, not learning. Two runs: the summary's intervals
   need two.
"""

from __future__ import annotations

import os

os.environ.update(HARBOR_TELEMETRY="0", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TRL_EXPERIMENTAL_SILENCE="1")

import pytest  # noqa: E402
import trl  # noqa: E402,F401  (required: a missing TRL must fail, not skip)

from evokit.curriculum import store_envs  # noqa: E402
from evokit.rows import read_rows  # noqa: E402
from evokit.sources import make_source  # noqa: E402
from evokit.studies.curricula import (  # noqa: E402
    CurriculaStudy,
    curricula_frame,
    curricula_study,
    curricula_summary,
)
from evokit.train import TrainConfig  # noqa: E402
from evokit.training.settings import GRPO_FIELDS, GRPOSettings, SettingsError  # noqa: E402
from evokit.training.steps import SERVED_FIELDS, STEP_FIELDS  # noqa: E402
from evokit.training.trainers import CPUTrainer, LLMTrainer, Trainer, make_trainer  # noqa: E402
from evokit.trl_trainer import LLMTrainConfig, SetupError, grpo_config  # noqa: E402


def test_one_config_for_the_shared_fields(tmp_path):
    cpu, llm = TrainConfig(), LLMTrainConfig()
    assert isinstance(cpu, GRPOSettings) and isinstance(llm, GRPOSettings)
    assert GRPO_FIELDS == ("steps", "tasks_per_step", "group_size", "learning_rate", "beta", "clip", "seed")
    assert cpu.learning_rate == 0.03 and llm.learning_rate == 1e-6  # each loop's scale
    assert TrainConfig(group_size=4, seed=3).grpo() == GRPOSettings(steps=50, group_size=4, learning_rate=0.03, seed=3)
    with pytest.raises(SettingsError, match="beta=-1"):
        TrainConfig(beta=-1)
    with pytest.raises(SetupError, match="clip=1.5"):  # the TRL path's error type, the same message
        LLMTrainConfig(clip=1.5)
    args = grpo_config(LLMTrainConfig(device="cpu", generation="transformers", clip=0.3, beta=0.04,
                                      learning_rate=2e-6), tmp_path)
    assert (args.epsilon, args.beta, args.learning_rate) == (0.3, 0.04, 2e-6)


def test_make_trainer_picks_the_loop():
    cpu, llm = make_trainer("cpu"), make_trainer("tiny", llm=LLMTrainConfig(max_turns=1))
    assert isinstance(cpu, CPUTrainer) and isinstance(llm, LLMTrainer)
    assert isinstance(cpu, Trainer) and isinstance(llm, Trainer) and (cpu.policy, llm.policy) == ("cpu", "tiny")
    assert cpu.config(steps=3).steps == 3 and cpu.config(steps=3).learning_rate == 0.03
    assert llm.config(group_size=4) == LLMTrainConfig(max_turns=1, group_size=4)
    with pytest.raises(TypeError, match="max_turns"):  # only the shared fields go through config()
        cpu.config(max_turns=2)


TINY_STUDY = dict(runs=2, n_lineages=1, generations=1, per_generation=1, steps=2, group_size=2, tasks_per_step=1,
                  candidate_steps=(1, 1), attempts=1, curricula=("el",))
TINY_LLM = dict(max_completion_length=32, max_turns=1, command_timeout_sec=2.0, cpu_threads=1, workers=2)


def _types(row: dict, fields) -> dict:
    return {k: type(row[k]).__name__ for k in fields if row[k] is not None}


@pytest.mark.usefixtures("one_torch_thread")
def test_curricula_study_with_either_policy(tmp_path):
    """The study with ``policy="tiny"``; beside it, the CPU learner trained through its trainer on each run's same
    store and curriculum, in the study's layout (the default study's own path runs in test_notebooks_training)."""
    study = CurriculaStudy(**TINY_STUDY, policy="tiny", llm=TINY_LLM)
    curricula_study(tmp_path / "tiny", study, progress=False)
    cpu_trainer = make_trainer("cpu")
    for run in study.run_seeds():
        envs = store_envs(tmp_path / "tiny" / f"run-{run}" / "store")
        cpu_trainer.train(make_source("el", envs=envs), tmp_path / "cpu" / f"run-{run}" / "train" / "el",
                          cpu_trainer.config(steps=study.steps, tasks_per_step=study.tasks_per_step,
                                             group_size=study.group_size, seed=run))
    rows, summaries = {}, {}
    for policy in ("cpu", "tiny"):
        rows[policy] = read_rows(tmp_path / policy / "run-1" / "train" / "el" / "steps.jsonl")
        frame = curricula_frame(tmp_path / policy)
        summaries[policy] = (list(frame.columns), curricula_summary(frame, first=2))
    cpu, llm = rows["cpu"], rows["tiny"]
    assert [r["step"] for r in cpu] == [r["step"] for r in llm] == [0, 1]
    for a, b in zip(cpu, llm, strict=True):
        assert STEP_FIELDS.keys() <= a.keys() and STEP_FIELDS.keys() <= b.keys()
        assert _types(a, STEP_FIELDS) == _types(b, STEP_FIELDS)
        for s, t in zip(a["served"], b["served"], strict=True):
            assert s.keys() == t.keys() == SERVED_FIELDS.keys()
        assert (a["source"], b["source"], a["replayed"], b["replayed"]) == ("el", "el", 0, 0)
        assert a["scheduler"].keys() == b["scheduler"].keys()
    assert cpu[0]["served"][0]["env"] == llm[0]["served"][0]["env"]  # same seeds, same store, same first task
    assert cpu[0]["mean_d_t"] == pytest.approx(llm[0]["mean_d_t"])
    assert all(r["n_groups"] == 1 and r["served"][0]["n"] == 2 for r in llm)
    (cols_cpu, s_cpu), (cols_llm, s_llm) = summaries["cpu"], summaries["tiny"]
    assert cols_cpu == cols_llm and s_cpu.keys() == s_llm.keys()
    assert s_cpu["curricula"]["el"].keys() == s_llm["curricula"]["el"].keys()
    assert (tmp_path / "tiny" / "run-1" / "train" / "el" / "trl").is_dir()  # TRL's own checkpoints
