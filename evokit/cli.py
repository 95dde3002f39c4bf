"""``evokit`` command line. Each command is a thin shell over a library call."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

os.environ.setdefault("HARBOR_TELEMETRY", "0")

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="evokit: verified, ever-harder terminal environments for RL agents.")
console = Console()


def _task_dirs(paths: list[Path]) -> list[Path]:
    """Task folders among ``paths``: a folder with task.toml, or every such child of a folder."""
    out = []
    for p in paths:
        if (p / "task.toml").is_file() or not p.is_dir():
            out.append(p)
        else:
            children = sorted(c for c in p.iterdir() if (c / "task.toml").is_file())
            out.extend(children or [p])
    return out


@app.command()
def verify(
    paths: Annotated[list[Path], typer.Argument(help="task folders, or folders of task folders")],
    workers: Annotated[int, typer.Option(help="tasks verified at once")] = 2,
    determinism_runs: Annotated[int, typer.Option(help="oracle runs in fresh sandboxes")] = 2,
    rubric: Annotated[list[Path] | None, typer.Option(help="TOML file of extra pattern rules")] = None,
    log_dir: Annotated[Path | None, typer.Option(help="keep each trial's /logs here")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print verdicts as JSON lines")] = False,
) -> None:
    """Run the oracle, null-solution and rubric verifiers; exit 1 if any task fails."""
    from evokit.verify import VerifyConfig, rubric_from, verify_many

    cfg = VerifyConfig(determinism_runs=determinism_runs, rubric=rubric_from(rubric or []), log_root=log_dir)
    tasks = _task_dirs(paths)
    verdicts = verify_many(tasks, cfg, workers=workers, progress=len(tasks) > 1 and not as_json)
    if as_json:
        for v in verdicts:
            print(json.dumps(v.to_dict(), default=str))
    else:
        table = Table(title="evokit verify")
        for col in ("task", "oracle", "null", "rubric", "time (s)", "verdict"):
            table.add_column(col)
        for v in verdicts:
            by = {c.name: c for c in v.checks}
            rubric_fail = [c.name.removeprefix("rubric:") for c in v.checks
                           if c.name.startswith("rubric:") and not c.passed]
            cell = lambda c: "-" if c is None else ("[green]pass" if c.passed else "[red]FAIL")  # noqa: E731
            table.add_row(Path(v.task).name, cell(by.get("oracle")), cell(by.get("null")),
                          "[green]pass" if not rubric_fail else "[red]" + ", ".join(rubric_fail),
                          f"{v.timings.get('total', 0):.2f}", "[green]PASS" if v.passed else "[red]FAIL")
        console.print(table)
        for v in verdicts:
            for c in v.failures:
                console.print(f"[red]✗[/red] {Path(v.task).name} · {c.name}: {c.reason}")
    raise typer.Exit(0 if all(v.passed for v in verdicts) else 1)


@app.command()
def run(
    path: Annotated[Path, typer.Argument(help="a task folder")],
    agent: Annotated[str, typer.Option(help="oracle (reference solution) or nop (does nothing)")] = "oracle",
    log_dir: Annotated[Path | None, typer.Option(help="keep the trial's /logs here")] = None,
) -> None:
    """Run one trial of a task in the local sandbox and print its reward."""
    from evokit.sandbox.task_env import image_for_task
    from evokit.tasks import load_task
    from evokit.verify import run_trial

    if agent not in {"oracle", "nop"}:
        raise typer.BadParameter("agent must be oracle or nop (LLM agents: see `evokit rollout`)")
    task = load_task(path)
    result = run_trial(task, image_for_task(task, log=lambda s: console.print(f"[dim]{s}")),
                       kind="oracle" if agent == "oracle" else "null", log_dir=log_dir)
    if result.error:
        console.print(f"[red]error:[/red] {result.error}")
    print(json.dumps({"task": path.name, "agent": agent, "rewards": result.rewards,
                              "timings": {k: round(v, 3) for k, v in result.timings.items()}}))
    raise typer.Exit(0 if result.rewards is not None else 1)


def _client(model: str | None, api_base: str | None):
    from evokit.llm import LLMClient

    if model is None:
        return None
    return LLMClient(model=model, api_base=api_base, backend="openai" if api_base else "litellm")


@app.command()
def difficulty(
    paths: Annotated[list[Path], typer.Argument(help="task folders, or folders of task folders")],
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per task")] = False,
    reference: Annotated[str, typer.Option(help="catalog | empirical (over the given tasks) | llm")] = "catalog",
    model: Annotated[str | None, typer.Option(help="LLM for foreign tasks' plans / the llm reference")] = None,
    api_base: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")] = None,
) -> None:
    """D_T of each task and its decomposition into length, scenario and skill terms (EE §3)."""
    from evokit import difficulty as dt
    from evokit.extract import extract

    client = _client(model, api_base)
    tasks = _task_dirs(paths)
    plans = [extract(t, client) for t in tasks]
    if reference == "catalog":
        ref = dt.catalog_reference()
    elif reference == "empirical":
        ref = dt.empirical_reference(plans)
    elif reference == "llm":
        if client is None:
            raise typer.BadParameter("--reference llm needs --model (and --api-base for a local server)")
        ref = dt.llm_reference(client)
    else:
        raise typer.BadParameter("reference must be catalog, empirical or llm")
    rows = [{"task": t.name, "steps": [f"{s.scenario}/{s.skill}" for s in p.steps], **dt.score(p, ref).as_dict()}
            for t, p in zip(tasks, plans, strict=True)]
    if as_json:
        for r in rows:
            print(json.dumps(r))
        return
    table = Table(title=f"D_T under the {ref.name} reference")
    for col in ("task", "L", "D_T", "length", "scenario", "skill", "steps"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["task"], str(int(r["length"])), f"{r['total']:.2f}", f"{r['length_term']:.2f}",
                      f"{r['scenario_term']:+.2f}", f"{r['skill_term']:+.2f}", " → ".join(r["steps"]))
    console.print(table)


@app.command()
def seeds(
    n: Annotated[int, typer.Option("--n", help="number of seed tasks")] = 20,
    seed: Annotated[int, typer.Option(help="random seed of the pool")] = 0,
    out: Annotated[Path, typer.Option(help="where to write the seed folders")] = Path("runs/seeds"),
    workers: Annotated[int, typer.Option(help="seeds generated and verified at once")] = 2,
) -> None:
    """Write N verified seed tasks (2–5 steps), balanced over scenario domains, spanning D_T."""
    from evokit.seeds import make_seeds

    rows = make_seeds(n, seed, out, workers=workers)
    console.print(f"{len(rows)} verified seeds in {out} (index: {out / 'seeds.jsonl'})")


@app.command()
def evolve(
    seeds: Annotated[Path, typer.Option(help="folder of seed tasks (e.g. from `evokit seeds`)")],
    out: Annotated[Path, typer.Option(help="lineage store to write (resumed if it exists)")],
    generations: Annotated[int, typer.Option(help="generations per lineage (EE: 15)")] = 15,
    effort: Annotated[str, typer.Option(help="low | high | max")] = "high",
    direction: Annotated[str | None, typer.Option(help="pin one direction: length | scenario | skill")] = None,
    backend: Annotated[str, typer.Option(help="procedural | llm")] = "procedural",
    model: Annotated[str | None, typer.Option(help="LLM for the llm backend")] = None,
    api_base: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint of the llm backend")] = None,
    seed: Annotated[int, typer.Option(help="random seed of the run")] = 0,
    workers: Annotated[int, typer.Option(help="lineages evolved at once")] = 2,
    executor: Annotated[str, typer.Option(help="local | ray")] = "local",
    ray_address: Annotated[str | None, typer.Option(help="Ray cluster address (with --executor ray)")] = None,
    limit: Annotated[int | None, typer.Option(help="use only the first N seeds")] = None,
) -> None:
    """Evolve one lineage per seed; kill it any time and run the same command again to resume."""
    from evokit.evolve import EvolveConfig, procedural_backend
    from evokit.evolve import evolve as run_evolution
    from evokit.parallel import make_executor

    if backend == "llm":
        from evokit.evolve.llm_roles import llm_backend

        client = _client(model, api_base)
        if client is None:
            raise typer.BadParameter("--backend llm needs --model (and --api-base for a local server)")
        chosen = llm_backend(client)
    elif backend == "procedural":
        chosen = procedural_backend()
    else:
        raise typer.BadParameter("backend must be procedural or llm")
    seed_dirs = _task_dirs([seeds])[:limit]
    cfg = EvolveConfig(generations=generations, effort=effort, direction=direction, seed=seed)
    store = run_evolution(seed_dirs, out, cfg, backend=chosen, workers=workers,
                          executor=make_executor(executor, workers, ray_address))
    envs = store.envs()
    console.print(f"{len(envs)} environments in {len(store.lineages())} lineages → {out}")


lineage_app = typer.Typer(help="inspect and export a lineage store")
app.add_typer(lineage_app, name="lineage")


@lineage_app.command("show")
def lineage_show(store: Annotated[Path, typer.Argument(help="a lineage store")],
                 lineage_id: Annotated[str | None, typer.Option("--lineage", help="one lineage only")] = None) -> None:
    """One row per environment: generation, direction, D_T and its parts, mutation."""
    from evokit.lineage import LineageStore

    st = LineageStore(store)
    table = Table(title=f"lineages in {store}")
    for col in ("lineage", "g", "direction", "L", "D_T", "scenario", "skill", "mutation", "task"):
        table.add_column(col)
    for e in st.envs():
        if lineage_id and e.lineage != lineage_id:
            continue
        d, m = e.data.get("difficulty", {}), e.data.get("mutation") or {}
        table.add_row(e.lineage, str(e.generation), e.direction or "seed", str(int(d.get("length", 0))),
                      f"{d.get('total', 0):.1f}", f"{d.get('scenario_term', 0):+.1f}", f"{d.get('skill_term', 0):+.1f}",
                      f"{m['total']:.2f}" if m else "-", e.task)
    console.print(table)
    problems = st.check()
    for p in problems:
        console.print(f"[red]{p}")
    raise typer.Exit(1 if problems else 0)


@lineage_app.command("export")
def lineage_export(store: Annotated[Path, typer.Argument(help="a lineage store")],
                   out: Annotated[Path, typer.Option(help="Harbor dataset folder to write")],
                   generation: Annotated[int | None, typer.Option(help="only this generation")] = None) -> None:
    """Copy environments into a plain Harbor dataset folder (one task folder each)."""
    from evokit.lineage import LineageStore

    written = LineageStore(store).export(out, generation=generation)
    console.print(f"{len(written)} task folders → {out}")


@app.command()
def train(
    out: Annotated[Path, typer.Option(help="run folder (rows and checkpoint); resumed if it exists")],
    source: Annotated[str, typer.Option(help="store (an evolved lineage store) | genenv")] = "store",
    store: Annotated[Path | None, typer.Option(help="lineage store, for --source store")] = None,
    curriculum: Annotated[str, typer.Option(help="el | random | dt (with --source store)")] = "el",
    simulator: Annotated[str, typer.Option(help="learning | random (with --source genenv)")] = "learning",
    steps: Annotated[int, typer.Option(help="GRPO updates (EE: 200), or GenEnv epochs")] = 50,
    group_size: Annotated[int, typer.Option(help="rollouts per GRPO group (EE: B = 8)")] = 8,
    tasks_per_step: Annotated[int, typer.Option(help="GRPO groups per update")] = 2,
    eval_tasks: Annotated[Path | None, typer.Option(help="folder of held-out tasks")] = None,
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
    workers: Annotated[int, typer.Option(help="rollouts at once")] = 2,
) -> None:
    """Train the CPU learner with GRPO on a curriculum or with GenEnv (the LLM policy: `evokit train-llm`)."""
    from evokit.genenv import GenEnvConfig, GenEnvSource
    from evokit.learners import PolicyConfig
    from evokit.train import ResumeError, TrainConfig
    from evokit.train import train as run_training
    from evokit.trl_trainer import SetupError, source_from

    cfg = TrainConfig(steps=steps, group_size=group_size, tasks_per_step=tasks_per_step, seed=seed, workers=workers)
    if source == "store":
        if store is None:
            raise typer.BadParameter("--source store needs --store (made by `evokit evolve`)")
        try:
            src = source_from(curriculum, store=store)
        except SetupError as e:
            raise typer.BadParameter(str(e)) from None
        held_out = _task_dirs([eval_tasks]) if eval_tasks else []
    elif source == "genenv":
        if simulator not in {"learning", "random"}:
            raise typer.BadParameter("--simulator must be learning or random")
        src, held_out = GenEnvSource(GenEnvConfig(learning=simulator == "learning")), []
    else:
        raise typer.BadParameter("--source must be store or genenv")
    try:
        run_training(src, PolicyConfig(), out, cfg, eval_tasks=held_out)
    except ResumeError as e:
        raise typer.BadParameter(str(e)) from None
    console.print(f"rows in {out}/steps.jsonl")


@app.command("train-llm")
def train_llm(
    out: Annotated[Path, typer.Option(help="run folder (rows, TRL checkpoints); resumed if it exists")],
    model: Annotated[str, typer.Option(help="local HF model dir | .gguf file | smollm2 | tiny")] = "smollm2",
    source: Annotated[str, typer.Option(help="store | tasks | genenv | none (in-process, no sandbox)")] = "store",
    store: Annotated[Path | None, typer.Option(help="lineage store, for --source store")] = None,
    tasks: Annotated[Path | None, typer.Option(help="folder of task folders, for --source tasks")] = None,
    curriculum: Annotated[str, typer.Option(help="el | random | dt (store / tasks)")] = "el",
    steps: Annotated[int, typer.Option(help="GRPO updates (EE: 200)")] = 10,
    group_size: Annotated[int, typer.Option(help="rollouts per GRPO group (EE: B = 8)")] = 8,
    tasks_per_step: Annotated[int, typer.Option(help="GRPO groups per update")] = 2,
    micro_batch: Annotated[int | None, typer.Option(help="rows per forward/backward (divides G × groups)")] = None,
    max_completion_length: Annotated[int, typer.Option(help="tokens of a whole episode")] = 1024,
    max_turns: Annotated[int, typer.Option(help="tool calls per episode")] = 10,
    lr: Annotated[float, typer.Option(help="learning rate")] = 1e-6,
    beta: Annotated[float, typer.Option(help="KL coefficient to the initial model")] = 0.0,
    generation: Annotated[str, typer.Option(help="auto | transformers | vllm-colocate | vllm-server")] = "auto",
    vllm_server_url: Annotated[str | None, typer.Option(help="with --generation vllm-server")] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda")] = "auto",
    dtype: Annotated[str, typer.Option(help="auto | bfloat16 | float32 | mixed (fp32 weights, bf16 autocast)")] = "auto",
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
) -> None:
    """Train an LLM with TRL's GRPO on evokit tasks in sandboxes (the CPU learner: `evokit train`)."""
    from evokit.trl_trainer import LLMTrainConfig, SetupError, source_from
    from evokit.trl_trainer import train_llm as run_training

    try:
        cfg = LLMTrainConfig(steps=steps, group_size=group_size, tasks_per_step=tasks_per_step, micro_batch=micro_batch,
                             max_completion_length=max_completion_length, max_turns=max_turns, learning_rate=lr,
                             beta=beta, generation=generation, vllm_server_url=vllm_server_url, device=device,
                             dtype=dtype, seed=seed)
        if source not in ("store", "tasks", "genenv", "none"):
            raise SetupError(f"unknown --source {source!r}: choose store, tasks, genenv or none")
        name = curriculum if source in ("store", "tasks") else source
        src = source_from(name, store=store if source == "store" else None,
                          tasks=_task_dirs([tasks]) if source == "tasks" and tasks else ())
        run_training(model, src, out, cfg)
    except SetupError as e:
        raise typer.BadParameter(str(e)) from None
    console.print(f"rows in {out}/steps.jsonl, checkpoints in {out}/trl")


sandbox_app = typer.Typer(help="list / clean host state of local sandboxes (state dirs, cgroups)")
app.add_typer(sandbox_app, name="sandbox")


@sandbox_app.command("list")
def sandbox_list() -> None:
    """Every sandbox and build step with host state: live (owner running), stale or orphan."""
    from evokit.sandbox import stale

    entries = stale.scan()
    table = Table(title=f"evokit sandboxes in {stale.RUN_DIR}")
    for col in ("id", "status", "owner pid", "state dir", "cgroups", "build dir"):
        table.add_column(col)
    for e in entries:
        table.add_row(e.id, e.status, str(e.pid or "-"), e.state_dir or "-", str(len(e.cgroup_dirs)), e.tmp_dir or "-")
    console.print(table if entries else f"no sandbox state in {stale.RUN_DIR}")


@sandbox_app.command("clean")
def sandbox_clean() -> None:
    """Remove the state of sandboxes whose harness is gone (never a live one)."""
    from evokit.sandbox import stale

    removed = stale.clean()
    for line in removed:
        console.print(f"removed {line}")
    live = sum(e.status == "live" for e in stale.scan())
    console.print(f"{len(removed)} removed; {live} live left alone")


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    app()
