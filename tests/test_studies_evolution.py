"""The EE evolution study's parts: rank correlation, per-edit deltas, Table 1 and the claims' summaries
with intervals on hand-made rows over 5 seeds (evolution_analysis), the study folder's parameter check,
and the population's solver and measurement caches (population).
(The whole study runs in the notebook tests, tests/test_notebooks_ee.py.)"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from evokit import rows as rw
from evokit.studies import evolution_analysis as ev
from evokit.studies import folder
from evokit.studies import population as pop


def env(setting, lineage, g, pass_rate, *, seed=0, direction=None, parent=None, turns=None, length=2, d=None,
        mut=0.5, solvers=None):
    """A hand-made envs.jsonl row; D_T parts grow along the edit's direction."""
    d = d or {"length_term": 6.0 * length, "scenario_term": 0.0, "skill_term": 0.0}
    effort, ds = setting.split("-")
    solvers = solvers or {"A": pass_rate}
    return {"seed": seed, "setting": setting, "effort": effort, "direction_setting": ds, "lineage": lineage,
            "generation": g, "k": 1, "task": f"{lineage}{g}", "content_hash": f"{setting}{lineage}{g}",
            "parent": parent, "direction": direction, "d_t": sum(d.values()), "length": length, **d,
            "pass_rate": pass_rate, "turns": turns if turns is not None else float(length),
            **{f"pass_rate_{n}": p for n, p in solvers.items()},
            **{f"mutation_{m}": (None if g == 0 else mut) for m in ev.MUTATIONS}}


def chain(setting, lineage, passes, direction, *, seed=0, turns=None):
    rows, parent = [], None
    for g, p in enumerate(passes):
        term = {"length": "length_term", "scenario": "scenario_term", "skill": "skill_term"}.get(direction, "skill_term")
        parts = {"length_term": 12.0, "scenario_term": 0.0, "skill_term": 0.0}
        parts[term] += g
        r = env(setting, lineage, g, p, seed=seed, direction=direction if g else None, parent=parent, d=parts,
                length=2 + (g if direction == "length" else 0), turns=None if turns is None else turns[g])
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


def test_edit_rows_and_table1_with_intervals():
    rows = [r for s in range(5) for r in chain("high-length", "L0", [0.75, 0.5 - 0.05 * s, 0.0], "length", seed=s)]
    edits = ev.edit_rows(rows)
    assert len(edits) == 10
    first = next(e for e in edits if e["seed"] == 0 and e["generation"] == 1)
    assert first["d_pass_pts"] == pytest.approx(-25.0) and first["d_turns"] == pytest.approx(1.0)
    assert first["d_length"] == 1
    table = {r["row"]: r for r in ev.table1(rows, directions=("length",))}
    one = table["length, 1 step"]
    assert one["d_pass_pts"] == pytest.approx(-35.0) and one["d_pass_pts_lo"] < -35 < one["d_pass_pts_hi"] < 0
    assert table["length, mean of 2"]["paper_key"] == "length, mean of 15"
    assert one["total"] == pytest.approx(50.0)  # mutation in percent


