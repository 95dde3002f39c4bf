"""Commands over task folders: verify, run, difficulty, seeds, extract, import-tb1.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from evokit.cli.base import (
    INTERRUPT,
    LLMConcurrency,
    LLMMaxCalls,
    LLMRetries,
    LLMTimeout,
    app,
    console,
    llm_client,
    task_dirs,
)
from evokit.errors import UserError


@app.command()
def verify(
    paths: Annotated[list[Path], typer.Argument(help="task folders, or folders of task folders")],
    workers: Annotated[int, typer.Option(help="tasks verified at once")] = 2,
    determinism_runs: Annotated[int, typer.Option(help="oracle runs in fresh sandboxes")] = 2,
    rubric: Annotated[list[Path] | None, typer.Option(help="TOML file of extra pattern rules")] = None,
    log_dir: Annotated[Path | None, typer.Option(help="keep each trial's /logs here [default: "
                                                      "$EVOKIT_CACHE/logs/verify, capped]")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print verdicts as JSON lines")] = False,
    no_hack_gate: Annotated[bool, typer.Option("--no-hack-gate", help="skip the hack gate (generic hack "
                                                                       "solutions must earn reward 0)")] = False,
    hacker_model: Annotated[str | None, typer.Option(help="also run an LLM told to pass the tests without "
                                                          "doing the task (the hack gate's LLM hacker)")] = None,
    hacker_api_base: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint of --hacker-model")] = None,
    hacker_turns: Annotated[int, typer.Option(help="model responses per LLM-hacker attempt")] = 10,
    sandbox: Annotated[str | None, typer.Option(help="sandbox backend: local, docker or a plug-in's name "
                                                     "[default: $EVOKIT_SANDBOX, else local]")] = None,
) -> None:
    """Run the oracle, null-solution, rubric and hack-gate verifiers; exit 1 if any task fails.

    Example: evokit verify examples/tasks/*
    """
    from evokit.verify import VerifyConfig, rubric_from, verify_many
    from evokit.verify import logs as verify_logs
    from evokit.verify.hacks import HackGateConfig, LLMHackerConfig

    for r in rubric or []:
        if not r.is_file():
            raise UserError(f"--rubric {r}: no such file (give a TOML file of [[rule]] tables)")
    try:
        extra = rubric_from(rubric or [])
    except (ValueError, OSError) as e:
        raise UserError(str(e)) from e
    if no_hack_gate and hacker_model:
        raise UserError("--hacker-model runs inside the hack gate: leave out --no-hack-gate")
    try:
        hacker = LLMHackerConfig(hacker_model, hacker_api_base, max_turns=hacker_turns) if hacker_model else None
    except ValueError as e:
        raise UserError(f"{e} (option --hacker-turns)") from e
    cfg = VerifyConfig(determinism_runs=determinism_runs, rubric=extra,
                       log_root=log_dir or verify_logs.default_root("verify"),
                       hack_gate=None if no_hack_gate else HackGateConfig(llm=hacker), backend=sandbox)
    tasks = task_dirs(paths)
    verdicts = verify_many(tasks, cfg, workers=workers, progress=len(tasks) > 1 and not as_json)
    if log_dir is None:
        verify_logs.prune(cfg.log_root)
    errors = sum(any(c.name in {"format", "build"} for c in v.failures) for v in verdicts)
    passed = sum(v.passed for v in verdicts)
    summary = f"{len(verdicts)} task(s): {passed} passed, {len(verdicts) - passed - errors} failed, {errors} errors"
    if as_json:
        for v in verdicts:
            print(json.dumps(v.to_dict(), default=str))
        print(summary, file=sys.stderr)
    else:
        table = Table(title="evokit verify")
        for col in ("task", "oracle", "null", "rubric", "hack gate", "time (s)", "verdict"):
            table.add_column(col)
        shown = _shown_names([v.task for v in verdicts])
        for v in verdicts:
            by = {c.name: c for c in v.checks}
            rubric = [c for c in v.checks if c.name.startswith("rubric:")]
            rubric_fail = [c.name.removeprefix("rubric:") for c in rubric if not c.passed]
            # "—": the verifier did not run (the task did not load, or did not build)
            cell = lambda c: "—" if c is None else ("[green]pass" if c.passed else "[red]FAIL")  # noqa: E731
            gate = by.get("hack-gate")
            gate_cell = "—" if gate is None else "[green]pass" if gate.passed else "[red]" + escape(
                ", ".join(v.hack_gate["failed"]) or "error")
            rubric_cell = "—" if not rubric else "[red]" + ", ".join(rubric_fail) if rubric_fail else "[green]pass"
            table.add_row(escape(shown[v.task]), cell(by.get("oracle")), cell(by.get("null")), rubric_cell,
                          gate_cell, f"{v.timings.get('total', 0):.2f}", "[green]PASS" if v.passed else "[red]FAIL")
        console.print(table)
        for v in verdicts:
            for c in v.failures:
                console.print(f"[red]✗[/red] {escape(shown[v.task])} · {c.name}: {escape(c.reason)}")
            if v.failures and v.log_dir:
                console.print(f"  [dim]logs: {escape(v.log_dir)}")
        console.print(summary + " (errors: the task could not be loaded or built)" * bool(errors))
    raise typer.Exit(0 if all(v.passed for v in verdicts) else 1)


def _shown_names(paths: list[str]) -> dict[str, str]:
    """How the verify table names each task: its path below the folder all the tasks share (a
    dataset's root), so two tasks of the same name in different folders read differently; a task
    verified alone is shown by its folder name."""
    if not paths:
        return {}
    absolute = [Path(p).absolute() for p in paths]
    common = Path(os.path.commonpath(absolute)) if len(absolute) > 1 else absolute[0].parent
    if common in absolute:  # one task inside another's folder: keep the common folder's own name
        common = common.parent
    return {p: str(a.relative_to(common)) for p, a in zip(paths, absolute, strict=True)}


@app.command()
def run(
    path: Annotated[Path, typer.Argument(help="a task folder")],
    agent: Annotated[str, typer.Option(help="oracle (reference solution) or nop (does nothing)")] = "oracle",
    log_dir: Annotated[Path | None, typer.Option(help="keep the trial's /logs here [default: "
                                                      "$EVOKIT_CACHE/logs/run/<task>-<hash>, capped]")] = None,
    sandbox: Annotated[str | None, typer.Option(help="sandbox backend: local, docker or a plug-in's name "
                                                     "[default: $EVOKIT_SANDBOX, else local]")] = None,
) -> None:
    """Run one trial of a task in a sandbox (local unless --sandbox or $EVOKIT_SANDBOX) and print its reward.

    Example: evokit run examples/tasks/files-organize --agent nop
    """
    from evokit.sandbox.task_env import image_for_task
    from evokit.tasks import content_hash, load_task
    from evokit.verify import logs as verify_logs
    from evokit.verify import run_trial

    if agent not in {"oracle", "nop"}:
        raise typer.BadParameter("agent must be oracle or nop (LLM agents: see `evokit rollout`)")
    task = load_task(path)
    keep = log_dir or verify_logs.default_root("run") / f"{path.name}-{content_hash(path)[:10]}"
    if log_dir is None:  # the default folder holds this run's logs only
        shutil.rmtree(keep, ignore_errors=True)
    result = run_trial(task, image_for_task(task, log=lambda s: console.print(f"[dim]{s}"), backend=sandbox),
                       kind="oracle" if agent == "oracle" else "null", log_dir=keep, backend=sandbox)
    if log_dir is None:
        verify_logs.prune(keep.parent)
    if result.error:
        console.print(f"[red]error:[/red] {escape(result.error)}")
    elif result.why and result.reward() != 1.0:
        console.print(f"[yellow]tests:[/yellow] {escape(result.why)}")
    if result.error or result.reward() != 1.0:
        console.print(f"[dim]logs: {escape(str(keep))}")
    print(json.dumps({"task": path.name, "agent": agent, "rewards": result.rewards,
                              "timings": {k: round(v, 3) for k, v in result.timings.items()}}))
    raise typer.Exit(0 if result.rewards is not None else 1)


# Options of every command that calls an LLM; each also reads an environment variable, so a
# machine's endpoint settings can live in the environment (a shell profile, a job script).


@app.command()
def difficulty(
    paths: Annotated[list[Path], typer.Argument(help="task folders, or folders of task folders")],
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per task")] = False,
    reference: Annotated[str, typer.Option(help="catalog | empirical (over the given tasks) | llm")] = "catalog",
    model: Annotated[str | None, typer.Option(help="LLM for foreign tasks' plans / the llm reference")] = None,
    api_base: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")] = None,
    llm_timeout: LLMTimeout = 120.0,
    llm_retries: LLMRetries = 1,
    llm_concurrency: LLMConcurrency = 0,
) -> None:
    """D_T of each task and its decomposition into length, scenario and skill terms (EE §3).

    Example: evokit difficulty runs/seeds --reference empirical
    """
    from evokit import difficulty as dt
    from evokit.extract import extract

    client = llm_client(model, api_base, llm_timeout, llm_retries, llm_concurrency)
    tasks = task_dirs(paths)
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
    """Write N verified seed tasks (2–5 steps), balanced over scenario domains, spanning D_T.

    Example: evokit seeds --n 20 --out runs/seeds
    """
    from evokit.seeds import make_seeds

    INTERRUPT["resume"] = out
    rows = make_seeds(n, seed, out, workers=workers)
    console.print(f"{len(rows)} verified seeds in {out} (index: {out / 'seeds.jsonl'})")


@app.command()
def extract(
    paths: Annotated[list[Path], typer.Argument(help="task folders, or folders of task folders")],
    model: Annotated[str | None, typer.Option(help="LLM that maps a foreign task onto the catalog")] = None,
    api_base: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint, e.g. from `evokit serve-llm`")] = None,
    write: Annotated[bool, typer.Option("--write", help="record the plan in each task.toml's \\[metadata.evokit]")] = False,
    seed: Annotated[int, typer.Option(help="seed sent with the LLM calls")] = 0,
    llm_timeout: LLMTimeout = 120.0,
    llm_retries: LLMRetries = 1,
    llm_concurrency: LLMConcurrency = 0,
    max_calls: LLMMaxCalls = None,
) -> None:
    """Recover each task's plan ξ_E (exact for evokit tasks, through the LLM otherwise) and print it.

    A plan from the LLM is checked against the task (evokit.extract.grounding): one whose steps name data
    found nowhere in the task is reported on stderr and not recorded.

    With ``--write`` a foreign task's plan is recorded in its task.toml (``\\[metadata.evokit]``: plan,
    seed 0, goal), after which every evokit command treats it as an evokit task; task.toml is
    re-emitted by Harbor (comments are not kept, legacy keys come out migrated).

    Example: evokit extract my-task --model M --api-base http://127.0.0.1:8000/v1 --write
    """
    from evokit.difficulty import catalog_reference
    from evokit.evolve.harness import plan_difficulty
    from evokit.extract import GROUNDED_MIN, grounding, plan_of
    from evokit.extract import extract as extract_plan
    from evokit.tasks import EvokitMetadata, read_metadata, write_metadata

    client = llm_client(model, api_base, llm_timeout, llm_retries, llm_concurrency, max_calls, watch=True)
    for t in task_dirs(paths):
        exact = plan_of(t)
        if exact is None and client is None:
            raise UserError(f"{t}: not an evokit task (no plan in [metadata.evokit]); pass --model (and "
                            "--api-base for a local server, e.g. from `evokit serve-llm`) to extract its plan")
        plan = exact or extract_plan(t, client, seed=seed)
        fit = None if exact else grounding(plan, t)
        if fit is not None and not fit.fits:
            print(f"evokit: warning: the model's plan does not fit this task: {t}: {', '.join(fit.ungrounded)} "
                  f"name(s) nothing found in its instruction, files or tests (grounding {fit.score:.2f} < "
                  f"{GROUNDED_MIN}); {'not recorded; ' if write else ''}check the task, or extract again with "
                  "another --seed or a larger model", file=sys.stderr)
        recorded = False
        if write and exact is None and fit.fits:
            old = read_metadata(t) or EvokitMetadata()
            write_metadata(t, old.model_copy(update={
                "plan": plan.to_records(), "seed": 0, "goal": plan.goal or None,
                "difficulty": plan_difficulty(plan, catalog_reference()) or None, "content_hash": None}))
            recorded = True
        print(json.dumps({"task": str(t), "source": "metadata" if exact else "llm", "recorded": recorded,
                          "grounding": None if fit is None else round(fit.score, 3),
                          "steps": [f"{st.scenario}/{st.skill}" for st in plan.steps],
                          "plan": plan.to_records()}))


@app.command("import-tb1")
def import_tb1(
    src: Annotated[Path, typer.Argument(help="a Terminal-Bench 1 task folder (with task.yaml), or a folder of them")],
    dest: Annotated[Path, typer.Argument(help="the Harbor task to write (into DEST/<name> if DEST is a folder), "
                                              "or the dataset folder for a folder of tasks")],
) -> None:
    """Convert original Terminal-Bench tasks (task.yaml, run-tests.sh) into Harbor tasks with Harbor's mapper.

    Resources, network mode and test-time downloads come over as the source had them: review them, then
    run `evokit verify DEST`.

    Example: evokit import-tb1 terminal-bench/tasks runs/tb1
    """
    from evokit.tasks.migrate import import_terminal_bench

    done = import_terminal_bench(src, dest)
    for d in done:
        console.print(f"imported {escape(str(d))}")
    console.print(f"{len(done)} task(s) imported; next: evokit verify {escape(str(dest))}")
