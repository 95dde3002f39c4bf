"""evokit.studies.transfer without sandboxes: the config refuses what cannot be measured, and the summary
reads claim 10 from per-repetition rows as stated (yes / no / tie), on rows built so that each answer is known.

The pipeline itself (seeds, EE, bank, co-evolution, real-sandbox pass rates) runs in
tests/test_notebooks_transfer.py, which also checks the structure of what it wrote.
"""

from __future__ import annotations

import json

import pytest

from evokit.rows import append_rows
from evokit.studies.folder import StudyError
from evokit.studies.transfer import ARMS, TransferStudy, transfer_study, transfer_summary


def test_config_refuses_what_cannot_be_measured():
    with pytest.raises(ValueError, match="repetitions must be ≥ 2"):
        TransferStudy(repetitions=1)
    with pytest.raises(ValueError, match="population A, B, C"):
        TransferStudy(solvers=("A", "Z"))
    with pytest.raises(ValueError, match="≥ 2 distinct"):
        TransferStudy(solvers=("A", "A"))
    with pytest.raises(ValueError, match="target 'C'"):
        TransferStudy(solvers=("A", "B"), target="C")
    with pytest.raises(ValueError, match="effort must be one of"):
        TransferStudy(effort="extreme")
    with pytest.raises(ValueError, match="rollouts"):
        TransferStudy(rollouts=0)


def test_repetitions_have_distinct_seeds_that_depend_on_the_study_seed():
    a, b = TransferStudy(seed=0, repetitions=8), TransferStudy(seed=1, repetitions=8)
    seeds_a = [a.repetition_seed(r) for r in range(8)]
    assert len(set(seeds_a)) == 8
    assert not set(seeds_a) & {b.repetition_seed(r) for r in range(8)}


def test_a_folder_of_another_study_is_refused(tmp_path):
    """check_study runs before any solver is built: other sizes in the same folder raise at once."""
    (tmp_path / "study.json").write_text(json.dumps(TransferStudy(n_seeds=3).params()))
    with pytest.raises(StudyError, match="n_seeds"):
        transfer_study(tmp_path, TransferStudy(n_seeds=4), progress=False)


def fake_results(root, pass_rate, n_reps=10, study=None, failed_trajectories=1):
    """A results folder whose rows give ``pass_rate(r, solver, arm)`` on two tasks per arm (no bank hits)."""
    study = study or TransferStudy(repetitions=n_reps)
    (root / "study.json").write_text(json.dumps(study.params()))
    rows = []
    for r in range(n_reps):
        rep = root / f"rep{r}"
        rep.mkdir()
        (rep / "bank.json").write_text(json.dumps({"solver": "A", "failures": [], "totals": [],
                                                   "trajectories": 8, "failed_trajectories": failed_trajectories}))
        for s in study.solvers:
            for arm in ARMS:
                rows += [{"repetition": r, "solver": s, "arm": arm, "task": f"t{j}", "pass_rate": pass_rate(r, s, arm),
                          "turns": 2.0, "rollouts": 4, "masked": 0, "length": 2, "scenarios": []} for j in range(2)]
    append_rows(root / "passes.jsonl", rows)
    return root


def noise(r, s):
    return 0.01 * ((r * 7 + ord(s)) % 5 - 2)  # small, deterministic, differs by repetition and solver


def test_summary_reproduces_when_ee_drops_alike_and_coevolution_hits_the_target(tmp_path):
    def p(r, s, arm):
        base = {"A": 0.8, "B": 0.7, "C": 0.75}[s]
        if arm == "ee":
            return base - 0.3 + noise(r, s)
        if arm == "coevolution":
            return base - (0.4 if s == "A" else 0.05) + noise(r, s)
        return base
    s = transfer_summary(fake_results(tmp_path, p))
    assert s["ee_alike"]["reproduced"] == "yes", s["ee_alike"]
    assert s["coevolution_targets"]["reproduced"] == "yes", s["coevolution_targets"]
    assert s["reproduced"] == "yes" and s["n_repetitions"] == 10
    assert abs(s["drop"]["ee"]["A"]["estimate"] - 0.3) < 0.03
    assert abs(s["coevolution_targets"]["difference"]["B"]["estimate"] - 0.35) < 0.03
    assert set(s["ee_alike"]["ratio_to_mean"]) == {"A", "B", "C"}


