"""The CPU agent: a small PyTorch policy that stands in for an LLM at CPU scale, and the world it learns from.

evokit's studies reproduce the papers' experiments on 2 cores, where an LLM policy cannot train.
What replaces it lives here, apart from the LLM agents (:mod:`evokit.agents`, :mod:`evokit.trl_trainer`):

* :mod:`~evokit.cpu_agent.policy` — :class:`~evokit.cpu_agent.policy.SkillPolicy`, which chooses a
  technique per step of a procedural task and runs it as a real command in the real sandbox;
* :mod:`~evokit.cpu_agent.world` — the seeded corpus of solved steps a solver is pretrained on
  (its p_θ comes from data, as an LLM's does, never from the reference p_T);
* :mod:`~evokit.cpu_agent.solvers` — pretraining on that corpus, and the solver population A, B, C
  that measures difficulty model-independently.

Both loops train it or an LLM behind one interface (:mod:`evokit.training.trainers`).
"""
