"""Jobs and their failures: what every executor returns, raises and reports.

A job that raised, or whose worker died, becomes a :class:`JobFailure`; a map with failures raises
one :class:`ParallelError` (or returns them in place). Shared by :mod:`evokit.parallel.local` and
:mod:`evokit.parallel.ray_executor`.
"""

from __future__ import annotations

import pickle
import reprlib
import signal
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from evokit.errors import EvokitError, UserError

Progress = Callable[[], Any] | Any  # a callable taking no argument, or anything with .update()

item_repr = reprlib.Repr(maxstring=120, maxother=120)




@dataclass
class JobFailure:
    """One job that did not return: which item, what went wrong, and the worker's traceback.

    ``exception`` is the exception itself where it could travel back (always for threads; from a
    process or Ray worker when it pickles), so that a caller can tell a user's mistake (a bad
    endpoint, a malformed task) from a bug; None for a worker that died.
    """

    index: int
    item: Any
    error: str  # "ValueError: message" or "worker died: ..."
    traceback: str = ""
    exception: BaseException | None = field(default=None, repr=False, compare=False)

    def __str__(self) -> str:
        return f"job {self.index} (item {item_repr.repr(self.item)}): {self.error}"


class ParallelError(EvokitError, RuntimeError):
    """Some jobs failed; ``failures`` names each, ``results`` holds the others' results in order.

    ``str()`` holds every failure and the first one's traceback (for logs and ``--debug``);
    :attr:`summary` is one line without tracebacks, and :meth:`common_error` the first job's error
    when every job failed the user's way (a :class:`evokit.errors.UserError`).
    """

    def __init__(self, failures: list[JobFailure], results: list):
        self.failures, self.results = failures, results
        lines = [f"{len(failures)} of {len(results)} jobs failed:", *(f"  {f}" for f in failures)]
        if failures[0].traceback:
            lines += [f"traceback of job {failures[0].index}:", failures[0].traceback.rstrip()]
        super().__init__("\n".join(lines))

    @property
    def summary(self) -> str:
        """One line: how many failed and the first failure (its message's first line)."""
        first = self.failures[0]
        message = (first.error.strip().splitlines() or [""])[0]
        more = f" (and {len(self.failures) - 1} more)" if len(self.failures) > 1 else ""
        return (f"{len(self.failures)} of {len(self.results)} jobs failed; job {first.index} "
                f"(item {item_repr.repr(first.item)}): {message}{more}")

    def common_error(self, classes: tuple[type[BaseException], ...] = (UserError,)) -> BaseException | None:
        """The first failed job's exception when every failed job raised one of ``classes`` (by
        default :class:`evokit.errors.UserError`: jobs that failed the user's way, each for its own
        reason or all for one, e.g. an endpoint that is down); else None (a job died, or one of them
        is a bug: that is what the caller must report)."""
        errors = [f.exception for f in self.failures]
        if any(e is None or not isinstance(e, classes) for e in errors):
            return None
        return errors[0]


class Executor(Protocol):
    def map(self, fn: Callable[[Any], Any], items: Sequence, *, progress: Progress = None,
            errors: str = "raise") -> list: ...

    def close(self) -> None: ...


def ticker(progress: Progress) -> Callable[[], Any]:
    if progress is None:
        return lambda: None
    update = getattr(progress, "update", None)  # a tqdm bar; a plain callable has no .update
    return update if callable(update) else progress


def _portable(e: BaseException) -> BaseException | None:
    """``e`` if it survives pickling (to travel from a worker to the caller), else None."""
    try:
        return pickle.loads(pickle.dumps(e))
    except Exception:
        return None


def run_job(fn: Callable, item: Any) -> tuple[bool, Any]:
    """Call ``fn(item)`` in a worker: ``(True, result)`` or ``(False, (error, traceback, exception))``."""
    try:
        return True, fn(item)
    except Exception as e:
        return False, (f"{type(e).__name__}: {e}", traceback.format_exc(), _portable(e))


def finish(results: list, failures: list[JobFailure], errors: str, cause: BaseException | None = None) -> list:
    if failures and errors == "raise":
        raise ParallelError(sorted(failures, key=lambda f: f.index), results) from cause
    return results


def check_errors(errors: str) -> None:
    if errors not in ("raise", "return"):
        raise ValueError(f"errors must be 'raise' or 'return', not {errors!r}")


def death_message(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        why = " (e.g. the OOM killer or os.kill)" if name == "SIGKILL" else ""
        return f"worker process died: killed by {name}{why}; its result is lost"
    return f"worker process exited with code {exitcode} before returning a result"
