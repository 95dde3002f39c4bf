"""The TRL ``GRPOTrainer`` that trains on evokit tasks: building it, running it, resuming it.

Generation, the tool-call loop, the GRPO loss, checkpoints and vLLM stay TRL's (``trl`` ≥ 1.16,
read from ``trl/trainer/grpo_trainer.py``). :class:`EvokitGRPOTrainer` (made by
:func:`trainer_class`, so that TRL is imported only when a trainer is built) decides which task a
slot holds when TRL starts generating that batch, not when the dataloader (which prefetches one
batch ahead) reads the row: so every group sees one task, and the curriculum has already seen the
previous batch's pass rates. TRL's ``RepeatSampler`` (unshuffled) repeats each row G times.

Set-up checks (:func:`build_trainer`) refuse, with :class:`SetupError`, a chat template that
cannot do tool calls and an instruction that cannot fit the context. TRL's default loss ("dapo",
β = 0) is kept; EE/GenEnv train with GRPO and a KL term, set ``beta`` for it. Calling
:func:`train_llm` again resumes from the last checkpoint.

Generation backends (:func:`grpo_config`, checked against TRL 1.16's ``GRPOConfig`` and
``trl/generation/vllm_generation.py``): ``transformers`` (CPU and GPU); ``vllm-colocate`` (vLLM in
the training process; it loads the policy by ``model.name_or_path``, so a model without a local
folder is saved to ``out/policy-init`` first); ``vllm-server`` (a ``trl vllm-serve`` process at
``vllm_server_url``, which loads its own copy of the model and sets ``--logprobs-mode
processed_logprobs`` that TRL's importance-sampling correction needs). In both vLLM modes TRL
pushes the policy's weights to vLLM before the first generation and after each update, and hands
it token ids, not text. On CUDA the default is bfloat16 weights with TRL's ``bf16`` flag.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from evokit.grpo import batch_stats
from evokit.sources import Run, TaskRef, describe
from evokit.training.steps import step_row
from evokit.trl_trainer.checkpoints import resume, rows_callback
from evokit.trl_trainer.config import LLMTrainConfig, SetupError
from evokit.trl_trainer.env import RunContext, SandboxToolEnv, make_task_reward, tool_schema
from evokit.trl_trainer.models import load_policy, prepare_tokenizer
from evokit.trl_trainer.sources import Scheduler


def trainer_class():
    """:class:`EvokitGRPOTrainer`, a subclass of TRL's ``GRPOTrainer`` (TRL is imported here, not at module load)."""
    from trl import GRPOTrainer

    class EvokitGRPOTrainer(GRPOTrainer):
        """GRPOTrainer that fills each generation batch's task columns from the scheduler, feeds the
        groups' pass rates back after the rewards, and logs evokit's metrics alongside TRL's."""

        def __init__(self, *args, scheduler, run: RunContext, **kwargs):
            self.scheduler, self.evokit_run = scheduler, run
            self.last_step: dict = {}  # the shared part of the next steps.jsonl row (evokit.training.steps)
            self.rollout_rows: list[dict] = []
            super().__init__(*args, **kwargs)
            run.eos_ids = tuple(self.eos_token_ids)

        def _generate_and_score_completions(self, inputs):
            if not self.model.training:
                return super()._generate_and_score_completions(inputs)
            from accelerate.utils import gather_object

            G = self.num_generations
            refs = self.scheduler.begin_batch(self.args.generation_batch_size // G)
            inputs = [{**x, "task_key": list(refs[x["slot"]].key),
                       "task_dir": str(refs[x["slot"]].path or "")} for x in inputs]
            run = self.evokit_run
            run.pending.clear()
            t0, s0 = time.monotonic(), run.clock.seconds
            out = super()._generate_and_score_completions(inputs)
            mask = out["completion_mask"] * out["tool_mask"] if "tool_mask" in out else out["completion_mask"]
            for rec, n_tok in zip(run.pending, mask.sum(dim=1).tolist(), strict=True):
                rec["model_tokens"] = int(n_tok)
            records = gather_object(list(run.pending))
            self._feedback(records, refs, time.monotonic() - t0, run.clock.seconds - s0)
            return out

        def _feedback(self, records: list[dict], refs: list[TaskRef], seconds: float, sandbox: float) -> None:
            results = self.scheduler.feedback(records, refs, self.evokit_run.cfg.success)
            m = self._metrics["train"]
            shares = batch_stats([r.stats for r in results])
            m["dead_group_share"].append(shares["dead_group_share"])
            m["partially_solved_share"].append(shares["partially_solved_share"])
            m["masked_share"].append(shares["masked_share"])
            m["turns"].append(float(np.mean([r["n_turns"] for r in records])))
            turns = sum(r["assistant_messages"] for r in records)
            m["tokens_per_turn"].append(sum(r["model_tokens"] for r in records) / max(1, turns))
            m["generation_seconds"].append(seconds)
            m["sandbox_seconds"].append(sandbox)
            for k, v in self.scheduler.position().items():
                m[k].append(v)
            step = self.state.global_step  # the index, from 0, of the update these rollouts feed
            self.last_step = step_row(step, self.scheduler.name, results, shares, scheduler=self.scheduler.summary())
            self.rollout_rows.extend({"step": step, **r} for r in records)

    return EvokitGRPOTrainer


#: GRPOConfig fields evokit sets → the LLMTrainConfig field (or CLI option) that decides them; the
#: others it sets are what its rows, resume and task scheduling rely on. A config file may set none.
SET_BY = {"output_dir": "--out", "max_steps": "steps", "num_generations": "group_size",
          "per_device_train_batch_size": "micro_batch", "gradient_accumulation_steps": "micro_batch",
          "max_tool_calling_iterations": "max_turns", "save_steps": "save_steps",
          "save_total_limit": "keep_checkpoints", "report_to": "report_to", "use_cpu": "device", "bf16": "dtype",
          "activation_checkpointing": "gradient_checkpointing", "gradient_checkpointing": "gradient_checkpointing",
          "use_vllm": "generation", "vllm_mode": "generation", "vllm_server_base_url": "vllm_server_url",
          "epsilon": "clip",
          "disable_tqdm": "the CLI's progress bar"}


def grpo_kwargs(cfg: LLMTrainConfig, out: Path, *, progress: bool = False) -> dict:
    """The ``GRPOConfig`` fields evokit sets for ``cfg`` (checkpoints under ``out/trl``).

    One generation batch is one update: G × tasks_per_step rows, in micro-batches of
    ``micro_batch`` rows (gradient accumulation). TRL's ``bf16`` flag (autocast) is set only on
    CUDA, with bf16 weights or ``dtype="mixed"``; ``GRPOConfig``'s own default turns it on whenever fp16 is off, which on
    CPU would mean bf16 autocast. ``log_completions`` is off: the episodes are in ``rollouts.jsonl``.
    """
    from trl import GRPOConfig

    device, gen = cfg.resolved_device(), cfg.resolved_generation()
    if gen.startswith("vllm") and device != "cuda":
        raise SetupError(f"generation={gen!r} needs a CUDA device (device={cfg.device!r} resolved to {device!r}); "
                         "use generation='transformers' on CPU")
    n = cfg.group_size * cfg.tasks_per_step
    micro = cfg.micro_batch or n
    # newer transformers (5.24 here) renamed gradient_checkpointing to activation_checkpointing and
    # warns on the old name; TRL's default for it is True, so evokit sets it, by whichever name exists
    ckpt = "activation_checkpointing" if "activation_checkpointing" in GRPOConfig.__dataclass_fields__ else \
        "gradient_checkpointing"
    return dict(
        output_dir=str(out / "trl"), max_steps=cfg.steps, num_generations=cfg.group_size,
        per_device_train_batch_size=micro, gradient_accumulation_steps=n // micro,
        learning_rate=cfg.learning_rate, beta=cfg.beta, epsilon=cfg.clip, temperature=cfg.temperature,
        max_completion_length=cfg.max_completion_length, max_tool_calling_iterations=cfg.max_turns,
        logging_steps=1, save_strategy="steps", save_steps=cfg.save_steps, save_total_limit=cfg.keep_checkpoints,
        report_to=list(cfg.report_to), seed=cfg.seed, shuffle_dataset=False, ignore_data_skip=True,
        dataloader_num_workers=0, use_cpu=device == "cpu", bf16=cfg.autocast_bf16(), **{ckpt: cfg.gradient_checkpointing},
        use_vllm=gen.startswith("vllm"), vllm_mode="server" if gen == "vllm-server" else "colocate",
        vllm_server_base_url=cfg.vllm_server_url, vllm_gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
        generation_kwargs=dict(cfg.generation_kwargs) if cfg.generation_kwargs else None,
        disable_tqdm=not progress, log_completions=False, save_only_model=False)


def grpo_config(cfg: LLMTrainConfig, out: Path, *, progress: bool = False):
    """TRL's ``GRPOConfig``: evokit's fields (:func:`grpo_kwargs`) plus ``cfg.grpo_args`` (SetupError
    if one of those is a field evokit sets)."""
    from trl import GRPOConfig

    kwargs = grpo_kwargs(cfg, out, progress=progress)
    extra = dict(cfg.grpo_args or {})
    if clash := sorted(set(extra) & set(kwargs)):
        raise SetupError("; ".join(f"{k}: evokit sets it (use {SET_BY[k]})" if k in SET_BY else
                                   f"{k}: evokit sets it (its rows, resume or task scheduling rely on it)"
                                   for k in clash))
    return GRPOConfig(**kwargs, **extra)


def peft_config(cfg: LLMTrainConfig):
    """PEFT's ``LoraConfig`` for ``cfg.lora_r`` > 0 (TRL's ``peft_config``), else None (every weight trains)."""
    if not cfg.lora_r:
        return None
    try:
        from peft import LoraConfig
    except ImportError:
        raise SetupError("lora_r > 0 needs PEFT: pip install 'evokit[train]' (or pip install peft)") from None
    targets = cfg.lora_target_modules
    return LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha or 2 * cfg.lora_r, lora_dropout=cfg.lora_dropout,
                      target_modules=targets[0] if targets == ("all-linear",) else list(targets),
                      task_type="CAUSAL_LM")


