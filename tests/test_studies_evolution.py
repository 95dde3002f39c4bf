"""The EE evolution study's parts: rank correlation, per-edit deltas, Table 1 and the summaries on
hand-made rows (evolution_analysis), the study folder's parameter check (rows), and the reference
solver's pair tasks, its cache and its pass-rate cache (reference_solver).
(The whole study runs in the notebook tests, tests/test_notebooks_ee.py.)"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from evokit import rows as rw
from evokit.catalog import pairs
from evokit.studies import evolution_analysis as ev
from evokit.studies import folder
from evokit.studies import reference_solver as rs


def env(setting, lineage, g, pass_rate, *, direction=None, parent=None, turns=None, length=2, d=None, mut=0.5):
    """A hand-made envs.jsonl row; D_T parts grow along the edit's direction."""
    d = d or {"length_term": 6.0 * length, "scenario_term": 0.0, "skill_term": 0.0}
    effort, ds = setting.split("-")
    return {"setting": setting, "effort": effort, "direction_setting": ds, "lineage": lineage, "generation": g,
            "k": 1, "task": f"{lineage}{g}", "content_hash": f"{setting}{lineage}{g}", "parent": parent,
            "direction": direction, "d_t": sum(d.values()), "length": length, **d, "pass_rate": pass_rate,
            "turns": turns if turns is not None else float(length),
            **{f"mutation_{m}": (None if g == 0 else mut) for m in ev.MUTATIONS}}


def chain(setting, lineage, passes, direction):
    rows, parent = [], None
    for g, p in enumerate(passes):
        term = {"length": "length_term", "scenario": "scenario_term", "skill": "skill_term"}.get(direction, "skill_term")
        parts = {"length_term": 12.0, "scenario_term": 0.0, "skill_term": 0.0}
        parts[term] += g
        r = env(setting, lineage, g, p, direction=direction if g else None, parent=parent, d=parts,
                length=2 + (g if direction == "length" else 0))
        rows.append(r)
        parent = r["content_hash"]
    return rows


def test_spearman_matches_pandas_with_ties():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 5, 40).astype(float)
    y = -x + rng.integers(0, 3, 40)
    expected = pd.Series(x).rank().corr(pd.Series(y).rank())  # Pearson of average ranks (pandas' own ranking)
    assert ev.spearman(x, y) == pytest.approx(expected)
    assert ev.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(ev.spearman([1, 1, 1], [0, 1, 2]))  # constant input: no correlation defined


def test_edit_rows_table1_and_direction_summary():
    rows = (chain("high-length", "L0", [0.75, 0.5, 0.0], "length") + chain("high-length", "L1", [1.0, 1.0, 0.5], "length")
            + chain("high-skill", "L0", [0.75, 0.25, 0.25], "skill"))
    edits = ev.edit_rows(rows)
    assert len(edits) == 6
    first = next(e for e in edits if e["setting"] == "high-length" and e["lineage"] == "L0" and e["generation"] == 1)
    assert first["d_pass_pts"] == pytest.approx(-25.0) and first["d_turns"] == pytest.approx(1.0)
    table = {r["row"]: r for r in ev.table1(rows, directions=("length", "skill"))}
    assert table["length, 1 step"]["d_pass_pts"] == pytest.approx((-25 + 0) / 2)
    assert table["length, mean of 2"]["d_pass_pts"] == pytest.approx((-25 - 50 + 0 - 50) / 4)
    assert table["length, mean of 2"]["paper_key"] == "length, mean of 15"
    assert table["skill, 1 step"]["total"] == pytest.approx(50.0)  # mutation in percent
    s = ev.direction_summary(rows, ("length", "skill"))
    assert s["length"]["d_length_term_mean"] > 0 and s["length"]["d_pass_pts_mean"] < 0
    assert s["skill"]["own_term_final"] > s["skill"]["own_term_seed"]
    assert s["skill"]["pass_rate_final"] == pytest.approx(0.25)


