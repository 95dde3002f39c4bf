"""Seed derivation: every random choice of evokit is keyed by named parts, never by a global stream.

Two derivations, both pure functions of their parts, so that a resumed run (or another loop on
the same inputs) makes the same choices as an uninterrupted one:

* :func:`call_seed` — a 31-bit integer from any parts (run seed, lineage, generation, role,
  round …); it seeds every LLM call of evolution and anything else that wants an integer seed.
* :func:`step_rng` — the NumPy generator a training loop hands its task source at step t,
  keyed by (run seed, t). The CPU loop (:mod:`evokit.train`) and the TRL path
  (:mod:`evokit.trl_trainer.sources`) both use it, so one source serves the same tasks in both.
* :func:`group_seed` — the rollout seed of group ``n`` of step ``t`` (the CPU learner's sampling).
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
    """Rollout seed of step ``step``'s groups (each group adds its index × 1000, see collect_groups)."""
    return int(seed) * 100_003 + int(step)
