"""evokit.studies.curricula's summary: claims 4 and 5 read from their intervals, gated by their preconditions."""

import pandas as pd
import pytest

from evokit.studies.curricula import curricula_summary


def frame(runs: int = 10, steps: int = 16, at_zero: int = 0, shared: int = 0, evolved: bool = True,
          controls: dict[str, float] | None = None, fixed_rise: float | None = 0.01,
          fixed_every: int = 4) -> pd.DataFrame:
    """EL keeps more groups partially solved than random order in every run, its reward and turns rise
    (0.05 a step); ``controls``: control arms with their partially solved share (EL − control varies by
    run); EL's student is evaluated on the fixed set every ``fixed_every`` steps, its turns there rising
    ``fixed_rise`` a step (None: never evaluated)."""
    rows = []
    nan = float("nan")
    for run in range(runs):
        arms = (("el", 0.5 + 0.01 * run), ("random", 0.3), *((c, v) for c, v in (controls or {}).items()))
        for name, share in arms:
            for step in range(steps):
                el = name == "el"
                rows.append({"run": run, "curriculum": name, "step": step, "partially_solved_share": share,
                             "dead_group_share": 1 - share, "mean_reward": 0.3 + (0.01 * step if el else 0.0),
                             "turns": 2.0 + (0.05 * step + 0.001 * run if el else 0.0),
                             "generation": float(el and evolved and step >= steps // 2), "mean_d_t": 5.0,
                             "turns_per_plan_step": 0.5, "fixed_set_turns": 3.0 + fixed_rise * step + 0.002 * run
                             if el and fixed_rise is not None and (step + 1) % fixed_every == 0 else nan,
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
    ({"at_zero": 1}, "share of the runs' admitted seeds at pass rate 0 (pooled) 0.25, needs ≤ 0.2"),
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


def test_claim_5_counts_a_rise_only_beyond_the_students_drift_on_the_fixed_set():
    """Served turns rise 0.05 a step in every run. Turns on the fixed set rising 0.01 a step leave a
    rise of EL's own (yes); rising as fast (0.05, the same student drifting) leave none (tie); rising
    faster (0.08) mean EL served relatively easier tasks (no). Never evaluated, or only once in a run:
    part (b) has no slope, and the claim is withheld naming it."""
    s = curricula_summary(frame())["claim5"]
    assert s["served_minus_fixed_slope"]["estimate"] == pytest.approx(0.04, abs=1e-3)
    assert s["reproduced"] == "yes"
    assert curricula_summary(frame(fixed_rise=0.05))["claim5"]["reproduced"] == "tie"
    assert curricula_summary(frame(fixed_rise=0.08))["claim5"]["reproduced"] == "no"
    for unmeasured, n in ((frame(fixed_rise=None), 0), (frame(fixed_every=16), 1)):
        c5 = curricula_summary(unmeasured)["claim5"]
        assert c5["reproduced"] == f"no verdict (precondition: fewest fixed-set evaluations in an EL run {n}, needs ≥ 2)"
        assert "served_minus_fixed_slope" not in c5


def test_the_admission_precondition_is_pooled_over_the_block():
    """Seeds at 0 concentrated in two runs (2 of 4 each: 4 of 40, 10 %) meet the pooled tolerance that a
    per-run one would fail; 9 of 40 (22.5 %) spread one a run do not. The largest run's share is reported."""
    f = frame()
    f.loc[f.run.isin([2, 7]), "admitted_at_zero"] = 2
    s = curricula_summary(f)
    assert s["claim4"]["share_reproduced"] == "yes" and s["largest_run_share_at_zero"] == 0.5
    f = frame()
    f.loc[f.run < 9, "admitted_at_zero"] = 1
    assert curricula_summary(f)["claim4"]["share_reproduced"] == (
        "no verdict (precondition: share of the runs' admitted seeds at pass rate 0 (pooled) 0.225, needs ≤ 0.2)")


def test_a_run_without_an_admission_record_is_not_measured():
    """One run lacking seed_admission.json is enough: its seeds may be shared or at 0, so neither counts as met."""
    f = frame()
    f.loc[f.run == 3, ["admitted_seeds", "admitted_at_zero", "shared_seeds"]] = float("nan")
    s = curricula_summary(f)
    assert s["claim4"]["share_reproduced"] == (
        "no verdict (precondition: seed tasks shared between runs not measured, needs = 0; share of the "
        "runs' admitted seeds at pass rate 0 (pooled) not measured, needs ≤ 0.2)")


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


def test_the_study_runs_the_controls_on_els_run_and_evaluates_els_student_on_the_fixed_set(tmp_path):
    """A tiny CPU study with all four arms, in real sandboxes: the matched arm served, step by step and
    slot by slot, the generations EL served in the same run, and the seeds-only arm only generation 0.
    EL's student alone was evaluated on the fixed set — one environment of each generation, the same
    at each evaluation — and the frame reads those turns at the steps they followed; each served
    entry records its task's plan length."""
    from evokit.cpu_agent.policy import task_plan
    from evokit.curriculum import store_envs
    from evokit.rows import read_rows
    from evokit.studies.curricula import CurriculaStudy, curricula_frame, curricula_study, fixed_set

    study = CurriculaStudy(runs=1, n_lineages=2, generations=1, per_generation=1, steps=4, group_size=2,
                           tasks_per_step=2, candidate_steps=(1, 1), attempts=1,
                           curricula=("el", "random", "seeds-only", "matched"),
                           fixed_set_every=2, fixed_set_per_generation=1, fixed_set_rollouts=2)
    curricula_study(tmp_path, study, progress=False)
    train = tmp_path / "run-0" / "train"
    steps = {name: read_rows(train / name / "steps.jsonl") for name in study.curricula}
    served = {name: [[s["env"][1] for s in r["served"]] for r in rows] for name, rows in steps.items()}
    assert len(served["el"]) == 4 and served["matched"] == served["el"]
    assert all(g == 0 for step in served["seeds-only"] for g in step)

    paths = {p.name: p for p in (e.path for e in store_envs(tmp_path / "run-0" / "store"))}
    for entry in (s for r in steps["el"] for s in r["served"]):
        assert entry["plan_steps"] == len(task_plan(paths[entry["task"]])[0].steps)
    fixed = fixed_set(store_envs(tmp_path / "run-0" / "store"), 1, 0)
    evals = read_rows(train / "el" / "evals.jsonl")
    assert [e["step"] for e in evals] == [1, 3]
    assert all(sorted(e["tasks"]) == sorted(p.name for p in fixed) for e in evals)
    assert not any((train / name / "evals.jsonl").exists() for name in ("random", "seeds-only", "matched"))
    f = curricula_frame(tmp_path)
    el = f[f.curriculum == "el"].set_index("step")
    assert el.fixed_set_turns.notna().tolist() == [False, True, False, True]
    assert el.fixed_set_turns[3] == pytest.approx(evals[1]["turns"])


def test_the_fixed_set_draws_per_generation_from_every_generation_by_the_runs_seed():
    """Two environments of each generation, seeded by the run: the same draw for the same run, a
    generation with fewer environments given all of them."""
    from pathlib import Path

    from evokit.curriculum import EnvRow
    from evokit.studies.curricula import fixed_set

    envs = [EnvRow(f"L{i}", g, k, None, Path(f"L{i}-g{g}-k{k}")) for i in range(4) for g in range(3)
            for k in range(1, 3) if g < 2 or (i, k) == (0, 1)]
    chosen = fixed_set(envs, 2, seed=7)
    by_gen = {g: [p for p in chosen if f"-g{g}-" in p.name] for g in range(3)}
    assert [len(by_gen[g]) for g in range(3)] == [2, 2, 1]
    assert fixed_set(envs, 2, seed=7) == chosen
    assert len({fixed_set(envs, 2, seed=s) for s in range(8)}) > 1


def test_the_fixed_set_is_refused_for_an_llm_policy():
    """The TRL path does not evaluate as it trains: a study asking it to is refused when made, not after training."""
    from evokit.studies.curricula import CurriculaStudy

    with pytest.raises(ValueError, match="fixed set is evaluated as the CPU learner trains"):
        CurriculaStudy(policy="tiny", fixed_set_every=4)

