"""Seed derivation: every random choice of evokit is keyed by named parts, never by a global stream.

Two derivations, both pure functions of their parts, so that a resumed run (or another loop on
the same inputs) makes the same choices as an uninterrupted one:

* :func:`call_seed` — a 31-bit integer from any parts (run seed, lineage, generation, role,
  round …); it seeds every LLM call of evolution and anything else that wants an integer seed.
* :func:`step_rng` — the NumPy generator a training loop hands its task source at step t,
  keyed by (run seed, t). The CPU loop (:mod:`evokit.train`) and the TRL path
  (:mod:`evokit.trl_trainer.sources`) both use it, so one source serves the same tasks in both.
* :func:`group_seed`, :func:`group_seeds` — the rollout seeds of step t's groups (the CPU
  learner's sampling), keyed by (run seed, t, group index), not by the parallelism.
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


def group_seeds(seed: int, step: int, n: int) -> list[int]:
    """The rollout seeds of the ``n`` groups of step ``step`` of a run seeded ``seed``.

    >>> group_seeds(0, 2, 2)
    [2000, 2001]
    """
    return [group_seed(seed, step) * 1000 + i for i in range(n)]
