"""The one registry of scenarios and skills, and the compatibility relation between them.

Modules under :mod:`evokit.catalog.scenarios` and :mod:`evokit.catalog.skills` call
:func:`register_scenario` / :func:`register_skill` at import time (reasoning-gym's
pattern); ``tests/test_catalog.py`` walks every compatible pair and checks that the
rendered task's oracle passes and its null solution fails in the real sandbox.
"""

from __future__ import annotations

from evokit.catalog.base import CatalogError, Scenario, Skill

SCENARIOS: dict[str, Scenario] = {}
SKILLS: dict[str, Skill] = {}


def register_scenario(s: Scenario) -> Scenario:
    if s.name in SCENARIOS:
        raise CatalogError(f"scenario {s.name!r} registered twice")
    SCENARIOS[s.name] = s
    return s


def register_skill(k: Skill) -> Skill:
    if k.name in SKILLS:
        raise CatalogError(f"skill {k.name!r} registered twice")
    SKILLS[k.name] = k
    return k


def load_catalog() -> None:
    # Importing the packages runs their register_* calls (idempotent: modules import once).
    import evokit.catalog.scenarios  # noqa: F401
    import evokit.catalog.skills  # noqa: F401


def scenario(name: str) -> Scenario:
    load_catalog()
    try:
        return SCENARIOS[name]
    except KeyError:
        raise CatalogError(f"unknown scenario {name!r}; known: {', '.join(sorted(SCENARIOS))}") from None


def skill(name: str) -> Skill:
    load_catalog()
    try:
        return SKILLS[name]
    except KeyError:
        raise CatalogError(f"unknown skill {name!r}; known: {', '.join(sorted(SKILLS))}") from None


def compatible(scenario_name: str, skill_name: str) -> bool:
    return skill(skill_name).needs <= scenario(scenario_name).offers


def pair_weight(scenario_name: str, skill_name: str) -> float:
    """Unnormalised p_T(κ | σ): the skill's prior, times its scenario-specific multiplier; 0 if incompatible."""
    if not compatible(scenario_name, skill_name):
        return 0.0
    k = skill(skill_name)
    return k.prior * k.rare_in.get(scenario_name, 1.0)


def pairs() -> list[tuple[str, str]]:
    """Every compatible (scenario, skill) pair, sorted."""
    load_catalog()
    return sorted((s, k) for s in SCENARIOS for k in SKILLS if compatible(s, k))


def skills_for(scenario_name: str) -> list[str]:
    load_catalog()
    return sorted(k for k in SKILLS if compatible(scenario_name, k))


def scenarios_for(skill_name: str) -> list[str]:
    load_catalog()
    return sorted(s for s in SCENARIOS if compatible(s, skill_name))
