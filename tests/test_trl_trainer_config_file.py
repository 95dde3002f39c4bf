"""evokit.trl_trainer.config_file and the `train-llm` options TRL users expect (--config, --report-to).

What is checked:

1. A YAML file's keys become LLMTrainConfig fields or pass through to TRL's GRPOConfig; options
   typed on the command line override the file.
2. A bad file (an unknown key, a GRPOConfig field evokit sets itself, a value of the wrong kind,
   a file that is not a mapping) is one line on stderr naming the key, exit 2, no traceback.
3. `evokit train-llm --config FILE --report-to tensorboard` on the tiny random model (1 step, one
   real sandboxed task) trains, writes TensorBoard event files, and the GRPOConfig TRL saved with
   the checkpoint carries the file's pass-through field and the flags over the file's values.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.update(HARBOR_TELEMETRY="0", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TRL_EXPERIMENTAL_SILENCE="1")

import trl  # noqa: E402,F401  (required: the train extra; a missing TRL must fail, not skip)

from evokit.plan import Plan, Step, render  # noqa: E402
from evokit.trl_trainer import LLMTrainConfig, SetupError  # noqa: E402
from evokit.trl_trainer.config_file import llm_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def evokit(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "evokit.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


def test_file_fields_and_grpo_pass_through(tmp_path):
    """evokit's keys set LLMTrainConfig, GRPOConfig's pass through, flags win over the file."""
    f = tmp_path / "run.yaml"
    f.write_text("steps: 7\ngroup_size: 4\nreport_to: [tensorboard, wandb]\nlora_r: 8\n"
                 "max_grad_norm: 0.5\nwarmup_steps: 2\n")
    cfg = llm_config(f, steps=3)
    assert (cfg.steps, cfg.group_size, cfg.lora_r) == (3, 4, 8)
    assert cfg.report_to == ("tensorboard", "wandb")
    assert cfg.grpo_args == {"max_grad_norm": 0.5, "warmup_steps": 2}
    assert llm_config(None) == LLMTrainConfig()


@pytest.mark.parametrize("text, says", [
    ("steps: 2\nlearning_rat: 0.1\n", "unknown key 'learning_rat'"),
    ("max_steps: 5\n", "max_steps: evokit sets this GRPOConfig field from 'steps'"),
    ("shuffle_dataset: true\n", "shuffle_dataset: evokit sets this GRPOConfig field itself"),
    ("report_to: [tensorboard, slack]\n", "report_to="),
    ("- steps: 2\n", "expected a mapping"),
])
def test_bad_file_is_one_line_and_exit_2(tmp_path, text, says):
    """The CLI refuses the file before loading a model: one line naming the key, exit 2."""
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(SetupError, match=says.replace("[", r"\[")):
        llm_config(f)
    res = evokit("train-llm", "--config", str(f), "--out", str(tmp_path / "run"), "--model", "tiny")
    assert res.returncode == 2, res.stderr[-2000:]
    assert says in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "run" / "trl").exists()


def test_train_llm_with_config_file_reports_to_tensorboard(tmp_path):
    """One step of the tiny model on a real task: event files under out/trl/runs, the saved
    GRPOConfig holds the file's max_grad_norm and the flags' steps over the file's."""
    import torch

    render(Plan((Step("text-list", "distinct-values"),)), 0, tmp_path / "tasks" / "t0")
    f = tmp_path / "run.yaml"
    f.write_text("steps: 5\ngroup_size: 2\ntasks_per_step: 1\nmax_completion_length: 24\nmax_turns: 1\n"
                 "device: cpu\nmax_grad_norm: 0.5\ncpu_threads: 1\n")
    out = tmp_path / "run"
    res = evokit("train-llm", "--config", str(f), "--model", "tiny", "--source", "tasks", "--tasks",
                 str(tmp_path / "tasks"), "--steps", "1", "--report-to", "tensorboard", "--out", str(out),
                 timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    events = list((out / "trl" / "runs").rglob("events.out.tfevents.*"))
    assert events and all(e.stat().st_size > 0 for e in events)
    rows = [json.loads(x) for x in (out / "steps.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0]
    args = torch.load(out / "trl" / "checkpoint-1" / "training_args.bin", weights_only=False)
    assert args.max_grad_norm == 0.5 and args.max_steps == 1 and args.num_generations == 2
    assert args.report_to == ["tensorboard"]