def _prompt_budget(tokenizer, model, cfg: LLMTrainConfig, tools) -> Callable[[str], str | None]:
    """instruction → an error if system + tools + instruction + max_completion_length exceed the context."""
    limit = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30)
    base = len(_render_ids(tokenizer, cfg.system_prompt, "", tools))

    def check(instruction: str) -> str | None:
        n = base + len(tokenizer(instruction, add_special_tokens=False)["input_ids"])
        if n + cfg.max_completion_length > limit:
            return (f"context overflow: prompt of {n} tokens + max_completion_length {cfg.max_completion_length} "
                    f"> the model's {limit} positions")
        return None

    return check


def _render_ids(tokenizer, system: str, user: str, tools) -> list[int]:
    return tokenizer.apply_chat_template([{"role": "system", "content": system}, {"role": "user", "content": user}],
                                         tools=tools, add_generation_prompt=True, tokenize=True,
                                         return_dict=True)["input_ids"]


def as_scheduler(source, cfg: LLMTrainConfig, out: Path) -> Scheduler:
    """``source`` (a task source, :mod:`evokit.sources`) told this run's group size, seed and folder; a
    :class:`Scheduler` is returned as it is."""
    return source if isinstance(source, Scheduler) else Scheduler(source, Run(cfg.group_size, cfg.seed, out))


