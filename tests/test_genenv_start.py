"""scripts/genenv_start.py, the pilot grid of GenEnv starting conditions (docs/preregistration.md, claim 7)."""

from __future__ import annotations

import json

from script_support import load_script


def test_tilting_towards_rare_pairs_lowers_base_success_and_rows_are_written(tmp_path, capsys):
    """A real base agent on two grid points: τ = 8 (rare pairs first) is harder for it than p_T (τ = 0),
    one row per seed and point lands on disk, and the table names the rule's choice."""
    gs = load_script("genenv_start", tmp_path)
    assert gs.main(["--seed", "900", "--units", "1", "--tilts", "0,8", "--max-lens", "6"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "results" / "genenv_start" / "block900_units1.jsonl").open()]
    by_tilt = {r["init_tilt"]: r["base_success"] for r in rows}
    assert len(rows) == 2 and by_tilt[8.0] < by_tilt[0.0]
    assert "the rule's choice" in capsys.readouterr().out


def test_the_rule_takes_the_least_tilt_then_the_shortest_plans_in_band():
    """Order and thresholds of the registered rule: (τ 2, max 10) precedes (τ 3, max 6); the highest
    seed, not the mean, decides the precondition."""
    gs = load_script("genenv_start")
    rows = [{"seed": s, "init_tilt": t, "max_len": m, "base_success": v}
            for (t, m), vs in {(3.0, 6): (0.2, 0.3), (2.0, 10): (0.1, 0.45), (2.0, 8): (0.5, 0.6)}.items()
            for s, v in enumerate(vs)]
    points = gs.table(rows, 0.4)
    assert [(p["init_tilt"], p["max_len"]) for p in points] == [(2.0, 8), (2.0, 10), (3.0, 6)]
    assert [p["mean_in_band"] for p in points] == [False, True, True]
    assert [p["every_seed_below_zone"] for p in points] == [False, False, True]


def test_a_malformed_grid_is_one_line_and_exit_2(capsys):
    gs = load_script("genenv_start")
    assert gs.main(["--tilts", "4,x"]) == 2
    assert "comma-separated" in capsys.readouterr().err
