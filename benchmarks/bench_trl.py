"""Speed of evokit's TRL integration on CPU: where a GRPO step's time goes, and the wrapper's overhead.

A. One GRPO step of a tiny random Llama model (≈6 M parameters, SmolLM2's tokenizer) through the
   real sandbox tool env on evokit one-step tasks: step time, and the shares spent in the sandbox
   (wall time with at least one sandbox start / command / test / stop in flight) and in the model
   (the rest: generation, log-probs, backward, optimizer). The model's sampler is scripted
   (``trl_trainer.scripted_sampler``) to call the tool with the right or a wrong command, so every
   rollout starts a sandbox, runs one command and the tests.
B. evokit's wrapper (scheduler rows, environment, reward plumbing, metrics, rows on disk) vs TRL's
   ``GRPOTrainer`` used directly, on the same tiny model, prompt, tool schema and a trivial
   in-process reward (no sandbox): median step time ratio (target ≤ 1.2).

    .venv/bin/python benchmarks/bench_trl.py            # prints a table and one JSON line
    .venv/bin/python benchmarks/bench_trl.py --steps 6 --group-size 8

Torch runs on one thread: on a shared 2-core host OpenMP's spin-waiting makes two threads ~15x slower.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HARBOR_TELEMETRY="0", TRL_EXPERIMENTAL_SILENCE="1")

import torch  # noqa: E402

from evokit import trl_trainer as T
from evokit.curricula import source_from  # noqa: E402
from evokit.sources import InProcess  # noqa: E402

SYSTEM = "Solve the task with the bash tool."
SOLVE = "mkdir -p /app/out && cat /app/step1/hosts.txt | LC_ALL=C sort -u > /app/out/step1.txt"


def _call(command: str) -> str:
    return "<tool_call>\n" + json.dumps({"name": "bash", "arguments": {"command": command}}) + "\n</tool_call><|im_end|>"


def _ids(tok, msgs):
    return tok.apply_chat_template(msgs, tools=T.tool_schema(), add_generation_prompt=True, tokenize=True,
                                   return_dict=True)["input_ids"]


def sandbox_step(tok, root: Path, args) -> dict:
    from evokit.plan import Plan, Step, render

    tasks = [render(Plan((Step("text-list", "distinct-values"),)), s, root / f"task{s}") for s in range(2)]
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": (tasks[0] / "instruction.md").read_text()}]
    call = {"type": "function", "function": {"name": "bash", "arguments": {"command": "true"}}}
    after = [*msgs, {"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "tool", "name": "bash", "content": ""}]
    sampler = T.scripted_sampler(tok, [(_ids(tok, msgs), [(_call(SOLVE), 40.0), (_call("true"), 40.0)]),
                                       (_ids(tok, after), [("Done.<|im_end|>", 40.0)])])
    sched = source_from("random", tasks=tasks)
    cfg = T.LLMTrainConfig(steps=args.steps, group_size=args.group_size, tasks_per_step=2, max_completion_length=96,
                           max_turns=2, learning_rate=1e-4, system_prompt=SYSTEM, generation_kwargs=sampler,
                           save_steps=10**9, cpu_threads=1, device="cpu")
    out = root / "run"
    trainer = T.build_trainer(T.tiny_llama(tok), tok, sched, out, cfg)
    try:
        trainer.train()
    finally:
        T.close(trainer)
    rows = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()][1:]  # drop warm-up
    step = statistics.median(r["step_time"] for r in rows)
    sandbox = statistics.median(r["sandbox_seconds"] for r in rows)
    return {"step_s": round(step, 3), "sandbox_s": round(sandbox, 3), "sandbox_share": round(sandbox / step, 3),
            "model_share": round(1 - sandbox / step, 3),
            "generation_s": round(statistics.median(r["generation_seconds"] for r in rows), 3),
            "mean_reward": round(statistics.mean(r["reward"] for r in rows if r["reward"] is not None), 3),
            "rollouts_per_step": 2 * args.group_size}


class DirectEnv:
    """What a user of TRL alone would write: the same tool (name, signature, docstring), no sandbox."""

    def reset(self, **row) -> str:
        return InProcess.INSTRUCTION

    async def bash(self, command: str) -> str:
        """Run one bash command line in the task's terminal and return its output (stdout and stderr).

        Args:
            command: The command line to run, e.g. `ls -la /app`.
        """
        return ""


def distinct_share(completion_ids, **kw) -> list[float]:
    return [len(set(ids)) / len(ids) if ids else 0.0 for ids in completion_ids]


def _times(rows: list[dict]) -> float:
    return statistics.median(r["step_time"] for r in rows[1:])


def wrapper_vs_direct(tok, root: Path, args, repeat: int) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    cfg = T.LLMTrainConfig(steps=args.steps, group_size=args.group_size, tasks_per_step=2,
                           max_completion_length=args.max_completion_length, learning_rate=1e-4,
                           save_steps=10**9, cpu_threads=1, device="cpu", system_prompt=SYSTEM)
    wrapper, direct = [], []
    for i in range(repeat):  # interleaved, so that a busy host slows both alike
        out = root / f"wrapper{i}"
        tr = T.build_trainer(T.tiny_llama(tok, seed=i), tok, InProcess(), out, cfg)
        t0 = time.monotonic()
        try:
            tr.train()
        finally:
            T.close(tr)
        rows = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
        wrapper.append({"median_step_s": _times(rows), "wall_s": time.monotonic() - t0})

        collected: list[dict] = []

        class Collect(TrainerCallback):
            def __init__(self, into: list):
                self.into = into

            def on_log(self, a, state, control, logs=None, **kw):
                if logs and "step_time" in logs:
                    self.into.append(dict(logs))

        prompt = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ""}]
        ds = Dataset.from_dict({"prompt": [prompt] * cfg.tasks_per_step})
        tok_d = T.prepare_tokenizer(tok)
        d = GRPOTrainer(model=T.tiny_llama(tok, seed=i), reward_funcs=[distinct_share],
                        args=T.grpo_config(cfg, root / f"direct{i}", progress=False), train_dataset=ds,
                        processing_class=tok_d, environment_factory=DirectEnv, callbacks=[Collect(collected)])
        t0 = time.monotonic()
        d.train()
        direct.append({"median_step_s": _times(collected), "wall_s": time.monotonic() - t0})
    w = statistics.median(x["median_step_s"] for x in wrapper)
    dd = statistics.median(x["median_step_s"] for x in direct)
    return {"wrapper_step_s": round(w, 4), "direct_step_s": round(dd, 4), "ratio": round(w / dd, 3),
            "runs": {"wrapper": wrapper, "direct": direct}}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=4, help="GRPO steps per run (the first is warm-up)")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-completion-length", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=2, help="interleaved wrapper/direct runs")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    tok = T.prepare_tokenizer(T.smollm2_tokenizer())
    with tempfile.TemporaryDirectory(prefix="evokit-bench-trl-") as tmp:
        a = sandbox_step(tok, Path(tmp) / "a", args)
        b = wrapper_vs_direct(tok, Path(tmp) / "b", args, args.repeat)
    print(f"A. sandbox tool env, {a['rollouts_per_step']} rollouts/step: step {a['step_s']}s, "
          f"sandbox {a['sandbox_s']}s ({a['sandbox_share']:.0%}), model {a['model_share']:.0%} "
          f"(generation {a['generation_s']}s), mean reward {a['mean_reward']}")
    print(f"B. wrapper {b['wrapper_step_s']}s/step vs TRL direct {b['direct_step_s']}s/step: ratio {b['ratio']}")
    result = {"sandbox_step": a, "wrapper_vs_direct": {k: v for k, v in b.items() if k != "runs"},
              "load": os.getloadavg()[0]}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
