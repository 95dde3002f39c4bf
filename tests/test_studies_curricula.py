"""evokit.studies.curricula's summary: claims 4 and 5 read from their intervals, gated by their preconditions."""

import pandas as pd
import pytest

from evokit.studies.curricula import curricula_summary


def frame(runs: int = 10, steps: int = 16, at_zero: int = 0, shared: int = 0, evolved: bool = True,
          controls: dict[str, float] | None = None) -> pd.DataFrame:
    """EL keeps more groups partially solved than random order in every run, its reward and turns rise;
    ``controls``: control arms with their partially solved share (EL − control varies by run)."""
    rows = []
    for run in range(runs):
        arms = (("el", 0.5 + 0.01 * run), ("random", 0.3), *((c, v) for c, v in (controls or {}).items()))
        for name, share in arms:
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


def test_claim_4_counts_els_adaptivity_only_if_el_beats_both_controls():
    """EL (0.50–0.59) beats the seeds-only arm (0.4) in every run; against the matched arm (0.55) the
    difference straddles 0 (a tie), so adaptivity and the claim are ties; without control arms both are
    withheld, naming them."""
    s = curricula_summary(frame(controls={"seeds-only": 0.4, "matched": 0.3}))
    c4 = s["claim4"]
    assert c4["adaptivity_reproduced"] == "yes" and c4["claim_reproduced"] == "yes"
    assert c4["control_differences"]["seeds-only"]["estimate"] == pytest.approx(0.145)
    tie = curricula_summary(frame(controls={"seeds-only": 0.4, "matched": 0.545}))["claim4"]
    assert tie["control_differences"]["matched"]["lo"] < 0 < tie["control_differences"]["matched"]["hi"]
    assert tie["adaptivity_reproduced"] == "tie" and tie["claim_reproduced"] == "tie"
    lost = curricula_summary(frame(controls={"seeds-only": 0.9, "matched": 0.3}))["claim4"]
    assert lost["adaptivity_reproduced"] == "no" and lost["claim_reproduced"] == "no"
    none = curricula_summary(frame())["claim4"]
    assert none["share_reproduced"] == "yes"
    assert none["claim_reproduced"] == "no verdict (precondition: control arms run (seeds-only, matched) 0, needs = 2)"


def test_the_matched_control_needs_el_trained_first():
    from evokit.studies.curricula import CurriculaStudy

    with pytest.raises(ValueError, match="'el' must come first"):
        CurriculaStudy(curricula=("random", "matched", "el"))
    assert CurriculaStudy(curricula=("el", "random", "seeds-only", "matched")).curricula[-1] == "matched"


def test_the_study_runs_the_controls_on_els_run(tmp_path):
    """A tiny CPU study with all four arms, in real sandboxes: the matched arm served, step by step and
    slot by slot, the generations EL served in the same run, and the seeds-only arm only generation 0."""
    from evokit.rows import read_rows
    from evokit.studies.curricula import CurriculaStudy, curricula_study

    study = CurriculaStudy(runs=1, n_lineages=2, generations=1, per_generation=1, steps=3, group_size=2,
                           tasks_per_step=2, candidate_steps=(1, 1), attempts=1,
                           curricula=("el", "random", "seeds-only", "matched"))
    curricula_study(tmp_path, study, progress=False)
    served = {name: [[s["env"][1] for s in r["served"]] for r in read_rows(tmp_path / "run-0" / "train" / name / "steps.jsonl")]
              for name in study.curricula}
    assert len(served["el"]) == 3 and served["matched"] == served["el"]
    assert all(g == 0 for step in served["seeds-only"] for g in step)