def test_summary_says_no_when_one_solver_does_not_drop_or_drops_too_much(tmp_path):
    """B's pass rate does not fall on EE's tasks (drop ≈ 0, far under half the mean): "no"; co-evolution
    lowers everyone alike: A − B ≈ 0 with an estimate at or below 0 in some ordering, not "yes"."""
    def p(r, s, arm):
        base = 0.8
        if arm == "ee":
            return base - (0.0 if s == "B" else 0.5) + noise(r, s)
        if arm == "coevolution":
            return base - 0.2 + noise(r, s)
        return base
    s = transfer_summary(fake_results(tmp_path, p))
    assert s["ee_alike"]["reproduced"] == "no"  # B's drop − mean/2 lies wholly below 0
    assert s["ee_alike"]["drop_minus_half_mean"]["B"]["hi"] < 0
    assert s["coevolution_targets"]["reproduced"] in ("no", "tie")
    assert s["reproduced"] == "no"


def test_summary_says_tie_when_estimates_agree_but_an_interval_crosses(tmp_path):
    """Co-evolution hits A more on average, but three repetitions in ten reverse it: the paired interval
    crosses 0 while the estimate is above it."""
    def p(r, s, arm):
        if arm == "coevolution":
            gap = [-0.3, 0.2, 0.25, 0.2, 0.3, -0.3, 0.1, -0.2, 0.2, 0.1][r]
            return 0.8 - 0.2 - (gap if s == "A" else 0.0)
        return 0.8 - (0.3 if arm == "ee" else 0.0) + noise(r, s)
    s = transfer_summary(fake_results(tmp_path, p))
    co = s["coevolution_targets"]
    assert co["difference"]["B"]["estimate"] > 0 and co["difference"]["B"]["lo"] < 0
    assert co["reproduced"] == "tie"


def test_summary_needs_two_complete_repetitions(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "study.json").write_text(json.dumps(TransferStudy().params()))
    with pytest.raises(FileNotFoundError, match="no passes.jsonl"):
        transfer_summary(tmp_path / "empty")
    (tmp_path / "one").mkdir()
    one = fake_results(tmp_path / "one", lambda r, s, arm: 0.5, n_reps=1, study=TransferStudy(repetitions=2))
    with pytest.raises(ValueError, match="1 repetition"):
        transfer_summary(one)


def test_summary_is_withheld_when_a_registered_precondition_fails(tmp_path):
    """Fewer than 10 repetitions, a target bank without a failed trajectory, or a solver under 0.25 on the
    seeds: the claim and both parts say "no verdict", naming the precondition and its value."""
    def p(r, s, arm):
        return {"seeds": 0.8, "ee": 0.5, "coevolution": 0.3 if s == "A" else 0.7}[arm] + noise(r, s)
    for name, kwargs, shown in (("five", {"n_reps": 5}, "repetitions 5, needs ≥ 10"),
                                ("bank", {"failed_trajectories": 0}, "target's bank (a repetition) 0, needs ≥ 1")):
        (tmp_path / name).mkdir()
        s = transfer_summary(fake_results(tmp_path / name, p, **kwargs))
        for verdict in (s["reproduced"], s["ee_alike"]["reproduced"], s["coevolution_targets"]["reproduced"]):
            assert verdict.startswith("no verdict (precondition: ") and shown in verdict, verdict
    (tmp_path / "weak").mkdir()
    weak = transfer_summary(fake_results(tmp_path / "weak", lambda r, s, arm: 0.1 if s == "C" else p(r, s, arm)))
    assert "solver C's pass rate on the seeds 0.1, needs ≥ 0.25" in weak["reproduced"]
    assert {x["name"]: x["met"] for x in weak["preconditions"]}["solver A's pass rate on the seeds"] is True
