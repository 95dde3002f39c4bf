"""``evokit`` command line. Each command is a thin shell over a library call.

What the CLI does with errors (:func:`report_error`; the classes are in :mod:`evokit.errors`):

* the user's or the environment's mistake, an :class:`evokit.errors.UserError` (a missing path, a
  bad option, a malformed task, a Dockerfile step that fails, no Docker daemon, a mistyped
  ``$EVOKIT_SANDBOX``, an LLM endpoint that fails, a store made with other parameters), and the OS
  refusing a path the user named (``FileNotFoundError``, ``NotADirectoryError``, ``FileExistsError``):
  one line on stderr, ``evokit: error: <what is wrong>; <what to do>``, exit 2, no traceback. The
  line is always one line: newlines are collapsed, a traceback inside a message is dropped, and a
  message longer than :data:`MESSAGE_LIMIT` keeps its start and its end. A bad command line
  (unknown option, bad value) is reported the same way, with the ``--help`` to read;
* anything else (a harness fault, a bug): one line, ``evokit: internal error: <type>: <message>``,
  exit 1;
* ``evokit --debug CMD ...`` (or ``EVOKIT_DEBUG=1``) re-raises either kind, so the traceback shows;
* jobs run in parallel (:class:`evokit.parallel.ParallelError`) whose failures are all the user's
  kind report the first job's error as above, with how many jobs failed; one job that died or hit a
  bug makes the whole an internal error.

Ctrl-C stops any command within seconds, with one line saying how to resume, and exits 130.
An LLM call budget (``--max-calls``) that runs out stops the run the same way, with one line, exit 4.
``evokit evolve`` exits 3 when its store holds no evolved child at all (every attempt was rejected,
or no seed started): the run worked, its outcome is nothing to use; the summary says why.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from evokit.errors import UserError

os.environ.setdefault("HARBOR_TELEMETRY", "0")

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="evokit: verified, ever-harder terminal environments for RL agents.\n\n"
                       "Example: evokit verify examples/tasks/*")
console = Console()
_DEBUG = {"on": False}
#: Exit status of a run stopped by its LLM call budget (``--max-calls``): what it finished is kept.
EXIT_BUDGET = 4
#: Typer ships its own click: its usage errors are the bases of its public BadParameter.
_UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def _print_version(value: bool) -> None:
    if value:
        from evokit import __version__

        print(f"evokit {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(debug: Annotated[bool, typer.Option("--debug", help="show tracebacks of errors")] = False,
             version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                                   help="print evokit's version and exit")] = False) -> None:
    _DEBUG["on"] = debug


def _skip(part: str) -> bool:
    return part.startswith(".") or part in {"__pycache__", "node_modules"}


def _find_tasks(root: Path) -> list[Path]:
    """Task folders below ``root``, outermost first found, following symlinked folders (a dataset of
    links to tasks is common) but never a folder twice."""
    found, seen = [], set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:
            dirnames[:] = []
            continue
        seen.add(real)
        if "task.toml" in filenames and Path(dirpath) != root:
            found.append(Path(dirpath))
            dirnames[:] = []  # a task's own subfolders are not searched
            continue
        dirnames[:] = sorted(d for d in dirnames if not _skip(d))
    return sorted(found)


def _task_dirs(paths: list[Path]) -> list[Path]:
    """Task folders among ``paths``: a folder with task.toml, or every task folder below a folder
    (a Harbor dataset, found recursively; hidden folders skipped; a task's own subfolders are not
    searched). A path that does not exist or holds no task is a :class:`UserError`."""
    out = []
    for p in paths:
        if not p.exists():
            raise UserError(f"{p}: no such file or folder")
        if (p / "task.toml").is_file():
            out.append(p)
            continue
        if not p.is_dir():
            raise UserError(f"{p}: not a task folder (a folder with task.toml) or a folder of them")
        found = _find_tasks(p)
        if not found:
            from evokit.tasks.migrate import terminal_bench_tasks

            if tb1 := terminal_bench_tasks(p):
                what = ("looks like a Terminal-Bench 1 task (task.yaml, no task.toml)" if tb1 == [p] else
                        f"no task folders (task.toml) under it, but {len(tb1)} Terminal-Bench 1 task(s) (task.yaml)")
                raise UserError(f"{p}: {what}: convert with `evokit import-tb1 {p} DEST`, then use DEST")
            raise UserError(f"{p}: no task folders (a folder with task.toml) under it")
        out.extend(found)
    return out


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
    tasks = _task_dirs(paths)
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
LLMTimeout = Annotated[float, typer.Option(
    "--llm-timeout", envvar="EVOKIT_LLM_TIMEOUT",
    help="seconds an LLM request may take before it is abandoned (and retried)")]
LLMRetries = Annotated[int, typer.Option(
    "--llm-retries", envvar="EVOKIT_LLM_RETRIES",
    help="more attempts after an LLM request times out or fails to connect (or gets HTTP 429/5xx)")]
LLMConcurrency = Annotated[int, typer.Option(
    "--llm-concurrency", envvar="EVOKIT_LLM_CONCURRENCY",
    help="LLM requests in flight at once (0: no cap); 1 suits a one-slot local server")]
LLMMaxCalls = Annotated[int | None, typer.Option(
    "--max-calls", help="LLM requests to send at most; then the run stops, keeping what it finished "
                        "(exit 4; rerun with a larger budget to continue)")]


def _client(model: str | None, api_base: str | None, timeout: float = 120.0, retries: int = 1,
            concurrency: int = 0, max_calls: int | None = None, watch: bool = False):
    """The LLM client of a command; ``watch`` prints a line per request on stderr (evokit.llm.print_call)."""
    from evokit.llm import LLMClient, print_call

    if model is None:
        return None
    try:
        return LLMClient(model=model, api_base=api_base, backend="openai" if api_base else "litellm",
                         timeout=timeout, max_retries=retries, concurrency=concurrency or None,
                         max_calls=max_calls, on_call=print_call if watch else None)
    except ValueError as e:
        raise UserError(f"{e} (options --llm-timeout, --llm-retries, --llm-concurrency, --max-calls)") from e


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

    client = _client(model, api_base, llm_timeout, llm_retries, llm_concurrency)
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
    """Write N verified seed tasks (2–5 steps), balanced over scenario domains, spanning D_T.

    Example: evokit seeds --n 20 --out runs/seeds
    """
    from evokit.seeds import make_seeds

    _INTERRUPT["resume"] = out
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
    no_hack_gate: Annotated[bool, typer.Option("--no-hack-gate", help="verify children without the hack gate "
                                               "(oracle, null and rubric only; a store keeps its choice)")] = False,
    llm_timeout: LLMTimeout = 120.0,
    llm_retries: LLMRetries = 1,
    llm_concurrency: LLMConcurrency = 0,
    max_calls: LLMMaxCalls = None,
    reasks: Annotated[int, typer.Option(help="times an LLM role re-asks after an invalid reply (fewer: "
                                        "quicker generations, more rejections)")] = 2,
    max_tokens: Annotated[int, typer.Option(help="completion tokens per LLM reply")] = 1024,
) -> None:
    """Evolve one lineage per seed; kill it any time and run the same command again to resume.

    A larger --generations or more seeds (--limit, seeds that sort after the others) extend a
    finished store; other parameters must match it. Prints children accepted and rejected by
    cause per direction; exits 3 when the store holds no evolved child (`evokit lineage show STORE
    --rejections` lists why).

    Example: evokit evolve --seeds runs/seeds --out runs/store --generations 5
    """
    from evokit.evolve import EvolveConfig, procedural_backend
    from evokit.evolve import evolve as run_evolution
    from evokit.extract import plan_of
    from evokit.parallel import make_executor

    try:
        cfg = EvolveConfig(generations=generations, effort=effort, direction=direction, seed=seed)
    except ValueError as e:
        raise UserError(f"{e} (options --effort, --direction)") from e
    if no_hack_gate:
        cfg = dataclasses.replace(cfg, verify=dataclasses.replace(cfg.verify, hack_gate=None))
    seed_dirs = _task_dirs([seeds])[:limit]
    if backend == "llm":
        from evokit.evolve.llm_roles import llm_backend
        from evokit.evolve.llm_roles import max_calls as max_llm_calls

        client = _client(model, api_base, llm_timeout, llm_retries, llm_concurrency, max_calls, watch=True)
        if client is None:
            raise UserError("--backend llm needs --model (and --api-base for a local server: start one with "
                            "`evokit serve-llm`)")
        if reasks < 0 or max_tokens < 1:
            raise UserError("--reasks must be 0 or more and --max-tokens at least 1")
        client.max_tokens = max_tokens
        chosen = llm_backend(client, retries=reasks)
        client.planned_calls = max_llm_calls(cfg, lineages=len(seed_dirs), retries=reasks)
    elif backend == "procedural":
        foreign = [d for d in seed_dirs if plan_of(d) is None]
        if foreign:
            raise UserError(
                f"{foreign[0]}{f' and {len(foreign) - 1} other seed(s)' if len(foreign) > 1 else ''}: not an "
                "evokit task (no plan in [metadata.evokit]); the procedural backend needs one: use --backend llm "
                f"--model M [--api-base URL] (plans are extracted and recorded), or `evokit extract {seeds} "
                "--model M --api-base URL --write` first")
        chosen = procedural_backend()
    else:
        raise typer.BadParameter("must be procedural or llm", param_hint="--backend")
    _INTERRUPT["resume"] = out
    store = run_evolution(seed_dirs, out, cfg, backend=chosen, workers=workers,
                          executor=make_executor(executor, workers, ray_address))
    envs, outcomes = store.envs(), store.outcomes()
    console.print(f"{len(envs)} environments in {len(store.lineages())} lineages → {out}: {outcomes.children} "
                  f"children accepted, {outcomes.rejections} attempts rejected", soft_wrap=True)
    for line in outcomes.lines():
        console.print(f"  {escape(line)}", soft_wrap=True)
    for row in store.hack_rates():
        if row["hacked"]:
            probes = ", ".join(f"{p} {n}" for p, n in sorted(row["probes"].items()))
            console.print(f"hack gate, generation {row['generation']} {row['direction']}: {row['hacked']} of "
                          f"{row['checked']} checked children passed by a hack ({escape(probes)})")
    for r in store.records():
        if r["kind"] == "end" and r["generation"] == 0:  # a seed whose plan could not be extracted
            console.print(f"[yellow]{escape(r['lineage'])} did not start: {escape(' '.join(r['reason'].split())[:300])}")
    if cfg.generations and not outcomes.children:
        why = "every attempt was rejected" if outcomes.seeds else "no seed started"
        console.print(f"[red]no child accepted: {why} (`evokit lineage show {escape(str(out))} --rejections` "
                      "lists the rejected attempts)", soft_wrap=True)
        raise typer.Exit(3)


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

    client = _client(model, api_base, llm_timeout, llm_retries, llm_concurrency, max_calls, watch=True)
    for t in _task_dirs(paths):
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
    (task_dir,) = _task_dirs([path])[:1]
    task = load_task(task_dir)
    agent = LLMAgent(_client(model, api_base, llm_timeout, llm_retries, llm_concurrency), max_turns=max_turns, max_tokens=max_tokens, tool_mode=tool_mode,
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


lineage_app = typer.Typer(help="inspect and export a lineage store\n\nExample: evokit lineage show runs/store")
app.add_typer(lineage_app, name="lineage")


@lineage_app.command("show")
def lineage_show(store: Annotated[Path, typer.Argument(help="a lineage store")],
                 lineage_id: Annotated[str | None, typer.Option("--lineage", help="one lineage only")] = None,
                 rejections: Annotated[bool, typer.Option("--rejections", help="also list the rejected attempts "
                                                          "(direction, cause, reasons)")] = False) -> None:
    """One row per environment, grouped by lineage in generation order: direction, D_T and its parts, mutation.

    Example: evokit lineage show runs/store --rejections
    """
    from evokit.lineage import LineageStore, one_line

    st = LineageStore.open(store)
    table = Table(title=f"lineages in {store}")
    for col in ("lineage", "g", "direction", "L", "D_T", "scenario", "skill", "mutation", "task"):
        table.add_column(col)
    for e in (e for lid in ([lineage_id] if lineage_id else st.lineages()) for e in st.lineage(lid)):
        d, m = e.data.get("difficulty", {}), e.data.get("mutation") or {}
        table.add_row(e.lineage, str(e.generation), e.direction or "seed", str(int(d.get("length", 0))),
                      f"{d.get('total', 0):.1f}", f"{d.get('scenario_term', 0):+.1f}", f"{d.get('skill_term', 0):+.1f}",
                      f"{m['total']:.2f}" if m else "-", e.task)
    console.print(table)
    if rejections:
        rej = Table(title=f"rejected attempts in {store}")
        for col in ("lineage", "g", "direction", "cause"):
            rej.add_column(col, no_wrap=True)
        rej.add_column("reason")
        for r in sorted(st.rejections(lineage_id), key=lambda r: (r.lineage, r.generation, r.k)):
            rej.add_row(r.lineage, str(r.generation) + (f".{r.k}" if r.k != 1 else ""), r.direction, r.cause,
                        escape(one_line("; ".join(r.reasons))))
        console.print(rej)
    problems = st.check()
    for p in problems:
        console.print(f"[red]{p}")
    raise typer.Exit(1 if problems else 0)


@lineage_app.command("export")
def lineage_export(store: Annotated[Path, typer.Argument(help="a lineage store")],
                   out: Annotated[Path, typer.Option(help="Harbor dataset folder to write")],
                   generation: Annotated[int | None, typer.Option(help="only this generation")] = None) -> None:
    """Copy environments into a Harbor dataset: one task folder each, dataset.toml, provenance.json per task.

    Example: evokit lineage export runs/store --out runs/dataset --generation 5
    """
    from evokit.lineage import LineageStore

    written = LineageStore.open(store).export(out, generation=generation)
    console.print(f"{len(written)} task folders → {out}")


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
                                              "(evokit.solvers) | prior: log p_T in its logits, shared with D_T")
                       ] = "solver",
) -> None:
    """Train the CPU learner with GRPO on a curriculum or with GenEnv (the LLM policy: `evokit train-llm`).

    The learner starts as the studies' agents do, a solver pretrained on data (``--learner solver``,
    saved as ``OUT/solver.pt``): with ``--learner prior`` it starts from p_T, the distribution D_T is
    measured against, so a D_T–pass-rate correlation of that learner partly follows from its construction.

    Example: evokit train --store runs/store --out runs/train --curriculum el
    """
    with console.status("loading torch, the learner and the task sources"):
        from evokit.curricula import source_from
        from evokit.genenv import GenEnvConfig, GenEnvSource
        from evokit.learners import PolicyConfig
        from evokit.run_summary import run_report
        from evokit.solvers import saved_policy, world_solver
        from evokit.train import ResumeError, TrainConfig
        from evokit.train import train as run_training

    if learner not in {"solver", "prior"}:
        raise typer.BadParameter("--learner must be solver or prior")
    cfg = TrainConfig(steps=steps, group_size=group_size, tasks_per_step=tasks_per_step, seed=seed, workers=workers)
    if source == "store":
        if store is None:
            raise typer.BadParameter("--source store needs --store (made by `evokit evolve`)")
        src = source_from(curriculum, store=store)  # a SourceError is the user's: one line, exit 2
        held_out = _task_dirs([eval_tasks]) if eval_tasks else []
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
                      tasks=_task_dirs([tasks]) if source == "tasks" and tasks else ())
    run_training(model, src, out, cfg)
    console.print(f"rows in {out}/steps.jsonl, checkpoints in {out}/trl")


sandbox_app = typer.Typer(help="list / clean host state of local sandboxes (state dirs, cgroups)\n\n"
                               "Example: evokit sandbox clean")
app.add_typer(sandbox_app, name="sandbox")


@sandbox_app.command("list")
def sandbox_list() -> None:
    """Every sandbox and build step with host state: live (owner running), stale or orphan.

    Example: evokit sandbox list
    """
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
    """Remove the state of sandboxes whose harness is gone (never a live one).

    Example: evokit sandbox clean
    """
    from evokit.sandbox import stale

    removed = stale.clean()
    for line in removed:
        console.print(f"removed {line}")
    live = sum(e.status == "live" for e in stale.scan())
    console.print(f"{len(removed)} removed; {live} live left alone")


#: Ctrl-C: whether the one line was printed, and the store a rerun resumes from (set by the
#: resumable commands before they start work).
_INTERRUPT: dict = {"told": itertools.count(), "resume": None}
#: After a Ctrl-C the process is gone within this many seconds, whatever still runs.
EXIT_DEADLINE_S = 3.5


def _say_interrupted() -> None:
    """Print the Ctrl-C line once (from whichever thread gets here first)."""
    if next(_INTERRUPT["told"]) == 0:  # atomic: exactly one caller draws 0
        where = _INTERRUPT["resume"]
        line = (f"evokit: interrupted; rerun the same command to resume from {where}" if where is not None
                else "evokit: interrupted; this command keeps no progress: rerun it to start over")
        print(line, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI with its error manners (module docstring); returns the exit status.

    Ctrl-C stops any command within seconds (:class:`evokit.parallel.CtrlC`): queued parallel jobs
    are dropped, running ones and their sandboxes stopped; it prints one line saying how to resume
    and exits 130. What was written before stays (the stores are append-only and resumable).
    Python's own handler would only raise KeyboardInterrupt in the main thread, where a thread pool
    waits for every queued job, and Typer turns that into a silent exit 130.
    """
    from evokit.parallel import CtrlC

    _INTERRUPT.update(told=itertools.count(), resume=None)
    with CtrlC(EXIT_DEADLINE_S, _say_interrupted) as ctrl_c:
        try:
            code = _main(argv)
        except KeyboardInterrupt:  # outside the command (Typer reports one inside as exit 130)
            code = 130
    if ctrl_c.pressed:
        _say_interrupted()
        return 130
    return code


