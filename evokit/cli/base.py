"""What every command shares: the Typer app and console, finding task folders, the LLM options.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from evokit.errors import UserError

os.environ.setdefault("HARBOR_TELEMETRY", "0")

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="evokit: verified, ever-harder terminal environments for RL agents.\n\n"
                       "Example: evokit verify examples/tasks/*")
console = Console()
DEBUG = {"on": False}
#: Exit status of a run stopped by its LLM call budget (``--max-calls``): what it finished is kept.
EXIT_BUDGET = 4
#: Typer ships its own click: its usage errors are the bases of its public BadParameter.
UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def _print_version(value: bool) -> None:
    if value:
        from evokit import __version__

        print(f"evokit {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(debug: Annotated[bool, typer.Option("--debug", help="show tracebacks of errors")] = False,
             version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                                   help="print evokit's version and exit")] = False) -> None:
    DEBUG["on"] = debug


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


def task_dirs(paths: list[Path]) -> list[Path]:
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


def llm_client(model: str | None, api_base: str | None, timeout: float = 120.0, retries: int = 1,
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


#: Ctrl-C: whether the one line was printed, and the store a rerun resumes from (set by the
#: resumable commands before they start work).
INTERRUPT: dict = {"told": itertools.count(), "resume": None}
