"""``ee_transfer`` (claim 10) runs end to end at smoke size, once per seed block, and records what it measured.

The notebook runs with papermill (tests/notebook_support.py: smoke sizes, results and figures in a
temporary folder); two tests read the run:

1. **consistency** (any block): *the design held in what was written* — at least 5 repetitions; in each,
   every solver was measured on the same tasks of every arm with the same number of rollouts; EE's arm and
   co-evolution's arm have the same number of environments (equal budgets); co-evolution's tasks use only
   the seeds' scenarios at the seeds' lengths (EE §5.1's co-evolution); the weakness bank holds the target
   solver's rollouts on the seeds, as many as configured; EE's tasks are evolved offspring (generation ≥ 1
   in a store whose generation 0 are the seeds) — and *the verdicts follow from the intervals* recorded
   beside them;
2. **direction**: claim 10 as fixed before the first run, read on the run's intervals — EE's offspring lower
   every solver's pass rate alike (each drop within a factor 2 of the mean) and co-evolution mined from A's
   failures lowers A's more than B's and C's — ``xfail(strict=True)`` with the recorded numbers where a run
   found the intervals not reading it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from notebook_support import (
    BLOCKS,
    combined,
    expect_claim,
    follows,
    interval_ok,
    paper_side,
    runner,
    runs_precondition,
)

from evokit.cpu_agent.policy import task_plan
from evokit.lineage import LineageStore
from evokit.rows import read_rows
from evokit.seeds import seed_dirs

pytestmark = pytest.mark.notebooks


def reproduced(ivs: list[dict]) -> str:
    """A part of claim 10 from its intervals, each expected above 0 (docs/preregistration.md), recomputed here."""
    return combined([paper_side(iv, "above") for iv in ivs])


def ee_intervals(s: dict) -> list[dict]:
    """EE alike: each solver's drop, and each drop minus half the mean and twice the mean minus it."""
    ee = s["ee_alike"]
    return [*s["drop"]["ee"].values(), *ee["drop_minus_half_mean"].values(), *ee["twice_mean_minus_drop"].values()]


def claim10_parts(s: dict) -> list[str]:
    """Claim 10's parts: EE lowers every solver alike; co-evolution from A's failures lowers A's the most."""
    return [reproduced(ee_intervals(s)), reproduced(list(s["coevolution_targets"]["difference"].values()))]


def check_design(results: Path, s: dict) -> None:
    study = s["study"]
    rows = read_rows(results / "passes.jsonl")
    assert s["n_repetitions"] == study["repetitions"] >= 5
    for r in range(study["repetitions"]):
        rep = [x for x in rows if x["repetition"] == r]
        tasks = {(x["solver"], x["arm"]): sorted(y["task"] for y in rep if (y["solver"], y["arm"]) == (x["solver"], x["arm"]))
                 for x in rep}
        for arm in ("seeds", "ee", "coevolution"):
            per_solver = [tasks[(sv, arm)] for sv in study["solvers"]]
            assert all(t == per_solver[0] for t in per_solver), (r, arm)  # the same tasks for every solver
        assert {x["rollouts"] for x in rep} == {study["rollouts"]}, r
        assert len(tasks[("A", "ee")]) == len(tasks[("A", "coevolution")]) >= 1, r  # equal budgets
        seeds = seed_dirs(results / f"rep{r}" / "seeds")
        seed_plans = [task_plan(d)[0] for d in seeds]
        scenarios = {st.scenario for p in seed_plans for st in p.steps}
        co = LineageStore(results / f"rep{r}" / "coevolution_store").envs()
        assert all({st["scenario"] for st in e.data["plan"]} <= scenarios for e in co), r
        assert {len(e.data["plan"]) for e in co} <= {len(p) for p in seed_plans}, r
        bank = json.loads((results / f"rep{r}" / "bank.json").read_text())
        assert bank["solver"] == study["target"]
        assert bank["trajectories"] == len(seeds) * study["bank_rollouts"], r
        ee = LineageStore(results / f"rep{r}" / "ee_store")
        names = {e.task: e.generation for e in ee.envs()}
        assert all(names[t] >= 1 for t in tasks[("A", "ee")]), r
        assert sorted(e.data["seed_dir"] for e in ee.envs() if e.generation == 0) == sorted(map(str, seeds)), r


#: Claim 10 where a run recorded its intervals not reading the paper's direction, per seed block, with that
#: run's numbers. At smoke size (5 repetitions) the verdict is withheld on every block (the registered 10:
#: `make reproduce UNITS=10`).
KNOWN = {("claim10", 0): "tie: EE's drops A +0.32 [−0.06, +0.70], B +0.22 [−0.15, +0.59], C +0.41 [+0.07, +0.75]: A's "
                         "and B's hold 0 (EE alike: tie); co-evolution from A's failures, A − B −0.22 [−0.72, +0.28], "
                         "A − C −0.23 [−0.86, +0.40] (tie)",
         ("claim10", 100): "tie: EE lowers A, B and C (drops +0.42 [+0.14, +0.70], +0.25 [+0.07, +0.43], +0.48 "
                           "[+0.21, +0.75]), alike but for B's drop − mean/2 +0.06 [−0.06, +0.17]; co-evolution from "
                           "A's failures A − B +0.08 [−0.19, +0.35], A − C −0.27 [−0.72, +0.18]"}


@pytest.fixture(scope="module", params=BLOCKS)
def transfer(request, tmp_path_factory):
    """ee_transfer run once per seed block; both tests read it."""
    run = runner(tmp_path_factory.mktemp(f"transfer-block{request.param}"), request.param)
    return run("ee_transfer"), run.base / "results" / "ee_transfer", request.param


def test_ee_transfer_consistent(transfer):
    s, results, _ = transfer
    check_design(results, s)
    ee, co = s["ee_alike"], s["coevolution_targets"]
    for iv in [*ee_intervals(s), *co["difference"].values()]:
        interval_ok(iv)
    pre = s["preconditions"]
    runs_precondition(pre, "repetitions", s["n_repetitions"])
    ee_part, co_part = claim10_parts(s)
    follows(ee["reproduced"], ee_part, pre)
    follows(co["reproduced"], co_part, pre)
    follows(s["reproduced"], combined([ee_part, co_part]), pre)


def test_ee_transfer_direction(transfer, request):
    s, _, block = transfer
    expect_claim(request, KNOWN, "claim10", block)
    assert combined(claim10_parts(s)) == "yes", {"drop": s["drop"]["ee"],
                                                 "difference": s["coevolution_targets"]["difference"]}
