"""The three verifiers of EE §4.1 (oracle, null solution, rubric) and one direct trial.

``verify_task(path)`` → :class:`Verdict`; ``run_trial(task, image, kind=...)`` runs one
oracle or null trial in the local sandbox with Harbor's paths and reward contract.
"""

from evokit.verify.rubric import (
    DEFAULT_RUBRIC,
    Rubric,
    RubricContext,
    Rule,
    load_pattern_rules,
    rubric_from,
)
from evokit.verify.trial import RewardError, TrialRun, parse_rewards, run_trial
from evokit.verify.verdict import Check, Verdict, VerifyConfig, verify_many, verify_task

__all__ = [
    "DEFAULT_RUBRIC", "Check", "RewardError", "Rubric", "RubricContext", "Rule", "TrialRun", "Verdict",
    "VerifyConfig", "load_pattern_rules", "parse_rewards", "rubric_from", "run_trial", "verify_many",
    "verify_task",
]