def test_effort_summary_and_calibration():
    rows = chain("low-all", "L0", [0.75, 0.5, 0.5, 0.25], "length") + chain("high-all", "L0", [0.75, 0.25, 0.0, 0.0], "length")
    s = ev.effort_summary(rows)
    assert s["efforts"] == ["low", "high"]
    assert s["final_pass_rate"] == {"low": 0.25, "high": 0.0}
    assert s["first_zero_generation"] == {"low": None, "high": 2}
    assert s["pass_rate_curve"] == {"low": [0.75, 0.5, 0.5, 0.25], "high": [0.75, 0.25, 0.0, 0.0]}
    assert s["pass_rate_monotone"] == {"low": True, "high": True}
    assert s["lineages_at_zero"] == {"low": 0, "high": 1}
    bumpy = chain("low-all", "L0", [0.75, 0.25, 0.5], "length")
    assert ev.effort_summary(bumpy)["pass_rate_monotone"] == {"low": False}  # a rise anywhere breaks it
    cal = ev.calibration(rows)
    assert cal["n_envs"] == len(rows) and cal["rho_d_t"] < 0


def test_curves_mean_and_sem():
    rows = chain("high-all", "L0", [1.0, 0.5], "length") + chain("high-all", "L1", [0.5, 0.0], "length")
    c = {r["generation"]: r for r in ev.curves(rows, by=("setting",), values=("pass_rate",))}
    assert c[0]["pass_rate"] == 0.75 and c[1]["pass_rate"] == 0.25 and c[1]["n"] == 2
    assert c[1]["pass_rate_sem"] == pytest.approx(np.std([0.5, 0.0], ddof=1) / np.sqrt(2))


def test_study_folder_refuses_other_parameters(tmp_path):
    folder.check_study(tmp_path, {"n_seeds": 4, "generations": 8})
    folder.check_study(tmp_path, {"n_seeds": 4, "generations": 8})  # same: resume
    with pytest.raises(folder.StudyError, match="generations"):
        folder.check_study(tmp_path, {"n_seeds": 4, "generations": 15})


def test_pair_tasks_cover_the_catalog(tmp_path):
    tasks = rs.pair_tasks(tmp_path, seed=0)
    assert len(tasks) >= 0.9 * len(pairs())  # a few pairs cannot render on their scenario's data
    assert all((t / "instruction.md").exists() for t in tasks)
    prior = [rs.pair_prior(*t.name.split("__")) for t in tasks]
    assert all(p > 0 for p in prior) and sum(prior) <= 1.0 + 1e-9


def test_reference_solver_is_cached_by_its_settings(tmp_path):
    """A tiny warm-up trains, saves and reloads; other settings retrain."""
    a = rs.reference_solver(tmp_path, warmup_steps=1, tasks_per_step=2, group_size=2, workers=2, progress=False)
    assert (tmp_path / "reference_solver.pt").exists()
    assert len(rw.read_rows(tmp_path / "reference_solver_run" / "steps.jsonl")) == 1
    cache = rs.pass_rate_cache(tmp_path, seed=0, rollouts=8)
    rw.append_rows(cache, [{"content_hash": "0" * 16, "pass_rate": 0.5, "turns": 2.0}])
    b = rs.reference_solver(tmp_path, warmup_steps=1, tasks_per_step=2, group_size=2, workers=2, progress=False)
    assert cache.exists()  # the same solver reloaded: its pass rates still hold
    assert all(torch_equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    rs.reference_solver(tmp_path, warmup_steps=2, tasks_per_step=2, group_size=2, workers=2, progress=False)
    assert json.loads((tmp_path / "reference_solver.json").read_text())["params"]["warmup_steps"] == 2
    assert len(rw.read_rows(tmp_path / "reference_solver_run" / "steps.jsonl")) == 2
    assert not cache.exists()  # a retrained solver does not inherit the old one's pass rates


def test_measure_reuses_cached_pass_rates(tmp_path):
    """A content hash already in the cache is not rolled out again (here its folder does not even exist)."""
    cache = tmp_path / "pass_rates.jsonl"
    rw.append_rows(cache, [{"content_hash": "ab" * 8, "pass_rate": 0.375, "turns": 3.0}])
    got = rs.measure(None, {"ab" * 8: tmp_path / "missing-task"}, cache, seed=0, progress=False)
    assert got["ab" * 8]["pass_rate"] == 0.375 and len(rw.read_rows(cache)) == 1
    assert rs.env_seed("ab" * 8, 0) == rs.env_seed("ab" * 8, 0) != rs.env_seed("ab" * 8, 1)


def torch_equal(p, q) -> bool:
    return bool((p == q).all())
