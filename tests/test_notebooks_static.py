"""Every notebook, read without running it: the shape the papermill pipeline and the tests rely on.

Checked for each ``notebooks/*.ipynb``: stored without outputs; exactly one cell tagged ``parameters``
that sets at least ``seed``, ``smoke``, ``results_dir`` and ``fig_name``; ``smoke`` changes sizes only
(it is read in one place, ``SIZES["smoke" if smoke else "full"]``, or recorded in the summary); no
function or class defined in a notebook (the algorithms live in ``evokit``); a closing cell that
records the key numbers (``summary.json``); opening and closing markdown (the claim and the result);
no change of directory, and every path parameter resolved with ``evokit.paths.at_root`` before use (so
results/ and figures/ are the repository root's wherever the notebook is opened; run from notebooks/ in
tests/test_paths.py).
The smoke runs themselves are in tests/test_notebooks_ee.py and tests/test_notebooks_training.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest
from notebook_support import RUNNER

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))


def cells(name: str) -> list:
    return nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4).cells


def code(name: str) -> list:
    return [c for c in cells(name) if c.cell_type == "code"]


def test_every_paper_experiment_has_a_notebook():
    """The eleven notebooks of the reproduction (one per figure or table) are all there."""
    assert len(NOTEBOOKS) >= 11 and "00_quickstart" in NOTEBOOKS


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_stored_without_outputs(name):
    assert all(not c.outputs and c.execution_count is None for c in code(name)), f"{name}: strip the outputs"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_parameters_cell(name):
    params = [c for c in code(name) if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1, f"{name}: exactly one cell tagged 'parameters'"
    assigned = {t.id for node in ast.parse(params[0].source).body if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name)}
    assert {"seed", "smoke", "results_dir", "fig_name"} <= assigned, f"{name}: parameters {sorted(assigned)}"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_smoke_changes_only_sizes(name):
    """`smoke` is read in exactly one place, ``SIZES["smoke" if smoke else "full"]``: no code path depends on it."""
    uses = []
    for c in code(name):
        if "parameters" in c.metadata.get("tags", []):
            continue
        tree = ast.parse(c.source)
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Name) and node.id == "smoke"):
                continue
            up = parents.get(node)
            if isinstance(up, ast.IfExp) and up.test is node:
                sub = parents.get(up)
                ok = isinstance(sub, ast.Subscript) and getattr(sub.value, "id", "") == "SIZES"
                uses.append("SIZES lookup" if ok else ast.unparse(up))
            elif not isinstance(up, ast.Dict):  # a dict value is the summary recording it, not a branch
                uses.append(ast.unparse(up) if up is not None else "smoke")
    assert uses == ["SIZES lookup"], f"{name}: smoke may only choose SIZES, found {uses}"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_thin_and_recorded(name):
    """No algorithm defined in the notebook; the last code cell records the numbers in summary.json."""
    trees = [ast.parse(c.source) for c in code(name)]
    defined = [n.name for t in trees for n in ast.walk(t) if isinstance(n, ast.FunctionDef | ast.ClassDef)]
    assert not defined, f"{name}: defines {defined}; put it in evokit"
    assert "summary.json" in code(name)[-1].source, f"{name}: the last code cell should write summary.json"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_explains_itself(name):
    """Opens with a markdown account of the claim and ends with markdown on what the run shows."""
    cs = cells(name)
    assert cs[0].cell_type == "markdown" and len(cs[0].source) > 300, f"{name}: open with the claim and mechanism"
    assert cs[-1].cell_type == "markdown", f"{name}: close with what our run shows next to the paper"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_paths_at_the_repository_root(name):
    """No ``os.chdir``; each ``*_dir`` parameter is passed through ``at_root`` in the first cell after the
    parameters (papermill injects its values between the two), before anything reads it."""
    cs = code(name)
    assert not any("chdir" in c.source for c in cs), f"{name}: do not change directory; use evokit.paths.at_root"
    i = next(i for i, c in enumerate(cs) if "parameters" in c.metadata.get("tags", []))
    dirs = sorted({t.id for node in ast.parse(cs[i].source).body if isinstance(node, ast.Assign)
                   for t in node.targets if isinstance(t, ast.Name) and t.id.endswith("_dir")})
    assert "results_dir" in dirs, name
    first = ast.parse(cs[i + 1].source).body
    resolved = {node.targets[0].id for node in first[:len(dirs)] if isinstance(node, ast.Assign)
                and ast.unparse(node.value) == f"at_root({node.targets[0].id})"}
    assert resolved == set(dirs), f"{name}: start the cell after the parameters with `x = at_root(x)` for {dirs}"


def test_progress_bars_are_notebook_widgets_in_jupyter():
    """Every progress bar in evokit comes from ``tqdm.auto`` (a widget in Jupyter, not red stderr text)."""
    plain = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((ROOT / "evokit").rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if line.strip().startswith(("from tqdm import", "import tqdm")) or "tqdm.std import" in line]
    assert not plain, f"use `from tqdm.auto import tqdm`: {plain}"


@pytest.mark.notebooks
def test_progress_bar_renders_as_a_widget(tmp_path, monkeypatch):
    """In a real Jupyter kernel the bar evokit.seeds draws is a widget, and nothing goes to stderr."""
    from nbclient import NotebookClient

    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from evokit import seeds\nfor _ in seeds.tqdm(range(3), desc='seeds'):\n    pass")])
    NotebookClient(nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(tmp_path)}},
                   config=RUNNER.kernel_config(str(tmp_path))).execute()
    outputs = nb.cells[0].outputs
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs), outputs
    assert not [o for o in outputs if o.get("name") == "stderr"], outputs
