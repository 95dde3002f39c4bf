"""The training loop: policy × curriculum × task source → metric rows in ``results/``.

Two loops, one file of rows each, both resumable:

* :func:`train_curriculum` (EE): each step a curriculum (EL, random order, D_T order) picks
  ``tasks_per_step`` environments of an evolved lineage store, the policy runs a GRPO group of
  ``group_size`` rollouts on each, GRPO updates the policy, and each group's pass rate p̂ goes
  back into the curriculum's state (EL advances a lineage when p̂ > τ).
* :func:`train_genenv` (GenEnv): each epoch the environment simulator generates tasks, the
  agent's rollouts give p̂ per task, the agent is updated by GRPO, batches with |p̂ − α| > k_min
  are dropped, and the simulator is updated by reward-weighted regression on exp(λ·R_env(p̂))
  (the *learning* simulator; the *random* simulator is never updated); both pools accumulate.

The policy here is the CPU learner (:mod:`evokit.learners`); the LLM policy trains through TRL
(issue 5's :mod:`evokit.trl_trainer`). Rows: ``steps.jsonl`` (one per update), ``evals.jsonl``
(held-out pass rate), ``rollouts.jsonl``. A checkpoint (policy, optimizer, curriculum or
simulator state, step) is written atomically after each step; a killed run resumes from it,
drops rows of the unfinished step and, since every random choice is keyed by (seed, step),
produces the same rows as an uninterrupted run.
"""

from __future__ import annotations

import json
import math
import os
import pickle
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from evokit import genenv
from evokit.curriculum import ELConfig, make_curriculum
from evokit.difficulty import catalog_reference, score_many
from evokit.learners import (
    PolicyConfig,
    SkillPolicy,
    collect_groups,
    evaluate,
    frozen_copy,
    grpo_update,
    task_difficulty,
)
from evokit.lineage import LineageStore
from evokit.plan import render
from evokit.rollout import write_rows
from evokit.rows import append_rows, keep_rows


@dataclass(frozen=True)
class TrainConfig:
    """One training run. Sizes default to a CPU smoke scale; EE's full setting is steps=200, group_size=8."""

    steps: int = 50  # GRPO updates (EE: 200)
    tasks_per_step: int = 2  # GRPO groups per update
    group_size: int = 8  # rollouts per group (EE: B = 8)
    lr: float = 0.03  # Adam step size of the CPU learner (0.1 made learned skills collapse; 0.01-0.03 stable)
    beta_kl: float = 0.0  # KL to the initial policy (TRL's default β = 0)
    clip: float = 0.2  # ε of the clipped surrogate (DeepSeekMath / TRL)
    seed: int = 0
    workers: int = 2  # rollouts at once
    eval_every: int = 10  # steps between held-out evaluations (0: never)
    eval_rollouts: int = 8  # rollouts per held-out task
    policy: PolicyConfig = field(default_factory=PolicyConfig)


