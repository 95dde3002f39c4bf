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
    papermill = pytest.importorskip("papermill")
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
    """GenEnv's α-zone at smoke scale: the learning simulator lifts success into [0.4, 0.6]; the random one never.

    Weaker than the paper's claim ("settles in the zone"): with one GRPO update per epoch at the learner's
    default lr (0.03), success reaches the zone late (epoch 10 of 10 at smoke scale, mean of the last three
    epochs ≈ 0.33) instead of settling there. What is asserted: the learning simulator's success rises,
    enters the zone at least once and ends above the random simulator's, which never enters it.
    """
    s = run_notebook("genenv_alpha", tmp_path, monkeypatch)
    learning, random_ = s["simulators"]["learning"], s["simulators"]["random"]
    assert learning["first_epoch_in_zone"] is not None, learning
    assert random_["first_epoch_in_zone"] is None, random_
    assert s["success_last_learning"] > s["success_last_random"], s["simulators"]
    assert s["success_last_learning"] > learning["success_first"]
    assert not 0.4 <= s["success_last_random"] <= 0.6


def test_genenv_vs_random(tmp_path, monkeypatch):
    """GenEnv: fewer unsolved tasks per batch with the learning simulator than with the random one.

    The paper's other half (+3.5 % fully solved) is recorded, not asserted: a simulator aimed at α = 0.5
    avoids trivial tasks too, and at smoke scale the count of fully solved tasks is a handful.
    """
    s = run_notebook("genenv_vs_random", tmp_path, monkeypatch)
    assert s["unsolved_per_batch_learning"] < s["unsolved_per_batch_random"], s
    assert s["unsolved_pct_fewer"] > 0


def test_ee_el_scheduler(tmp_path, monkeypatch):
    """EE: EL keeps a larger share of GRPO groups partially solved than random order (first 50 steps)."""
    s = run_notebook("ee_el_scheduler", tmp_path, monkeypatch)
    for c in ("el", "random"):
        assert 0 <= s[f"partially_solved_share_{c}"] <= 1
        assert s["curricula"][c]["steps"] == 30
    assert s["partially_solved_share_el"] > s["partially_solved_share_random"], s["curricula"]


def test_ee_trajectory_growth(tmp_path, monkeypatch):
    """EE: under EL, turns per trajectory grow as later generations unlock; one command per turn (CPU learner)."""
    s = run_notebook("ee_trajectory_growth", tmp_path, monkeypatch)
    assert s["commands_per_turn"] == 1.0
    assert s["generation_last_el"] > 1.0  # EL left the first generation
    assert s["turns_last_el"] > s["turns_first_el"], s["curricula"]


def test_ee_methods(tmp_path, monkeypatch):
    """EE §5.1 at smoke scale: each method trains on its own environments and is evaluated on held-out ones.

    The paper's ordering (evolution > co-evolution > ensemble) is recorded in the summary, not asserted:
    with 20 steps and a handful of held-out tasks its differences are within noise.
    """
    s = run_notebook("ee_methods", tmp_path, monkeypatch)
    assert set(s["peak"]) == {"evolution", "co-evolution", "ensemble"}
    assert all(0 <= v <= 1 for v in s["peak"].values())
    assert all(s["peak"][m] >= s["initial"] for m in s["peak"])  # step 0 is part of every curve
    env = s["environments"]
    assert env["co-evolution"] == env["evolution"] == env["ensemble"]  # the same budget of environments


def test_genenv_data_efficiency(tmp_path, monkeypatch):
    """GenEnv data efficiency at smoke scale: scores for both methods at every amount, from one untrained start."""
    s = run_notebook("genenv_data_efficiency", tmp_path, monkeypatch)
    assert set(s["scores"]) == {"GenEnv", "static augmentation"}
    for scores in s["scores"].values():
        assert sorted(map(int, scores)) == [0, 4, 8, 16]
        assert all(0 <= v <= 1 for v in scores.values())
        assert scores["0"] == s["untrained"]
