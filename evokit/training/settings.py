"""The GRPO fields both training loops share, in one frozen record with one spelling.

GRPO (DeepSeekMath, Shao et al. 2024; papers.md "GRPO facts") is set by a handful of numbers that
mean the same in the CPU learner's loop (:class:`evokit.train.TrainConfig`) and in the TRL path
(:class:`evokit.trl_trainer.LLMTrainConfig`): both configs extend :class:`GRPOSettings`, so a study
or a config file names them one way (TRL's spelling: ``learning_rate``, ``beta``) and a run folder's
``config.json`` records them under the same keys whichever loop wrote it.

What is *not* here, and why:

* ``temperature``: the CPU learner's sampling temperature is part of its policy
  (:class:`evokit.cpu_agent.policy.PolicyConfig`: it scales the logits that D_θ is measured on, and a warm
  start carries it), while an LLM's is a setting of TRL's sampler; the two are not one knob.
* ``workers``: sandboxes in flight per group slot in the CPU loop, threads for sandbox starts in
  the TRL path.
* defaults of ``steps`` and ``learning_rate``: each loop keeps its own scale (the CPU learner's Adam
  step 0.03 against an LLM's 1e-6, TRL's default); the fields, their meaning and checks are these.

This module sits at the bottom of the import layers: it imports only :mod:`evokit.errors`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from evokit.errors import UserError


class SettingsError(UserError, ValueError):
    """A GRPO setting out of its range; the message names the field."""


@dataclass(frozen=True)
class GRPOSettings:
    """The GRPO run both loops share. EE's setting: group_size=8, steps=200; β = 0 is TRL's default."""

    steps: int = 10  # GRPO updates (EE: 200; GenEnv: epochs)
    tasks_per_step: int = 2  # GRPO groups per update (dataset rows per generation batch in TRL)
    group_size: int = 8  # B = G: rollouts per group (EE: 8); TRL's num_generations
    learning_rate: float = 1e-6  # optimizer step size (TRL's default; the CPU learner's is its own)
    beta: float = 0.0  # β: weight of KL(π_θ ‖ π_ref) to the starting policy (TRL's default 0; DeepSeekMath 0.04)
    clip: float = 0.2  # ε of the clipped surrogate (DeepSeekMath; TRL's epsilon)
    seed: int = 0  # the run's seed: task draws (evokit.seeding.step_rng), rollouts, initial weights

    def __post_init__(self):
        bad = [f"steps={self.steps} must be ≥ 0" if self.steps < 0 else "",
               f"tasks_per_step={self.tasks_per_step} must be ≥ 1" if self.tasks_per_step < 1 else "",
               f"group_size={self.group_size} must be ≥ 1" if self.group_size < 1 else "",
               f"learning_rate={self.learning_rate} must be > 0" if not self.learning_rate > 0 else "",
               f"beta={self.beta} must be ≥ 0" if not self.beta >= 0 else "",
               f"clip={self.clip} must lie in (0, 1)" if not 0 < self.clip < 1 else ""]
        if bad := [b for b in bad if b]:
            raise SettingsError("; ".join(bad))

    def grpo(self) -> GRPOSettings:
        """The shared fields alone (a plain :class:`GRPOSettings`), whichever loop's config this is."""
        return GRPOSettings(**{f.name: getattr(self, f.name) for f in dataclasses.fields(GRPOSettings)})


GRPO_FIELDS = tuple(f.name for f in dataclasses.fields(GRPOSettings))
