"""GenEnv's co-evolution as a task source: the simulator writes each step's tasks, and one batch step
takes the agent's results back (papers.md, "GenEnv").

Both training loops call the same :func:`batch_step` through :class:`GenEnvSource` (registered
``"genenv"``): the CPU learner's :func:`evokit.train.train` and the TRL path's
:class:`evokit.trl_trainer.sources.Scheduler`. A step of the run is one GenEnv epoch:

1. ``sample(state, rng, n)``: n = ``tasks_per_step`` tasks, ``n / tasks_per_batch`` batches, a
   batch being GenEnv's "n task variations" of one prompt (a context, taken in turn), rendered
   into ``<run out>/tasks``;
2. the loop runs a GRPO group of B rollouts on each task (B = the run's group size) and updates
   the agent on those groups and on groups replayed from D_train (``replay(state)``, the agent
   training on its accumulating pool);
3. ``update(state, results)`` = :func:`batch_step`: per batch p̂ = successes / usable rollouts,
   R_env = exp(−β(p̂ − α)²), batches with |p̂ − α| > k_min dropped, kept plans weighted
   exp(λ·R_env) into D_env, every usable trace into D_train, and one RWR step of the simulator
   on D_env (``sim_data="pool"``) or on this epoch's kept plans (``"epoch"``), KL-capped per step.

The random simulator (``learning=False``) is the paper's baseline: the same generator, never
updated. :class:`GenEnvConfig` is the one configuration of GenEnv's environment side.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar

import numpy as np

from evokit.genenv.pools import Pools, env_row
from evokit.genenv.reward import alpha_reward, difficulty_filter, rwr_weights
from evokit.genenv.simulator import (
    Simulator,
    init_simulator,
    rwr_update,
    sample_plans,
    simulator_kl,
)
from evokit.plan import Plan, render
from evokit.reference import GENENV_ALPHA, GENENV_K_MIN, GENENV_LAMBDA
from evokit.sources import GroupResult, Run, TaskRef, register

STATIC_STREAM, REPLAY_STREAM = 7_777, 31_337  # generator keys of the static plans and of D_train replay


@dataclass(frozen=True)
class GenEnvConfig:
    """GenEnv's environment side: α, k_min and λ are the paper's (:mod:`evokit.reference`); the rest are ours.

    Sizes of the run (epochs = the run's steps, the GRPO group B = its group size, batches per
    epoch = its tasks per step / ``tasks_per_batch``) are the run's (:class:`evokit.train.TrainConfig`,
    :class:`evokit.trl_trainer.LLMTrainConfig`), not set here. The paper trains 10 epochs with a
    batch of 64 tasks.

    The agent's side (GenEnv: "D_train: base data + earlier traces + new on-policy traces, so
    mastered material is retained"): every usable trace goes into D_train, and each epoch's GRPO
    update of the agent takes this epoch's groups plus ``replay`` × as many partially solved groups
    drawn from D_train's earlier epochs (:meth:`GenEnvSource.replay`; ``replay=0``: on-policy only).
    A replayed group keeps the log-probabilities of the policy that acted, so the clipped ratio of
    :func:`evokit.cpu_agent.policy.grpo_update` bounds how far a stale group moves the agent (a deviation:
    the paper does not say how D_train enters the update). Only the CPU loop (:func:`evokit.train.train`)
    asks for these groups: TRL 1.16's ``GRPOTrainer`` has no input for stored completions, so the
    TRL path (:mod:`evokit.trl_trainer`) fills D_train but updates its LLM agent on-policy only (a
    second deviation, stated in docs/curricula-and-learners.md).

    The simulator's step (choices where the paper gives no value):

    1. *Per-step KL cap.* The paper fine-tunes π_env "with a KL penalty to its initial weights
       (per-step KL capped)": here ``kl_coef``·KL(π_env ‖ π_init) in the objective and a trust
       region KL(new ‖ previous) ≤ ``max_step_kl`` on every step; ``sim_lr`` is large enough that
       the cap, not the learning rate, sets the step. A cap on the *total* KL to π_init
       (``max_kl``) is off by default: with one the simulator sits at the cap once it has moved,
       so it cannot follow the learner (measured with ``max_kl=2``).
    2. *An empty data set* still takes the KL term's step (:func:`evokit.genenv.simulator.rwr_update`):
       dropped batches contribute nothing to the weighted likelihood, the penalty remains, pulling
       the simulator back towards π_init.
    3. *Batches that resolve the zone.* p̂ is a batch's successes over its ``tasks_per_batch`` × B
       rollouts, so it moves in steps of 1/(tasks_per_batch·B). With 2 tasks × 5 rollouts (the
       studies' smoke size) the filter keeps p̂ ∈ {0.4, 0.5, 0.6} with weights e^0.82 and e^1; with
       2 × 8 (B = 8) it keeps five values of p̂ and three weights: RWR is weighted, not plain
       maximum likelihood. (One task × 5 rollouts would keep only p̂ ∈ {0.4, 0.6}, which weigh
       the same.) The batch step records the spread of the weights. The paper's random baseline
       uses 4 variations per prompt; the default 2 fits the CLI's 2 tasks per step.
    4. *RWR on the accumulated pool D_env* (``sim_data="pool"``): each epoch's RWR step is taken on
       all of D_env, every kept plan with the weight it was given in its epoch (the paper keeps D_env
       as an accumulating pool but does not say whether the step uses D̃_env,t alone or the pool;
       ``"epoch"`` is the former).

    ``static_pool`` > 0 turns the source into GenEnv's *static augmentation* baseline: that many
    plans are sampled once from π_init and every epoch's tasks are drawn from them (the simulator
    never moves), so the agent trains by the same loop on a fixed data set.
    """

    alpha: float = GENENV_ALPHA  # α, target success (Eq. 3)
    beta: float = 20.0  # sharpness of R_env (Eq. 3; no value in the paper)
    k_min: float = GENENV_K_MIN  # difficulty filter |p̂ − α| ≤ k_min
    lam: float = GENENV_LAMBDA  # RWR weights exp(λ·R_env)
    tasks_per_batch: int = 2  # generated task variations per context (see 3.)
    sim_lr: float = 3.0  # RWR step size on the simulator's logits (the per-step cap binds; see 1.)
    kl_coef: float = 0.1  # weight of KL(π_env ‖ π_init) in the RWR objective (paper: "KL penalty", no value)
    max_step_kl: float | None = 0.1  # trust region KL(new ‖ previous) per step (paper: "per-step KL capped")
    max_kl: float = math.inf  # optional cap on KL(π_env ‖ π_init) in total (off; see 1.)
    min_len: int = 1  # shortest generated plan (evokit's seeds have 2..5 steps)
    max_len: int = 5
    init_tilt: float = 0.0  # π_init's tables ∝ p_T^(1 − tilt) (evokit.genenv.simulator.init_simulator; 0: p_T)
    contexts: tuple[str, ...] = ("any",)  # simulator contexts: catalog domains, or "any" (shared tables)
    learning: bool = True  # False: the random (never updated) simulator, the paper's baseline
    sim_data: str = "pool"  # RWR data: "pool", the accumulated D_env (see 4.); "epoch": this epoch's D̃_env,t only
    replay: float = 1.0  # D_train groups replayed in the agent's update per new group (0: on-policy only)
    static_pool: int = 0  # > 0: static augmentation, tasks drawn from this many plans sampled once from π_init

    def __post_init__(self):
        if not 0 <= self.alpha <= 1 or self.beta <= 0 or self.k_min < 0 or self.tasks_per_batch < 1:
            raise ValueError(f"GenEnvConfig: need α ∈ [0, 1], β > 0, k_min ≥ 0, tasks_per_batch ≥ 1; got {self}")
        if self.replay < 0 or self.static_pool < 0:
            raise ValueError(f"GenEnvConfig: need replay ≥ 0 and static_pool ≥ 0; got {self.replay}, {self.static_pool}")
        if self.sim_data not in ("pool", "epoch"):
            raise ValueError(f"GenEnvConfig.sim_data must be 'pool' or 'epoch'; got {self.sim_data!r}")


@dataclass(frozen=True)
class GenEnvState:
    """The simulator, its initial version (the KL anchor), the epoch, the batches awaiting results."""

    sim: Simulator
    init_sim: Simulator
    out: Path  # tasks/ and pools/ go here
    epoch: int = 0
    pending: tuple[tuple[str, tuple[Plan, ...]], ...] = ()  # (context, plans) of each batch served
    last: Mapping = field(default_factory=dict)  # the last batch step's numbers (for the rows)
    static: tuple[Plan, ...] = ()  # static augmentation's fixed plans (GenEnvConfig.static_pool)


def batch_step(state: GenEnvState, cfg: GenEnvConfig, results: Sequence[GroupResult]) -> GenEnvState:
    """GenEnv's environment update after one epoch's rollouts (module docstring, 3.); idempotent on redo."""
    if not state.pending:
        return state
    by_key = {tuple(r.ref.key): r for r in results}
    pools = Pools(state.out / "pools")
    pools.keep_before(state.epoch)  # rows of this epoch written before a kill are redone
    p_hat, kept, records, rows, weights = [], [], [], [], []
    for b, (context, plans) in enumerate(state.pending):
        mine = [by_key[k] for i in range(len(plans)) if (k := ("genenv", state.epoch, b, i)) in by_key]
        n = sum(r.stats.n for r in mine)
        p = sum(r.stats.solved for r in mine) / n if n else math.nan
        keep = bool(n) and bool(difficulty_filter(p, cfg.alpha, cfg.k_min))
        p_hat.append(p)
        kept.append(keep)
        if keep:
            r_env = float(alpha_reward(p, cfg.alpha, cfg.beta))
            w = float(rwr_weights([r_env], cfg.lam, normalize=False)[0])
            weights.append(w)
            records += [(plan, w) for plan in plans]
            rows += [env_row(plan, w, p_hat=p, r_env=r_env, epoch=state.epoch, context=context) for plan in plans]
    pools.add_traces([row | {"epoch": state.epoch} for r in results for row in r.rows])
    pools.add_env(rows)
    sim = state.sim
    if cfg.learning and not cfg.static_pool:  # no kept record: the step is the KL penalty's alone (towards π_init)
        sim = rwr_update(sim, pools.env_records() if cfg.sim_data == "pool" else records, lr=cfg.sim_lr,
                         kl_coef=cfg.kl_coef, init_sim=state.init_sim, max_kl=cfg.max_kl, max_step_kl=cfg.max_step_kl)
    seen = [p for p in p_hat if not math.isnan(p)]
    last = {"success": float(np.mean(seen)) if seen else math.nan, "p_hat": p_hat,
            "r_env": float(np.mean([alpha_reward(p, cfg.alpha, cfg.beta) for p in seen])) if seen else 0.0,
            "kept_share": float(np.mean(kept)),
            "mean_length": float(np.mean([len(pl) for _, plans in state.pending for pl in plans])),
            **_weight_spread("weights", weights), **_weight_spread("pool_weights", [w for _, w in pools.env_records()]),
            "d_train_groups": len(pools.train_groups(state.epoch + 1)), "d_env_size": len(pools.d_env)}
    return replace(state, sim=sim, epoch=state.epoch + 1, pending=(), last=last)


def _weight_spread(name: str, w: Sequence[float]) -> dict:
    """Min, max, standard deviation and number of distinct values of RWR weights (NaN/0 when there are none)."""
    a = np.asarray(w, dtype=float)
    if not a.size:
        return {f"{name}_n": 0, f"{name}_levels": 0, f"{name}_min": math.nan, f"{name}_max": math.nan,
                f"{name}_std": math.nan}
    return {f"{name}_n": int(a.size), f"{name}_levels": int(len(np.unique(a.round(9)))),
            f"{name}_min": float(a.min()), f"{name}_max": float(a.max()), f"{name}_std": float(a.std())}


@register("genenv")
@dataclass(frozen=True)
class GenEnvSource:
    """GenEnv's simulator as a task source (module docstring); ``config`` is the environment side."""

    config: GenEnvConfig = GenEnvConfig()
    name: ClassVar[str] = "genenv"

    def init(self, run: Run) -> GenEnvState:
        if run.out is None:
            raise ValueError("the genenv source needs the run's output folder (generated tasks and pools go there)")
        c = self.config
        sim = init_simulator(min_len=c.min_len, max_len=c.max_len, render_seed=run.seed,
                             learning=c.learning and not c.static_pool, contexts=c.contexts, tilt=c.init_tilt)
        static = ()
        if c.static_pool:  # sampled once, before any epoch, in its own stream
            static = tuple(sample_plans(sim, sorted(sim.contexts)[0], c.static_pool,
                                        np.random.default_rng([run.seed, STATIC_STREAM])))
        return GenEnvState(sim, sim, Path(run.out), static=static)

    def sample(self, state: GenEnvState, rng: np.random.Generator, n: int) -> tuple[GenEnvState, list[TaskRef]]:
        per = self.config.tasks_per_batch
        if n % per:
            raise ValueError(f"genenv: tasks per step ({n}) must be a multiple of tasks_per_batch ({per})")
        contexts = sorted(state.sim.contexts)
        batches, refs = [], []
        for b in range(n // per):
            context = contexts[(state.epoch * (n // per) + b) % len(contexts)]
            if state.static:
                plans = [state.static[int(j)] for j in rng.choice(len(state.static), size=per, replace=False)]
            else:
                plans = sample_plans(state.sim, context, per, rng)
            for i, plan in enumerate(plans):
                dest = state.out / "tasks" / f"e{state.epoch:03d}-b{b}-{i}"
                if not dest.exists():
                    render(plan, state.sim.render_seed, dest)
                refs.append(TaskRef(("genenv", state.epoch, b, i), dest))
            batches.append((context, tuple(plans)))
        return replace(state, pending=tuple(batches)), refs

    def update(self, state: GenEnvState, results: Sequence[GroupResult]) -> GenEnvState:
        return batch_step(state, self.config, results)

    def replay(self, state: GenEnvState) -> list:
        """Groups of D_train (earlier epochs) for this epoch's agent update (class docstring of GenEnvConfig).

        ``replay`` × the epoch's tasks, drawn with a generator keyed by (run seed, epoch), so a
        resumed run replays the same groups.
        """
        n = round(self.config.replay * len(state.pending) * self.config.tasks_per_batch)
        if not n or not state.epoch:
            return []
        rng = np.random.default_rng([state.sim.render_seed, state.epoch, REPLAY_STREAM])
        return Pools(state.out / "pools").replay(state.epoch, n, rng)

    def done(self, state: GenEnvState) -> bool:
        return False

    def summary(self, state: GenEnvState) -> dict:
        kind = "static" if self.config.static_pool else "learning" if self.config.learning else "random"
        return {"simulator": kind, "epoch": state.epoch,
                "sim_updates": state.sim.updates, "sim_kl": simulator_kl(state.sim, state.init_sim), **state.last}
