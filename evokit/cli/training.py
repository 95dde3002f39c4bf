"""Training commands: train (the CPU learner) and train-llm (an LLM through TRL).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from evokit.cli.base import app, console, task_dirs


@app.command()
def train(
    out: Annotated[Path, typer.Option(help="run folder (rows and checkpoint); resumed if it exists")],
    source: Annotated[str, typer.Option(help="store (an evolved lineage store) | genenv")] = "store",
    store: Annotated[Path | None, typer.Option(help="lineage store, for --source store")] = None,
    curriculum: Annotated[str, typer.Option(help="a registered task source trained on the store: el | random | "
                                                    "dt | replay | a plug-in (evokit.curricula)")] = "el",
    simulator: Annotated[str, typer.Option(help="learning | random (with --source genenv)")] = "learning",
    steps: Annotated[int, typer.Option(help="GRPO updates (EE: 200), or GenEnv epochs")] = 50,
    group_size: Annotated[int, typer.Option(help="rollouts per GRPO group (EE: B = 8)")] = 8,
    tasks_per_step: Annotated[int, typer.Option(help="GRPO groups per update")] = 2,
    eval_tasks: Annotated[Path | None, typer.Option(help="folder of held-out tasks")] = None,
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
    workers: Annotated[int, typer.Option(help="rollouts at once")] = 2,
    learner: Annotated[str, typer.Option(help="solver: pretrained on data drawn from the world, never reads p_T "
                                              "(evokit.cpu_agent.solvers) | prior: log p_T in its logits, shared with D_T")
                       ] = "solver",
) -> None:
    """Train the CPU learner with GRPO on a curriculum or with GenEnv (the LLM policy: `evokit train-llm`).

    The learner starts as the studies' agents do, a solver pretrained on data (``--learner solver``,
    saved as ``OUT/solver.pt``): with ``--learner prior`` it starts from p_T, the distribution D_T is
    measured against, so a D_T–pass-rate correlation of that learner partly follows from its construction.

    Example: evokit train --store runs/store --out runs/train --curriculum el
    """
    with console.status("loading torch, the learner and the task sources"):
        from evokit.cpu_agent.policy import PolicyConfig
        from evokit.cpu_agent.solvers import saved_policy, world_solver
        from evokit.curricula import source_from
        from evokit.genenv import GenEnvConfig, GenEnvSource
        from evokit.run_summary import run_report
        from evokit.train import ResumeError, TrainConfig
        from evokit.train import train as run_training

    if learner not in {"solver", "prior"}:
        raise typer.BadParameter("--learner must be solver or prior")
    cfg = TrainConfig(steps=steps, group_size=group_size, tasks_per_step=tasks_per_step, seed=seed, workers=workers)
    if source == "store":
        if store is None:
            raise typer.BadParameter("--source store needs --store (made by `evokit evolve`)")
        src = source_from(curriculum, store=store)  # a SourceError is the user's: one line, exit 2
        held_out = task_dirs([eval_tasks]) if eval_tasks else []
    elif source == "genenv":
        if simulator not in {"learning", "random"}:
            raise typer.BadParameter("--simulator must be learning or random")
        src, held_out = GenEnvSource(GenEnvConfig(learning=simulator == "learning")), []
    else:
        raise typer.BadParameter("--source must be store or genenv")
    init = saved_policy(out / "solver.pt", world_solver(seed), progress=True) if learner == "solver" else None
    try:
        run_training(src, init.config if init else PolicyConfig(), out, cfg, init, eval_tasks=held_out)
    except ResumeError as e:
        raise typer.BadParameter(str(e)) from None
    for line in [*run_report(out), f"rows in {out}/steps.jsonl"]:
        console.print(line, style="bold yellow" if line.startswith("warning") else None, markup=False,
                      highlight=False, soft_wrap=True)


@app.command("train-llm")
def train_llm(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option(help="run folder (rows, TRL checkpoints); resumed if it exists")],
    model: Annotated[str, typer.Option(help="local HF model dir | .gguf file | smollm2 | tiny")] = "smollm2",
    source: Annotated[str, typer.Option(help="store | tasks | genenv | none (in-process, no sandbox)")] = "store",
    store: Annotated[Path | None, typer.Option(help="lineage store, for --source store")] = None,
    tasks: Annotated[Path | None, typer.Option(help="folder of task folders, for --source tasks")] = None,
    curriculum: Annotated[str, typer.Option(help="a registered task source on the store / tasks: el | random | "
                                                    "dt | replay | a plug-in (evokit.curricula)")] = "el",
    config: Annotated[Path | None, typer.Option(help="YAML of LLMTrainConfig and GRPOConfig fields; "
                                                     "options given here override it")] = None,
    steps: Annotated[int, typer.Option(help="GRPO updates (EE: 200)")] = 10,
    group_size: Annotated[int, typer.Option(help="rollouts per GRPO group (EE: B = 8)")] = 8,
    tasks_per_step: Annotated[int, typer.Option(help="GRPO groups per update")] = 2,
    micro_batch: Annotated[int | None, typer.Option(help="rows per forward/backward (divides G × groups)")] = None,
    max_completion_length: Annotated[int, typer.Option(help="tokens of a whole episode")] = 1024,
    max_turns: Annotated[int, typer.Option(help="tool calls per episode")] = 10,
    lr: Annotated[float, typer.Option("--learning-rate", "--lr", help="learning rate")] = 1e-6,
    beta: Annotated[float, typer.Option(help="KL coefficient to the initial model")] = 0.0,
    generation: Annotated[str, typer.Option(help="auto | transformers | vllm-colocate | vllm-server")] = "auto",
    vllm_server_url: Annotated[str | None, typer.Option(help="with --generation vllm-server")] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda")] = "auto",
    dtype: Annotated[str, typer.Option(help="auto | bfloat16 | float32 | mixed (fp32 weights, bf16 autocast)")] = "auto",
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
    report_to: Annotated[str, typer.Option(help="none | tensorboard, wandb, trackio, mlflow (comma-separated)")
                         ] = "none",
    lora_r: Annotated[int, typer.Option(help="LoRA rank through PEFT (0: train every weight)")] = 0,
    lora_alpha: Annotated[int | None, typer.Option(help="LoRA scale α (default 2 × rank)")] = None,
    lora_dropout: Annotated[float, typer.Option(help="LoRA dropout")] = 0.05,
    lora_target_modules: Annotated[str, typer.Option(help="modules LoRA adapts (comma-separated)")] = "all-linear",
) -> None:
    """Train an LLM with TRL's GRPO on evokit tasks in sandboxes (the CPU learner: `evokit train`).

    Example: evokit train-llm --model tiny --source none --out runs/train-llm --steps 2
    """
    from evokit.curricula import source_from
    from evokit.trl_trainer import SetupError
    from evokit.trl_trainer import train_llm as run_training
    from evokit.trl_trainer.config_file import llm_config

    settings = dict(steps=steps, group_size=group_size, tasks_per_step=tasks_per_step, micro_batch=micro_batch,
                    max_completion_length=max_completion_length, max_turns=max_turns, learning_rate=lr, beta=beta,
                    generation=generation, vllm_server_url=vllm_server_url, device=device, dtype=dtype, seed=seed,
                    report_to=report_to, lora_r=lora_r, lora_alpha=lora_alpha, lora_dropout=lora_dropout,
                    lora_target_modules=lora_target_modules)
    given = {k: v for k, v in settings.items()  # the options typed on the command line: they override --config
             if getattr(ctx.get_parameter_source("lr" if k == "learning_rate" else k), "name", "") == "COMMANDLINE"}
    # A SetupError or SourceError is the user's: one line, exit 2 (evokit.errors).
    cfg = llm_config(config, **(given if config else settings))
    if source not in ("store", "tasks", "genenv", "none"):
        raise SetupError(f"unknown --source {source!r}: choose store, tasks, genenv or none")
    name = curriculum if source in ("store", "tasks") else source
    src = source_from(name, store=store if source == "store" else None,
                      tasks=task_dirs([tasks]) if source == "tasks" and tasks else ())
    run_training(model, src, out, cfg)
    console.print(f"rows in {out}/steps.jsonl, checkpoints in {out}/trl")
