"""One figure style, one ``savefig``, and paper-reference overlays.

Every figure in ``figures/`` is written by :func:`savefig` (PNG and PDF, stable names, no
timestamps in the files), drawn in one seaborn style, and carries the papers' numbers from
:mod:`evokit.reference` where they report one, labelled "paper" — never typed in by hand.
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use(os.environ.get("MPLBACKEND", "Agg"))
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

FIGURES = Path(os.environ.get("EVOKIT_FIGURES", "figures"))
PAPER_STYLE = {"color": "0.35", "linestyle": "--", "marker": "x", "linewidth": 1.2}
OURS = "evokit (this run)"


def style() -> None:
    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")
    plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 150, "axes.titleweight": "bold",
                         "svg.hashsalt": "evokit", "pdf.compression": 6})


def savefig(fig, name: str, directory: str | Path | None = None) -> list[Path]:
    """Write ``<dir>/<name>.png`` and ``.pdf`` (deterministic metadata) and return the paths."""
    out = Path(directory or FIGURES)
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


def paper_note(ax, text: str) -> None:
    """A small boxed note with the paper's number(s) where a curve would mislead (other scale)."""
    ax.text(0.99, 0.02, text, transform=ax.transAxes, ha="right", va="bottom", fontsize=8,
            bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "0.6"})


style()
