"""Where a notebook's ``results/`` and ``figures/`` go: the repository root, wherever it is opened from.

JupyterLab starts a notebook's kernel in the notebook's folder (``notebooks/``), papermill and
``scripts/run_notebooks.py`` start it wherever they are told; relative paths then land in different
places (a notebook that changes directory, or writes under ``notebooks/``). Every notebook
therefore resolves its paths with :func:`at_root`, and :func:`evokit.plotting.savefig` writes under
:func:`repo_root` / ``figures``, so ``results/<notebook>/`` and ``figures/`` are the repository's
wherever the kernel runs.

The root is, in order: ``$EVOKIT_ROOT``, the nearest folder at or above the working directory whose
``pyproject.toml`` names the ``evokit`` project (the checkout the notebook was opened in), else the
working directory itself. A researcher who copies a notebook into their own project folder and opens
it there gets ``results/`` and ``figures/`` beside it: never inside the checkout (or site-packages)
evokit happens to be imported from, which they did not choose and may share with others.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

ROOT_VARIABLE = "EVOKIT_ROOT"
_PROJECT = re.compile(r'^\s*name\s*=\s*["\']evokit["\']', re.MULTILINE)


def _is_checkout(folder: Path) -> bool:
    project = folder / "pyproject.toml"
    try:
        return project.is_file() and bool(_PROJECT.search(project.read_text(errors="replace")))
    except OSError:
        return False


def repo_root(start: str | Path | None = None) -> Path:
    """The folder notebooks write ``results/`` and ``figures/`` into (see the module docstring for the order).

    Raises ``ValueError`` (naming the variable) when ``$EVOKIT_ROOT`` is not a folder, rather than
    writing results somewhere unexpected.
    """
    env = os.environ.get(ROOT_VARIABLE)
    if env:
        root = Path(env).expanduser()
        if not root.is_dir():
            raise ValueError(f"{ROOT_VARIABLE}={env!r} is not a folder; point it at the folder where results/ "
                             "and figures/ should go (an evokit checkout or your own project) or unset it")
        return root.resolve()
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if _is_checkout(folder):
            return folder
    return here


def at_root(path: str | Path) -> Path:
    """``path`` as given when absolute, else relative to :func:`repo_root` (``"results/x"`` → ``<root>/results/x``)."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else repo_root() / p


def figures_dir() -> Path:
    """Where :func:`evokit.plotting.savefig` writes: ``$EVOKIT_FIGURES`` (tests use a temporary one), else
    ``<root>/figures``."""
    return at_root(os.environ.get("EVOKIT_FIGURES") or "figures")
