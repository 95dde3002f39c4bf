"""The EE notebooks run end to end (marked ``notebooks``): each runs at smoke sizes with papermill and
records the EE claims, fixed before the first run, as estimates over 5 evolution seeds with bootstrap
95 % intervals in its summary.json (static shape of every notebook: test_notebooks_static.py).

* claim 1, effort (``ee_effort``): within 8 generations the population's mean pass rate reaches 0 for high
  and max and not for low, max no later than high;
* claim 2, directions (``ee_table1_directions``): one high-effort step along each direction lowers the pass
  rate (interval below 0) and raises turns per trajectory (interval above 0);
* claim 3, calibration (``ee_difficulty``): ρ(D_T, pass rate) < 0 for each of solvers A, B, C, and within
  equal-length strata;
* quickstart: the last generation re-verified from scratch, the lineage browser rendered with the measured
  pass rates; and the stored notebook also passes ``nbval --nbval-lax``.

Each test first checks that the summary's verdict follows from its own intervals (a summary that says
"yes" over an interval that crosses 0 fails), then asserts what this run measured — where a claim did
not hold, that it is recorded as "no" with the numbers that make it so (a claim that fails is a result).

Not asserted, because they follow from the code alone: that D_T rises at every edit where the D_T gate is
on (evokit.evolve.review rejects edits that do not: tested there), that every stored environment was
verified (the harness stores only those that pass), that seeds pass the filter (the filter keeps only
those), the paper's Table 1 signs (constants in evokit.reference).

Figures go to a temporary ``EVOKIT_FIGURES`` and rows to temporary ``results_dir``s, so a test run
never overwrites ``figures/`` or ``results/``. The four runs share one solver population and its
measurement cache (``solver_dir``), as ``scripts/run_notebooks.py``'s runs share ``results/ee_solvers``.
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
@pytest.fixture(scope="module")
def run_notebook(tmp_path_factory):
    """Run a notebook once per module with papermill (smoke sizes, temporary results and figures)."""
    import papermill as pm

    base = tmp_path_factory.mktemp("ee-notebooks")
    done: dict[str, tuple[dict, Path]] = {}

    def run(name: str) -> tuple[dict, Path]:
        if name not in done:
            results = base / "results" / name
            params = {"smoke": True, "results_dir": str(results), "solver_dir": str(base / "solver")}
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
    """The last generation re-verified from scratch; the browser shows measured pass rates; with the D_T gate
    off the share of edits raising D_T is recorded as counted (no assertion on it: a tour, one run)."""
    s, figures = run_notebook("00_quickstart")
    assert s["n_lineages"] == 3 and s["generations"] == 3 and s["n_reverified"] == 3
    assert s["all_reverified"]  # the three verifiers run again, from scratch, on each lineage's last environment
    assert s["browser_html_chars"] > 1000 and s["browser_shows_measurements"]
    assert s["study"]["difficulty_gate"] is False and 0 <= s["n_raising_d_t"] <= s["n_edits"] == s["n_envs"] - 3
    assert (figures / "00_quickstart.png").stat().st_size > 0


def _zero(curve: list[dict]) -> int | None:
    """First generation whose across-seed interval is [0, 0] (the mean pass rate reached 0)."""
    return next((g for g, iv in enumerate(curve) if iv["hi"] == 0), None)


@pytest.mark.notebooks
def test_effort_claim_1(run_notebook):
    """Claim 1 over 5 evolution seeds × 8 generations: high and max reach 0, low does not, max no later
    than high. The verdict is recomputed from the recorded intervals; then what this run measured."""
    s, figures = run_notebook("ee_effort")
    assert s["generations"] >= 8 and s["n_evolution_seeds"] >= 5
    curve = s["pass_rate_curve"]
    z = {e: _zero(c) for e, c in curve.items()}
    assert z == s["first_zero_generation"], (z, s["first_zero_generation"])
    holds = (z["high"] is not None and z["max"] is not None and z["low"] is None and z["max"] <= z["high"])
    assert s["reproduced"] == ("yes" if holds else "no"), s["checks"]
    assert all(iv["lo"] <= iv["estimate"] <= iv["hi"] and iv["n"] >= 5 for c in curve.values() for iv in c)
    # Measured (first run: high 0 at generation 6, max at 4, low at 7; 3 of 5 seeds at 0 from the start). Since
    # the seed filter keeps the longest of the seeds it admits (EE's "and among the longer ones"): high and max
    # reach 0 at generation 3, low at 7, and 4 of 5 seeds start at a population pass rate of 0 (the filter
    # solver passes them <= 4/8, the population does not): not reproduced at this scale, either way.
    assert z["high"] is not None and z["max"] is not None and z["max"] <= z["high"], z
    assert z["low"] is not None and s["reproduced"] == "no", z
    assert (figures / "ee_effort.png").stat().st_size > 0


@pytest.mark.notebooks
def test_table1_claim_2(run_notebook):
    """Claim 2 over 5 evolution seeds: per direction, the one-step ΔPass interval below 0 and the ΔTurns
    interval above 0; the verdicts recomputed from the intervals, then what this run measured."""
    s, figures = run_notebook("ee_table1_directions")
    assert s["study"]["difficulty_gate"] is False and len(s["study"]["evolution_seeds"]) >= 5
    ds = s["directions"]
    assert set(ds) == {"length", "scenario", "skill"}
    for d, r in ds.items():
        p, t = r["d_pass_pts_one_step"], r["d_turns_one_step"]
        assert p["n"] >= 5 and t["n"] >= 5, (d, r)
        assert r["pass_verdict"] == ("below" if p["hi"] < 0 else "above" if p["lo"] > 0 else "overlaps"), (d, p)
        assert r["turns_verdict"] == ("above" if t["lo"] > 0 else "below" if t["hi"] < 0 else "overlaps"), (d, t)
    holds = all(r["pass_verdict"] == "below" and r["turns_verdict"] == "above" for r in ds.values())
    assert s["reproduced"] == ("yes" if holds else "no")
    rows = {r["row"]: r for r in s["table1"]}
    for d in ds:
        one = rows[f"{d}, 1 step"]
        assert {"d_pass_pts_paper", "d_turns_paper", "total_paper"} <= set(one), one  # the paper's values beside ours
        assert one["d_pass_pts_lo"] == pytest.approx(ds[d]["d_pass_pts_one_step"]["lo"])
    # Measured, one step over 5 seeds, since the seed filter keeps the longest admitted seeds (the first run,
    # before it: length (overlaps, above), scenario (overlaps, overlaps), skill (overlaps, below)): length
    # lowers the pass rate (estimate -5.8 points, interval reaching +2.5) and adds turns (+2.8, interval above
    # 0); scenario edits leave the pass rate at 0 [0, 0] (4 of 5 seeds start at 0: a floor) and lower turns
    # (interval below 0); skill edits raise the pass rate on average (+26.7, interval from 0) and their turns
    # interval crosses 0: not reproduced at this scale.
    verdicts = {d: (r["pass_verdict"], r["turns_verdict"]) for d, r in ds.items()}
    assert verdicts == {"length": ("overlaps", "above"), "scenario": ("overlaps", "below"),
                        "skill": ("overlaps", "overlaps")}, verdicts
    assert ds["length"]["d_pass_pts_one_step"]["estimate"] < 0 and s["reproduced"] == "no"
    assert (figures / "ee_table1_directions.png").stat().st_size > 0


@pytest.mark.notebooks
def test_difficulty_claim_3(run_notebook):
    """Claim 3: ρ(D_T, pass rate) per solver A, B, C, over all environments and within equal lengths, each
    with an interval over 5 evolution seeds; the verdicts recomputed, then what this run measured."""
    s, figures = run_notebook("ee_difficulty")
    cal = s["calibration"]
    assert cal["n_evolution_seeds"] >= 5 and cal["n_envs"] >= 40, cal
    for n in ("A", "B", "C"):
        for key in ("rho_d_t", "rho_within_length"):
            iv = cal["solvers"][n][key]
            assert iv["verdict"] == ("below" if iv["hi"] < 0 else "above" if iv["lo"] > 0 else "overlaps"), (n, key, iv)
    below = {n: cal["solvers"][n]["rho_d_t"]["verdict"] == "below" for n in ("A", "B", "C")}
    within = {n: cal["solvers"][n]["rho_within_length"]["verdict"] == "below" for n in ("A", "B", "C")}
    assert cal["reproduced"] == ("yes" if all(below.values()) and all(within.values())
                                 else "partly" if all(below.values()) else "no")
    # Measured (first run: -0.17 / -0.10 / -0.11; since the seed filter keeps the longest admitted seeds:
    # -0.17 / -0.20 / -0.20 over 57 environments, 5 evolution seeds): every solver's ρ estimate is negative
    # but its interval reaches 0, and within equal lengths ρ is about 0: not reproduced at this scale.
    assert all(cal["solvers"][n]["rho_d_t"]["estimate"] < 0 for n in ("A", "B", "C")), cal["solvers"]
    assert not any(below.values()) and not any(within.values()) and cal["reproduced"] == "no", cal["checks"]
    assert (figures / "ee_difficulty.png").stat().st_size > 0


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