@dataclass(frozen=True)
class GenEnvConfig:
    """GenEnv's loop (papers.md): α = 0.5, k_min = 0.1, λ = 1; epochs and sizes are CPU-scale.

    A *batch* (GenEnv's "n task variations" of one prompt) is ``tasks_per_batch`` tasks generated
    for one context (a catalog domain), each tried ``rollouts`` times: p̂ = successes / attempts
    over the batch, and every plan of the batch gets the batch's R_env(p̂) as its RWR weight.

    The simulator's step (choices where the paper gives no value; measured with the CPU learner,
    see ``notebooks/genenv_alpha.ipynb``):

    1. *Per-step KL cap.* The paper fine-tunes π_env "with a KL penalty to its initial weights
       (per-step KL capped)": here ``kl_coef``·KL(π_env ‖ π_init) in the objective and a trust
       region KL(new ‖ previous) ≤ ``max_step_kl`` on every step; ``sim_lr`` is large enough that
       the cap, not the learning rate, sets the step. A cap on the *total* KL to π_init
       (``max_kl``, off by default) pinned the simulator at the cap (KL 1.97–2.00 after 14 epochs in
       all 7 runs measured with ``max_kl=2``) once it had made tasks easy, so it could no longer
       follow the learner.
    2. *An empty data set* still takes the KL term's step (:func:`evokit.genenv.rwr_update`):
       dropped batches contribute nothing to the weighted likelihood, the penalty remains, pulling
       the simulator back towards π_init's longer plans and rarer skills (harder tasks). With
       ``sim_data="pool"`` (4.) the data set is empty only until the first batch is kept; after
       that the penalty acts against the pool's likelihood every epoch.
    3. *Small batches at CPU scale.* The filter keeps a batch only if |p̂ − α| ≤ k_min; when the
       learner starts far below α (success ≈ 0.1 on p_T's plans) a batch of several tasks almost
       never lands there and the simulator hardly moves (measured with 6 batches × 4 tasks × 3
       rollouts: KL to π_init ≤ 0.2 after 8–14 epochs and success ≤ 0.26 throughout, three seeds). One task per batch with 5 rollouts (kept on
       2 or 3 successes) gives the filter something to keep from the first epochs; the full
       setting keeps the paper's batch of 64 (16 batches × 4 tasks).
    4. *RWR on the accumulated pool D_env* (``sim_data="pool"``). The paper keeps two accumulating
       pools, D_env being the simulator's weighted generations (D_env ← D_env ∪ D̃_env,t), the
       counterpart of the agent's D_train; each epoch's RWR step here is taken on all of D_env, every
       kept plan with the weight it was given in its epoch (the paper does not say whether the step
       uses D̃_env,t alone or the pool; "epoch" is the former). At CPU scale an epoch keeps only
       0–6 of 16 batches, so a step on D̃_env,t alone follows a few plans, and an epoch that keeps
       none leaves the KL pull alone: the simulator moved slowly and erratically towards the zone.
       Measured with the no-sandbox replay of the smoke setting (reward = every step used the
       plan's skill; identical to the sandbox runs for seeds 0 and 1), "settled" (last-4 mean in [0.4, 0.6],
       each in [0.3, 0.7]) held for seeds 0–7 in 6 of 8 with the pool (0–5; 6 overshoots to 0.70,
       7 has 0.26 in epoch 9) against 3 of 8 with "epoch" (0, 1, 4; 2, 5, 6 enter too late, 3 and 7
       leave the band). Two capped steps per epoch on D̃_env,t instead overshot (last-4 means
       0.59–0.66 for seeds 0–2; seed 3 0.30). The pool's early, short plans stay in it, so success tends to settle
       in the upper half of the zone (last-4 means 0.52–0.57 for seeds 0–3).
    """

    epochs: int = 12  # paper: 10
    batches_per_epoch: int = 16  # contexts (prompts) per epoch
    tasks_per_batch: int = 1  # generated task variations per context
    rollouts: int = 5  # rollouts per task = the GRPO group (paper: not stated; its random baseline uses 4)
    alpha: float = 0.5  # α, target success (Eq. 3)
    beta: float = 20.0  # sharpness of R_env (Eq. 3; no value in the paper)
    k_min: float = 0.1  # difficulty filter |p̂ − α| ≤ k_min (paper: 0.1)
    lam: float = 1.0  # RWR weights exp(λ·R_env) (paper: λ = 1)
    sim_lr: float = 3.0  # RWR step size on the simulator's logits (the per-step cap binds; see 1.)
    kl_coef: float = 0.1  # weight of KL(π_env ‖ π_init) in the RWR objective (paper: "KL penalty", no value)
    max_step_kl: float | None = 0.1  # trust region KL(new ‖ previous) per step (paper: "per-step KL capped")
    max_kl: float = math.inf  # optional cap on KL(π_env ‖ π_init) in total (off; see 1.)
    min_len: int = 1  # shortest generated plan (evokit's seeds have 2..5 steps)
    max_len: int = 5
    contexts: tuple[str, ...] = ("any",)  # simulator contexts: catalog domains, or "any" (shared tables)
    learning: bool = True  # False: the random (never updated) simulator, the paper's baseline
    sim_data: str = "pool"  # RWR data: "pool", the accumulated D_env (see 4.); "epoch": this epoch's D̃_env,t only

    def __post_init__(self):
        if self.sim_data not in ("pool", "epoch"):
            raise ValueError(f"GenEnvConfig.sim_data must be 'pool' or 'epoch'; got {self.sim_data!r}")


# --------------------------------------------------------------------------- checkpoints
def _save(out: Path, **state) -> None:
    tmp = out / ".checkpoint.tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, out / "checkpoint.pt")


def _load(out: Path) -> dict | None:
    path = out / "checkpoint.pt"
    return torch.load(path, weights_only=False) if path.exists() else None


def _keep_rows_before(path: Path, step: int, key: str = "step") -> None:
    """Drop rows of steps that the checkpoint does not cover (a killed step is redone)."""
    keep_rows(path, lambda r: r.get(key, step) < step)


def _policy(cfg: TrainConfig) -> tuple[SkillPolicy, torch.optim.Optimizer, SkillPolicy]:
    torch.manual_seed(cfg.seed)
    policy = SkillPolicy(PolicyConfig(**{**asdict(cfg.policy), "seed": cfg.seed}))
    return policy, torch.optim.Adam(policy.parameters(), lr=cfg.lr), frozen_copy(policy)


