"""The procedural task family: scenarios × skills, with a registry and compatibility relation.

See :mod:`evokit.catalog.base` for the vocabulary and :mod:`evokit.catalog.registry` for
lookup (``scenario``, ``skill``, ``pairs``, ``pair_weight``).
"""

from evokit.catalog.base import (
    OUT_DIR,
    CatalogError,
    Dataset,
    Field,
    Scenario,
    Skill,
    StepContext,
    StepSpec,
)
from evokit.catalog.registry import (
    SCENARIOS,
    SKILLS,
    compatible,
    pair_weight,
    pairs,
    scenario,
    scenarios_for,
    skill,
    skills_for,
)

__all__ = [
    "OUT_DIR", "SCENARIOS", "SKILLS", "CatalogError", "Dataset", "Field", "Scenario", "Skill", "StepContext",
    "StepSpec", "compatible", "pair_weight", "pairs", "scenario", "scenarios_for", "skill", "skills_for",
]
