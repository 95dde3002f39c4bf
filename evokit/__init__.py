"""evokit: verified, ever-harder terminal environments for RL agents (EE and GenEnv).

The front door: the names a user needs, each one line. ``import evokit`` stays light (no PyTorch,
TRL or Harbor): a name is imported from its module the first time it is used (PEP 562). Two names
differ from their module's: ``evolve_lineages`` is ``evokit.evolve.evolve`` and ``train_learner`` is
``evokit.train.train``, since ``evokit.evolve`` and ``evokit.train`` are the modules themselves.

Tasks (Harbor task folders)
    load_task          read a task folder with Harbor's own model; errors name the file and field
    write_task         write a task folder that Harbor validates, atomically
    Plan, Step         a procedural task as ordered (scenario σ, skill κ) steps
    render             write the task of a plan under a seed (byte-identical for the same pair)
    make_seeds         N verified seed tasks, balanced over domains, spanning D_T

Sandbox and verifiers
    sandbox_for_task   a (not yet started) sandbox for a task, on a chosen backend: ``start``, ``exec``, ``stop``
    verify_task        oracle, null solution, rubric and hack gate on one task → a ``Verdict``
    VerifyConfig       thresholds, oracle reruns, rubric, verifier mode, hack gate

Environment Evolution
    evolve_lineages    evolve one lineage per seed (resumable) into a lineage store
    EvolveConfig       generations, effort, direction, review rounds, repair budget
    LineageStore       the content-addressed store of evolved environments and their records

Difficulty
    catalog_reference  p_T from the catalog's documented priors
    score              D_T of a plan and its length / scenario / skill decomposition

Curricula and training
    make_source        a registered task source by name: "el", "random", "dt", "genenv", …
    store_envs         the environments of a lineage store, for a curriculum's ``envs``
    train_learner      the CPU learner's GRPO loop on any task source (resumable)
    TrainConfig        steps, tasks per step, group size B, learning rate, evaluation
    PolicyConfig       the CPU learner's policy (width, p_T prior weight, temperature)
    train_llm          GRPO for an LLM through TRL's ``GRPOTrainer`` on any task source
    LLMTrainConfig     the TRL path's configuration, validated at set-up
    make_trainer       a trainer by policy: "cpu" (the CPU learner) or an LLM spec ("tiny", a folder) through TRL

Studies (the notebooks' computations)
    quickstart         seeds → evolve → re-verify → measure: the quickstart notebook's rows
    QuickstartStudy    its sizes and seeds
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# name → "module:attribute"; resolved on first use by __getattr__ below.
_EXPORTS: dict[str, str] = {
    "load_task": "evokit.tasks.folder:load_task",
    "write_task": "evokit.tasks.write:write_task",
    "Plan": "evokit.plan:Plan",
    "Step": "evokit.plan:Step",
    "render": "evokit.plan:render",
    "make_seeds": "evokit.seeds:make_seeds",
    "sandbox_for_task": "evokit.sandbox.task_env:sandbox_for_task",
    "verify_task": "evokit.verify.verdict:verify_task",
    "VerifyConfig": "evokit.verify.verdict:VerifyConfig",
    "evolve_lineages": "evokit.evolve:evolve",
    "EvolveConfig": "evokit.evolve.harness:EvolveConfig",
    "LineageStore": "evokit.lineage:LineageStore",
    "catalog_reference": "evokit.difficulty:catalog_reference",
    "score": "evokit.difficulty:score",
    "make_source": "evokit.sources:make_source",
    "store_envs": "evokit.curriculum:store_envs",
    "train_learner": "evokit.train:train",
    "TrainConfig": "evokit.train:TrainConfig",
    "PolicyConfig": "evokit.cpu_agent.policy:PolicyConfig",
    "train_llm": "evokit.trl_trainer.trainer:train_llm",
    "LLMTrainConfig": "evokit.trl_trainer.config:LLMTrainConfig",
    "make_trainer": "evokit.training.trainers:make_trainer",
    "quickstart": "evokit.studies.evolution:quickstart",
    "QuickstartStudy": "evokit.studies.evolution:QuickstartStudy",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'evokit' has no attribute {name!r}")
    module, _, attr = target.partition(":")
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
