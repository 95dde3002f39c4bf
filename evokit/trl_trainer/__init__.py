"""GRPO for real LLMs on evokit's terminal tasks, through TRL's ``GRPOTrainer``.

evokit adds only what TRL does not know about; generation, the tool-call loop, the GRPO loss,
checkpoints and vLLM stay TRL's (``trl`` ≥ 1.16, read from ``trl/trainer/grpo_trainer.py``):

1. **The environment** (:class:`SandboxToolEnv`, TRL's ``environment_factory``; :mod:`.env`).
   ``reset(**row)`` starts the row's task in a fresh evokit sandbox (in a background thread, so
   that the G sandboxes of a group start while the prompt is tokenised) and returns the
   instruction, which TRL appends to the user message. Its one public method, ``bash``, is the
   agent's only tool. The reward is the task's own ``tests/test.sh``, uploaded and run only after
   the episode (:func:`evokit.verify.trial.run_tests`, which first kills every process the agent
   started).
2. **Task choice through the dataset rows** (:mod:`.sources`, :mod:`.trainer`). The dataset is
   ``tasks_per_step`` rows, one per GRPO group ("slot"); TRL's ``RepeatSampler`` (unshuffled)
   repeats each G times. Which task a slot holds is decided when TRL starts generating that batch
   (:class:`EvokitGRPOTrainer`), not when the dataloader (which prefetches one batch ahead) reads
   the row: so every group sees one task, and the curriculum has already seen the previous
   batch's pass rates. The :class:`Scheduler` holds any task source of :mod:`evokit.sources` (EL /
   random / D_T order over a lineage store, GenEnv's simulator, …, the same objects the CPU loop
   takes); after each batch its groups' results go back into the source's state.
3. **Bad input never ends a run.** A chat template that cannot do tool calls is refused at set-up
   (:func:`prepare_tokenizer`, :mod:`.models`), as is an instruction that cannot fit the context.
   During training, only a harness fault (a sandbox that fails to start, a task that will not
   load) makes a *masked* rollout: the reward function returns ``None``, which TRL excludes from
   the group baseline and gives advantage 0. A tool call that is not valid JSON, a command that
   hangs (killed after ``command_timeout_sec``) or a completion cut at ``max_completion_length``
   is the policy's doing: the tests score the rollout and its row says which happened (masking
   those, ``mask_*`` in :class:`LLMTrainConfig`, would teach the policy to cause them whenever it
   would otherwise fail). Checkpoints (model, optimizer,
   scheduler state) are TRL's ``checkpoint-N`` folders; calling :func:`train_llm` again resumes
   from the last one (:mod:`.checkpoints`).
4. **Rows** (``steps.jsonl``, one per update; ``rollouts.jsonl``, one per episode; :mod:`.checkpoints`)
   carry what the papers plot: the row the CPU loop writes too (:mod:`evokit.training.steps`: step
   from 0, source, served groups, dead-group, partially-solved and masked shares over unmasked
   rollouts, turns, mean D_T, the scheduler's position) over TRL's own logs (reward,
   ``frac_reward_zero_std``, model tokens per turn, seconds in the sandbox, …). The GRPO fields
   both loops share are :class:`evokit.training.settings.GRPOSettings`, which
   :class:`LLMTrainConfig` extends.

Deviations from the papers, stated here: the pass rate fed back is successes / unmasked rollouts
(masked rollouts do not count); an all-masked group leaves the scheduler unchanged. TRL's default
loss ("dapo", β = 0) is kept; EE/GenEnv train with GRPO and a KL term, set ``beta`` for it.

GenEnv's *LLM* simulator update (reward-weighted SFT on the exported D_env with a KL anchor to the
initial model) is :func:`weighted_sft` / :func:`update_llm_simulator` (:mod:`.simulator`): TRL
1.16's ``SFTTrainer`` has no per-example weight (checked in ``trl/trainer/sft_trainer.py``), so
this is the documented equivalent — the same token-level NLL, weighted per example, plus
KL(π_θ ‖ π_init) per token.

Heavy or host-specific modules (harbor, the sandbox, TRL itself) are imported where used, so that
``benchmarks/gpu_check.py --tasks none`` runs on a GPU machine that has only PyTorch and TRL.

The modules, lowest first (each imports only those before it):

* :mod:`.config` — :class:`LLMTrainConfig`, :class:`SetupError`;
* :mod:`.checkpoints` — ``steps.jsonl`` / ``rollouts.jsonl`` rows, the scheduler state in checkpoints;
* :mod:`.models` — offline models (GGUF, SmolLM2, a tiny Llama), chat templates for tool calls;
* :mod:`.sources` — the :class:`Scheduler` that holds a task source for TRL's batches;
* :mod:`.env` — the sandbox tool environment and the task reward;
* :mod:`.trainer` — the ``GRPOTrainer`` subclass, its ``GRPOConfig`` (LoRA through PEFT, trackers), building,
  training, resuming;
* :mod:`.config_file` — a run's settings from a YAML file (evokit's fields and ``GRPOConfig``'s);
* :mod:`.harbor_adapter` — TRL's ``trl.experimental.harbor`` on evokit's sandbox (imported only by its users);
* :mod:`.simulator` — reward-weighted SFT for GenEnv's LLM simulator.
"""

from evokit.trl_trainer.checkpoints import SCHEDULER_FILE, last_checkpoint
from evokit.trl_trainer.config import SYSTEM_PROMPT, LLMTrainConfig, SetupError
from evokit.trl_trainer.env import RunContext, SandboxToolEnv, make_task_reward, tool_schema
from evokit.trl_trainer.models import (
    TOOL_CALL_MARKER,
    chatml_tools_template,
    gguf_to_dir,
    load_policy,
    prepare_tokenizer,
    scripted_sampler,
    smollm2_dir,
    smollm2_tokenizer,
    tiny_llama,
)
from evokit.trl_trainer.simulator import update_llm_simulator, weighted_sft
from evokit.trl_trainer.sources import Scheduler
from evokit.trl_trainer.trainer import (
    build_trainer,
    close,
    grpo_config,
    train_llm,
    trainer_class,
)

__all__ = [
    "SCHEDULER_FILE", "SYSTEM_PROMPT", "TOOL_CALL_MARKER", "LLMTrainConfig", "RunContext", "SandboxToolEnv",
    "Scheduler", "SetupError", "build_trainer", "chatml_tools_template", "close", "gguf_to_dir", "grpo_config",
    "last_checkpoint", "load_policy", "make_task_reward", "prepare_tokenizer", "scripted_sampler", "smollm2_dir",
    "smollm2_tokenizer", "tiny_llama", "tool_schema", "train_llm", "trainer_class",
    "update_llm_simulator", "weighted_sft",
]