def test_direction_claim_needs_every_interval_on_its_side():
    """Over 5 seeds: length lowers the pass rate and adds turns at every seed (yes, yes); skill's one-step
    changes straddle 0 (tie), so the claim is a tie; skill turns that fall at every seed make it "no"."""
    rows = []
    for s in range(5):
        rows += chain("high-length", "L0", [0.75, 0.5, 0.25], "length", seed=s, turns=[2, 4 + s, 6])
        rows += chain("high-skill", "L0", [0.5, 0.5 + (0.25 if s % 2 else -0.25), 0.0], "skill", seed=s,
                      turns=[2, 2 + (1 if s % 2 else -1), 2])
    c = ev.direction_claim(rows, ("length", "skill"), min_units=5)
    length, skill = c["directions"]["length"], c["directions"]["skill"]
    assert (length["pass_part"], length["turns_part"]) == ("yes", "yes")
    assert length["d_pass_pts_one_step"]["estimate"] == pytest.approx(-25.0)
    assert length["d_turns_per_step_one_step"]["estimate"] == pytest.approx(np.mean([(4 + s) / 3 - 1 for s in range(5)]))
    assert length["share_raising_d_t_all_edits"]["estimate"] == 1.0
    assert (skill["pass_part"], skill["turns_part"]) == ("tie", "tie")
    assert c["reproduced"] == "tie"
    only_length = [r for r in rows if r["setting"] == "high-length"]
    assert ev.direction_claim(only_length, ("length",), min_units=5)["reproduced"] == "yes"
    falling = [dict(r, turns=1.0) if r["setting"] == "high-skill" and r["generation"] == 1 else r for r in rows]
    assert ev.direction_claim(falling, ("length", "skill"), min_units=5)["reproduced"] == "no"
    # a direction that was not run, too few units, or parents at the floor: withheld, naming the precondition
    assert ev.direction_claim(only_length, ("length", "skill"), min_units=5)["reproduced"].startswith("no verdict")
    assert "fewest evolution seeds" in ev.direction_claim(rows, ("length", "skill"))["reproduced"]
    floor = [dict(r, pass_rate=0.0) if r["generation"] == 0 and r["seed"] < 2 else r for r in rows]
    withheld = ev.direction_claim(floor, ("length", "skill"), min_units=5)["reproduced"]
    assert "share of parents above pass rate 0 0.6, needs ≥ 0.9" in withheld, withheld


def test_direction_claim_reads_the_first_units_with_a_child_in_every_direction():
    """The registered spares: of 8 seeds drawn, seed 1's scenario lineage ends before generation 1, so
    the claim's 5 units are seeds 0, 2, 3, 4, 5; seeds 6 and 7 are not read. Seeds 6 and 7 would turn
    length's ΔPass above 0, so reading them (or seed 1) would change the verdict: the choice matters,
    and it is made from which environments exist, whatever their pass rates."""
    rows = []
    for s in range(8):
        up = s >= 6  # the unread spares: passes that rise after the edit
        rows += chain("high-length", "L0", [0.25, 0.75] if up else [0.75, 0.25], "length", seed=s, turns=[2, 4])
        rows += chain("high-scenario", "L0", [0.5] if s == 1 else [0.75, 0.25], "scenario", seed=s, turns=[2, 3])
    units = ev.direction_units(rows, ("length", "scenario"), 5)
    assert units == {"read": [0, 2, 3, 4, 5], "passed_over": [1], "unused": [6, 7]}
    c = ev.direction_claim(rows, ("length", "scenario"), min_units=5, units=5)
    assert c["units"] == units and c["reproduced"] == "yes"
    assert all(r["n_evolution_seeds"] == 5 for r in c["directions"].values())
    assert c["ended_before_generation_1_share"] == pytest.approx(1 / 16)  # over every pinned lineage drawn
    assert ev.direction_claim(rows, ("length", "scenario"), min_units=5)["reproduced"] == "tie"  # all 8 read
    short = ev.direction_claim([r for r in rows if r["seed"] < 5], ("length", "scenario"), min_units=5, units=5)
    assert short["units"]["read"] == [0, 2, 3, 4] and "fewest evolution seeds" in short["reproduced"]
    assert [ev.direction_draw(n) for n in (5, 9, 10, 12)] == [5, 9, 10 + ev.SPARE_UNITS, 12 + ev.SPARE_UNITS]


