"""evokit.studies.curricula's summary: claims 4 and 5 read from their intervals, gated by their preconditions."""

import pandas as pd
import pytest

from evokit.studies.curricula import curricula_summary


def frame(runs: int = 10, steps: int = 16, at_zero: int = 0, shared: int = 0, evolved: bool = True) -> pd.DataFrame:
    """EL keeps more groups partially solved than random order in every run, its reward and turns rise."""
    rows = []
    for run in range(runs):
        for name, share in (("el", 0.5 + 0.01 * run), ("random", 0.3)):
            for step in range(steps):
                el = name == "el"
                rows.append({"run": run, "curriculum": name, "step": step, "partially_solved_share": share,
                             "dead_group_share": 1 - share, "mean_reward": 0.3 + (0.01 * step if el else 0.0),
                             "turns": 2.0 + (0.05 * step + 0.001 * run if el else 0.0),
                             "generation": float(el and evolved and step >= steps // 2), "mean_d_t": 5.0,
                             "k_advances": 0, "g_advances": 0, "admitted_seeds": 4,
                             "admitted_at_zero": at_zero, "shared_seeds": shared})
    return pd.DataFrame(rows)


def test_met_preconditions_let_the_intervals_decide():
    s = curricula_summary(frame())
    assert s["claim4"]["share_reproduced"] == "yes" and s["claim5"]["reproduced"] == "yes"
    assert all(p["met"] for ps in s["preconditions"].values() for p in ps)
    assert s["claim4"]["dead_group_share"]["el"]["estimate"] == pytest.approx(0.455)


@pytest.mark.parametrize("change, fails", [
    ({"runs": 5}, "runs 5, needs ≥ 10"),
    ({"at_zero": 1}, "largest share of a run's admitted seeds at pass rate 0 0.25, needs ≤ 0.1"),
    ({"shared": 1}, "seed tasks shared between runs 10, needs = 0"),
    ({"steps": 8}, "comparison window (steps) 8, needs ≥ 16"),
])
def test_a_failed_precondition_withholds_claims_4_and_5(change, fails):
    s = curricula_summary(frame(**change))
    for verdict in (s["claim4"]["share_reproduced"], s["claim4"]["el_rises"], s["claim5"]["reproduced"]):
        assert verdict == f"no verdict (precondition: {fails})"


def test_claim_5_needs_el_to_serve_an_evolved_generation():
    s = curricula_summary(frame(evolved=False))
    assert s["claim4"]["share_reproduced"] == "yes"
    assert s["claim5"]["reproduced"] == ("no verdict (precondition: share of runs where EL served generation ≥ 1 0, "
                                         "needs ≥ 0.8)")


def test_a_run_without_an_admission_record_is_not_measured():
    """One run lacking seed_admission.json is enough: its seeds may be shared or at 0, so neither counts as met."""
    f = frame()
    f.loc[f.run == 3, ["admitted_seeds", "admitted_at_zero", "shared_seeds"]] = float("nan")
    s = curricula_summary(f)
    assert s["claim4"]["share_reproduced"] == (
        "no verdict (precondition: seed tasks shared between runs not measured, needs = 0; largest share of a "
        "run's admitted seeds at pass rate 0 not measured, needs ≤ 0.1)")
