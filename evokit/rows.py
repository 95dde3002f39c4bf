"""Rows on disk: JSONL files that every run appends to and every notebook reads.

One JSON object per line, appended and synced (``fsync``) before the writer goes on, so a killed
process loses at most the line it was writing; a reader stops at a torn last line, keeping every
whole row before it. Values that JSON does not know (numpy scalars, 0-d tensors, paths) are written
as numbers or strings. This is the bottom floor: it imports nothing from evokit.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path


def to_json(x):
    """``json.dumps`` default: numpy/torch scalars as numbers, anything else (e.g. a Path) as its str."""
    if hasattr(x, "item") and getattr(x, "ndim", 0) == 0:
        return x.item()
    return str(x)


def dumps(row: dict) -> str:
    """One row as a JSON line (keys sorted: the same row is the same bytes)."""
    return json.dumps(row, sort_keys=True, default=to_json)


def append_rows(path: str | Path, rows: Iterable[dict]) -> int:
    """Append ``rows`` to a JSONL file and sync it to disk before returning; returns how many."""
    lines = [dumps(r) + "\n" for r in rows]
    if lines:
        with open(path, "a") as f:
            f.write("".join(lines))
            f.flush()
            os.fsync(f.fileno())
    return len(lines)


def read_rows(path: str | Path) -> list[dict]:
    """The rows of a JSONL file ([] if there is none); a torn last line from a killed writer is ignored."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break  # everything before a torn line is whole
    return rows


def keep_rows(path: str | Path, keep) -> None:
    """Rewrite a JSONL file with only the rows ``keep(row)`` accepts (atomically; a torn last line goes).

    Used on resume: rows of steps after the last checkpoint are dropped, since the resumed run redoes them.
    """
    path = Path(path)
    if not path.exists():
        return
    kept = [dumps(r) + "\n" for r in read_rows(path) if keep(r)]
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(kept))
    os.replace(tmp, path)
