"""Running the CLI: error manners (one line, exit status), Ctrl-C, and the entry point.
"""

from __future__ import annotations

import itertools
import os
import sys

import typer

from evokit.cli.base import EXIT_BUDGET, INTERRUPT, UsageError, app
from evokit.errors import UserError

#: After a Ctrl-C the process is gone within this many seconds, whatever still runs.
EXIT_DEADLINE_S = 3.5


def _say_interrupted() -> None:
    """Print the Ctrl-C line once (from whichever thread gets here first)."""
    if next(INTERRUPT["told"]) == 0:  # atomic: exactly one caller draws 0
        where = INTERRUPT["resume"]
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

    INTERRUPT.update(told=itertools.count(), resume=None)
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
        where = INTERRUPT["resume"]
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
    except UsageError as e:
        if debug:
            raise
        if type(e).__name__ == "NoArgsIsHelpError":  # `evokit` alone: the help was printed
            return 2
        cmd = e.ctx.command_path if getattr(e, "ctx", None) is not None else "evokit"
        print(f"evokit: error: {one_line(e.format_message()).rstrip('.')}; see `{cmd} --help`", file=sys.stderr)
        return 2
    except Exception as e:
        return report_error(e, debug=debug)
