"""Where a verification's logs go when the user named no folder, and the cap that keeps them bounded.

A failed verdict is only as useful as the evidence behind it, so ``evokit verify`` and ``evokit
run`` keep every trial's ``/logs`` (the tests' output, the oracle's output, ``trial.json``) even
without ``--log-dir``: under ``$EVOKIT_CACHE/logs/<command>/`` (``~/.cache/evokit`` by default), one
folder per task version (``<name>-<content hash>``), so a rerun of an unchanged task replaces its
folder instead of adding one. Each trial's download is capped (64 MiB a folder,
:mod:`evokit.verify.trial`), and :func:`prune` drops the least recently written task folders
once the command's logs pass :data:`MAX_BYTES`. The message of a failed verdict names the folder.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from evokit.sandbox.image import cache_root

#: The most a command's default log folder keeps (least recently written task folders go first).
MAX_BYTES = int(os.environ.get("EVOKIT_LOG_MAX_BYTES", 1 << 30))


def default_root(command: str) -> Path:
    """``$EVOKIT_CACHE/logs/<command>``: where ``command`` keeps logs when no ``--log-dir`` is given."""
    return cache_root() / "logs" / command


def _size(folder: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def prune(root: Path, max_bytes: int = MAX_BYTES) -> list[Path]:
    """Remove the least recently written subfolders of ``root`` until it holds at most ``max_bytes``;
    returns what was removed. The newest folder always stays, whatever its size."""
    if not root.is_dir():
        return []
    folders = sorted((p for p in root.iterdir() if p.is_dir() and not p.is_symlink()),
                     key=lambda p: p.stat().st_mtime, reverse=True)
    sizes = [_size(p) for p in folders]
    removed, total = [], sum(sizes)
    while total > max_bytes and len(folders) > 1:
        victim, size = folders.pop(), sizes.pop()
        shutil.rmtree(victim, ignore_errors=True)
        removed.append(victim)
        total -= size
    return removed
