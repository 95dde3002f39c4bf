"""The EE notebooks run end to end (marked ``notebooks``): each runs at smoke sizes with papermill and
records the EE claims, fixed before the first run, as estimates over 5 evolution seeds with 95 %
intervals in its summary.json (static shape of every notebook: test_notebooks_static.py).

* claim 1, effort (``ee_effort``): within 8 generations the population's mean pass rate reaches 0 for high
  and max and not for low, max no later than high;
* claim 2, directions (``ee_table1_directions``): one high-effort step along each direction lowers the pass
  rate (interval below 0) and raises turns per trajectory (interval above 0);
* claim 3, calibration (``ee_difficulty``): ρ(D_T, pass rate) < 0 for each of solvers A, B, C, and within
  equal-length strata;
* quickstart: the last generation re-verified from scratch, the lineage browser rendered with the measured
  pass rates; and the stored notebook also passes ``nbval --nbval-lax``.

Each claim has two tests reading one run per seed block (tests/notebook_support.py): one recomputes
the summary's verdict from its own intervals (a summary that says "yes" over an interval that crosses 0
fails) and holds on any block; one asserts the paper's direction, ``xfail(strict=True)`` with the
recorded numbers where a run found the claim not holding on that block.

Not asserted, because they follow from the code alone: that D_T rises at every edit where the D_T gate is
on (evokit.evolve.review rejects edits that do not: tested there), that every stored environment was
verified (the harness stores only those that pass), that seeds pass the filter (the filter keeps only
those), the paper's Table 1 signs (constants in evokit.reference).

Figures go to a temporary ``EVOKIT_FIGURES`` and rows to temporary ``results_dir``s, so a test run
never overwrites ``figures/`` or ``results/``. The four runs of a block share one solver population and
its measurement cache (``solver_dir``), as ``scripts/run_notebooks.py``'s runs share ``results/ee_solvers``.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from notebook_support import BLOCKS, expect_claim, interval_ok, runner, sign

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ("00_quickstart", "ee_effort", "ee_table1_directions", "ee_difficulty")


def code_cells(name: str) -> list:
    book = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    return [c for c in book.cells if c.cell_type == "code"]


# ------------------------------------------------------------------------------- static checks
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_one_study_call(name):
    """One call into evokit.studies computes the rows (the generic shape: tests/test_notebooks_static.py)."""
    calls = [n for c in code_cells(name) for n in ast.walk(ast.parse(c.source))
             if isinstance(n, ast.Call) and getattr(n.func, "id", "") in ("evolution_study", "quickstart")]
    assert len(calls) == 1, f"{name}: one call into evokit.studies computes the rows"


# ------------------------------------------------------------------------------ smoke runs
#: Claims a run recorded not holding, per (claim, seed block), with that run's numbers. Claim 1 holds on
#: block 100 (low effort never reaches 0 there) and not on block 0: unstable across blocks, so its
#: direction test is strict-xfail on one block and asserted on the other.
KNOWN = {("claim1", 0): "no: low effort reaches a mean pass rate of 0 too (generation 7; high and max at 3)",
         ("claim2", 0): "no: no one-step ΔPass interval lies below 0 (length −5.8 [−25.1, +13.4] points, scenario "
                        "0.0 [0.0, 0.0], skill +26.7 [−27.3, +80.6]); only length's ΔTurns lies above 0 "
                        "(+2.77 [+1.98, +3.57])",
         ("claim3", 0): "no: every solver's ρ(D_T, pass rate) interval reaches 0 (A −0.17 [−0.40, +0.03], "
                        "B −0.20 [−0.50, +0.15], C −0.20 [−0.56, 0.00]; 57 environments, 5 seeds, BCa), "
                        "within equal lengths too",
         ("claim2", 100): "no: no one-step ΔPass interval lies below 0 (length −20.8 [−57.0, +15.4] points, "
                          "scenario +3.1 [−32.5, +38.8], skill +14.2 [−54.6, +83.0]); only length's ΔTurns lies "
                          "above 0 (+2.67 [+1.12, +4.23])",
         ("claim3", 100): "no: ρ(D_T, pass rate) lies below 0 for A (−0.49 [−0.73, −0.32]) and C (−0.28 [−0.41, "
                          "−0.13]) but B's reaches 0 (−0.33 [−0.60, +0.01]); within equal lengths every interval "
                          "crosses 0 (51 environments, 5 seeds, BCa)"}


@pytest.fixture(scope="module", params=BLOCKS)
def ee_run(request, tmp_path_factory):
    """Each EE notebook run once per seed block (smoke sizes, temporary results and figures), the four
    sharing one solver population and its measurement cache per block."""
    base = tmp_path_factory.mktemp(f"ee-notebooks-block{request.param}")
    return runner(base, request.param, cwd=ROOT, solver_dir=str(base / "solver"))


@pytest.mark.notebooks
def test_quickstart(ee_run):
    """The last generation re-verified from scratch; the browser shows measured pass rates; with the D_T gate
    off the share of edits raising D_T is recorded as counted (no assertion on it: a tour, one run)."""
    s = ee_run("00_quickstart")
    assert s["n_lineages"] == 3 and s["generations"] == 3 and s["n_reverified"] == 3
    assert s["all_reverified"]  # the three verifiers run again, from scratch, on each lineage's last environment
    assert s["browser_html_chars"] > 1000 and s["browser_shows_measurements"]
    assert s["study"]["difficulty_gate"] is False and 0 <= s["n_raising_d_t"] <= s["n_edits"] == s["n_envs"] - 3


def _zero(curve: list[dict]) -> int | None:
    """First generation whose across-seed interval is [0, 0] (the mean pass rate reached 0)."""
    return next((g for g, iv in enumerate(curve) if iv["hi"] == 0), None)


@pytest.mark.notebooks
def test_effort_claim_1_consistent(ee_run):
    """Claim 1 over 5 evolution seeds × 8 generations: the first generation at a pass rate of 0 per
    effort read from the recorded intervals, and the verdict recomputed from them (high and max
    reach 0, low does not, max no later than high)."""
    s = ee_run("ee_effort")
    assert s["generations"] >= 8 and s["n_evolution_seeds"] == 5
    curve = s["pass_rate_curve"]
    for c in curve.values():
        for iv in c:
            interval_ok(iv)
    z = {e: _zero(c) for e, c in curve.items()}
    assert z == s["first_zero_generation"], (z, s["first_zero_generation"])
    holds = (z["high"] is not None and z["max"] is not None and z["low"] is None and z["max"] <= z["high"])
    assert s["reproduced"] == ("yes" if holds else "no"), s["checks"]


@pytest.mark.notebooks
def test_effort_claim_1_direction(ee_run, request):
    """EE's claim 1: within 8 generations high and max effort bring the mean pass rate to 0, low does
    not, max no later than high."""
    expect_claim(request, KNOWN, "claim1", ee_run.seed)
    s = ee_run("ee_effort")
    assert s["reproduced"] == "yes", (s["first_zero_generation"], s["checks"])


@pytest.mark.notebooks
def test_table1_claim_2_consistent(ee_run):
    """Claim 2 over 5 evolution seeds: per direction the one-step ΔPass and ΔTurns verdicts recomputed
    from their intervals, the claim's verdict from them; the paper's values stand beside ours."""
    s = ee_run("ee_table1_directions")
    assert s["study"]["difficulty_gate"] is False and len(s["study"]["evolution_seeds"]) == 5
    ds = s["directions"]
    assert set(ds) == {"length", "scenario", "skill"}
    for d, r in ds.items():
        p, t = r["d_pass_pts_one_step"], r["d_turns_one_step"]
        interval_ok(p)
        interval_ok(t)
        assert r["pass_verdict"] == sign(p) and r["turns_verdict"] == sign(t), (d, r)
    holds = all(r["pass_verdict"] == "below" and r["turns_verdict"] == "above" for r in ds.values())
    assert s["reproduced"] == ("yes" if holds else "no")
    rows = {r["row"]: r for r in s["table1"]}
    for d in ds:
        one = rows[f"{d}, 1 step"]
        assert {"d_pass_pts_paper", "d_turns_paper", "total_paper"} <= set(one), one  # the paper's values beside ours
        assert one["d_pass_pts_lo"] == pytest.approx(ds[d]["d_pass_pts_one_step"]["lo"])


@pytest.mark.notebooks
def test_table1_claim_2_direction(ee_run, request):
    """EE's claim 2 (Table 1): one high-effort step along each direction lowers the pass rate and
    raises turns per trajectory."""
    expect_claim(request, KNOWN, "claim2", ee_run.seed)
    s = ee_run("ee_table1_directions")
    verdicts = {d: (r["pass_verdict"], r["turns_verdict"]) for d, r in s["directions"].items()}
    assert s["reproduced"] == "yes", verdicts


@pytest.mark.notebooks
def test_difficulty_claim_3_consistent(ee_run):
    """Claim 3: ρ(D_T, pass rate) per solver A, B, C, over all environments and within equal lengths,
    each with an interval over 5 evolution seeds; each verdict and the claim's recomputed."""
    s = ee_run("ee_difficulty")
    cal = s["calibration"]
    assert cal["n_evolution_seeds"] == 5 and cal["n_envs"] >= 5, cal
    for n in ("A", "B", "C"):
        for key in ("rho_d_t", "rho_within_length"):
            iv = cal["solvers"][n][key]
            interval_ok(iv, n=None)
            assert iv["verdict"] == sign(iv), (n, key, iv)
    below = {n: cal["solvers"][n]["rho_d_t"]["verdict"] == "below" for n in ("A", "B", "C")}
    within = {n: cal["solvers"][n]["rho_within_length"]["verdict"] == "below" for n in ("A", "B", "C")}
    assert cal["reproduced"] == ("yes" if all(below.values()) and all(within.values())
                                 else "partly" if all(below.values()) else "no")


@pytest.mark.notebooks
def test_difficulty_claim_3_direction(ee_run, request):
    """EE's claim 3: D_T is calibrated, ρ(D_T, pass rate) < 0 for each solver, also within equal lengths."""
    expect_claim(request, KNOWN, "claim3", ee_run.seed)
    cal = ee_run("ee_difficulty")["calibration"]
    assert cal["reproduced"] == "yes", cal["checks"]


@pytest.mark.notebooks
def test_quickstart_nbval(tmp_path):
    """The stored quickstart runs cell by cell under nbval (lax: no stored outputs to compare)."""
    nb = tmp_path / "00_quickstart.ipynb"
    shutil.copy(ROOT / "notebooks" / "00_quickstart.ipynb", nb)
    env = {**os.environ, "EVOKIT_ROOT": str(tmp_path), "HARBOR_TELEMETRY": "0", "MPLBACKEND": "Agg"}  # root: tmp
    proc = subprocess.run([sys.executable, "-m", "pytest", "--nbval-lax", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(nb)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert (tmp_path / "results" / "00_quickstart" / "summary.json").exists()
    assert (tmp_path / "figures" / "00_quickstart.png").exists()
