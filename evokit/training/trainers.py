"""One interface for "a trainer": GRPO of a policy on the tasks a source serves, rows in a folder.

A study (:mod:`evokit.studies`) trains through :class:`Trainer` and never calls a loop itself, so
one parameter, ``policy``, chooses who learns (:func:`make_trainer`):

* ``"cpu"`` — the CPU-scale learner (:mod:`evokit.cpu_agent.policy`) in :func:`evokit.train.train`
  (:class:`CPUTrainer`; a study hands it the run's warm-started solver and judge);
* an LLM — ``"tiny"`` (a random Llama with SmolLM2's tokenizer, for plumbing on CPU), ``"smollm2"``,
  a model folder or a ``.gguf`` file (:func:`evokit.trl_trainer.load_policy`) — through TRL's
  ``GRPOTrainer`` in :func:`evokit.trl_trainer.train_llm` (:class:`LLMTrainer`).

Both take the shared GRPO fields the same way (:meth:`Trainer.config` lays them over the loop's own
config, :class:`~evokit.training.settings.GRPOSettings`) and both write the same ``steps.jsonl`` row
(:mod:`evokit.training.steps`), so the study's frames, summaries and figures read either.
What stays each loop's own: checkpoints (the CPU loop's ``checkpoint.pt``, TRL's ``trl/checkpoint-N``),
``rollouts.jsonl``'s episode fields, and the loop-only fields of its config.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from evokit.cpu_agent.policy import Judge, PolicyConfig, SkillPolicy
from evokit.errors import UserError
from evokit.sources import TaskSource
from evokit.train import TrainConfig, train
from evokit.training.settings import GRPO_FIELDS, GRPOSettings

CPU = "cpu"  # the policy name of the CPU-scale learner


@runtime_checkable
class Trainer(Protocol):
    """GRPO of one policy: ``train(source, out, cfg)`` writes ``out/steps.jsonl`` (the shared row) and returns ``out``;
    with ``eval_tasks``, the policy as it trains is evaluated on them every ``cfg.eval_every`` steps
    (``out/evals.jsonl``, :func:`evokit.train.eval_row`)."""

    policy: str  # "cpu", or the LLM's model spec

    def config(self, **grpo: Any) -> GRPOSettings:
        """This loop's config: its own defaults with the given shared GRPO fields over them."""
        ...

    def train(self, source: TaskSource, out: str | Path, cfg: GRPOSettings,
              eval_tasks: Sequence[Path] = ()) -> Path: ...


def _over(base: GRPOSettings, grpo: dict) -> GRPOSettings:
    if unknown := sorted(set(grpo) - set(GRPO_FIELDS)):
        raise TypeError(f"not a shared GRPO field: {', '.join(unknown)} (the shared ones: {', '.join(GRPO_FIELDS)})")
    return dataclasses.replace(base, **grpo)


@dataclass(frozen=True)
class CPUTrainer:
    """The CPU-scale learner (:func:`evokit.train.train`): ``learner`` is the start (and KL reference), if any."""

    learner: SkillPolicy | None = None
    judge: Judge | None = None
    base: TrainConfig = TrainConfig()
    policy_config: PolicyConfig | None = None  # None: the learner's, or PolicyConfig()
    progress: bool = False
    policy: str = field(default=CPU, init=False)

    def config(self, **grpo: Any) -> TrainConfig:
        return _over(self.base, grpo)

    def train(self, source: TaskSource, out: str | Path, cfg: GRPOSettings,
              eval_tasks: Sequence[Path] = ()) -> Path:
        cfg = cfg if isinstance(cfg, TrainConfig) else self.config(**dataclasses.asdict(cfg.grpo()))
        pc = self.policy_config or (self.learner.config if self.learner is not None else PolicyConfig())
        return train(source, pc, out, cfg, init_policy=self.learner, judge=self.judge, progress=self.progress,
                     eval_tasks=eval_tasks)


@dataclass(frozen=True)
class LLMTrainer:
    """An LLM through TRL (:func:`evokit.trl_trainer.train_llm`); ``policy`` is a spec for ``load_policy``."""

    policy: str
    base: Any = None  # an LLMTrainConfig (None: its defaults)
    progress: bool = False

    def _base(self):
        from evokit.trl_trainer.config import LLMTrainConfig

        return self.base if self.base is not None else LLMTrainConfig()

    def config(self, **grpo: Any):
        return _over(self._base(), grpo)

    def train(self, source: TaskSource, out: str | Path, cfg: GRPOSettings,
              eval_tasks: Sequence[Path] = ()) -> Path:
        from evokit.trl_trainer import LLMTrainConfig, train_llm

        if eval_tasks:  # TRL's loop has no evaluation of its own in evokit; say so rather than skip it
            raise UserError(f"{self.policy}: evaluation during training ({len(eval_tasks)} task(s)) is the CPU "
                            "learner's (evokit.train); the TRL path does not evaluate as it trains")
        cfg = cfg if isinstance(cfg, LLMTrainConfig) else self.config(**dataclasses.asdict(cfg.grpo()))
        train_llm(self.policy, source, out, cfg, progress=self.progress)
        return Path(out)


def make_trainer(policy: str = CPU, *, learner: SkillPolicy | None = None, judge: Judge | None = None,
                 cpu: TrainConfig = TrainConfig(), llm: Any = None, progress: bool = False) -> Trainer:
    """The trainer for ``policy``: ``"cpu"`` (:class:`CPUTrainer` from ``learner``/``judge``/``cpu``) or an LLM
    model spec (:class:`LLMTrainer` with the ``LLMTrainConfig`` ``llm``)."""
    if str(policy) == CPU:
        return CPUTrainer(learner, judge, cpu, progress=progress)
    return LLMTrainer(str(policy), llm, progress=progress)
