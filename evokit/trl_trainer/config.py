"""The settings of one LLM GRPO run, and the error every set-up check raises.

:class:`LLMTrainConfig` is a frozen record of what :func:`evokit.trl_trainer.train_llm` needs; each
field names the TRL ``GRPOConfig`` field it becomes or the paper value it stands for (EE trains
with B = 8 rollouts per environment for 200 steps). Its checks run at construction, so a bad
setting is refused before a model is loaded. :class:`SetupError` is raised for anything that
cannot train (model, tokenizer, tasks, settings); its message says what to change.

This is the lowest module of the package: it imports no other part of it (the shared GRPO fields come
from :mod:`evokit.training.settings`, below every loop).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from evokit.errors import UserError
from evokit.training.settings import GRPOSettings, SettingsError

SYSTEM_PROMPT = (
    "You are an agent working in a Linux terminal. Solve the task by calling the `bash` tool: each call "
    "runs one shell command line in the task's environment and returns its output. When the task is done, "
    "answer without a tool call."
)


#: the trackers TRL's ``report_to`` can send metrics to that evokit names (transformers knows more)
REPORT_TO = frozenset({"none", "tensorboard", "wandb", "trackio", "mlflow"})


class SetupError(UserError, ValueError):
    """The model, tokenizer, tasks or settings cannot train; the message says what to change."""


@dataclass(frozen=True)
class LLMTrainConfig(GRPOSettings):
    """One LLM GRPO run: the shared GRPO fields (:class:`~evokit.training.settings.GRPOSettings`; ``steps`` =
    TRL's max_steps, ``group_size`` = num_generations, ``learning_rate``, ``beta``, ``clip`` = epsilon, ``seed``)
    and the TRL path's own. Defaults are CPU-smoke sizes; EE's setting is group_size=8, steps=200."""

    micro_batch: int | None = None  # rows per forward/backward (None: the whole batch; must divide it)
    temperature: float = 1.0  # TRL's sampling temperature (the CPU learner's is its PolicyConfig's)
    max_completion_length: int = 1024  # all turns of an episode: model tokens + tool outputs
    max_turns: int = 10  # tool calls per episode (TRL max_tool_calling_iterations)
    command_timeout_sec: float = 30.0  # one bash call; then it is killed (the tests still score the rollout)
    output_chars: int = 2000  # of each command's output the model sees (head and tail)
    # Masking what the policy causes (all off: the tests score it, as in the CPU loop). Each flag, on,
    # leaves that outcome out of the loss, which biases training towards it: a policy learns to
    # trigger the masked outcome whenever it would otherwise fail (survivor bias: its failures stop
    # counting). Only harness faults are masked by default (evokit.rollout's masking policy).
    mask_timeouts: bool = False  # on: a command past command_timeout_sec masks the rollout (teaches hanging)
    mask_invalid_tool_calls: bool = False  # on: malformed tool-call JSON masks it (teaches emitting broken calls)
    mask_overflow: bool = False  # on: a completion cut at max_completion_length masks it (teaches never ending)
    success: float = 1.0  # reward that counts as solved (pass rate p̂ = solved / unmasked)
    generation: str = "auto"  # "transformers" | "vllm-colocate" | "vllm-server"; auto: colocate on CUDA
    vllm_server_url: str | None = None  # with generation="vllm-server" (e.g. http://127.0.0.1:8000)
    vllm_gpu_memory_utilization: float = 0.3
    device: str = "auto"  # "cpu" | "cuda" | "auto"
    # weights and TRL's bf16 flag: "bfloat16" | "float32" | "mixed" (fp32 weights, bf16 autocast on CUDA) |
    # "auto" (bf16 on CUDA, fp32 on CPU). bf16 weights round away AdamW steps below ~2^-8 of a weight:
    # at lr 1e-6 most updates vanish, so "mixed" is the safer choice for long runs that fit in memory.
    dtype: str = "auto"
    gradient_checkpointing: bool = False
    save_steps: int = 1  # a checkpoint every N updates (resume point)
    keep_checkpoints: int = 2
    system_prompt: str = SYSTEM_PROMPT
    chat_template: str = "auto"  # "auto" (own if it does tools, else ChatML tools) | "keep" | "chatml-tools"
    workers: int = 16  # threads for sandbox starts and tests
    generation_kwargs: dict | None = None  # extra sampler settings passed to TRL (e.g. top_k, sequence_bias)
    cpu_threads: int | None = None  # torch threads on CPU (1 avoids OpenMP's spin-wait cliff on a busy host)
    # where TRL's metrics also go (transformers' report_to): any of REPORT_TO; "none" keeps them in steps.jsonl only
    report_to: tuple[str, ...] = ("none",)
    # LoRA (Hu et al. 2021, arXiv:2106.09685) through PEFT: rank r of the update ΔW = BA; 0 trains every weight
    lora_r: int = 0
    lora_alpha: int | None = None  # scale α (ΔW is multiplied by α/r); None: 2r, PEFT's common choice
    lora_dropout: float = 0.05
    lora_target_modules: tuple[str, ...] = ("all-linear",)  # module names, or PEFT's "all-linear"
    # further GRPOConfig fields, passed as they are (from a --config file); a field evokit sets is refused
    grpo_args: dict | None = None

    def __post_init__(self):
        for name in ("report_to", "lora_target_modules"):  # "a,b" (a flag's form) → ("a", "b")
            if isinstance(value := getattr(self, name), str):
                object.__setattr__(self, name, tuple(v.strip() for v in value.split(",") if v.strip()))
        try:
            super().__post_init__()
        except SettingsError as e:
            raise SetupError(str(e)) from None
        if self.group_size < 2:
            raise SetupError(f"group_size (G) must be ≥ 2 for GRPO; got {self.group_size}")
        n = self.group_size * self.tasks_per_step
        if self.micro_batch is not None and (self.micro_batch < 1 or n % self.micro_batch):
            raise SetupError(f"micro_batch={self.micro_batch} must divide group_size × tasks_per_step = {n}")
        if self.generation not in {"auto", "transformers", "vllm-colocate", "vllm-server"}:
            raise SetupError(f"generation={self.generation!r}: choose transformers, vllm-colocate or vllm-server")
        if self.chat_template not in {"auto", "keep", "chatml-tools"}:
            raise SetupError(f"chat_template={self.chat_template!r}: choose auto, keep or chatml-tools")
        if self.device not in {"auto", "cpu", "cuda"}:
            raise SetupError(f"device={self.device!r}: choose auto, cpu or cuda")
        if self.dtype not in {"auto", "bfloat16", "float32", "mixed"}:
            raise SetupError(f"dtype={self.dtype!r}: choose auto, bfloat16, float32 or mixed")
        if self.generation == "vllm-server" and not self.vllm_server_url:
            raise SetupError("generation='vllm-server' needs vllm_server_url (start one with `trl vllm-serve --model DIR`)")
        if not 0 < self.vllm_gpu_memory_utilization <= 1:
            raise SetupError(f"vllm_gpu_memory_utilization={self.vllm_gpu_memory_utilization} must be in (0, 1]")

        if not self.report_to or not set(self.report_to) <= REPORT_TO or ("none" in self.report_to
                                                                         and len(self.report_to) > 1):
            raise SetupError(f"report_to={','.join(self.report_to)!r}: choose none or any of "
                             f"{', '.join(sorted(REPORT_TO - {'none'}))} (comma-separated)")
        if self.lora_r < 0 or not 0 <= self.lora_dropout < 1 or not self.lora_target_modules:
            raise SetupError(f"lora_r={self.lora_r} must be ≥ 0 (0: no LoRA), lora_dropout={self.lora_dropout} in "
                             f"[0, 1), lora_target_modules non-empty")

    def resolved_device(self) -> str:
        return ("cuda" if torch.cuda.is_available() else "cpu") if self.device == "auto" else self.device

    def autocast_bf16(self) -> bool:
        """TRL's ``bf16`` flag: on CUDA with bf16 weights or ``mixed`` precision, never on CPU."""
        cuda = self.resolved_device() == "cuda"
        return cuda and (self.dtype == "mixed" or self.resolved_dtype() == torch.bfloat16)

    def resolved_dtype(self) -> torch.dtype:
        """The weights' dtype: bf16 if asked, or on CUDA by default; else fp32 (also for ``mixed``)."""
        auto_bf16 = self.dtype == "auto" and self.resolved_device() == "cuda"
        return torch.bfloat16 if self.dtype == "bfloat16" or auto_bf16 else torch.float32

    def resolved_generation(self) -> str:
        if self.generation != "auto":
            return self.generation
        if self.resolved_device() == "cuda":
            import importlib.util

            return "vllm-colocate" if importlib.util.find_spec("vllm") else "transformers"
        return "transformers"
