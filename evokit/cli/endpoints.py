"""Commands around an LLM endpoint: serve-llm, rollout, export-traces.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from evokit.cli.base import (
    LLMConcurrency,
    LLMRetries,
    LLMTimeout,
    app,
    console,
    llm_client,
    task_dirs,
)
from evokit.errors import UserError


@app.command("serve-llm")
def serve_llm(
    model: Annotated[Path | None, typer.Option(help="a .gguf file (default: the bundled SmolLM2-135M-Instruct)")] = None,
    port: Annotated[int | None, typer.Option(help="port on 127.0.0.1 (default: a free one)")] = None,
    threads: Annotated[int | None, typer.Option(help="llama.cpp threads (default: half the CPUs)")] = None,
    n_ctx: Annotated[int, typer.Option(help="context length in tokens")] = 8192,
    log: Annotated[Path | None, typer.Option(help="append the server's output to this file")] = None,
) -> None:
    """Start the bundled local OpenAI-compatible endpoint (llama.cpp + SmolLM2) until Ctrl-C.

    Prints the ``--model`` and ``--api-base`` to pass to `evokit evolve --backend llm`,
    `evokit extract`, `evokit rollout` or `evokit difficulty`. A 135M model is for trying the
    plumbing, not for good tasks: point --model at a bigger GGUF file for that.

    Example: evokit serve-llm --port 8000
    """
    import signal
    import time

    from evokit.local_llm import LocalServer

    if model is not None and not model.is_file():
        raise UserError(f"--model {model}: no such file (give a .gguf model file, or leave --model out for SmolLM2)")
    srv = LocalServer(model, n_ctx=n_ctx, n_threads=threads, port=port, log=log, die_with_parent=True)
    console.print(f"[dim]starting llama.cpp server with {srv.model.name} ({srv.n_threads} thread(s))…")
    srv.start()
    # Once serving, Ctrl-C and SIGTERM only raise a flag: a second Ctrl-C while stopping must not
    # escape as a KeyboardInterrupt (it would kill the command, exit -2, before cleanup), and none may
    # land inside Popen.poll(), where it can leave the wait lock held so that stop() hangs under load.
    # A handler setting a threading.Event could deadlock on its lock.
    # Once stopped, both are ignored: at exit CPython puts SIG_DFL back in place of a Python handler
    # (not of SIG_IGN), so a late Ctrl-C during interpreter shutdown would kill the command (exit -2).
    signals: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: signals.append(signum))
    try:
        print(f"--model {srv.model_name} --api-base {srv.api_base}", flush=True)
        console.print("[dim]serving; Ctrl-C stops it")
        while not signals and srv.proc is not None and srv.proc.poll() is None:
            time.sleep(0.2)
        if not signals and srv.proc is not None and srv.proc.poll() is not None:
            raise RuntimeError(f"the llama.cpp server exited with {srv.proc.returncode}"
                               + (f" (log: {log})" if log else " (pass --log FILE to see why)"))
    finally:
        srv.stop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
    console.print("[dim]server stopped")


@app.command()
def rollout(
    path: Annotated[Path, typer.Argument(help="a task folder")],
    model: Annotated[str | None, typer.Option(help="the agent's model (e.g. from `evokit serve-llm`)")] = None,
    api_base: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint; without it litellm picks the provider")] = None,
    n: Annotated[int, typer.Option("-n", "--n", help="rollouts (a GRPO group of G)")] = 1,
    max_turns: Annotated[int, typer.Option(help="model responses per episode")] = 10,
    max_tokens: Annotated[int, typer.Option(help="tokens per model response")] = 512,
    tool_mode: Annotated[str, typer.Option(help="tools (native tool calls) | json ({\"command\": ...} replies)")] = "tools",
    temperature: Annotated[float, typer.Option(help="sampling temperature (EE: 1.0)")] = 1.0,
    workers: Annotated[int, typer.Option(help="rollouts at once")] = 2,
    seed: Annotated[int, typer.Option(help="random seed (per-request seeds are drawn from it)")] = 0,
    out: Annotated[Path | None, typer.Option(help="append the rollouts as JSON rows here (see `evokit export-traces`)")] = None,
    llm_timeout: LLMTimeout = 120.0,
    llm_retries: LLMRetries = 1,
    llm_concurrency: LLMConcurrency = 0,
) -> None:
    """Run G rollouts of the LLM agent (evokit.agents.LLMAgent) on a task; print rewards, turns, tokens, pass@k.

    Example: evokit rollout examples/tasks/files-organize --model M --api-base URL -n 4 --out rollouts.jsonl
    """
    from evokit.agents import PROTOCOLS, LLMAgent
    from evokit.rollout import rollout_group, write_rows
    from evokit.tasks import load_task

    if model is None:
        raise UserError("rollout needs --model (and --api-base for a local server, e.g. from `evokit serve-llm`)")
    if tool_mode not in PROTOCOLS:
        raise typer.BadParameter(f"must be one of {', '.join(sorted(PROTOCOLS))}", param_hint="--tool-mode")
    if n < 1 or max_turns < 1 or workers < 1:
        raise UserError("-n, --max-turns and --workers must be at least 1")
    (task_dir,) = task_dirs([path])[:1]
    task = load_task(task_dir)
    agent = LLMAgent(llm_client(model, api_base, llm_timeout, llm_retries, llm_concurrency), max_turns=max_turns, max_tokens=max_tokens, tool_mode=tool_mode,
                     temperature=temperature)
    rollouts = rollout_group(agent, task, group_size=n, workers=min(workers, n), max_turns=max_turns, seed=seed)
    if out is not None:
        write_rows(rollouts, out, model=model)
    table = Table(title=f"{n} rollout(s) of {agent.name} on {task_dir.name}")
    for col in ("#", "reward", "turns", "commands", "completion tokens", "prompt tokens", "finish", "error"):
        table.add_column(col)
    for r in rollouts:
        i = r.info
        table.add_row(str(r.index), "-" if r.reward is None else f"{r.reward:g}", str(i.get("model_turns", 0)),
                      str(r.n_turns), str(i.get("completion_tokens", 0)), str(i.get("prompt_tokens", 0)),
                      str(i.get("finish")), escape((r.error or "")[:80]) + (" (masked)" if r.masked else ""))
    console.print(table)
    scored = [r.reward for r in rollouts if r.reward is not None]
    passes = _passes_at_k(scored)
    if passes:
        console.print(", ".join(f"pass@{k} {v:.3f}" for k, v in passes.items())
                      + f"  ({len(scored)} scored rollout(s), {n - len(scored)} masked; reward 1 counts as a pass)")
    print(json.dumps({"task": task_dir.name, "rewards": [r.reward for r in rollouts],
                      "mean_reward": sum(scored) / len(scored) if scored else None,
                      "pass_at_k": {str(k): v for k, v in passes.items()},
                      "turns": [r.info.get("model_turns", 0) for r in rollouts],
                      "completion_tokens": [r.info.get("completion_tokens", 0) for r in rollouts],
                      "masked": sum(r.masked for r in rollouts)}))


def _passes_at_k(rewards: list[float]) -> dict[int, float]:
    """Unbiased pass@k (:func:`evokit.stats.pass_at_k`) of one task's scored rollouts, for k = 1, 2,
    4, … up to and including their number; a pass is a reward of 1 (the verifier's full score)."""
    from evokit.stats import pass_at_k

    n, c = len(rewards), sum(r >= 1.0 for r in rewards)
    ks = sorted({*(2 ** i for i in range(n.bit_length()) if 2 ** i <= n), n} - {0})
    return {k: pass_at_k(n, c, k) for k in ks}


@app.command("export-traces")
def export_traces(
    rows: Annotated[list[Path], typer.Argument(help="rollout rows (.jsonl from `evokit rollout --out`, "
                                                    "`evokit train-llm`), or folders holding them")],
    out: Annotated[Path, typer.Option(help="file to write (.jsonl, one conversation or trajectory per line)")],
    min_reward: Annotated[float | None, typer.Option(help="keep only rollouts with at least this reward "
                                                           "(e.g. 1 for rejection sampling)")] = None,
    format: Annotated[str, typer.Option(help="sharegpt: `conversations` rows, as Harbor's `traces export` | "
                                             "atif: Harbor's ATIF trajectories")] = "sharegpt",
) -> None:
    """Write rollouts as SFT data: ShareGPT-style ``conversations`` rows, as Harbor's `traces export` does, or ATIF.

    Example: evokit export-traces rollouts.jsonl --out sft.jsonl --min-reward 1
    """
    from evokit.traces import FORMATS, traces_from_rows

    if format not in FORMATS:
        raise UserError(f"--format {format}: choose one of {', '.join(FORMATS)}")

    files: list[Path] = []
    for p in rows:
        if not p.exists():
            raise UserError(f"{p}: no such file or folder")
        files += sorted(p.rglob("*.jsonl")) if p.is_dir() else [p]
    if not files:
        raise UserError(f"no .jsonl rows under {', '.join(map(str, rows))}")
    written, skipped = traces_from_rows(files, out, min_reward=min_reward, format=format)
    kind = "ATIF trajectory(ies)" if format == "atif" else "conversation(s)"
    console.print(f"{written} {kind} → {out}" + (f" ({skipped} rollout(s) left out: "
                  "no kept messages, masked, or under --min-reward)" if skipped else ""))