def _group_row(group) -> dict:
    usable = [r for r in group if not r.masked and r.reward is not None]
    rewards = [float(r.reward) for r in usable]
    return {"task": group[0].task, "pass_rate": float(np.mean(rewards)) if rewards else None,
            "successes": int(sum(x >= 1.0 for x in rewards)), "n": len(rewards),
            "masked": len(group) - len(usable), "turns": float(np.mean([r.n_turns for r in group]))}


# -------------------------------------------------------------------------- EE: curricula
def train_curriculum(store: LineageStore | str | Path, curriculum: str, out: str | Path,
                     cfg: TrainConfig = TrainConfig(), *, eval_tasks: Sequence[Path] = (),
                     el: ELConfig = ELConfig(), progress: bool = True) -> Path:
    """GRPO on an evolved store's environments in the order ``curriculum`` chooses ("el", "random", "dt")."""
    store = store if isinstance(store, LineageStore) else LineageStore(store)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    envs = {(e.lineage, e.generation, e.k): e for e in store.envs()}
    cur, state = make_curriculum(curriculum, envs.values(), el, seed=cfg.seed)
    policy, opt, ref = _policy(cfg)
    start = 0
    if ck := _load(out):
        policy.load_state_dict(ck["policy"])
        opt.load_state_dict(ck["optimizer"])
        state, start = ck["curriculum"], ck["step"]
    for name in ("steps.jsonl", "evals.jsonl", "rollouts.jsonl"):
        _keep_rows_before(out / name, start)
    (out / "config.json").write_text(json.dumps({"curriculum": curriculum, **asdict(cfg), "el": asdict(el)},
                                                indent=2, default=str))
    for step in tqdm(range(start, cfg.steps), initial=start, total=cfg.steps, desc=f"train[{curriculum}]",
                     disable=not progress):
        rng = np.random.default_rng([cfg.seed, step])
        if cur.done(state):
            break
        state, ids = cur.sample(state, rng, cfg.tasks_per_step)
        tasks = [store.path(envs[i]) for i in ids]
        groups = collect_groups(policy, tasks, group_size=cfg.group_size, workers=cfg.workers,
                                seed=cfg.seed * 100_003 + step)
        metrics = grpo_update(policy, opt, groups, beta_kl=cfg.beta_kl, clip=cfg.clip, ref_policy=ref)
        served = []
        for env_id, group in zip(ids, groups, strict=True):
            row = _group_row(group)
            if row["pass_rate"] is not None:
                state = cur.update(state, env_id, row["pass_rate"])
            served.append({**row, "env": list(env_id),
                           "d_t": envs[env_id].data.get("difficulty", {}).get("total")})
        write_rows([r for g in groups for r in g], out / "rollouts.jsonl", step=step)
        append_rows(out / "steps.jsonl", [{"step": step, "curriculum": curriculum, **metrics, "served": served,
                                      "turns": float(np.mean([s["turns"] for s in served])),
                                      "mean_d_t": float(np.mean([s["d_t"] or 0 for s in served])),
                                      "scheduler": _scheduler_summary(state)}])
        if cfg.eval_every and eval_tasks and (step + 1) % cfg.eval_every == 0:
            append_rows(out / "evals.jsonl", [{"step": step, "pass_rate": evaluate(
                policy, list(eval_tasks), n=cfg.eval_rollouts, seed=cfg.seed + 7, workers=cfg.workers)}])
        _save(out, policy=policy.state_dict(), optimizer=opt.state_dict(), curriculum=state, step=step + 1)
    return out


def _scheduler_summary(state) -> dict:
    """A small, JSON-able view of a curriculum state (EL: each lineage's cursor)."""
    cursors = getattr(state, "cursors", None)
    if cursors:
        return {c.lineage: [c.generation, c.k, bool(c.done)] for c in cursors}
    return {"type": type(state).__name__}


