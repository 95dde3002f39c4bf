"""The catalog's contract: every compatible (scenario, skill) pair renders a task whose oracle
passes and whose null solution fails in the real sandbox (reasoning-gym's registry test).
"""

from __future__ import annotations

import pytest

from evokit.catalog import SCENARIOS, SKILLS, pairs, scenario, skill
from evokit.plan import Plan, Step, render
from evokit.verify import VerifyConfig, verify_task

PAIRS = pairs()
ONE_RUN = VerifyConfig(determinism_runs=1)


def test_catalog_size():
    """The family spans at least 16 scenarios, 24 skills, and every scenario and skill is usable."""
    assert len(SCENARIOS) >= 16, sorted(SCENARIOS)
    assert len(SKILLS) >= 24, sorted(SKILLS)
    used_s = {s for s, _ in PAIRS}
    used_k = {k for _, k in PAIRS}
    assert used_s == set(SCENARIOS), set(SCENARIOS) - used_s
    assert used_k == set(SKILLS), set(SKILLS) - used_k


def test_priors_are_documented():
    """Every prior is positive and carries its reasoning (the catalog's p_T is data, not magic)."""
    for s in SCENARIOS.values():
        assert s.prior > 0 and len(s.rationale) > 30, s.name
    for k in SKILLS.values():
        assert k.prior > 0 and len(k.rationale) > 30, k.name


@pytest.mark.parametrize(("scenario_name", "skill_name"), PAIRS, ids=[f"{s}×{k}" for s, k in PAIRS])
def test_pair_contract(tmp_path, scenario_name, skill_name):
    """The rendered one-step task passes its oracle, fails its null solution, and passes the rubric."""
    task = render(Plan((Step(scenario_name, skill_name),)), seed=7, dest=tmp_path / "task")
    v = verify_task(task, ONE_RUN)
    assert v.passed, [(c.name, c.reason) for c in v.failures]


def test_every_skill_has_two_paraphrases():
    """Each rendered step offers at least two instruction sentences to choose from."""
    from evokit.plan import compose

    for s, k in PAIRS:
        spec = compose(Plan((Step(s, k),)), seed=3).specs[0]
        assert len(set(spec.instructions)) >= 2, (s, k)


def test_names_are_unique_and_lookup_errors_are_clear():
    """Unknown names raise CatalogError naming the known ones."""
    from evokit.catalog import CatalogError

    with pytest.raises(CatalogError, match="unknown scenario 'nope'.*access-log"):
        scenario("nope")
    with pytest.raises(CatalogError, match="unknown skill 'nope'"):
        skill("nope")