def test_effort_claim_per_lineage_with_a_horizon():
    """High reaches 0 at generation 2 and max at 1 in every unit, low never: (a) and (b) are above 0 and
    max is sooner. An ended lineage counts up to its last generation; a low lineage that reaches 0
    makes (a) and (b) ties; lineages that start at 0 withhold the claim."""
    rows = []
    for s in range(5):
        rows += chain("low-all", "L0", [0.75, 0.5, 0.5, 0.25], "length", seed=s)
        rows += chain("high-all", "L0", [0.75, 0.25, 0.0, 0.0], "length", seed=s)
        rows += chain("max-all", "L0", [0.75, 0.0, 0.0, 0.0], "length", seed=s)
    c = ev.effort_claim(rows, min_units=5)
    assert c["horizon"] == 3 and c["per_unit"]["first_zero"] == {"low": [4.0] * 5, "high": [2.0] * 5, "max": [1.0] * 5}
    assert c["part_verdicts"] == {"high_minus_low": "yes", "max_minus_low": "yes", "first_zero_high_minus_max": "yes"}
    assert c["reproduced"] == "yes" and c["max_sooner_reproduced"] == "yes"
    assert c["pass_rate_curve"]["high"][2] == {"estimate": 0.0, "lo": 0.0, "hi": 0.0, "n": 5, "level": 0.95,
                                                   "method": "t", "df": 4.0, "mde": 0.0}
    assert ev.effort_claim(rows)["reproduced"].startswith("no verdict (precondition: evolution seeds with every effort 5")
    # a horizon of 1: high has not reached 0 yet, so (a) is a tie (every unit 0) and the claim is not shown
    assert ev.effort_claim(rows, horizon=1, min_units=5)["part_verdicts"]["high_minus_low"] == "tie"
    # one seed's high lineage ends at generation 1 (pass rate 0.25): it does not reach 0, and it is counted as ended
    ended = [r for r in rows if not (r["seed"] == 4 and r["effort"] == "high" and r["generation"] >= 2)]
    c = ev.effort_claim(ended, min_units=5)
    assert c["per_unit"]["reaches_zero_share"]["high"] == [1.0, 1.0, 1.0, 1.0, 0.0]
    assert c["ended_share"]["high"] == pytest.approx(0.2) and c["per_unit"]["first_zero"]["high"][4] == 4.0
    low_falls = [dict(r, pass_rate=0.0) if r["effort"] == "low" and r["generation"] == 3 else r for r in rows]
    c = ev.effort_claim(low_falls, min_units=5)
    assert c["part_verdicts"]["high_minus_low"] == "tie" and c["reproduced"] == "tie"
    at_floor = [dict(r, pass_rate=0.0) if r["generation"] == 0 and r["seed"] == 0 else r for r in rows]
    assert "at generation 0 0.8, needs ≥ 0.9" in ev.effort_claim(at_floor, min_units=5)["reproduced"]


def test_calibration_claim_per_unit_and_within_length():
    """Solver A fails rarer plans at every length; solver B only fails longer ones (no relation within a
    length): A's per-unit ρ is below 0 both ways, B's only over all environments, so the claim is a tie."""
    rng = np.random.default_rng(1)
    rows = []
    for s in range(5):
        for i in range(12):
            length = 2 + i % 3
            rare = float(rng.uniform(0, 3))
            a = min(1.0, max(0.0, 1.2 - 0.25 * length - 0.2 * rare + rng.normal(0, 0.02)))
            b = min(1.0, max(0.0, 1.2 - 0.25 * length + rng.normal(0, 0.05)))
            d = {"length_term": 6.0 * length, "scenario_term": rare, "skill_term": 0.0}
            rows.append(env("high-all", f"L{i}", 0, (a + b) / 2, seed=s, length=length, d=d,
                            solvers={"A": a, "B": b}))
    c = ev.calibration_claim(rows, ("A", "B"), min_units=5)
    a, b = c["solvers"]["A"], c["solvers"]["B"]
    assert a["rho_d_t"]["reproduced_part"] == "yes" and a["rho_within_length"]["reproduced_part"] == "yes"
    assert b["rho_d_t"]["reproduced_part"] == "yes" and b["rho_within_length"]["reproduced_part"] == "tie"
    assert c["n_envs"] == 60 and c["n_evolution_seeds"] == 5 and c["reproduced"] == "tie"
    assert a["rho_d_t"]["n"] == 5 and a["rho_d_t"]["method"] == "t"
    assert a["rho_d_t"]["estimate"] == pytest.approx(np.mean(a["per_unit"]["rho_d_t"]))
    assert ev.calibration_claim(rows, ("A", "B"))["reproduced"].startswith("no verdict")  # 5 units < 10
    # a unit whose environments all fail has no rank correlation: left out of the interval and counted
    dead = [dict(r, pass_rate_A=0.0) if r["seed"] == 0 else r for r in rows]
    iv = ev.calibration_claim(dead, ("A",), min_units=5)["solvers"]["A"]["rho_d_t"]
    assert iv["n"] == 4 and iv["undefined_units"] == 1
    # pass rates almost all 0 or 1: the rank correlation is of ties, and the claim is withheld
    binary = [dict(r, pass_rate_A=float(r["pass_rate_A"] > 0.5)) for r in rows]
    assert "strictly between pass rates 0 and 1 (A)" in ev.calibration_claim(binary, ("A",), min_units=5)["reproduced"]


