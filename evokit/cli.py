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


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    app()
