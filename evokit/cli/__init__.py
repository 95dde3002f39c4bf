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

import importlib

from evokit.cli.base import app
from evokit.cli.main import MESSAGE_LIMIT, main, one_line, report_error
from evokit.errors import UserError

# Importing a command module registers its commands on the app, in this order (the help's order).
for _module in ("tasks", "evolution", "endpoints", "training", "sandboxes"):
    importlib.import_module(f"evokit.cli.{_module}")

__all__ = ["MESSAGE_LIMIT", "UserError", "app", "main", "one_line", "report_error"]
