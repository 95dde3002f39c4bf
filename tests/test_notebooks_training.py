"""The training notebooks run end to end at smoke scale and record what the papers claim, in kind.

Each test executes one notebook with papermill (``smoke=True``, results and figures in a temporary
folder), reads the ``summary.json`` its last code cell writes, and asserts the paper's claim where it
holds at smoke scale. Where it does not, the test asserts the weaker statement that does hold and
says so in its docstring (the measured numbers are in the summary and in the notebook's figure).
Minutes per notebook on two cores: run with ``make test-notebooks`` (marker ``notebooks``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.notebooks

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def run_notebook(name: str, tmp_path: Path, monkeypatch, **params) -> dict:
    """Execute ``notebooks/<name>.ipynb`` at smoke scale; return its summary.json (figures checked too)."""
    import papermill  # required (notebooks extra): a missing papermill fails, never skips

    figures = tmp_path / "figures"
    monkeypatch.setenv("EVOKIT_FIGURES", str(figures))
    monkeypatch.setenv("HARBOR_TELEMETRY", "0")
    results = tmp_path / "results" / name
    papermill.execute_notebook(str(NOTEBOOKS / f"{name}.ipynb"), str(tmp_path / f"{name}.out.ipynb"),
                               parameters={"smoke": True, "seed": 0, "results_dir": str(results),
                                           "fig_name": name, **params},
                               kernel_name="python3", cwd=str(tmp_path), progress_bar=False)
    assert (figures / f"{name}.png").exists() and (figures / f"{name}.pdf").exists()
    return json.loads((results / "summary.json").read_text())


def test_genenv_theory(tmp_path, monkeypatch):
    """Theorem 1's bound holds against Monte Carlo; p^G + (1−p)^G gives the paper's 0.66 and 0.43 (G = 8)."""
    s = run_notebook("genenv_theory", tmp_path, monkeypatch)
    assert s["theorem1_mc_le_bound"] is True
    assert all(r["mc"] <= r["bound"] for r in s["theorem1"])
    assert {k: round(v, 2) for k, v in s["dead_group_probability"].items()} == s["dead_group_paper"]
    assert s["signal_argmax"] == 0.5


def test_genenv_alpha(tmp_path, monkeypatch):
    """GenEnv's α-zone: the learning simulator's success enters [0.4, 0.6] and stays there; the random one's does not.

    "Stays there" at smoke scale (12 epochs of 16 tasks): the mean success of the last 4 epochs lies in
    [0.4, 0.6] and each of those epochs in [0.3, 0.7] (one epoch is a mean over 16 tasks, so single epochs
    scatter). The random simulator (the same generator, never updated) stays below the zone. That the
    simulator can make tasks harder as well as easier is tested in ``tests/test_genenv.py``; here the
    per-epoch plan lengths and D_θ are recorded in the summary, not asserted (16 plans per epoch).
    Measured for seed 0 (this test), RWR on the pool D_env: last four epochs 0.60, 0.55, 0.65, 0.46 (random
    simulator: 0.06, 0.08, 0.21, 0.21); seed 1 (sandbox) 0.54, 0.59, 0.54, 0.54. Still seed-dependent at this
    scale (6 of seeds 0–7 settle in a no-sandbox replay; see GenEnvConfig), so a change that reshuffles the
    run may flip it.
    """
    s = run_notebook("genenv_alpha", tmp_path, monkeypatch)
    learning, random_ = s["simulators"]["learning"], s["simulators"]["random"]
    assert s["last_epochs"] == 4 and learning["epochs"] == random_["epochs"] == 12
    assert s["settled_learning"] is True, learning
    assert 0.4 <= learning["success_last"] <= 0.6, learning
    assert 0.3 <= learning["success_last_min"] and learning["success_last_max"] <= 0.7, learning
    assert s["settled_random"] is False, random_
    assert not 0.4 <= random_["success_last"] <= 0.6, random_
    assert learning["success_last"] > learning["success_first"]


def test_genenv_vs_random(tmp_path, monkeypatch):
    """GenEnv: fewer unsolved tasks per batch with the learning simulator than with the random one.

    The paper's other half (+3.5 % fully solved) is recorded, not asserted: a simulator aimed at α = 0.5
    avoids trivial tasks too, and at smoke scale the count of fully solved tasks is a handful.
    """
    s = run_notebook("genenv_vs_random", tmp_path, monkeypatch)
    assert s["unsolved_per_batch_learning"] < s["unsolved_per_batch_random"], s
    assert s["unsolved_pct_fewer"] > 0


def _curricula_dir(tmp_path_factory) -> str:
    """One curricula study for ee_el_scheduler and ee_trajectory_growth (same config, so the second reuses the
    first's rows; either alone computes them)."""
    return str(tmp_path_factory.getbasetemp() / "ee_curricula")


def _interval_ok(iv: dict, runs: int = 5) -> bool:
    return iv["n"] >= runs and iv["lo"] <= iv["estimate"] <= iv["hi"]


def test_ee_el_scheduler(tmp_path, monkeypatch, tmp_path_factory):
    """Claim 4 over 5 runs: EL's partially solved share minus random order's (paired, first 50 steps or the
    whole smoke run), and both reward slopes, each with a bootstrap interval; the verdict is the interval's.

    Measured (smoke: 5 runs × 16 steps, seed 0): share EL − random +0.156 [+0.019, +0.300] (reproduced); reward
    slope per step EL −0.0127 [−0.0299, −0.0010] (the paper's "EL rises" reversed: EL moves to harder children as
    soon as 7 of 8 pass), random +0.0007 [−0.0026, +0.0047] (the paper's "random dips": not shown, a tie).
    """
    s = run_notebook("ee_el_scheduler", tmp_path, monkeypatch, study_dir=_curricula_dir(tmp_path_factory))
    c4 = s["claim4"]
    assert len(s["runs"]) >= 5
    assert all(_interval_ok(c4[k]) for k in ("share_difference", "reward_slope_el", "reward_slope_random"))
    assert s["reproduced"]["share"] == "yes" and c4["share_difference"]["lo"] > 0
    assert s["reproduced"]["el_reward_rises"] == "no" and c4["reward_slope_el"]["hi"] < 0
    assert s["reproduced"]["random_reward_dips"] == "tie"
    assert c4["reward_slope_random"]["lo"] <= 0 <= c4["reward_slope_random"]["hi"]
    assert s["el_within_generation_advances"] >= 1  # N_{i,g} = 2: EL's k < N branch ran in the study


def test_ee_trajectory_growth(tmp_path, monkeypatch, tmp_path_factory):
    """Claim 5 over 5 runs: the slope of turns per trajectory under EL, with its bootstrap interval.

    Measured (smoke: 5 runs × 16 steps, seed 0): +0.112 turns per step [+0.027, +0.227] under EL (reproduced),
    served generation +0.025 per step [+0.013, +0.036]; the control, random order, +0.081 [−0.004, +0.158] (a tie).
    """
    s = run_notebook("ee_trajectory_growth", tmp_path, monkeypatch, study_dir=_curricula_dir(tmp_path_factory))
    t = s["claim5"]["turns_slope_el"]
    assert len(s["runs"]) >= 5 and _interval_ok(t) and _interval_ok(s["generation_slope_el"])
    assert s["reproduced"] == "yes" and t["lo"] > 0


def test_ee_methods(tmp_path, monkeypatch):
    """Claim 6 over 5 runs: peak (after step 0) and final pass rates of each method on the independent benchmark,
    with bootstrap intervals; overlapping intervals are a tie. Equal budgets: each method trained on as many
    environments as evolution synthesised, in every run, where the ensemble can: f failed seeds give at most
    2^f − f − 1 merges, so a run whose student fails only 3 of its 5 seeds gets 4 ensemble environments, not 10.

    Measured (smoke: 5 runs × 8 steps, seed 0; budget 10): peak evolution 0.610 [0.533, 0.662], co-evolution
    0.600 [0.528, 0.646], ensemble 0.610 [0.533, 0.656]; final 0.605 / 0.600 / 0.610; step 0 0.600: a tie
    everywhere (the paper's evolution > co-evolution > ensemble is not reproduced at this scale). The ensemble
    made 10, 10, 4, 10, 4 environments (runs 0-4): the equal-budget condition held for co-evolution only.
    """
    s = run_notebook("ee_methods", tmp_path, monkeypatch)
    assert set(s["peak"]) == set(s["final"]) == {"evolution", "co-evolution", "ensemble"}
    assert all(_interval_ok(s[w][m]) for w in ("peak", "final") for m in s[w])
    env = s["environments"]
    assert env["co-evolution"] == env["evolution"]  # the same budget, run by run
    assert all(e <= b for e, b in zip(env["ensemble"], env["evolution"], strict=True))  # never more
    assert s["reproduced"] == {"peak": "tie", "final": "tie"}


def test_genenv_data_efficiency(tmp_path, monkeypatch):
    """GenEnv data efficiency at smoke scale: scores for both methods at every amount.

    (No ``scores["0"] == untrained``: the summary copies ``untrained`` from the amount-0 row, so it could not fail.)
    """
    s = run_notebook("genenv_data_efficiency", tmp_path, monkeypatch)
    assert set(s["scores"]) == {"GenEnv", "static augmentation"}
    for scores in s["scores"].values():
        assert sorted(map(int, scores)) == [0, 4, 8, 16]
        assert all(0 <= v <= 1 for v in scores.values())
