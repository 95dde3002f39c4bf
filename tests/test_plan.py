"""Plans and rendering: determinism, seed sensitivity, dependency checks, clear errors per step."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest
from harbor.models.task.task import Task
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


# ------------------------------------------------------------------ mismatched parameters
#: Values no renderer expects for a parameter it reads: wrong types, out of range, empty, absent.
BAD_VALUES = ("zzz", "", -1, 0, 10**9, 2.5, True, None, [], {"a": 1}, "../etc/passwd")


def _filled(scen: str, sk: str, seed: int = 0) -> dict:
    return dict(compose(Plan((Step(scen, sk),)), seed).plan.steps[0].params)


def _fixed_params():
    """(scenario, skill, parameter) for every parameter a renderer of the catalog fills in."""
    from evokit.catalog import pairs

    return [(s, k, p) for s, k in pairs() for p in _filled(s, k) if p != "data"]


@pytest.mark.parametrize(("scen", "sk", "param"), _fixed_params())
def test_every_mismatched_parameter_is_a_plan_error(scen, sk, param):
    """Over the whole catalog: a parameter fixed to a value that does not fit renders or raises
    PlanError naming the step and the parameter, never StopIteration, TypeError, KeyError, …"""
    for value in BAD_VALUES:
        try:
            compose(Plan((Step(scen, sk, ((param, value),)),)), 0)
        except PlanError as e:
            assert f"step 1 ({scen} × {sk})" in str(e) and param in str(e), e
        # the same step reading an earlier step's output (a PlanError of either step is fine)
        try:
            compose(Plan((Step(scen, "filter-rows"), Step(scen, sk, ((param, value),), 1))), 0)
        except PlanError as e:
            assert str(e).startswith("step "), e


def test_a_member_the_archive_lacks_names_step_and_param():
    """The defect that leaked StopIteration: tar-extract-member with a member not in the archive."""
    with pytest.raises(PlanError, match=r"step 1 \(tar-archive × tar-extract-member\): param member='no/such/file' "
                                        r"does not fit this step's data \(expected one of"):
        compose(Plan((Step("tar-archive", "tar-extract-member", (("member", "no/such/file"),)),)), 0)
    with pytest.raises(PlanError, match=r"step 1 .*param k='x'"):
        compose(Plan((Step("access-log", "topk-count", (("k", "x"),)),)), 0)


def test_malformed_steps_are_plan_errors():
    """Records and steps of the wrong shape fail validation with PlanError, not TypeError/KeyError."""
    for record in ({"skill": "topk-count"}, {"scenario": "access-log", "skill": "topk-count", "params": [1]},
                   {"scenario": 3, "skill": "topk-count"}):
        with pytest.raises(PlanError, match="step record"):
            Plan.from_records([record])
    for step in (Step("access-log", "topk-count", input="1"), Step("access-log", "topk-count", input=True),
                 Step(["access-log"], "topk-count"), Step("access-log", "topk-count", (("k",),))):
        with pytest.raises(PlanError, match=r"step \d \(.*\): (input|scenario|params)"):
            compose(Plan((Step("access-log", "filter-rows"), step) if step.input is True else (step,)), 0)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_arbitrary_parameters_render_or_raise_plan_error(data):
    """Random catalog steps with random parameters (names the renderers use, arbitrary values,
    chained or not) either render or raise PlanError: the harness and the LLM validators rely on it."""
    from evokit.catalog import pairs

    every = pairs()
    names = sorted({p for s, k in every[::7] for p in _filled(s, k)} | {"data_seed", "x"})
    values = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=True),
                       st.text(max_size=12), st.lists(st.integers(), max_size=2),
                       st.sampled_from(["GET", "alice", "status", "3", "2026-03-01", "src/main.py"]))
    steps = []
    for i in range(data.draw(st.integers(1, 3))):
        scen, sk = data.draw(st.sampled_from(every))
        params = data.draw(st.dictionaries(st.sampled_from(names), values, max_size=3))
        reads = i > 0 and data.draw(st.booleans())
        steps.append(Step(scen, sk, tuple(sorted(params.items())), i if reads else None))
    try:
        compose(Plan(tuple(steps)), data.draw(st.integers(0, 3)))
    except PlanError:
        pass


def test_render_cache_gives_the_same_task():
    """compose with a shared RenderCache (the proposer's) gives exactly what compose without one does."""
    from evokit.catalog import pairs
    from evokit.plan import RenderCache

    cache = RenderCache()
    plans = [Plan((Step(s, k),)) for s, k in pairs()] + [PLAN, Plan(PLAN.steps[:2]),
                                                         Plan((*PLAN.steps, Step("csv-ledger", "group-sum")))]
    for plan in plans + plans:  # the second pass hits the cache
        a, b = compose(plan, 7), compose(plan, 7, cache=cache)
        assert (a.plan, a.instruction, a.dockerfile, a.environment_files, a.tests, a.solution) == \
               (b.plan, b.instruction, b.dockerfile, b.environment_files, b.tests, b.solution)
    assert cache.steps and cache.datasets
