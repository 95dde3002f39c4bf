"""The training studies: EE's curricula and method comparison, GenEnv's loop, data efficiency and theory.

Each study is a frozen config dataclass (``CurriculaStudy``, ``MethodsStudy``, ``GenEnvStudy``,
``TheoryStudy``: what ``study.json`` records and what a notebook's parameters override) and
one call that computes (or resumes) and writes rows under its results folder; the
notebooks read the rows and draw. Every step is cached on disk: seeds, lineage stores and training
runs resume where they stopped (:mod:`evokit.seeds`, :mod:`evokit.evolve`, :mod:`evokit.train`), and
``study.json`` refuses a results folder made with other parameters. One module per study:

* :mod:`evokit.studies.warm_start` — what EE's studies share: the learner (a data-pretrained solver), the
  seed filter, each run's evolved lineages;
* :mod:`evokit.studies.curricula` — EL vs random order (``ee_el_scheduler``, ``ee_trajectory_growth``);
* :mod:`evokit.studies.methods` — evolution vs co-evolution vs ensemble (``ee_methods``);
* :mod:`evokit.studies.genenv` — GenEnv's loop, data efficiency and theory (``genenv_alpha``,
  ``genenv_vs_random``, ``genenv_data_efficiency``, ``genenv_theory``).

This module gathers their public names, so that ``from evokit.studies import training`` reaches all.

How the setting departs from the papers everywhere (each module states its own departures):
**the policy** is the CPU learner (:class:`evokit.learners.SkillPolicy`), not a 7B/27B LLM, and the
tasks are evokit's procedural family, not ALFWorld, BFCL or Terminal-Bench 2.1. Held-out sets are
procedural too (tasks of lineages or seeds never trained on).
"""

from __future__ import annotations

from evokit.rows import read_rows
from evokit.studies.curricula import (
    CurriculaStudy,
    curricula_frame,
    curricula_study,
    curricula_summary,
)
from evokit.studies.genenv import (
    ARMS,
    GenEnvStudy,
    TheoryStudy,
    alpha_summary,
    benchmark_frame,
    data_efficiency_summary,
    epoch_bands,
    genenv_frame,
    genenv_study,
    theory_study,
    vs_random_summary,
    weights_summary,
)
from evokit.studies.methods import (
    METHODS,
    MIN_FAILED,
    ROLLOUTS,
    MethodsStudy,
    environments_per_method,
    methods_frame,
    methods_study,
    pass_rates,
)
from evokit.studies.warm_start import EEStudy, learner, seed_pool

__all__ = [
    "ARMS", "METHODS", "MIN_FAILED", "ROLLOUTS", "CurriculaStudy", "EEStudy", "GenEnvStudy", "MethodsStudy",
    "TheoryStudy", "alpha_summary", "benchmark_frame", "curricula_frame", "curricula_study",
    "curricula_summary", "data_efficiency_summary", "environments_per_method", "epoch_bands", "genenv_frame",
    "genenv_study", "learner", "methods_frame", "methods_study", "pass_rates", "read_rows", "seed_pool",
    "theory_study", "vs_random_summary", "weights_summary",
]
