"""A study's folder on disk: the parameters it was run with (``study.json``) and how long each phase took.

Every study writes rows as it goes (one JSON object per line, flushed and synced), so a killed run
loses at most the row it was writing and resumes where it stopped; a folder remembers the parameters
of its study (``study.json``) and refuses to mix rows of another one into it.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

from evokit.errors import UserError


class StudyError(UserError, RuntimeError):
    """A results folder that holds another study (other sizes or settings); the message says which."""


def check_study(out: str | Path, params: dict) -> None:
    """First run: record ``params`` in ``out/study.json``; later runs: refuse other ones (rows would mix
    two studies)."""
    out = Path(out)
    path = out / "study.json"
    params = json.loads(json.dumps(params))  # tuples → lists, as they come back from disk
    if path.exists():
        old = json.loads(path.read_text())
        if old != params:
            diff = sorted(k for k in set(old) | set(params) if old.get(k) != params.get(k))
            raise StudyError(f"{out} holds a study with other parameters ({', '.join(diff)}: "
                             f"{ {k: old.get(k) for k in diff} } there, { {k: params.get(k) for k in diff} } now); "
                             "pass another results_dir (e.g. results/full/<name>) or delete that folder")
    else:
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(params, indent=2, sort_keys=True))


class PhaseClock:
    """Wall time per phase of the latest call, written to ``path`` as each phase ends (cached phases
    show as near 0)."""

    def __init__(self, path: str | Path):
        self.path, self.times = Path(path), {}

    @contextlib.contextmanager
    def __call__(self, phase: str):
        t0 = time.monotonic()
        yield
        self.times[phase] = round(time.monotonic() - t0, 1)
        self.path.write_text(json.dumps(self.times, indent=2) + "\n")
