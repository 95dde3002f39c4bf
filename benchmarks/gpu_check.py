"""GPU check: a few GRPO steps of a small model on evokit tasks through TRL; prints tokens/s, step time, peak memory.

Runs on a CUDA machine that has PyTorch and TRL (plus what TRL pulls in: transformers, accelerate,
datasets) and nothing else: no model hub, no network, no evokit install (it imports evokit from
this checkout), no sandbox tools. Needs only a few MB beyond those packages.

* ``--model tiny`` (default) builds a random Llama-style model and a byte-level BPE tokenizer with
  ChatML tokens in-process (seconds); ``--model DIR`` uses a local HF directory, ``--model X.gguf``
  a GGUF file (needs the ``gguf`` package).
* ``--tasks none`` (default) uses evokit's trainer with an in-process task: no sandbox, the reward
  is the share of distinct tokens in the completion. ``--tasks sandbox`` renders evokit one-step
  tasks and runs them in evokit's bubblewrap sandbox (needs bwrap + mmdebstrap, i.e. a Linux host
  set up like evokit's CI).
* ``--generation`` transformers | vllm-colocate | vllm-server (``--vllm-server-url``).
* ``--device cpu`` runs the same thing on CPU (fp32), for CI.

    python benchmarks/gpu_check.py                      # CUDA, bf16, tiny model, no sandbox
    python benchmarks/gpu_check.py --generation vllm-colocate
    python benchmarks/gpu_check.py --device cpu --steps 2 --hidden 64 --layers 2 --max-completion-length 32

The last line printed is a JSON object with the numbers (``tokens_per_s`` counts generated
completion tokens over generation time; ``train_tokens_per_s`` prompt + completion tokens over the
whole step).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HARBOR_TELEMETRY", "0")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # a busy CPU host otherwise loses ~15x to spin-waits

CORPUS = [
    "You are an agent working in a Linux terminal. Solve the task by calling the bash tool.",
    '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la /app"}}\n</tool_call>',
    "cat /app/step1/hosts.txt | LC_ALL=C sort -u > /app/out/step1.txt",
    "awk '{print $7}' /app/step1/access.log | sort | uniq -c | sort -k1,1nr | head -n 3",
    "Work in /app. Do the following steps in order; write every result under /app/out.",
    "# Tools\n\nYou may call one or more functions to assist with the user query.",
    '{"type": "function", "function": {"name": "bash", "description": "Run one bash command line", '
    '"parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}',
]


def builtin_tokenizer(vocab: int = 2048):
    """A byte-level BPE tokenizer with ChatML specials and TRL's ChatML tool template, built in-process."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from evokit.trl_trainer import chatml_tools_template

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS * 20, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>")
    fast.chat_template = chatml_tools_template()
    return fast


def sandbox_tasks(root: Path, n: int) -> list[Path]:
    from evokit.plan import Plan, Step, render

    kinds = [("text-list", "distinct-values"), ("csv-ledger", "count-records"), ("access-log", "topk-count")]
    return [render(Plan((Step(*kinds[i % len(kinds)]),)), i, root / f"task{i}") for i in range(n)]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--model", default="tiny", help="tiny | local HF dir | .gguf file")
    ap.add_argument("--tasks", default="none", choices=["none", "sandbox"])
    ap.add_argument("--generation", default="transformers", choices=["transformers", "vllm-colocate", "vllm-server"])
    ap.add_argument("--vllm-server-url", default=None)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--tasks-per-step", type=int, default=2)
    ap.add_argument("--max-completion-length", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=512, help="tiny model width")
    ap.add_argument("--layers", type=int, default=8, help="tiny model depth")
    ap.add_argument("--dtype", default=None, choices=["bfloat16", "float32", "mixed"],
                    help="default: bf16 on CUDA, fp32 on CPU; mixed = fp32 weights, bf16 autocast")
    ap.add_argument("--out", default=None, help="run folder (default: a temp dir, removed)")
    args = ap.parse_args(argv)

    import torch

    from evokit import trl_trainer as T
    from evokit.curricula import source_from
    from evokit.sources import InProcess

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA device visible (use --device cpu)")
    dtype_name = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    dtype = torch.float32 if dtype_name == "mixed" else getattr(torch, dtype_name)
    t0 = time.monotonic()
    if args.model == "tiny":
        tok = builtin_tokenizer()
        model = T.tiny_llama(tok, hidden=args.hidden, layers=args.layers, heads=max(1, args.hidden // 64),
                             dtype=dtype)
    else:
        model, tok = T.load_policy(args.model, dtype=dtype)
    load_s = time.monotonic() - t0
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="evokit-gpu-check-"))
    if args.tasks == "sandbox":
        from evokit.sandbox.bwrap import require_tools

        require_tools("bwrap", "unshare", "nsenter", "mmdebstrap")
        tasks = sandbox_tasks(out / "tasks", args.tasks_per_step)
        sched = source_from("random", tasks=tasks)
    else:
        sched = InProcess()
    cfg = T.LLMTrainConfig(steps=args.steps, group_size=args.group_size, tasks_per_step=args.tasks_per_step,
                           max_completion_length=args.max_completion_length, max_turns=4, learning_rate=1e-5,
                           device=args.device, dtype=dtype_name, generation=args.generation,
                           vllm_server_url=args.vllm_server_url, save_steps=10**9, command_timeout_sec=10)
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    trainer = T.build_trainer(model, tok, sched, out, cfg)
    t1 = time.monotonic()
    try:
        trainer.train()
    finally:
        T.close(trainer)
    wall = time.monotonic() - t1
    rows = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    steady = rows[1:] or rows  # the first step includes warm-up (kernels, vLLM graphs)
    n = args.group_size * args.tasks_per_step
    gen_tokens = [r["completions/mean_length"] * n for r in steady]
    step_time = sum(r["step_time"] for r in steady) / len(steady)
    gen_time = sum(r["generation_seconds"] for r in steady) / len(steady)
    tokens_seen = [b["num_tokens"] - a["num_tokens"] for a, b in zip(rows, rows[1:], strict=False)] or [rows[0]["num_tokens"]]
    peak = (torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
    result = {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "dtype": dtype_name,
        "model": args.model, "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 2),
        "tasks": args.tasks, "generation": args.generation, "steps": len(rows), "rows_per_step": n,
        "step_time_s": round(step_time, 3), "generation_s": round(gen_time, 3),
        "tokens_per_s": round(sum(gen_tokens) / len(steady) / max(gen_time, 1e-9), 1),
        "train_tokens_per_s": round(sum(tokens_seen) / len(tokens_seen) / max(step_time, 1e-9), 1),
        "peak_memory_gib": round(peak, 3), "peak_memory_kind": "cuda allocated" if args.device == "cuda" else "max RSS",
        "load_s": round(load_s, 2), "train_wall_s": round(wall, 2),
        "mean_reward": steady[-1].get("reward"), "frac_reward_zero_std": steady[-1].get("frac_reward_zero_std"),
    }
    for r in rows:
        print(f"step {r['step']}: {r['step_time']:.2f}s (generation {r['generation_seconds']:.2f}s, "
              f"sandbox {r['sandbox_seconds']:.2f}s), reward {r.get('reward')}, "
              f"mean completion {r['completions/mean_length']:.0f} tokens")
    print(json.dumps(result))
    if not args.out:
        shutil.rmtree(out, ignore_errors=True)
    return result


if __name__ == "__main__":
    main()
