"""The EE notebooks: stored without outputs, ``smoke`` changes only sizes, and (marked ``notebooks``) each
runs end to end at smoke sizes with papermill and records numbers that support the paper's claims in kind.

What the smoke runs assert (measured at smoke sizes: 4 lineages × 8 generations per setting):

* effort (``ee_effort``): high and max drive the reference solver's pass rate to ~0 by the last
  generation (measured: 0.0 and 0.0), while low stays higher (measured: 0.16; EE: low never reaches 0);
* directions (``ee_table1_directions``, ``ee_difficulty``): each pinned direction raises its own part
  of D_T at every edit and lowers the pass rate on average (EE Table 1: ΔPass < 0 for every direction);
* calibration (``ee_difficulty``): D_T correlates negatively with the measured pass rate (ρ < 0;
  measured ≈ −0.7);
* quickstart: every environment verified, the last generation re-verified, D_T rising, the browser
  rendered; and the notebook also passes ``nbval --nbval-lax``.

Figures go to a temporary ``EVOKIT_FIGURES`` and rows to temporary ``results_dir``s, so a test run
never overwrites ``figures/`` or ``results/``. The four EE runs share one reference solver.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ("00_quickstart", "ee_effort", "ee_table1_directions", "ee_difficulty")
EE = NOTEBOOKS[1:]


def code_cells(name: str) -> list:
    book = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    return [c for c in book.cells if c.cell_type == "code"]


# ------------------------------------------------------------------------------- static checks
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_shape(name):
    """Stored without outputs; a `parameters` cell with seed, smoke, results_dir, fig_name; one study call."""
    cells = code_cells(name)
    assert all(not c.outputs and c.execution_count is None for c in cells), f"{name}: strip the outputs"
    params = [c for c in cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1, f"{name}: exactly one cell tagged 'parameters'"
    assigned = {t.id for node in ast.parse(params[0].source).body if isinstance(node, ast.Assign) for t in node.targets}
    assert {"seed", "smoke", "results_dir", "fig_name"} <= assigned
    calls = [n for c in cells for n in ast.walk(ast.parse(c.source))
             if isinstance(n, ast.Call) and getattr(n.func, "id", "") in ("evolution_study", "quickstart")]
    assert len(calls) == 1, f"{name}: one call into evokit.studies computes the rows"
    assert not [n for c in cells for n in ast.walk(ast.parse(c.source))
                if isinstance(n, ast.FunctionDef | ast.ClassDef)], f"{name}: no algorithm defined in the notebook"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_smoke_changes_only_sizes(name):
    """`smoke` is read in exactly one place, ``SIZES["smoke" if smoke else "full"]``: no code path depends on it."""
    uses = []
    for c in code_cells(name):
        if "parameters" in c.metadata.get("tags", []):
            continue
        tree = ast.parse(c.source)
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == "smoke":
                up = parents.get(node)
                if isinstance(up, ast.IfExp) and up.test is node:
                    sub = parents.get(up)
                    ok = isinstance(sub, ast.Subscript) and getattr(sub.value, "id", "") == "SIZES"
                    uses.append("SIZES lookup" if ok else ast.unparse(up))
                elif isinstance(up, ast.Dict):  # recorded in the summary, not branched on
                    continue
                else:
                    uses.append(ast.unparse(up) if up is not None else "smoke")
    assert uses == ["SIZES lookup"], f"{name}: smoke may only choose SIZES, found {uses}"


# ------------------------------------------------------------------------------ smoke runs
@pytest.fixture(scope="module")
def run_notebook(tmp_path_factory):
    """Run a notebook once per module with papermill (smoke sizes, temporary results and figures)."""
    import papermill as pm

    base = tmp_path_factory.mktemp("ee-notebooks")
    done: dict[str, tuple[dict, Path]] = {}

    def run(name: str) -> tuple[dict, Path]:
        if name not in done:
            results = base / "results" / name
            params = {"smoke": True, "results_dir": str(results)}
            if name in EE:
                params["solver_dir"] = str(base / "solver")
            old = os.environ.get("EVOKIT_FIGURES")
            os.environ["EVOKIT_FIGURES"] = str(base / "figures")
            try:
                pm.execute_notebook(str(ROOT / "notebooks" / f"{name}.ipynb"), str(base / f"{name}.ipynb"),
                                    parameters=params, kernel_name="python3", cwd=str(ROOT), progress_bar=False)
            finally:
                if old is None:
                    os.environ.pop("EVOKIT_FIGURES")
                else:
                    os.environ["EVOKIT_FIGURES"] = old
            done[name] = (json.loads((results / "summary.json").read_text()), base / "figures")
        return done[name]

    return run


@pytest.mark.notebooks
def test_quickstart(run_notebook):
    s, figures = run_notebook("00_quickstart")
    assert s["n_lineages"] == 3 and s["generations"] == 3
    assert s["all_verified"] and s["all_reverified"]
    assert s["d_t_rises"] and s["d_t_final"] > s["d_t_seed"]
    assert s["browser_html_chars"] > 1000  # the browser built its panel (plan, D_T, verdict, diff)
    assert (figures / "00_quickstart.png").stat().st_size > 0


@pytest.mark.notebooks
def test_effort_high_and_max_reach_zero_low_does_not(run_notebook):
    """EE: high and max drive the pass rate to 0; low does not (measured at smoke: 0.0 / 0.0 vs 0.16)."""
    s, figures = run_notebook("ee_effort")
    final, seeds = s["final_pass_rate"], s["seed_pass_rate"]
    assert all(seeds[e] >= 1 / 8 for e in ("low", "high", "max"))  # lineages start where a fall is measurable
    assert final["high"] <= 0.05 and final["max"] <= 0.05, final
    assert final["low"] > max(final["high"], final["max"]), final
    assert s["first_zero_generation"]["high"] is not None and s["first_zero_generation"]["max"] is not None
    assert s["mean_pass_rate_evolved"]["low"] > s["mean_pass_rate_evolved"]["high"]
    assert (figures / "ee_effort.png").stat().st_size > 0


def _directions_hold(directions: dict) -> None:
    assert set(directions) == {"length", "scenario", "skill"}
    for d, s in directions.items():
        own = s["own_term"]
        assert s[f"d_{own}_mean"] > 0, (d, s)  # each edit raises the direction's own part of D_T
        assert s["own_term_final"] > s["own_term_seed"], (d, s)
        assert s["d_pass_pts_mean"] < 0, (d, s)  # and lowers the pass rate on average
        assert s["pass_rate_final"] < s["pass_rate_seed"], (d, s)


@pytest.mark.notebooks
def test_table1_every_direction_lowers_pass_rate(run_notebook):
    """EE Table 1: ΔPass < 0 along every direction, after one step and on average."""
    s, figures = run_notebook("ee_table1_directions")
    _directions_hold(s["directions"])
    rows = {r["row"]: r for r in s["table1"]}
    for d in ("length", "scenario", "skill"):
        assert rows[f"{d}, 1 step"]["d_pass_pts"] <= 0, rows[f"{d}, 1 step"]
        assert rows[f"{d}, 1 step"]["d_pass_pts_paper"] < 0  # the paper's value sits beside ours
    assert rows["length, 1 step"]["d_turns"] > 0  # only length edits add turns (one command per step)
    assert (figures / "ee_table1_directions.png").stat().st_size > 0


@pytest.mark.notebooks
def test_difficulty_predicts_pass_rate(run_notebook):
    """D_T correlates negatively with the reference solver's measured pass rate; directions raise their parts."""
    s, figures = run_notebook("ee_difficulty")
    assert s["calibration"]["rho_d_t"] < 0, s["calibration"]
    assert s["calibration"]["n_envs"] >= 30
    _directions_hold(s["directions"])
    assert (figures / "ee_difficulty.png").stat().st_size > 0


@pytest.mark.notebooks
def test_quickstart_nbval(tmp_path):
    """The stored quickstart runs cell by cell under nbval (lax: no stored outputs to compare)."""
    nb = tmp_path / "00_quickstart.ipynb"
    shutil.copy(ROOT / "notebooks" / "00_quickstart.ipynb", nb)
    env = {**os.environ, "EVOKIT_FIGURES": str(tmp_path / "figures"), "HARBOR_TELEMETRY": "0", "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "--nbval-lax", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(nb)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert (tmp_path / "results" / "00_quickstart" / "summary.json").exists()
