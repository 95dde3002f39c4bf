"""Training, as both loops share it: one GRPO configuration, one ``steps.jsonl`` row, one trainer interface.

evokit trains a policy by GRPO in two loops: the CPU-scale learner's (:mod:`evokit.train`) and an
LLM's through TRL (:mod:`evokit.trl_trainer`). What the two have in common lives here, once:

* :mod:`.settings` — :class:`~evokit.training.settings.GRPOSettings`, the GRPO fields both loops read
  (steps, tasks per step, group size B, learning rate, KL β, clip ε, seed), one spelling for each;
  ``TrainConfig`` and ``LLMTrainConfig`` extend it.
* :mod:`.steps` — the ``steps.jsonl`` row both loops write: its fields and what each means, and the
  one builder of a served group's entry, so a study summarises either loop's rows with the same code.
* :mod:`.trainers` — the :class:`~evokit.training.trainers.Trainer` protocol, the CPU learner and the
  TRL trainer behind it, and :func:`~evokit.training.trainers.make_trainer`, which picks one by a
  ``policy`` name ("cpu", or an LLM: "tiny", "smollm2", a model folder, a ``.gguf`` file).

The package's modules sit on different floors of the import layers (``pyproject.toml``): the
settings at the bottom, the row below both loops, the trainers above both; so this file imports none.
"""
