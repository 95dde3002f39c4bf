"""One figure style, one ``savefig``, and paper-reference overlays.

Every figure in ``figures/`` is written by :func:`savefig` (PNG and PDF, stable names, no
timestamps in the files; by default into the repository root's ``figures/`` wherever the notebook runs,
:func:`evokit.paths.figures_dir`), drawn in one seaborn style, and carries the papers' numbers from
:mod:`evokit.reference` where they report one, labelled "paper" — never typed in by hand.
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use(os.environ.get("MPLBACKEND", "Agg"))
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

from evokit.paths import at_root, figures_dir  # noqa: E402

PAPER_STYLE = {"color": "0.35", "linestyle": "--", "marker": "x", "linewidth": 1.2}
OURS = "evokit (this run)"


def style() -> None:
    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")
    plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 150, "axes.titleweight": "bold",
                         "svg.hashsalt": "evokit", "pdf.compression": 6})


def savefig(fig, name: str, directory: str | Path | None = None) -> list[Path]:
    """Write ``<dir>/<name>.png`` and ``.pdf`` (deterministic metadata) and return the paths.

    ``directory`` defaults to :func:`~evokit.paths.figures_dir` (read at call time, so a notebook opened from
    ``notebooks/`` still writes ``<repo>/figures/``); a relative one is taken from the repository root too."""
    out = at_root(directory) if directory else figures_dir()
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.png", out / f"{name}.pdf"]
    fig.savefig(paths[0], bbox_inches="tight", metadata={"Software": "evokit"})
    fig.savefig(paths[1], bbox_inches="tight", metadata={"Creator": "evokit", "Producer": "evokit",
                                                         "CreationDate": None, "ModDate": None})
    return paths


def paper_line(ax, x, y, label: str = "paper", **kw):
    """The paper's curve, drawn dashed grey and labelled as the paper's."""
    return ax.plot(x, y, label=label, **{**PAPER_STYLE, **kw})


def paper_hline(ax, y: float, label: str = "paper", **kw):
    return ax.axhline(y, label=label, **{**PAPER_STYLE, "marker": None, **kw})


_NOTE_AT = {  # where paper_note puts its box: (x, y, ha, va) in axes coordinates
    "lower right": (0.99, 0.02, "right", "bottom"), "upper right": (0.99, 0.98, "right", "top"),
    "lower left": (0.01, 0.02, "left", "bottom"), "upper left": (0.01, 0.98, "left", "top"),
    "center right": (0.99, 0.5, "right", "center"),
}


def paper_note(ax, text: str, loc: str = "lower right") -> None:
    """A small boxed note with the paper's number(s) or finding where a curve would mislead (other scale,
    no values reported); ``loc`` is one of ``_NOTE_AT``'s places."""
    if loc not in _NOTE_AT:
        raise ValueError(f"paper_note: loc={loc!r}; use one of {', '.join(_NOTE_AT)}")
    x, y, ha, va = _NOTE_AT[loc]
    ax.text(x, y, text, transform=ax.transAxes, ha=ha, va=va, fontsize=8,
            bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "0.6"})


style()