def build_trainer(model, tokenizer, source, out: str | Path, cfg: LLMTrainConfig = LLMTrainConfig(), *,
                  progress: bool = False):
    """An :class:`EvokitGRPOTrainer` ready to ``train()`` on ``source``'s tasks (a task source or a
    :class:`Scheduler`); checks template and context first (SetupError)."""
    from datasets import Dataset

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    scheduler = as_scheduler(source, cfg, out)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    os.environ.setdefault("HARBOR_TELEMETRY", "0")
    if cfg.cpu_threads and cfg.resolved_device() == "cpu":
        torch.set_num_threads(cfg.cpu_threads)
    tokenizer = prepare_tokenizer(tokenizer, cfg.chat_template)
    run = RunContext(cfg, ThreadPoolExecutor(max_workers=cfg.workers, thread_name_prefix="evokit-env"))
    run.prompt_budget = _prompt_budget(tokenizer, model, cfg, tool_schema())
    too_long = [f"{p}: {err}" for p in scheduler.task_paths()
                if (err := run.prompt_budget((p / "instruction.md").read_text()))]
    if too_long:
        raise SetupError("these tasks cannot fit the model's context; raise the model's context, lower "
                         "max_completion_length, or leave them out:\n" + "\n".join(too_long))
    args = grpo_config(cfg, out, progress=progress)
    if (cfg.resolved_generation() == "vllm-colocate"
            and not Path(str(model.name_or_path or "")).joinpath("config.json").is_file()):
        # colocated vLLM loads the policy by name: give it a local copy (weights + tokenizer). A vLLM
        # server has loaded its own copy; TRL overwrites its weights before the first generation.
        init = out / "policy-init"
        model.save_pretrained(init)
        tokenizer.save_pretrained(init)
        model.name_or_path = str(init)
    n_groups = cfg.tasks_per_step
    prompt = [{"role": "system", "content": cfg.system_prompt}, {"role": "user", "content": ""}]
    dataset = Dataset.from_dict({"prompt": [prompt] * n_groups, "slot": list(range(n_groups))})
    holder: list = []
    quiet_masked_rollouts()
    trainer = trainer_class()(
        model=model, reward_funcs=[make_task_reward(run)], args=args, peft_config=peft_config(cfg),
        train_dataset=dataset, processing_class=tokenizer, environment_factory=lambda: SandboxToolEnv(run),
        callbacks=[rows_callback(out, holder)], scheduler=scheduler, run=run)
    holder.append(trainer)
    return trainer


