"""D_T and its decomposition: exactness, monotonicity of each edit direction, vectorisation.

Properties are checked with hypothesis over random catalog plans (EE §3: length, scenario
rarity and skill rarity each make a task harder).
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from evokit.catalog import SKILLS, pair_weight, pairs
from evokit.difficulty import catalog_reference, empirical_reference, score, score_many, weakness
from evokit.plan import Plan, Step

REF = catalog_reference()
PAIRS = pairs()


def plans(min_len=1, max_len=6):
    return st.lists(st.sampled_from(PAIRS), min_size=min_len, max_size=max_len).map(
        lambda ps: Plan(tuple(Step(s, k) for s, k in ps)))


@given(plans())
def test_decomposition_is_exact(plan):
    """D_T = length term + scenario term + skill term, and = the paper's two sums."""
    d = score(plan, REF)
    assert math.isclose(d.total, d.length_term + d.scenario_term + d.skill_term, abs_tol=1e-9)
    assert math.isclose(d.total, d.scenario_nll + d.skill_nll, abs_tol=1e-9)
    assert d.length == len(plan)


@given(plans(max_len=5), st.sampled_from(PAIRS), st.integers(0, 5))
def test_inserting_a_step_raises_difficulty(plan, pair, where):
    """A length edit (one more step anywhere) strictly raises D_T and L."""
    where = min(where, len(plan))
    longer = Plan(plan.steps[:where] + (Step(*pair),) + plan.steps[where:])
    a, b = score(plan, REF), score(longer, REF)
    assert b.total > a.total and b.length == a.length + 1


@given(plans(), st.data())
def test_rarer_skill_raises_only_the_skill_term(plan, data):
    """Replacing a skill by a rarer one (same scenario) raises the skill term; L and the scenario term stay."""
    i = data.draw(st.integers(0, len(plan) - 1))
    s, k = plan.steps[i].scenario, plan.steps[i].skill
    rarer = [k2 for k2 in SKILLS if 0 < pair_weight(s, k2) < pair_weight(s, k)]
    assume(rarer)
    k2 = data.draw(st.sampled_from(sorted(rarer)))
    edited = Plan(plan.steps[:i] + (Step(s, k2),) + plan.steps[i + 1:])
    a, b = score(plan, REF), score(edited, REF)
    assert b.skill_term > a.skill_term
    assert math.isclose(b.scenario_term, a.scenario_term) and b.length_term == a.length_term


@given(plans(), st.data())
def test_rarer_scenario_raises_only_the_scenario_term(plan, data):
    """Replacing a scenario by a rarer one that keeps the skill raises the scenario term and nothing else."""
    i = data.draw(st.integers(0, len(plan) - 1))
    s, k = plan.steps[i].scenario, plan.steps[i].skill
    ps = dict(zip(REF.scenarios, np.exp(REF.log_scenario), strict=True))
    rarer = [s2 for s2, _ in PAIRS if _ == k and ps[s2] < ps[s]
             and SKILLS[k].rare_in.get(s2, 1.0) == SKILLS[k].rare_in.get(s, 1.0)]
    assume(rarer)
    s2 = data.draw(st.sampled_from(sorted(set(rarer))))
    edited = Plan(plan.steps[:i] + (Step(s2, k),) + plan.steps[i + 1:])
    a, b = score(plan, REF), score(edited, REF)
    assert b.scenario_term > a.scenario_term
    assert math.isclose(b.skill_term, a.skill_term) and b.length_term == a.length_term


@settings(max_examples=20)
@given(st.lists(plans(), min_size=1, max_size=30))
def test_vectorised_equals_scalar(batch):
    """score_many gives the same numbers as scoring each plan alone."""
    many = score_many(batch, REF)
    for r, plan in enumerate(batch):
        d = score(plan, REF)
        assert math.isclose(many["total"][r], d.total) and many["length"][r] == d.length


def test_reference_tables_are_distributions():
    """p_T(σ) sums to 1; p_T(κ|σ) is zero off the compatible pairs and sums to at most 1."""
    assert math.isclose(np.exp(REF.log_scenario).sum(), 1.0)
    pk = np.exp(REF.log_skill)
    assert (pk.sum(axis=1) <= 1 + 1e-9).all() and (pk.sum(axis=1) > 0).all()
    for i, s in enumerate(REF.scenarios):
        for j, k in enumerate(REF.skills):
            assert (pk[i, j] > 0) == ((s, k) in set(PAIRS))


def test_empirical_reference_follows_counts():
    """Counted pairs become likelier than uncounted ones; smoothing keeps every compatible pair possible."""
    s, k = PAIRS[0]
    fam = [Plan((Step(s, k),))] * 50
    ref = empirical_reference(fam, alpha=0.5)
    i, j = ref.scenarios.index(s), ref.skills.index(k)
    assert ref.log_scenario[i] == ref.log_scenario.max()
    assert ref.log_skill[i, j] == ref.log_skill[i].max()
    assert np.isfinite(ref.log_skill[i][[ref.skills.index(k2) for s2, k2 in PAIRS if s2 == s]]).all()


class _Policy:
    """A scripted stand-in policy with uniform preferences (the test is about Δ_θ, not about learning)."""

    def scenario_logprob(self, s, g):
        return math.log(1 / len(REF.scenarios))

    def skill_logprob(self, k, s, g):
        return math.log(1 / len(REF.skills))


def test_weakness_counts_only_harder_steps():
    """Δ_θ sums max(d_θ − d_T, 0): steps the policy finds easier than the reference add nothing."""
    plan = Plan(tuple(Step(s, k) for s, k in PAIRS[:5]))
    w = weakness(plan, _Policy(), REF)
    per_step = []
    for stp in plan.steps:
        i, j = REF.scenarios.index(stp.scenario), REF.skills.index(stp.skill)
        d_t = -REF.log_scenario[i] - REF.log_skill[i, j]
        d_theta = math.log(len(REF.scenarios)) + math.log(len(REF.skills))
        per_step.append(max(d_theta - d_t, 0))
    assert math.isclose(w, sum(per_step))
