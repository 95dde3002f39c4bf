"""Seed derivation: every random choice of evokit is keyed by named parts, never by a global stream.

Two derivations, both pure functions of their parts, so that a resumed run (or another loop on
the same inputs) makes the same choices as an uninterrupted one:

* :func:`call_seed` — a 31-bit integer from any parts (run seed, lineage, generation, role,
  round …); it seeds every LLM call of evolution and anything else that wants an integer seed.
* :func:`step_rng` — the NumPy generator a training loop hands its task source at step t,
  keyed by (run seed, t). The CPU loop (:mod:`evokit.train`) and the TRL path
  (:mod:`evokit.trl_trainer.sources`) both use it, so one source serves the same tasks in both.
* :func:`group_seed`, :data:`GROUP_SEEDS` — the rollout seeds of step t's groups (the CPU
  learner's sampling), by a named scheme: ``"run"`` for every training run, ``"reference-warmup"``
  the reference solver's warm-up keeps (:mod:`evokit.studies.reference_solver`), so that the EE
  notebooks' shared reference solver is the one it was before the loops were merged.
"""

from __future__ import annotations

import hashlib

import numpy as np


def call_seed(*parts) -> int:
    """A 31-bit seed from ``parts`` (e.g. run seed, lineage, generation, role, round): same parts, same seed.

    >>> call_seed(0, "L000", 1, "propose", 0) == call_seed(0, "L000", 1, "propose", 0)
    True
    """
    digest = hashlib.sha256(":".join(map(str, ("evokit-llm", *parts))).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def step_rng(seed: int, step: int) -> np.random.Generator:
    """The generator of step ``step`` of a run seeded ``seed`` (what a task source samples with)."""
    return np.random.default_rng([int(seed), int(step)])


def group_seed(seed: int, step: int) -> int:
    """Base rollout seed of step ``step`` of a run seeded ``seed``."""
    return int(seed) * 100_003 + int(step)


def _run_seeds(seed: int, step: int, n: int) -> list[int]:
    return [group_seed(seed, step) * 1000 + i for i in range(n)]


def _reference_warmup_seeds(seed: int, step: int, n: int) -> list[int]:
    return [(int(seed) * 100_003 + int(step) * 101 + i) * 1000 for i in range(n)]


GROUP_SEEDS = {"run": _run_seeds, "reference-warmup": _reference_warmup_seeds}


def group_seeds(scheme: str, seed: int, step: int, n: int) -> list[int]:
    """The rollout seeds of the ``n`` groups of step ``step`` under ``scheme`` (a key of :data:`GROUP_SEEDS`).

    >>> group_seeds("run", 0, 2, 2), group_seeds("reference-warmup", 0, 2, 2)
    ([2000, 2001], [202000, 203000])
    """
    if scheme not in GROUP_SEEDS:
        raise ValueError(f"unknown rollout-seed scheme {scheme!r}; choose one of {', '.join(GROUP_SEEDS)}")
    return GROUP_SEEDS[scheme](seed, step, n)
