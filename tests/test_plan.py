"""Plans and rendering: determinism, seed sensitivity, dependency checks, clear errors per step."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest
from harbor.models.task.task import Task

from evokit.plan import Plan, PlanError, Step, compose, render
from evokit.tasks import read_metadata

PLAN = Plan((Step("access-log", "filter-rows"), Step("access-log", "topk-count", input=1),
             Step("csv-ledger", "group-sum")))


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_plan_and_seed_give_identical_bytes(tmp_path):
    """render(plan, seed) twice → byte-identical folders (metadata included)."""
    a, b = render(PLAN, 11, tmp_path / "a"), render(PLAN, 11, tmp_path / "b")
    assert tree(a) == tree(b)
    assert not filecmp.dircmp(a, b).diff_files


def test_other_seed_changes_data_not_structure(tmp_path):
    """Another seed → other data and answers, same files, same steps and skills."""
    a, b = tree(render(PLAN, 1, tmp_path / "a")), tree(render(PLAN, 2, tmp_path / "b"))
    assert a.keys() == b.keys()
    assert a["environment/data/step1/access.log"] != b["environment/data/step1/access.log"]
    ma, mb = read_metadata(tmp_path / "a"), read_metadata(tmp_path / "b")
    assert [(s["scenario"], s["skill"], s.get("input")) for s in ma.plan] == \
           [(s["scenario"], s["skill"], s.get("input")) for s in mb.plan]


def test_rendered_task_is_a_plain_harbor_task(tmp_path):
    """Harbor's own model loads the folder; the filled plan and seed sit under [metadata.evokit]."""
    task = Task(render(PLAN, 5, tmp_path / "t"))
    assert "/app/out/step3.txt" in task.instruction
    meta = read_metadata(tmp_path / "t")
    assert meta.seed == 5 and len(meta.plan) == 3 and "k" in meta.plan[1]["params"]


def test_filled_plan_reproduces_the_task(tmp_path):
    """Rendering the plan read back from metadata (parameters filled) reproduces the same task."""
    first = render(PLAN, 9, tmp_path / "a")
    meta = read_metadata(first)
    again = render(Plan.from_records(meta.plan), 9, tmp_path / "b")
    assert tree(first) == tree(again)


def test_skill_replacement_keeps_the_data(tmp_path):
    """Same seed, same scenario, another skill: the step's data files are unchanged (EE's skill edit)."""
    a = compose(Plan((Step("access-log", "topk-count"),)), 4)
    b = compose(Plan((Step("access-log", "distinct-values"),)), 4)
    assert a.environment_files == b.environment_files
    assert a.tests != b.tests


@pytest.mark.parametrize(("plan", "message"), [
    (Plan(()), "at least one step"),
    (Plan((Step("nope", "topk-count"),)), r"step 1 \(nope × topk-count\): unknown scenario"),
    (Plan((Step("access-log", "nope"),)), r"step 1 .*unknown skill"),
    (Plan((Step("text-list", "sum-field"),)), r"step 1 .*does not apply.*number"),
    (Plan((Step("access-log", "topk-count", input=1),)), r"step 1 .*input=1 must name an earlier step"),
    (Plan((Step("access-log", "count-records"), Step("text-list", "distinct-values", input=1))),
     r"step 2 .*step 1 \(count-records\) makes no file"),
    (Plan((Step("access-log", "filter-rows"), Step("csv-ledger", "group-sum", input=1))),
     r"step 2 .*output is a access-log file, not csv-ledger"),
])
def test_bad_plans_name_the_step(plan, message):
    """Incompatible pairs, unknown names and unsatisfied dependencies are errors naming the step."""
    with pytest.raises(PlanError, match=message):
        compose(plan, 0)