class _MaskedRolloutFilter:
    """Drops TRL's "All reward functions returned None" warning.

    TRL logs it, with the whole prompt and completion, for every batch that holds a masked rollout
    (a ``None`` reward, ``trl/trainer/grpo_trainer.py``): with a long system prompt that is pages
    per step. Which rollouts were masked and why is in ``rollouts.jsonl`` (``masked``, ``error``)
    and ``steps.jsonl`` (``masked_share``).
    """

    def filter(self, record) -> bool:
        return "All reward functions returned None" not in str(record.msg)  # accelerate prefixes "[RANK n] "


def quiet_masked_rollouts() -> None:
    """Install :class:`_MaskedRolloutFilter` on TRL's GRPO logger (once)."""
    import logging

    log = logging.getLogger("trl.trainer.grpo_trainer")
    if not any(isinstance(f, _MaskedRolloutFilter) for f in log.filters):
        log.addFilter(_MaskedRolloutFilter())


def close(trainer) -> None:
    """Stop every sandbox the run still holds and its thread pool."""
    run = trainer.evokit_run
    for env in list(run.envs):
        env._close()
    run.pool.shutdown(wait=True)


def train_llm(model, source, out: str | Path, cfg: LLMTrainConfig = LLMTrainConfig(), *, tokenizer=None,
              progress: bool = True):
    """Train ``model`` (an HF model, or a spec for :func:`load_policy`) with GRPO on the tasks ``source`` serves.

    ``source`` is a task source (:mod:`evokit.sources`); it is told the run's group size and seed
    (``cfg``) and ``out``. Resumes from the last checkpoint in ``out/trl`` if there is one
    (scheduler state included; rows of steps after it are dropped). Returns the trainer (closed).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    scheduler = as_scheduler(source, cfg, out)
    if isinstance(model, str | Path):
        model, tokenizer = load_policy(model, dtype=cfg.resolved_dtype(), tokenizer=tokenizer)
    if tokenizer is None:
        raise SetupError("train_llm: pass tokenizer= with a model instance")
    ck = resume(out, scheduler)
    (out / "config.json").write_text(json.dumps({"llm": asdict(cfg), "source": describe(scheduler.source)},
                                                indent=2, default=str))
    trainer = build_trainer(model, tokenizer, scheduler, out, cfg, progress=progress)
    try:
        trainer.train(resume_from_checkpoint=str(ck) if ck else None)
    finally:
        close(trainer)
    return trainer
