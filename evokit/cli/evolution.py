"""Commands over lineages: evolve, and the lineage group (show, export).
"""

from __future__ import annotations

import dataclasses
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
    seed_dirs = task_dirs([seeds])[:limit]
    if backend == "llm":
        from evokit.evolve.llm_roles import llm_backend
        from evokit.evolve.llm_roles import max_calls as max_llm_calls

        client = llm_client(model, api_base, llm_timeout, llm_retries, llm_concurrency, max_calls, watch=True)
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
    INTERRUPT["resume"] = out
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
