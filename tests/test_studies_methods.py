"""evokit.studies.methods: claim 6 read from its intervals, gated by its preconditions; the study end to end."""

import pandas as pd
import pytest

from evokit.benchmark import BenchmarkConfig
from evokit.studies.methods import (
    MethodsStudy,
    environments_per_method,
    methods_frame,
    methods_study,
    methods_summary,
)


def evals(runs: int = 10, initial: float = 0.5, ensemble_made: int = 8, at_zero: dict | None = None) -> pd.DataFrame:
    """Evolution peaks above both baselines in every run; equal budgets of 8 unless the ensemble falls short;
    5 admitted seeds a run, none at pass rate 0 on re-measurement except ``at_zero`` ({run: seeds})."""
    rows = []
    for run in range(runs):
        for method, gain in (("evolution", 0.2), ("co-evolution", 0.05), ("ensemble", 0.0)):
            for step, rate in ((0, initial), (10, initial + gain + 0.001 * run), (20, initial + gain / 2)):
                rows.append({"run": run, "method": method, "steps_trained": step, "benchmark_pass_rate": rate,
                             "admitted_seeds": 5, "admitted_at_zero": (at_zero or {}).get(run, 0), "shared_seeds": 0, "budget": 8,
                             "environments": ensemble_made if method == "ensemble" else 8})
    return pd.DataFrame(rows)


def test_met_preconditions_let_the_intervals_decide():
    s = methods_summary(evals())
    assert s["peak_reproduced"] == "yes" and all(p["met"] for p in s["preconditions"])


@pytest.mark.parametrize("change, fails", [
    ({"runs": 5}, "runs 5, needs ≥ 10"),
    ({"ensemble_made": 6}, "largest budget shortfall of a method (environments) 2, needs = 0"),
    ({"initial": 0.05}, "lowest untrained benchmark pass rate 0.05, needs in [0.1, 0.9]"),
    ({"at_zero": {0: 4, 1: 4, 2: 3}}, "share of the runs' admitted seeds at pass rate 0 (pooled) 0.22, needs ≤ 0.2"),
])
def test_a_failed_precondition_withholds_claim_6(change, fails):
    s = methods_summary(evals(**change))
    assert fails in s["peak_reproduced"] and s["peak_reproduced"].startswith("no verdict (precondition: ")
    assert fails in s["final_reproduced"]


def test_the_admission_precondition_is_pooled_over_the_runs():
    """Two runs with 3 of 5 seeds at 0 (6 of 50 in all) meet the block's tolerance; the run is reported beside."""
    s = methods_summary(evals(at_zero={3: 3, 8: 3}))
    assert s["peak_reproduced"] == "yes" and s["largest_run_share_at_zero"] == 0.6


def test_the_study_gives_every_method_the_same_budget_and_a_disjoint_benchmark(tmp_path):
    """A tiny CPU study in real sandboxes, the pipeline ``ee_methods`` runs (its smoke size runs in the slow
    suite): co-evolution synthesised as many environments as evolution did and the ensemble no more, every
    method was evaluated on the benchmark before and after training, and the frame reads those rows."""
    study = MethodsStudy(runs=2, n_lineages=3, generations=1, per_generation=2, steps=2, group_size=2,
                         tasks_per_step=1, candidate_steps=(1, 1), attempts=1, refresh_every=1, eval_every=1,
                         eval_rollouts=1, benchmark=BenchmarkConfig(n_tasks=3, max_steps=1))
    methods_study(tmp_path, study, progress=False)
    made = environments_per_method(tmp_path)
    assert min(made["evolution"]) > 0 and made["co-evolution"] == made["evolution"]  # run by run
    assert all(e <= b for e, b in zip(made["ensemble"], made["evolution"], strict=True))
    evals, steps = methods_frame(tmp_path)
    assert sorted(set(evals.method)) == sorted(study.methods)
    for _, rows in evals.groupby(["run", "method"]):
        assert rows.steps_trained.tolist() == [0, 1, 2] and rows.benchmark_pass_rate.between(0, 1).all()
    assert len(steps) == study.runs * study.steps * len(study.methods)
    assert "runs 2, needs ≥ 10" in methods_summary(evals)["peak_reproduced"]