def test_within_length_weights_strata_by_size_and_skips_small_or_constant_ones():
    envs = ([{"length": 2, "d_t": x, "p": -x} for x in range(4)]  # ρ −1 over 4
            + [{"length": 3, "d_t": x, "p": float(x in (0, 2))} for x in range(3)]  # ρ 0 (1, 0, 1 over 3 ranks)
            + [{"length": 4, "d_t": x, "p": 0.5} for x in range(5)]  # constant: unusable
            + [{"length": 5, "d_t": x, "p": x} for x in range(2)])  # 2 environments: unusable
    rho, usable = ev.within_length(envs, "p")
    assert usable == 2 and rho == pytest.approx((4 * -1.0 + 3 * 0.0) / 7)


def test_d_t_rise_share_counts_edits():
    rows = chain("high-all", "L0", [0.5, 0.5, 0.5], "skill")
    rows[2] = dict(rows[2], d_t=rows[1]["d_t"] - 1.0)
    s = ev.d_t_rise_share(rows)
    assert (s["n_edits"], s["n_raising_d_t"]) == (2, 1) and s["share_raising_d_t"] == 0.5


def test_study_folder_refuses_other_parameters(tmp_path):
    folder.check_study(tmp_path, {"n_seeds": 4, "generations": 8})
    folder.check_study(tmp_path, {"n_seeds": 4, "generations": 8})  # same: resume
    with pytest.raises(folder.StudyError, match="generations"):
        folder.check_study(tmp_path, {"n_seeds": 4, "generations": 15})


def torch_equal(p, q) -> bool:
    return bool((p == q).all())


def test_population_caches_solvers_and_measurements(tmp_path):
    """A solver is pretrained once and reloaded bit-identical; a cached (solver, content) measurement is
    not rolled out again (its task folder does not even exist); an unknown solver is refused by name."""
    a = pop.load_solvers(tmp_path, ["A"])["A"]
    b = pop.load_solvers(tmp_path, ["A"])["A"]
    assert all(torch_equal(p, q) for p, q in zip(a.policy.state_dict().values(), b.policy.state_dict().values(),
                                                 strict=True))
    cache = pop.cache_path(tmp_path, a, rollouts=8, attempts=3)
    cache.parent.mkdir(parents=True, exist_ok=True)
    rw.append_rows(cache, [{"content_hash": "ab" * 8, "pass_rate": 0.375, "turns": 3.0, "rollouts": 8}])
    got = pop.measure({"A": a}, {"ab" * 8: tmp_path / "missing-task"}, tmp_path, progress=False)
    assert got["ab" * 8]["A"]["pass_rate"] == 0.375
    # another rollout stream (the seed admission's) is another measurement, kept apart from stream 0's
    other = pop.cache_path(tmp_path, a, rollouts=8, attempts=3, seed=1)
    rw.append_rows(other, [{"content_hash": "ab" * 8, "pass_rate": 0.125, "turns": 2.0, "rollouts": 8}])
    assert pop.measure({"A": a}, {"ab" * 8: tmp_path / "missing-task"}, tmp_path, seed=1,
                       progress=False)["ab" * 8]["A"]["pass_rate"] == 0.125
    assert pop.measure({"A": a}, {"ab" * 8: tmp_path / "missing-task"}, tmp_path,
                       progress=False)["ab" * 8]["A"]["pass_rate"] == 0.375
    assert pop.flat({"A": {"pass_rate": 0.5, "turns": 2.0}, "B": {"pass_rate": 0.0, "turns": 4.0}}) == {
        "pass_rate": 0.25, "turns": 3.0, "pass_rate_A": 0.5, "turns_A": 2.0, "pass_rate_B": 0.0, "turns_B": 4.0}
    with pytest.raises(ValueError, match="unknown solver 'Z'"):
        pop.load_solvers(tmp_path, ["Z"])