# ------------------------------------------------------------------------------ GenEnv
def train_genenv(out: str | Path, cfg: TrainConfig = TrainConfig(), gcfg: GenEnvConfig = GenEnvConfig(),
                 *, progress: bool = True) -> Path:
    """GenEnv's co-evolution loop with the CPU learner and the procedural plan simulator."""
    out = Path(out)
    (out / "tasks").mkdir(parents=True, exist_ok=True)
    policy, opt, ref = _policy(cfg)
    sim = genenv.init_simulator(min_len=gcfg.min_len, max_len=gcfg.max_len, render_seed=cfg.seed,
                                learning=gcfg.learning, contexts=gcfg.contexts)
    init = sim
    start = 0
    if ck := _load(out):
        policy.load_state_dict(ck["policy"])
        opt.load_state_dict(ck["optimizer"])
        sim, start = pickle.loads(ck["simulator"]), ck["step"]
    for name in ("steps.jsonl", "rollouts.jsonl"):
        _keep_rows_before(out / name, start)
    for name in genenv.Pools.FILES.values():  # pools rows of an unfinished epoch are redone
        _keep_rows_before(out / "pools" / name, start, key="epoch")
    pools = genenv.Pools(out / "pools")
    contexts = sorted(sim.contexts)
    reference = catalog_reference()
    (out / "config.json").write_text(json.dumps({**asdict(cfg), "genenv": asdict(gcfg)}, indent=2, default=str))
    for epoch in tqdm(range(start, gcfg.epochs), initial=start, total=gcfg.epochs,
                      desc=f"genenv[{'learning' if gcfg.learning else 'random'}]", disable=not progress):
        rng = np.random.default_rng([cfg.seed, epoch])
        batches = []  # (context, plans, task dirs)
        for b in range(gcfg.batches_per_epoch):
            context = contexts[(epoch * gcfg.batches_per_epoch + b) % len(contexts)]
            plans = genenv.sample_plans(sim, context, gcfg.tasks_per_batch, rng)
            dirs = []
            for i, plan in enumerate(plans):
                dest = out / "tasks" / f"e{epoch:03d}-b{b}-{i}"
                if not dest.exists():
                    render(plan, sim.render_seed, dest)
                dirs.append(dest)
            batches.append((context, plans, dirs))
        tasks = [d for _, _, dirs in batches for d in dirs]
        # how hard the generated tasks are: for this learner before its update (D_θ) and for p_T (D_T)
        d_theta = float(np.mean([task_difficulty(policy, d) for d in tasks]))
        d_t = float(np.mean(score_many([p for _, plans, _ in batches for p in plans], reference)["total"]))
        groups = collect_groups(policy, tasks, group_size=gcfg.rollouts, workers=cfg.workers,
                                seed=cfg.seed * 100_003 + epoch)
        metrics = grpo_update(policy, opt, groups, beta_kl=cfg.beta_kl, clip=cfg.clip, ref_policy=ref)
        rows = [_group_row(g) for g in groups]
        p_hat, records, env_rows, it = [], [], [], iter(rows)
        for _context, plans, _dirs in batches:
            mine = [next(it) for _ in plans]
            n = sum(r["n"] for r in mine)
            p = sum(r["successes"] for r in mine) / n if n else float("nan")
            p_hat.append(p)
            r_env = float(genenv.alpha_reward(p, gcfg.alpha, gcfg.beta)) if n else 0.0
            if n and bool(genenv.difficulty_filter(p, gcfg.alpha, gcfg.k_min)):
                w = float(np.exp(gcfg.lam * r_env))
                records += [(plan, w) for plan in plans]
                env_rows += [genenv.env_row(plan, w, p_hat=p, r_env=r_env, epoch=epoch) for plan in plans]
        pools.add_traces([r.to_row() | {"epoch": epoch} for g in groups for r in g])
        pools.add_env(env_rows)
        if gcfg.sim_data == "pool":
            records = pools.env_records()
        if gcfg.learning:  # no kept record: the step is the KL penalty's alone (towards π_init)
            sim = genenv.rwr_update(sim, records, lr=gcfg.sim_lr, kl_coef=gcfg.kl_coef, init_sim=init,
                                    max_kl=gcfg.max_kl, max_step_kl=gcfg.max_step_kl)
        write_rows([r for g in groups for r in g], out / "rollouts.jsonl", step=epoch)
        task_rates = np.array([r["pass_rate"] if r["pass_rate"] is not None else np.nan for r in rows])
        append_rows(out / "steps.jsonl", [{
            "step": epoch, "simulator": "learning" if gcfg.learning else "random", **metrics,
            "success": float(np.nanmean(p_hat)), "p_hat": p_hat,
            "r_env": float(np.mean([genenv.alpha_reward(p, gcfg.alpha, gcfg.beta) for p in p_hat])),
            "kept_share": float(np.mean([bool(genenv.difficulty_filter(p, gcfg.alpha, gcfg.k_min)) for p in p_hat])),
            "fully_solved": int(np.sum(task_rates >= 1.0)), "unsolved": int(np.sum(task_rates <= 0.0)),
            "mean_length": float(np.mean([len(p) for _, plans, _ in batches for p in plans])),
            "turns": float(np.mean([r["turns"] for r in rows])), "mean_d_theta": d_theta, "mean_d_t": d_t,
            "sim_kl": genenv.simulator_kl(sim, init)}])
        _save(out, policy=policy.state_dict(), optimizer=opt.state_dict(), simulator=pickle.dumps(sim),
              step=epoch + 1)
    return out


