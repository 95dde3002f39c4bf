"""GenEnv (papers.md, "GenEnv") in one package, lowest module first (each imports only those before it):

* :mod:`.reward` — the α-curriculum reward R_env, the difficulty filter, RWR weights, Theorem 1;
* :mod:`.simulator` — π_env for the procedural family and its RWR update (KL-capped);
* :mod:`.pools` — the accumulating pools D_train and D_env, and D_env's export for an LLM simulator;
* :mod:`.source` — :class:`GenEnvConfig` and the batch step, as a task source (:mod:`evokit.sources`)
  that the CPU loop and the TRL path both drive.

GenEnv's public code keeps its environment model frozen (``alpha``/``beta`` unused, no pools);
this package implements what the paper describes; each module states its deviations.
"""

from evokit.genenv.pools import Pools, context_prompt, env_row, export_sft_dataset, valid_trace
from evokit.genenv.reward import (
    alpha_reward,
    difficulty_filter,
    ranking_violation_mc,
    rwr_weights,
    theorem1_bound,
)
from evokit.genenv.simulator import (
    ANY_CONTEXT,
    TABLES,
    Simulator,
    init_simulator,
    log_prob,
    plan_context,
    random_simulator,
    rwr_update,
    sample_plans,
    simulator_kl,
)
from evokit.genenv.source import GenEnvConfig, GenEnvSource, GenEnvState, batch_step

__all__ = [
    "ANY_CONTEXT", "TABLES", "GenEnvConfig", "GenEnvSource", "GenEnvState", "Pools", "Simulator", "alpha_reward",
    "batch_step", "context_prompt", "difficulty_filter", "env_row", "export_sft_dataset", "init_simulator",
    "log_prob", "plan_context", "random_simulator", "ranking_violation_mc", "rwr_update", "rwr_weights",
    "sample_plans", "simulator_kl", "theorem1_bound", "valid_trace",
]