#: The OS refusing a path the user named (``--out`` that is a file, a folder that is not there).
#: evokit's own files live under paths it made, so these are the user's mistakes, like a UserError.
_PATH_ERRORS = (FileNotFoundError, NotADirectoryError, FileExistsError)
#: The longest line the CLI prints for an error; a longer message keeps its start (what failed,
#: where) and its end (the last words of a tool's output, what to do), joined by " … ".
MESSAGE_LIMIT = 400


def one_line(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` as one line of at most ``limit`` characters: whitespace runs (newlines included)
    become one space, and a traceback inside the text is dropped."""
    cut = text.find("Traceback (most recent call last)")
    line = " ".join((text if cut < 0 else text[:cut]).split())
    if len(line) > limit:
        head = limit * 2 // 3
        line = line[:head].rstrip() + " … " + line[len(line) - (limit - head - 3):].lstrip()
    return line


def report_error(e: Exception, *, debug: bool = False) -> int:
    """What the CLI does with an exception a command raised (module docstring): print one line on
    stderr and return the exit status, 2 for the user's mistake and 1 for anything else; with
    ``debug`` re-raise it instead, so that Python prints the traceback."""
    if debug:
        raise e
    from evokit.llm import LLMBudgetSpent
    from evokit.parallel import ParallelError

    more = ""
    if isinstance(e, ParallelError) and (inner := e.common_error((UserError, *_PATH_ERRORS))) is not None:
        more = f" ({len(e.failures)} of {len(e.results)} jobs failed)" if len(e.failures) > 1 else ""
        e = inner
    if isinstance(e, LLMBudgetSpent):  # the stop the user asked for (--max-calls), not a failure
        where = _INTERRUPT["resume"]
        print(f"evokit: stopped: {one_line(str(e))}; what was finished is kept{f' in {where}' if where else ''}: "
              "rerun with a larger --max-calls to continue", file=sys.stderr)
        return EXIT_BUDGET
    if isinstance(e, UserError):
        print(f"evokit: error: {one_line(str(e) or type(e).__name__)}{more}", file=sys.stderr)
        return 2
    if isinstance(e, _PATH_ERRORS):
        said = f"{e.filename}: {e.strerror}" if e.filename and e.strerror else str(e) or type(e).__name__
        print(f"evokit: error: {one_line(said)}{more}", file=sys.stderr)
        return 2
    first = one_line(e.summary if isinstance(e, ParallelError) else str(e) or type(e).__name__)
    print(f"evokit: internal error: {type(e).__name__}: {first} (rerun with `evokit --debug ...` for the "
          "traceback)", file=sys.stderr)
    return 1


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = ("--debug" in argv[: next((i for i, a in enumerate(argv) if not a.startswith("-")), len(argv))]
             or os.environ.get("EVOKIT_DEBUG", "").strip() not in ("", "0"))
    try:
        # Without standalone mode click returns a command's typer.Exit code instead of exiting.
        code = app(args=argv, prog_name="evokit", standalone_mode=False)
        return code if isinstance(code, int) else 0
    except typer.Exit as e:
        return e.exit_code
    except typer.Abort:
        print("evokit: aborted", file=sys.stderr)
        return 130
    except _UsageError as e:
        if debug:
            raise
        if type(e).__name__ == "NoArgsIsHelpError":  # `evokit` alone: the help was printed
            return 2
        cmd = e.ctx.command_path if getattr(e, "ctx", None) is not None else "evokit"
        print(f"evokit: error: {one_line(e.format_message()).rstrip('.')}; see `{cmd} --help`", file=sys.stderr)
        return 2
    except Exception as e:
        return report_error(e, debug=debug)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
